//! A group's prepared sandbox: the item's `prepare` runs once, in a sandbox of its own, and
//! the group's rollouts start from copies of it ([`SandboxProvider::prepare`]). Prepared on
//! the first rollout that needs a sandbox, removed when the group closes (or, failing that,
//! when the last holder of the prepared copy drops it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tracing::{info, warn};

use super::api::{Prepared, Sandbox, SandboxProvider, SandboxSpec};
use super::error::SandboxError;

/// One group's source of prepared sandboxes.
pub struct GroupFork {
    group: String,
    provider: Arc<dyn SandboxProvider>,
    /// Preparations tried at most before the group's rollouts all fail with the last error
    /// (a rollout's own attempts: `--env.max_rollout_retries` + 1).
    attempts: u32,
    state: tokio::sync::Mutex<State>,
    /// Set once a rollout's spec differed from the prepared one (said once per group).
    mismatch_said: AtomicBool,
}

enum State {
    /// Not prepared (yet): the failed attempts so far and the last one's reason.
    Unprepared {
        failures: u32,
        last: Option<String>,
    },
    Ready {
        spec: Box<SandboxSpec>,
        prepared: Arc<dyn Prepared>,
    },
    /// The backend cannot copy a sandbox: each rollout prepares its own.
    Unforkable,
    Failed(String),
    Closed,
}

/// Said once per process: the backend prepares per rollout.
static UNFORKABLE_SAID: AtomicBool = AtomicBool::new(false);

impl GroupFork {
    /// A group's source; nothing is prepared until a rollout asks.
    pub fn new(provider: Arc<dyn SandboxProvider>, attempts: u32) -> Arc<Self> {
        let group = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        Arc::new(GroupFork {
            group,
            provider,
            attempts: attempts.max(1),
            state: tokio::sync::Mutex::new(State::Unprepared {
                failures: 0,
                last: None,
            }),
            mismatch_said: AtomicBool::new(false),
        })
    }

    /// A sandbox for `task_id` copied from the group's prepared one (prepared now if it is
    /// not yet); `None` when the rollout must prepare its own (the backend cannot copy, or its
    /// spec is not the one the group prepared).
    pub async fn sandbox(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Sandbox>>, SandboxError> {
        let prepared = {
            let mut state = self.state.lock().await;
            if let State::Unprepared { failures, .. } = &*state {
                let failures = *failures;
                *state = self.prepare(spec, failures).await;
            }
            match &*state {
                State::Ready {
                    spec: theirs,
                    prepared,
                } if **theirs == *spec => Arc::clone(prepared),
                State::Ready { .. } => {
                    if !self.mismatch_said.swap(true, Ordering::Relaxed) {
                        warn!(
                            "group {}: a rollout's sandbox_spec differs from the one the group \
                             prepared (sandbox_spec should depend on the item only); it prepares \
                             its own sandbox",
                            self.group
                        );
                    }
                    return Ok(None);
                }
                State::Unforkable => return Ok(None),
                State::Failed(message) => return Err(SandboxError::Create(message.clone())),
                State::Unprepared { last, .. } => {
                    let reason = last.clone().unwrap_or_default();
                    return Err(SandboxError::Create(reason));
                }
                State::Closed => return Err(SandboxError::Create("the group is closed".into())),
            }
        };
        prepared.fork(task_id, spec).await.map(Some)
    }

    /// Prepares the group's sandbox: the state it leaves.
    async fn prepare(&self, spec: &SandboxSpec, failures: u32) -> State {
        let start = Instant::now();
        match self.provider.prepare(&self.group, spec).await {
            Ok(Some(prepared)) => {
                info!(
                    "group {}: the item's prepare ran once in {:.1} s; its rollouts start from \
                     copies of that sandbox",
                    self.group,
                    start.elapsed().as_secs_f64()
                );
                State::Ready {
                    spec: Box::new(spec.clone()),
                    prepared,
                }
            }
            Ok(None) => {
                if !UNFORKABLE_SAID.swap(true, Ordering::Relaxed) {
                    info!(
                        "this sandbox backend cannot copy a prepared sandbox: each rollout runs \
                         the item's prepare itself"
                    );
                }
                State::Unforkable
            }
            Err(e) => {
                let failures = failures + 1;
                let message = format!("the group's preparation failed: {e}");
                if failures >= self.attempts {
                    warn!(
                        "group {}: {message}; tried {failures} time(s), its rollouts fail \
                         (--env.max_rollout_retries)",
                        self.group
                    );
                    State::Failed(message)
                } else {
                    warn!(
                        "group {}: {message}; the next rollout tries again",
                        self.group
                    );
                    State::Unprepared {
                        failures,
                        last: Some(message),
                    }
                }
            }
        }
    }

    /// Removes the prepared sandbox; later rollouts of the group get none.
    pub async fn close(&self) {
        let state = std::mem::replace(&mut *self.state.lock().await, State::Closed);
        if let State::Ready { prepared, .. } = state {
            if let Err(e) = prepared.remove().await {
                warn!("group {}: removing its prepared sandbox: {e}", self.group);
            }
        }
    }
}
