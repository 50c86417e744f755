//! Container lifecycle that cannot leak: ownership labels (a random run id per provider), a
//! process-wide registry of live containers and of the daemons in use, guards that remove their container when dropped (on a thread of their own, so
//! neither cancellation nor a runtime shutting down can cut the removal short), an exit-time
//! backstop over the registry, and [`remove_all_live`] for the signal handler.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, Mutex, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::{RemoveContainerOptions, WaitContainerOptionsBuilder};
use bollard::{ClientVersion, Docker};
use tracing::{debug, warn};

use crate::sandbox::error::SandboxError;

/// Label every container of this project carries (value `1`).
pub const LABEL_MANAGED: &str = "hermes-env";
/// The rollout's task id (`pool` for a pre-started container not yet handed out).
pub const LABEL_TASK: &str = "hermes-env.task-id";
/// The owning run: a random id per provider, the key of its lease (see `lease.rs`).
pub const LABEL_RUN: &str = "hermes-env.run-id";
/// What the container is: [`ROLE_SANDBOX`] or [`ROLE_LEASE`].
pub const LABEL_ROLE: &str = "hermes-env.role";
/// Role of a task's (or the pool's) container.
pub const ROLE_SANDBOX: &str = "sandbox";
/// Role of a run's lease container.
pub const ROLE_LEASE: &str = "lease";
/// Role of a group's snapshot image (the labels of an image, not a container).
pub const ROLE_SNAPSHOT: &str = "snapshot";
/// The owning process id (shown by `sandbox list`; the reaper of releases before run ids
/// judged by it, so it stays correct for them).
pub const LABEL_OWNER_PID: &str = "hermes-env.owner-pid";
/// The owning process's start time (clock ticks after boot), for those earlier reapers.
pub const LABEL_OWNER_START: &str = "hermes-env.owner-start";
/// The owning process's host name.
pub const LABEL_OWNER_HOST: &str = "hermes-env.owner-host";
/// Creation time (Unix seconds).
pub const LABEL_CREATED: &str = "hermes-env.created";
/// When the daemon stops the container (Unix seconds): its idle process is a sleep that ends
/// then, and the container removes itself.
pub const LABEL_DEADLINE: &str = "hermes-env.deadline";
/// The environment's name.
pub const LABEL_ENV: &str = "hermes-env.env";
/// Name prefix of every lease container (`lease.rs`).
pub(crate) const LEASE_PREFIX: &str = "hermes-lease-";

/// How long a removal may take before it is abandoned (the reaper catches the rest).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the daemon is and which API version was negotiated with it; background removals
/// connect afresh from this (a client must not outlive the runtime it was used on).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `unix:///var/run/docker.sock`, `tcp://host:2375`, ….
    pub host: String,
    /// The negotiated API version.
    pub version: (usize, usize),
}

impl Endpoint {
    /// A client for this endpoint (no request is made): `unix://` sockets, plain `tcp://`,
    /// TLS for `tcp://…?tls=DIR` (that host's `ca.pem`/`cert.pem`/`key.pem`) or, with
    /// `DOCKER_TLS_VERIFY` set, for every `tcp://` host (certificates in `DOCKER_CERT_PATH`,
    /// else `~/.docker`), and `ssh://[user@]host[?key=PATH]` (see `ssh.rs`).
    pub fn client(&self) -> Result<Docker, SandboxError> {
        let version = ClientVersion {
            major_version: self.version.0,
            minor_version: self.version.1,
        };
        if self.host.starts_with("ssh://") {
            return super::ssh::client(&self.host, &version);
        }
        let (address, tls) = split_tls(&self.host);
        let result = if address.starts_with("unix://") {
            Docker::connect_with_unix(address, 120, &version)
        } else if let Some(dir) = tls.filter(|_| address.starts_with("tcp://")) {
            Docker::connect_with_ssl(
                address,
                &dir.join("key.pem"),
                &dir.join("cert.pem"),
                &dir.join("ca.pem"),
                120,
                &version,
            )
        } else if address.starts_with("tcp://") || address.starts_with("http://") {
            Docker::connect_with_http(address, 120, &version)
        } else {
            return Err(SandboxError::Daemon(format!(
                "unsupported Docker host '{}' (use unix://PATH, tcp://HOST:PORT, \
                 tcp://HOST:PORT?tls=CERT_DIR or ssh://[USER@]HOST)",
                self.host
            )));
        };
        result.map_err(|e| {
            SandboxError::docker(format!("cannot connect to Docker at {}", self.host), e)
        })
    }

    /// Connects to `host` (default: `DOCKER_HOST`, else the local socket) and negotiates the
    /// API version with the daemon.
    pub async fn connect(host: Option<&str>) -> Result<(Docker, Endpoint), SandboxError> {
        let host = host
            .map(str::to_owned)
            .or_else(|| std::env::var("DOCKER_HOST").ok())
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned());
        let unreachable = format!(
            "cannot reach the Docker daemon at {host} (is it running? check `docker info`)"
        );
        let endpoint = Endpoint {
            host: host.clone(),
            version: (1, 53),
        };
        let docker = endpoint.client()?;
        let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
            .await
            .map_err(|_| SandboxError::Daemon(format!("{unreachable}: no answer within 10 s")))?
            .map_err(|e| SandboxError::docker(unreachable, e))?;
        let v = docker.client_version();
        let endpoint = Endpoint {
            host,
            version: (v.major_version, v.minor_version),
        };
        Ok((docker, endpoint))
    }
}

/// Splits `tcp://host:port?tls=DIR` into the address and the certificate directory; without
/// `?tls=`, the directory is `DOCKER_CERT_PATH` (else `~/.docker`) when `DOCKER_TLS_VERIFY` is
/// set to anything but `0` or empty.
fn split_tls(host: &str) -> (&str, Option<std::path::PathBuf>) {
    if let Some((address, dir)) = host.split_once("?tls=") {
        return (address, Some(dir.into()));
    }
    let verify = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0");
    let dir = verify.then(|| {
        std::env::var_os("DOCKER_CERT_PATH")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".docker")
            })
    });
    (host, dir)
}

/// Who owns a container: the run id (what the reaper judges by) and, for display and for
/// reapers of earlier releases, the process id, its start time and the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Random id of the owning provider (one per run).
    pub run_id: String,
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start: u64,
    /// Host name.
    pub host: String,
}

impl Owner {
    /// A new run of this process, with a fresh random run id.
    pub fn new_run() -> Owner {
        let pid = std::process::id();
        Owner {
            run_id: uuid::Uuid::new_v4().simple().to_string(),
            pid,
            start: process_start(pid).unwrap_or(0),
            host: hostname(),
        }
    }

    /// The owner recorded in a container's labels (`None` without a run id).
    pub fn from_labels(labels: &HashMap<String, String>) -> Option<Owner> {
        Some(Owner {
            run_id: labels.get(LABEL_RUN)?.clone(),
            pid: labels.get(LABEL_OWNER_PID)?.parse().ok()?,
            start: labels.get(LABEL_OWNER_START)?.parse().ok()?,
            host: labels.get(LABEL_OWNER_HOST)?.clone(),
        })
    }

    /// The labels recording this owner.
    pub fn labels(&self) -> [(&'static str, String); 4] {
        [
            (LABEL_RUN, self.run_id.clone()),
            (LABEL_OWNER_PID, self.pid.to_string()),
            (LABEL_OWNER_START, self.start.to_string()),
            (LABEL_OWNER_HOST, self.host.clone()),
        ]
    }
}

fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Live containers of this process (name → endpoint), removals in flight, and every daemon a
/// provider of this process connected to (host → endpoint, for the end-of-run reaper).
struct Registry {
    live: Mutex<BTreeMap<String, Endpoint>>,
    pending: Mutex<usize>,
    drained: Condvar,
    daemons: Mutex<BTreeMap<String, Endpoint>>,
}

static REGISTRY: Registry = Registry {
    live: Mutex::new(BTreeMap::new()),
    pending: Mutex::new(0),
    drained: Condvar::new(),
    daemons: Mutex::new(BTreeMap::new()),
};

static AT_EXIT: Once = Once::new();

/// Set once the process removes everything it owns (the end of the run or a signal).
static SHUTTING_DOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the process is removing everything it owns (a lease that ends now is not lost).
pub fn shutting_down() -> bool {
    SHUTTING_DOWN.load(std::sync::atomic::Ordering::SeqCst)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records a container (by name, before it is even created) so that exit and signal cleanup
/// know about it; installs the exit-time backstop on first use.
pub fn register(name: &str, endpoint: &Endpoint) {
    AT_EXIT.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn` with atexit(3).
        unsafe {
            libc::atexit(remove_at_exit);
        }
    });
    lock(&REGISTRY.live).insert(name.to_owned(), endpoint.clone());
}

/// Records a daemon a provider connected to, so the end of the run reaps there too.
pub fn register_daemon(endpoint: &Endpoint) {
    lock(&REGISTRY.daemons).insert(endpoint.host.clone(), endpoint.clone());
}

/// Every daemon a provider of this process connected to.
pub fn daemons() -> Vec<Endpoint> {
    lock(&REGISTRY.daemons).values().cloned().collect()
}

/// Forgets a container that is gone.
pub fn unregister(name: &str) {
    lock(&REGISTRY.live).remove(name);
}

/// Names of the containers this process currently owns.
pub fn live_names() -> Vec<String> {
    lock(&REGISTRY.live).keys().cloned().collect()
}

/// Removes every container this process registered on the daemon `host` (a host that answers
/// again after an outage: what its sandboxes' guards could not remove then); returns how many
/// were removed.
pub async fn remove_live_at(docker: &Docker, host: &str) -> (usize, usize) {
    let names: Vec<String> = lock(&REGISTRY.live)
        .iter()
        // Its lease, if it survived, is this run's own and stays.
        .filter(|(n, e)| e.host == host && !n.starts_with(LEASE_PREFIX))
        .map(|(n, _)| n.clone())
        .collect();
    let (mut removed, mut failed) = (0, 0);
    for name in names {
        match remove_container(docker, &name).await {
            Ok(()) => {
                unregister(&name);
                removed += 1;
            }
            Err(e) => {
                warn!("{e}");
                failed += 1;
            }
        }
    }
    (removed, failed)
}

/// Waits until another caller's removal of `name` has finished (Docker's own `removed` wait
/// condition), then confirms the container is gone: that removal may have failed (the wait
/// then carries its error), leaving the container behind, dead.
async fn wait_removed(docker: &Docker, name: &str) -> Result<(), SandboxError> {
    use futures::StreamExt as _;
    let options = WaitContainerOptionsBuilder::new()
        .condition("removed")
        .build();
    let waited = tokio::time::timeout(
        REMOVE_TIMEOUT,
        docker.wait_container(name, Some(options)).next(),
    )
    .await;
    let why = match waited {
        Err(_) => {
            return Err(SandboxError::Daemon(format!(
                "removing {name}: the removal in progress did not finish within {}s",
                REMOVE_TIMEOUT.as_secs()
            )))
        }
        Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { error, .. }))) => error,
        Ok(Some(Ok(response))) => response.error.and_then(|e| e.message).unwrap_or_default(),
        Ok(Some(Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        })))
        | Ok(None) => String::new(),
        Ok(Some(Err(e))) => {
            return Err(SandboxError::docker(
                format!("removing {name}: waiting for the removal in progress"),
                e,
            ))
        }
    };
    match docker.inspect_container(name, None).await {
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Ok(_) => Err(SandboxError::Daemon(format!(
            "removing {name}: the daemon's removal in progress failed{}; the container is \
             still there",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        ))),
        Err(e) => Err(SandboxError::docker(
            format!("removing {name}: checking that the removal in progress finished"),
            e,
        )),
    }
}

/// Removes a container (force, with its anonymous volumes); a container that is already gone
/// counts as removed.
pub async fn remove_container(docker: &Docker, name: &str) -> Result<(), SandboxError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    // A second try when someone else's removal in progress failed and left it there.
    let mut tries = 2;
    loop {
        tries -= 1;
        let result = tokio::time::timeout(
            REMOVE_TIMEOUT,
            docker.remove_container(name, Some(options.clone())),
        )
        .await;
        return match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            })) => Ok(()),
            // "removal already in progress": someone else is removing it; done once it is gone.
            Ok(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message,
            })) if message.contains("already in progress") => {
                match wait_removed(docker, name).await {
                    Err(e) if tries > 0 => {
                        debug!("{e}; removing it again");
                        continue;
                    }
                    waited => waited,
                }
            }
            Ok(Err(e)) => Err(SandboxError::docker(format!("removing {name}"), e)),
            Err(_) => Err(SandboxError::Daemon(format!(
                "removing {name}: no answer within {}s",
                REMOVE_TIMEOUT.as_secs()
            ))),
        };
    }
}

/// Removes a container on a thread of its own with a fresh client, so that it completes even
/// when the caller's runtime is shutting down. Exit cleanup waits for these.
pub fn remove_detached(name: String, endpoint: Endpoint) {
    *lock(&REGISTRY.pending) += 1;
    let spawned = std::thread::Builder::new()
        .name("hermes-sandbox-rm".into())
        .spawn(move || {
            remove_blocking(std::slice::from_ref(&name), &endpoint);
            finish_pending();
        });
    if spawned.is_err() {
        // No thread: leave it registered for the exit backstop.
        finish_pending();
    }
}

fn finish_pending() {
    let mut pending = lock(&REGISTRY.pending);
    *pending = pending.saturating_sub(1);
    REGISTRY.drained.notify_all();
}

/// Removes `names` on a private current-thread runtime; unregisters the ones removed.
fn remove_blocking(names: &[String], endpoint: &Endpoint) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            warn!("cannot remove sandbox containers: no runtime: {e}");
            return;
        }
    };
    runtime.block_on(async {
        let docker = match endpoint.client() {
            Ok(d) => d,
            Err(e) => {
                warn!("cannot remove sandbox containers: {e}");
                return;
            }
        };
        let removals = names.iter().map(|name| {
            let docker = &docker;
            async move {
                match remove_container(docker, name).await {
                    Ok(()) => {
                        debug!(container = %name, "sandbox container removed");
                        unregister(name);
                    }
                    Err(e) => warn!("{e}"),
                }
            }
        });
        futures::future::join_all(removals).await;
    });
}

fn wait_for_pending(limit: Duration) {
    let pending = lock(&REGISTRY.pending);
    let _ = REGISTRY
        .drained
        .wait_timeout_while(pending, limit, |p| *p > 0);
}

/// Removes every container this process still owns (signal handler and exit path): waits for
/// removals already in flight, then removes the rest. Returns how many remain afterwards.
pub async fn remove_all_live() -> usize {
    SHUTTING_DOWN.store(true, std::sync::atomic::Ordering::SeqCst);
    let (done, finished) = tokio::sync::oneshot::channel();
    // A plain thread (not the runtime's blocking pool) may start its own runtime.
    let spawned = std::thread::Builder::new()
        .name("hermes-sandbox-cleanup".into())
        .spawn(move || {
            wait_for_pending(REMOVE_TIMEOUT);
            remove_registered();
            let _ = done.send(());
        });
    if spawned.is_ok() {
        let _ = finished.await;
    }
    live_names().len()
}

fn remove_registered() {
    let snapshot: Vec<(String, Endpoint)> = lock(&REGISTRY.live)
        .iter()
        .map(|(n, e)| (n.clone(), e.clone()))
        .collect();
    let mut by_endpoint: BTreeMap<String, (Endpoint, Vec<String>)> = BTreeMap::new();
    for (name, endpoint) in snapshot {
        by_endpoint
            .entry(endpoint.host.clone())
            .or_insert_with(|| (endpoint, Vec::new()))
            .1
            .push(name);
    }
    for (endpoint, names) in by_endpoint.into_values() {
        remove_blocking(&names, &endpoint);
    }
}

/// The exit-time backstop: runs when the process exits normally (also after a test binary's
/// last test), removing whatever guards could not.
extern "C" fn remove_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        wait_for_pending(REMOVE_TIMEOUT);
        if !live_names().is_empty() {
            remove_registered();
        }
    });
}

/// Owns one container: removes it when dropped unless [`ContainerGuard::remove`] already did.
#[derive(Debug)]
pub struct ContainerGuard {
    name: String,
    endpoint: Endpoint,
    removed: std::sync::atomic::AtomicBool,
}

impl ContainerGuard {
    /// Guards `name`, which must already be registered.
    pub fn new(name: String, endpoint: Endpoint) -> Self {
        ContainerGuard {
            name,
            endpoint,
            removed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the container now (idempotent). Marked removed only once the daemon confirmed,
    /// so a removal cut short by cancellation still leaves the guard's drop to do it.
    pub async fn remove(&self, docker: &Docker) -> Result<(), SandboxError> {
        if self.removed.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        remove_container(docker, &self.name).await?;
        self.removed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        unregister(&self.name);
        Ok(())
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if !self.removed.load(std::sync::atomic::Ordering::SeqCst) {
            remove_detached(self.name.clone(), self.endpoint.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon that answers a removal as Docker does when another removal is in progress and
    /// then fails: 409, then a `removed` wait carrying the error, the container still there.
    /// `second` is the status of the next removal.
    async fn removal_failing_daemon(second: &'static str) -> (Docker, super::super::fake::Seen) {
        let mut deletes = 0;
        super::super::fake::daemon(move |line| {
            if line.starts_with("DELETE") {
                deletes += 1;
                if deletes == 1 {
                    let body = r#"{"message":"removal of container c is already in progress"}"#;
                    return ("409 Conflict", body.into());
                }
                return (second, String::new());
            }
            if line.contains("/wait") {
                let body =
                    r#"{"StatusCode":137,"Error":{"Message":"unable to remove filesystem"}}"#;
                return ("200 OK", body.into());
            }
            ("200 OK", r#"{"Id":"c","State":{"Status":"dead"}}"#.into())
        })
        .await
    }

    #[tokio::test]
    async fn a_removal_in_progress_that_failed_is_not_taken_for_done() {
        // Its own removal then succeeds: removed.
        let (docker, seen) = removal_failing_daemon("204 No Content").await;
        remove_container(&docker, "c")
            .await
            .expect("removed on the second try");
        assert_eq!(seen.methods(), ["DELETE", "POST", "GET", "DELETE"]);
        // Its own removal fails too: an error naming the daemon's reason, never "removed".
        let (docker, _) = removal_failing_daemon("500 Internal Server Error").await;
        let err = remove_container(&docker, "c").await.unwrap_err();
        assert!(err.to_string().contains("removing c"), "{err}");
    }

    #[test]
    fn every_run_gets_its_own_id_and_this_process_start_time() {
        let (a, b) = (Owner::new_run(), Owner::new_run());
        assert_ne!(a.run_id, b.run_id);
        assert_eq!(a.run_id.len(), 32);
        assert_eq!((a.pid, a.start), (b.pid, b.start));
        assert!(a.start > 0);
    }

    #[test]
    fn a_tls_query_names_the_host_s_certificate_directory() {
        let (address, dir) = split_tls("tcp://10.0.0.3:2376?tls=/certs/c");
        assert_eq!(address, "tcp://10.0.0.3:2376");
        assert_eq!(dir, Some(std::path::PathBuf::from("/certs/c")));
    }

    #[test]
    fn owner_round_trips_through_labels() {
        let me = Owner::new_run();
        let labels: HashMap<String, String> = me
            .labels()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(Owner::from_labels(&labels), Some(me));
    }
}
