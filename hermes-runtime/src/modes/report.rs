//! The one-screen summary printed on stdout at the end of a `process` or `evaluate` run.

use std::fmt::Write as _;

use super::drops::describe;
use super::evaluate::EvalSummary;
use super::process::ProcessSummary;
use super::serve::ServeSummary;
use crate::progress::human_duration;

fn per_second(n: usize, secs: f64) -> f64 {
    n as f64 / secs.max(1e-9)
}

/// The `process` summary; `wandb` is the logger's one-line outcome, when wandb was on.
pub(crate) fn process_summary(s: &ProcessSummary, wandb: Option<&str>) -> String {
    let secs = s.elapsed.as_secs_f64();
    let mut out = String::new();
    let _ = writeln!(out, "process finished in {}", human_duration(s.elapsed));
    if let Some(i) = &s.interrupted {
        let _ = writeln!(
            out,
            "  stopped   by a signal: no new items taken, {} groups in flight cancelled",
            i.cancelled
        );
    }
    let _ = writeln!(
        out,
        "  groups    {} groups written, {} dropped ({} requested)",
        s.groups_written,
        describe(&s.drops_by_reason),
        s.requested
    );
    let _ = write!(
        out,
        "  rollouts  {}, mean reward {:.3}, {} tool errors, {} tampered",
        s.rollouts, s.mean_reward, s.tool_errors, s.tampered
    );
    if s.rollouts_dropped > 0 {
        let _ = write!(out, ", {} dropped by score_group", s.rollouts_dropped);
    }
    out.push('\n');
    let _ = write!(
        out,
        "  failures  {} rollout attempts failed, {} items not trained on",
        s.rollout_failures, s.items_failed
    );
    match &s.failures_file {
        Some(path) => {
            let _ = writeln!(out, " ({})", path.display());
        }
        None => out.push('\n'),
    }
    let _ = writeln!(
        out,
        "  rate      {:.2} groups/s, {:.2} rollouts/s",
        per_second(s.groups_written + s.groups_dropped, secs),
        per_second(s.rollouts, secs)
    );
    let _ = writeln!(out, "  jsonl     {}", s.jsonl.display());
    let _ = writeln!(out, "  viewer    {}", s.html.display());
    if let Some(w) = wandb {
        let _ = writeln!(out, "  wandb     {w}");
    }
    out
}

/// The `serve` summary.
pub(crate) fn serve_summary(s: &ServeSummary) -> String {
    let mut out = String::new();
    let how = if s.interrupted {
        "by a signal"
    } else {
        "at total_steps"
    };
    let _ = writeln!(out, "serve stopped {how} at trainer step {}", s.final_step);
    let _ = writeln!(
        out,
        "  groups    {} sent ({} resent after {} re-registrations, {} from an earlier run's spool), {} dropped by the group rules, {} refused by the API",
        s.groups_sent,
        s.groups_resent,
        s.reregistrations,
        s.groups_unspooled,
        describe(&s.drops_by_reason),
        s.groups_rejected
    );
    if s.rollouts_dropped > 0 {
        let _ = writeln!(
            out,
            "  rollouts  {} dropped by score_group",
            s.rollouts_dropped
        );
    }
    let _ = writeln!(
        out,
        "  failures  {} rollout attempts failed, {} items not trained on",
        s.rollout_failures, s.items_failed
    );
    let _ = writeln!(
        out,
        "  outbox    {} spooled for the next start, {} lost",
        s.groups_spooled, s.groups_lost
    );
    let _ = writeln!(
        out,
        "  other     {} workers timed out, {} pauses, {} evaluations",
        s.workers_timed_out, s.pauses, s.evals
    );
    out
}

/// The `evaluate` summary: time, every metric, and where the results are.
pub(crate) fn evaluate_summary(s: &EvalSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "evaluate finished in {}", human_duration(s.elapsed));
    if s.items_skipped > 0 {
        let _ = writeln!(
            out,
            "  stopped   by a signal: {} items not evaluated",
            s.items_skipped
        );
    }
    if s.items_failed.total() > 0 {
        let _ = writeln!(
            out,
            "  failures  {} items not scored (not the model's failures; excluded from eval/mean_reward)",
            s.items_failed
        );
    }
    for (k, v) in &s.metrics {
        let _ = writeln!(out, "  {k:<32} {v:.4}");
    }
    match &s.dir {
        Some(dir) => {
            let _ = writeln!(out, "  results   {}", dir.display());
        }
        None => out.push_str("  results   not saved (set --env.data_dir_to_save_evals)\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::FailureCounts;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn process_summary_fits_one_screen() {
        let mut s = ProcessSummary {
            jsonl: PathBuf::from("data/x.jsonl"),
            html: PathBuf::from("data/x.html"),
            failures_file: Some(PathBuf::from("data/x.failures.jsonl")),
            groups_written: 4,
            groups_dropped: 1,
            drops_by_reason: [("equal_scores", 1)].into_iter().collect(),
            rollouts: 15,
            mean_reward: 0.5,
            tampered: 1,
            rollouts_dropped: 0,
            tool_errors: 2,
            rollout_failures: FailureCounts {
                llm: 2,
                sandbox: 1,
                verifier: 1,
                ..Default::default()
            },
            items_failed: FailureCounts {
                llm: 1,
                ..Default::default()
            },
            requested: 6,
            interrupted: None,
            elapsed: Duration::from_secs(5),
        };
        let text = process_summary(&s, Some("offline run saved to wandb/x"));
        insta::assert_snapshot!(text, @r"
        process finished in 5.0s
          groups    4 groups written, 1 (1 equal_scores) dropped (6 requested)
          rollouts  15, mean reward 0.500, 2 tool errors, 1 tampered
          failures  4 (2 llm, 1 sandbox, 1 verifier) rollout attempts failed, 1 (1 llm) items not trained on (data/x.failures.jsonl)
          rate      1.00 groups/s, 3.00 rollouts/s
          jsonl     data/x.jsonl
          viewer    data/x.html
          wandb     offline run saved to wandb/x
        ");
        s.interrupted = Some(crate::modes::process::Interruption { cancelled: 2 });
        s.failures_file = None;
        s.rollout_failures = FailureCounts::default();
        s.items_failed = FailureCounts::default();
        s.rollouts_dropped = 3;
        s.groups_dropped = 2;
        s.drops_by_reason = [("equal_scores", 1), ("skipped", 1)].into_iter().collect();
        let text = process_summary(&s, None);
        assert!(
            text.contains("1 equal_scores, 1 skipped) dropped")
                && text.contains("1 tampered, 3 dropped by score_group\n"),
            "{text}"
        );
        s.rollouts_dropped = 0;
        let text = process_summary(&s, None);
        assert!(
            text.contains(
                "stopped   by a signal: no new items taken, 2 groups in flight cancelled"
            ),
            "{text}"
        );
        assert!(
            text.contains("failures  0 rollout attempts failed, 0 items not trained on\n"),
            "{text}"
        );
    }
}
