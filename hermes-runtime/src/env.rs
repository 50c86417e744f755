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

    /// Adds the environment's own tools (e.g. [`crate::tools::typed_tool`]) and toolsets to the
    /// built-ins before `enabled_toolsets` / `distribution` are resolved; runs after `setup`.
    fn register_tools(&self, registry: &mut crate::tools::ToolRegistry) {
        let _ = registry;
    }
}

/// Metric name → value (`eval/mean_reward`, `train/accuracy`, …), sorted for stable output.
pub type Metrics = BTreeMap<String, f64>;

/// Why a rollout's reward is what it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RewardOutcome {
    /// `compute_reward` returned this score.
    Scored,
    /// The agent produced nothing to verify (no turns, or only the prompt): reward 0.
    NothingToVerify,
    /// `compute_reward` failed; the model gets 0 but the failure is the verifier's.
    VerifierError {
        /// The error, one line.
        message: String,
    },
    /// The sandbox or another piece of infrastructure failed; not the model's fault.
    InfraError {
        /// The error, one line.
        message: String,
    },
    /// The agent loop ran past `rollout_timeout` and was stopped: reward 0, not verified.
    Timeout {
        /// The limit that expired, in seconds.
        seconds: f64,
    },
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
