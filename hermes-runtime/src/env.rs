//! The environment contract: what `#[hermes_env]` generates (`EnvDefinition`) and what the
//! author's hooks provide (`Environment`), plus the small types hooks receive.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::agent::AgentResult;
use crate::config::{ConfigSection, EnvDescriptor, HermesEnvConfig};
use crate::context::ToolContext;
use crate::sandbox::SandboxSpec;

/// Generated from the annotated struct: name, defaults, own config type and construction.
pub trait EnvDefinition: Sized + Send + Sync + 'static {
    /// The environment's own config section (its `#[config]` fields).
    type Config: ConfigSection;

    /// Name, description and defaults for the CLI.
    fn descriptor() -> EnvDescriptor;

    /// Builds the environment from the merged config; plain state fields start at `Default`.
    fn from_config(shared: Arc<HermesEnvConfig>, own: Self::Config) -> Self;
}

/// The hooks of an environment. `#[hermes_env::hooks]` implements this from an inherent
/// `impl` block, checking names and signatures at compile time.
pub trait Environment: EnvDefinition {
    /// One task (a dataset row, a generated problem, …).
    type Item: Clone + Send + Sync + Serialize + 'static;

    /// Loads data; runs once before any rollout.
    fn setup(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send {
        async { Ok(()) }
    }

    /// The next training item; `None` ends a `process` run.
    fn get_next_item(&mut self) -> impl Future<Output = Option<Self::Item>> + Send;

    /// The user message for an item.
    fn format_prompt(&self, item: &Self::Item) -> String;

    /// Scores a finished rollout, with tools running in that rollout's own sandbox.
    fn compute_reward(
        &self,
        item: &Self::Item,
        run: &AgentResult,
        ctx: &ToolContext,
    ) -> impl Future<Output = anyhow::Result<f64>> + Send;

    /// Items for `evaluate` (and periodic evaluation in `serve`).
    fn eval_items(&self) -> Vec<Self::Item> {
        Vec::new()
    }

    /// Adds metrics computed from evaluation samples; `eval/mean_reward` is always present.
    fn evaluate(&self, samples: &[EvalSample<Self::Item>], metrics: &mut Metrics) {
        let _ = (samples, metrics);
    }

    /// Adds metrics computed from the rollouts scored since the last log; the base metrics
    /// (`train/mean_reward`, tool errors, …) are always merged.
    fn wandb_log(&self, rollouts: &[ScoredRollout<Self::Item>], metrics: &mut Metrics) {
        let _ = (rollouts, metrics);
    }

    /// What a correct agent would do for `item`; `--testing true` plays it back, so runs on
    /// a machine without a model show real rewards.
    fn reference_solution(&self, item: &Self::Item) -> Option<ReferenceSolution> {
        let _ = item;
        None
    }

    /// The sandbox an item's rollouts run in (for example its own Docker image, as
    /// terminal-bench tasks have); the default uses the run's configuration.
    fn sandbox_spec(&self, item: &Self::Item) -> SandboxSpec {
        let _ = item;
        SandboxSpec::default()
    }

    /// Adds the environment's own tools (e.g. `hermes_env::tools::typed_tool`) and toolsets to
    /// the built-ins before `enabled_toolsets` / `distribution` are resolved; runs after `setup`.
    fn register_tools(&self, registry: &mut crate::tools::ToolRegistry) {
        let _ = registry;
    }

    /// Sees a finished group (every rollout's reward, trainable tokens, finish reasons and
    /// transcript) before it is written or sent, and may reshape rewards, drop rollouts or
    /// skip the whole group (Atropos's group-level `score`).
    fn score_group(&self, item: &Self::Item, group: &mut ScoredGroup) {
        let _ = (item, group);
    }

    /// Adds the environment's own state to a `serve` checkpoint (saved every
    /// `checkpoint_interval` trainer steps and at exit); positions of `data::Cursor`s made in
    /// `setup` are saved without it.
    fn save_checkpoint(&self, checkpoint: &mut Checkpoint) -> anyhow::Result<()> {
        let _ = checkpoint;
        Ok(())
    }

    /// Takes back the state `save_checkpoint` saved, when a restarted `serve` resumes from a
    /// checkpoint (after `setup`); an error stops the run and leaves the file as it is.
    fn load_checkpoint(&mut self, checkpoint: &Checkpoint) -> anyhow::Result<()> {
        let _ = checkpoint;
        Ok(())
    }

    /// Called each time the agent ends, after the tripwires passed and its processes were
    /// stopped: the next instruction continues the same conversation in the same sandbox (a
    /// multi-step task), `None` goes on to `compute_reward`; an error is a verifier failure.
    fn next_step(
        &self,
        item: &Self::Item,
        run: &AgentResult,
        ctx: &ToolContext,
    ) -> impl Future<Output = anyhow::Result<Option<String>>> + Send {
        let _ = (item, run, ctx);
        async { Ok(None) }
    }
}

/// The environment's own part of a `serve` checkpoint: named values, stored as JSON (upstream's
/// `save_checkpoint(step, data)` dict, whose keys `load_checkpoint` assigned back).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Checkpoint {
    values: serde_json::Map<String, Value>,
}

impl Checkpoint {
    /// A checkpoint holding `values` (as read from a file).
    pub fn from_values(values: serde_json::Map<String, Value>) -> Checkpoint {
        Checkpoint { values }
    }

    /// The values, as written to the file.
    pub fn values(&self) -> &serde_json::Map<String, Value> {
        &self.values
    }

    /// Saves `value` under `key` (replacing an earlier one).
    pub fn set<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> anyhow::Result<()> {
        let value = serde_json::to_value(value)
            .map_err(|e| anyhow::anyhow!("checkpoint value '{key}' cannot be saved: {e}"))?;
        self.values.insert(key.to_owned(), value);
        Ok(())
    }

    /// The value saved under `key`; an error names the key when it is missing or does not
    /// fit `T` (a checkpoint of another version of the environment).
    pub fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> anyhow::Result<T> {
        let value = self
            .values
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("the checkpoint has no value '{key}'"))?;
        serde_json::from_value(value.clone())
            .map_err(|e| anyhow::anyhow!("checkpoint value '{key}' does not fit: {e}"))
    }

    /// Whether a value is saved under `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }
}

/// One rollout of a group as [`Environment::score_group`] sees it.
#[derive(Debug, Clone)]
pub struct GroupRollout {
    /// The reward `compute_reward` gave (or the outcome's, e.g. `tampered_reward`); the hook
    /// may change it.
    pub reward: f64,
    /// Token positions the trainer learns from (mask entries other than -100).
    pub trainable_tokens: usize,
    /// Each assistant turn's `finish_reason` in order (`stop`, `tool_calls`, `length`, …;
    /// `None` where the server gave none).
    pub finish_reasons: Vec<Option<String>>,
    /// The agent loop's result: messages, per-turn usage, tool errors.
    pub run: AgentResult,
    /// How the reward came about.
    pub outcome: RewardOutcome,
    dropped: Option<String>,
}

impl GroupRollout {
    /// A rollout as the group hook receives it.
    pub fn new(
        reward: f64,
        trainable_tokens: usize,
        run: AgentResult,
        outcome: RewardOutcome,
    ) -> Self {
        GroupRollout {
            reward,
            trainable_tokens,
            finish_reasons: run.turns.iter().map(|t| t.finish_reason.clone()).collect(),
            run,
            outcome,
            dropped: None,
        }
    }

    /// Leaves this rollout out of the group (not trained on, not retried); `reason` is logged.
    pub fn drop_rollout(&mut self, reason: impl Into<String>) {
        self.dropped = Some(reason.into());
    }

    /// Why the hook dropped this rollout, if it did.
    pub fn dropped(&self) -> Option<&str> {
        self.dropped.as_deref()
    }

    /// True when any turn was cut at `max_tokens`.
    pub fn truncated(&self) -> bool {
        self.finish_reasons
            .iter()
            .any(|r| r.as_deref() == Some("length"))
    }
}

/// A finished group for [`Environment::score_group`]: its rollouts in order, and whether the
/// hook skipped it.
#[derive(Debug, Clone)]
pub struct ScoredGroup {
    /// The rollouts.
    pub rollouts: Vec<GroupRollout>,
    skipped: Option<String>,
}

impl ScoredGroup {
    /// A group of `rollouts`, not skipped.
    pub fn new(rollouts: Vec<GroupRollout>) -> Self {
        ScoredGroup {
            rollouts,
            skipped: None,
        }
    }

    /// Skips the whole group: it is counted (`skipped` in the summary, W&B's
    /// `train/groups_dropped_skipped`), never written, sent or retried, and not a failure.
    pub fn skip(&mut self, reason: impl Into<String>) {
        self.skipped = Some(reason.into());
    }

    /// Why the hook skipped the group, if it did.
    pub fn skipped(&self) -> Option<&str> {
        self.skipped.as_deref()
    }

    /// The rewards, in rollout order.
    pub fn rewards(&self) -> Vec<f64> {
        self.rollouts.iter().map(|r| r.reward).collect()
    }
}

/// Metric name → value (`eval/mean_reward`, `train/accuracy`, …), sorted for stable output.
pub type Metrics = BTreeMap<String, f64>;

/// How a rollout ended. `Scored`, `ModelEnded`, `Timeout`, `Tampered` and `ContextExceeded`
/// are the model's own outcomes and become training data; the others are failures of
/// something the model does not control: they never reach a group, the trajectory API or a
/// mean reward, and are retried and counted instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RewardOutcome {
    /// `compute_reward` returned this score.
    Scored,
    /// The model produced nothing to verify (no turns, or only the prompt): reward 0.
    ModelEnded {
        /// Why, one line.
        reason: String,
    },
    /// The agent loop ran past `rollout_timeout` (or the item's own
    /// [`SandboxSpec::agent_timeout`](crate::sandbox::SandboxSpec::agent_timeout)) and was
    /// stopped: reward 0, not verified.
    Timeout {
        /// The limit that expired, in seconds.
        seconds: f64,
    },
    /// An inference call failed after its retries and failover.
    LlmFailure {
        /// The error, one line.
        message: String,
    },
    /// The sandbox (container, daemon, scratch directory) failed during the rollout.
    SandboxFailure {
        /// The error, one line.
        message: String,
    },
    /// `compute_reward` failed, panicked, returned a non-finite score, or one of its
    /// commands could not run (a missing interpreter or test runner).
    VerifierFailure {
        /// The error, one line.
        message: String,
    },
    /// A tripwire fired before verification (a process outlived the agent phase, a file the
    /// verifier relies on was changed, a module or hook was planted where Python finds it):
    /// whatever the verifier would say is not evidence, so the verifier does not run. The
    /// model did it, so it is trained on at `tampered_reward` (default 0), never re-run: a
    /// hack that earns a re-roll instead of a low score is never discouraged.
    Tampered {
        /// The wires that fired, one line.
        message: String,
    },
    /// The conversation outgrew the model's context window: the model's own outcome, scored by
    /// `compute_reward` on the conversation so far (like a turn-limit end), never retried.
    ContextExceeded {
        /// The server's error, one line.
        message: String,
    },
    /// The rollout's trainer tokens could not be rendered (a chat template that raises, as
    /// Llama 3.1/3.2's do on parallel tool calls and Mistral's on roles that do not alternate).
    /// What transformers cannot render is not sent in any form: placeholder ids in a group
    /// marked as real tokens would be trained as if they were the model's.
    TokenizationFailure {
        /// The error, one line.
        message: String,
    },
}

/// The kinds of rollout failure (outcomes that are not training data), for counts, metric
/// names (`train/rollout_failures_<kind>`) and the failures file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// [`RewardOutcome::LlmFailure`].
    Llm,
    /// [`RewardOutcome::SandboxFailure`].
    Sandbox,
    /// [`RewardOutcome::VerifierFailure`].
    Verifier,
    /// [`RewardOutcome::TokenizationFailure`].
    Tokenization,
}

impl FailureKind {
    /// Every kind, in display order.
    pub const ALL: [FailureKind; 4] = [
        FailureKind::Llm,
        FailureKind::Sandbox,
        FailureKind::Verifier,
        FailureKind::Tokenization,
    ];

    /// The name used in metrics and files (`llm`, `sandbox`, `verifier`, `tokenization`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Llm => "llm",
            FailureKind::Sandbox => "sandbox",
            FailureKind::Verifier => "verifier",
            FailureKind::Tokenization => "tokenization",
        }
    }

    /// The kind named `name` in metrics and files, if any.
    pub fn named(name: &str) -> Option<FailureKind> {
        FailureKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl RewardOutcome {
    /// The failure kind, or `None` for the model's own outcomes (training data).
    pub fn failure(&self) -> Option<FailureKind> {
        match self {
            RewardOutcome::Scored
            | RewardOutcome::ModelEnded { .. }
            | RewardOutcome::Timeout { .. }
            | RewardOutcome::Tampered { .. }
            | RewardOutcome::ContextExceeded { .. } => None,
            RewardOutcome::LlmFailure { .. } => Some(FailureKind::Llm),
            RewardOutcome::SandboxFailure { .. } => Some(FailureKind::Sandbox),
            RewardOutcome::VerifierFailure { .. } => Some(FailureKind::Verifier),
            RewardOutcome::TokenizationFailure { .. } => Some(FailureKind::Tokenization),
        }
    }

    /// True for the model's own outcomes: the rollout may be trained on.
    pub fn is_training_data(&self) -> bool {
        self.failure().is_none()
    }

    /// The failure's message, for failures.
    pub fn failure_message(&self) -> Option<&str> {
        match self {
            RewardOutcome::LlmFailure { message }
            | RewardOutcome::SandboxFailure { message }
            | RewardOutcome::VerifierFailure { message }
            | RewardOutcome::TokenizationFailure { message } => Some(message),
            _ => None,
        }
    }

    /// The wires that fired, for a tampered rollout.
    pub fn tampered(&self) -> Option<&str> {
        match self {
            RewardOutcome::Tampered { message } => Some(message),
            _ => None,
        }
    }
}

/// Failed rollouts counted per [`FailureKind`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureCounts {
    /// LLM failures.
    pub llm: usize,
    /// Sandbox failures.
    pub sandbox: usize,
    /// Verifier failures.
    pub verifier: usize,
    /// Trainer tokens that could not be rendered.
    pub tokenization: usize,
}

impl FailureCounts {
    /// Counts one failure of `kind`.
    pub fn add(&mut self, kind: FailureKind) {
        *self.get_mut(kind) += 1;
    }

    /// The count of `kind`.
    pub fn get(&self, kind: FailureKind) -> usize {
        match kind {
            FailureKind::Llm => self.llm,
            FailureKind::Sandbox => self.sandbox,
            FailureKind::Verifier => self.verifier,
            FailureKind::Tokenization => self.tokenization,
        }
    }

    fn get_mut(&mut self, kind: FailureKind) -> &mut usize {
        match kind {
            FailureKind::Llm => &mut self.llm,
            FailureKind::Sandbox => &mut self.sandbox,
            FailureKind::Verifier => &mut self.verifier,
            FailureKind::Tokenization => &mut self.tokenization,
        }
    }

    /// All failures.
    pub fn total(&self) -> usize {
        FailureKind::ALL.iter().map(|&k| self.get(k)).sum()
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &FailureCounts) {
        for k in FailureKind::ALL {
            *self.get_mut(k) += other.get(k);
        }
    }
}

/// `"3 (2 llm, 1 sandbox)"`, or `"0"`.
impl std::fmt::Display for FailureCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.total())?;
        let parts: Vec<String> = FailureKind::ALL
            .iter()
            .filter(|&&k| self.get(k) > 0)
            .map(|&k| format!("{} {}", self.get(k), k.as_str()))
            .collect();
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// One finished, scored training rollout.
#[derive(Debug, Clone)]
pub struct ScoredRollout<I> {
    /// The item.
    pub item: Arc<I>,
    /// The sandbox key of the rollout.
    pub task_id: String,
    /// The agent loop's result.
    pub run: AgentResult,
    /// The reward.
    pub reward: f64,
    /// How the reward came about.
    pub outcome: RewardOutcome,
}

/// One evaluated item.
#[derive(Debug, Clone, Serialize)]
pub struct EvalSample<I> {
    /// The item.
    pub item: I,
    /// The prompt shown to the model.
    pub prompt: String,
    /// The reward.
    pub score: f64,
    /// How the reward came about.
    pub outcome: RewardOutcome,
    /// The agent loop's result.
    pub run: AgentResult,
}

/// A scripted correct trajectory: turns of tool calls, then a final answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReferenceSolution {
    /// The turns in order.
    pub turns: Vec<ReferenceTurn>,
}

/// One assistant turn of a [`ReferenceSolution`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ReferenceTurn {
    /// Call these tools (name, arguments).
    ToolCalls(Vec<(String, Value)>),
    /// Answer with this text and stop.
    Answer(String),
}

impl ReferenceSolution {
    /// An empty solution.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a turn calling one tool.
    pub fn tool(mut self, name: &str, arguments: Value) -> Self {
        self.turns
            .push(ReferenceTurn::ToolCalls(vec![(name.to_owned(), arguments)]));
        self
    }

    /// Adds a final answer.
    pub fn answer(mut self, text: impl Into<String>) -> Self {
        self.turns.push(ReferenceTurn::Answer(text.into()));
        self
    }
}

#[cfg(test)]
mod tests {
    use hermes_hooks::{unqualified, HOOKS};

    /// One hook as declared in `Environment`'s source.
    struct Declared {
        name: String,
        /// From `fn` to the parameter list's `)` or the return type.
        signature: String,
        /// Whether it has a default body (is optional).
        provided: bool,
        /// The doc comment as one line.
        doc: String,
    }

    /// The hooks `Environment` declares, read from this file: the table in `hermes_hooks` must
    /// describe exactly these (the macro emits impls from the table, so a difference would
    /// show only as a compile error in an environment, or as a wrong reference page).
    fn declared() -> Vec<Declared> {
        let source = include_str!("env.rs");
        let body = source
            .split("pub trait Environment: EnvDefinition {")
            .nth(1)
            .and_then(|rest| rest.split("\n}\n").next())
            .expect("the Environment trait");
        let mut hooks = Vec::new();
        let mut doc: Vec<&str> = Vec::new();
        let mut lines = body.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if let Some(text) = line.strip_prefix("///") {
                doc.push(text.trim());
                continue;
            }
            if line.starts_with("fn ") {
                let mut signature = line.to_owned();
                while !signature.ends_with('{') && !signature.ends_with(';') {
                    signature.push(' ');
                    signature.push_str(lines.next().expect("the signature's end"));
                }
                let provided = signature.ends_with('{');
                signature.pop();
                hooks.push(Declared {
                    name: line[3..line.find('(').expect("a parameter list")].to_owned(),
                    signature,
                    provided,
                    doc: doc.join(" "),
                });
            }
            doc.clear();
        }
        hooks
    }

    /// `text` without paths, whitespace or trailing commas, for comparing signatures.
    fn normalized(text: &str) -> String {
        let text: String = unqualified(text)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        text.replace(",)", ")")
    }

    #[test]
    fn the_hook_table_describes_the_trait() {
        let declared = declared();
        let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
        let table: Vec<&str> = HOOKS.iter().map(|h| h.name).collect();
        assert_eq!(names, table, "Environment's hooks and hermes_hooks::HOOKS");
        for (hook, declared) in HOOKS.iter().zip(&declared) {
            let receiver = if hook.mut_self { "&mut self" } else { "&self" };
            let params: String = hook
                .params
                .iter()
                .map(|(name, ty)| format!(", {name}: {ty}"))
                .collect();
            let output = match (hook.is_async, hook.output) {
                (true, output) => format!(
                    " -> impl Future<Output = {}> + Send",
                    output.unwrap_or("()")
                ),
                (false, Some(output)) => format!(" -> {output}"),
                (false, None) => String::new(),
            };
            let expected = format!("fn {}({receiver}{params}){output}", hook.name);
            assert_eq!(
                normalized(&declared.signature),
                normalized(&expected),
                "the signature of `{}`",
                hook.name
            );
            assert_eq!(declared.doc, hook.doc, "the doc of `{}`", hook.name);
            assert_eq!(
                declared.provided, !hook.required,
                "whether `{}` is required",
                hook.name
            );
        }
    }
}
