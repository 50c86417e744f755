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

use crate::context::{TerminalOutput, ToolContext};
use crate::sandbox::{ContainerOverrides, ReadyCheck, SandboxError, SandboxSpec, SetupCommand};
pub use image::{ImageBuilder, TaskImage};
pub use reward::Rewards;
pub use task::{
    load_task, load_tasks, ArtifactEntry, HarborTask, MinReward, Network, TaskConfig, TaskStep,
    VerifierEnvironment, VerifierImage,
};

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

/// The sandbox of a task: its image, resources, network and working directory, the agent's
/// user and time limit, and Harbor's process semantics (a service the agent leaves running
/// still answers at verification).
/// Fails only when a multi-step task's first step files cannot be read.
pub fn sandbox_spec(task: &HarborTask, image: &TaskImage) -> Result<SandboxSpec, HarborError> {
    let agent = &task.config.agent;
    let mut container = container_of(&task.config.environment, image);
    container.user = agent.user.as_ref().map(|u| u.as_docker());
    let workdir = container.workdir.clone().unwrap_or_else(|| "/".into());
    let mut spec = environment_spec(&task.config.environment, image, container).keep_services();
    if let Some(secs) = agent.timeout_sec.filter(|s| *s > 0.0) {
        spec = spec.with_agent_timeout(Duration::from_secs_f64(secs.min(86_400.0)));
    }
    if let Some(first) = task.steps.first() {
        // The first step's workdir files, setup.sh and healthcheck, before the agent's turn.
        spec = spec.with_setup(SetupCommand {
            name: format!("step {} setup", first.config.name),
            command: step_script(first, &workdir)?,
            timeout: STEP_SETUP_LIMIT,
        });
    }
    Ok(spec)
}

/// `command` as root in a fresh shell, bounded by a minute: the runner's own housekeeping in
/// a sandbox whose default user may be the agent's.
async fn as_root(ctx: &ToolContext, command: &str) -> Result<TerminalOutput, SandboxError> {
    ctx.terminal_isolated_as(command, Duration::from_secs(60), Some("0"), None)
        .await
}

/// How long a step's setup (its files, `setup.sh`, its healthcheck) may take.
const STEP_SETUP_LIMIT: Duration = Duration::from_secs(600);

/// The working directory of a task's commands: `[environment] workdir`, else the image's.
pub fn task_workdir(task: &HarborTask, image: &TaskImage) -> String {
    task.config
        .environment
        .workdir
        .clone()
        .or_else(|| image.workdir.clone())
        .unwrap_or_else(|| "/".into())
}

/// The shell script that prepares `step` in `workdir`, as Harbor's `_prepare_step` does: the
/// step's `workdir/` files copied in (carried in the script, base64), its `setup.sh` run from
/// there, its healthcheck (retried as Docker's) passed.
pub fn step_script(step: &TaskStep, workdir: &str) -> Result<String, HarborError> {
    let mut script = format!("set -e\nmkdir -p {0}\ncd {0}\n", quote(workdir));
    let files = step.workdir_dir();
    if files.is_dir() {
        let archive = dir_archive_base64(&files).map_err(|e| HarborError::Read {
            path: files.clone(),
            source: e,
        })?;
        script.push_str(&format!(
            "printf %s {archive} | base64 -d | tar -x --no-same-owner -C {}\n",
            quote(workdir)
        ));
        if files.join("setup.sh").is_file() {
            script.push_str("bash ./setup.sh\n");
        }
    }
    if let Some(h) = &step.config.healthcheck {
        script.push_str(&format!(
            "set +e\nn=0\nuntil timeout {t} sh -c {cmd}; do n=$((n+1)); \
             [ $n -ge {r} ] && {{ echo 'step healthcheck {cmd} failed {r} time(s)'; exit 1; }}; \
             sleep {i}; done\n",
            t = h.timeout_sec.max(1.0),
            cmd = quote(&h.command),
            r = h.retries.max(1),
            i = h.interval_sec.max(0.0),
        ));
    }
    Ok(script)
}

/// Readies `step` (not the first) after the one before it was verified: the previous step's
/// tests and verifier logs removed (the agent never sees tests), then [`step_script`] as the
/// agent's user. A failure is [`HarborError::Verifier`]: the rollout has no verdict.
pub async fn prepare_step(
    task: &HarborTask,
    step: &TaskStep,
    workdir: &str,
    ctx: &ToolContext,
) -> Result<(), HarborError> {
    let failed = |message: String| HarborError::Verifier {
        task: task.name.clone(),
        message: format!("step {}: {message}", step.config.name),
    };
    let wipe = as_root(ctx, &format!("rm -rf {TESTS_DIR} {VERIFIER_DIR}")).await?;
    if !wipe.success() {
        return Err(failed(format!(
            "cannot remove the last step's tests: {}",
            wipe.output
        )));
    }
    let script = step_script(step, workdir)?;
    let run = ctx
        .terminal_isolated_as(&script, STEP_SETUP_LIMIT, None, Some(workdir))
        .await?;
    if !run.success() {
        return Err(failed(format!(
            "its setup failed (exit code {}): {}",
            run.exit_code,
            run.output.trim()
        )));
    }
    Ok(())
}

/// A multi-step task's rewards from its verified steps' (Harbor's
/// `multi_step_reward_strategy`): `final` takes the last step's, `mean` (the default) each
/// metric's mean over the steps, a metric a step did not write counting 0.
pub fn aggregate(task: &HarborTask, steps: &[Rewards]) -> Rewards {
    if task.config.multi_step_reward_strategy.as_deref() == Some("final") {
        return steps.last().cloned().unwrap_or_default();
    }
    let keys: std::collections::BTreeSet<&String> = steps.iter().flat_map(|r| r.keys()).collect();
    keys.into_iter()
        .map(|k| {
            let sum: f64 = steps.iter().map(|r| r.get(k).copied().unwrap_or(0.0)).sum();
            (k.clone(), sum / steps.len().max(1) as f64)
        })
        .collect()
}

/// The contents of `dir` as a tar archive (links stored as links), in base64: a directory a
/// shell command can carry and unpack with `base64 -d | tar -x`.
pub fn dir_archive_base64(dir: &std::path::Path) -> std::io::Result<String> {
    use base64::Engine as _;
    let mut tar = tar::Builder::new(Vec::new());
    tar.follow_symlinks(false);
    tar.append_dir_all(".", dir)?;
    let bytes = tar.into_inner()?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// How a task's tests run: as which user, and in which sandbox.
#[derive(Debug, Clone, Default)]
pub struct VerifierPlan {
    /// The user `tests/test.sh` runs as: `[verifier] user`, else the environment's default
    /// user (Harbor's rule; the agent's `[agent] user` is not it).
    pub user: Option<String>,
    /// A sandbox of the verifier's own, when the task asks for one.
    pub separate: Option<SeparateVerifier>,
}

/// A separate verifier's sandbox.
#[derive(Debug, Clone)]
pub struct SeparateVerifier {
    /// Its image and settings.
    pub spec: SandboxSpec,
    /// True when the image holds the tests (nothing is uploaded to `/tests`).
    pub bundled_tests: bool,
    /// The agent-container paths copied into it before the tests run: `/logs/artifacts` and
    /// the task's `artifacts`.
    pub artifacts: Vec<String>,
    /// Its working directory, when its environment names one.
    pub workdir: Option<String>,
}

/// The task's [`VerifierPlan`]: a separate verifier's image built or found through
/// `builder` (`agent_image` is the agent's, whose `USER` a shared verifier defaults to).
pub async fn plan_verifier(
    builder: &ImageBuilder,
    task: &HarborTask,
    agent_image: &TaskImage,
    force_build: bool,
) -> Result<VerifierPlan, HarborError> {
    let own_user = task.config.verifier.user.as_ref().map(|u| u.as_docker());
    let Some(env) = task.verifier_environment() else {
        // With an agent user the container's default is the agent's: name the image's.
        let user = own_user.or_else(|| {
            task.config.agent.user.as_ref()?;
            Some(agent_image.user.clone().unwrap_or_else(|| "root".into()))
        });
        return Ok(VerifierPlan {
            user,
            separate: None,
        });
    };
    let image = builder.resolve_verifier(task, &env, force_build).await?;
    let container = container_of(&env.config, &image);
    let mut artifacts = vec![task::ARTIFACTS_DIR.to_owned()];
    for entry in &task.config.artifacts {
        let source = entry.source().trim_end_matches('/').to_owned();
        if !source.is_empty() && !artifacts.contains(&source) {
            artifacts.push(source);
        }
    }
    Ok(VerifierPlan {
        user: own_user,
        separate: Some(SeparateVerifier {
            workdir: container.workdir.clone(),
            spec: environment_spec(&env.config, &image, container),
            bundled_tests: env.image.bundles_tests(),
            artifacts,
        }),
    })
}

/// The container settings `env` asks for, in `image`.
fn container_of(env: &task::EnvironmentConfig, image: &TaskImage) -> ContainerOverrides {
    ContainerOverrides {
        nano_cpus: env.cpus.filter(|c| *c > 0.0).map(|c| (c * 1e9) as i64),
        memory_mb: env.memory_mib().filter(|m| *m > 0),
        network: (env.network() == Ok(Network::None)).then(|| "none".to_owned()),
        allow_hosts: match env.network() {
            Ok(Network::Allowlist(hosts)) => Some(hosts),
            _ => None,
        },
        workdir: env.workdir.clone().or_else(|| image.workdir.clone()),
        user: None,
    }
}

/// A sandbox of `image` with `container` and `env`'s healthcheck.
fn environment_spec(
    env: &task::EnvironmentConfig,
    image: &TaskImage,
    container: ContainerOverrides,
) -> SandboxSpec {
    let spec = SandboxSpec::image(&image.tag).with_container(container);
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

/// Runs the task's verifier and returns its metrics: in the rollout's sandbox, or (a separate
/// verifier) in a sandbox of its own made now, which gets copies of the artifacts only and is
/// removed afterwards. In order: the wipe of `/logs/verifier` and (unless the verifier's image
/// holds them) `/tests` (a reward or test the agent planted is gone), the upload of `tests/`
/// (dot-directories included), then `bash /tests/test.sh` as the verifier user with the
/// verifier's environment, in the working directory, in a fresh shell, bounded by
/// `timeout_sec`. A run that timed out or was killed, or left no valid reward file, is
/// [`HarborError::Verifier`].
///
/// For a step of a multi-step task, the tests are the task's `tests/` with the step's
/// `steps/<name>/tests/` over them.
pub async fn verify(
    task: &HarborTask,
    plan: &VerifierPlan,
    step: Option<&TaskStep>,
    ctx: &ToolContext,
) -> Result<Rewards, HarborError> {
    let user = plan.user.as_deref();
    let tests: Vec<PathBuf> = std::iter::once(task.tests_dir())
        .chain(step.map(TaskStep::tests_dir))
        .filter(|d| d.is_dir())
        .collect();
    let Some(separate) = &plan.separate else {
        let workdir = task.config.environment.workdir.as_deref();
        return run_tests(task, ctx, user, workdir, Some(&tests)).await;
    };
    let verifier = ctx.companion("verifier", separate.spec.clone());
    let verdict = async {
        carry_artifacts(&separate.artifacts, ctx, &verifier).await?;
        let workdir = separate.workdir.as_deref();
        let upload = (!separate.bundled_tests).then_some(tests.as_slice());
        run_tests(task, &verifier, user, workdir, upload).await
    }
    .await;
    if let Err(e) = verifier.close().await {
        tracing::warn!(task = %task.name, "removing the verifier's sandbox failed: {e}");
    }
    verdict
}

/// Copies each of `paths` (a file or a directory; missing ones are passed over, as Harbor
/// does) from `from`'s sandbox to the same path in `to`'s, through a private host directory.
/// As Harbor's sanitized copy does, links that leave a directory and special files are left
/// behind (removed from the agent's finished sandbox first, one warning naming them).
async fn carry_artifacts(
    paths: &[String],
    from: &ToolContext,
    to: &ToolContext,
) -> Result<(), HarborError> {
    let quoted: Vec<String> = paths.iter().map(|p| quote(p)).collect();
    let prune = format!(
        "for p in {}; do [ -d \"$p\" ] || continue; \
         find \"$p\" \\( -type l -o -type p -o -type s -o -type b -o -type c \\) -print0 | \
         while IFS= read -r -d '' f; do \
           if [ -L \"$f\" ]; then t=$(realpath -m -- \"$f\"); \
             case \"$t\" in \"$p\"|\"$p\"/*) continue;; esac; fi; \
           rm -f -- \"$f\" && printf '%s\\n' \"$f\"; \
         done; done",
        quoted.join(" ")
    );
    let pruned = as_root(from, &prune).await?;
    let dropped: Vec<&str> = pruned.output.lines().filter(|l| !l.is_empty()).collect();
    if !dropped.is_empty() {
        tracing::warn!(
            "artifacts: {} link(s) leaving their directory or special file(s) not copied to the verifier: {}",
            dropped.len(),
            dropped.iter().take(5).copied().collect::<Vec<_>>().join(", ")
        );
    }
    let staging = tempfile::tempdir().map_err(|e| HarborError::Read {
        path: std::env::temp_dir(),
        source: e,
    })?;
    for (i, path) in paths.iter().enumerate() {
        let local = staging.path().join(i.to_string());
        match from.download_dir(path, &local).await {
            Ok(_) => {
                to.upload_dir(&local, path).await?;
                continue;
            }
            Err(SandboxError::NotFound(_)) => continue,
            Err(SandboxError::Path(why)) if why.ends_with("is not a directory") => {}
            Err(e) => return Err(e.into()),
        }
        match from.download_file(path, &local).await {
            Ok(_) => {
                to.upload_file(&local, path).await?;
            }
            Err(SandboxError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The verification proper, in `ctx`'s sandbox (see [`verify`]).
async fn run_tests(
    task: &HarborTask,
    ctx: &ToolContext,
    user: Option<&str>,
    workdir: Option<&str>,
    upload_tests: Option<&[PathBuf]>,
) -> Result<Rewards, HarborError> {
    let failed = |message: String| HarborError::Verifier {
        task: task.name.clone(),
        message,
    };
    let cfg = &task.config;
    let tests = if upload_tests.is_some() {
        format!("rm -rf {TESTS_DIR} && mkdir -p {TESTS_DIR} && ")
    } else {
        String::new()
    };
    // As root: the agent's own user (`[agent] user`) may not remove what it did not make.
    let wipe = as_root(
        ctx,
        &format!(
            "{tests}rm -rf {VERIFIER_DIR} && mkdir -p {VERIFIER_DIR} && chmod 777 {VERIFIER_DIR}"
        ),
    )
    .await?;
    if !wipe.success() {
        return Err(failed(format!(
            "cannot prepare {TESTS_DIR} and {VERIFIER_DIR}: {}",
            wipe.output
        )));
    }
    for dir in upload_tests.unwrap_or_default() {
        ctx.upload_dir(dir, TESTS_DIR).await?;
    }
    let mut exports = String::new();
    for (key, value) in &cfg.verifier.env {
        let value = resolve_env(value).map_err(|e| failed(format!("[verifier] env {key}: {e}")))?;
        exports.push_str(&format!("export {key}={}\n", quote(&value)));
    }
    let limit = Duration::from_secs_f64(cfg.verifier.timeout_sec.clamp(1.0, 86_400.0));
    let run = ctx
        .terminal_isolated_as(
            &format!("{exports}bash {TESTS_DIR}/test.sh > {VERIFIER_DIR}/test-stdout.txt 2>&1"),
            limit,
            user,
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
