//! The pure Atropos arithmetic of the serve loop: batch size, stop and pause rules, the
//! worker cap and step boundaries (upstream `BaseEnv`'s, with its off-by-residue bug fixed).

use crate::atropos::api::EnvStatus;
use crate::config::EvalHandling;

/// `int(batch_size × (unallocated_fraction + min_batch_allocation))`; `batch_size` before the
/// first status or when it is unknown (-1).
pub(crate) fn derived_batch_size(
    batch_size: i64,
    status: Option<&EnvStatus>,
    min_batch_allocation: Option<f64>,
) -> i64 {
    match status {
        Some(s) if batch_size != -1 => {
            (batch_size as f64 * (s.unallocated_fraction + min_batch_allocation.unwrap_or(0.0)))
                as i64
        }
        _ => batch_size,
    }
}

/// Stop when `current_step + (queue_size × group_size) // batch_size > total_steps`.
pub(crate) fn should_stop(
    status: &EnvStatus,
    group_size: i64,
    batch_size: i64,
    total_steps: i64,
) -> bool {
    let queued_steps = if batch_size > 0 {
        (status.queue_size * group_size).div_euclid(batch_size)
    } else {
        0
    };
    status.current_step + queued_steps > total_steps
}

/// The off-policy back-pressure rule: the queue holds `max_batches_offpolicy` batches (and,
/// with a minimum allocation, this environment's share is already queued), or the batch size
/// is unknown.
pub(crate) fn should_pause(
    status: &EnvStatus,
    group_size: i64,
    batch_size: i64,
    max_batches_offpolicy: i64,
    min_batch_allocation: Option<f64>,
) -> bool {
    if derived_batch_size(batch_size, Some(status), min_batch_allocation) == -1 {
        return true;
    }
    let full = status.queue_size * group_size >= max_batches_offpolicy * batch_size
        && max_batches_offpolicy > 0;
    let share_met = match min_batch_allocation {
        None => true,
        Some(a) => {
            let g_max = status.max_group_size.max(1);
            let needed =
                (a * batch_size as f64 * max_batches_offpolicy as f64 / g_max as f64).ceil() as i64;
            needed * (g_max / group_size.max(1)) - status.self_queue_size <= 0
        }
    };
    full && share_met
}

/// Inputs of the worker cap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CapInputs<'a> {
    /// `max_num_workers` (already resolved from per-node × servers when -1).
    pub max_num_workers: i64,
    /// Whether an evaluation is running, and how training behaves meanwhile.
    pub eval_running: bool,
    /// `eval_handling`.
    pub eval_handling: EvalHandling,
    /// `eval_limit_ratio`.
    pub eval_limit_ratio: f64,
    /// `max_batches_offpolicy`.
    pub max_batches_offpolicy: i64,
    /// Batch size from `/info`.
    pub batch_size: i64,
    /// `group_size`.
    pub group_size: i64,
    /// `min_batch_allocation`.
    pub min_batch_allocation: Option<f64>,
    /// The latest `/status-env`.
    pub status: Option<&'a EnvStatus>,
    /// Groups finished but not yet acknowledged by the API (in flight or waiting to be
    /// resent): part of the off-policy budget, as upstream's workers post their own groups,
    /// but not of the concurrency (`max_num_workers`), since no rollout runs for them.
    pub undelivered: i64,
}

/// How many workers may run now (upstream `add_train_workers` arithmetic).
pub(crate) fn worker_cap(c: &CapInputs<'_>) -> i64 {
    let mut cap = c.max_num_workers;
    if c.eval_running {
        match c.eval_handling {
            EvalHandling::StopTrain => return 0,
            EvalHandling::LimitTrain => cap = (cap as f64 * c.eval_limit_ratio) as i64,
            EvalHandling::None => {}
        }
    }
    let g = c.group_size.max(1);
    let queue = c.status.map_or(0, |s| s.queue_size);
    let derived = derived_batch_size(c.batch_size, c.status, c.min_batch_allocation);
    cap = cap.min((c.max_batches_offpolicy * derived).div_euclid(g) - queue - c.undelivered);
    if let (Some(a), Some(s)) = (c.min_batch_allocation, c.status) {
        let big = s.max_group_size.max(1) as f64;
        let gf = g as f64;
        let needed = (a * c.batch_size as f64 * c.max_batches_offpolicy as f64 / big).ceil();
        let have = ((big * s.self_queue_size as f64) / (big / gf)).floor();
        let floor = ((((needed + (big / gf).floor()) * big - have) / gf).ceil() as i64
            - c.undelivered)
            .max(0);
        cap = cap.max(floor);
    }
    cap
}

/// True when the step moved across a multiple of `period` (the fixed form of upstream's
/// `prev % period > cur % period`, which misses jumps landing on a larger residue).
pub(crate) fn boundary_crossed(prev: i64, cur: i64, period: i64) -> bool {
    period > 0 && cur.div_euclid(period) > prev.div_euclid(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(current_step: i64, queue_size: i64) -> EnvStatus {
        EnvStatus {
            current_step,
            queue_size,
            unallocated_fraction: 1.0,
            self_queue_size: queue_size,
            max_group_size: 2,
            env_weight: 1.0,
        }
    }

    #[test]
    fn the_spec_end_to_end_example() {
        // Batch 4, group 2, max_batches_offpolicy 3, total_steps 3.
        assert!(!should_pause(&status(0, 5), 2, 4, 3, None));
        assert!(
            should_pause(&status(0, 6), 2, 4, 3, None),
            "6 groups = 3 batches"
        );
        assert!(
            !should_stop(&status(0, 6), 2, 4, 3),
            "0 + 12 // 4 = 3 is not > 3"
        );
        assert!(should_stop(&status(3, 2), 2, 4, 3), "3 + 4 // 4 = 4 > 3");
        // The 0→3 jump with a period of 2 crosses step 2: the fix runs the eval upstream skips.
        assert!(boundary_crossed(0, 3, 2));
        assert!(boundary_crossed(50, 250, 100));
        assert!(!boundary_crossed(100, 150, 100));
        assert!(!boundary_crossed(3, 4, 0));
    }

    #[test]
    fn worker_cap_arithmetic() {
        let s = status(0, 2);
        let base = CapInputs {
            max_num_workers: 16,
            eval_running: false,
            eval_handling: EvalHandling::StopTrain,
            eval_limit_ratio: 0.5,
            max_batches_offpolicy: 3,
            batch_size: 4,
            group_size: 2,
            min_batch_allocation: None,
            status: Some(&s),
            undelivered: 0,
        };
        assert_eq!(worker_cap(&base), 3 * 4 / 2 - 2);
        assert_eq!(
            worker_cap(&CapInputs {
                status: None,
                ..base
            }),
            6
        );
        assert_eq!(
            worker_cap(&CapInputs {
                eval_running: true,
                ..base
            }),
            0
        );
        let limit = CapInputs {
            eval_running: true,
            eval_handling: EvalHandling::LimitTrain,
            max_num_workers: 3,
            ..base
        };
        assert_eq!(worker_cap(&limit), 1);
        // Unknown batch size: derived batch -1 pauses.
        assert!(should_pause(&s, 2, -1, 3, None));
        // A minimum allocation raises the cap: a=0.5, B=4, O=3, G=2, g=2, s=2:
        // ceil(((ceil(3) + 1) × 2 − 4) / 2) = 2.
        let alloc = CapInputs {
            max_num_workers: 1,
            min_batch_allocation: Some(0.5),
            ..base
        };
        assert_eq!(worker_cap(&alloc), 2);
        // Groups still being delivered use the off-policy budget, not the worker slots.
        let sending = CapInputs {
            undelivered: 3,
            ..base
        };
        assert_eq!(worker_cap(&sending), 3 * 4 / 2 - 2 - 3);
        let few_workers = CapInputs {
            max_num_workers: 1,
            undelivered: 2,
            ..base
        };
        assert_eq!(worker_cap(&few_workers), 1, "a worker slot stays free");
        assert_eq!(
            worker_cap(&CapInputs {
                undelivered: 1,
                ..alloc
            }),
            1,
            "the minimum allocation's floor counts them too"
        );
        assert_eq!(derived_batch_size(4, Some(&s), Some(0.5)), 6);
    }
}
