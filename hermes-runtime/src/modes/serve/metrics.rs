//! Serve's step metrics: the W&B run in the trainer's project and its `TrainMetrics` when
//! one is active, else the loop's own rollout ring and reward mean written to the log; both
//! call the environment's `wandb_log` hook.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::Context as _;
use tracing::{info, warn};

use super::session::Session;
use super::ServeOptions;
use crate::atropos::api::TrajectoryApi;
use crate::atropos::{DropReason, ScoredDataGroup};
use crate::config::HermesEnvConfig;
use crate::env::{Environment, FailureCounts, Metrics, ScoredRollout};
use crate::modes::rollout::{Runtime, SharedEnv};
use crate::wandb::{
    run_name, server_metrics, LogContext, Logger, Perf, RunSpec, TrainMetrics, WandbSettings,
};

/// Rollouts kept for the next `wandb_log` hook call (the newest; token state stripped).
pub const LOG_ROLLOUTS_CAPACITY: usize = 1024;

/// What serve has measured since the last step's log.
pub(super) struct StepLog<I> {
    /// The W&B run and its metrics.
    wandb: Option<(Logger, TrainMetrics<I>)>,
    /// Eval metrics waiting for the next log.
    pending_eval: Metrics,
    /// Without wandb: the newest rollouts for the `wandb_log` hook.
    rollouts: VecDeque<ScoredRollout<I>>,
    /// Without wandb: reward sum and count since the last log.
    rewards: (f64, usize),
}

impl<I> StepLog<I> {
    /// Logs to `wandb` when a run started, else to the log.
    pub(super) fn new(wandb: Option<(Logger, TrainMetrics<I>)>) -> Self {
        StepLog {
            wandb,
            pending_eval: Metrics::new(),
            rollouts: VecDeque::new(),
            rewards: (0.0, 0),
        }
    }

    /// A finished group's durations and failures, and the group or why it was dropped.
    pub(super) fn record_group(
        &mut self,
        group: &ScoredDataGroup,
        failures: &FailureCounts,
        took: Duration,
        dropped: Option<DropReason>,
    ) {
        let Some((_, metrics)) = &mut self.wandb else {
            return;
        };
        let secs = took.as_secs_f64();
        metrics.record_perf(Perf::Task, secs);
        metrics.record_failures(failures);
        match dropped {
            None => {
                metrics.record_perf(Perf::Succeeded, secs);
                metrics.record_group(group);
            }
            Some(reason) => {
                metrics.record_perf(Perf::Failed, secs);
                metrics.record_drop(reason);
            }
        }
    }

    /// Rollouts the environment's `score_group` dropped from a group.
    pub(super) fn record_rollouts_dropped(&mut self, n: usize) {
        if let Some((_, metrics)) = &mut self.wandb {
            metrics.record_rollouts_dropped(n);
        }
    }

    /// An item that produced no group, after `took`.
    pub(super) fn record_failed_item(&mut self, took: Duration) {
        if let Some((_, metrics)) = &mut self.wandb {
            metrics.record_perf(Perf::Failed, took.as_secs_f64());
        }
    }

    /// A finished group's rollouts (W&B keeps its own selection; without it the newest
    /// [`LOG_ROLLOUTS_CAPACITY`] are kept).
    pub(super) fn keep_rollouts(&mut self, rollouts: Vec<ScoredRollout<I>>) {
        for r in rollouts {
            self.rewards.0 += r.reward;
            self.rewards.1 += 1;
            if let Some((_, metrics)) = &mut self.wandb {
                metrics.record_rollouts(vec![r]);
                continue;
            }
            if self.rollouts.len() == LOG_ROLLOUTS_CAPACITY {
                self.rollouts.pop_front();
            }
            self.rollouts.push_back(r);
        }
    }

    /// An evaluation's metrics, logged with the next step.
    pub(super) fn add_eval(&mut self, metrics: Metrics) {
        self.pending_eval.extend(metrics);
    }

    /// Logs trainer step `step` (the `wandb_log` hook is skipped when the environment is
    /// locked for `get_next_item` at that moment).
    pub(super) fn log<E: Environment<Item = I>>(
        &mut self,
        env: &SharedEnv<E>,
        rt: &Runtime,
        session: &Session,
        step: i64,
        groups_sent: usize,
    ) {
        let prefix = &session.registration().wandb_name;
        if let Some((logger, metrics)) = &mut self.wandb {
            metrics.stash(&std::mem::take(&mut self.pending_eval));
            let Ok(env) = env.0.try_read() else {
                return;
            };
            let context = LogContext {
                prefix: Some(prefix),
                length_limit: session.length_limit(),
                server_metrics: server_metrics(&rt.take_request_stats()),
            };
            logger.log(step, metrics.take(&*env, &context));
            return;
        }
        let mut metrics = std::mem::take(&mut self.pending_eval);
        let rollouts: Vec<_> = std::mem::take(&mut self.rollouts).into();
        let (sum, count) = std::mem::take(&mut self.rewards);
        if count > 0 {
            metrics.insert("train/mean_reward".into(), sum / count as f64);
        }
        metrics.insert("train/items_sent_to_api".into(), groups_sent as f64);
        if let Ok(env) = env.0.try_read() {
            env.wandb_log(&rollouts, &mut metrics);
        }
        let prefixed: Metrics = metrics
            .into_iter()
            .map(|(k, v)| (format!("{prefix}_{k}"), v))
            .collect();
        log_step_metrics(&prefixed, step);
    }

    /// Finishes the W&B run, if any.
    pub(super) async fn finish(&mut self, env_name: &str) {
        if let Some((logger, _)) = self.wandb.take() {
            let report = logger.finish(0).await;
            info!("wandb: {}", report.describe(env_name));
        }
    }
}

/// Writes one step's metrics to the log when no wandb run is active.
fn log_step_metrics(metrics: &Metrics, step: i64) {
    let line: Vec<String> = metrics.iter().map(|(k, v)| format!("{k}={v:.4}")).collect();
    info!("step {step}: {}", line.join(" "));
}

/// Starts the W&B run in the trainer's project, waiting until the trainer has registered
/// (it names the project); `None` when W&B cannot start (logging never stops rollouts).
pub(super) async fn start_wandb<I>(
    api: &TrajectoryApi,
    desired_name: &str,
    opts: &ServeOptions,
    config: &HermesEnvConfig,
) -> anyhow::Result<Option<(Logger, TrainMetrics<I>)>> {
    let mut announced = false;
    let info = loop {
        let info = api.wandb_info().await.context("GET /wandb_info failed")?;
        if info.project.is_some() {
            break info;
        }
        if !announced {
            info!("waiting for the trainer to register (it names the wandb project)");
            announced = true;
        }
        tokio::time::sleep(opts.register_poll).await;
    };
    info!(
        "trainer logs to wandb project {} (group {})",
        info.project.as_deref().unwrap_or_default(),
        info.group.as_deref().unwrap_or("-")
    );
    let spec = RunSpec {
        display_name: Some(run_name(desired_name)),
        project: info.project,
        group: info.group,
        config: opts.wandb_config.clone().unwrap_or_default(),
    };
    match WandbSettings::from_env().and_then(|settings| Logger::start(&settings, spec)) {
        Ok(Some(logger)) => Ok(Some((logger, TrainMetrics::new(config)))),
        Ok(None) => Ok(None),
        Err(e) => {
            warn!("wandb: {e}; continuing without wandb logging");
            Ok(None)
        }
    }
}
