//! One rollout (prompt → agent loop → reward in the same sandbox → teardown) and one group
//! (`group_size` concurrent rollouts of an item, folded into a `ScoredDataGroup`).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::{Map, Value};
use tokio::sync::Semaphore;
use tracing::{info_span, warn, Instrument};

use crate::agent::{panic_message, AgentLoop, AgentResult, AgentSettings};
use crate::atropos::{placeholder_tokens, ScoredDataGroup, ScoredItem};
use crate::config::HermesEnvConfig;
use crate::context::ToolContext;
use crate::env::{Environment, RewardOutcome, ScoredRollout};
use crate::llm::{LlmClient, Message, Split};
use crate::sandbox::{SandboxError, SandboxProvider, TaskSandbox};
use crate::testing::ReferenceBook;
use crate::tools::ToolSet;

/// Shared services of one run.
pub struct Runtime {
    /// Shared env config.
    pub config: Arc<HermesEnvConfig>,
    /// Inference client.
    pub llm: LlmClient,
    /// Sandbox backend.
    pub sandboxes: Arc<dyn SandboxProvider>,
    /// Tools offered to every rollout of this run.
    pub tools: Arc<ToolSet>,
    /// Bounds concurrent tool executions (`tool_pool_size`).
    pub tool_permits: Semaphore,
    /// Reference solutions to register for `--testing true`.
    pub references: Option<ReferenceBook>,
}

impl Runtime {
    /// Loop settings for the split (eval runs at temperature 0).
    pub fn agent_settings(&self, split: Split) -> AgentSettings {
        let c = &self.config;
        AgentSettings {
            max_turns: c.max_agent_turns.max(1) as u32,
            temperature: if split == Split::Eval {
                0.0
            } else {
                c.agent_temperature
            },
            max_tokens: u32::try_from(c.max_token_length).ok().filter(|&m| m > 0),
            extra_body: request_extras(c),
            split,
            terminal_timeout: Duration::from_secs(c.terminal_timeout.max(1) as u64),
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
/// this returns (and also if this future is dropped).
pub async fn run_rollout<E: Environment>(
    env: &E,
    rt: &Runtime,
    item: &Arc<E::Item>,
    split: Split,
) -> ScoredRollout<E::Item> {
    let task_id = uuid::Uuid::new_v4().to_string();
    let span = info_span!("rollout", task_id = %task_id);
    async {
        let prompt = env.format_prompt(item);
        if let Some(book) = &rt.references {
            if let Some(solution) = env.reference_solution(item) {
                book.insert(&prompt, solution);
            }
        }
        let mut messages = Vec::new();
        if let Some(system) = rt.config.system_prompt.as_deref().filter(|s| !s.is_empty()) {
            messages.push(Message::system(system));
        }
        messages.push(Message::user(prompt));
        let sandbox = Arc::new(TaskSandbox::new(task_id.clone(), Arc::clone(&rt.sandboxes)));
        let settings = rt.agent_settings(split);
        let agent = AgentLoop {
            llm: &rt.llm,
            tools: &rt.tools,
            sandbox: &sandbox,
            tool_permits: &rt.tool_permits,
            settings: &settings,
        };
        let run = agent.run(messages).await;
        let (reward, outcome) = score(env, rt, item, &run, &sandbox).await;
        if let Err(e) = sandbox.close().await {
            warn!("sandbox teardown failed: {e}");
        }
        ScoredRollout {
            item: Arc::clone(item),
            task_id: task_id.clone(),
            run,
            reward,
            outcome,
        }
    }
    .instrument(span)
    .await
}

async fn score<E: Environment>(
    env: &E,
    rt: &Runtime,
    item: &E::Item,
    run: &AgentResult,
    sandbox: &Arc<TaskSandbox>,
) -> (f64, RewardOutcome) {
    if run.has_no_agent_output() {
        return (0.0, RewardOutcome::NothingToVerify);
    }
    let ctx = ToolContext::new(
        Arc::clone(sandbox),
        Arc::clone(&rt.tools),
        Duration::from_secs(rt.config.terminal_timeout.max(1) as u64),
    );
    let reward = std::panic::AssertUnwindSafe(env.compute_reward(item, run, &ctx))
        .catch_unwind()
        .await;
    let reward = match reward {
        Ok(r) => r,
        Err(panic) => {
            let message = format!("compute_reward panicked: {}", panic_message(panic.as_ref()));
            warn!("{message}; scored 0.0");
            return (0.0, RewardOutcome::VerifierError { message });
        }
    };
    match reward {
        Ok(r) if r.is_finite() => (r, RewardOutcome::Scored),
        Ok(r) => {
            let message = format!("compute_reward returned {r}");
            warn!("{message}; scored 0.0");
            (0.0, RewardOutcome::VerifierError { message })
        }
        Err(e) => {
            let message = format!("{e:#}");
            if e.downcast_ref::<SandboxError>()
                .is_some_and(SandboxError::is_infra)
            {
                warn!("infrastructure failure while scoring: {message}");
                (0.0, RewardOutcome::InfraError { message })
            } else {
                warn!("compute_reward failed: {message}; scored 0.0");
                (0.0, RewardOutcome::VerifierError { message })
            }
        }
    }
}

/// Runs `group_size` concurrent rollouts of one item and folds them into a group.
pub async fn collect_group<E: Environment>(
    env: &E,
    rt: &Runtime,
    item: E::Item,
) -> (ScoredDataGroup, Vec<ScoredRollout<E::Item>>) {
    let item = Arc::new(item);
    let size = rt.config.group_size.max(1) as usize;
    let rollouts =
        futures::future::join_all((0..size).map(|_| run_rollout(env, rt, &item, Split::Train)))
            .await;
    let items = rollouts
        .iter()
        .map(|r| {
            let (tokens, masks) = placeholder_tokens(&r.run.messages);
            ScoredItem {
                tokens,
                masks,
                score: r.reward,
                messages: r.run.messages.clone(),
                inference_logprobs: None,
            }
        })
        .collect();
    (ScoredDataGroup::from_items(items, true), rollouts)
}
