//! `process`: offline rollouts written as Atropos JSONL (one group per line) plus the HTML
//! viewer, with the reference environment's group rules, a progress bar, and a wandb log
//! after every group (step = groups done before it, as Atropos's `process_manager` logs).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tracing::{debug, info, info_span, warn, Instrument};

use super::html::write_viewer;
use super::output::{free_path, JsonlWriter};
use super::rollout::{collect_group, Runtime};
use crate::atropos::ScoredDataGroup;
use crate::env::{Environment, RewardOutcome};
use crate::progress::Progress;
use crate::wandb::{server_metrics, LogContext, Logger, Perf, TrainMetrics};

/// What a `process` run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSummary {
    /// The JSONL file written.
    pub jsonl: PathBuf,
    /// The HTML viewer written next to it.
    pub html: PathBuf,
    /// Groups written.
    pub groups_written: usize,
    /// Groups dropped by the group rules (wrong size, equal scores).
    pub groups_dropped: usize,
    /// Rollouts run.
    pub rollouts: usize,
    /// Mean reward over all rollouts.
    pub mean_reward: f64,
    /// Tool errors seen by the agents.
    pub tool_errors: usize,
    /// Rollouts whose reward is an infrastructure or verifier failure.
    pub failed_rewards: usize,
    /// Groups requested (`total_steps`).
    pub requested: usize,
    /// Wall time of the rollouts (setup and wandb upload excluded).
    pub elapsed: Duration,
}

/// Why a group is not written (Atropos drops these silently; we log them).
fn drop_reason(
    group: &ScoredDataGroup,
    group_size: usize,
    ensure_scores_are_not_same: bool,
) -> Option<String> {
    let expected = group.expected_size(group_size);
    if group.tokens.len() != expected {
        return Some(format!(
            "has {} rollouts, expected {expected}",
            group.tokens.len()
        ));
    }
    if ensure_scores_are_not_same && group.scores_all_equal() {
        return Some("all scores are equal (ensure_scores_are_not_same)".into());
    }
    None
}

/// Runs up to `total_steps` groups, `workers` at a time, writing each finished group in order
/// and logging it to `wandb` (when given) with the metrics of [`TrainMetrics`].
pub async fn run_process<E: Environment>(
    env: &mut E,
    rt: &Runtime,
    workers: usize,
    wandb: Option<&Logger>,
) -> anyhow::Result<ProcessSummary> {
    let config = std::sync::Arc::clone(&rt.config);
    let requested = config
        .data_path_to_save_groups
        .clone()
        .context("data_path_to_save_groups is not set")?;
    let path =
        free_path(requested.as_ref()).with_context(|| format!("cannot create {requested}"))?;
    let mut writer =
        JsonlWriter::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
    info!("writing groups to {}", path.display());
    let total = config.total_steps.max(0) as usize;
    let group_size = config.group_size.max(1) as usize;
    let mut summary = ProcessSummary {
        jsonl: path.clone(),
        html: path.with_extension("html"),
        groups_written: 0,
        groups_dropped: 0,
        rollouts: 0,
        mean_reward: 0.0,
        tool_errors: 0,
        failed_rewards: 0,
        requested: total,
        elapsed: Duration::ZERO,
    };
    let started = Instant::now();
    let progress = Progress::new("process", "groups", total as u64);
    let mut metrics = wandb.map(|_| TrainMetrics::new(&config));
    let mut reward_sum = 0.0;
    let mut done = 0;
    let mut exhausted = false;
    while done < total && !exhausted {
        let mut items = Vec::new();
        while items.len() < workers.max(1) && done + items.len() < total {
            match env.get_next_item().await {
                Some(item) => items.push(item),
                None => {
                    exhausted = true;
                    break;
                }
            }
        }
        let shared: &E = env;
        let first = done;
        let groups = futures::future::join_all(items.into_iter().enumerate().map(|(i, item)| {
            async move {
                let t = Instant::now();
                let (group, rollouts) = collect_group(shared, rt, item).await;
                (group, rollouts, t.elapsed())
            }
            .instrument(info_span!("group", item = first + i))
        }))
        .await;
        for (mut group, rollouts, took) in groups {
            done += 1;
            summary.rollouts += rollouts.len();
            for r in &rollouts {
                reward_sum += r.reward;
                summary.tool_errors += r.run.tool_errors.len();
                if matches!(
                    r.outcome,
                    RewardOutcome::InfraError { .. } | RewardOutcome::VerifierError { .. }
                ) {
                    summary.failed_rewards += 1;
                }
            }
            let rewards: Vec<f64> = rollouts.iter().map(|r| r.reward).collect();
            let dropped = drop_reason(&group, group_size, config.ensure_scores_are_not_same);
            if let Some(reason) = &dropped {
                warn!("group {done} dropped: {reason}");
                summary.groups_dropped += 1;
            } else {
                group.fill_absent_nulls();
                writer
                    .write(&group)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                summary.groups_written += 1;
                let mean = group.scores.iter().sum::<f64>() / group.scores.len().max(1) as f64;
                debug!("group {done}/{total} written: mean reward {mean:.3}");
            }
            progress.advance(&rewards);
            if let (Some(logger), Some(metrics)) = (wandb, metrics.as_mut()) {
                let secs = took.as_secs_f64();
                metrics.record_perf(Perf::TaskDuration, secs);
                if dropped.is_none() {
                    metrics.record_perf(Perf::SucceededTaskDuration, secs);
                    metrics.record_group(&group);
                } else {
                    metrics.record_perf(Perf::FailedTaskDuration, secs);
                }
                metrics.record_rollouts(rollouts);
                let context = LogContext {
                    prefix: None,
                    length_limit: config.max_token_length,
                    server_metrics: server_metrics(&rt.take_request_stats()),
                };
                logger.log(done as i64 - 1, metrics.take(&*env, &context));
            }
        }
    }
    progress.finish();
    summary.elapsed = started.elapsed();
    if exhausted {
        info!("get_next_item returned None after {done} groups; stopping");
    }
    drop(writer);
    summary.html = write_viewer(&path)
        .with_context(|| format!("cannot write the viewer for {}", path.display()))?;
    summary.mean_reward = if summary.rollouts > 0 {
        reward_sum / summary.rollouts as f64
    } else {
        0.0
    };
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atropos::Slot;

    #[test]
    fn group_rules() {
        let g = ScoredDataGroup {
            tokens: vec![vec![1], vec![1]],
            scores: vec![1.0, 1.0],
            ..Default::default()
        };
        assert!(drop_reason(&g, 3, false).unwrap().contains("expected 3"));
        assert!(drop_reason(&g, 2, true).unwrap().contains("equal"));
        assert!(drop_reason(&g, 2, false).is_none());
        let mut o = serde_json::Map::new();
        o.insert("group_size".into(), 2.into());
        let g2 = ScoredDataGroup {
            group_overrides: Slot::Value(o),
            ..g
        };
        assert!(drop_reason(&g2, 5, false).is_none());
    }
}
