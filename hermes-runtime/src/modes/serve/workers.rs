//! Serve's worker pool: one task per item collecting its group, kept at the worker cap
//! (cancelled workers' items go back to a backlog and run again first), cancelled by
//! `worker_timeout`, and the bookkeeping of each finished task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::{AbortHandle, JoinError, JoinSet};
use tracing::warn;

use crate::env::Environment;
use crate::modes::rollout::{collect_group, GroupRun, Runtime, SharedEnv};

/// A finished worker task, as [`Workers::join_next`] gives it.
pub(super) type Joined<I> = Result<(u64, GroupRun<I>), JoinError>;

/// One running worker.
struct Worker<I> {
    /// Matches the task's result to this worker.
    id: u64,
    /// The item, kept to put it back in the backlog when the worker is cancelled.
    item: I,
    /// For `worker_timeout` and the task-duration metrics.
    started: Instant,
    /// Cancels the task.
    abort: AbortHandle,
}

/// How a finished worker task ends for the loop.
pub(super) enum Done<I> {
    /// Its group run (sent, dropped or a failed item), after `took`.
    Group {
        /// What the group's rollouts produced (boxed: the other variants are empty).
        run: Box<GroupRun<I>>,
        /// Time since the worker started.
        took: Duration,
    },
    /// The task failed (panicked): its item is lost.
    Lost,
    /// It had been cancelled (paused, timed out), possibly after finishing: nothing to do.
    Discarded,
}

/// The running workers, their tasks and the backlog of items of cancelled workers.
pub(super) struct Workers<E: Environment> {
    /// The environment: `get_next_item` for new workers, read by the rollouts.
    env: Arc<SharedEnv<E>>,
    /// The rollouts' services.
    rt: Arc<Runtime>,
    /// The workers' tasks (cancelled ones too, until they have stopped).
    joins: JoinSet<(u64, GroupRun<E::Item>)>,
    /// The workers not cancelled, oldest first.
    running: Vec<Worker<E::Item>>,
    /// Items of cancelled workers, taken before new ones (newest first).
    backlog: Vec<E::Item>,
    /// The next worker's id.
    next_id: u64,
}

impl<E: Environment> Workers<E> {
    /// No workers yet.
    pub(super) fn new(env: Arc<SharedEnv<E>>, rt: Arc<Runtime>) -> Self {
        Workers {
            env,
            rt,
            joins: JoinSet::new(),
            running: Vec::new(),
            backlog: Vec::new(),
            next_id: 0,
        }
    }

    /// Workers running (not cancelled).
    pub(super) fn running(&self) -> usize {
        self.running.len()
    }

    /// Items of cancelled workers waiting to run again.
    pub(super) fn backlog_len(&self) -> usize {
        self.backlog.len()
    }

    /// True while any task (cancelled ones included) has not been joined.
    pub(super) fn has_tasks(&self) -> bool {
        !self.joins.is_empty()
    }

    /// The next task to finish; `None` when there is none. Cancel-safe.
    pub(super) async fn join_next(&mut self) -> Option<Joined<E::Item>> {
        self.joins.join_next().await
    }

    /// Cancels the oldest workers down to `cap` (their items to the backlog), then starts
    /// workers up to `cap` with items from the backlog, else `get_next_item` while it has some.
    pub(super) async fn fill_to(&mut self, cap: usize) {
        while self.running.len() > cap {
            let w = self.running.remove(0);
            w.abort.abort();
            self.backlog.push(w.item);
        }
        while self.running.len() < cap {
            let item = match self.backlog.pop() {
                Some(i) => i,
                None => match self.env.0.write().await.get_next_item().await {
                    Some(i) => i,
                    None => break,
                },
            };
            self.spawn(item);
        }
    }

    fn spawn(&mut self, item: E::Item) {
        let id = self.next_id;
        self.next_id += 1;
        let env = Arc::clone(&self.env);
        let rt = Arc::clone(&self.rt);
        let task_item = item.clone();
        let abort = self.joins.spawn(async move {
            let out = collect_group(&*env, &rt, task_item).await;
            (id, out)
        });
        self.running.push(Worker {
            id,
            item,
            started: Instant::now(),
            abort,
        });
    }

    /// Cancels every worker; their items go to the backlog.
    pub(super) fn cancel_all_to_backlog(&mut self) {
        for w in self.running.drain(..) {
            w.abort.abort();
            self.backlog.push(w.item);
        }
    }

    /// Cancels the workers running longer than `worker_timeout` (their items dropped);
    /// returns how many.
    pub(super) fn expire(&mut self) -> usize {
        let limit = self.rt.config().worker_timeout;
        if limit <= 0.0 {
            return 0;
        }
        let limit = Duration::from_secs_f64(limit);
        let (expired, kept): (Vec<_>, Vec<_>) = self
            .running
            .drain(..)
            .partition(|w| w.started.elapsed() > limit);
        self.running = kept;
        for w in &expired {
            warn!(
                "worker {} exceeded worker_timeout ({limit:?}); its item is dropped",
                w.id
            );
            w.abort.abort();
        }
        expired.len()
    }

    /// Settles a finished task (from [`Workers::join_next`]): its worker stops counting.
    pub(super) fn complete(&mut self, done: Joined<E::Item>) -> Done<E::Item> {
        let (id, run) = match done {
            Ok(v) => v,
            Err(e) if e.is_cancelled() => return Done::Discarded,
            Err(e) => {
                let id = e.id();
                warn!("a worker failed: {e}; its item is lost");
                self.running.retain(|w| w.abort.id() != id);
                return Done::Lost;
            }
        };
        let Some(took) = self
            .running
            .iter()
            .find(|w| w.id == id)
            .map(|w| w.started.elapsed())
        else {
            // Cancelled (paused, timed out) after it had already finished: discard.
            return Done::Discarded;
        };
        self.running.retain(|w| w.id != id);
        Done::Group {
            run: Box::new(run),
            took,
        }
    }

    /// Cancels every worker and waits until all their tasks have stopped.
    pub(super) async fn abort_all(&mut self) {
        for w in self.running.drain(..) {
            w.abort.abort();
        }
        self.joins.abort_all();
        while self.joins.join_next().await.is_some() {}
    }
}
