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
use super::rollout::{run_rollout, EnvAccess, Runtime};
use crate::atropos::json::{python_float_repr, to_python_pretty_ascii};
use crate::config::ResolvedConfig;
use crate::env::{Environment, EvalSample, Metrics, RewardOutcome};
use crate::llm::{Message, Split};
use crate::progress::Progress;

/// What an `evaluate` run produced.
#[derive(Debug, Clone)]
pub struct EvalSummary {
    /// All metrics (`eval/mean_reward`, `eval/num_samples`, and the environment's).
    pub metrics: Metrics,
    /// The output directory, when `data_dir_to_save_evals` is set.
    pub dir: Option<PathBuf>,
    /// Wall time of the rollouts.
    pub elapsed: Duration,
}

/// One line of `samples.jsonl`.
#[derive(Serialize)]
struct SampleLine<'a, I: Serialize> {
    messages: &'a [Message],
    question: &'a str,
    score: f64,
    correct: bool,
    item: &'a I,
    turns_used: u32,
    finished_naturally: bool,
    tool_errors: usize,
    outcome: &'a RewardOutcome,
}

/// Writes `{dir}/evaluate_config.yaml`: the full env config, the servers (keys redacted),
/// `slurm` and `testing`.
pub fn write_evaluate_config(dir: &Path, cfg: &ResolvedConfig) -> anyhow::Result<PathBuf> {
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

/// Runs the eval items and writes the results.
pub async fn run_evaluate<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    env_name: &str,
    model_name: &str,
) -> anyhow::Result<EvalSummary> {
    let config = Arc::clone(&rt.config);
    let mut items = env.read().await.eval_items();
    if let Some(n) = config.eval_size.filter(|n| *n >= 0) {
        items.truncate(n as usize);
    }
    anyhow::ensure!(
        !items.is_empty(),
        "the environment has no eval items: implement the `eval_items` hook (or raise --env.eval_size)"
    );
    info!("evaluating {} items", items.len());
    let started = Instant::now();
    let workers = config.max_eval_workers.max(1) as usize;
    let progress = Progress::new("evaluate", "items", items.len() as u64);
    let progress = &progress;
    let rollouts: Vec<_> = futures::stream::iter(items.into_iter().enumerate())
        .map(|(i, item)| {
            let item = Arc::new(item);
            async move {
                let r = run_rollout(env, rt, &item, Split::Eval).await;
                progress.advance(&[r.reward]);
                r
            }
            .instrument(info_span!("eval", item = i))
        })
        .buffered(workers)
        .collect()
        .await;
    progress.finish();
    let took = started.elapsed();
    let elapsed = took.as_secs_f64();
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
    let mut metrics = Metrics::new();
    let n = samples.len() as f64;
    metrics.insert(
        "eval/mean_reward".into(),
        samples.iter().map(|s| s.score).sum::<f64>() / n,
    );
    metrics.insert("eval/num_samples".into(), n);
    guard.evaluate(&samples, &mut metrics);
    drop(guard);

    let dir = config.data_dir_to_save_evals.as_ref().map(PathBuf::from);
    match &dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let doc = json!({
                "config_general": {
                    "model_name": model_name,
                    "total_evaluation_time_seconds": python_float_repr(elapsed),
                    "generation_parameters": {
                        "max_new_tokens": config.max_token_length,
                        "temperature": 0.0,
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
            let mut writer = JsonlWriter::create(&path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            for s in &samples {
                writer.write(&SampleLine {
                    messages: &s.run.messages,
                    question: &s.prompt,
                    score: s.score,
                    correct: s.score >= 1.0,
                    item: &s.item,
                    turns_used: s.run.turns_used,
                    finished_naturally: s.run.finished_naturally,
                    tool_errors: s.run.tool_errors.len(),
                    outcome: &s.outcome,
                })?;
            }
            info!("wrote {}/metrics.json and samples.jsonl", dir.display());
        }
        None => warn!("data_dir_to_save_evals is not set; metrics are printed but not saved"),
    }
    Ok(EvalSummary {
        metrics,
        dir,
        elapsed: took,
    })
}
