//! Per-server request statistics (durations and attempts), collected by the client and drained
//! by whoever reports them (the wandb `server/server_{i}_*` metrics).

use std::time::Duration;

/// Requests finished on one server since the statistics were last taken.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestStats {
    /// Seconds per training request (all attempts and the waits between them, from the first
    /// request slot granted).
    pub train_seconds: Vec<f64>,
    /// Attempts per training request.
    pub train_attempts: Vec<u32>,
    /// Seconds per evaluation request.
    pub eval_seconds: Vec<f64>,
    /// Attempts per evaluation request.
    pub eval_attempts: Vec<u32>,
}

impl RequestStats {
    /// Records one finished request (successful or not).
    pub fn record(&mut self, eval: bool, elapsed: Duration, attempts: u32) {
        let (seconds, tries) = if eval {
            (&mut self.eval_seconds, &mut self.eval_attempts)
        } else {
            (&mut self.train_seconds, &mut self.train_attempts)
        };
        seconds.push(elapsed.as_secs_f64());
        tries.push(attempts);
    }
}
