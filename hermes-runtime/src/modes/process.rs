//! `process`: offline rollouts written as Atropos JSONL (one group per line) plus the HTML
//! viewer, with the reference environment's group rules, a progress bar, and a wandb log
//! after every group (step = groups done before it, as Atropos's `process_manager` logs).
//! Items whose rollouts keep failing for reasons not the model's go to the failures file,
//! never to the JSONL; a stop request finishes the groups in flight within the grace period.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::stream::{FuturesUnordered, StreamExt};
use tracing::{debug, info, info_span, warn, Instrument};

use super::drops::Drops;
use super::failures::{failures_path, FailureLog};
use super::html::{write_viewer_of_run, ShownLines};
use super::output::{free_path, JsonlWriter};
use super::rollout::{collect_group, group_drop_reason, GroupRun, Runtime};
use crate::env::{Environment, FailureCounts};
use crate::progress::Progress;
use crate::shutdown::{grace, Shutdown};
use crate::wandb::{server_metrics, LogContext, Logger, Perf, TrainMetrics};

/// What a `process` run produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessSummary {
    /// The JSONL file written.
    pub jsonl: PathBuf,
    /// The HTML viewer written next to it.
    pub html: PathBuf,
    /// The failures file, when an item failed.
    pub failures_file: Option<PathBuf>,
    /// Groups written.
    pub groups_written: usize,
    /// Groups dropped by the group rules.
    pub groups_dropped: usize,
    /// Those drops per reason (`equal_scores`, `size`).
    pub drops_by_reason: BTreeMap<&'static str, usize>,
    /// Rollouts in the groups written or dropped (the model's own outcomes).
    pub rollouts: usize,
    /// Mean reward over those rollouts.
    pub mean_reward: f64,
    /// Of those rollouts, the tampered ones (in their groups at `tampered_reward`).
    pub tampered: usize,
    /// Rollouts the environment's `score_group` dropped from their groups (not counted in
    /// `rollouts`).
    pub rollouts_dropped: usize,
    /// Tool errors seen by the agents.
    pub tool_errors: usize,
    /// Failed rollout attempts per kind (each retried, or its item failed).
    pub rollout_failures: FailureCounts,
    /// Items recorded in the failures file, per kind.
    pub items_failed: FailureCounts,
    /// Groups requested (`total_steps`).
    pub requested: usize,
    /// Set when a stop request ended the run early (`cancelled` groups were in flight).
    pub interrupted: Option<Interruption>,
    /// Wall time of the rollouts (setup and wandb upload excluded).
    pub elapsed: Duration,
}

/// How a stop request ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interruption {
    /// Groups in flight that did not finish within the grace period.
    pub cancelled: usize,
}

/// The files a `process` run writes to, and its running totals.
struct Tally {
    writer: JsonlWriter,
    failures: FailureLog,
    drops: Drops,
    summary: ProcessSummary,
    reward_sum: f64,
    last_failure: Option<String>,
    /// What the viewer shows of each written line.
    shown: ShownLines,
}

/// The `process` mode of a run: its W&B run (named `{env name}-{date}-{6 letters}`, no
/// project or group, the env config with secrets redacted), the rollouts, the summary.
pub async fn main<E: Environment>(
    env: &mut E,
    rt: &Runtime,
    cfg: &crate::config::ResolvedConfig,
    name: &str,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let workers = cfg.env.effective_workers(cfg.servers.len());
    let wandb = if cfg.env.use_wandb {
        start_wandb(cfg, name)
    } else {
        None
    };
    let result = run_process(env, rt, workers, wandb.as_ref(), shutdown).await;
    let report = match wandb {
        Some(logger) => Some(logger.finish(i32::from(result.is_err())).await),
        None => None,
    };
    let summary = result?;
    let bin = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| name.to_owned());
    let wandb_line = report.map(|r| r.describe(&bin));
    print!(
        "{}",
        super::report::process_summary(&summary, wandb_line.as_deref())
    );
    Ok(())
}

/// The W&B run of a `process` run, or `None` when it cannot start (logging problems never
/// stop rollouts; one warning says so).
fn start_wandb(cfg: &crate::config::ResolvedConfig, env_name: &str) -> Option<Logger> {
    use crate::wandb::{run_name, RunSpec, WandbSettings};
    let spec = RunSpec {
        display_name: Some(run_name(env_name)),
        project: None,
        group: None,
        config: crate::config::redact::redacted_env_map(cfg),
    };
    match WandbSettings::from_env().and_then(|settings| Logger::start(&settings, spec)) {
        Ok(logger) => logger,
        Err(e) => {
            warn!("wandb: {e}; continuing without wandb logging");
            None
        }
    }
}

/// Runs up to `total_steps` groups, `workers` at a time, writing each finished group in order
/// and logging it to `wandb` (when given) with the metrics of [`TrainMetrics`].
pub(crate) async fn run_process<E: Environment>(
    env: &mut E,
    rt: &Runtime,
    workers: usize,
    wandb: Option<&Logger>,
    shutdown: &Shutdown,
) -> anyhow::Result<ProcessSummary> {
    let config = std::sync::Arc::clone(rt.config());
    let total = config.total_steps.max(0) as usize;
    let mut tally = Tally::open(rt, total)?;
    let mut metrics = wandb.map(|_| TrainMetrics::<E::Item>::new(&config));
    let started = Instant::now();
    let progress = Progress::new("process", "groups", total as u64);
    let mut done = 0;
    let mut exhausted = false;
    while done < total && !exhausted && tally.summary.interrupted.is_none() {
        if shutdown.is_requested() {
            tally.summary.interrupted = Some(Interruption { cancelled: 0 });
            break;
        }
        let items = next_items(env, workers.max(1).min(total - done)).await;
        exhausted = items.len() < workers.max(1).min(total - done);
        if items.is_empty() {
            break;
        }
        let batch = run_batch(&*env, rt, items, done, shutdown).await;
        if let Some(e) = rt.llm_fatal() {
            progress.finish();
            return Err(e.into());
        }
        let cancelled = batch.iter().filter(|g| g.is_none()).count();
        let before = tally.summary.groups_written;
        for (mut run, took) in batch.into_iter().flatten() {
            done += 1;
            progress.advance(&tally.absorb(done, &mut run, took, &config)?);
            if let (Some(logger), Some(metrics)) = (wandb, metrics.as_mut()) {
                log_group(logger, metrics, &run, took, done, rt, &*env);
            }
        }
        if cancelled > 0 || shutdown.is_requested() {
            tally.summary.interrupted = Some(Interruption { cancelled });
        }
        if before == 0 && tally.summary.groups_written == 0 && tally.items_failed_only() {
            warn!(
                "every group so far failed for reasons that are not the model's; stopping \
                 instead of trying the remaining items"
            );
            break;
        }
    }
    progress.finish();
    tally.summary.elapsed = started.elapsed();
    if exhausted {
        info!("get_next_item returned None after {done} groups; stopping");
    }
    tally.finish()
}

/// Up to `n` items from the environment (fewer when it runs out).
async fn next_items<E: Environment>(env: &mut E, n: usize) -> Vec<E::Item> {
    let mut items = Vec::with_capacity(n);
    while items.len() < n {
        match env.get_next_item().await {
            Some(item) => items.push(item),
            None => break,
        }
    }
    items
}

/// Runs one batch of groups concurrently; results in item order, `None` for a group a stop
/// request cancelled before it finished.
async fn run_batch<E: Environment>(
    env: &E,
    rt: &Runtime,
    items: Vec<E::Item>,
    first: usize,
    shutdown: &Shutdown,
) -> Vec<Option<(GroupRun<E::Item>, Duration)>> {
    let mut results: Vec<Option<(GroupRun<E::Item>, Duration)>> =
        (0..items.len()).map(|_| None).collect();
    let mut pending: FuturesUnordered<_> = items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            async move {
                let t = Instant::now();
                let run = collect_group(env, rt, item).await;
                (i, run, t.elapsed())
            }
            .instrument(info_span!("group", item = first + i))
        })
        .collect();
    let grace = grace(rt.config().shutdown_grace);
    loop {
        tokio::select! {
            next = pending.next() => match next {
                Some((i, run, took)) => results[i] = Some((run, took)),
                None => break,
            },
            () = shutdown.cancelled(grace) => {
                warn!(
                    "{} groups still running cancelled by {}",
                    pending.len(),
                    shutdown.cancel_reason(grace)
                );
                break;
            }
            _ = rt.llm_fatal_raised() => break,
        }
    }
    results
}

fn log_group<E: Environment>(
    logger: &Logger,
    metrics: &mut TrainMetrics<E::Item>,
    run: &GroupRun<E::Item>,
    took: Duration,
    done: usize,
    rt: &Runtime,
    env: &E,
) {
    let secs = took.as_secs_f64();
    metrics.record_perf(Perf::Task, secs);
    metrics.record_failures(&run.failures);
    metrics.record_rollouts_dropped(run.rollouts_dropped);
    match &run.result {
        Ok(group) => {
            let dropped = run.drop_reason(group, rt.config(), None);
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
            metrics.record_rollouts(run.rollouts.clone());
        }
        Err(_) => metrics.record_perf(Perf::Failed, secs),
    }
    let context = LogContext {
        prefix: None,
        length_limit: rt.config().max_token_length,
        server_metrics: server_metrics(&rt.take_request_stats()),
    };
    logger.log(done as i64 - 1, metrics.take(env, &context));
}

impl Tally {
    fn open(rt: &Runtime, total: usize) -> anyhow::Result<Self> {
        let requested = rt
            .config()
            .data_path_to_save_groups
            .clone()
            .context("data_path_to_save_groups is not set")?;
        let path =
            free_path(requested.as_ref()).with_context(|| format!("cannot create {requested}"))?;
        let writer = JsonlWriter::create(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let shown = ShownLines::create_in(path.parent().unwrap_or(Path::new(".")))
            .with_context(|| format!("cannot create a temporary file beside {}", path.display()))?;
        info!("writing groups to {}", path.display());
        Ok(Tally {
            writer,
            failures: FailureLog::new(failures_path(&path)),
            drops: Drops::default(),
            summary: ProcessSummary {
                html: path.with_extension("html"),
                jsonl: path,
                failures_file: None,
                groups_written: 0,
                groups_dropped: 0,
                drops_by_reason: BTreeMap::new(),
                rollouts: 0,
                mean_reward: 0.0,
                tampered: 0,
                rollouts_dropped: 0,
                tool_errors: 0,
                rollout_failures: FailureCounts::default(),
                items_failed: FailureCounts::default(),
                requested: total,
                interrupted: None,
                elapsed: Duration::ZERO,
            },
            reward_sum: 0.0,
            last_failure: None,
            shown,
        })
    }

    /// Takes one finished group: written, dropped by the group rules, or (a failed item)
    /// recorded in the failures file. Returns the rewards to show in the progress line. A
    /// written group gets Atropos's `null`s for its absent keys in place (not on a copy: a
    /// group holds every rollout's tokens and masks).
    fn absorb<I: serde::Serialize>(
        &mut self,
        n: usize,
        run: &mut GroupRun<I>,
        took: Duration,
        config: &crate::config::HermesEnvConfig,
    ) -> anyhow::Result<Vec<f64>> {
        self.summary.rollout_failures.merge(&run.failures);
        self.summary.rollouts_dropped += run.rollouts_dropped;
        let group = match &mut run.result {
            Ok(group) => group,
            Err(failed) => {
                let message = failed.outcome.failure_message().unwrap_or_default();
                warn!(
                    "group {n}: item not trained on after {} attempt(s) ({}); recorded in {}",
                    failed.attempts,
                    message,
                    failures_path(&self.summary.jsonl).display()
                );
                self.last_failure = Some(message.to_owned());
                self.failures
                    .record(failed)
                    .context("cannot write the failures file")?;
                return Ok(Vec::new());
            }
        };
        let rewards: Vec<f64> = run.rollouts.iter().map(|r| r.reward).collect();
        self.summary.rollouts += rewards.len();
        self.summary.tampered += run
            .rollouts
            .iter()
            .filter(|r| r.outcome.tampered().is_some())
            .count();
        self.reward_sum += rewards.iter().sum::<f64>();
        self.summary.tool_errors += run
            .rollouts
            .iter()
            .map(|r| r.run.tool_errors.len())
            .sum::<usize>();
        let dropped = group_drop_reason(run.skipped.is_some(), group, config, None);
        match dropped {
            Some(reason) => {
                debug!("group {n} dropped: {reason}");
                self.drops.record(reason);
            }
            None => {
                group.fill_absent_nulls();
                self.writer
                    .write_group(group)
                    .with_context(|| format!("cannot write {}", self.summary.jsonl.display()))?;
                self.shown
                    .push(group)
                    .context("cannot write the viewer's temporary file")?;
                self.summary.groups_written += 1;
                debug!(
                    "group {n} written in {took:.1?}: mean reward {:.3}",
                    rewards.iter().sum::<f64>() / rewards.len().max(1) as f64
                );
            }
        }
        Ok(rewards)
    }

    /// True when every group so far was a failed item.
    fn items_failed_only(&self) -> bool {
        self.failures.items().total() > 0 && self.summary.rollouts == 0
    }

    /// Writes the viewer and the summary; a run that produced no training data because
    /// of failures is an error naming the cause.
    fn finish(mut self) -> anyhow::Result<ProcessSummary> {
        self.drops.announce();
        self.summary.groups_dropped = self.drops.count();
        self.summary.drops_by_reason = self.drops.by_reason().clone();
        self.summary.items_failed = self.failures.items();
        self.summary.failures_file = self.failures.written().map(PathBuf::from);
        self.summary.mean_reward = if self.summary.rollouts > 0 {
            self.reward_sum / self.summary.rollouts as f64
        } else {
            0.0
        };
        let path = self.summary.jsonl.clone();
        drop(self.writer);
        self.summary.html = path.with_extension("html");
        write_viewer_of_run(&path, &self.summary.html, self.shown)
            .with_context(|| format!("cannot write the viewer for {}", path.display()))?;
        if self.summary.rollouts == 0 && self.summary.items_failed.total() > 0 {
            anyhow::bail!(
                "no group could be produced: {} item(s) failed ({}), see {}; last cause: {}",
                self.summary.items_failed.total(),
                self.summary.items_failed,
                self.summary
                    .failures_file
                    .as_deref()
                    .unwrap_or(&path)
                    .display(),
                self.last_failure.unwrap_or_default()
            );
        }
        Ok(self.summary)
    }
}
