//! Reconciling by label: lists this project's containers and removes orphans — containers of
//! runs that have no live lease (see `lease.rs`). Whatever its age or deadline, a container
//! whose run's lease is alive is never removed. Runs at the start and the end of every
//! Docker-backed run, every `--env.sandbox_reap_interval` seconds in between, and behind
//! `sandbox list|reap`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bollard::query_parameters::{ListContainersOptions, ListImagesOptions};
use bollard::Docker;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::lifecycle::{daemons, remove_container, unix_now};
use super::{
    Owner, LABEL_CREATED, LABEL_DEADLINE, LABEL_ENV, LABEL_MANAGED, LABEL_ROLE, LABEL_TASK,
    ROLE_LEASE, ROLE_SNAPSHOT,
};
use crate::sandbox::error::SandboxError;

/// A lease container may sit in `created` this long (its run is between the create and the
/// start calls) before it counts as dead.
const LEASE_START_GRACE: u64 = 60;
/// Orphans found by a first listing are removed only if a second listing this much later
/// still finds them orphaned (a run whose lease connection dropped starts a new one at once).
const RECHECK_AFTER: Duration = Duration::from_secs(2);

/// One labelled container.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedContainer {
    /// Container id.
    pub id: String,
    /// Container name (without the leading `/`).
    pub name: String,
    /// `sandbox` (a task's or the pool's container), `lease`, or empty for containers of
    /// releases before leases.
    pub role: String,
    /// The task id label (`pool` for a pre-started container).
    pub task_id: String,
    /// The environment's name.
    pub env: String,
    /// The image.
    pub image: String,
    /// `running`, `exited`, `created`, ….
    pub state: String,
    /// The owner recorded in the labels (`None` without a run id).
    pub owner: Option<Owner>,
    /// Whether the owning run holds a live lease.
    pub owner_alive: bool,
    /// Creation time (Unix seconds).
    pub created: u64,
    /// When the daemon stops it (Unix seconds).
    pub deadline: Option<u64>,
}

impl ManagedContainer {
    /// True when nothing will clean this container up: its run has no live lease (a lease
    /// itself: it no longer runs), or — for a container without a run id, from a release before
    /// leases — its deadline has passed.
    pub fn is_orphan(&self, now: u64) -> bool {
        if self.role == ROLE_LEASE {
            return !lease_is_live(&self.state, self.created, now);
        }
        match &self.owner {
            Some(_) => !self.owner_alive,
            None => self.deadline.is_some_and(|d| d < now),
        }
    }
}

/// A lease stands for a live run while it runs (or is paused), or is still being started.
fn lease_is_live(state: &str, created: u64, now: u64) -> bool {
    match state {
        "running" | "paused" => true,
        "created" => now.saturating_sub(created) < LEASE_START_GRACE,
        _ => false,
    }
}

/// Every container with this project's label, running or not, each with its run's liveness.
pub async fn list(docker: &Docker) -> Result<Vec<ManagedContainer>, SandboxError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_MANAGED}=1")],
        )])),
        ..Default::default()
    };
    let summaries = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| SandboxError::docker("listing containers", e))?;
    let mut containers: Vec<ManagedContainer> = summaries
        .into_iter()
        .map(|c| {
            let labels = c.labels.unwrap_or_default();
            let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
            ManagedContainer {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_owned(),
                role: label(LABEL_ROLE),
                task_id: label(LABEL_TASK),
                env: label(LABEL_ENV),
                image: c.image.unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                owner: Owner::from_labels(&labels),
                owner_alive: false,
                created: label(LABEL_CREATED)
                    .parse()
                    .unwrap_or(c.created.unwrap_or(0).max(0) as u64),
                deadline: label(LABEL_DEADLINE).parse().ok(),
            }
        })
        .collect();
    let now = unix_now();
    let live_runs: HashSet<String> = containers
        .iter()
        .filter(|c| c.role == ROLE_LEASE && lease_is_live(&c.state, c.created, now))
        .filter_map(|c| c.owner.as_ref().map(|o| o.run_id.clone()))
        .collect();
    for c in &mut containers {
        c.owner_alive = c
            .owner
            .as_ref()
            .is_some_and(|o| live_runs.contains(&o.run_id));
    }
    Ok(containers)
}

/// Removes orphaned containers (or, with `all`, every labelled container) and the groups'
/// snapshot images of runs that are gone; returns the containers removed. An orphan (container
/// or snapshot) is removed only when a second listing confirms it.
pub async fn reap(docker: &Docker, all: bool) -> Result<Vec<ManagedContainer>, SandboxError> {
    let removed = reap_containers(docker, all).await?;
    // Then the snapshots, which the removed containers no longer use.
    reap_snapshots(docker, all).await?;
    Ok(removed)
}

async fn reap_containers(
    docker: &Docker,
    all: bool,
) -> Result<Vec<ManagedContainer>, SandboxError> {
    let targets: Vec<ManagedContainer> = if all {
        list(docker).await?
    } else {
        let first = orphans(docker).await?;
        if first.is_empty() {
            return Ok(Vec::new());
        }
        tokio::time::sleep(RECHECK_AFTER).await;
        let confirmed: HashSet<String> = orphans(docker).await?.into_iter().map(|c| c.id).collect();
        first
            .into_iter()
            .filter(|c| confirmed.contains(&c.id))
            .collect()
    };
    let removals = targets.iter().map(|c| async move {
        if is_listed_only(docker, &c.id).await {
            return Err(true);
        }
        match remove_container(docker, &c.id).await {
            Ok(()) => Ok(c.clone()),
            Err(e) => {
                warn!("reaper: {e}");
                Err(false)
            }
        }
    });
    let results = futures::future::join_all(removals).await;
    let ghosts = results.iter().filter(|r| matches!(r, Err(true))).count();
    if ghosts > 0 {
        warn!(
            "reaper: the daemon lists {ghosts} container(s) it cannot find by id (entries a \
             daemon restart left while their removal was in progress); there is nothing of them \
             to remove through its API"
        );
    }
    let removed: Vec<ManagedContainer> = results.into_iter().flatten().collect();
    if !removed.is_empty() {
        info!(
            "reaper: removed {} orphaned sandbox container(s) of runs that are gone",
            removed.len()
        );
    }
    Ok(removed)
}

/// Removes the groups' snapshot images of runs that hold no live lease, confirmed by a second
/// listing (with `all`, every one); returns how many.
async fn reap_snapshots(docker: &Docker, all: bool) -> Result<usize, SandboxError> {
    let options = ListImagesOptions {
        all: false,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_ROLE}={ROLE_SNAPSHOT}")],
        )])),
        ..Default::default()
    };
    let images = docker
        .list_images(Some(options))
        .await
        .map_err(|e| SandboxError::docker("listing snapshot images", e))?;
    if images.is_empty() {
        return Ok(0);
    }
    let run_of =
        |image: &bollard::models::ImageSummary| Owner::from_labels(&image.labels).map(|o| o.run_id);
    let mut doomed: Vec<_> = images.iter().collect();
    if !all {
        // As for containers, a second listing confirms the run is gone: a run whose lease
        // connection dropped starts a new lease at once, and its groups still fork.
        for pass in 0..2 {
            if pass == 1 {
                tokio::time::sleep(RECHECK_AFTER).await;
            }
            let live = live_runs(docker).await?;
            doomed.retain(|image| !run_of(image).is_some_and(|r| live.contains(&r)));
            if doomed.is_empty() {
                return Ok(0);
            }
        }
    }
    let mut removed = 0;
    for image in doomed {
        match super::fork::remove_image(docker, &image.id).await {
            Ok(()) => removed += 1,
            Err(e) => warn!("reaper: {e}"),
        }
    }
    if removed > 0 {
        info!("reaper: removed {removed} snapshot image(s) of runs that are gone");
    }
    Ok(removed)
}

/// The runs that hold a live lease, as the listing judges them.
async fn live_runs(docker: &Docker) -> Result<HashSet<String>, SandboxError> {
    Ok(list(docker)
        .await?
        .into_iter()
        .filter(|c| c.owner_alive)
        .filter_map(|c| c.owner.map(|o| o.run_id))
        .collect())
}

/// True when the daemon's listing shows `id` but the daemon cannot find it (a 404 on
/// inspection): a listing entry, not a container.
async fn is_listed_only(docker: &Docker, id: &str) -> bool {
    matches!(
        docker.inspect_container(id, None).await,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        })
    )
}

async fn orphans(docker: &Docker) -> Result<Vec<ManagedContainer>, SandboxError> {
    let now = unix_now();
    Ok(list(docker)
        .await?
        .into_iter()
        .filter(|c| c.is_orphan(now))
        .collect())
}

/// Reaps on every daemon a provider of this process used (the end of a run: this process's
/// own containers and lease are already removed, so what is left of it is reaped as well).
pub async fn reap_after_run() {
    for endpoint in daemons() {
        let result = match endpoint.client() {
            Ok(docker) => reap(&docker, false).await,
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            warn!("end-of-run reaper at {}: {e}", endpoint.host);
        }
    }
}

/// The reaper running every `interval` during a run; stops when dropped.
#[derive(Debug)]
pub(crate) struct Periodic(JoinHandle<()>);

impl Periodic {
    /// Starts reaping on `docker` every `interval` (the first pass after one interval: the
    /// start-up reaper has just run).
    pub fn start(docker: Docker, interval: Duration) -> Periodic {
        Periodic(tokio::spawn(async move {
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(e) = reap(&docker, false).await {
                    warn!(
                        "periodic reaper: {e} (next pass in {}s; --env.sandbox_reap_interval)",
                        interval.as_secs_f64()
                    );
                }
            }
        }))
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::backends::docker::ROLE_SANDBOX;

    /// The labels of run `r`'s containers and images, as JSON.
    fn run_labels(r: &str, role: &str) -> String {
        format!(
            r#"{{"hermes-env":"1","hermes-env.role":"{role}","hermes-env.run-id":"{r}","hermes-env.owner-pid":"1","hermes-env.owner-start":"1","hermes-env.owner-host":"h"}}"#
        )
    }

    /// A daemon holding run `r`'s group snapshot and no container of it, until the listing
    /// numbered `lease_from` (1-based) and after, which shows the run's lease running.
    async fn snapshot_daemon(lease_from: usize) -> super::super::fake::Seen {
        let mut listings = 0;
        let (docker, seen) = super::super::fake::daemon(move |line| {
            if line.contains("/containers/json") {
                listings += 1;
                if listings < lease_from {
                    return ("200 OK", "[]".into());
                }
                let lease = format!(
                    r#"[{{"Id":"lease","Names":["/hermes-lease-r"],"Image":"i","State":"running","Created":{},"Labels":{}}}]"#,
                    unix_now(),
                    run_labels("r", ROLE_LEASE)
                );
                return ("200 OK", lease);
            }
            if line.contains("/images/json") {
                let image = format!(
                    r#"[{{"Id":"sha256:s","ParentId":"","RepoTags":["hermes-env-snapshot:r-g"],"RepoDigests":[],"Created":1,"Size":1,"SharedSize":-1,"VirtualSize":1,"Labels":{},"Containers":-1}}]"#,
                    run_labels("r", ROLE_SNAPSHOT)
                );
                return ("200 OK", image);
            }
            ("200 OK", "[]".into())
        })
        .await;
        reap(&docker, false).await.expect("reap");
        seen
    }

    #[tokio::test]
    async fn a_snapshot_whose_run_takes_a_lease_between_the_listings_is_kept() {
        // Listings: containers (none: nothing to reap), then the snapshots' runs twice; the
        // lease is back at the second of those.
        let seen = snapshot_daemon(3).await;
        assert!(
            !seen.methods().iter().any(|m| m == "DELETE"),
            "{:?}",
            seen.lines()
        );
        // Gone at both listings: removed.
        let seen = snapshot_daemon(usize::MAX).await;
        assert!(
            seen.lines()
                .iter()
                .any(|l| l.starts_with("DELETE") && l.contains("/images/")),
            "{:?}",
            seen.lines()
        );
    }

    #[tokio::test]
    async fn a_listed_container_the_daemon_cannot_find_is_not_reported_removed() {
        // A container of a release before leases, its deadline passed: an orphan, listed
        // (dead, nameless) but unknown to every request by id.
        let (docker, seen) = super::super::fake::daemon(|line| {
            if line.contains("/containers/json") {
                let listed = r#"[{"Id":"ghost","Names":[],"Image":"i","State":"dead","Created":1,"Labels":{"hermes-env":"1","hermes-env.deadline":"1"}}]"#;
                return ("200 OK", listed.into());
            }
            if line.contains("/images/json") {
                return ("200 OK", "[]".into());
            }
            ("404 Not Found", r#"{"message":"No such container: ghost"}"#.into())
        })
        .await;
        let removed = reap(&docker, false).await.expect("reap");
        assert!(removed.is_empty(), "{removed:?}");
        assert!(
            !seen.methods().iter().any(|m| m == "DELETE"),
            "{:?}",
            seen.lines()
        );
    }

    fn container(role: &str, state: &str, owner: Option<Owner>, alive: bool) -> ManagedContainer {
        ManagedContainer {
            id: "id".into(),
            name: "n".into(),
            role: role.into(),
            task_id: "t".into(),
            env: "e".into(),
            image: "i".into(),
            state: state.into(),
            owner,
            owner_alive: alive,
            created: 1000,
            deadline: Some(2000),
        }
    }

    #[test]
    fn a_live_lease_protects_its_run_whatever_the_deadline() {
        let me = Some(Owner::new_run());
        assert!(!container(ROLE_SANDBOX, "running", me.clone(), true).is_orphan(5000));
        assert!(!container(ROLE_SANDBOX, "created", me.clone(), true).is_orphan(5000));
        assert!(container(ROLE_SANDBOX, "running", me.clone(), false).is_orphan(1500));
        assert!(container(ROLE_SANDBOX, "created", me, false).is_orphan(1500));
    }

    #[test]
    fn leases_live_while_running_or_just_created() {
        let me = Some(Owner::new_run());
        assert!(!container(ROLE_LEASE, "running", me.clone(), true).is_orphan(9000));
        assert!(!container(ROLE_LEASE, "created", me.clone(), true).is_orphan(1030));
        assert!(container(ROLE_LEASE, "created", me.clone(), true).is_orphan(1100));
        assert!(container(ROLE_LEASE, "exited", me, true).is_orphan(1001));
    }

    #[test]
    fn containers_without_a_run_id_go_only_past_their_deadline() {
        assert!(!container("", "running", None, false).is_orphan(1500));
        assert!(container("", "running", None, false).is_orphan(2500));
    }
}
