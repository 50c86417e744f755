//! `evaluate`: the full agent loop with tools at temperature 0 over the environment's eval
//! items, written as Atropos's `metrics.json` and `samples.jsonl` (plus
//! `evaluate_config.yaml` with secrets redacted).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tracing::{info, info_span, warn, Instrument};

use super::output::JsonlWriter;
use super::rollout::{run_rollout_with_retries, EnvAccess, Runtime};
use crate::atropos::json::{python_float_repr, to_python_pretty_ascii};
use crate::config::ResolvedConfig;
use crate::env::{Environment, EvalSample, FailureCounts, FailureKind, Metrics, RewardOutcome};
use crate::llm::{Message, Split};
use crate::progress::Progress;
use crate::shutdown::{grace, Shutdown};

/// What an `evaluate` run produced.
#[derive(Debug, Clone)]
pub(crate) struct EvalSummary {
    /// All metrics (`eval/mean_reward`, `eval/num_samples`, and the environment's).
    pub metrics: Metrics,
    /// The output directory, when `data_dir_to_save_evals` is set.
    pub dir: Option<PathBuf>,
    /// Wall time of the rollouts.
    pub elapsed: Duration,
    /// Items whose final rollout failed for a reason not the model's (excluded from the
    /// metrics), per kind.
    pub items_failed: FailureCounts,
    /// Items not evaluated because a stop request ended the run.
    pub items_skipped: usize,
}

/// One line of `samples.jsonl`; a failed item (not the model's outcome) has `score` and
/// `correct` null and says why in `outcome`.
#[derive(Serialize)]
struct SampleLine<'a, I: Serialize> {
    messages: &'a [Message],
    question: &'a str,
    score: Option<f64>,
    correct: Option<bool>,
    item: &'a I,
    turns_used: u32,
    finished_naturally: bool,
    tool_errors: usize,
    outcome: &'a RewardOutcome,
}

/// Writes `{dir}/evaluate_config.yaml`: the full env config, the servers (keys redacted),
/// `slurm` and `testing`.
pub(crate) fn write_evaluate_config(dir: &Path, cfg: &ResolvedConfig) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut root = Map::new();
    root.insert("env".into(), Value::Object(cfg.env_map.clone()));
    root.insert("openai".into(), serde_json::to_value(&cfg.servers)?);
    root.insert("slurm".into(), cfg.manager.slurm.into());
    root.insert("testing".into(), cfg.manager.testing.into());
    let mut root = Value::Object(root);
    crate::config::redact::redact(&mut root);
    let path = dir.join("evaluate_config.yaml");
    std::fs::write(&path, serde_yaml::to_string(&root)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The `evaluate` mode of a run: the eval items, then the summary on stdout.
pub async fn main<E: Environment>(
    env: &E,
    rt: &Runtime,
    cfg: &ResolvedConfig,
    name: &str,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let model = cfg
        .servers
        .first()
        .map(|s| s.model_name.clone())
        .unwrap_or_default();
    let summary = run_evaluate(env, rt, name, &model, shutdown).await?;
    print!("{}", super::report::evaluate_summary(&summary));
    Ok(())
}

/// Runs the eval items (each re-run while it fails for a reason not the model's) and writes
/// the results; failed items are reported, never scored. A stop request evaluates no new
/// items and gives the running ones the grace period.
pub(crate) async fn run_evaluate<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    env_name: &str,
    model_name: &str,
    shutdown: &Shutdown,
) -> anyhow::Result<EvalSummary> {
    let config = Arc::clone(rt.config());
    let mut items = env.read().await.eval_items();
    if let Some(n) = config.eval_size.filter(|n| *n >= 0) {
        items.truncate(n as usize);
    }
    anyhow::ensure!(
        !items.is_empty(),
        "the environment has no eval items: implement the `eval_items` hook (or raise --env.eval_size)"
    );
    let requested = items.len();
    info!("evaluating {requested} items");
    let started = Instant::now();
    let rollouts = evaluate_items(env, rt, items, shutdown).await;
    if let Some(e) = rt.llm_fatal() {
        return Err(e.into());
    }
    let took = started.elapsed();
    let guard = env.read().await;
    let samples: Vec<EvalSample<<A::Env as Environment>::Item>> = rollouts
        .into_iter()
        .map(|r| EvalSample {
            prompt: guard.format_prompt(&r.item),
            item: (*r.item).clone(),
            score: r.reward,
            outcome: r.outcome,
            run: r.run,
        })
        .collect();
    let (scored, failed): (Vec<_>, Vec<_>) = samples
        .into_iter()
        .partition(|s| s.outcome.is_training_data());
    let mut items_failed = FailureCounts::default();
    for s in &failed {
        items_failed.add(s.outcome.failure().unwrap_or(FailureKind::Verifier));
    }
    let items_skipped = requested - scored.len() - failed.len();
    if items_skipped > 0 {
        warn!(
            "evaluation stopped by a signal: {} of {requested} items evaluated",
            scored.len() + failed.len()
        );
    }
    let mut metrics = Metrics::new();
    let n = scored.len() as f64;
    metrics.insert(
        "eval/mean_reward".into(),
        scored.iter().map(|s| s.score).sum::<f64>() / n.max(1.0),
    );
    metrics.insert("eval/num_samples".into(), n);
    // Tampered items are scored (at `tampered_reward`, in the mean above): a model that hacks
    // must not score higher than one that does not. Their number is reported beside it.
    let tampered = scored
        .iter()
        .filter(|s| s.outcome.tampered().is_some())
        .count();
    metrics.insert("eval/tampered".into(), tampered as f64);
    metrics.insert("eval/evaluation_time_seconds".into(), took.as_secs_f64());
    // Evaluation makes no trainer tokens, so it has no tokenization failures to count.
    for kind in FailureKind::ALL
        .into_iter()
        .filter(|&k| k != FailureKind::Tokenization)
    {
        metrics.insert(
            format!("eval/rollout_failures_{}", kind.as_str()),
            items_failed.get(kind) as f64,
        );
    }
    guard.evaluate(&scored, &mut metrics);
    drop(guard);
    if items_failed.total() > 0 {
        warn!(
            "{} eval items failed for reasons that are not the model's ({items_failed}); \
             eval/mean_reward is over the other {}",
            items_failed.total(),
            scored.len()
        );
    }
    let dir = config.data_dir_to_save_evals.as_ref().map(PathBuf::from);
    match &dir {
        Some(dir) => write_results(
            dir, &config, env_name, model_name, took, &metrics, &scored, &failed,
        )?,
        None => warn!("data_dir_to_save_evals is not set; metrics are printed but not saved"),
    }
    if scored.is_empty() && !failed.is_empty() {
        let cause = failed
            .last()
            .and_then(|s| s.outcome.failure_message())
            .unwrap_or_default();
        anyhow::bail!(
            "no eval item could be scored: {} item(s) failed ({items_failed}); last cause: {cause}",
            failed.len()
        );
    }
    Ok(EvalSummary {
        metrics,
        dir,
        elapsed: took,
        items_failed,
        items_skipped,
    })
}

/// Runs the items `max_eval_workers` at a time, in order; stops taking items on a stop
/// request and drops the running ones when the grace period runs out.
async fn evaluate_items<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    items: Vec<<A::Env as Environment>::Item>,
    shutdown: &Shutdown,
) -> Vec<crate::env::ScoredRollout<<A::Env as Environment>::Item>> {
    let workers = rt.config().max_eval_workers.max(1) as usize;
    let progress = Progress::new("evaluate", "items", items.len() as u64);
    let progress = &progress;
    let mut stream = futures::stream::iter(items.into_iter().enumerate())
        .take_while(|_| std::future::ready(!shutdown.is_requested()))
        .map(|(i, item)| {
            let item = Arc::new(item);
            async move {
                let (r, _) = run_rollout_with_retries(env, rt, &item, Split::Eval).await;
                let rewards: &[f64] = if r.outcome.is_training_data() {
                    &[r.reward]
                } else {
                    &[]
                };
                progress.advance(rewards);
                r
            }
            .instrument(info_span!("eval", item = i))
        })
        .buffered(workers);
    let grace = grace(rt.config().shutdown_grace);
    let mut rollouts = Vec::new();
    loop {
        tokio::select! {
            next = stream.next() => match next {
                Some(r) => rollouts.push(r),
                None => break,
            },
            () = shutdown.cancelled(grace) => {
                warn!("eval items still running cancelled by {}", shutdown.cancel_reason(grace));
                break;
            }
            _ = rt.llm_fatal_raised() => break,
        }
    }
    progress.finish();
    rollouts
}

/// Writes `metrics.json` and `samples.jsonl` (scored samples, then failed ones).
#[allow(clippy::too_many_arguments)]
fn write_results<I: Serialize>(
    dir: &Path,
    config: &crate::config::HermesEnvConfig,
    env_name: &str,
    model_name: &str,
    took: Duration,
    metrics: &Metrics,
    scored: &[EvalSample<I>],
    failed: &[EvalSample<I>],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let doc = json!({
        "config_general": {
            "model_name": model_name,
            "total_evaluation_time_seconds": python_float_repr(took.as_secs_f64()),
            // What the eval rollouts really sampled with, under upstream terminal-bench-2's keys.
            "generation_parameters": {
                "temperature": config.eval_temperature(),
                "max_tokens": config.max_token_length,
                "max_agent_turns": config.max_agent_turns,
                "terminal_backend": config.terminal_backend,
            },
        },
        "results": {
            format!("atropos|{env_name}_eval|0"): metrics,
            "all": metrics,
        },
    });
    let path = dir.join("metrics.json");
    std::fs::write(&path, to_python_pretty_ascii(&doc))
        .with_context(|| format!("cannot write {}", path.display()))?;
    let path = dir.join("samples.jsonl");
    let mut writer =
        JsonlWriter::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
    for s in scored.iter().chain(failed) {
        let model_outcome = s.outcome.is_training_data();
        writer.write(&SampleLine {
            messages: &s.run.messages,
            question: &s.prompt,
            score: model_outcome.then_some(s.score),
            correct: model_outcome.then_some(s.score >= 1.0),
            item: &s.item,
            turns_used: s.run.turns_used,
            finished_naturally: s.run.finished_naturally,
            tool_errors: s.run.tool_errors.len(),
            outcome: &s.outcome,
        })?;
    }
    info!("wrote {}/metrics.json and samples.jsonl", dir.display());
    Ok(())
}
