//! Visible drops: groups dropped by the upstream group rules are counted per reason and
//! announced at WARN — the first at once, then at most once per `ANNOUNCE_EVERY` with the
//! counts since the last announcement and the knob that changes each rule.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::atropos::DropReason;

/// Minimum time between two drop announcements.
pub(crate) const ANNOUNCE_EVERY: Duration = Duration::from_secs(30);

/// Dropped groups of a run, per reason.
#[derive(Debug, Default)]
pub(crate) struct Drops {
    total: BTreeMap<&'static str, usize>,
    unannounced: BTreeMap<&'static str, (usize, DropReason)>,
    last_announcement: Option<Instant>,
}

impl Drops {
    /// Counts one dropped group and announces the pending drops when it is time.
    pub fn record(&mut self, reason: DropReason) {
        *self.total.entry(reason.key()).or_default() += 1;
        let entry = self.unannounced.entry(reason.key()).or_insert((0, reason));
        entry.0 += 1;
        entry.1 = reason;
        let due = self
            .last_announcement
            .is_none_or(|t| t.elapsed() >= ANNOUNCE_EVERY);
        if due {
            self.announce();
        }
    }

    /// Announces the drops not yet announced (at the end of a run).
    pub fn announce(&mut self) {
        if self.unannounced.is_empty() {
            return;
        }
        let parts: Vec<String> = std::mem::take(&mut self.unannounced)
            .into_values()
            .map(|(n, reason)| {
                let groups = if n == 1 { "group" } else { "groups" };
                format!("{n} {groups} dropped: {}", reason.explain())
            })
            .collect();
        warn!("{}", parts.join("; "));
        self.last_announcement = Some(Instant::now());
    }

    /// All dropped groups.
    pub fn count(&self) -> usize {
        self.total.values().sum()
    }

    /// Dropped groups per reason key (`size`, `equal_scores`, `too_long`).
    pub fn by_reason(&self) -> &BTreeMap<&'static str, usize> {
        &self.total
    }
}

/// `"3 (2 equal_scores, 1 too_long)"`, or `"0"`, for summaries.
pub fn describe(by_reason: &BTreeMap<&'static str, usize>) -> String {
    let total: usize = by_reason.values().sum();
    if total == 0 {
        return "0".into();
    }
    let parts: Vec<String> = by_reason.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("{total} ({})", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_counted_per_reason() {
        let mut d = Drops::default();
        d.record(DropReason::EqualScores);
        d.record(DropReason::TooLong {
            len: 5000,
            limit: 4096,
        });
        d.record(DropReason::TooLong {
            len: 4100,
            limit: 4096,
        });
        assert_eq!(d.count(), 3);
        assert_eq!(d.by_reason()["too_long"], 2);
        assert_eq!(describe(d.by_reason()), "3 (1 equal_scores, 2 too_long)");
        // The first drop was announced at once; the other two wait for the next window.
        assert_eq!(d.unannounced.values().map(|(n, _)| n).sum::<usize>(), 2);
        d.announce();
        assert!(d.unannounced.is_empty());
    }

    #[test]
    fn the_length_drop_names_the_knob() {
        let text = DropReason::TooLong {
            len: 5000,
            limit: 4096,
        }
        .explain();
        assert!(text.contains("max_token_len 4096"), "{text}");
        assert!(text.contains("--env.max_token_length"), "{text}");
    }
}
