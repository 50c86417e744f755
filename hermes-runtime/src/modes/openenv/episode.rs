//! One episode driven by an agent outside this process: one item, its own sandbox and tool
//! set, the transcript the verifier reads, and the verdict. Knows no transport, so the
//! OpenEnv wire and an MCP server can share it.
//!
//! Each tool call is one turn of the transcript (an assistant message with the call, then
//! the tool's message), run by the agent loop's own dispatcher; the final answer is the last
//! assistant message. Verification is the rollout's: the tripwires, then `compute_reward`
//! with the episode's `ToolContext`, with the same outcomes.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::agent::{AgentResult, AgentSettings, Dispatcher, Ending};
use crate::calls::ToolCall;
use crate::env::{Environment, FailureKind, RewardOutcome};
use crate::llm::{Message, Split};
use crate::modes::rollout::{first_messages, release, settle, Runtime, Settled, SharedEnv};
use crate::sandbox::tripwire::Armed;
use crate::sandbox::TaskSandbox;
use crate::tools::{TodoStore, ToolSet};

/// The tool an outside agent calls with its final answer; it runs the verifier.
pub const SUBMIT_TOOL: &str = "submit";

/// Which item an episode gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The next training item (`get_next_item`).
    Next,
    /// The evaluation item at this index (`eval_items`).
    Eval(usize),
}

/// Why an episode could not go on. Failures that are not the model's are never a reward.
#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    /// `get_next_item` returned nothing.
    #[error("the environment has no more items (get_next_item returned None)")]
    NoItem,
    /// The asked-for evaluation item does not exist.
    #[error("eval_index {index} is out of range: the environment has {count} eval items")]
    NoEvalItem {
        /// The index asked for.
        index: usize,
        /// How many eval items there are.
        count: usize,
    },
    /// A step after the verdict.
    #[error("the episode is over (its answer was verified); reset to start another")]
    Finished,
    /// The infrastructure or the verifier failed: the episode has no reward.
    #[error("{} failure: {message}", kind.as_str())]
    Failed {
        /// Which kind of failure (`sandbox`, `verifier`, …).
        kind: FailureKind,
        /// What went wrong.
        message: String,
    },
}

impl EpisodeError {
    /// The failure kind for failures of the run, `None` for the client's mistakes.
    pub fn outcome(&self) -> Option<FailureKind> {
        match self {
            EpisodeError::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// A tool call the episode refused before running it (the model's mistake, shown to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolFault {
    /// No tool of that name is offered.
    NotFound,
    /// The arguments are not a JSON object.
    InvalidArgs,
}

/// What a tool call gave.
#[derive(Debug, Clone)]
pub struct ToolStep {
    /// What the model sees: the tool message's content.
    pub content: String,
    /// Set when the call was refused.
    pub fault: Option<ToolFault>,
    /// Set when this call used the last turn (`max_agent_turns`): the episode was verified.
    pub verdict: Option<Verdict>,
}

/// A verified episode: its reward and how it was reached (a model outcome).
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The reward (`tampered_reward` for a tampered episode).
    pub reward: f64,
    /// The model outcome (`scored`, `tampered`, …).
    pub outcome: RewardOutcome,
}

impl Verdict {
    /// The outcome's name as the other modes write it (`scored`, `tampered`, `model_ended`, …).
    pub fn outcome_name(&self) -> String {
        outcome_name(&self.outcome)
    }
}

fn outcome_name(outcome: &RewardOutcome) -> String {
    serde_json::to_value(outcome)
        .ok()
        .and_then(|v| match v {
            Value::String(s) => Some(s),
            Value::Object(m) => m.get("kind").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| format!("{outcome:?}"))
}

/// A tool as an outside agent sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    pub input_schema: Value,
}

/// One episode; its sandbox is torn down by [`Episode::close`] (and when dropped).
pub(crate) struct Episode<E: Environment> {
    id: String,
    item: Arc<E::Item>,
    sandbox: Arc<TaskSandbox>,
    tools: Arc<ToolSet>,
    settings: AgentSettings,
    armed: Armed,
    run: AgentResult,
    todos: TodoStore,
    user_task: String,
    finished: bool,
    /// Tool calls made before the current step began (`next_step`): each step has
    /// `max_agent_turns` of its own, as in the agent loop.
    step_start: u32,
}

/// What verifying a step gave: the episode's verdict, or the next step's instruction.
pub(crate) enum StepEnd {
    /// The episode is over.
    Verdict(Verdict),
    /// `next_step`'s instruction: the episode goes on.
    Next(String),
}

impl<E: Environment> Episode<E> {
    /// Opens an episode on the item `pick` names, with a fresh (lazily created) sandbox.
    pub(crate) async fn open(
        env: &SharedEnv<E>,
        rt: &Runtime,
        pick: Pick,
        id: Option<String>,
    ) -> Result<Self, EpisodeError> {
        let item = match pick {
            Pick::Next => env.0.write().await.get_next_item().await,
            Pick::Eval(index) => {
                let items = env.0.read().await.eval_items();
                let count = items.len();
                Some(
                    items
                        .into_iter()
                        .nth(index)
                        .ok_or(EpisodeError::NoEvalItem { index, count })?,
                )
            }
        };
        let item = Arc::new(item.ok_or(EpisodeError::NoItem)?);
        let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let (messages, spec) = first_messages(env, rt, &item).await;
        let user_task = messages
            .iter()
            .find(|m| m.role == "user")
            .map(|m| crate::agent::clip(m.content.trim(), 500))
            .unwrap_or_default();
        let sandbox = Arc::new(
            TaskSandbox::new(format!("openenv-{id}"), Arc::clone(rt.sandboxes())).with_spec(spec),
        );
        Ok(Episode {
            id,
            item,
            sandbox,
            tools: rt.group_tools(),
            settings: rt.agent_settings(Split::Train),
            armed: Armed::now(),
            run: AgentResult {
                messages,
                ..Default::default()
            },
            todos: TodoStore::default(),
            user_task,
            finished: false,
            step_start: 0,
        })
    }

    /// The episode's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The prompt: system message (when configured) and the item's `format_prompt`.
    pub fn prompt(&self) -> Vec<Message> {
        self.run
            .messages
            .iter()
            .take_while(|m| m.role == "system" || m.role == "user")
            .cloned()
            .collect()
    }

    /// Tool calls made so far.
    pub fn steps(&self) -> u32 {
        self.run.turns_used
    }

    /// True once the episode was verified (or failed).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The turn limit (`max_agent_turns`): the call that reaches it ends the episode.
    pub fn max_turns(&self) -> u32 {
        self.settings.max_turns
    }

    /// The episode's tools and the [`SUBMIT_TOOL`].
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        tool_specs(&self.tools)
    }

    /// Runs one tool call in the episode's sandbox (or the final answer, for
    /// [`SUBMIT_TOOL`]); the call that uses the last turn also verifies the episode.
    pub(crate) async fn call_tool(
        &mut self,
        env: &SharedEnv<E>,
        rt: &Runtime,
        name: &str,
        arguments: &Value,
    ) -> Result<ToolStep, EpisodeError> {
        if self.finished {
            return Err(EpisodeError::Finished);
        }
        if name == SUBMIT_TOOL {
            let answer = match arguments.get("answer") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            return Ok(match self.submit(env, rt, &answer).await? {
                StepEnd::Verdict(verdict) => ToolStep {
                    content: json!({"reward": verdict.reward, "outcome": verdict.outcome_name()})
                        .to_string(),
                    fault: None,
                    verdict: Some(verdict),
                },
                // A multi-step task: the answer's result is the next step's instruction.
                StepEnd::Next(instruction) => ToolStep {
                    content: instruction,
                    fault: None,
                    verdict: None,
                },
            });
        }
        let fault = if !self.tools.contains(name) {
            Some(ToolFault::NotFound)
        } else if !(arguments.is_object() || arguments.is_null()) {
            Some(ToolFault::InvalidArgs)
        } else {
            None
        };
        let raw = match arguments {
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let call = ToolCall::new(name, raw);
        self.run.turns_used += 1;
        let turn = self.run.turns_used;
        self.run.messages.push(Message {
            tool_calls: Some(vec![call.clone()]),
            ..Message::assistant(String::new())
        });
        let dispatcher = Dispatcher {
            tools: &self.tools,
            sandbox: &self.sandbox,
            tool_permits: rt.tool_permits(),
            settings: &self.settings,
        };
        let content = dispatcher
            .dispatch_within_budget(
                turn,
                &call,
                &self.user_task,
                &self.todos,
                &mut self.run.tool_errors,
            )
            .await;
        self.run
            .messages
            .push(Message::tool(call.id.clone(), content.clone()));
        if turn - self.step_start < self.settings.max_turns {
            return Ok(ToolStep {
                content,
                fault,
                verdict: None,
            });
        }
        Ok(match self.verify(env, rt).await? {
            StepEnd::Verdict(verdict) => ToolStep {
                content,
                fault,
                verdict: Some(verdict),
            },
            // The step's last turn: its result, then the next step's instruction.
            StepEnd::Next(instruction) => ToolStep {
                content: format!("{content}\n\n(next step)\n{instruction}"),
                fault,
                verdict: None,
            },
        })
    }

    /// The final answer: recorded as the last assistant message, then verified.
    pub(crate) async fn submit(
        &mut self,
        env: &SharedEnv<E>,
        rt: &Runtime,
        answer: &str,
    ) -> Result<StepEnd, EpisodeError> {
        if self.finished {
            return Err(EpisodeError::Finished);
        }
        self.run.turns_used += 1;
        self.run
            .messages
            .push(Message::assistant(answer.to_owned()));
        self.run.finished_naturally = true;
        self.verify(env, rt).await
    }

    /// Tripwires, then the next step or the verifier, in the episode's sandbox; failures are
    /// errors.
    async fn verify(&mut self, env: &SharedEnv<E>, rt: &Runtime) -> Result<StepEnd, EpisodeError> {
        self.finished = true;
        let settled = {
            let env = env.0.read().await;
            settle(
                &*env,
                rt,
                &self.item,
                &self.run,
                &Ending::Finished,
                &self.sandbox,
                &self.tools,
                &self.armed,
            )
            .await
        };
        let (reward, outcome) = match settled {
            Settled::Verdict(reward, outcome) => (reward, outcome),
            Settled::Next(instruction) => {
                self.run.messages.push(Message::user(instruction.clone()));
                self.run.finished_naturally = false;
                self.armed = Armed::now();
                self.step_start = self.run.turns_used;
                self.finished = false;
                return Ok(StepEnd::Next(instruction));
            }
        };
        release(&self.sandbox).await;
        match outcome.failure() {
            Some(kind) => Err(EpisodeError::Failed {
                kind,
                message: outcome.failure_message().unwrap_or_default().to_owned(),
            }),
            None => Ok(StepEnd::Verdict(Verdict { reward, outcome })),
        }
    }

    /// Tears the sandbox down (idempotent).
    pub async fn close(&mut self) {
        self.finished = true;
        release(&self.sandbox).await;
    }
}

/// `tools` and the [`SUBMIT_TOOL`] as an outside agent sees them.
pub fn tool_specs(tools: &ToolSet) -> Vec<ToolSpec> {
    let mut specs: Vec<ToolSpec> = tools
        .schemas()
        .iter()
        .map(|s| ToolSpec {
            name: s.function.name.clone(),
            description: s.function.description.clone(),
            input_schema: s.function.parameters.clone(),
        })
        .collect();
    specs.push(ToolSpec {
        name: SUBMIT_TOOL.into(),
        description: "Give your final answer. Ends the episode: the environment verifies the \
                      work and returns the reward."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The final answer"}},
            "required": [],
        }),
    });
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_names_are_the_ones_the_other_modes_write() {
        let v = Verdict {
            reward: 1.0,
            outcome: RewardOutcome::Scored,
        };
        assert_eq!(v.outcome_name(), "scored");
        let t = Verdict {
            reward: 0.0,
            outcome: RewardOutcome::Tampered {
                message: "x".into(),
            },
        };
        assert_eq!(t.outcome_name(), "tampered");
    }
}
