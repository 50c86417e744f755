//! One bounded queue of work on one host: at most its size at once, the rest waiting here,
//! where the wait counts toward no timeout. A queue whose work waits longer than
//! [`SATURATED_AFTER`] writes one INFO line naming the host, the queue and its knob, at most
//! once per [`SAY_EVERY`].
//!
//! The Docker backend bounds each kind of daemon request with one; every backend bounds the
//! commands running in its host's sandboxes with one ([`Queue::running`]): hundreds of commands
//! at once on a few cores all slow down until their timeouts (and the wall-clock limits inside
//! verifiers) fire, which turns load into failures and wrong rewards.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::info;

use super::error::SandboxError;

/// Work that waits this long for its slot means the queue is saturated …
const SATURATED_AFTER: Duration = Duration::from_secs(2);
/// … which one line per queue says at most this often.
const SAY_EVERY: Duration = Duration::from_secs(60);
/// A command running this long gives its place back (it keeps running), so a hung command
/// holds the queue this long, not for its timeout.
pub(crate) const RUN_SLICE: Duration = Duration::from_secs(5);
/// The default budget of commands running at once, per CPU of the host they run on.
pub(crate) const RUN_PER_CPU: usize = 4;
/// The flag that sets the commands' budget.
pub(crate) const RUN_KNOB: &str = "--env.sandbox_command_concurrency";

/// The budget of commands running at once on a host with `cpus` CPUs: `at_once` when set
/// (above 0), else [`RUN_PER_CPU`] per CPU.
pub(crate) fn commands_at_once(at_once: usize, cpus: usize) -> usize {
    match at_once {
        0 => RUN_PER_CPU * cpus.max(1),
        n => n,
    }
}

/// What a queue holds and where, for its saturation line.
#[derive(Debug, Clone)]
pub(crate) struct QueueName {
    /// The host: "Docker daemon at unix:///var/run/docker.sock".
    pub place: String,
    /// What waits: "exec starts".
    pub what: &'static str,
    /// Where it waits and when its timeouts start.
    pub note: &'static str,
    /// The flag that sets the size.
    pub knob: &'static str,
}

impl QueueName {
    /// The queue of the commands running in `place`'s sandboxes.
    pub(crate) fn commands(place: String) -> Self {
        QueueName {
            place,
            what: "commands",
            note: "queued in this process; their timeouts start when they run",
            knob: RUN_KNOB,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Queue {
    name: QueueName,
    size: usize,
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// When the saturation line was last written.
    said: Mutex<Option<Instant>>,
    /// Saturation lines written.
    lines: AtomicUsize,
}

/// A slot in a queue: the work it covers holds it until it is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Queue {
    pub(crate) fn new(name: QueueName, size: usize) -> Self {
        let size = size.max(1);
        Queue {
            name,
            size,
            slots: Arc::new(Semaphore::new(size)),
            waiting: AtomicUsize::new(0),
            said: Mutex::new(None),
            lines: AtomicUsize::new(0),
        }
    }

    /// The queue of the commands running in `place`'s sandboxes, on a host with `cpus` CPUs
    /// ([`commands_at_once`]).
    pub(crate) fn commands(place: String, at_once: usize, cpus: usize) -> Self {
        Queue::new(QueueName::commands(place), commands_at_once(at_once, cpus))
    }

    /// Waits for a slot (no timeout: the work's own starts once it holds one).
    pub(crate) async fn slot(&self) -> Result<Slot, SandboxError> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(Slot { _permit: permit });
        }
        self.waiting.fetch_add(1, Relaxed);
        let _waiting = Waiting(&self.waiting);
        let acquire = Arc::clone(&self.slots).acquire_owned();
        tokio::pin!(acquire);
        let permit = tokio::select! {
            permit = &mut acquire => permit,
            () = tokio::time::sleep(SATURATED_AFTER) => {
                self.say_saturated();
                acquire.await
            }
        };
        permit
            .map(|permit| Slot { _permit: permit })
            .map_err(|_| SandboxError::Daemon("the sandbox provider is shutting down".into()))
    }

    /// Runs `command` (a command in a sandbox of this host) once it has a slot; the slot is
    /// given back when it ends or after [`RUN_SLICE`], whichever comes first.
    pub(crate) async fn running<T>(
        &self,
        command: impl Future<Output = Result<T, SandboxError>>,
    ) -> Result<T, SandboxError> {
        let place = self.slot().await?;
        tokio::pin!(command);
        tokio::select! {
            done = &mut command => return done,
            () = tokio::time::sleep(RUN_SLICE) => drop(place),
        }
        command.await
    }

    /// Work waiting now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    /// Saturation lines written so far.
    #[cfg(test)]
    pub(crate) fn lines(&self) -> usize {
        self.lines.load(Relaxed)
    }

    fn say_saturated(&self) {
        let now = Instant::now();
        {
            let Ok(mut said) = self.said.lock() else {
                return;
            };
            if said.is_some_and(|at| now.duration_since(at) < SAY_EVERY) {
                return;
            }
            *said = Some(now);
        }
        self.lines.fetch_add(1, Relaxed);
        let QueueName {
            place,
            what,
            note,
            knob,
        } = &self.name;
        info!(
            "{place}: {} {what} waiting for one of {} slots ({note}); {knob} sets the slots",
            self.waiting.load(Relaxed),
            self.size,
        );
    }
}

/// Counts work as waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(size: usize) -> Queue {
        Queue::new(QueueName::commands("test host".into()), size)
    }

    #[test]
    fn the_commands_budget_is_the_flag_else_four_per_cpu() {
        assert_eq!(commands_at_once(3, 2), 3);
        assert_eq!(commands_at_once(0, 2), 8);
        assert_eq!(
            commands_at_once(0, 0),
            4,
            "a host that says no CPUs counts as one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_saturated_queue_says_so_once_per_interval() {
        let queue = queue(1);
        let held = queue.slot().await.unwrap();
        let waiters: Vec<_> = (0..5)
            .map(|_| async { queue.slot().await.is_ok() })
            .collect();
        let all = futures::future::join_all(waiters);
        tokio::pin!(all);
        assert!(tokio::time::timeout(SATURATED_AFTER * 2, &mut all)
            .await
            .is_err());
        // Five waiting saturated the queue: one line, not five.
        assert_eq!(queue.lines(), 1);
        drop(held);
        assert_eq!(all.await, vec![true; 5]);
        assert_eq!(queue.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn commands_run_at_most_their_budget_at_once() {
        let queue = queue(2);
        let now = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let command = || async {
            let n = now.fetch_add(1, Relaxed) + 1;
            most.fetch_max(n, Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            now.fetch_sub(1, Relaxed);
            Ok::<_, SandboxError>(())
        };
        let all = futures::future::join_all((0..6).map(|_| queue.running(command())));
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
        let queue = queue(1);
        let hung = queue.running(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, SandboxError>(())
        });
        tokio::pin!(hung);
        // The hung command holds the only place …
        assert!(tokio::time::timeout(Duration::from_millis(10), &mut hung)
            .await
            .is_err());
        let started = Instant::now();
        let next = queue.running(async { Ok::<_, SandboxError>(started.elapsed()) });
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
