//! Reconciling by label: lists this project's containers and removes orphans — those whose
//! owning process is gone (running or exited) or whose deadline label has passed. Runs at the
//! start of every Docker-backed run and behind `sandbox list|reap`.

use std::collections::HashMap;

use bollard::query_parameters::ListContainersOptions;
use bollard::Docker;
use tracing::{info, warn};

use super::lifecycle::{remove_container, unix_now};
use super::{Owner, LABEL_CREATED, LABEL_DEADLINE, LABEL_ENV, LABEL_MANAGED, LABEL_TASK};
use crate::sandbox::SandboxError;

/// One labelled container.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedContainer {
    /// Container id.
    pub id: String,
    /// Container name (without the leading `/`).
    pub name: String,
    /// The task id label (`pool` for a pre-started container).
    pub task_id: String,
    /// The environment's name.
    pub env: String,
    /// The image.
    pub image: String,
    /// `running`, `exited`, `created`, ….
    pub state: String,
    /// The owner recorded in the labels, if they are complete.
    pub owner: Option<Owner>,
    /// Whether the owner still runs (`None` = on another host, unknowable).
    pub owner_alive: Option<bool>,
    /// Creation time (Unix seconds).
    pub created: u64,
    /// Deadline (Unix seconds).
    pub deadline: Option<u64>,
}

impl ManagedContainer {
    /// True when nothing will clean this container up: its owner is gone (or unrecorded), or
    /// its deadline has passed.
    pub fn is_orphan(&self, now: u64) -> bool {
        let owner_gone = match (&self.owner, self.owner_alive) {
            (None, _) => true,
            (Some(_), Some(alive)) => !alive,
            (Some(_), None) => false,
        };
        owner_gone || self.deadline.is_some_and(|d| d < now)
    }
}

/// Every container with this project's label, running or not.
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
        .map_err(|e| SandboxError::Daemon(format!("listing containers: {e}")))?;
    Ok(summaries
        .into_iter()
        .map(|c| {
            let labels = c.labels.unwrap_or_default();
            let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let owner = Owner::from_labels(&labels);
            let owner_alive = owner.as_ref().and_then(Owner::is_alive);
            ManagedContainer {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_owned(),
                task_id: label(LABEL_TASK),
                env: label(LABEL_ENV),
                image: c.image.unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                owner,
                owner_alive,
                created: label(LABEL_CREATED)
                    .parse()
                    .unwrap_or(c.created.unwrap_or(0).max(0) as u64),
                deadline: label(LABEL_DEADLINE).parse().ok(),
            }
        })
        .collect())
}

/// Removes orphaned containers (or, with `all`, every labelled container); returns the ones
/// removed.
pub async fn reap(docker: &Docker, all: bool) -> Result<Vec<ManagedContainer>, SandboxError> {
    let now = unix_now();
    let targets: Vec<ManagedContainer> = list(docker)
        .await?
        .into_iter()
        .filter(|c| all || c.is_orphan(now))
        .collect();
    let removals = targets.iter().map(|c| async move {
        match remove_container(docker, &c.id).await {
            Ok(()) => Some(c.clone()),
            Err(e) => {
                warn!("reaper: {e}");
                None
            }
        }
    });
    let removed: Vec<ManagedContainer> = futures::future::join_all(removals)
        .await
        .into_iter()
        .flatten()
        .collect();
    if !removed.is_empty() {
        info!(
            "reaper: removed {} orphaned sandbox container(s) left by earlier runs",
            removed.len()
        );
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(
        owner: Option<Owner>,
        alive: Option<bool>,
        deadline: Option<u64>,
    ) -> ManagedContainer {
        ManagedContainer {
            id: "id".into(),
            name: "n".into(),
            task_id: "t".into(),
            env: "e".into(),
            image: "i".into(),
            state: "running".into(),
            owner,
            owner_alive: alive,
            created: 0,
            deadline,
        }
    }

    #[test]
    fn orphans_are_dead_owners_missing_owners_and_expired_deadlines() {
        let me = Some(Owner::current());
        assert!(!container(me.clone(), Some(true), Some(200)).is_orphan(100));
        assert!(container(me.clone(), Some(false), Some(200)).is_orphan(100));
        assert!(container(None, None, Some(200)).is_orphan(100));
        assert!(container(me.clone(), Some(true), Some(50)).is_orphan(100));
        assert!(!container(me, None, None).is_orphan(100));
    }
}
