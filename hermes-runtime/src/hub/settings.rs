//! Where the hub cache is, which hub to talk to, with which token, and whether to talk at all:
//! read from the same variables huggingface_hub reads, so Python tools and hermes-env share
//! one cache.

use std::path::{Path, PathBuf};

/// The default hub endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Hub access settings, normally [`HubSettings::from_env`].
#[derive(Clone)]
pub struct HubSettings {
    /// The hub cache directory (`HF_HUB_CACHE`, else `HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub` or `~/.cache/huggingface/hub`).
    pub cache_dir: PathBuf,
    /// The hub's base URL (`HF_ENDPOINT`, default `https://huggingface.co`).
    pub endpoint: String,
    /// `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`): use the cache only, never the network.
    pub offline: bool,
    token: Option<String>,
}

impl std::fmt::Debug for HubSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubSettings")
            .field("cache_dir", &self.cache_dir)
            .field("endpoint", &self.endpoint)
            .field("offline", &self.offline)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// huggingface_hub's truthy values (`1`, `ON`, `YES`, `TRUE`, any case).
fn truthy(value: Option<String>) -> bool {
    value.is_some_and(|v| ["1", "on", "yes", "true"].contains(&v.trim().to_lowercase().as_str()))
}

fn read_token(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

impl HubSettings {
    /// Settings from the environment, resolved the way huggingface_hub resolves them: cache
    /// `HF_HUB_CACHE` → `HF_HOME/hub` → `$XDG_CACHE_HOME/huggingface/hub` →
    /// `~/.cache/huggingface/hub`; token `HF_TOKEN` → `HF_TOKEN_PATH` → `HF_HOME/token`
    /// (written by `hf auth login`); `HF_ENDPOINT`; `HF_HUB_OFFLINE` (else
    /// `TRANSFORMERS_OFFLINE`).
    pub fn from_env() -> Self {
        let home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("huggingface")
        });
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join("hub"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let path = var("HF_TOKEN_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join("token"));
                read_token(&path)
            });
        HubSettings {
            cache_dir,
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
                .trim_end_matches('/')
                .to_owned(),
            offline: truthy(var("HF_HUB_OFFLINE").or_else(|| var("TRANSFORMERS_OFFLINE"))),
            token,
        }
    }

    /// Explicit settings, for code that must not depend on the process environment.
    pub fn new(cache_dir: PathBuf, endpoint: &str, token: Option<String>, offline: bool) -> Self {
        HubSettings {
            cache_dir,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            offline,
            token,
        }
    }

    /// The access token sent as `Authorization: Bearer …` (never logged).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthy_values_follow_huggingface_hub() {
        for v in ["1", "ON", "yes", "True"] {
            assert!(truthy(Some(v.into())), "{v}");
        }
        for v in ["0", "off", "no", ""] {
            assert!(!truthy(Some(v.into())), "{v}");
        }
        assert!(!truthy(None));
    }

    #[test]
    fn the_token_is_redacted_in_debug_output() {
        let s = HubSettings {
            cache_dir: "/c".into(),
            endpoint: DEFAULT_ENDPOINT.into(),
            offline: false,
            token: Some("hf_secret".into()),
        };
        assert!(!format!("{s:?}").contains("hf_secret"));
    }
}
