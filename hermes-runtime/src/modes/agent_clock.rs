//! The clock `--env.rollout_timeout` reads: it runs while the agent works (its tools, its
//! turns) and stops while the rollout waits on inference. A slow inference server is the
//! infrastructure's problem — its calls have their own timeout and fail as `llm` — so it can
//! never turn a rollout into a reward-0 `timeout` that is trained on.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::llm::{ChatBackend, ChatRequest, ChatResponse, LlmError};

/// Agent time spent so far; stopped while any inference call is in flight.
#[derive(Debug)]
pub(crate) struct AgentClock {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug)]
struct State {
    /// Time counted before `running_since`.
    spent: Duration,
    /// When the clock last started; `None` while stopped.
    running_since: Option<Instant>,
    /// Inference calls in flight.
    waiting: u32,
}

impl AgentClock {
    /// A clock that starts running now.
    pub fn start() -> Self {
        AgentClock {
            state: Mutex::new(State {
                spent: Duration::ZERO,
                running_since: Some(Instant::now()),
                waiting: 0,
            }),
            changed: Notify::new(),
        }
    }

    /// The agent time counted so far, and whether the clock is running.
    fn read(&self) -> (Duration, bool) {
        let s = self.lock();
        match s.running_since {
            Some(t) => (s.spent + t.elapsed(), true),
            None => (s.spent, false),
        }
    }

    /// Stops the clock until the returned guard is dropped (one inference call).
    fn waiting_on_inference(&self) -> Waiting<'_> {
        let mut s = self.lock();
        s.waiting += 1;
        if let Some(t) = s.running_since.take() {
            s.spent += t.elapsed();
        }
        Waiting(self)
    }

    /// Completes once `limit` of agent time has been spent.
    pub async fn expired(&self, limit: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (spent, running) = self.read();
            if spent >= limit {
                return;
            }
            if running {
                tokio::select! {
                    () = tokio::time::sleep(limit - spent) => {}
                    () = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("agent clock lock poisoned")
    }
}

/// One inference call in flight; restarts the clock when the last one ends.
struct Waiting<'c>(&'c AgentClock);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        {
            let mut s = self.0.lock();
            s.waiting -= 1;
            if s.waiting == 0 {
                s.running_since = Some(Instant::now());
            }
        }
        self.0.changed.notify_waiters();
    }
}

/// A chat backend whose calls stop the rollout's [`AgentClock`] while they are in flight.
pub(crate) struct Metered<'a> {
    /// The backend the agent loop would use.
    pub inner: &'a dyn ChatBackend,
    /// The rollout's clock.
    pub clock: &'a AgentClock,
}

#[async_trait::async_trait]
impl ChatBackend for Metered<'_> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let _waiting = self.clock.waiting_on_inference();
        self.inner.chat(request).await
    }
}

/// `run` bounded by `limit` seconds of agent time on `clock` (`None` when it ran out; a limit
/// of 0 or less is no limit).
pub(crate) async fn within_budget<T>(
    limit: f64,
    clock: &AgentClock,
    run: impl Future<Output = T>,
) -> Option<T> {
    if limit <= 0.0 {
        return Some(run.await);
    }
    tokio::select! {
        biased;
        out = run => Some(out),
        () = clock.expired(Duration::from_secs_f64(limit)) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn inference_time_is_not_counted_and_agent_time_is() {
        let clock = AgentClock::start();
        let limit = Duration::from_secs(10);
        // 4 s of work, a 60 s inference call, 4 s of work: 8 s counted, within the limit.
        let run = async {
            tokio::time::sleep(Duration::from_secs(4)).await;
            {
                let _w = clock.waiting_on_inference();
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            tokio::time::sleep(Duration::from_secs(4)).await;
            "done"
        };
        assert_eq!(within_budget(10.0, &clock, run).await, Some("done"));
        assert_eq!(clock.read().0, Duration::from_secs(8));
        // 3 more seconds of work (11 s) run out the limit.
        let over = within_budget(10.0, &clock, tokio::time::sleep(limit));
        assert_eq!(over.await, None);
        assert!(clock.read().0 >= limit);
    }
}
