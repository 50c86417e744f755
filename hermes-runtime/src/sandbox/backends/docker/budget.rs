//! Backpressure on one Docker daemon: its requests in flight are bounded per kind (a
//! container's lifecycle, exec creation, archive transfers, the daemon's diff), each kind with a budget of
//! its own, so a slow daemon makes the sandboxes' requests wait here — where the wait counts
//! toward no timeout — instead of piling up in the daemon, where every queued request's
//! timeout runs and one that expires becomes a sandbox failure whose re-run adds more load.
//! The commands running in the daemon's sandboxes are bounded the same way
//! ([`DaemonLanes::running`]).

use crate::sandbox::error::SandboxError;
use crate::sandbox::queue::{Queue, QueueName, Slot};

/// The kinds of daemon requests, each bounded on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A sandbox container's lifecycle: creating and starting it, reading its status,
    /// removing it.
    Create,
    /// Creating and starting an exec (a persistent shell, a one-shot command, a helper).
    Exec,
    /// Archive transfers: uploads, downloads and stats of paths.
    Archive,
    /// The daemon's filesystem diff of a container (`GET /containers/{id}/changes`).
    Changes,
}

impl Lane {
    const ALL: [Lane; 4] = [Lane::Create, Lane::Exec, Lane::Archive, Lane::Changes];

    /// The flag that sets this lane's budget.
    pub(crate) fn knob(self) -> &'static str {
        match self {
            Lane::Create => "--env.sandbox_create_concurrency",
            Lane::Exec => "--env.sandbox_exec_concurrency",
            Lane::Archive => "--env.sandbox_archive_concurrency",
            Lane::Changes => "--env.sandbox_diff_concurrency",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Lane::Create => "container creations, status reads and removals",
            Lane::Exec => "exec starts",
            Lane::Archive => "archive transfers",
            Lane::Changes => "filesystem diffs",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The budget of each lane (from the settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Container creations (create + start), status reads and removals in flight at once.
    pub create: usize,
    /// Exec creations and starts in flight at once.
    pub exec: usize,
    /// Archive uploads, downloads and stats in flight at once.
    pub archive: usize,
    /// Daemon diffs in flight at once.
    pub changes: usize,
    /// Commands running in the daemon's sandboxes at once.
    pub run: usize,
}

impl Budgets {
    fn of(&self, lane: Lane) -> usize {
        match lane {
            Lane::Create => self.create,
            Lane::Exec => self.exec,
            Lane::Archive => self.archive,
            Lane::Changes => self.changes,
        }
    }
}

/// The lanes of one daemon, and the commands running in its sandboxes.
#[derive(Debug)]
pub(crate) struct DaemonLanes {
    queues: [Queue; 4],
    commands: Queue,
}

impl DaemonLanes {
    pub(crate) fn new(host: &str, budgets: Budgets) -> Self {
        let place = format!("Docker daemon at {host}");
        DaemonLanes {
            queues: Lane::ALL.map(|lane| {
                let name = QueueName {
                    place: place.clone(),
                    what: lane.what(),
                    note: "queued here, not in the daemon; their timeouts start when sent",
                    knob: lane.knob(),
                };
                Queue::new(name, budgets.of(lane))
            }),
            commands: Queue::new(QueueName::commands(place), budgets.run),
        }
    }

    /// Waits for a slot in `lane` (no timeout: a request's timeout starts once it holds one).
    pub(crate) async fn slot(&self, lane: Lane) -> Result<Slot, SandboxError> {
        self.queues[lane.index()].slot().await
    }

    /// Runs `command` (a command in one of the daemon's sandboxes) in its turn
    /// ([`Queue::running`]).
    pub(crate) async fn running<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, SandboxError>>,
    ) -> Result<T, SandboxError> {
        self.commands.running(command).await
    }

    /// Requests waiting in `lane` now.
    #[cfg(test)]
    fn waiting(&self, lane: Lane) -> usize {
        self.queues[lane.index()].waiting()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn lanes(size: usize) -> DaemonLanes {
        DaemonLanes::new(
            "unix:///test.sock",
            Budgets {
                create: size,
                exec: size,
                archive: size,
                changes: size,
                run: size,
            },
        )
    }

    #[tokio::test]
    async fn a_lane_holds_at_most_its_budget_and_others_are_independent() {
        let lanes = lanes(2);
        let a = lanes.slot(Lane::Exec).await.unwrap();
        let _b = lanes.slot(Lane::Exec).await.unwrap();
        // Full: a third waits …
        let third = lanes.slot(Lane::Exec);
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut third)
                .await
                .is_err(),
            "a third exec slot was granted over a budget of 2"
        );
        assert_eq!(lanes.waiting(Lane::Exec), 1);
        // … while another lane is not held up by it.
        let _archive = lanes.slot(Lane::Archive).await.unwrap();
        drop(a);
        let _c = tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("the freed slot went to the waiting request")
            .unwrap();
        assert_eq!(lanes.waiting(Lane::Exec), 0);
    }
}
