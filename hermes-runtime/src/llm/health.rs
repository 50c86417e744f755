//! A server's health as the pool sees it: consecutive failures, "marked down" after too many,
//! and the probe that lets it back in once its cool-down is over. Pure state, no I/O, so the
//! transitions are tested on their own.

use std::time::{Duration, Instant};

use crate::config::HermesEnvConfig;

/// When a server is marked down and when it is tried again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failover {
    /// Consecutive server faults (connection errors, timeouts, 5xx) that mark it down.
    pub failures_to_mark_down: u32,
    /// How long a down server gets no requests before one request probes it.
    pub cooldown: Duration,
}

impl Default for Failover {
    fn default() -> Self {
        Failover {
            failures_to_mark_down: 3,
            cooldown: Duration::from_secs(30),
        }
    }
}

impl Failover {
    /// The settings of `--env.llm_server_cooldown` (validated as positive).
    pub fn from_config(env: &HermesEnvConfig) -> Self {
        Failover {
            cooldown: Duration::from_secs_f64(env.llm_server_cooldown.max(0.0)),
            ..Failover::default()
        }
    }
}

/// Where a server stands for routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Healthy: takes requests.
    Up,
    /// Down and its cool-down is over: the next request may probe it.
    ProbeDue,
    /// Down: gets requests only when no server is up.
    Down,
}

#[derive(Debug, Clone, Copy)]
struct Outage {
    since: Instant,
    probe_at: Instant,
    probing: bool,
}

/// One server's health.
#[derive(Debug, Default)]
pub(crate) struct Health {
    consecutive_faults: u32,
    outage: Option<Outage>,
}

impl Health {
    /// Where the server stands at `now`.
    pub fn standing(&self, now: Instant) -> Standing {
        match self.outage {
            None => Standing::Up,
            Some(o) if !o.probing && now >= o.probe_at => Standing::ProbeDue,
            Some(_) => Standing::Down,
        }
    }

    /// A request is about to probe the down server.
    pub fn start_probe(&mut self) {
        if let Some(o) = &mut self.outage {
            o.probing = true;
        }
    }

    /// The server answered; returns how long it had been down when this ends an outage.
    pub fn answered(&mut self, now: Instant) -> Option<Duration> {
        self.consecutive_faults = 0;
        self.outage.take().map(|o| now - o.since)
    }

    /// The server failed (a connection error, timeout or 5xx); returns true when this marks it
    /// down. A failure while down (a failed probe) restarts the cool-down.
    pub fn faulted(&mut self, now: Instant, policy: &Failover) -> bool {
        self.consecutive_faults = self.consecutive_faults.saturating_add(1);
        let probe_at = now + policy.cooldown;
        match &mut self.outage {
            Some(o) => {
                o.probe_at = probe_at;
                o.probing = false;
                false
            }
            None if self.consecutive_faults >= policy.failures_to_mark_down => {
                self.outage = Some(Outage {
                    since: now,
                    probe_at,
                    probing: false,
                });
                true
            }
            None => false,
        }
    }

    /// Marks the server down at once (a failed health check at start-up).
    pub fn mark_down(&mut self, now: Instant, policy: &Failover) {
        self.consecutive_faults = policy.failures_to_mark_down;
        self.outage = Some(Outage {
            since: now,
            probe_at: now + policy.cooldown,
            probing: false,
        });
    }

    /// A probe ended without an answer either way (its request was cancelled): let another
    /// request probe.
    pub fn probe_abandoned(&mut self) {
        if let Some(o) = &mut self.outage {
            o.probing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Failover = Failover {
        failures_to_mark_down: 3,
        cooldown: Duration::from_secs(10),
    };

    #[test]
    fn three_consecutive_faults_mark_a_server_down_once() {
        let t0 = Instant::now();
        let mut h = Health::default();
        assert!(!h.faulted(t0, &POLICY));
        assert!(!h.faulted(t0, &POLICY));
        assert_eq!(h.standing(t0), Standing::Up);
        assert!(h.faulted(t0, &POLICY), "the third fault marks it down");
        assert_eq!(h.standing(t0), Standing::Down);
        assert!(
            !h.faulted(t0, &POLICY),
            "already down: no second transition"
        );
    }

    #[test]
    fn an_answer_resets_the_count() {
        let t0 = Instant::now();
        let mut h = Health::default();
        h.faulted(t0, &POLICY);
        h.faulted(t0, &POLICY);
        assert_eq!(h.answered(t0), None, "it was never down");
        assert!(!h.faulted(t0, &POLICY));
        assert_eq!(h.standing(t0), Standing::Up);
    }

    #[test]
    fn a_down_server_is_probed_after_its_cooldown_by_one_request() {
        let t0 = Instant::now();
        let mut h = Health::default();
        h.mark_down(t0, &POLICY);
        assert_eq!(h.standing(t0 + Duration::from_secs(9)), Standing::Down);
        let due = t0 + Duration::from_secs(10);
        assert_eq!(h.standing(due), Standing::ProbeDue);
        h.start_probe();
        assert_eq!(h.standing(due), Standing::Down, "one probe at a time");
        assert!(!h.faulted(due, &POLICY), "a failed probe is no new outage");
        assert_eq!(h.standing(due + Duration::from_secs(9)), Standing::Down);
        let again = due + Duration::from_secs(10);
        assert_eq!(h.standing(again), Standing::ProbeDue);
        h.start_probe();
        assert_eq!(h.answered(again), Some(Duration::from_secs(20)));
        assert_eq!(h.standing(again), Standing::Up);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_request_probe() {
        let t0 = Instant::now();
        let mut h = Health::default();
        h.mark_down(t0, &POLICY);
        let due = t0 + POLICY.cooldown;
        h.start_probe();
        h.probe_abandoned();
        assert_eq!(h.standing(due), Standing::ProbeDue);
    }
}
