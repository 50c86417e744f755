//! Harbor task directories as items: the task format ([`task`]), its images ([`image`]), its
//! reward files ([`reward`]) and its verification ([`verify`]): tests uploaded only now, run
//! as the verifier user with the verifier's environment and timeout, in a fresh shell, the
//! reward read only from files the verifier run wrote.

pub mod image;
pub mod reward;
pub mod task;
pub mod tb2;

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::context::ToolContext;
use crate::sandbox::{ContainerOverrides, ReadyCheck, SandboxError, SandboxSpec};
pub use image::{ImageBuilder, TaskImage};
pub use reward::Rewards;
pub use task::{load_task, load_tasks, HarborTask, Network, TaskConfig};

/// Where the tests and the verifier's logs live in the container (Harbor's paths).
pub const TESTS_DIR: &str = "/tests";
/// See [`TESTS_DIR`].
pub const VERIFIER_DIR: &str = "/logs/verifier";

/// What can go wrong with a Harbor task.
#[derive(Debug, Error)]
pub enum HarborError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `task.toml` is not valid.
    #[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
        /// The line, when known.
        line: Option<usize>,
    },
    /// The directory is not a task as Harbor lays one out.
    #[error("{0}")]
    Layout(String),
    /// A base or prebuilt image is missing and cannot be pulled.
    #[error(
        "task {task}: image {image} is not on the Docker daemon and cannot be pulled ({why}); \
         provide it with `docker pull {image}` where a registry is reachable, or \
         `docker load -i FILE.tar` (from `docker save {image}` elsewhere)"
    )]
    MissingImage {
        /// The task.
        task: String,
        /// The image.
        image: String,
        /// Why the pull failed, one line.
        why: String,
    },
    /// The image build failed.
    #[error("task {task}: building its image failed: {message}")]
    Build {
        /// The task.
        task: String,
        /// The build's error and the end of its log.
        message: String,
    },
    /// The daemon failed.
    #[error("docker: {0}")]
    Docker(String),
    /// The sandbox failed during verification.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The verifier gave no verdict (killed, timed out, no or bad reward file, failed
    /// healthcheck): a verifier failure, never a reward.
    #[error("task {task}: {message}")]
    Verifier {
        /// The task.
        task: String,
        /// What happened.
        message: String,
    },
}

/// The sandbox of a task: its image, resources, network and working directory, and Harbor's
/// process semantics (a service the agent leaves running still answers at verification).
pub fn sandbox_spec(task: &HarborTask, image: &TaskImage) -> SandboxSpec {
    let env = &task.config.environment;
    let container = ContainerOverrides {
        nano_cpus: env.cpus.filter(|c| *c > 0.0).map(|c| (c * 1e9) as i64),
        memory_mb: env.memory_mib().filter(|m| *m > 0),
        network: (env.network() == Ok(Network::None)).then(|| "none".to_owned()),
        workdir: env.workdir.clone().or_else(|| image.workdir.clone()),
    };
    let spec = SandboxSpec::image(&image.tag)
        .with_container(container)
        .keep_services();
    match &env.healthcheck {
        Some(h) => {
            let secs = |s: f64| Duration::from_secs_f64(s.clamp(0.0, 86_400.0));
            spec.with_ready_check(ReadyCheck {
                command: h.command.clone(),
                interval: secs(h.interval_sec),
                timeout: secs(h.timeout_sec.max(1.0)),
                start_period: secs(h.start_period_sec),
                start_interval: secs(h.start_interval_sec),
                retries: h.retries,
            })
        }
        None => spec,
    }
}

/// `${VAR}` and `${VAR:-default}` in `value`, from this process's environment (Harbor
/// resolves `[verifier] env` and `[environment] env` so). An unset variable without a
/// default is an error naming it.
pub fn resolve_env(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {value:?}"))?;
        let body = &after[..end];
        let (name, default) = match body.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (body, None),
        };
        match (std::env::var(name), default) {
            (Ok(v), _) => out.push_str(&v),
            (Err(_), Some(d)) => out.push_str(d),
            (Err(_), None) => return Err(format!("environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs the task's verifier in the rollout's sandbox and returns its metrics. In order: the
/// wipe of `/tests` and `/logs/verifier` (a reward the agent planted is gone), the upload of
/// `tests/` (dot-directories included), then `bash /tests/test.sh` as the verifier user with
/// the verifier's environment, in the working directory, in a fresh shell, bounded by
/// `timeout_sec`. A run that timed out or was killed, or left no valid reward file, is
/// [`HarborError::Verifier`].
pub async fn verify(task: &HarborTask, ctx: &ToolContext) -> Result<Rewards, HarborError> {
    let failed = |message: String| HarborError::Verifier {
        task: task.name.clone(),
        message,
    };
    let cfg = &task.config;
    let workdir = cfg.environment.workdir.as_deref();
    let wipe = ctx
        .terminal(&format!(
            "rm -rf {TESTS_DIR} {VERIFIER_DIR} && mkdir -p {TESTS_DIR} {VERIFIER_DIR} && chmod 777 {VERIFIER_DIR}"
        ))
        .await?;
    if !wipe.success() {
        return Err(failed(format!(
            "cannot prepare {TESTS_DIR} and {VERIFIER_DIR}: {}",
            wipe.output
        )));
    }
    ctx.upload_dir(task.tests_dir(), TESTS_DIR).await?;
    let mut exports = String::new();
    for (key, value) in &cfg.verifier.env {
        let value = resolve_env(value).map_err(|e| failed(format!("[verifier] env {key}: {e}")))?;
        exports.push_str(&format!("export {key}={}\n", quote(&value)));
    }
    let limit = Duration::from_secs_f64(cfg.verifier.timeout_sec.clamp(1.0, 86_400.0));
    let user = cfg.verifier.user.as_ref().map(|u| u.as_docker());
    let run = ctx
        .terminal_isolated_as(
            &format!("{exports}bash {TESTS_DIR}/test.sh > {VERIFIER_DIR}/test-stdout.txt 2>&1"),
            limit,
            user.as_deref(),
            workdir,
        )
        .await?;
    // Code the tests run is the model's: it may write the reward file and then kill or hang
    // the run. Only a run that ended on its own has a verdict.
    if let Some(why) = run.abnormal_end() {
        return Err(failed(format!(
            "the verifier run ended abnormally ({why}; timeout_sec = {}): its reward file is not trusted",
            limit.as_secs()
        )));
    }
    match ctx.read_file(&format!("{VERIFIER_DIR}/reward.json")).await {
        Ok(text) => return reward::parse_reward_json(&text).map_err(failed),
        Err(SandboxError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    match ctx.read_file(&format!("{VERIFIER_DIR}/reward.txt")).await {
        Ok(text) => reward::parse_reward_txt(&text).map_err(failed),
        Err(SandboxError::NotFound(_)) => {
            let log = ctx
                .read_file(&format!("{VERIFIER_DIR}/test-stdout.txt"))
                .await
                .unwrap_or_default();
            let tail: String = log
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ");
            Err(failed(format!(
                "tests/test.sh (exit code {}) wrote neither {VERIFIER_DIR}/reward.json nor reward.txt; its output ends: {tail}",
                run.exit_code
            )))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_templates_resolve_from_the_host() {
        let home = std::env::var("HOME").expect("HOME is set");
        assert_eq!(resolve_env("a${HOME}b").unwrap(), format!("a{home}b"));
        assert_eq!(
            resolve_env("${HERMES_HARBOR_SURELY_UNSET:-d}").unwrap(),
            "d"
        );
        assert!(resolve_env("${HERMES_HARBOR_SURELY_UNSET}").is_err());
        assert!(resolve_env("${HOME").is_err());
        assert_eq!(resolve_env("plain").unwrap(), "plain");
    }
}
