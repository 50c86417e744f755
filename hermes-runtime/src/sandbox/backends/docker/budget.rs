//! Backpressure on one Docker daemon: its requests in flight are bounded per kind (a
//! container's lifecycle, exec creation, archive transfers, the daemon's diff), each kind with a budget of
//! its own, so a slow daemon makes the sandboxes' requests wait here — where the wait counts
//! toward no timeout — instead of piling up in the daemon, where every queued request's
//! timeout runs and one that expires becomes a sandbox failure whose re-run adds more load.
//!
//! The commands running in the host's sandboxes are bounded the same way: hundreds of them at
//! once on a few cores all slow down until their timeouts (and the wall-clock limits inside
//! verifiers) fire, which turns load into failures and wrong rewards. A command waits for its
//! place before it is sent, and one that runs past [`RUN_SLICE`] gives its place back, so a
//! hung command cannot hold the queue.
//!
//! Waiting is visible: a queue whose requests wait longer than [`SATURATED_AFTER`] writes one
//! INFO line naming the daemon, the queue and its knob, at most once per [`SAY_EVERY`].

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::info;

use crate::sandbox::error::SandboxError;

/// A request that waits this long for its slot means the queue is saturated …
pub(crate) const SATURATED_AFTER: Duration = Duration::from_secs(2);
/// … which one line per queue says at most this often.
pub(crate) const SAY_EVERY: Duration = Duration::from_secs(60);
/// A command running this long gives its place in [`Lane::Run`] back (it keeps running).
pub(crate) const RUN_SLICE: Duration = Duration::from_secs(5);
/// The default [`Lane::Run`] budget per CPU of the daemon's host.
pub(crate) const RUN_PER_CPU: usize = 4;

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
    /// Commands running in the host's sandboxes (tool calls, verifier commands, tripwire
    /// checks), each for at most [`RUN_SLICE`].
    Run,
}

impl Lane {
    const ALL: [Lane; 5] = [
        Lane::Create,
        Lane::Exec,
        Lane::Archive,
        Lane::Changes,
        Lane::Run,
    ];

    /// The flag that sets this lane's budget.
    pub(crate) fn knob(self) -> &'static str {
        match self {
            Lane::Create => "--env.sandbox_create_concurrency",
            Lane::Exec => "--env.sandbox_exec_concurrency",
            Lane::Archive => "--env.sandbox_archive_concurrency",
            Lane::Changes => "--env.sandbox_diff_concurrency",
            Lane::Run => "--env.sandbox_command_concurrency",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Lane::Create => "container creations, status reads and removals",
            Lane::Exec => "exec starts",
            Lane::Archive => "archive transfers",
            Lane::Changes => "filesystem diffs",
            Lane::Run => "commands",
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
    /// Commands running in the host's sandboxes at once.
    pub run: usize,
}

impl Budgets {
    fn of(&self, lane: Lane) -> usize {
        match lane {
            Lane::Create => self.create,
            Lane::Exec => self.exec,
            Lane::Archive => self.archive,
            Lane::Changes => self.changes,
            Lane::Run => self.run,
        }
        .max(1)
    }
}

#[derive(Debug)]
struct Queue {
    lane: Lane,
    size: usize,
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// When the saturation line was last written.
    said: Mutex<Option<Instant>>,
    /// Saturation lines written.
    lines: AtomicUsize,
}

/// The lanes of one daemon.
#[derive(Debug)]
pub(crate) struct DaemonLanes {
    host: String,
    queues: [Queue; 5],
}

/// A slot in a lane: the request it covers is in flight until it is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl DaemonLanes {
    pub(crate) fn new(host: &str, budgets: Budgets) -> Self {
        DaemonLanes {
            host: host.to_owned(),
            queues: Lane::ALL.map(|lane| Queue {
                lane,
                size: budgets.of(lane),
                slots: Arc::new(Semaphore::new(budgets.of(lane))),
                waiting: AtomicUsize::new(0),
                said: Mutex::new(None),
                lines: AtomicUsize::new(0),
            }),
        }
    }

    /// Waits for a slot in `lane` (no timeout: a request's timeout starts once it holds one).
    pub(crate) async fn slot(&self, lane: Lane) -> Result<Slot, SandboxError> {
        let queue = &self.queues[lane.index()];
        if let Ok(permit) = Arc::clone(&queue.slots).try_acquire_owned() {
            return Ok(Slot { _permit: permit });
        }
        queue.waiting.fetch_add(1, Relaxed);
        let _waiting = Waiting(&queue.waiting);
        let acquire = Arc::clone(&queue.slots).acquire_owned();
        tokio::pin!(acquire);
        let permit = tokio::select! {
            permit = &mut acquire => permit,
            () = tokio::time::sleep(SATURATED_AFTER) => {
                self.say_saturated(queue);
                acquire.await
            }
        };
        permit
            .map(|permit| Slot { _permit: permit })
            .map_err(|_| SandboxError::Daemon("the sandbox provider is shutting down".into()))
    }

    /// Runs `command` (a command in a sandbox of this host) once it has a place in
    /// [`Lane::Run`]; its place is given back when it ends or after [`RUN_SLICE`], whichever
    /// comes first. The wait counts toward no timeout: `command`'s own starts when it runs.
    pub(crate) async fn running<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, SandboxError>>,
    ) -> Result<T, SandboxError> {
        let place = self.slot(Lane::Run).await?;
        tokio::pin!(command);
        tokio::select! {
            done = &mut command => return done,
            () = tokio::time::sleep(RUN_SLICE) => drop(place),
        }
        command.await
    }

    /// Requests waiting in `lane` now.
    #[cfg(test)]
    fn waiting(&self, lane: Lane) -> usize {
        self.queues[lane.index()].waiting.load(Relaxed)
    }

    fn say_saturated(&self, queue: &Queue) {
        let now = Instant::now();
        {
            let Ok(mut said) = queue.said.lock() else {
                return;
            };
            if said.is_some_and(|at| now.duration_since(at) < SAY_EVERY) {
                return;
            }
            *said = Some(now);
        }
        queue.lines.fetch_add(1, Relaxed);
        info!(
            "Docker daemon at {}: {} {} waiting for one of {} slots (queued here, not in the \
             daemon; their timeouts start when sent); {} sets the slots",
            self.host,
            queue.waiting.load(Relaxed),
            queue.lane.what(),
            queue.size,
            queue.lane.knob(),
        );
    }
}

/// Counts a request as waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
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

    #[tokio::test(start_paused = true)]
    async fn a_saturated_queue_says_so_once_per_interval() {
        let lanes = lanes(1);
        let held = lanes.slot(Lane::Changes).await.unwrap();
        let waiters: Vec<_> = (0..5)
            .map(|_| async { lanes.slot(Lane::Changes).await.is_ok() })
            .collect();
        let all = futures::future::join_all(waiters);
        tokio::pin!(all);
        assert!(tokio::time::timeout(SATURATED_AFTER * 2, &mut all)
            .await
            .is_err());
        // Five requests saturated the queue: one line, not five.
        let queue = &lanes.queues[Lane::Changes.index()];
        assert_eq!(queue.lines.load(Relaxed), 1);
        drop(held);
        assert_eq!(all.await, vec![true; 5]);
        assert_eq!(lanes.waiting(Lane::Changes), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn commands_run_at_most_their_budget_at_once() {
        let lanes = lanes(2);
        let now = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let command = || async {
            let n = now.fetch_add(1, Relaxed) + 1;
            most.fetch_max(n, Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            now.fetch_sub(1, Relaxed);
            Ok::<_, SandboxError>(())
        };
        let all = futures::future::join_all((0..6).map(|_| lanes.running(command())));
        let started = Instant::now();
        assert!(all.await.iter().all(Result::is_ok));
        assert_eq!(
            most.load(Relaxed),
            2,
            "more commands ran at once than the budget of 2"
        );
        // Six one-second commands, two at a time.
        assert_eq!(started.elapsed().as_secs(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_running_past_its_slice_gives_its_place_back() {
        let lanes = lanes(1);
        let hung = lanes.running(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, SandboxError>(())
        });
        tokio::pin!(hung);
        // The hung command holds the only place …
        assert!(tokio::time::timeout(Duration::from_millis(10), &mut hung)
            .await
            .is_err());
        let started = Instant::now();
        let next = lanes.running(async { Ok::<_, SandboxError>(started.elapsed()) });
        tokio::pin!(next);
        let waited = tokio::select! {
            waited = &mut next => waited.unwrap(),
            _ = &mut hung => unreachable!("the hung command ended"),
        };
        // … until its slice is over: it keeps running, the next command runs beside it.
        assert!(
            waited >= RUN_SLICE - Duration::from_millis(10) && waited <= RUN_SLICE,
            "the next command waited {waited:?}"
        );
    }
}
