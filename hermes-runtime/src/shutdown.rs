//! Shutdown as a value (mini-redis style): the binary creates one [`Shutdown`], its signal
//! listener counts SIGINT/SIGTERM, and every mode receives a clone. The first signal asks for
//! a graceful stop — take no new items, let in-flight rollouts finish within
//! `--env.shutdown_grace` seconds, flush, deliver or spool, disconnect, finish W&B — and the
//! second cancels at once (sandboxes are removed either way).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Stop requests so far, and when the first came (the grace period runs from it).
#[derive(Debug, Clone, Copy, Default)]
struct Requests {
    count: u8,
    first: Option<Instant>,
}

/// A handle on the run's stop requests; clones share one state.
#[derive(Clone, Debug)]
pub struct Shutdown {
    signals: watch::Receiver<Requests>,
    trigger: Arc<watch::Sender<Requests>>,
}

/// The run was stopped by a signal before its mode could start.
#[derive(Debug, thiserror::Error)]
#[error("interrupted before the run started")]
pub struct Interrupted;

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A handle no signal reaches; [`Shutdown::request`] stops it (tests, the testing kit).
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(Requests::default());
        Shutdown {
            signals: rx,
            trigger: Arc::new(tx),
        }
    }

    /// A handle that SIGINT and SIGTERM drive: the first asks for a graceful stop, the second
    /// forces it. Must be called inside a Tokio runtime.
    pub fn on_signals() -> Self {
        let shutdown = Self::new();
        let handle = shutdown.clone();
        tokio::spawn(async move {
            let mut signals = Signals::new();
            loop {
                let name = signals.next().await;
                let n = handle.request();
                if n == 1 {
                    tracing::warn!(
                        "{name}: stopping — no new items; in-flight rollouts get --env.shutdown_grace \
                         seconds to finish (send it again to cancel them now)"
                    );
                } else if n == 2 {
                    tracing::warn!("{name} again: cancelling in-flight work now");
                }
            }
        });
        shutdown
    }

    /// Records one stop request; returns how many there have been.
    pub fn request(&self) -> u8 {
        self.trigger.send_modify(|r| {
            r.count = r.count.saturating_add(1);
            r.first.get_or_insert_with(Instant::now);
        });
        self.trigger.borrow().count
    }

    /// True once a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.signals.borrow().count >= 1
    }

    /// True once a second stop request asked to cancel at once.
    pub fn is_forced(&self) -> bool {
        self.signals.borrow().count >= 2
    }

    /// Why in-flight work was cancelled, for the log line that says so.
    pub fn cancel_reason(&self, grace: Duration) -> String {
        if self.is_forced() {
            "a second stop request".into()
        } else {
            format!("the {grace:?} grace period (--env.shutdown_grace)")
        }
    }

    /// Waits for the first stop request.
    pub async fn requested(&self) {
        self.wait_for(1).await
    }

    /// Waits for the second stop request (cancel now).
    pub async fn forced(&self) {
        self.wait_for(2).await
    }

    async fn wait_for(&self, count: u8) {
        let mut rx = self.signals.clone();
        // The sender lives in `self.trigger`, so the channel never closes while we wait.
        let _ = rx.wait_for(|r| r.count >= count).await;
    }

    /// Completes when in-flight work must be cancelled: `grace` after the first stop request,
    /// or at the second. Calls made after the first request share its deadline.
    pub async fn cancelled(&self, grace: Duration) {
        self.requested().await;
        let first = self.signals.borrow().first.unwrap_or_else(Instant::now);
        tokio::select! {
            () = tokio::time::sleep_until(first + grace) => {}
            () = self.forced() => {}
        }
    }

    /// Runs `work` to completion unless it must be cancelled (see [`Shutdown::cancelled`]);
    /// `None` = cancelled.
    pub async fn finish_within<F: Future>(&self, grace: Duration, work: F) -> Option<F::Output> {
        tokio::select! {
            out = work => Some(out),
            () = self.cancelled(grace) => None,
        }
    }

    /// Runs `work` unless a stop is requested first (set-up work that has nothing to save).
    pub async fn unless_requested<F: Future>(&self, work: F) -> Result<F::Output, Interrupted> {
        tokio::select! {
            // A request that came before the work started wins.
            biased;
            () = self.requested() => Err(Interrupted),
            out = work => Ok(out),
        }
    }
}

/// The grace period of `--env.shutdown_grace` (seconds; invalid values mean none).
pub fn grace(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or(Duration::ZERO)
}

/// SIGINT and SIGTERM, listened to for the whole run (streams made once, so a signal that
/// arrives while the previous one is handled is not missed).
struct Signals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    async fn next(&mut self) -> &'static str {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.interrupt) => "SIGINT",
            () = recv(&mut self.terminate) => "SIGTERM",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_request_grants_the_grace_and_the_second_cancels() {
        let s = Shutdown::new();
        assert!(!s.is_requested());
        // Finishes normally when nobody asks.
        assert_eq!(
            s.finish_within(Duration::from_secs(5), async { 1 }).await,
            Some(1)
        );
        // Asked to stop: work that needs 3 s of a 5 s grace finishes.
        let asked = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            asked.request();
        });
        let slow = tokio::time::sleep(Duration::from_secs(4));
        assert_eq!(
            s.finish_within(Duration::from_secs(5), slow).await,
            Some(())
        );
        assert!(s.is_requested());
        // Work longer than the grace is cancelled when the grace runs out: 5 s from the
        // request at t = 1 s, so at t = 6 s, 2 s after this call starts.
        let started = Instant::now();
        let forever = std::future::pending::<()>();
        assert_eq!(s.finish_within(Duration::from_secs(5), forever).await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // A second request cancels before the grace ends.
        s.request();
        let forever = std::future::pending::<()>();
        assert_eq!(
            s.finish_within(Duration::from_secs(3600), forever).await,
            None
        );
        assert!(s.unless_requested(async {}).await.is_err());
    }
}
