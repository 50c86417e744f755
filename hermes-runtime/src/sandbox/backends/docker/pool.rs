//! Pre-started containers per image (`--env.sandbox_pool_size`): a rollout takes one without
//! waiting for a create and start; every take triggers a refill. A container leaves the pool
//! exactly once, so a used container is never handed to another task. A pooled container's
//! sleep is two lifetimes long and the pool hands it out only during the first, so its task
//! always gets a full lifetime; older ones are dropped (removed) at the next take.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{info, warn};

use super::{Container, Shared};

/// Task label of containers waiting in the pool.
const POOL_TASK: &str = "pool";

/// Ready containers and refills in flight, per image.
#[derive(Debug)]
pub(crate) struct Pool {
    shared: Arc<Shared>,
    size: usize,
    state: Mutex<PoolState>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct PoolState {
    ready: HashMap<String, VecDeque<Container>>,
    starting: HashMap<String, usize>,
}

impl Pool {
    /// An empty pool keeping `size` containers per image.
    pub fn new(shared: Arc<Shared>, size: usize) -> Arc<Self> {
        Arc::new(Pool {
            shared,
            size,
            state: Mutex::new(PoolState::default()),
            changed: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A ready container of `image` that still has a full lifetime ahead, if one is waiting.
    pub fn take(&self, image: &str) -> Option<Container> {
        let budget = self.shared.settings.lifetime;
        let mut state = self.state();
        let ready = state.ready.get_mut(image)?;
        while let Some(c) = ready.pop_front() {
            if c.started.elapsed() < budget {
                return Some(c);
            }
            info!(
                "sandbox pool: replacing {}, idle for a whole --env.terminal_lifetime",
                c.guard.name()
            );
        }
        None
    }

    /// Starts containers in the background until `image` has `size` ready or starting.
    pub fn refill(self: &Arc<Self>, image: &str) {
        let missing = {
            let mut state = self.state();
            let have = state.ready.get(image).map_or(0, VecDeque::len)
                + state.starting.get(image).copied().unwrap_or(0);
            let missing = self.size.saturating_sub(have);
            *state.starting.entry(image.to_owned()).or_default() += missing;
            missing
        };
        for _ in 0..missing {
            let pool = Arc::clone(self);
            let image = image.to_owned();
            tokio::spawn(async move {
                let life = pool.shared.settings.lifetime * 2;
                let started = pool
                    .shared
                    .start_container(&image, POOL_TASK, life, &Default::default())
                    .await;
                {
                    let mut state = pool.state();
                    if let Some(n) = state.starting.get_mut(&image) {
                        *n = n.saturating_sub(1);
                    }
                    match started {
                        Ok(c) => state.ready.entry(c.image.clone()).or_default().push_back(c),
                        Err(e) => warn!("sandbox pool: cannot pre-start a container: {e}"),
                    }
                }
                pool.changed.notify_waiters();
            });
        }
    }

    /// Waits until `image` has `size` ready containers or `timeout` passes; returns the count.
    pub async fn wait_ready(&self, image: &str, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            let (ready, starting) = {
                let state = self.state();
                (
                    state.ready.get(image).map_or(0, VecDeque::len),
                    state.starting.get(image).copied().unwrap_or(0),
                )
            };
            if ready >= self.size || starting == 0 {
                return ready;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return ready;
            }
        }
    }
}
