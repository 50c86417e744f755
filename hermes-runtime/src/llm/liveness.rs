//! Whether inference as a whole is alive: how long calls have been failing with no success in
//! between. `serve` stops on it ([`InferenceDown`]) instead of failing items for ever when the
//! inference fleet dies mid-run. Pure state, no I/O.

use std::time::{Duration, Instant};

/// Inference has been dead too long: no call succeeded for `down_for` while calls kept being
/// attempted and failing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "inference is down: no LLM call has succeeded for {:.0} s while calls kept failing \
     (--env.inference_down_grace {:.0} s); last failure: {last}",
    .down_for.as_secs_f64(),
    .grace.as_secs_f64()
)]
pub struct InferenceDown {
    /// Time since the first failure after the last success.
    pub down_for: Duration,
    /// The grace that ran out.
    pub grace: Duration,
    /// The last failure, one line (server and cause).
    pub last: String,
}

/// Failures since the last successful call.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    failing_since: Option<Instant>,
    last_failure: Option<(Instant, String)>,
}

impl Liveness {
    /// A server answered (any answer that is not a server fault): inference is alive.
    pub fn answered(&mut self) {
        self.failing_since = None;
    }

    /// An attempt failed on a connection error, a timeout or a 5xx.
    pub fn faulted(&mut self, now: Instant, what: String) {
        self.failing_since.get_or_insert(now);
        self.last_failure = Some((now, what));
    }

    /// Down when calls have failed for `grace` with no success, and are still being attempted
    /// (the last failure is within `grace`: an idle run is not a dead one).
    pub fn down(&self, now: Instant, grace: Duration) -> Option<InferenceDown> {
        let since = self.failing_since?;
        let (at, last) = self.last_failure.as_ref()?;
        let down_for = now.saturating_duration_since(since);
        (down_for >= grace && now.saturating_duration_since(*at) < grace).then(|| InferenceDown {
            down_for,
            grace,
            last: last.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_after_the_grace_of_failures_only_while_calls_are_attempted() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let grace = s(300);
        let mut l = Liveness::default();
        assert_eq!(l.down(t0 + s(1000), grace), None, "no call yet");
        l.faulted(t0, "a refused".into());
        l.faulted(t0 + s(299), "a refused".into());
        assert_eq!(l.down(t0 + s(299), grace), None, "within the grace");
        let down = l.down(t0 + s(300), grace).expect("down");
        assert_eq!((down.down_for, down.last.as_str()), (s(300), "a refused"));
        assert_eq!(
            l.down(t0 + s(599), grace),
            None,
            "no call for a whole grace: idle, not dead"
        );
        l.answered();
        l.faulted(t0 + s(600), "b 503".into());
        assert_eq!(
            l.down(t0 + s(800), grace),
            None,
            "a success restarts the count"
        );
        l.faulted(t0 + s(850), "b 503".into());
        assert_eq!(
            l.down(t0 + s(900), grace).unwrap().to_string(),
            "inference is down: no LLM call has succeeded for 300 s while calls kept failing \
             (--env.inference_down_grace 300 s); last failure: b 503"
        );
    }
}
