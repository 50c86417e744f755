//! W&B settings from the environment (`WANDB_API_KEY`, `WANDB_BASE_URL`, `WANDB_ENTITY`,
//! `WANDB_PROJECT`, `WANDB_DIR`, `WANDB_MODE`), the run naming rule and the typed errors.

use std::path::PathBuf;
use std::time::Duration;

use rand::Rng;

/// Default W&B API host.
pub const DEFAULT_BASE_URL: &str = "https://api.wandb.ai";

/// How long `finish` waits for the last uploads, unless `HERMES_WANDB_FINISH_TIMEOUT` says
/// otherwise (seconds).
pub const DEFAULT_FINISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a W&B operation failed. Messages never contain the API key.
#[derive(Debug, thiserror::Error)]
pub enum WandbError {
    /// A setting has an invalid value.
    #[error("{name}: {message}")]
    Setting {
        /// The environment variable.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A local file of the run directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file of the run directory is not what `sync` expects.
    #[error("{path}: {message}")]
    RunDir {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The W&B server could not be reached or did not answer in time.
    #[error("{url}: {reason}")]
    Transport {
        /// Request URL.
        url: String,
        /// Underlying error.
        reason: String,
    },
    /// The W&B server answered with an error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// First part of the body, on one line.
        body: String,
    },
    /// The GraphQL answer carried errors or missed expected fields.
    #[error("{operation}: {message}")]
    Api {
        /// The GraphQL operation.
        operation: &'static str,
        /// The error message.
        message: String,
    },
}

impl WandbError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WandbError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Where a run's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WandbMode {
    /// Stream to the W&B server (the run directory is written as well).
    Online,
    /// Only write the run directory; upload it later with `wandb sync`.
    Offline,
    /// Log nothing.
    Disabled,
}

/// An API key; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// W&B settings, as the official SDKs read them from the environment.
#[derive(Debug, Clone)]
pub struct WandbSettings {
    /// `WANDB_MODE`: `online` (default), `offline` (also `dryrun`) or `disabled`.
    pub mode: WandbMode,
    /// `WANDB_API_KEY`.
    pub api_key: Option<ApiKey>,
    /// `WANDB_BASE_URL` without a trailing slash (default `https://api.wandb.ai`).
    pub base_url: String,
    /// `WANDB_ENTITY` (default: the key's default entity).
    pub entity: Option<String>,
    /// `WANDB_PROJECT` (default: `uncategorized`, unless the run names one).
    pub project: Option<String>,
    /// `WANDB_DIR`: run directories go to `{dir}/wandb/` (default: the working directory).
    pub dir: PathBuf,
    /// How long `finish` waits for pending uploads (`HERMES_WANDB_FINISH_TIMEOUT`, seconds).
    pub finish_timeout: Duration,
}

impl WandbSettings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, WandbError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (an environment-variable getter).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, WandbError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mode = match get("WANDB_MODE").as_deref().map(str::trim) {
            None | Some("online") | Some("run") => WandbMode::Online,
            Some("offline") | Some("dryrun") => WandbMode::Offline,
            Some("disabled") => WandbMode::Disabled,
            Some(other) => {
                return Err(WandbError::Setting {
                    name: "WANDB_MODE",
                    message: format!("'{other}' is not one of online, offline, disabled"),
                })
            }
        };
        let base_url = get("WANDB_BASE_URL")
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned())
            .trim()
            .trim_end_matches('/')
            .to_owned();
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(WandbError::Setting {
                name: "WANDB_BASE_URL",
                message: format!("'{base_url}' is not an http(s) URL"),
            });
        }
        let finish_timeout = match get("HERMES_WANDB_FINISH_TIMEOUT") {
            None => DEFAULT_FINISH_TIMEOUT,
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| WandbError::Setting {
                    name: "HERMES_WANDB_FINISH_TIMEOUT",
                    message: format!("'{v}' is not a number of seconds"),
                })?,
        };
        Ok(WandbSettings {
            mode,
            api_key: get("WANDB_API_KEY")
                .or_else(|| netrc_key(&get, &base_url))
                .map(|k| ApiKey::new(k.trim())),
            base_url,
            entity: get("WANDB_ENTITY"),
            project: get("WANDB_PROJECT"),
            dir: get("WANDB_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| ".".into()),
            finish_timeout,
        })
    }

    /// The web UI address for the API host (`api.wandb.ai` → `wandb.ai`).
    pub fn app_url(&self) -> String {
        self.base_url.replace("://api.wandb.ai", "://wandb.ai")
    }
}

/// The key `wandb login` saved in the netrc file for the API host, when `WANDB_API_KEY` is unset.
fn netrc_key(get: &dyn Fn(&str) -> Option<String>, base_url: &str) -> Option<String> {
    let path = super::netrc::path(get)?;
    let text = std::fs::read_to_string(path).ok()?;
    super::netrc::password_for(&text, super::netrc::host_of(base_url))
}

/// `{stem}-{YYYY-MM-DD}-{6 random lowercase letters}` (local date), Atropos's run name.
pub fn run_name(stem: &str) -> String {
    let mut rng = rand::rng();
    let letters: String = (0..6)
        .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
        .collect();
    format!("{stem}-{}-{letters}", local_date())
}

/// A fresh 8-character run id (`[a-z0-9]`), like the SDK's.
pub fn new_run_id() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

/// Local calendar time as (year, month, day, hour, minute, second).
pub(crate) fn local_time() -> (i32, u32, u32, u32, u32, u32) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: `localtime_r` only writes into the `tm` we own; both pointers are valid.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        tm
    };
    (
        tm.tm_year + 1900,
        (tm.tm_mon + 1) as u32,
        tm.tm_mday as u32,
        tm.tm_hour as u32,
        tm.tm_min as u32,
        tm.tm_sec as u32,
    )
}

fn local_date() -> String {
    let (y, m, d, ..) = local_time();
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<WandbSettings, WandbError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        WandbSettings::from_lookup(|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults_and_overrides() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.mode, WandbMode::Online);
        assert_eq!(s.base_url, DEFAULT_BASE_URL);
        assert_eq!(s.app_url(), "https://wandb.ai");
        assert!(s.api_key.is_none() && s.entity.is_none() && s.project.is_none());
        let s = settings(&[
            ("WANDB_MODE", "dryrun"),
            ("WANDB_BASE_URL", "http://127.0.0.1:9/"),
            ("WANDB_API_KEY", "secret-key"),
            ("WANDB_DIR", "/tmp/x"),
            ("HERMES_WANDB_FINISH_TIMEOUT", "1.5"),
        ])
        .unwrap();
        assert_eq!(s.mode, WandbMode::Offline);
        assert_eq!(s.base_url, "http://127.0.0.1:9");
        assert_eq!(s.dir, PathBuf::from("/tmp/x"));
        assert_eq!(s.finish_timeout, Duration::from_millis(1500));
        assert!(!format!("{s:?}").contains("secret-key"));
        assert!(settings(&[("WANDB_MODE", "loud")])
            .unwrap_err()
            .to_string()
            .contains("WANDB_MODE"));
    }

    #[test]
    fn the_key_wandb_login_saved_is_used_when_the_variable_is_unset() {
        let dir = tempfile::tempdir().unwrap();
        let netrc = dir.path().join("netrc");
        std::fs::write(
            &netrc,
            "machine api.wandb.ai\n  login user\n  password from-netrc\n",
        )
        .unwrap();
        let netrc = netrc.to_str().unwrap();
        let key = |s: WandbSettings| s.api_key.map(|k| k.expose().to_owned());
        assert_eq!(
            key(settings(&[("NETRC", netrc)]).unwrap()).as_deref(),
            Some("from-netrc")
        );
        let home = dir.path().to_str().unwrap();
        std::fs::copy(netrc, dir.path().join(".netrc")).unwrap();
        assert_eq!(
            key(settings(&[("HOME", home)]).unwrap()).as_deref(),
            Some("from-netrc")
        );
        let both = settings(&[("NETRC", netrc), ("WANDB_API_KEY", "from-env")]).unwrap();
        assert_eq!(key(both).as_deref(), Some("from-env"));
        let other_host = settings(&[("NETRC", netrc), ("WANDB_BASE_URL", "http://127.0.0.1:9")]);
        assert!(other_host.unwrap().api_key.is_none());
    }

    #[test]
    fn run_names_follow_atropos() {
        let name = run_name("terminal-test");
        let (stem, rest) = name.split_at("terminal-test-".len());
        assert_eq!(stem, "terminal-test-");
        let parts: Vec<&str> = rest.split('-').collect();
        assert_eq!(parts.len(), 4, "{name}");
        assert_eq!(parts[0].len(), 4);
        assert!(parts[3].len() == 6 && parts[3].chars().all(|c| c.is_ascii_lowercase()));
        let id = new_run_id();
        assert!(id.len() == 8 && id.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
