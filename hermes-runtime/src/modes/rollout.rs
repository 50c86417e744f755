//! One rollout (prompt → agent loop → reward in the same sandbox → teardown) and one group
//! (`group_size` concurrent rollouts of an item, folded into a `ScoredDataGroup`).

use std::future::Future;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tracing::{info_span, warn, Instrument};

use super::agent_clock::{within_budget, AgentClock, Metered};
use crate::agent::{panic_message, AgentLoop, AgentResult, AgentSettings, Ending};
use crate::atropos::tokenize::CutTurns;
use crate::atropos::{DropReason, ScoredDataGroup, ScoredItem};
use crate::config::HermesEnvConfig;
use crate::context::ToolContext;
use crate::env::{Environment, FailureCounts, ReferenceSolution, RewardOutcome, ScoredRollout};
use crate::llm::managed::{NodeList, SessionSeed};
use crate::llm::{
    ChatBackend, ChatRequest, ChatResponse, ChatTokenizer, LlmClient, LlmError, ManagedSession,
    Message, Phase2, Split, Usage,
};
use crate::sandbox::tripwire::{self, Armed};
use crate::sandbox::{GroupFork, SandboxProvider, SandboxSpec, TaskSandbox};
use crate::tools::budget::ResultBudget;
use crate::tools::{GroupTools, ToolSet};

use super::group_hook;
use super::trainer_tokens::{trainer_tokens, TrainerTokens};

/// Shared services of one run. Built with [`Runtime::builder`]; modes read the config and
/// the inference client through [`Runtime::config`] and [`Runtime::llm`].
pub struct Runtime {
    /// Shared env config.
    config: Arc<HermesEnvConfig>,
    /// Inference client.
    llm: LlmClient,
    /// Sandbox backend.
    sandboxes: Arc<dyn SandboxProvider>,
    /// Tools offered to every rollout of this run (without a distribution).
    tools: Arc<ToolSet>,
    /// With `--env.distribution`: draws each group's tools instead of `tools`.
    distribution: Option<GroupTools>,
    /// Bounds concurrent tool executions (`tool_pool_size`).
    tool_permits: Semaphore,
    /// Where each rollout's reference solution goes, keyed by its prompt (`--testing true`:
    /// the scripted server plays them back).
    references: Option<Arc<dyn ReferenceSink>>,
    /// Where the trainer tokens of a rollout come from.
    tokens: TokenSource,
    /// Set once a server refused a group's `n` request: one request per rollout from then on.
    n_refused: AtomicBool,
    /// Set once the first group asked for its answers in one request (said once).
    grouping_announced: AtomicBool,
}

/// Assembles a [`Runtime`] from its required parts; the rest defaults to no tool
/// distribution, no reference sink, placeholder tokens and `tool_pool_size` tool permits.
#[must_use]
pub struct RuntimeBuilder {
    config: Arc<HermesEnvConfig>,
    llm: LlmClient,
    sandboxes: Arc<dyn SandboxProvider>,
    tools: Arc<ToolSet>,
    distribution: Option<GroupTools>,
    references: Option<Arc<dyn ReferenceSink>>,
    tokens: TokenSource,
}

impl RuntimeBuilder {
    /// Draws each group's tools from `distribution` when there is one (`--env.distribution`).
    pub fn distribution(mut self, distribution: Option<GroupTools>) -> Self {
        self.distribution = distribution;
        self
    }

    /// Offers each rollout's reference solution to `sink` when there is one (the scripted
    /// server of `--testing` and the kit).
    pub fn references<S: ReferenceSink + 'static>(mut self, sink: Option<S>) -> Self {
        self.references = sink.map(|s| Arc::new(s) as Arc<dyn ReferenceSink>);
        self
    }

    /// Where the trainer tokens come from (default: placeholders).
    pub fn tokens(mut self, tokens: TokenSource) -> Self {
        self.tokens = tokens;
        self
    }

    /// The runtime, with `tool_pool_size` (at least 1) concurrent tool executions.
    pub fn build(self) -> Runtime {
        let permits = self.config.tool_pool_size.max(1) as usize;
        Runtime {
            config: self.config,
            llm: self.llm,
            sandboxes: self.sandboxes,
            tools: self.tools,
            distribution: self.distribution,
            tool_permits: Semaphore::new(permits),
            references: self.references,
            tokens: self.tokens,
            n_refused: AtomicBool::new(false),
            grouping_announced: AtomicBool::new(false),
        }
    }
}

/// Receives the reference solution of each rollout's prompt, so a scripted server can play
/// it back; the rollout code knows nothing of what does that.
pub trait ReferenceSink: Send + Sync {
    /// The solution for the rollout whose user prompt is `prompt`.
    fn offer(&self, prompt: &str, solution: ReferenceSolution);
}

/// Where the trainer tokens of a rollout come from.
#[derive(Debug, Default)]
pub enum TokenSource {
    /// Phase 1 without a tokenizer: placeholder tokens, not trainable.
    #[default]
    Placeholder,
    /// Phase 1 with a tokenizer: the finished chat re-tokenized with its chat template, every
    /// assistant turn trained (`tokenize_for_trainer`); no sampler logprobs.
    Retokenized(Arc<ChatTokenizer>),
    /// Phase 2: exact tokens, masks and logprobs from `/generate` with node extension.
    Managed(Arc<Phase2>),
}

impl TokenSource {
    /// True when the tokens cannot be trained on.
    pub fn is_placeholder(&self) -> bool {
        matches!(self, TokenSource::Placeholder)
    }
}

/// Read access to the environment from rollouts: `&E` itself (process, evaluate), or a
/// `SharedEnv` that the serve loop also locks for `get_next_item` while workers run.
pub trait EnvAccess: Send + Sync {
    /// The environment.
    type Env: Environment;
    /// A read guard.
    type Guard<'a>: Deref<Target = Self::Env> + Send + Sync
    where
        Self: 'a;
    /// Waits for read access.
    fn read(&self) -> impl Future<Output = Self::Guard<'_>> + Send;
}

impl<E: Environment> EnvAccess for E {
    type Env = E;
    type Guard<'a> = &'a E;
    fn read(&self) -> impl Future<Output = &E> + Send {
        std::future::ready(self)
    }
}

/// An environment shared between the serve loop (which needs `&mut` for `get_next_item`) and
/// its workers; rollouts hold the read lock only while a hook runs.
#[derive(Debug, Default)]
pub(crate) struct SharedEnv<E>(pub tokio::sync::RwLock<E>);

impl<E: Environment> EnvAccess for SharedEnv<E> {
    type Env = E;
    type Guard<'a> = tokio::sync::RwLockReadGuard<'a, E>;
    fn read(&self) -> impl Future<Output = Self::Guard<'_>> + Send {
        self.0.read()
    }
}

impl Runtime {
    /// A builder from the parts every run has: the env config, the inference client, the
    /// sandbox backend and the run's tools.
    pub fn builder(
        config: Arc<HermesEnvConfig>,
        llm: LlmClient,
        sandboxes: Arc<dyn SandboxProvider>,
        tools: ToolSet,
    ) -> RuntimeBuilder {
        RuntimeBuilder {
            config,
            llm,
            sandboxes,
            tools: Arc::new(tools),
            distribution: None,
            references: None,
            tokens: TokenSource::Placeholder,
        }
    }

    /// Bounds concurrent tool executions (`tool_pool_size`), for tool calls made outside the
    /// agent loop (the `openenv` mode's sessions).
    pub(crate) fn tool_permits(&self) -> &Semaphore {
        &self.tool_permits
    }

    /// The sandbox backend.
    pub(crate) fn sandboxes(&self) -> &Arc<dyn SandboxProvider> {
        &self.sandboxes
    }

    /// The shared env config.
    pub fn config(&self) -> &Arc<HermesEnvConfig> {
        &self.config
    }

    /// Where the trainer tokens come from (serve's spool records which tokenizer made them).
    pub fn token_source(&self) -> &TokenSource {
        &self.tokens
    }

    /// The inference client (chat completions; its pool is shared with `/generate`).
    pub fn llm(&self) -> &LlmClient {
        &self.llm
    }

    /// The refusal that stops the run (a wrong key, an unknown model, a request the server
    /// cannot accept), from whichever client met it.
    pub fn llm_fatal(&self) -> Option<crate::llm::LlmError> {
        let phase2 = match &self.tokens {
            TokenSource::Managed(phase2) => phase2.client.pool().fatal(),
            _ => None,
        };
        self.llm.pool().fatal().or(phase2).cloned()
    }

    /// Inference is down (see [`crate::llm::ServerPool::inference_down`]) on the client that
    /// serves the rollouts, or on the chat client.
    pub fn inference_down(&self, grace: Duration) -> Option<crate::llm::InferenceDown> {
        let phase2 = match &self.tokens {
            TokenSource::Managed(phase2) => phase2.client.pool().inference_down(grace),
            _ => None,
        };
        phase2.or_else(|| self.llm.pool().inference_down(grace))
    }

    /// Completes with the refusal that stops the run, once one comes.
    pub async fn llm_fatal_raised(&self) -> crate::llm::LlmError {
        match &self.tokens {
            TokenSource::Managed(phase2) => tokio::select! {
                e = self.llm.pool().fatal_raised() => e,
                e = phase2.client.pool().fatal_raised() => e,
            },
            _ => self.llm.pool().fatal_raised().await,
        }
    }

    /// Request statistics per inference server since the last call (which clears them), from
    /// the client that served the rollouts: `/generate` in Phase 2, chat completions otherwise.
    pub fn take_request_stats(&self) -> Vec<crate::llm::RequestStats> {
        match &self.tokens {
            TokenSource::Managed(phase2) => phase2.client.take_request_stats(),
            _ => self.llm.take_request_stats(),
        }
    }

    /// Loop settings for the split (eval samples at `eval_temperature`, default `agent_temperature`).
    pub fn agent_settings(&self, split: Split) -> AgentSettings {
        let c = &self.config;
        AgentSettings {
            max_turns: c.max_agent_turns.max(1) as u32,
            temperature: if split == Split::Eval {
                c.eval_temperature()
            } else {
                c.agent_temperature
            },
            max_tokens: u32::try_from(c.max_token_length).ok().filter(|&m| m > 0),
            extra_body: request_extras(c),
            split,
            terminal_timeout: Duration::from_secs(c.terminal_timeout.max(1) as u64),
            tool_call_parser: c.tool_call_parser.clone(),
            result_budget: ResultBudget::from_config(c),
        }
    }

    /// Tools for one group (or a rollout outside a group): a fresh draw from the distribution
    /// when one is configured, else the run's tools.
    pub fn group_tools(&self) -> Arc<ToolSet> {
        match &self.distribution {
            Some(d) => d.draw(),
            None => Arc::clone(&self.tools),
        }
    }
}

/// `extra_body` plus the reasoning settings (`thinking_mode`, `reasoning_effort`,
/// `max_reasoning_tokens`) in the OpenRouter-style shape Atropos sends to non-OpenAI hosts.
fn request_extras(c: &HermesEnvConfig) -> Map<String, Value> {
    let mut extra = c.extra_body.clone().unwrap_or_default();
    if c.thinking_mode || c.reasoning_effort.is_some() || c.max_reasoning_tokens.is_some() {
        let mut reasoning = Map::new();
        reasoning.insert("enabled".into(), true.into());
        if let Some(effort) = &c.reasoning_effort {
            reasoning.insert("effort".into(), effort.clone().into());
        } else if let Some(n) = c.max_reasoning_tokens {
            reasoning.insert("max_tokens".into(), n.into());
        }
        extra.insert("reasoning".into(), Value::Object(reasoning));
    }
    extra
}

/// Runs one rollout of `item` and scores it in the same sandbox, which is torn down before
/// this returns (and also if this future is dropped). Resolves its own tools.
pub async fn run_rollout<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
    split: Split,
) -> ScoredRollout<<A::Env as Environment>::Item> {
    run_rollout_with(env, rt, item, split, &rt.group_tools()).await
}

/// [`run_rollout`] with the tools of its group.
pub(crate) async fn run_rollout_with<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
    split: Split,
    tools: &Arc<ToolSet>,
) -> ScoredRollout<<A::Env as Environment>::Item> {
    run_attempt(env, rt, item, split, tools, None, None)
        .await
        .rollout
}

/// One rollout attempt: the scored rollout, in Phase 2 the exact token state of its
/// conversation, and (for training) what the trainer gets.
struct Attempt<I> {
    rollout: ScoredRollout<I>,
    nodes: Option<NodeList>,
    trained: Option<TrainerTokens>,
}

impl<I> Attempt<I> {
    /// Adds the trainer tokens of a rollout that is training data; when they cannot be
    /// rendered the rollout becomes a `tokenization` failure (reward 0, retried and counted
    /// like any failure that is not the model's).
    fn with_trainer_tokens(mut self, rt: &Runtime, tools: &ToolSet) -> Self {
        if !self.rollout.outcome.is_training_data() {
            return self;
        }
        let schemas = tools.schemas();
        let cut_rule = match rt.config.mask_truncated_turns {
            true => CutTurns::Masked,
            false => CutTurns::AsGenerated,
        };
        let run = &self.rollout.run;
        match trainer_tokens(&rt.tokens, run, &schemas, self.nodes.as_ref(), cut_rule) {
            Ok(t) => self.trained = Some(t),
            Err(e) => {
                self.rollout.reward = 0.0;
                self.rollout.outcome = RewardOutcome::TokenizationFailure {
                    message: crate::diagnostics::error_chain(&e),
                };
            }
        }
        self
    }
}

/// One rollout attempt; `first`, when given, is its first turn already answered by its
/// group's single `n` request.
async fn run_attempt<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
    split: Split,
    tools: &Arc<ToolSet>,
    first: Option<FirstTurn>,
    group: Option<&Arc<GroupFork>>,
) -> Attempt<<A::Env as Environment>::Item> {
    let task_id = uuid::Uuid::new_v4().to_string();
    let span = info_span!("rollout", task_id = %task_id);
    async {
        let (mut messages, spec) = first_messages(env, rt, item).await;
        if let Some(first) = &first {
            // The conversation the group's request answered (a prompt may vary per call).
            messages = first.messages.clone();
        }
        let limit = spec
            .agent_timeout
            .map_or(rt.config.rollout_timeout, |d| d.as_secs_f64());
        let sandbox = Arc::new(
            TaskSandbox::new(task_id.clone(), Arc::clone(&rt.sandboxes))
                .with_spec(spec)
                .in_group(group.cloned()),
        );
        let warming = sandbox.warm();
        let mut armed = Armed::now();
        let clock = AgentClock::start();
        let (mut answered, seed) = match first {
            Some(f) => (Some(f.response), f.seed),
            None => (None, None),
        };
        let session = managed_session(rt, seed);
        let (mut phase, mut before) = (messages.clone(), None);
        // One agent phase per step: `next_step` may continue the conversation.
        let (run, reward, outcome, ran) = loop {
            let agent = Phase {
                session: session.as_ref(),
                answered: answered.take(),
            };
            let agent_run = run_agent(rt, split, tools, &sandbox, &clock, agent, phase);
            let Some((run, ending)) = within_budget(limit, &clock, agent_run).await else {
                warn!(
                    "rollout stopped after {limit} s of agent time (rollout_timeout, or the \
                     item's own limit; time waiting on inference not counted); scored 0.0"
                );
                let run = AgentResult {
                    messages,
                    llm_error: Some(format!("rollout timed out after {limit} s")),
                    ..Default::default()
                };
                break (run, 0.0, RewardOutcome::Timeout { seconds: limit }, false);
            };
            let run = match before.take() {
                Some(earlier) => AgentResult::continued(earlier, run),
                None => run,
            };
            let settled = {
                let env = env.read().await;
                settle(&*env, rt, item, &run, &ending, &sandbox, tools, &armed).await
            };
            match settled {
                Settled::Verdict(reward, outcome) => break (run, reward, outcome, true),
                Settled::Next(instruction) => {
                    phase = run.messages.clone();
                    phase.push(Message::user(instruction));
                    // What the step's verification changed is not the agent's doing.
                    armed = Armed::now();
                    before = Some(run);
                }
            }
        };
        // A rollout cut off by its time limit has no transcript to train on.
        let nodes = session.filter(|_| ran).map(|s| s.nodes());
        warming.finish().await;
        release(&sandbox).await;
        Attempt {
            rollout: ScoredRollout {
                item: Arc::clone(item),
                task_id: task_id.clone(),
                run,
                reward,
                outcome,
            },
            nodes,
            trained: None,
        }
    }
    .instrument(span)
    .await
}

/// The rollout's opening messages (system prompt, then the item's prompt) and its sandbox
/// spec; the item's reference solution goes to the run's reference sink on the way.
pub(crate) async fn first_messages<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
) -> (Vec<Message>, SandboxSpec) {
    let (prompt, solution, spec) = {
        let env = env.read().await;
        (
            env.format_prompt(item),
            env.reference_solution(item),
            env.sandbox_spec(item),
        )
    };
    if let (Some(sink), Some(solution)) = (&rt.references, solution) {
        sink.offer(&prompt, solution);
    }
    let mut messages = Vec::new();
    if let Some(system) = rt.config.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        messages.push(Message::system(system));
    }
    messages.push(Message::user(prompt));
    (messages, spec)
}

/// The rollout's Phase 2 session (continuing from the group request's `seed`), when the run
/// has one: it spans every step of the rollout.
fn managed_session(rt: &Runtime, seed: Option<SessionSeed>) -> Option<ManagedSession<'_>> {
    match &rt.tokens {
        TokenSource::Managed(phase2) => Some(match seed {
            Some(seed) => ManagedSession::from_seed(phase2, seed),
            None => ManagedSession::new(phase2),
        }),
        _ => None,
    }
}

/// How one agent phase reaches the model.
struct Phase<'a> {
    /// The rollout's Phase 2 session, whose token nodes the phase extends.
    session: Option<&'a ManagedSession<'a>>,
    /// The group request's answer, as the phase's first turn.
    answered: Option<Result<ChatResponse, LlmError>>,
}

/// The agent loop over `messages`, through the Phase 2 session or the chat client, and how it
/// ended; its inference calls stop `clock`.
async fn run_agent(
    rt: &Runtime,
    split: Split,
    tools: &Arc<ToolSet>,
    sandbox: &Arc<TaskSandbox>,
    clock: &AgentClock,
    phase: Phase<'_>,
    messages: Vec<Message>,
) -> (AgentResult, Ending) {
    let settings = rt.agent_settings(split);
    let answered = phase.answered;
    match phase.session {
        Some(session) => {
            let backend = Answered::new(session, answered);
            let agent = AgentLoop {
                llm: &Metered {
                    inner: &backend,
                    clock,
                },
                tools,
                sandbox,
                tool_permits: &rt.tool_permits,
                settings: &settings,
            };
            agent.run_to_end(messages).await
        }
        None => {
            let backend = Answered::new(&rt.llm, answered);
            let agent = AgentLoop {
                llm: &Metered {
                    inner: &backend,
                    clock,
                },
                tools,
                sandbox,
                tool_permits: &rt.tool_permits,
                settings: &settings,
            };
            agent.run_to_end(messages).await
        }
    }
}

/// Stops what the tools left running in the sandbox, then tears it down (each failure one
/// warning: the rollout's result stands).
pub(crate) async fn release(sandbox: &TaskSandbox) {
    if sandbox.is_created() && sandbox.has_tool_state() {
        if let Ok(created) = sandbox.get().await {
            let own = sandbox.own_processes();
            if let Err(e) = crate::tools::cleanup_processes(created.as_ref(), &own).await {
                warn!("tool state cleanup failed: {e}");
            }
        }
    }
    if let Err(e) = sandbox.close().await {
        warn!("sandbox teardown failed: {e}");
    }
}

/// What follows an agent phase: the rollout's verdict, or the next step's instruction.
#[derive(Debug)]
pub(crate) enum Settled {
    /// The reward and how it was reached.
    Verdict(f64, RewardOutcome),
    /// `next_step`'s instruction: the conversation goes on in the same sandbox.
    Next(String),
}

/// How a finished agent phase ends: a failure of the LLM or the sandbox during the run, the
/// model giving nothing to verify, a tripped wire, the next step (`next_step`), or the
/// verifier's verdict (on a run that outgrew the model's context too: that is the model's
/// outcome, like a turn-limit end, and no step follows it).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn settle<E: Environment>(
    env: &E,
    rt: &Runtime,
    item: &E::Item,
    run: &AgentResult,
    ending: &Ending,
    sandbox: &Arc<TaskSandbox>,
    tools: &Arc<ToolSet>,
    armed: &Armed,
) -> Settled {
    if let Some(message) = sandbox.tool_server_failure() {
        let message = format!("a tool server failed during the rollout: {message}");
        return Settled::Verdict(0.0, RewardOutcome::SandboxFailure { message });
    }
    if let Some(message) = sandbox.infra_failure() {
        let message = format!("sandbox failed during the rollout: {message}");
        return Settled::Verdict(0.0, RewardOutcome::SandboxFailure { message });
    }
    if let Some(message) = &run.llm_error {
        let message = message.clone();
        return Settled::Verdict(0.0, RewardOutcome::LlmFailure { message });
    }
    let context_exceeded = match ending {
        Ending::ContextExceeded { message } => Some(message),
        Ending::Finished => None,
    };
    if run.has_no_agent_output() && context_exceeded.is_none() {
        let reason = "the model produced nothing to verify".to_owned();
        return Settled::Verdict(0.0, RewardOutcome::ModelEnded { reason });
    }
    if let Some(outcome) = guard_verification(sandbox, armed).await {
        let reward = match outcome {
            RewardOutcome::Tampered { .. } => rt.config.tampered_reward,
            _ => 0.0,
        };
        return Settled::Verdict(reward, outcome);
    }
    if context_exceeded.is_none() {
        if let Some(next) = next_step(env, rt, item, run, sandbox, tools).await {
            return next;
        }
    }
    let (reward, outcome) = match (
        score(env, rt, item, run, sandbox, tools).await,
        context_exceeded,
    ) {
        ((reward, RewardOutcome::Scored), Some(message)) => {
            let message = message.clone();
            (reward, RewardOutcome::ContextExceeded { message })
        }
        (verdict, _) => verdict,
    };
    Settled::Verdict(reward, outcome)
}

/// Asks the environment for the next step: `None` when there is none (scoring follows), the
/// next instruction, or a verifier failure (the hook failed or panicked, or one of its
/// commands could not run).
async fn next_step<E: Environment>(
    env: &E,
    rt: &Runtime,
    item: &E::Item,
    run: &AgentResult,
    sandbox: &Arc<TaskSandbox>,
    tools: &Arc<ToolSet>,
) -> Option<Settled> {
    let ctx = verifier_context(rt, sandbox, tools);
    let asked = std::panic::AssertUnwindSafe(env.next_step(item, run, &ctx))
        .catch_unwind()
        .await;
    let failed = |message: String| {
        Some(Settled::Verdict(
            0.0,
            RewardOutcome::VerifierFailure { message },
        ))
    };
    if let Some(message) = sandbox.infra_failure() {
        let message = format!("sandbox failed while preparing the next step: {message}");
        return Some(Settled::Verdict(
            0.0,
            RewardOutcome::SandboxFailure { message },
        ));
    }
    if let Some(message) = ctx.unrunnable_command() {
        return failed(message.to_owned());
    }
    match asked {
        Ok(Ok(next)) => next.map(Settled::Next),
        Ok(Err(e)) => failed(format!("next_step failed: {e:#}")),
        Err(panic) => failed(format!(
            "next_step panicked: {}",
            panic_message(panic.as_ref())
        )),
    }
}

/// The `ToolContext` the verifier's hooks get: the rollout's sandbox and tools, the run's
/// terminal timeout, its inference servers for a judge.
fn verifier_context(rt: &Runtime, sandbox: &Arc<TaskSandbox>, tools: &Arc<ToolSet>) -> ToolContext {
    ToolContext::new(
        Arc::clone(sandbox),
        Arc::clone(tools),
        Duration::from_secs(rt.config.terminal_timeout.max(1) as u64),
    )
    .with_llm(rt.llm.clone())
}

/// The tripwires between the agent phase and the verifier: stops every process the agent
/// started (the `process` tool's included; the item's declared survivors excepted) and checks
/// what it changed. `None`
/// lets verification proceed; otherwise the rollout's outcome (tampered, scored
/// `tampered_reward` by the caller, or a sandbox failure when the checks themselves could
/// not run).
async fn guard_verification(sandbox: &TaskSandbox, armed: &Armed) -> Option<RewardOutcome> {
    if !sandbox.is_created() {
        return None;
    }
    let checked = async {
        let created = sandbox.get().await?;
        // The `process` tool's own processes as this process recorded them: the model can
        // write the tool's state files, so they decide nothing here.
        let own = sandbox.own_processes();
        // What the framework laid in the new sandbox (its preparation, setup) is not the agent's.
        let armed = armed.after(sandbox.laid_at());
        let wires = tripwire::inspect(created.as_ref(), sandbox.spec(), &armed, &own).await?;
        // Then the agent's shell goes too (with whatever its commands' groups still hold):
        // the verifier's commands get a fresh one.
        created.reset_processes().await?;
        if sandbox.has_tool_state() {
            crate::tools::cleanup_processes(created.as_ref(), &own).await?;
        }
        Ok::<_, crate::sandbox::SandboxError>(wires)
    };
    match checked.await {
        Ok(wires) if wires.is_empty() => None,
        Ok(wires) => {
            let message = wires.join(" | ");
            warn!("tripwire: {message}; the rollout is tampered (scored --env.tampered_reward, not verified)");
            Some(RewardOutcome::Tampered { message })
        }
        Err(e) => Some(RewardOutcome::SandboxFailure {
            message: format!("the tripwire checks before verification failed: {e}"),
        }),
    }
}

async fn score<E: Environment>(
    env: &E,
    rt: &Runtime,
    item: &E::Item,
    run: &AgentResult,
    sandbox: &Arc<TaskSandbox>,
    tools: &Arc<ToolSet>,
) -> (f64, RewardOutcome) {
    let ctx = verifier_context(rt, sandbox, tools);
    let reward = std::panic::AssertUnwindSafe(env.compute_reward(item, run, &ctx))
        .catch_unwind()
        .await;
    let verdict = match reward {
        Ok(Ok(r)) if r.is_finite() => Ok(r),
        Ok(Ok(r)) => Err(format!("compute_reward returned {r}")),
        Ok(Err(e)) => Err(format!("compute_reward failed: {e:#}")),
        Err(panic) => Err(format!(
            "compute_reward panicked: {}",
            panic_message(panic.as_ref())
        )),
    };
    // The sandbox's own failure wins: a reward computed from a broken sandbox means nothing.
    if let Some(message) = sandbox.infra_failure() {
        let message = format!("sandbox failed while scoring: {message}");
        return (0.0, RewardOutcome::SandboxFailure { message });
    }
    if let Some(message) = ctx.unrunnable_command() {
        return (
            0.0,
            RewardOutcome::VerifierFailure {
                message: message.to_owned(),
            },
        );
    }
    match verdict {
        Ok(r) => (r, RewardOutcome::Scored),
        Err(message) => (0.0, RewardOutcome::VerifierFailure { message }),
    }
}

/// Runs one rollout, re-running it while it fails for a reason that is not the model's, up
/// to `max_rollout_retries` times (fewer once `abandon` is set: its group has failed anyway).
/// With `for_trainer`, a rollout whose trainer tokens cannot be made is such a failure.
/// Returns the last attempt and the failures met on the way.
#[allow(clippy::too_many_arguments)]
async fn run_rollout_retrying<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
    split: Split,
    tools: &Arc<ToolSet>,
    abandon: &AtomicBool,
    for_trainer: bool,
    mut first: Option<FirstTurn>,
    group: Option<&Arc<GroupFork>>,
) -> (Attempt<<A::Env as Environment>::Item>, FailureCounts) {
    let attempts = rt.config.max_rollout_retries.max(0) as usize + 1;
    let mut failures = FailureCounts::default();
    let mut attempt = 1;
    loop {
        // Only the first attempt takes the group's answer; a re-run asks on its own.
        let mut run = run_attempt(env, rt, item, split, tools, first.take(), group).await;
        if for_trainer {
            run = run.with_trainer_tokens(rt, tools);
        }
        let rollout = &run.rollout;
        let Some(kind) = rollout.outcome.failure() else {
            return (run, failures);
        };
        failures.add(kind);
        let message = rollout.outcome.failure_message().unwrap_or_default();
        if rt.llm_fatal().is_some() {
            // The run is stopping on a refusal no re-run can fix; the mode says why.
            return (run, failures);
        }
        if attempt >= attempts || abandon.load(Ordering::Relaxed) {
            warn!(
                "rollout failed ({} failure) after {attempt} attempt(s), not trained on: {message}",
                kind.as_str()
            );
            return (run, failures);
        }
        warn!(
            "rollout failed ({} failure): {message}; re-running it (attempt {} of {attempts}, \
             --env.max_rollout_retries)",
            kind.as_str(),
            attempt + 1
        );
        attempt += 1;
    }
}

/// One evaluation or stand-alone rollout with the retry rule of [`run_rollout_retrying`];
/// the returned rollout's outcome may still be a failure.
pub(crate) async fn run_rollout_with_retries<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
    split: Split,
) -> (ScoredRollout<<A::Env as Environment>::Item>, FailureCounts) {
    let tools = rt.group_tools();
    let (attempt, failures) = run_rollout_retrying(
        env,
        rt,
        item,
        split,
        &tools,
        &AtomicBool::new(false),
        false,
        None,
        None,
    )
    .await;
    (attempt.rollout, failures)
}

/// A group's item that could not be turned into training data: one of its rollouts kept
/// failing for a reason that is not the model's.
#[derive(Debug, Clone)]
pub struct FailedItem<I> {
    /// The item.
    pub item: Arc<I>,
    /// The failing rollout's last outcome (a failure).
    pub outcome: RewardOutcome,
    /// Attempts made for that rollout.
    pub attempts: usize,
}

/// What running one item's group produced.
#[derive(Debug)]
pub struct GroupRun<I> {
    /// The group (every rollout a model outcome), or why there is none.
    pub result: Result<ScoredDataGroup, FailedItem<I>>,
    /// The final attempt of each rollout slot (without those `score_group` dropped), with the
    /// rewards `score_group` left.
    pub rollouts: Vec<ScoredRollout<I>>,
    /// Every failed attempt, retried or not.
    pub failures: FailureCounts,
    /// Rollouts the environment's `score_group` dropped from the group.
    pub rollouts_dropped: usize,
    /// Why `score_group` skipped the group, if it did: the group is counted as a drop
    /// ([`DropReason::Skipped`]), never sent, written or retried.
    pub skipped: Option<String>,
}

impl<I> GroupRun<I> {
    /// Why this run's `group` is not sent: see [`group_drop_reason`].
    pub(crate) fn drop_reason(
        &self,
        group: &ScoredDataGroup,
        config: &HermesEnvConfig,
        length_limit: Option<i64>,
    ) -> Option<DropReason> {
        group_drop_reason(self.skipped.is_some(), group, config, length_limit)
    }
}

/// Why a group is not sent: skipped by `score_group`, else the upstream group rules
/// ([`ScoredDataGroup::drop_reason`]).
pub(crate) fn group_drop_reason(
    skipped: bool,
    group: &ScoredDataGroup,
    config: &HermesEnvConfig,
    length_limit: Option<i64>,
) -> Option<DropReason> {
    if skipped {
        return Some(DropReason::Skipped);
    }
    group.drop_reason(
        config.group_size.max(1) as usize,
        config.ensure_scores_are_not_same,
        length_limit,
    )
}

/// Runs `group_size` concurrent rollouts of one item (each re-run while it fails for a
/// reason not the model's) and folds them into a group when every one is a model outcome.
pub async fn collect_group<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: <A::Env as Environment>::Item,
) -> GroupRun<<A::Env as Environment>::Item> {
    let item = Arc::new(item);
    let size = rt.config.group_size.max(1) as usize;
    let tools = rt.group_tools();
    let abandon = AtomicBool::new(false);
    // The item's `prepare` runs once for the group; removed when the group is done.
    let attempts = rt.config.max_rollout_retries.max(0) as u32 + 1;
    let fork = GroupFork::new(Arc::clone(&rt.sandboxes), attempts);
    let mut firsts = group_first_turns(env, rt, &item, size, &tools).await;
    firsts.resize_with(size, || None);
    let (item_ref, tools_ref, abandon_ref, fork_ref) = (&item, &tools, &abandon, &fork);
    let slots = futures::future::join_all(firsts.into_iter().map(|first| async move {
        let (attempt, failures) = run_rollout_retrying(
            env,
            rt,
            item_ref,
            Split::Train,
            tools_ref,
            abandon_ref,
            true,
            first,
            Some(fork_ref),
        )
        .await;
        if !attempt.rollout.outcome.is_training_data() {
            abandon_ref.store(true, Ordering::Relaxed);
        }
        (attempt, failures)
    }))
    .await;
    fork.close().await;
    let mut failures = FailureCounts::default();
    let mut failed = None;
    let mut rollouts_dropped = 0;
    let mut skipped = None;
    let mut rollouts = Vec::with_capacity(size);
    let mut trained = Vec::with_capacity(size);
    for (attempt, f) in slots {
        let Attempt {
            rollout,
            trained: t,
            ..
        } = attempt;
        failures.merge(&f);
        // The item is recorded with the rollout that used up its re-runs (the others may have
        // stopped early once the group had failed).
        let more_attempts = failed
            .as_ref()
            .is_none_or(|known: &FailedItem<_>| f.total() > known.attempts);
        if !rollout.outcome.is_training_data() && more_attempts {
            failed = Some(FailedItem {
                item: Arc::clone(&item),
                outcome: rollout.outcome.clone(),
                attempts: f.total(),
            });
        }
        trained.push(t);
        rollouts.push(rollout);
    }
    if failed.is_none() {
        // Every rollout here is training data, whose tokens were made with it.
        let trained: Vec<TrainerTokens> = trained
            .into_iter()
            .map(|t| t.expect("a training rollout carries its trainer tokens"))
            .collect();
        let hooked = {
            let guard = env.read().await;
            group_hook::apply(&*guard, &item, std::mem::take(&mut rollouts), trained)
        };
        match hooked {
            Ok(hooked) => {
                rollouts = hooked.rollouts;
                rollouts_dropped = hooked.dropped;
                skipped = hooked.skipped;
                let items: Vec<ScoredItem> = rollouts
                    .iter()
                    .zip(hooked.trained)
                    .map(|(r, t)| ScoredItem {
                        tokens: t.tokens,
                        masks: t.masks,
                        score: r.reward,
                        messages: r.run.annotated_messages(),
                        inference_logprobs: t.inference_logprobs,
                    })
                    .collect();
                let mut group = ScoredDataGroup::from_items(items, rt.tokens.is_placeholder());
                if rollouts_dropped > 0 && !rollouts.is_empty() {
                    set_group_size(&mut group, rollouts.len());
                }
                mark_tampered(&mut group, &rollouts);
                return GroupRun {
                    result: Ok(group),
                    rollouts,
                    failures,
                    rollouts_dropped,
                    skipped,
                };
            }
            Err(message) => {
                warn!("group not trained on: {message}");
                failures.add(crate::env::FailureKind::Verifier);
                failed = Some(FailedItem {
                    item: Arc::clone(&item),
                    outcome: RewardOutcome::VerifierFailure { message },
                    attempts: 1,
                });
            }
        }
    }
    GroupRun {
        result: Err(failed.expect("a failed group has its item")),
        rollouts,
        failures,
        rollouts_dropped,
        skipped,
    }
}

/// A rollout's first turn, already answered by its group's single `n` request.
pub(crate) struct FirstTurn {
    /// The conversation the request answered.
    messages: Vec<Message>,
    /// This rollout's choice (or the request's failure, which every rollout of the group
    /// meets as its own LLM failure).
    response: Result<ChatResponse, LlmError>,
    /// Phase 2: the token state of this choice, to continue the rollout's session from.
    seed: Option<SessionSeed>,
}

/// A chat backend whose first call returns the answer the group's request already got.
struct Answered<'a> {
    first: std::sync::Mutex<Option<Result<ChatResponse, LlmError>>>,
    inner: &'a dyn ChatBackend,
}

impl<'a> Answered<'a> {
    fn new(inner: &'a dyn ChatBackend, first: Option<Result<ChatResponse, LlmError>>) -> Self {
        Answered {
            first: std::sync::Mutex::new(first),
            inner,
        }
    }
}

#[async_trait::async_trait]
impl ChatBackend for Answered<'_> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner()).take();
        match first {
            Some(answer) => answer,
            None => self.inner.chat(request).await,
        }
    }
}

/// True when a group's first turns go out as one request with `n = size`: asked for
/// (`--env.group_requests`), more than one rollout, no server has refused `n`, and the
/// rollouts are single-turn (one turn allowed, or no tools to call).
fn groups_in_one_request(rt: &Runtime, size: usize, tools: &ToolSet) -> bool {
    rt.config.group_requests
        && size > 1
        && !rt.n_refused.load(Ordering::Relaxed)
        && (rt.config.max_agent_turns <= 1 || tools.names().is_empty())
}

/// The first turns of a single-turn group in one request asking for `size` choices (see
/// [`groups_in_one_request`]), one per rollout; empty when the group does not qualify or the
/// server refused `n` (then every rollout asks on its own). A failure of the request is every
/// rollout's LLM failure, re-run as the rollout retry rules say.
async fn group_first_turns<A: EnvAccess>(
    env: &A,
    rt: &Runtime,
    item: &Arc<<A::Env as Environment>::Item>,
    size: usize,
    tools: &ToolSet,
) -> Vec<Option<FirstTurn>> {
    if !groups_in_one_request(rt, size, tools) {
        return Vec::new();
    }
    if !rt.grouping_announced.swap(true, Ordering::Relaxed) {
        tracing::info!(
            "single-turn groups: the {size} first answers of a group come from one request \
             with n = {size} (--env.group_requests false: one request per rollout)"
        );
    }
    let (messages, _) = first_messages(env, rt, item).await;
    let settings = rt.agent_settings(Split::Train);
    let request = ChatRequest {
        messages: messages.clone(),
        tools: tools.schemas(),
        n: size as u32,
        temperature: settings.temperature,
        max_tokens: settings.max_tokens,
        extra_body: settings.extra_body,
        split: Split::Train,
    };
    let answered = match &rt.tokens {
        TokenSource::Managed(phase2) => {
            ManagedSession::chat_group(phase2, &request)
                .await
                .map(|choices| {
                    choices
                        .into_iter()
                        .map(|(response, seed)| (response, Some(seed)))
                        .collect::<Vec<_>>()
                })
        }
        _ => rt.llm.chat_group(&request).await.map(one_choice_each),
    };
    let turn = |response, seed| {
        Some(FirstTurn {
            messages: messages.clone(),
            response,
            seed,
        })
    };
    match answered {
        Err(e) if e.may_refuse_n() => {
            refuse_n(rt, size, &format!("it refused the request: {e}"));
            Vec::new()
        }
        Err(e) => (0..size).map(|_| turn(Err(e.clone()), None)).collect(),
        Ok(choices) => {
            if choices.len() < size {
                let why = format!("it returned {} of {size} choices", choices.len());
                refuse_n(rt, size, &why);
            }
            choices
                .into_iter()
                .take(size)
                .map(|(response, seed)| turn(Ok(response), seed))
                .collect()
        }
    }
}

/// Phase 1: one single-choice response per choice. Each keeps the prompt's token count; the
/// server reports the completion tokens of all choices together, so a choice's own count is
/// known only when it is the only one.
fn one_choice_each(response: ChatResponse) -> Vec<(ChatResponse, Option<SessionSeed>)> {
    let single = response.choices.len() == 1;
    let usage = response.usage.map(|u| Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens.filter(|_| single),
    });
    response
        .choices
        .into_iter()
        .map(|choice| {
            let response = ChatResponse {
                choices: vec![choice],
                usage,
            };
            (response, None)
        })
        .collect()
}

/// Stops asking for `n` for the rest of the run, said once.
fn refuse_n(rt: &Runtime, size: usize, why: &str) {
    if !rt.n_refused.swap(true, Ordering::Relaxed) {
        warn!(
            "the inference server does not serve a group's {size} answers in one request with \
             n = {size} ({why}); every rollout gets its own request from now on \
             (--env.group_requests false skips the attempt)"
        );
    }
}

/// Declares a group made smaller by `score_group` as a group of `size` rollouts
/// (`group_overrides.group_size`), so the size rule keeps it.
fn set_group_size(group: &mut ScoredDataGroup, size: usize) {
    let mut overrides = group.group_overrides.value().cloned().unwrap_or_default();
    overrides.insert("group_size".into(), Value::from(size));
    group.group_overrides = crate::atropos::Slot::Value(overrides);
}

/// The per-rollout key marking a tampered rollout in a group's `overrides`.
pub const TAMPERED_KEY: &str = "tampered";

/// Marks the tampered rollouts of `group` in its per-rollout `overrides` (Atropos's
/// `list[dict]`, one per rollout; trainers read the keys they know and ignore the rest):
/// `{"tampered": true, "tripwires": "…"}` for those, `{}` for the others. A group without
/// tampering keeps the `[]` Atropos's default collector writes.
fn mark_tampered<I>(group: &mut ScoredDataGroup, rollouts: &[ScoredRollout<I>]) {
    if rollouts.iter().all(|r| r.outcome.tampered().is_none()) {
        return;
    }
    let marks = rollouts
        .iter()
        .map(|r| {
            let mut m = Map::new();
            if let Some(wires) = r.outcome.tampered() {
                m.insert(TAMPERED_KEY.into(), Value::Bool(true));
                m.insert("tripwires".into(), Value::String(wires.to_owned()));
            }
            m
        })
        .collect();
    group.overrides = crate::atropos::Slot::Value(marks);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ApiServerConfig;
    use crate::llm::RetryPolicy;
    use crate::sandbox::LocalProvider;
    use crate::testing::ReferenceBook;
    use crate::tools::ToolRegistry;

    fn builder(tool_pool_size: i64) -> RuntimeBuilder {
        let config = Arc::new(HermesEnvConfig {
            tool_pool_size,
            ..Default::default()
        });
        let servers = [ApiServerConfig {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            ..Default::default()
        }];
        let llm = LlmClient::new(&servers, 1, RetryPolicy::default()).expect("client");
        let tools = ToolRegistry::builtin()
            .resolve(Some(&["file".into()]), None)
            .expect("file tools")
            .0;
        let sandboxes = Arc::new(LocalProvider::new().expect("local provider"));
        Runtime::builder(config, llm, sandboxes, tools)
    }

    #[test]
    fn the_builder_defaults_to_the_run_tools_placeholders_and_tool_pool_size_permits() {
        let rt = builder(3).build();
        assert_eq!(rt.tool_permits.available_permits(), 3);
        assert!(rt.tokens.is_placeholder());
        assert!(rt.references.is_none());
        assert!(Arc::ptr_eq(&rt.group_tools(), &rt.tools));
        assert_eq!(rt.config().tool_pool_size, 3);
        assert_eq!(builder(0).build().tool_permits.available_permits(), 1);
    }

    #[test]
    fn the_builder_keeps_what_it_is_given() {
        let rt = builder(1)
            .references(Some(ReferenceBook::default()))
            .tokens(TokenSource::Retokenized(Arc::new(ChatTokenizer::builtin())))
            .build();
        assert!(rt.references.is_some());
        assert!(matches!(rt.tokens, TokenSource::Retokenized(_)));
    }
}
