//! Many Docker daemons (`--env.docker_hosts`): one [`DockerProvider`] per host (its own lease,
//! watchdog, pool, creation limits and reaper), a placement that puts each new sandbox on the
//! answering host with the most free room, and a probe per host that marks a host down as soon
//! as it stops answering (its sandboxes then fail at once, so their rollouts are retried on the
//! other hosts) and, when it answers again, removes what it kept before taking new sandboxes.
//! A group's prepared sandbox is a snapshot per host its rollouts land on
//! ([`FleetSnapshot`]): prepared on the first, and on another only when the hosts that hold
//! one are full.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::models::SystemInfo;
use bollard::Docker;
use tokio::sync::{watch, Notify, OnceCell};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::lifecycle::remove_live_at;
use super::{reaper, DockerProvider, DockerSettings};
use crate::sandbox::api::{
    ExecOutput, ExecRequest, Prepared, Sandbox, SandboxProvider, SandboxSpec, Transfer,
};
use crate::sandbox::change_scan::ChangeScan;
use crate::sandbox::error::SandboxError;
use crate::sandbox::survival::{LeftoverKill, LeftoverRules};

/// How often each host is asked whether it is alive.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// A probe unanswered this long marks the host down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One daemon of a multi-host run.
struct Host {
    provider: DockerProvider,
    /// Sandboxes it may hold at once.
    capacity: usize,
    /// Sandboxes it holds now (slots handed out and not yet dropped).
    in_use: AtomicUsize,
    /// Whether its last probe (or request) was answered.
    up: watch::Sender<bool>,
}

impl Host {
    fn name(&self) -> &str {
        self.provider.settings().host.as_deref().unwrap_or_default()
    }

    fn is_up(&self) -> bool {
        *self.up.borrow()
    }

    fn free(&self) -> usize {
        self.capacity
            .saturating_sub(self.in_use.load(Ordering::SeqCst))
    }

    /// Marks the host down (one warning per transition).
    fn mark_down(&self, why: &str) {
        if self.up.send_replace(false) {
            warn!(
                "Docker host {} stopped answering ({why}); its sandboxes fail and their rollouts \
                 are retried on the other hosts; no new sandbox goes there until it answers again",
                self.name()
            );
        }
    }

    async fn answers(&self) -> bool {
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, self.provider.docker().ping()).await,
            Ok(Ok(_))
        )
    }
}

/// A place on a host, given back (and a waiting creation woken) when dropped.
struct Slot {
    /// The host's position in `--env.docker_hosts`.
    index: usize,
    host: Arc<Host>,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.host.in_use.fetch_sub(1, Ordering::SeqCst);
        self.freed.notify_waiters();
    }
}

/// The hosts and the placement over them, shared by the provider and the groups' snapshots.
struct Fleet {
    hosts: Vec<Arc<Host>>,
    freed: Arc<Notify>,
    placing: Mutex<()>,
}

impl Fleet {
    /// Takes a place on an answering host with free room: one `preferred` says yes to if any
    /// has room, else the one with the most free room (`None`: all are full or down).
    fn reserve(&self, preferred: &(dyn Fn(usize) -> bool + Sync)) -> Option<Slot> {
        let _placing = self.placing.lock().unwrap_or_else(|e| e.into_inner());
        let (index, host) = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.is_up() && h.free() > 0)
            .max_by_key(|(i, h)| {
                (
                    preferred(*i),
                    h.free(),
                    std::cmp::Reverse(h.in_use.load(Ordering::SeqCst)),
                )
            })?;
        host.in_use.fetch_add(1, Ordering::SeqCst);
        Some(Slot {
            index,
            host: Arc::clone(host),
            freed: Arc::clone(&self.freed),
        })
    }

    /// Waits for a place (see [`Fleet::reserve`]); fails at once when every host is down.
    async fn slot(&self, preferred: &(dyn Fn(usize) -> bool + Sync)) -> Result<Slot, SandboxError> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.reserve(preferred) {
                return Ok(slot);
            }
            if !self.hosts.iter().any(|h| h.is_up()) {
                let names: Vec<&str> = self.hosts.iter().map(|h| h.name()).collect();
                return Err(SandboxError::Daemon(format!(
                    "every Docker host is down ({}); sandboxes resume when one answers again",
                    names.join(", ")
                )));
            }
            freed.await;
        }
    }

    /// Makes a sandbox with `make` on a place `preferred` leads to; a host that fails it and
    /// no longer answers is marked down and the next place is tried (once per host).
    async fn place<F, Fut>(
        &self,
        preferred: &(dyn Fn(usize) -> bool + Sync),
        make: F,
    ) -> Result<Arc<dyn Sandbox>, SandboxError>
    where
        F: Fn(Arc<Host>, usize) -> Fut,
        Fut: Future<Output = Result<Arc<dyn Sandbox>, SandboxError>>,
    {
        let mut lost = 0;
        loop {
            let slot = self.slot(preferred).await?;
            match make(Arc::clone(&slot.host), slot.index).await {
                Ok(inner) => return Ok(Arc::new(PlacedSandbox { inner, slot })),
                Err(e) if e.is_infra() && lost < self.hosts.len() && !slot.host.answers().await => {
                    slot.host.mark_down(&e.to_string());
                    lost += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Sandboxes spread over several Docker daemons by free room; see the module doc.
pub struct DockerHosts {
    fleet: Arc<Fleet>,
    probes: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for DockerHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hosts: Vec<&str> = self.fleet.hosts.iter().map(|h| h.name()).collect();
        f.debug_struct("DockerHosts")
            .field("hosts", &hosts)
            .finish()
    }
}

impl DockerHosts {
    /// Connects to every host of `settings.hosts` (each must answer and hold the default
    /// image), sizes each from `max_per_host` or its memory and CPUs, and starts the probes.
    pub async fn connect(settings: DockerSettings) -> Result<Self, SandboxError> {
        if settings.hosts.is_empty() {
            return Err(SandboxError::Daemon(
                "--env.docker_hosts is empty; list at least one Docker host".into(),
            ));
        }
        let connecting = settings.hosts.iter().map(|h| connect_host(&settings, h));
        let hosts: Vec<Arc<Host>> = futures::future::try_join_all(connecting)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        let freed = Arc::new(Notify::new());
        let probes = hosts
            .iter()
            .map(|h| tokio::spawn(probe(Arc::clone(h), Arc::clone(&freed))))
            .collect();
        Ok(DockerHosts {
            fleet: Arc::new(Fleet {
                hosts,
                freed,
                placing: Mutex::new(()),
            }),
            probes,
        })
    }

    /// The bollard clients of the hosts, in `--env.docker_hosts` order.
    pub fn dockers(&self) -> Vec<&Docker> {
        self.fleet
            .hosts
            .iter()
            .map(|h| h.provider.docker())
            .collect()
    }

    /// The run ids of the hosts' providers (one lease per host), in host order.
    pub fn run_ids(&self) -> Vec<&str> {
        self.fleet
            .hosts
            .iter()
            .map(|h| h.provider.run_id())
            .collect()
    }

    /// How many sandboxes each host holds now, in host order.
    pub fn in_use(&self) -> Vec<usize> {
        self.fleet
            .hosts
            .iter()
            .map(|h| h.in_use.load(Ordering::SeqCst))
            .collect()
    }

    /// Whether each host is up (answered its last probe), in host order.
    pub fn up(&self) -> Vec<bool> {
        self.fleet.hosts.iter().map(|h| h.is_up()).collect()
    }
}

impl Drop for DockerHosts {
    fn drop(&mut self) {
        for probe in &self.probes {
            probe.abort();
        }
    }
}

#[async_trait]
impl SandboxProvider for DockerHosts {
    async fn create(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.fleet
            .place(&|_| false, |host, _| async move {
                host.provider.create(task_id, spec).await
            })
            .await
    }

    /// Prepares on the host with the most free room now; other hosts prepare their own
    /// snapshot when a rollout of the group first lands there ([`FleetSnapshot`]).
    async fn prepare(
        &self,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Prepared>>, SandboxError> {
        let snapshot = FleetSnapshot {
            fleet: Arc::clone(&self.fleet),
            group: group.to_owned(),
            spec: spec.clone(),
            on_host: self.fleet.hosts.iter().map(|_| OnceCell::new()).collect(),
        };
        let first = self.fleet.slot(&|_| false).await?;
        let prepared = snapshot.on(first.index).await;
        drop(first);
        prepared?;
        Ok(Some(Arc::new(snapshot)))
    }
}

/// A group's prepared sandbox over a fleet: one snapshot per host the group's rollouts
/// landed on. A fork goes to a host holding one while any has room (a copy there costs no
/// preparation); only when they are all full is another host prepared, so a group of N on
/// hosts of room R prepares about N / R times at most, not N.
struct FleetSnapshot {
    fleet: Arc<Fleet>,
    group: String,
    spec: SandboxSpec,
    /// Per host (in host order), its snapshot once prepared there.
    on_host: Vec<OnceCell<Arc<dyn Prepared>>>,
}

impl FleetSnapshot {
    /// The group's snapshot on host `index`, prepared there now if it is not yet.
    async fn on(&self, index: usize) -> Result<&Arc<dyn Prepared>, SandboxError> {
        self.on_host[index]
            .get_or_try_init(|| async {
                let host = &self.fleet.hosts[index];
                if self.on_host.iter().any(OnceCell::initialized) {
                    info!(
                        "group {}: its prepared hosts are full or down; preparing it on Docker \
                         host {} too",
                        self.group,
                        host.name()
                    );
                }
                let prepared = host.provider.prepare(&self.group, &self.spec).await?;
                prepared.ok_or_else(|| {
                    SandboxError::Create(format!(
                        "Docker host {} cannot copy a prepared sandbox",
                        host.name()
                    ))
                })
            })
            .await
    }
}

#[async_trait]
impl Prepared for FleetSnapshot {
    async fn fork(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let holds = |index: usize| self.on_host[index].initialized();
        self.fleet
            .place(&holds, |_, index| async move {
                self.on(index).await?.fork(task_id, spec).await
            })
            .await
    }

    /// Removes the snapshot on every host that holds one; a host that does not answer keeps
    /// its copy until the end of the run reaps it (or the next run's reaper).
    async fn remove(&self) -> Result<(), SandboxError> {
        let held = self
            .fleet
            .hosts
            .iter()
            .zip(&self.on_host)
            .filter_map(|(host, cell)| cell.get().map(|p| (host, p)));
        let (up, down): (Vec<_>, Vec<_>) = held.partition(|(host, _)| host.is_up());
        for (host, _) in &down {
            warn!(
                "group {}: Docker host {} does not answer, so its snapshot of the group stays \
                 there until the run's end removes it (or `sandbox reap` after the run)",
                self.group,
                host.name()
            );
        }
        let removals = up.into_iter().map(|(_, prepared)| prepared.remove());
        // Every removal runs to its end; the first failure is the answer.
        futures::future::join_all(removals)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()
            .map(|_| ())
    }
}

/// Connects one host and checks it can run the run's sandboxes.
async fn connect_host(settings: &DockerSettings, name: &str) -> Result<Host, SandboxError> {
    let provider = DockerProvider::connect(DockerSettings {
        host: Some(name.to_owned()),
        hosts: Vec::new(),
        ..settings.clone()
    })
    .await?;
    let docker = provider.docker();
    let image = &settings.image;
    match docker.inspect_image(image).await {
        Ok(_) => {}
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {
            return Err(SandboxError::Create(format!(
                "image '{image}' is missing on Docker host {name}; copy it there with \
                 `docker save {image} | docker -H {name} load`"
            )))
        }
        Err(e) => {
            return Err(SandboxError::docker(
                format!("Docker host {name}: cannot inspect image '{image}'"),
                e,
            ))
        }
    }
    let (capacity, why) = capacity(provider.daemon_info(), settings);
    info!("Docker host {name}: room for {capacity} sandboxes ({why})");
    Ok(Host {
        provider,
        capacity,
        in_use: AtomicUsize::new(0),
        up: watch::Sender::new(true),
    })
}

/// Sandboxes a host may hold: `max_per_host`, else its memory over each sandbox's memory
/// limit (at least its CPU count), else unlimited.
fn capacity(info: &SystemInfo, settings: &DockerSettings) -> (usize, String) {
    if settings.max_per_host > 0 {
        return (
            settings.max_per_host,
            "--env.max_containers_per_host".into(),
        );
    }
    if settings.memory_mb <= 0 {
        return (
            usize::MAX,
            "no memory limit per sandbox; --env.max_containers_per_host sets one".into(),
        );
    }
    let memory = info.mem_total.unwrap_or(0).max(0) as u64;
    let cpus = info.ncpu.unwrap_or(1).max(1) as usize;
    let by_memory = (memory / (settings.memory_mb as u64 * 1024 * 1024)) as usize;
    (
        by_memory.max(cpus),
        format!(
            "{} MiB / {} MiB per sandbox, at least its {cpus} CPUs; \
             --env.max_containers_per_host overrides",
            memory / (1024 * 1024),
            settings.memory_mb
        ),
    )
}

/// Asks the host every [`PROBE_EVERY`] whether it answers; marks it down when it does not and,
/// when a down host answers again, removes what it kept (this run's containers that outlived
/// the outage, other runs' orphans) before placing sandboxes there again.
async fn probe(host: Arc<Host>, freed: Arc<Notify>) {
    let mut ticks = tokio::time::interval(PROBE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let answers = host.answers().await;
        match (host.is_up(), answers) {
            (true, false) => host.mark_down("no answer to a ping within 2 s"),
            // Until what this run kept there is gone, the host takes no new sandbox.
            (false, true) if recover(&host).await => {
                host.up.send_replace(true);
                freed.notify_waiters();
            }
            _ => {}
        }
    }
}

/// Removes what this run kept on a host that answers again, and reaps orphans there; `false`
/// when a removal failed (the next probe tries again).
async fn recover(host: &Host) -> bool {
    let docker = host.provider.docker();
    let (left, failed) = remove_live_at(docker, host.name()).await;
    if failed > 0 {
        warn!(
            "Docker host {} answers again, but {failed} of this run's container(s) there could not \
             be removed yet; trying again before placing sandboxes there",
            host.name()
        );
        return false;
    }
    let reaped = reaper::reap(docker, false).await.map_or(0, |r| r.len());
    info!(
        "Docker host {} answers again: removed {left} container(s) of this run it kept and \
         {reaped} orphan(s); placing sandboxes there again",
        host.name()
    );
    true
}

/// A sandbox on one host: holds its place there, and fails at once when the host goes down.
struct PlacedSandbox {
    inner: Arc<dyn Sandbox>,
    slot: Slot,
}

impl PlacedSandbox {
    /// Runs `op` unless the host goes down first.
    async fn guarded<T>(
        &self,
        op: impl Future<Output = Result<T, SandboxError>>,
    ) -> Result<T, SandboxError> {
        let mut up = self.slot.host.up.subscribe();
        tokio::select! {
            result = op => result,
            _ = up.wait_for(|up| !*up) => Err(SandboxError::Gone(format!(
                "Docker host {} stopped answering",
                self.slot.host.name()
            ))),
        }
    }
}

#[async_trait]
impl Sandbox for PlacedSandbox {
    fn task_id(&self) -> &str {
        self.inner.task_id()
    }
    fn workdir(&self) -> &str {
        self.inner.workdir()
    }
    fn temp_dir(&self) -> &str {
        self.inner.temp_dir()
    }
    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.guarded(self.inner.exec(request)).await
    }
    async fn exec_one_shot(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.guarded(self.inner.exec_one_shot(request)).await
    }
    async fn reset_processes(&self) -> Result<(), SandboxError> {
        self.guarded(self.inner.reset_processes()).await
    }
    async fn kill_leftover_processes(
        &self,
        rules: &LeftoverRules,
    ) -> Result<LeftoverKill, SandboxError> {
        self.guarded(self.inner.kill_leftover_processes(rules))
            .await
    }
    async fn changed_paths(&self, roots: &[String]) -> Result<Option<Vec<String>>, SandboxError> {
        self.guarded(self.inner.changed_paths(roots)).await
    }
    async fn scan_changes(
        &self,
        scans: &[ChangeScan],
    ) -> Result<Option<Vec<Vec<String>>>, SandboxError> {
        self.guarded(self.inner.scan_changes(scans)).await
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.guarded(self.inner.read_file(path)).await
    }
    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        self.guarded(self.inner.write_file(path, bytes)).await
    }
    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        self.guarded(self.inner.upload_file(local, remote)).await
    }
    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        self.guarded(self.inner.upload_dir(local, remote)).await
    }
    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        self.guarded(self.inner.download_file(remote, local)).await
    }
    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        self.guarded(self.inner.download_dir(remote, local)).await
    }
    /// On a down host the container is out of reach: it stays registered, and the host's
    /// return (or the end of the run, or the next run's reaper) removes it.
    async fn teardown(&self) -> Result<(), SandboxError> {
        if !self.slot.host.is_up() {
            return Ok(());
        }
        self.guarded(self.inner.teardown()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(cpus: i64, mem_gib: i64) -> SystemInfo {
        SystemInfo {
            ncpu: Some(cpus),
            mem_total: Some(mem_gib << 30),
            ..Default::default()
        }
    }

    #[test]
    fn capacity_comes_from_the_flag_else_memory_else_cpus() {
        let s = |max_per_host, memory_mb| DockerSettings {
            max_per_host,
            memory_mb,
            ..DockerSettings::default()
        };
        assert_eq!(capacity(&info(2, 24), &s(7, 4096)).0, 7);
        assert_eq!(capacity(&info(2, 24), &s(0, 4096)).0, 6);
        assert_eq!(capacity(&info(16, 8), &s(0, 4096)).0, 16);
        assert_eq!(capacity(&info(2, 24), &s(0, 0)).0, usize::MAX);
    }
}
