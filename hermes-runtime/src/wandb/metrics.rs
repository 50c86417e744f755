//! The metrics of one wandb log, with Atropos's and Hermes's names: the aggregator
//! [`TrainMetrics`] collects rollouts, groups and timings between logs and turns them into a
//! [`Record`] (the author's `wandb_log` metrics merged in first, then `train/mean_reward`,
//! tool errors, completion lengths, the rollout table, `train_perf/*`, the env-id prefix, and
//! `server/server_{i}_*` for every inference server).

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use crate::agent::clip;
use crate::atropos::{DropReason, ScoredDataGroup};
use crate::config::redact::{redact, redact_text, scrub};
use crate::config::HermesEnvConfig;
use crate::env::{Environment, FailureCounts, FailureKind, Metrics, ScoredRollout};
use crate::llm::{Message, RequestStats};

/// One logged value.
#[derive(Debug, Clone, PartialEq)]
pub enum LogValue {
    /// A number (non-finite numbers are logged as `null`).
    Number(f64),
    /// A string, such as `train/tool_error_details`.
    Text(String),
    /// A table, such as `train/rollouts`.
    Table(Table),
}

/// A wandb table: named columns and rows of JSON cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Column names.
    pub columns: Vec<String>,
    /// Rows, one cell per column.
    pub rows: Vec<Vec<Value>>,
}

/// The values of one log call, by key.
pub type Record = BTreeMap<String, LogValue>;

/// Turns plain metrics into a record.
pub fn record_from(metrics: &Metrics) -> Record {
    metrics
        .iter()
        .map(|(k, v)| (k.clone(), LogValue::Number(*v)))
        .collect()
}

/// The `train_perf/*` series Atropos logs as `{name}_{mean,std,max,min}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Perf {
    /// `train_perf/task_duration`: seconds per worker task.
    Task,
    /// `train_perf/succeeded_task_duration` (+ `train/items_sent_to_api`).
    Succeeded,
    /// `train_perf/failed_task_duration` (+ `train/items_rejected`).
    Failed,
}

impl Perf {
    fn name(self) -> &'static str {
        match self {
            Perf::Task => "train_perf/task_duration",
            Perf::Succeeded => "train_perf/succeeded_task_duration",
            Perf::Failed => "train_perf/failed_task_duration",
        }
    }

    fn count_key(self) -> Option<&'static str> {
        match self {
            Perf::Succeeded => Some("train/items_sent_to_api"),
            Perf::Failed => Some("train/items_rejected"),
            _ => None,
        }
    }
}

/// Population statistics of a series.
fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn std_dev(xs: &[f64]) -> f64 {
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64).sqrt()
}

fn max(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

fn min(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The `q`-th percentile with linear interpolation (numpy's default).
fn percentile(xs: &[f64], q: f64) -> f64 {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = q / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// `server/server_{i}_request_time_{avg,std,99p}`, `…_eval_request_time_*`,
/// `…_average_num_attempts` and `…_eval_retry_rate` for every server with requests (Atropos
/// logs only the last server; this logs all of them).
pub fn server_metrics(stats: &[RequestStats]) -> Metrics {
    let mut out = Metrics::new();
    for (i, s) in stats.iter().enumerate() {
        let p = format!("server/server_{i}");
        for (name, xs) in [
            ("request_time", &s.train_seconds),
            ("eval_request_time", &s.eval_seconds),
        ] {
            if !xs.is_empty() {
                out.insert(format!("{p}_{name}_avg"), mean(xs));
                out.insert(format!("{p}_{name}_std"), std_dev(xs));
                out.insert(format!("{p}_{name}_99p"), percentile(xs, 99.0));
            }
        }
        let attempts = |a: &[u32]| a.iter().map(|&n| f64::from(n)).collect::<Vec<_>>();
        if !s.train_attempts.is_empty() {
            out.insert(
                format!("{p}_average_num_attempts"),
                mean(&attempts(&s.train_attempts)),
            );
        }
        if !s.eval_attempts.is_empty() {
            out.insert(
                format!("{p}_eval_retry_rate"),
                mean(&attempts(&s.eval_attempts)),
            );
        }
    }
    out
}

/// A rollout transcript as the Hermes rollout table shows it: `[SYSTEM]`, `[USER]`,
/// `[ASSISTANT thinking]` (300 characters), `[ASSISTANT]`, `[TOOL CALL] name(args…200)` and
/// `[TOOL RESULT] …500` sections separated by blank lines; `(no data)` when empty.
pub fn format_transcript(messages: &[Message]) -> String {
    let cut = |s: &str, n: usize| {
        if s.chars().count() > n {
            format!("{}...", clip(s, n))
        } else {
            s.to_owned()
        }
    };
    let mut sections = Vec::new();
    for m in messages {
        match m.role.as_str() {
            "system" => sections.push(format!("[SYSTEM]\n{}", m.content)),
            "user" => sections.push(format!("[USER]\n{}", m.content)),
            "assistant" => {
                if let Some(r) = m.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
                    sections.push(format!("[ASSISTANT thinking]\n{}", cut(r, 300)));
                }
                if !m.content.is_empty() {
                    sections.push(format!("[ASSISTANT]\n{}", m.content));
                }
                for call in m.tool_calls.iter().flatten() {
                    sections.push(format!(
                        "[TOOL CALL] {}({})",
                        call.function.name,
                        clip(&redact_arguments(&call.function.arguments), 200)
                    ));
                }
            }
            "tool" => sections.push(format!(
                "[TOOL RESULT] {}",
                clip(&redact_text(&m.content), 500)
            )),
            other => sections.push(format!("[{}]\n{}", other.to_uppercase(), m.content)),
        }
    }
    if sections.is_empty() {
        "(no data)".into()
    } else {
        scrub(&sections.join("\n\n")).into_owned()
    }
}

/// Tool-call arguments with secrets redacted ([`crate::config::redact`]: values of
/// secret-looking keys such as `api_key` or `token`, URL credentials, known secret values);
/// text that is not a JSON object is redacted as text.
pub fn redact_arguments(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(mut v @ Value::Object(_)) => {
            redact(&mut v);
            v.to_string()
        }
        _ => redact_text(arguments).into_owned(),
    }
}

/// One tool failure kept for `train/tool_error_details` (Hermes's buffer entry).
#[derive(Debug, Clone, PartialEq)]
struct ToolErrorEntry {
    turn: u32,
    tool: String,
    args: String,
    error: String,
}

/// Collects what happened between two wandb logs and builds the next [`Record`]. Shared by
/// `process` and `serve`: record rollouts and groups as they finish, timings as they happen,
/// then call [`TrainMetrics::take`] at each log.
pub struct TrainMetrics<I> {
    rollouts_per_group: usize,
    groups_to_keep: usize,
    rollouts: Vec<ScoredRollout<I>>,
    completion_lengths: Vec<f64>,
    table: VecDeque<Vec<(String, f64)>>,
    tool_errors: Vec<ToolErrorEntry>,
    perf: BTreeMap<Perf, Vec<f64>>,
    stashed: Metrics,
    failures: FailureCounts,
    drops: BTreeMap<&'static str, usize>,
    /// Rollouts `score_group` dropped since the last log.
    rollouts_dropped: usize,
}

/// What [`TrainMetrics::take`] needs besides the collected data.
#[derive(Debug, Clone, Default)]
pub struct LogContext<'a> {
    /// `serve` after registration: the `wandb_prepend` (e.g. `gsm8k_0`) put before every env
    /// key as `{prefix}_{key}`; server metrics stay unprefixed.
    pub prefix: Option<&'a str>,
    /// The sequence-length limit (`/info` `max_token_len`, or the config's
    /// `max_token_length`); `train/completion_lengths_p95` is the fraction of completions
    /// longer than 95 % of it.
    pub length_limit: i64,
    /// `server/*` metrics, usually [`server_metrics`] of `LlmClient::take_request_stats`.
    pub server_metrics: Metrics,
}

impl<I> TrainMetrics<I> {
    /// An empty aggregator for the run's config (`group_size`,
    /// `num_rollouts_per_group_for_logging`, `num_rollouts_to_keep`).
    pub fn new(config: &HermesEnvConfig) -> Self {
        let per_group = if config.num_rollouts_per_group_for_logging < 0 {
            config.group_size
        } else {
            config.num_rollouts_per_group_for_logging
        };
        TrainMetrics {
            rollouts_per_group: per_group.max(0) as usize,
            groups_to_keep: config.num_rollouts_to_keep.max(0) as usize,
            rollouts: Vec::new(),
            completion_lengths: Vec::new(),
            table: VecDeque::new(),
            tool_errors: Vec::new(),
            perf: BTreeMap::new(),
            stashed: Metrics::new(),
            failures: FailureCounts::default(),
            drops: BTreeMap::new(),
            rollouts_dropped: 0,
        }
    }

    /// Records finished rollouts (all of them, also those of dropped groups): their rewards
    /// feed `train/mean_reward`, their tool errors the Hermes error buffer, and they are
    /// passed to the environment's `wandb_log` hook at the next log.
    pub fn record_rollouts(&mut self, rollouts: Vec<ScoredRollout<I>>) {
        for r in &rollouts {
            for e in &r.run.tool_errors {
                self.tool_errors.push(ToolErrorEntry {
                    turn: e.turn,
                    tool: e.tool_name.clone(),
                    args: clip(&redact_arguments(&e.arguments), 150),
                    error: clip(&redact_text(&e.error), 300),
                });
            }
        }
        self.rollouts.extend(rollouts);
    }

    /// Records a group that passed the group rules: completion lengths (mask entries other
    /// than −100) and the rollout-table rows (first `num_rollouts_per_group_for_logging`
    /// rollouts; at most `num_rollouts_to_keep` groups are kept).
    pub fn record_group(&mut self, group: &ScoredDataGroup) {
        self.completion_lengths.extend(
            group
                .masks
                .iter()
                .map(|m| m.iter().filter(|&&t| t != -100).count() as f64),
        );
        let messages = group.messages.value();
        let rows = group
            .scores
            .iter()
            .enumerate()
            .take(self.rollouts_per_group)
            .map(|(i, score)| {
                let text = messages
                    .and_then(|m| m.get(i))
                    .map(|m| format_transcript(m))
                    .unwrap_or_else(|| "(no data)".into());
                (text, *score)
            })
            .collect();
        self.table.push_back(rows);
        while self.table.len() > self.groups_to_keep {
            self.table.pop_front();
        }
    }

    /// Records failed rollout attempts (`train/rollout_failures_<kind>` at the next log).
    pub fn record_failures(&mut self, failures: &FailureCounts) {
        self.failures.merge(failures);
    }

    /// Records a group dropped by the group rules (`train/groups_dropped_<reason>`).
    pub fn record_drop(&mut self, reason: DropReason) {
        *self.drops.entry(reason.key()).or_default() += 1;
    }

    /// Records rollouts the environment's `score_group` dropped (`train/rollouts_dropped`).
    pub fn record_rollouts_dropped(&mut self, n: usize) {
        self.rollouts_dropped += n;
    }

    /// Records one value of a `train_perf/*` series.
    pub fn record_perf(&mut self, series: Perf, value: f64) {
        self.perf.entry(series).or_default().push(value);
    }

    /// Adds metrics (e.g. `eval/*` from a periodic evaluation) to the next record.
    pub fn stash(&mut self, metrics: &Metrics) {
        self.stashed
            .extend(metrics.iter().map(|(k, v)| (k.clone(), *v)));
    }

    /// Builds the record of one log and clears what Atropos clears after a log.
    pub fn take<E>(&mut self, env: &E, ctx: &LogContext<'_>) -> Record
    where
        E: Environment<Item = I>,
    {
        let mut env_metrics = Metrics::new();
        env.wandb_log(&self.rollouts, &mut env_metrics);
        let mut rec = record_from(&env_metrics);
        for (k, v) in std::mem::take(&mut self.stashed) {
            rec.insert(k, LogValue::Number(v));
        }
        if !self.rollouts.is_empty() {
            let rewards: Vec<f64> = self.rollouts.iter().map(|r| r.reward).collect();
            rec.insert("train/mean_reward".into(), LogValue::Number(mean(&rewards)));
            for (k, v) in tampered_metrics(&self.rollouts) {
                rec.insert(k.into(), LogValue::Number(v));
            }
        }
        self.rollouts.clear();

        let failures = std::mem::take(&mut self.failures);
        for kind in FailureKind::ALL {
            rec.insert(
                format!("train/rollout_failures_{}", kind.as_str()),
                LogValue::Number(failures.get(kind) as f64),
            );
        }
        for (reason, n) in std::mem::take(&mut self.drops) {
            rec.insert(
                format!("train/groups_dropped_{reason}"),
                LogValue::Number(n as f64),
            );
        }
        let rollouts_dropped = std::mem::take(&mut self.rollouts_dropped);
        if rollouts_dropped > 0 {
            rec.insert(
                "train/rollouts_dropped".into(),
                LogValue::Number(rollouts_dropped as f64),
            );
        }
        rec.insert(
            "train/tool_errors_count".into(),
            LogValue::Number(self.tool_errors.len() as f64),
        );
        if !self.tool_errors.is_empty() {
            let details = self
                .tool_errors
                .iter()
                .map(|e| {
                    format!(
                        "[turn {}] {}({}) -> {}",
                        e.turn,
                        e.tool,
                        clip(&e.args, 80),
                        clip(&e.error, 150)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            tracing::info!("tool errors since the last log:\n{details}");
            rec.insert("train/tool_error_details".into(), LogValue::Text(details));
            self.tool_errors.clear();
        }

        let lengths = std::mem::take(&mut self.completion_lengths);
        if !lengths.is_empty() {
            let limit = 0.95 * ctx.length_limit as f64;
            let over = lengths.iter().filter(|&&l| l > limit).count() as f64;
            for (k, v) in [
                ("train/completion_lengths", mean(&lengths)),
                ("train/completion_lengths_std", std_dev(&lengths)),
                ("train/completion_lengths_max", max(&lengths)),
                ("train/completion_lengths_min", min(&lengths)),
                ("train/completion_lengths_p95", over / lengths.len() as f64),
            ] {
                rec.insert(k.into(), LogValue::Number(v));
            }
        }
        if !self.table.is_empty() {
            let rows = self
                .table
                .drain(..)
                .flatten()
                .map(|(text, score)| vec![Value::String(text), Value::from(score)])
                .collect();
            rec.insert(
                "train/rollouts".into(),
                LogValue::Table(Table {
                    columns: vec!["text".into(), "score".into()],
                    rows,
                }),
            );
        }
        for (series, values) in std::mem::take(&mut self.perf) {
            if values.len() > 1 {
                let name = series.name();
                for (suffix, v) in [
                    ("mean", mean(&values)),
                    ("std", std_dev(&values)),
                    ("max", max(&values)),
                    ("min", min(&values)),
                ] {
                    rec.insert(format!("{name}_{suffix}"), LogValue::Number(v));
                }
                if let Some(k) = series.count_key() {
                    rec.insert(k.into(), LogValue::Number(values.len() as f64));
                }
            } else if !values.is_empty() {
                // Atropos keeps a single value for the next log.
                self.perf.insert(series, values);
            }
        }
        if let Some(prefix) = ctx.prefix {
            rec = rec
                .into_iter()
                .map(|(k, v)| (format!("{prefix}_{k}"), v))
                .collect();
        }
        for (k, v) in &ctx.server_metrics {
            rec.insert(k.clone(), LogValue::Number(*v));
        }
        rec
    }
}

/// `train/tampered` and `train/tampered_rate` of `rollouts`: tampered rollouts are in their
/// groups at `tampered_reward`; how many there are, and their share, show whether the policy
/// is learning to hack.
fn tampered_metrics<I>(rollouts: &[ScoredRollout<I>]) -> [(&'static str, f64); 2] {
    let tampered = rollouts
        .iter()
        .filter(|r| r.outcome.tampered().is_some())
        .count() as f64;
    [
        ("train/tampered", tampered),
        (
            "train/tampered_rate",
            tampered / rollouts.len().max(1) as f64,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::RewardOutcome;

    #[test]
    fn tampered_rollouts_are_counted_with_their_share() {
        let rollout = |outcome| ScoredRollout {
            item: std::sync::Arc::new(()),
            task_id: String::new(),
            run: Default::default(),
            reward: 0.0,
            outcome,
        };
        let tampered = RewardOutcome::Tampered {
            message: "a process outlived the agent phase".into(),
        };
        let rollouts = [
            rollout(tampered),
            rollout(RewardOutcome::Scored),
            rollout(RewardOutcome::Scored),
            rollout(RewardOutcome::Scored),
        ];
        assert_eq!(
            tampered_metrics(&rollouts),
            [("train/tampered", 1.0), ("train/tampered_rate", 0.25)]
        );
    }
    use crate::llm::ToolCall;

    #[test]
    fn statistics_match_numpy() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(mean(&xs), 2.5);
        assert!((std_dev(&xs) - 1.118_033_988_749_895).abs() < 1e-12);
        assert!((percentile(&xs, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
    }

    #[test]
    fn every_server_is_reported() {
        let s0 = RequestStats {
            train_seconds: vec![1.0, 3.0],
            train_attempts: vec![1, 2],
            ..Default::default()
        };
        let s1 = RequestStats {
            eval_seconds: vec![2.0],
            eval_attempts: vec![1],
            ..Default::default()
        };
        let m = server_metrics(&[s0, s1, RequestStats::default()]);
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "server/server_0_average_num_attempts",
                "server/server_0_request_time_99p",
                "server/server_0_request_time_avg",
                "server/server_0_request_time_std",
                "server/server_1_eval_request_time_99p",
                "server/server_1_eval_request_time_avg",
                "server/server_1_eval_request_time_std",
                "server/server_1_eval_retry_rate",
            ]
        );
        assert_eq!(m["server/server_0_request_time_avg"], 2.0);
        assert_eq!(m["server/server_0_average_num_attempts"], 1.5);
    }

    #[test]
    fn transcript_format_and_redaction() {
        let mut assistant = Message::assistant("");
        assistant.reasoning_content = Some("r".repeat(301));
        assistant.tool_calls = Some(vec![ToolCall::new(
            "web_search",
            r#"{"query": "x", "api_key": "sk-123"}"#,
        )]);
        let text = format_transcript(&[
            Message::system("sys"),
            Message::user("hi"),
            assistant,
            Message::tool("c", "o".repeat(600)),
            Message::assistant("done"),
        ]);
        let sections: Vec<&str> = text.split("\n\n").collect();
        assert_eq!(sections[0], "[SYSTEM]\nsys");
        assert_eq!(sections[1], "[USER]\nhi");
        assert_eq!(
            sections[2],
            format!("[ASSISTANT thinking]\n{}...", "r".repeat(300))
        );
        assert_eq!(
            sections[3],
            r#"[TOOL CALL] web_search({"query":"x","api_key":"<redacted>"})"#
        );
        assert_eq!(sections[4], format!("[TOOL RESULT] {}", "o".repeat(500)));
        assert_eq!(sections[5], "[ASSISTANT]\ndone");
        assert_eq!(format_transcript(&[]), "(no data)");
        assert_eq!(redact_arguments("not json"), "not json");
    }
}
