//! The one-screen summary printed on stdout at the end of a `process` or `evaluate` run.

use std::fmt::Write as _;

use super::evaluate::EvalSummary;
use super::process::ProcessSummary;
use crate::progress::human_duration;

fn per_second(n: usize, secs: f64) -> f64 {
    n as f64 / secs.max(1e-9)
}

/// The `process` summary; `wandb` is the logger's one-line outcome, when wandb was on.
pub fn process_summary(s: &ProcessSummary, wandb: Option<&str>) -> String {
    let secs = s.elapsed.as_secs_f64();
    let mut out = String::new();
    let _ = writeln!(out, "process finished in {}", human_duration(s.elapsed));
    let _ = writeln!(
        out,
        "  groups    {} groups written, {} dropped ({} requested)",
        s.groups_written, s.groups_dropped, s.requested
    );
    let _ = writeln!(
        out,
        "  rollouts  {}, mean reward {:.3}, {} tool errors, {} failed rewards",
        s.rollouts, s.mean_reward, s.tool_errors, s.failed_rewards
    );
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

/// The `evaluate` summary: time, every metric, and where the results are.
pub fn evaluate_summary(s: &EvalSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "evaluate finished in {}", human_duration(s.elapsed));
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
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn process_summary_fits_one_screen() {
        let s = ProcessSummary {
            jsonl: PathBuf::from("data/x.jsonl"),
            html: PathBuf::from("data/x.html"),
            groups_written: 4,
            groups_dropped: 1,
            rollouts: 15,
            mean_reward: 0.5,
            tool_errors: 2,
            failed_rewards: 0,
            requested: 5,
            elapsed: Duration::from_secs(5),
        };
        let text = process_summary(&s, Some("offline run saved to wandb/x"));
        insta::assert_snapshot!(text, @r"
        process finished in 5.0s
          groups    4 groups written, 1 dropped (5 requested)
          rollouts  15, mean reward 0.500, 2 tool errors, 0 failed rewards
          rate      1.00 groups/s, 3.00 rollouts/s
          jsonl     data/x.jsonl
          viewer    data/x.html
          wandb     offline run saved to wandb/x
        ");
    }
}
