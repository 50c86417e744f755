//! A run's lease: one small container per run id whose only process reads its stdin, which is
//! this provider's attach connection to the daemon. When the owner dies (even SIGKILL, on any
//! host and in any pid namespace) the kernel closes that connection, the daemon closes the
//! container's stdin (`StdinOnce`), the read ends and the container removes itself. So "a
//! running lease with run id R exists" is the daemon's own record of "run R is alive", and the
//! reaper (`reaper.rs`) judges ownership by it alone: no pid, no host name, no clock.

use std::collections::HashMap;
use std::pin::Pin;

use bollard::container::{AttachContainerResults, LogOutput};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{AttachContainerOptions, CreateContainerOptions};
use bollard::Docker;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWrite;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::lifecycle::{
    register, shutting_down, unix_now, unregister, ContainerGuard, Endpoint, Owner, LEASE_PREFIX,
};
use super::{create_error, LABEL_CREATED, LABEL_ENV, LABEL_MANAGED, LABEL_ROLE, ROLE_LEASE};
use crate::sandbox::error::SandboxError;

/// How long to wait before starting a new lease after one failed to start.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

type Output = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// What the lease container needs: where, whose, which image.
#[derive(Debug, Clone)]
pub(crate) struct LeaseSpec {
    /// The daemon.
    pub endpoint: Endpoint,
    /// The run the lease stands for.
    pub owner: Owner,
    /// Image of the lease container (the first sandbox's image: it exists, and has `sh`).
    pub image: String,
    /// Environment name label.
    pub env_name: String,
}

/// One attached lease container: dropping it closes the connection (the daemon ends the
/// container) and its guard removes the container.
struct Attached {
    guard: ContainerGuard,
    output: Output,
    _input: Pin<Box<dyn AsyncWrite + Send>>,
}

/// The run's lease, kept up by a background task that starts a new lease container (same run
/// id) if the daemon ever ends the current one while the run goes on.
#[derive(Debug)]
pub(crate) struct Lease {
    watcher: JoinHandle<()>,
}

impl Lease {
    /// Starts the lease container and the task that keeps it; returns once it runs.
    pub async fn start(docker: &Docker, spec: LeaseSpec) -> Result<Lease, SandboxError> {
        let attached = attach_new(docker, &spec).await?;
        let docker = docker.clone();
        let watcher = tokio::spawn(keep(docker, spec, attached));
        Ok(Lease { watcher })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Holds the connection open; when the daemon ends the lease anyway (daemon restart, a proxy
/// cutting the connection, someone removing it), says so and starts another.
async fn keep(docker: Docker, spec: LeaseSpec, mut attached: Attached) {
    loop {
        while attached.output.next().await.is_some() {}
        if shutting_down() {
            return;
        }
        warn!(
            "sandbox lease {} of run {} ended while the run goes on; starting a new one \
             (until it runs, other runs' reapers may take this run's containers for orphans)",
            attached.guard.name(),
            spec.owner.run_id
        );
        drop(attached);
        let mut failures = 0u32;
        attached = loop {
            match attach_new(&docker, &spec).await {
                Ok(a) => break a,
                // A daemon that is down stays down for a while: one warning, then quiet.
                Err(e) if failures == 0 => {
                    warn!("cannot start a new sandbox lease: {e}; retrying every second");
                }
                Err(e) => debug!("cannot start a new sandbox lease: {e}"),
            }
            failures += 1;
            tokio::time::sleep(RETRY_AFTER).await;
        };
    }
}

/// Creates, attaches to and starts a lease container.
async fn attach_new(docker: &Docker, spec: &LeaseSpec) -> Result<Attached, SandboxError> {
    let name = format!(
        "{LEASE_PREFIX}{}-{}",
        &spec.owner.run_id[..12.min(spec.owner.run_id.len())],
        &uuid::Uuid::new_v4().simple().to_string()[..6]
    );
    let mut labels: HashMap<String, String> = HashMap::from([
        (LABEL_MANAGED.into(), "1".into()),
        (LABEL_ROLE.into(), ROLE_LEASE.into()),
        (LABEL_CREATED.into(), unix_now().to_string()),
        (LABEL_ENV.into(), spec.env_name.clone()),
    ]);
    labels.extend(spec.owner.labels().map(|(k, v)| (k.to_owned(), v)));
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: Some(Vec::new()),
        cmd: Some(vec!["sh".into(), "-c".into(), "read -r _".into()]),
        labels: Some(labels),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            init: Some(true),
            auto_remove: Some(true),
            network_mode: Some("none".into()),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            pids_limit: Some(8),
            memory: Some(32 * 1024 * 1024),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    register(&name, &spec.endpoint);
    if let Err(e) = docker.create_container(Some(options), body).await {
        unregister(&name);
        return Err(create_error(&spec.image, &spec.endpoint.host, e));
    }
    let guard = ContainerGuard::new(name.clone(), spec.endpoint.clone());
    let attach = AttachContainerOptions {
        stream: true,
        stdin: true,
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let AttachContainerResults { output, input } = docker
        .attach_container(&name, Some(attach))
        .await
        .map_err(|e| SandboxError::CreateDocker {
            doing: format!("attaching to the sandbox lease {name}"),
            source: e,
        })?;
    docker
        .start_container(&name, None)
        .await
        .map_err(|e| create_error(&spec.image, &spec.endpoint.host, e))?;
    debug!(container = %name, run = %spec.owner.run_id, "sandbox lease started");
    Ok(Attached {
        guard,
        output,
        _input: input,
    })
}
