//! The testing kit for environment authors: run one item through the whole pipeline (prompt →
//! agent loop against an in-process [`ScriptedServer`] → reward in a real sandbox) with any
//! [`Policy`] — a [`Script`](super::Script), the environment's reference solutions, or a
//! [`CassettePlayer`](super::CassettePlayer) replaying a recorded real model — and pin the
//! result down with insta snapshots whose non-deterministic fields are redacted.
//!
//! ```text
//! let kit = Kit::<TerminalTest>::builder().arg("--env.group_size", "1").start().await?;
//! let item = kit.env().eval_items().remove(0);
//! let report = kit.run_item(item, Split::Eval).await;
//! assert_eq!(report.reward, 1.0);
//! insta::assert_yaml_snapshot!(report.snapshot());
//! ```
//!
//! The same machinery backs the `check` subcommand (the oracle): [`Kit::check`] plays every
//! item's reference solution and reports each one that does not reach the maximum score.

use std::collections::HashSet;
use std::ffi::OsString;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::reference::{ReferenceBook, ReferencePolicy};
use super::server::{Policy, Reply, ScriptedServer};
use crate::agent::AgentResult;
use crate::config::cli::resolve_flags;
use crate::config::{Mode, ServerType};
use crate::env::{Environment, RewardOutcome};
use crate::llm::{LlmClient, RetryPolicy, Split};
use crate::modes::{run_rollout_with, Runtime};
use crate::sandbox::{start_backend, Backend};
use crate::setup::build_env;

/// A boxed policy (the scripted server needs a sized one).
struct BoxedPolicy(Box<dyn Policy>);

impl Policy for BoxedPolicy {
    fn respond(&self, request: &Value) -> Reply {
        self.0.respond(request)
    }
}

/// Configures a [`Kit`]: command-line style flags and the policy answering the agent.
pub struct KitBuilder<E> {
    args: Vec<OsString>,
    policy: Option<Box<dyn Policy>>,
    upstream: Option<String>,
    _env: PhantomData<fn() -> E>,
}

impl<E: Environment> KitBuilder<E> {
    /// Adds a flag and its value exactly as on the command line (`"--env.max_agent_turns", "3"`).
    pub fn arg(mut self, flag: &str, value: &str) -> Self {
        self.args.push(flag.into());
        self.args.push(value.into());
        self
    }

    /// Adds raw command-line arguments (flags of the `process` mode).
    pub fn args<I, T>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Answers the agent with `policy` instead of the environment's reference solutions.
    pub fn policy(mut self, policy: impl Policy) -> Self {
        self.policy = Some(Box::new(policy));
        self
    }

    /// Sends the agent's requests to this OpenAI-compatible server (e.g. a
    /// [`CassetteRecorder`](super::CassetteRecorder) in front of a real model, to record a
    /// cassette) instead of a scripted one; `--openai.*` flags such as the model name and API
    /// key apply.
    pub fn upstream(mut self, base_url: &str) -> Self {
        self.upstream = Some(base_url.to_owned());
        self
    }

    /// Resolves the config as `process` would (code defaults < `--config` YAML < flags),
    /// starts the scripted server, builds the environment, runs `setup` and `register_tools`.
    /// The sandbox backend is `--env.terminal_backend` (local by default). Phase 2 server types
    /// are driven through chat completions here.
    pub async fn start(self) -> anyhow::Result<Kit<E>> {
        let name = E::descriptor().name;
        let mut cfg = resolve_flags(&E::descriptor(), Mode::Process, self.args)?;
        if self.upstream.is_none() && cfg.env.web_backend.as_deref() == Some("auto") {
            // Scripted inference, canned web: a kit run never reaches a real provider.
            cfg.env.web_backend = Some("fake".into());
        }
        let (server, base_url, references) = match self.upstream {
            Some(url) => (None, url, None),
            None => {
                let book = ReferenceBook::default();
                let (policy, references) = match self.policy {
                    Some(policy) => (policy, None),
                    None => (
                        Box::new(ReferencePolicy::new(book.clone())) as Box<dyn Policy>,
                        Some(book),
                    ),
                };
                let server = ScriptedServer::start_with(BoxedPolicy(policy), true)
                    .await
                    .context("cannot start the scripted inference server")?;
                let url = server.base_url();
                (Some(server), url, references)
            }
        };
        let mut servers = cfg.servers.clone();
        for s in &mut servers {
            s.base_url = Some(base_url.clone());
            s.server_type = ServerType::Openai;
        }
        let retry = RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(20),
        };
        let llm = LlmClient::new(&servers, 1, retry)?;
        let backend = Backend::from_config(&cfg.env)?;
        let sandbox = start_backend(&cfg.env, backend, name).await?;
        let (sandboxes, local_root) = (sandbox.provider, sandbox.local_root);
        let (env, shared, tools, distribution) = build_env::<E>(&cfg).await?;
        let rt = Runtime::builder(shared, llm, sandboxes, tools)
            .distribution(distribution)
            .references(references)
            .build();
        Ok(Kit {
            env,
            rt,
            server,
            local_root,
        })
    }
}

/// An environment wired to a scripted server and a real sandbox backend, ready to run items.
pub struct Kit<E: Environment> {
    env: E,
    rt: Runtime,
    server: Option<ScriptedServer>,
    local_root: Option<PathBuf>,
}

impl<E: Environment> std::fmt::Debug for Kit<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit")
            .field("env", &E::descriptor().name)
            .field("server", &self.server)
            .finish()
    }
}

impl<E: Environment> Kit<E> {
    /// A builder with no flags and the reference-solution policy.
    pub fn builder() -> KitBuilder<E> {
        KitBuilder {
            args: Vec::new(),
            policy: None,
            upstream: None,
            _env: PhantomData,
        }
    }

    /// The environment (after `setup`).
    pub fn env(&self) -> &E {
        &self.env
    }

    /// The environment, mutably (e.g. for `get_next_item`).
    pub fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }

    /// The run's services (its config and inference client).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The scripted server ([`ScriptedServer::requests`] holds every chat request sent);
    /// `None` with [`KitBuilder::upstream`].
    pub fn server(&self) -> Option<&ScriptedServer> {
        self.server.as_ref()
    }

    /// Runs the next training item (`get_next_item`); an error when there is none.
    pub async fn run_next(&mut self) -> anyhow::Result<ItemReport<E::Item>> {
        let Some(item) = self.env.get_next_item().await else {
            bail!("get_next_item returned None");
        };
        Ok(self.run_item(item, Split::Train).await)
    }

    /// Runs one rollout of `item`: its prompt, the agent loop with the run's tools, the
    /// reward in the rollout's own sandbox (torn down before this returns).
    pub async fn run_item(&self, item: E::Item, split: Split) -> ItemReport<E::Item> {
        let item = Arc::new(item);
        let tools = self.rt.group_tools();
        let prompt = self.env.format_prompt(&item);
        let has_reference = self.env.reference_solution(&item).is_some();
        let rollout = run_rollout_with(&self.env, &self.rt, &item, split, &tools).await;
        let tool_schemas = tools
            .schemas()
            .iter()
            .map(|s| serde_json::to_value(s).expect("tool schemas serialise"))
            .collect();
        let mut literals = vec![(rollout.task_id.clone(), "[task_id]".to_owned())];
        if let Some(root) = &self.local_root {
            literals.insert(0, (root.display().to_string(), "[sandbox_root]".to_owned()));
        }
        ItemReport {
            item: (*item).clone(),
            system_prompt: self
                .rt
                .config()
                .system_prompt
                .clone()
                .filter(|s| !s.is_empty()),
            prompt,
            tools: tool_schemas,
            tool_calls: tool_calls(&rollout.run),
            reward: rollout.reward,
            outcome: rollout.outcome,
            task_id: rollout.task_id,
            has_reference,
            run: rollout.run,
            redactor: literals
                .into_iter()
                .fold(Redactor::new(), |r, (text, placeholder)| {
                    r.literal(&text, &placeholder)
                }),
        }
    }

    /// The items `check` and `hack` run: training items from `get_next_item` (until `None` or
    /// `limit`; repeats run once), then the eval items. Returns them, the number of training
    /// items among them and the repeats skipped.
    pub async fn select_items(&mut self, limit: usize) -> (Vec<(Split, E::Item)>, usize, usize) {
        let mut seen = HashSet::new();
        let mut items = Vec::new();
        let mut duplicates = 0;
        for _ in 0..limit {
            let Some(item) = self.env.get_next_item().await else {
                break;
            };
            if seen.insert(serde_json::to_string(&item).unwrap_or_default()) {
                items.push((Split::Train, item));
            } else {
                duplicates += 1;
            }
        }
        let train = items.len();
        items.extend(
            self.env
                .eval_items()
                .into_iter()
                .map(|item| (Split::Eval, item)),
        );
        (items, train, duplicates)
    }

    /// The oracle: plays the reference solution of every training item (`get_next_item` until
    /// `None` or `options.limit` items; repeated items are run once) and every eval item
    /// through the real sandbox and verifier, `options.concurrency` at a time, and reports
    /// each item that scores below `options.min_score` or has no reference solution.
    /// Meaningful only with the default (reference) policy.
    pub async fn check(&mut self, options: &CheckOptions) -> CheckReport {
        let (items, train, duplicates) = self.select_items(options.limit).await;
        let this = &*self;
        let mut results: Vec<(usize, CheckedItem)> =
            futures::stream::iter(items.into_iter().enumerate().map(
                |(index, (split, item))| async move {
                    let name = item_name(&item);
                    let report = this.run_item(item, split).await;
                    let checked = CheckedItem {
                        name,
                        split: if split == Split::Eval {
                            "eval"
                        } else {
                            "train"
                        },
                        index: if split == Split::Eval {
                            index - train
                        } else {
                            index
                        },
                        prompt: report.prompt.clone(),
                        reward: report.reward,
                        outcome: report.outcome.clone(),
                        has_reference: report.has_reference,
                        passed: report.has_reference && report.reward >= options.min_score,
                        llm_error: report.run.llm_error.clone(),
                    };
                    (index, checked)
                },
            ))
            .buffer_unordered(options.concurrency.max(1))
            .collect()
            .await;
        results.sort_by_key(|(index, _)| *index);
        CheckReport {
            items: results.into_iter().map(|(_, c)| c).collect(),
            duplicates_skipped: duplicates,
            min_score: options.min_score,
        }
    }
}

/// One tool call the model made, with its arguments parsed (the raw text when not JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParsedToolCall {
    /// 1-based assistant turn.
    pub turn: usize,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON, or the raw string when it does not parse.
    pub arguments: Value,
}

fn tool_calls(run: &AgentResult) -> Vec<ParsedToolCall> {
    run.messages
        .iter()
        .filter(|m| m.role == "assistant")
        .enumerate()
        .flat_map(|(i, m)| {
            m.tool_calls.iter().flatten().map(move |c| ParsedToolCall {
                turn: i + 1,
                name: c.function.name.clone(),
                arguments: serde_json::from_str(&c.function.arguments)
                    .unwrap_or_else(|_| Value::String(c.function.arguments.clone())),
            })
        })
        .collect()
}

/// Everything one item went through: rendered prompt, tools offered, calls made, the agent
/// loop's result and the reward.
#[derive(Debug, Clone, Serialize)]
pub struct ItemReport<I> {
    /// The item.
    pub item: I,
    /// The system prompt sent first, if any.
    pub system_prompt: Option<String>,
    /// The rendered user prompt (`format_prompt`).
    pub prompt: String,
    /// The tool schemas offered to the model, sorted by name.
    pub tools: Vec<Value>,
    /// The tool calls the model made, in order.
    pub tool_calls: Vec<ParsedToolCall>,
    /// The agent loop's result (the whole conversation included).
    pub run: AgentResult,
    /// The reward.
    pub reward: f64,
    /// How the reward came about.
    pub outcome: RewardOutcome,
    /// The rollout's task id (its sandbox key); redacted in snapshots.
    pub task_id: String,
    /// Whether the environment has a reference solution for the item.
    pub has_reference: bool,
    #[serde(skip)]
    redactor: Redactor,
}

impl<I: Serialize> ItemReport<I> {
    /// The report as JSON with non-deterministic values redacted (task ids, tool-call ids,
    /// timestamps, UUIDs, container ids, the local sandbox's temp directory), for
    /// `insta::assert_yaml_snapshot!` / `assert_json_snapshot!`.
    pub fn snapshot(&self) -> Value {
        self.snapshot_with(&Redactor::new())
    }

    /// [`ItemReport::snapshot`] with extra rules (e.g. an environment's own random values).
    pub fn snapshot_with(&self, extra: &Redactor) -> Value {
        let value = serde_json::to_value(self).expect("reports serialise");
        extra.redact(&self.redactor.redact(&value))
    }

    /// A compact view for snapshots of many items: prompt, calls, final answer and reward,
    /// redacted like [`ItemReport::snapshot`] (no tool schemas, no tool results).
    pub fn summary(&self) -> Value {
        let summary = json!({
            "prompt": self.prompt,
            "tool_calls": self.tool_calls,
            "final_response": self.run.final_response(),
            "turns_used": self.run.turns_used,
            "finished_naturally": self.run.finished_naturally,
            "tool_errors": self.run.tool_errors.len(),
            "reward": self.reward,
            "outcome": self.outcome,
        });
        self.redactor.redact(&summary)
    }
}

/// Rewrites non-deterministic values in JSON: whole values under given keys, literal
/// substrings, and built-in patterns (UUIDs, `call_<hex>` ids, Docker container ids).
#[derive(Debug, Clone)]
pub struct Redactor {
    keys: Vec<(String, String)>,
    literals: Vec<(String, String)>,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new()
    }
}

impl Redactor {
    /// The built-in rules: `tool_call_id`, `id`, `task_id`, `container_id` and timestamp keys
    /// (`timestamp`, `created`, `created_at`, `time`, `elapsed`, `duration`) plus the patterns.
    pub fn new() -> Self {
        let keys = [
            ("tool_call_id", "[call_id]"),
            ("id", "[id]"),
            ("task_id", "[task_id]"),
            ("container_id", "[container_id]"),
            ("timestamp", "[timestamp]"),
            ("created", "[timestamp]"),
            ("created_at", "[timestamp]"),
            ("time", "[timestamp]"),
            ("elapsed", "[duration]"),
            ("duration", "[duration]"),
        ];
        Redactor {
            keys: keys
                .iter()
                .map(|(k, p)| ((*k).to_owned(), (*p).to_owned()))
                .collect(),
            literals: Vec::new(),
        }
    }

    /// Replaces the value under every `key` by `placeholder`.
    pub fn key(mut self, key: &str, placeholder: &str) -> Self {
        self.keys.push((key.to_owned(), placeholder.to_owned()));
        self
    }

    /// Replaces every occurrence of `text` in strings by `placeholder` (empty text is ignored).
    pub fn literal(mut self, text: &str, placeholder: &str) -> Self {
        if !text.is_empty() {
            self.literals
                .push((text.to_owned(), placeholder.to_owned()));
        }
        self
    }

    /// A redacted copy of `value`.
    pub fn redact(&self, value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = match self.keys.iter().find(|(key, _)| key == k) {
                            Some((_, p)) if !v.is_null() => Value::String(p.clone()),
                            _ => self.redact(v),
                        };
                        (k.clone(), v)
                    })
                    .collect::<Map<String, Value>>(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.redact(v)).collect()),
            Value::String(s) => Value::String(self.redact_str(s)),
            other => other.clone(),
        }
    }

    fn redact_str(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (text, placeholder) in &self.literals {
            out = out.replace(text.as_str(), placeholder);
        }
        redact_patterns(&out)
    }
}

/// Replaces hex-ish tokens: UUIDs, `call_<8+ hex>` and 12- or 64-digit container ids.
fn redact_patterns(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric() || c == '_') {
        out.push_str(&rest[..start]);
        let token_len = rest[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(rest.len() - start);
        let token = &rest[start..start + token_len];
        out.push_str(&redact_token(token));
        rest = &rest[start + token_len..];
    }
    out.push_str(rest);
    out
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit())
}

fn redact_token(token: &str) -> String {
    let parts: Vec<&str> = token.split('-').collect();
    let uuid = parts.len() == 5
        && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts.iter().all(|p| is_hex(p));
    if uuid {
        return "[uuid]".into();
    }
    if let Some(hex) = token.strip_prefix("call_") {
        if hex.len() >= 8 && is_hex(hex) {
            return "[call_id]".into();
        }
    }
    let mixed =
        token.chars().any(|c| c.is_ascii_digit()) && token.chars().any(|c| c.is_ascii_alphabetic());
    if (token.len() == 64 || token.len() == 12) && is_hex(token) && mixed {
        return "[container_id]".into();
    }
    token.to_owned()
}

/// Options of [`Kit::check`].
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Most training items drawn from `get_next_item`.
    pub limit: usize,
    /// Lowest passing score.
    pub min_score: f64,
    /// Items checked at once.
    pub concurrency: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            limit: 100,
            min_score: 1.0,
            concurrency: 4,
        }
    }
}

/// The oracle's verdict on one item.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedItem {
    /// The item's own name, when it has one ([`item_name`]).
    pub name: Option<String>,
    /// `train` or `eval`.
    pub split: &'static str,
    /// Position among the checked items of its split.
    pub index: usize,
    /// The rendered prompt.
    pub prompt: String,
    /// The score of the reference solution.
    pub reward: f64,
    /// How the score came about.
    pub outcome: RewardOutcome,
    /// Whether the item has a reference solution.
    pub has_reference: bool,
    /// Whether the item reached the minimum score with its reference solution.
    pub passed: bool,
    /// Why the agent loop ended early, if it did.
    pub llm_error: Option<String>,
}

/// An item's own name for reports: the first string among its serialized fields
/// `task_name`, `name`, `task_id` and `id`.
pub fn item_name<I: serde::Serialize>(item: &I) -> Option<String> {
    let value = serde_json::to_value(item).ok()?;
    ["task_name", "name", "task_id", "id"]
        .iter()
        .find_map(|k| value.get(k)?.as_str().map(str::to_owned))
}

impl CheckedItem {
    /// `split #index`, and the item's name when it has one.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{} #{} {name}", self.split, self.index),
            None => format!("{} #{}", self.split, self.index),
        }
    }

    /// One line describing a failure.
    pub fn describe(&self) -> String {
        let prompt: String = self.prompt.chars().take(80).collect();
        let prompt = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
        let why = if !self.has_reference {
            "no reference solution".to_owned()
        } else {
            let mut why = match &self.outcome {
                RewardOutcome::Scored => "scored".to_owned(),
                RewardOutcome::ModelEnded { reason } => format!("model ended: {reason}"),
                RewardOutcome::VerifierFailure { message } => {
                    format!("verifier failure: {message}")
                }
                RewardOutcome::SandboxFailure { message } => format!("sandbox failure: {message}"),
                RewardOutcome::Tampered { message } => format!("tampered: {message}"),
                RewardOutcome::LlmFailure { message } => format!("LLM failure: {message}"),
                RewardOutcome::Timeout { seconds } => format!("timed out after {seconds} s"),
                RewardOutcome::ContextExceeded { message } => {
                    format!("context exceeded: {message}")
                }
                RewardOutcome::TokenizationFailure { message } => {
                    format!("tokenization failure: {message}")
                }
            };
            let llm_failed = matches!(self.outcome, RewardOutcome::LlmFailure { .. });
            if let Some(e) = self.llm_error.as_ref().filter(|_| !llm_failed) {
                why.push_str(&format!("; agent loop: {e}"));
            }
            why
        };
        format!(
            "{}: reward {} ({why}) — {prompt:?}",
            self.label(),
            self.reward
        )
    }
}

/// The oracle's report.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Every checked item, training items first.
    pub items: Vec<CheckedItem>,
    /// Training items skipped because `get_next_item` repeated them.
    pub duplicates_skipped: usize,
    /// The minimum passing score used.
    pub min_score: f64,
}

impl CheckReport {
    /// The items that did not pass.
    pub fn failures(&self) -> Vec<&CheckedItem> {
        self.items.iter().filter(|i| !i.passed).collect()
    }

    /// True when every item passed (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.items.is_empty() && self.items.iter().all(|i| i.passed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redactor_rewrites_keys_literals_and_patterns() {
        let r = Redactor::new().literal("/tmp/root-1", "[sandbox_root]");
        let value = json!({
            "tool_call_id": "call_0a1b2c3d",
            "content": "wrote /tmp/root-1/task-x/a.txt in 3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            "other": "call_0a1b2c3d and 4f3c2a1b9e8d plus deadbeefcafe and plain words",
            "id": null,
            "n": 3,
        });
        assert_eq!(
            r.redact(&value),
            json!({
                "tool_call_id": "[call_id]",
                "content": "wrote [sandbox_root]/task-x/a.txt in [uuid]",
                "other": "[call_id] and [container_id] plus deadbeefcafe and plain words",
                "id": null,
                "n": 3,
            })
        );
    }

    #[test]
    fn custom_keys_are_redacted_whole() {
        let r = Redactor::new().key("seed", "[seed]");
        assert_eq!(
            r.redact(&json!({"a": [{"seed": 17}]})),
            json!({"a": [{"seed": "[seed]"}]})
        );
    }
}
