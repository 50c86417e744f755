//! Which server the next attempt goes to: the routing groups (a due probe, up, the server that
//! just failed, down) and the choice within them. Pure functions over a snapshot of the pool,
//! tested on their own.

use std::time::Instant;

use super::health::Standing;

/// A server's weighted request limit: about `limit × weight`, never below one request (so a
/// weight of 0 slows an environment down to one request per server instead of stopping it).
pub(crate) fn weighted(limit: usize, weight: f64) -> usize {
    ((limit as f64 * weight).ceil() as usize).clamp(1, limit.max(1))
}

/// A server's routing group, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Group {
    /// Down, and its probe is due.
    ProbeDue,
    /// Up.
    Up,
    /// Up, but the request's last attempt just failed there.
    JustFailed,
    /// Down.
    Down,
    /// Down, and the request's last attempt just failed there.
    DownJustFailed,
}

impl Group {
    pub(crate) fn of(standing: Standing, just_failed: bool) -> Group {
        match (standing, just_failed) {
            (Standing::ProbeDue, false) => Group::ProbeDue,
            (Standing::Up, false) => Group::Up,
            (Standing::Up, true) => Group::JustFailed,
            (_, false) => Group::Down,
            (_, true) => Group::DownJustFailed,
        }
    }
}

/// What the choice knows about one server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// The server's index in the pool.
    pub index: usize,
    /// Its routing group.
    pub group: Group,
    /// Free request slots (after weighting).
    pub free: usize,
    /// Paced by a `Retry-After` until then.
    pub paced_until: Option<Instant>,
}

impl Candidate {
    fn usable(&self) -> bool {
        self.free > 0 && self.paced_until.is_none()
    }
}

/// The server for the next attempt: the best group that has a server (a probe only counts when
/// it can be sent now), and in it the usable server with the most free slots. When that group's
/// servers are all full or paced by `Retry-After`, the request waits for them (until the
/// earliest `Retry-After`, or a change) rather than falling back to a worse group.
pub(crate) fn choose(candidates: &[Candidate]) -> Result<(usize, Group), Option<Instant>> {
    let best = candidates
        .iter()
        .filter(|c| c.group != Group::ProbeDue || c.usable())
        .map(|c| c.group)
        .min()
        .expect("at least one server");
    let members = || candidates.iter().filter(|c| c.group == best);
    members()
        .filter(|c| c.usable())
        .max_by_key(|c| c.free)
        .map(|c| (c.index, best))
        .ok_or_else(|| members().filter_map(|c| c.paced_until).min())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn server(index: usize, group: Group, free: usize) -> Candidate {
        Candidate {
            index,
            group,
            free,
            paced_until: None,
        }
    }

    #[test]
    fn a_retry_goes_to_another_up_server_and_waits_for_it_when_full() {
        let up = server(1, Group::Up, 3);
        let failed = server(0, Group::JustFailed, 5);
        assert_eq!(choose(&[failed, up]), Ok((1, Group::Up)));
        let full = server(1, Group::Up, 0);
        assert_eq!(choose(&[failed, full]), Err(None), "wait for the up server");
        let down = server(1, Group::Down, 5);
        assert_eq!(
            choose(&[failed, down]),
            Ok((0, Group::JustFailed)),
            "no other server is up: the one that just failed"
        );
    }

    #[test]
    fn a_due_probe_comes_first_and_down_servers_still_serve_when_none_is_up() {
        let probe = server(2, Group::ProbeDue, 1);
        let up = server(1, Group::Up, 9);
        assert_eq!(choose(&[up, probe]), Ok((2, Group::ProbeDue)));
        let full_probe = server(2, Group::ProbeDue, 0);
        assert_eq!(choose(&[up, full_probe]), Ok((1, Group::Up)));
        let down = [
            server(0, Group::Down, 1),
            server(1, Group::DownJustFailed, 4),
        ];
        assert_eq!(choose(&down), Ok((0, Group::Down)));
    }

    #[test]
    fn a_paced_server_is_waited_for_until_its_retry_after() {
        let until = Instant::now() + Duration::from_secs(1);
        let paced = Candidate {
            paced_until: Some(until),
            ..server(0, Group::Up, 4)
        };
        assert_eq!(choose(&[paced]), Err(Some(until)));
        assert_eq!(
            choose(&[paced, server(1, Group::Up, 1)]),
            Ok((1, Group::Up))
        );
    }

    #[test]
    fn weighted_limits_never_reach_zero() {
        assert_eq!(weighted(8, 1.0), 8);
        assert_eq!(weighted(8, 0.5), 4);
        assert_eq!(weighted(8, 0.3), 3);
        assert_eq!(weighted(8, 0.0), 1);
        assert_eq!(weighted(1, 0.01), 1);
    }
}
