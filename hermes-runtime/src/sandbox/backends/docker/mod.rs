//! The Docker backend (bollard, API version negotiated with the daemon): one hardened,
//! labelled container per task id whose idle process is a sleep of the sandbox's lifetime (the
//! daemon stops and removes it then, whatever happens to this process) and one exec per
//! command; the daemon's requests bounded per kind (creation, exec, archive, diff: see
//! `budget.rs`) and creation by a rate; an optional pool of pre-started
//! containers; a lease per run that tells reapers the run is alive and a watchdog process that
//! cleans up after a killed run; files moved through the archive (tar) endpoints.

mod budget;
mod egress;
#[cfg(test)]
mod fake;
mod fork;
mod hosts;
mod lease;
mod lifecycle;
mod pool;
pub mod reaper;
mod sandbox;
mod ssh;
mod storage;
pub mod watchdog;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::models::{ContainerCreateBody, HostConfig, SystemInfo};
use bollard::query_parameters::CreateContainerOptions;
use bollard::Docker;
use tokio::sync::{Mutex as AsyncMutex, OnceCell};
use tokio::time::Instant;
use tracing::{debug, info_span, Instrument};

use crate::config::HermesEnvConfig;
use crate::sandbox::api::{ContainerOverrides, Prepared, Sandbox, SandboxProvider, SandboxSpec};
use crate::sandbox::error::SandboxError;
use crate::sandbox::queue::commands_at_once;
pub use budget::Budgets;
use budget::{DaemonLanes, Lane};
pub use hosts::DockerHosts;
use lease::{Lease, LeaseSpec};
use lifecycle::{register, register_daemon, unregister, ContainerGuard};
pub use lifecycle::{
    remove_all_live, unix_now, Endpoint, Owner, LABEL_CREATED, LABEL_DEADLINE, LABEL_ENV,
    LABEL_MANAGED, LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START, LABEL_ROLE, LABEL_RUN,
    LABEL_TASK, ROLE_LEASE, ROLE_SANDBOX, ROLE_SNAPSHOT,
};
use pool::Pool;
pub use sandbox::DockerSandbox;

/// How Docker sandboxes are created (from the `--env.docker_*` / `--env.container_*` /
/// `--env.sandbox_*` flags).
#[derive(Debug, Clone, PartialEq)]
pub struct DockerSettings {
    /// Daemon address; `None` = `DOCKER_HOST` or the local socket.
    pub host: Option<String>,
    /// Default image.
    pub image: String,
    /// Memory limit in MiB (0 = none).
    pub memory_mb: i64,
    /// CPU limit (0 = none).
    pub cpus: f64,
    /// Process limit (0 = none).
    pub pids_limit: i64,
    /// Network mode: `none`, `bridge`, `host` or a network name.
    pub network: String,
    /// Bind mounts, `host:container[:ro]`.
    pub mounts: Vec<String>,
    /// tmpfs mounts, `path[:options]`.
    pub tmpfs: Vec<String>,
    /// Environment variables, `KEY=VALUE`.
    pub env: Vec<String>,
    /// Working directory of every command (created if missing).
    pub workdir: String,
    /// User commands run as; `None` = the image's user.
    pub user: Option<String>,
    /// Capabilities kept (all others are dropped).
    pub cap_add: Vec<String>,
    /// Pre-started containers kept per image.
    pub pool_size: usize,
    /// Container creations in flight at once.
    pub create_concurrency: usize,
    /// Exec creations and starts in flight at once (a command's run is not counted).
    pub exec_concurrency: usize,
    /// Archive uploads, downloads and stats in flight at once.
    pub archive_concurrency: usize,
    /// Daemon filesystem diffs in flight at once.
    pub diff_concurrency: usize,
    /// Commands running in the host's sandboxes at once (0 =
    /// [`RUN_PER_CPU`](crate::sandbox::queue::RUN_PER_CPU) per CPU of the daemon's host).
    pub command_concurrency: usize,
    /// Container creations started per second (0 = unlimited).
    pub create_rate: f64,
    /// Longest life of a sandbox from the moment its task gets it: the daemon stops and
    /// removes the container then (a pooled container may wait this long again beforehand).
    pub lifetime: Duration,
    /// How often the reaper runs during the run (`None` = only at its start and end).
    pub reap_interval: Option<Duration>,
    /// Environment name recorded in the labels.
    pub env_name: String,
    /// The daemons of a multi-host run (`--env.docker_hosts`); empty = the one daemon of
    /// `host`. See [`DockerHosts`].
    pub hosts: Vec<String>,
    /// Sandboxes alive at once per host of a multi-host run (0 = from the daemon's memory
    /// and CPUs).
    pub max_per_host: usize,
    /// Where the tripwires read a container's changes (not a flag: the default reads the
    /// daemon's storage where it can, the other exists to compare against).
    pub change_source: ChangeSource,
}

/// Where the tripwires read a container's filesystem changes from. Both report the same
/// changes (tests/docker_changes.rs); they differ in cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeSource {
    /// The container's upper directory in the daemon's storage when this process can read it
    /// (an overlay driver on this host: milliseconds), else the daemon's diff with one line
    /// per daemon saying why.
    #[default]
    Storage,
    /// Always the daemon's diff (`GET /containers/{id}/changes`), which walks the whole image
    /// on `fuse-overlayfs`.
    Daemon,
}

impl DockerSettings {
    /// Settings from the run's env config.
    pub fn from_config(c: &HermesEnvConfig, env_name: &str) -> Self {
        DockerSettings {
            host: c.docker_host.clone(),
            image: c.docker_image.clone(),
            memory_mb: c.container_memory_mb,
            cpus: c.container_cpus,
            pids_limit: c.container_pids_limit,
            network: c.container_network.clone(),
            mounts: c.container_mounts.clone().unwrap_or_default(),
            tmpfs: c.container_tmpfs.clone(),
            env: c.container_env.clone().unwrap_or_default(),
            workdir: c.container_workdir.clone(),
            user: c.container_user.clone().filter(|u| !u.is_empty()),
            cap_add: c.container_cap_add.clone(),
            pool_size: c.sandbox_pool_size.max(0) as usize,
            create_concurrency: c.sandbox_create_concurrency.max(1) as usize,
            exec_concurrency: c.sandbox_exec_concurrency.max(1) as usize,
            archive_concurrency: c.sandbox_archive_concurrency.max(1) as usize,
            diff_concurrency: c.sandbox_diff_concurrency.max(1) as usize,
            command_concurrency: c.sandbox_command_concurrency.max(0) as usize,
            create_rate: c.sandbox_create_rate.max(0.0),
            lifetime: Duration::from_secs(c.terminal_lifetime.max(1) as u64),
            reap_interval: (c.sandbox_reap_interval > 0.0)
                .then(|| Duration::from_secs_f64(c.sandbox_reap_interval.min(1e9))),
            env_name: env_name.to_owned(),
            hosts: c.docker_hosts.clone().unwrap_or_default(),
            max_per_host: c.max_containers_per_host.max(0) as usize,
            change_source: ChangeSource::default(),
        }
    }

    /// The budgets of the daemon's request lanes.
    pub fn budgets(&self) -> Budgets {
        Budgets {
            create: self.create_concurrency,
            exec: self.exec_concurrency,
            archive: self.archive_concurrency,
            changes: self.diff_concurrency,
            run: self.command_concurrency,
        }
    }

    /// The mount points of the tmpfs mounts (the archive API cannot reach inside them).
    pub fn tmpfs_paths(&self) -> Vec<String> {
        self.tmpfs
            .iter()
            .map(|t| {
                t.split(':')
                    .next()
                    .unwrap_or("")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .filter(|p| !p.is_empty())
            .collect()
    }

    /// [`Self::host_config`] with an item's own resources and network.
    fn host_config_with(&self, over: &ContainerOverrides) -> HostConfig {
        let mut config = self.host_config();
        if let Some(n) = over.nano_cpus {
            config.nano_cpus = Some(n);
        }
        if let Some(mb) = over.memory_mb {
            config.memory = Some(mb * 1024 * 1024);
        }
        if let Some(network) = &over.network {
            config.network_mode = Some(network.clone());
        }
        config
    }

    fn host_config(&self) -> HostConfig {
        let tmpfs: HashMap<String, String> = self
            .tmpfs
            .iter()
            .map(|t| match t.split_once(':') {
                Some((path, opts)) => (path.to_owned(), opts.to_owned()),
                None => (t.clone(), String::new()),
            })
            .collect();
        HostConfig {
            init: Some(true),
            auto_remove: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(self.cap_add.clone()).filter(|c| !c.is_empty()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            pids_limit: (self.pids_limit > 0).then_some(self.pids_limit),
            memory: (self.memory_mb > 0).then(|| self.memory_mb * 1024 * 1024),
            nano_cpus: (self.cpus > 0.0).then_some((self.cpus * 1e9) as i64),
            tmpfs: Some(tmpfs).filter(|t| !t.is_empty()),
            network_mode: Some(self.network.clone()),
            binds: Some(self.mounts.clone()).filter(|m| !m.is_empty()),
            ..Default::default()
        }
    }
}

impl Default for DockerSettings {
    fn default() -> Self {
        DockerSettings::from_config(&HermesEnvConfig::default(), "hermes-env")
    }
}

/// Spaces container creations `1 / rate` seconds apart.
#[derive(Debug)]
struct RateLimiter {
    interval: Option<Duration>,
    next: AsyncMutex<Instant>,
}

impl RateLimiter {
    fn new(per_second: f64) -> Self {
        RateLimiter {
            interval: (per_second > 0.0).then(|| Duration::from_secs_f64(1.0 / per_second)),
            next: AsyncMutex::new(Instant::now()),
        }
    }

    async fn wait(&self) {
        let Some(interval) = self.interval else {
            return;
        };
        let slot = {
            let mut next = self.next.lock().await;
            let slot = (*next).max(Instant::now());
            *next = slot + interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// A started container not yet bound to a task.
#[derive(Debug)]
pub(crate) struct Container {
    guard: ContainerGuard,
    image: String,
    started: Instant,
    /// The item's own working directory, when it set one.
    workdir: Option<String>,
    /// The user its commands run as by default: the item's own, else the settings'.
    user: Option<String>,
}

/// State shared by the provider, its pool refills and its sandboxes.
#[derive(Debug)]
pub(crate) struct Shared {
    docker: Docker,
    endpoint: Endpoint,
    /// What the daemon said of itself at connect (CPUs, memory).
    info: SystemInfo,
    settings: DockerSettings,
    owner: Owner,
    lease: OnceCell<Lease>,
    /// The daemon's requests in flight, bounded per kind.
    lanes: DaemonLanes,
    rate: RateLimiter,
    /// Egress allowlists' network and proxies on this daemon.
    egress: egress::Egress,
    _reaper: Option<reaper::Periodic>,
}

impl Shared {
    /// Starts the run's lease once, before its first container exists (so no other run's
    /// reaper can see a container of this run without a live lease), from that container's
    /// image.
    async fn ensure_lease(&self, image: &str) -> Result<(), SandboxError> {
        self.lease
            .get_or_try_init(|| {
                Lease::start(
                    &self.docker,
                    LeaseSpec {
                        endpoint: self.endpoint.clone(),
                        owner: self.owner.clone(),
                        image: image.to_owned(),
                        env_name: self.settings.env_name.clone(),
                    },
                )
            })
            .await
            .map(|_| ())
    }

    /// Creates and starts a container whose idle process sleeps for `life` (bounded by the
    /// creation lane and the rate). The name is registered before the create call and the guard
    /// made right after it, so a failure anywhere later removes the container; the start
    /// follows the create at once.
    async fn start_container(
        &self,
        image: &str,
        task: &str,
        life: Duration,
        over: &ContainerOverrides,
    ) -> Result<Container, SandboxError> {
        self.ensure_lease(image).await?;
        let _slot = self.lanes.slot(Lane::Create).await?;
        self.rate.wait().await;
        let short: String = task
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(8)
            .collect();
        let name = format!(
            "hermes-{short}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let now = unix_now();
        let mut labels: HashMap<String, String> = HashMap::from([
            (LABEL_MANAGED.into(), "1".into()),
            (LABEL_TASK.into(), task.to_owned()),
            (LABEL_CREATED.into(), now.to_string()),
            (LABEL_DEADLINE.into(), (now + life.as_secs()).to_string()),
            (LABEL_ENV.into(), self.settings.env_name.clone()),
            (LABEL_ROLE.into(), ROLE_SANDBOX.into()),
        ]);
        labels.extend(self.owner.labels().map(|(k, v)| (k.to_owned(), v)));
        let mut env = self.settings.env.clone();
        let mut over = over.clone();
        if let Some(hosts) = &over.allow_hosts {
            let (network, proxy_env) = self.egress.route(hosts).await?;
            over.network = Some(network);
            env.extend(proxy_env);
        }
        let over = &over;
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(vec!["sleep".into(), life.as_secs().max(1).to_string()]),
            entrypoint: Some(Vec::new()),
            labels: Some(labels),
            env: Some(env).filter(|e| !e.is_empty()),
            working_dir: Some(
                over.workdir
                    .clone()
                    .unwrap_or_else(|| self.settings.workdir.clone()),
            ),
            user: over.user.clone().or_else(|| self.settings.user.clone()),
            network_disabled: Some(
                over.network.as_ref().unwrap_or(&self.settings.network) == "none",
            ),
            host_config: Some(self.settings.host_config_with(over)),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        register(&name, &self.endpoint);
        if let Err(e) = self.docker.create_container(Some(options), body).await {
            unregister(&name);
            return Err(create_error(image, &self.endpoint.host, e));
        }
        let guard = ContainerGuard::new(name.clone(), self.endpoint.clone());
        if let Err(e) = self.docker.start_container(&name, None).await {
            let _ = guard.remove(&self.docker).await;
            return Err(create_error(image, &self.endpoint.host, e));
        }
        debug!(container = %name, image, "sandbox container started");
        Ok(Container {
            guard,
            image: image.to_owned(),
            started: Instant::now(),
            workdir: over.workdir.clone(),
            user: over.user.clone().or_else(|| self.settings.user.clone()),
        })
    }
}

pub(crate) fn create_error(image: &str, host: &str, e: bollard::errors::Error) -> SandboxError {
    let doing = match &e {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            message,
        } if message.contains("image") => {
            return SandboxError::ImageMissing {
                image: image.to_owned(),
                source: e,
            }
        }
        bollard::errors::Error::DockerResponseServerError { .. } => {
            "docker refused the container".to_owned()
        }
        _ => format!("cannot reach the Docker daemon at {host}"),
    };
    SandboxError::CreateDocker { doing, source: e }
}

/// What the daemon says of its host (its CPUs bound the commands run there; its memory, the
/// sandboxes it has room for).
async fn daemon_info(docker: &Docker, endpoint: &Endpoint) -> Result<SystemInfo, SandboxError> {
    let info = tokio::time::timeout(Duration::from_secs(30), docker.info())
        .await
        .map_err(|_| {
            SandboxError::Daemon(format!(
                "the Docker daemon at {} did not answer `info` within 30 s",
                endpoint.host
            ))
        })?
        .map_err(|e| {
            SandboxError::docker(format!("Docker daemon at {}: info", endpoint.host), e)
        })?;
    Ok(info)
}

/// Creates one Docker container per task id.
#[derive(Debug, Clone)]
pub struct DockerProvider {
    shared: Arc<Shared>,
    pool: Option<Arc<Pool>>,
}

impl DockerProvider {
    /// Connects to the daemon (negotiating the API version) and, with a pool size above 0,
    /// starts filling the pool for the default image in the background.
    pub async fn connect(settings: DockerSettings) -> Result<Self, SandboxError> {
        let (docker, endpoint) = Endpoint::connect(settings.host.as_deref()).await?;
        register_daemon(&endpoint);
        let owner = Owner::new_run();
        watchdog::spawn(&owner.run_id, &endpoint);
        let info = daemon_info(&docker, &endpoint).await?;
        let mut budgets = settings.budgets();
        budgets.run = commands_at_once(budgets.run, info.ncpu.unwrap_or(1).max(1) as usize);
        let lanes = DaemonLanes::new(&endpoint.host, budgets);
        let egress = egress::Egress::new(docker.clone(), endpoint.clone(), &owner.run_id);
        let shared = Arc::new(Shared {
            _reaper: settings
                .reap_interval
                .map(|every| reaper::Periodic::start(docker.clone(), every)),
            docker,
            endpoint,
            info,
            owner,
            lease: OnceCell::new(),
            lanes,
            rate: RateLimiter::new(settings.create_rate),
            egress,
            settings,
        });
        let pool = (shared.settings.pool_size > 0)
            .then(|| Pool::new(Arc::clone(&shared), shared.settings.pool_size));
        if let Some(pool) = &pool {
            pool.refill(&shared.settings.image);
        }
        Ok(DockerProvider { shared, pool })
    }

    /// The bollard client (API version negotiated).
    pub fn docker(&self) -> &Docker {
        &self.shared.docker
    }

    /// What the daemon said of itself at connect.
    pub(crate) fn daemon_info(&self) -> &SystemInfo {
        &self.shared.info
    }

    /// The settings in force.
    pub fn settings(&self) -> &DockerSettings {
        &self.shared.settings
    }

    /// The random id of this provider's run (its containers' and its lease's run-id label).
    pub fn run_id(&self) -> &str {
        &self.shared.owner.run_id
    }

    /// Waits until the pool holds its full size for `image` (or `timeout` passes); returns
    /// how many are ready. Without a pool, returns 0 at once.
    pub async fn wait_for_pool(&self, image: &str, timeout: Duration) -> usize {
        match &self.pool {
            Some(pool) => pool.wait_ready(image, timeout).await,
            None => 0,
        }
    }
}

#[async_trait]
impl SandboxProvider for DockerProvider {
    async fn create(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let image = spec
            .image
            .clone()
            .unwrap_or_else(|| self.shared.settings.image.clone());
        let span = info_span!("sandbox_create", task_id, image = %image);
        async {
            // A pooled container has the run's settings: an item with its own never takes one.
            let pooled = self
                .pool
                .as_ref()
                .filter(|_| spec.container.is_empty())
                .and_then(|pool| {
                    let taken = pool.take(&image);
                    pool.refill(&image);
                    taken
                });
            let container = match pooled {
                Some(c) => c,
                None => {
                    self.shared
                        .start_container(
                            &image,
                            task_id,
                            self.shared.settings.lifetime,
                            &spec.container,
                        )
                        .await?
                }
            };
            let sandbox = Arc::new(DockerSandbox::new(
                task_id,
                container,
                Arc::clone(&self.shared),
            ));
            sandbox.prepare();
            Ok(sandbox as Arc<dyn Sandbox>)
        }
        .instrument(span)
        .await
    }

    async fn prepare(
        &self,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Prepared>>, SandboxError> {
        let prepared = fork::Snapshot::prepare(Arc::clone(&self.shared), group, spec).await?;
        Ok(Some(Arc::new(prepared)))
    }
}
