//! The pause while the trainer's off-policy queue is full: said when it starts, again every
//! [`REMIND`] while it lasts (a trainer that has not pulled a batch yet would otherwise be one
//! old line above a silent process), and when it ends.

use std::time::{Duration, Instant};

/// Time between two "still paused" lines.
pub(crate) const REMIND: Duration = Duration::from_secs(60);

/// A pause in progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pause {
    since: Instant,
    noted: Instant,
}

impl Pause {
    /// A pause that began (and was announced) at `now`.
    pub fn start(now: Instant) -> Self {
        Pause {
            since: now,
            noted: now,
        }
    }

    /// How long the pause has lasted, when a reminder is due at `now` (which is then noted).
    pub fn remind(&mut self, now: Instant) -> Option<Duration> {
        if now.saturating_duration_since(self.noted) < REMIND {
            return None;
        }
        self.noted = now;
        Some(now.saturating_duration_since(self.since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reminds_once_per_interval_with_the_whole_wait() {
        let t0 = Instant::now();
        let mut pause = Pause::start(t0);
        assert_eq!(pause.remind(t0 + REMIND / 2), None);
        assert_eq!(pause.remind(t0 + REMIND), Some(REMIND));
        assert_eq!(pause.remind(t0 + REMIND + REMIND / 2), None);
        assert_eq!(pause.remind(t0 + REMIND * 2), Some(REMIND * 2));
    }
}
