//! Starting a run's sandbox backend from its config: the local scratch root, or the Docker
//! daemon (connected, and cleared of what dead runs left).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use super::docker::{self, DockerHosts, DockerProvider, DockerSettings};
use super::local::LocalProvider;
use super::ssh::{SshProvider, SshSettings};
use crate::config::HermesEnvConfig;
use crate::sandbox::api::SandboxProvider;

/// Where the rollouts' sandboxes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A scratch directory per rollout on this host.
    Local,
    /// A container per rollout on the Docker daemon.
    Docker,
    /// A scratch directory per rollout on a remote host over SSH (upstream's `TERMINAL_SSH_*`).
    Ssh,
}

impl Backend {
    /// The backend `--env.terminal_backend` names; an error says what to use instead.
    pub fn from_config(env: &HermesEnvConfig) -> anyhow::Result<Backend> {
        match env.terminal_backend.as_str() {
            "local" => Ok(Backend::Local),
            "docker" => Ok(Backend::Docker),
            "ssh" => Ok(Backend::Ssh),
            other => anyhow::bail!("{}", unsupported_backend(other)),
        }
    }
}

/// The one-line refusal of a `terminal_backend` this build has no backend for, naming the
/// supported ones and what to use instead of the upstream backend named.
fn unsupported_backend(name: &str) -> String {
    let instead = match name {
        "modal" | "daytona" => "use docker (a container per rollout, the same isolation on your own daemon; --env.docker_host reaches a remote one)",
        "singularity" | "apptainer" => "use docker (or podman through --env.docker_host unix:///run/user/UID/podman/podman.sock)",
        _ => "use docker for isolated rollouts, ssh for a remote host, or local for a scratch directory on this host",
    };
    format!("terminal_backend '{name}' is not supported; supported backends: local, docker, ssh; {instead}")
}

/// A started sandbox backend, and the root of its scratch directories when it is the local one.
pub struct StartedBackend {
    /// Creates the rollouts' sandboxes.
    pub provider: Arc<dyn SandboxProvider>,
    /// The local backend's root directory.
    pub local_root: Option<PathBuf>,
}

/// Starts the sandbox backend: a local scratch root, or the Docker daemon (connected, and
/// cleared of what dead runs left behind).
pub async fn start_backend(
    env: &HermesEnvConfig,
    backend: Backend,
    name: &str,
) -> anyhow::Result<StartedBackend> {
    Ok(match backend {
        Backend::Local => {
            let provider = LocalProvider::new()
                .context("cannot create the local sandbox root")?
                .with_env(env.container_env.clone().unwrap_or_default())
                .with_command_concurrency(env.sandbox_command_concurrency.max(0) as usize)
                .confined(env.local_confinement);
            let root = provider.root().to_path_buf();
            StartedBackend {
                provider: Arc::new(provider),
                local_root: Some(root),
            }
        }
        Backend::Docker => StartedBackend {
            provider: docker_backend(env, name).await?,
            local_root: None,
        },
        Backend::Ssh => StartedBackend {
            provider: Arc::new(ssh_backend(env).await?),
            local_root: None,
        },
    })
}

/// Connects the ssh backend from upstream's `TERMINAL_SSH_*` variables.
async fn ssh_backend(env: &HermesEnvConfig) -> anyhow::Result<SshProvider> {
    let settings = SshSettings::from_lookup(|name| std::env::var(name).ok())?;
    let extra = env.container_env.clone().unwrap_or_default();
    Ok(SshProvider::connect(settings, extra)
        .await?
        .with_command_concurrency(env.sandbox_command_concurrency.max(0) as usize))
}

/// Connects the Docker backend (one daemon, or every host of `--env.docker_hosts`) and removes
/// orphans that earlier runs left behind on each.
async fn docker_backend(
    env: &HermesEnvConfig,
    name: &str,
) -> anyhow::Result<Arc<dyn SandboxProvider>> {
    let mut settings = DockerSettings::from_config(env, name);
    if settings.hosts.is_empty() && settings.max_per_host > 0 {
        // One daemon with a cap on its live sandboxes: placed as a fleet of one host, whose
        // rollouts wait for a place.
        let one = settings
            .host
            .clone()
            .or_else(|| std::env::var("DOCKER_HOST").ok())
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
        settings.hosts = vec![one];
    }
    if !settings.hosts.is_empty() {
        let hosts = DockerHosts::connect(settings).await?;
        for docker in hosts.dockers() {
            docker::reaper::reap(docker, false)
                .await
                .context("start-up reaper")?;
        }
        return Ok(Arc::new(hosts));
    }
    let provider = DockerProvider::connect(settings).await?;
    docker::reaper::reap(provider.docker(), false)
        .await
        .context("start-up reaper")?;
    Ok(Arc::new(provider))
}
