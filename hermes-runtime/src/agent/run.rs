//! The multi-turn tool-calling loop with Hermes semantics: call the model, run the requested
//! tools sequentially in the rollout's sandbox, feed results back, stop on a plain answer,
//! an LLM failure or the turn limit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::{json, Map, Value};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn, Instrument};

use super::result::{clip, panic_message, AgentResult, ToolError, TurnRecord};
use crate::atropos::json::to_python_string;
use crate::llm::{new_call_id, ChatBackend, ChatRequest, LlmError, Message, Split, ToolCall};
use crate::parsers::{self, HermesParser, ToolCallParser};
use crate::sandbox::TaskSandbox;
use crate::tools::budget::{persist, ResultBudget};
use crate::tools::{unknown_tool_message, TodoStore, ToolCallContext, ToolSet};

/// The first context-length end of the run is announced; later ones are ordinary outcomes.
static FIRST_CONTEXT_END: std::sync::Once = std::sync::Once::new();

/// A tool call slower than this is logged.
const SLOW_TOOL: Duration = Duration::from_secs(30);

/// Per-rollout loop settings.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Maximum LLM calls.
    pub max_turns: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// Completion token limit per turn.
    pub max_tokens: Option<u32>,
    /// Extra request-body keys.
    pub extra_body: Map<String, Value>,
    /// Train or eval concurrency limits.
    pub split: Split,
    /// Default terminal timeout.
    pub terminal_timeout: Duration,
    /// Parser for tool calls a server returns as raw text in `content` (`tool_call_parser`).
    pub tool_call_parser: String,
    /// When oversized tool results are saved in the sandbox instead of shown.
    pub result_budget: ResultBudget,
}

/// Everything one rollout's loop needs.
pub struct AgentLoop<'a> {
    /// The inference backend: the chat-completions client (Phase 1) or a rollout's
    /// token-tracking session (Phase 2).
    pub llm: &'a dyn ChatBackend,
    /// The tools offered.
    pub tools: &'a ToolSet,
    /// The rollout's sandbox.
    pub sandbox: &'a TaskSandbox,
    /// Bounds concurrent tool executions across rollouts (`tool_pool_size`).
    pub tool_permits: &'a Semaphore,
    /// Loop settings.
    pub settings: &'a AgentSettings,
}

/// How a run ended, beyond what [`AgentResult`] records.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Ending {
    /// A plain answer, the turn limit, or an LLM failure (in [`AgentResult::llm_error`]).
    #[default]
    Finished,
    /// The conversation outgrew the model's context window: the model's own outcome, verified
    /// as it stands (like a turn-limit end).
    ContextExceeded {
        /// The server's error, one line.
        message: String,
    },
}

impl AgentLoop<'_> {
    /// Runs the loop from `messages` (system + user prompt) to completion.
    pub async fn run(&self, messages: Vec<Message>) -> AgentResult {
        self.run_to_end(messages).await.0
    }

    /// [`Self::run`], and how it ended.
    pub async fn run_to_end(&self, messages: Vec<Message>) -> (AgentResult, Ending) {
        let mut result = AgentResult {
            messages,
            ..Default::default()
        };
        let user_task = result
            .messages
            .iter()
            .find(|m| m.role == "user")
            .map(|m| clip(m.content.trim(), 500))
            .unwrap_or_default();
        let schemas = self.tools.schemas();
        let todos = TodoStore::default();
        for turn in 0..self.settings.max_turns {
            let request = ChatRequest {
                messages: result.messages.clone(),
                tools: Arc::clone(&schemas),
                n: 1,
                temperature: self.settings.temperature,
                max_tokens: self.settings.max_tokens,
                extra_body: self.settings.extra_body.clone(),
                split: self.settings.split,
            };
            let turn_span = tracing::info_span!("turn", turn = turn + 1);
            let response = self.llm.chat(&request).instrument(turn_span).await;
            result.turns_used = turn + 1;
            let (choice, usage) = match response {
                Ok(r) => match r.choices.into_iter().next() {
                    Some(c) => (c, r.usage.unwrap_or_default()),
                    None => {
                        result.llm_error = Some("the server returned no choices".into());
                        return (result, Ending::Finished);
                    }
                },
                Err(e @ LlmError::ContextExceeded { .. }) => {
                    // Not a failed call: the rollout ends here and its verifier decides.
                    let message = e.to_string();
                    FIRST_CONTEXT_END.call_once(|| {
                        info!(
                            "a rollout outgrew the model's context on turn {}: it ends as \
                             context_exceeded and is verified as it stands (said once per run; \
                             the server's context length or --env.max_token_length set how long \
                             a conversation may grow): {message}",
                            turn + 1
                        );
                    });
                    return (result, Ending::ContextExceeded { message });
                }
                Err(e) => {
                    // A fatal refusal stops the run with its own line; this one is for the rest.
                    if !e.is_fatal() {
                        warn!("LLM call failed on turn {}: {e}", turn + 1);
                    }
                    result.llm_error = Some(e.to_string());
                    return (result, Ending::Finished);
                }
            };
            result.turns.push(TurnRecord {
                message: result.messages.len(),
                finish_reason: choice.finish_reason.clone(),
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            });
            let message = choice.message;
            let reasoning = message.reasoning_text();
            result.reasoning_per_turn.push(reasoning.clone());
            let mut content = message.content;
            let mut calls: Vec<ToolCall> = message.tool_calls.unwrap_or_default();
            if calls.is_empty() && !schemas.is_empty() && !content.is_empty() {
                // Servers without a tool parser return the model's raw markup.
                let parsed = self.parser().parse_offered(&content, &self.tools.names());
                if !parsed.calls.is_empty() {
                    calls = parsed.calls;
                    content = parsed.content.unwrap_or_default();
                }
            }
            if calls.is_empty() {
                result.messages.push(Message {
                    reasoning_content: reasoning,
                    ..Message::assistant(content)
                });
                result.finished_naturally = true;
                return (result, Ending::Finished);
            }
            let calls: Vec<ToolCall> = calls
                .into_iter()
                .map(|mut c| {
                    if c.id.is_empty() {
                        c.id = new_call_id();
                    }
                    c
                })
                .collect();
            result.messages.push(Message {
                tool_calls: Some(calls.clone()),
                reasoning_content: reasoning,
                ..Message::assistant(content)
            });
            let first_result = result.messages.len();
            let mut persisted = vec![false; calls.len()];
            for (i, call) in calls.iter().enumerate() {
                let mut content = self
                    .dispatch(turn + 1, call, &user_task, &todos, &mut result.tool_errors)
                    .await;
                let registered = self
                    .tools
                    .get(&call.function.name)
                    .and_then(|t| t.max_result_chars());
                let threshold = self
                    .settings
                    .result_budget
                    .threshold(&call.function.name, registered);
                if threshold.is_some_and(|t| content.chars().count() > t) {
                    content = persist(
                        self.sandbox,
                        &call.id,
                        &content,
                        &self.settings.result_budget,
                    )
                    .await;
                    persisted[i] = true;
                }
                result
                    .messages
                    .push(Message::tool(call.id.clone(), content));
            }
            self.enforce_turn_budget(&mut result.messages[first_result..], &calls, &mut persisted)
                .await;
            if let Some(failure) = self.sandbox.tool_server_failure() {
                // The rollout is an infrastructure failure already: more turns would only
                // spend inference on a conversation nobody trains on.
                debug!("rollout stops after turn {}: {failure}", turn + 1);
                return (result, Ending::Finished);
            }
        }
        (result, Ending::Finished)
    }

    /// The configured raw-text parser (`hermes` when the name is unknown).
    fn parser(&self) -> &'static dyn ToolCallParser {
        parsers::get(&self.settings.tool_call_parser).unwrap_or(&HermesParser)
    }

    /// Saves the largest results of this turn until the turn is within its budget.
    async fn enforce_turn_budget(
        &self,
        results: &mut [Message],
        calls: &[ToolCall],
        persisted: &mut [bool],
    ) {
        let budget = &self.settings.result_budget;
        let mut total: usize = results.iter().map(|m| m.content.chars().count()).sum();
        while total > budget.turn_chars {
            let largest = (0..results.len())
                .filter(|&i| !persisted[i] && ResultBudget::persistable(&calls[i].function.name))
                .max_by_key(|&i| results[i].content.chars().count());
            let Some(i) = largest else {
                break;
            };
            let before = results[i].content.chars().count();
            results[i].content =
                persist(self.sandbox, &calls[i].id, &results[i].content, budget).await;
            persisted[i] = true;
            total = total - before + results[i].content.chars().count();
        }
    }

    /// Runs one call and returns the tool message content; failures are recorded.
    async fn dispatch(
        &self,
        turn: u32,
        call: &ToolCall,
        user_task: &str,
        todos: &TodoStore,
        errors: &mut Vec<ToolError>,
    ) -> String {
        self.dispatcher()
            .dispatch(turn, call, user_task, todos, errors)
            .await
    }

    fn dispatcher(&self) -> Dispatcher<'_> {
        Dispatcher {
            tools: self.tools,
            sandbox: self.sandbox,
            tool_permits: self.tool_permits,
            settings: self.settings,
        }
    }
}

/// Runs the model's tool calls in a rollout's sandbox: the loop's own calls, and those of an
/// agent outside this process (the `openenv` mode's sessions), so both see the same results,
/// failures and size limits.
pub(crate) struct Dispatcher<'a> {
    /// The tools offered.
    pub tools: &'a ToolSet,
    /// The rollout's sandbox.
    pub sandbox: &'a TaskSandbox,
    /// Bounds concurrent tool executions across rollouts (`tool_pool_size`).
    pub tool_permits: &'a Semaphore,
    /// Loop settings (terminal timeout, result budget).
    pub settings: &'a AgentSettings,
}

impl Dispatcher<'_> {
    /// [`Self::dispatch`], then an oversized result saved in the sandbox (the per-call part of
    /// the result budget) as the loop does.
    pub(crate) async fn dispatch_within_budget(
        &self,
        turn: u32,
        call: &ToolCall,
        user_task: &str,
        todos: &TodoStore,
        errors: &mut Vec<ToolError>,
    ) -> String {
        let content = self.dispatch(turn, call, user_task, todos, errors).await;
        let registered = self
            .tools
            .get(&call.function.name)
            .and_then(|t| t.max_result_chars());
        let threshold = self
            .settings
            .result_budget
            .threshold(&call.function.name, registered);
        if threshold.is_some_and(|t| content.chars().count() > t) {
            return persist(
                self.sandbox,
                &call.id,
                &content,
                &self.settings.result_budget,
            )
            .await;
        }
        content
    }

    /// Runs one call and returns the tool message content; failures are recorded.
    pub(crate) async fn dispatch(
        &self,
        turn: u32,
        call: &ToolCall,
        user_task: &str,
        todos: &TodoStore,
        errors: &mut Vec<ToolError>,
    ) -> String {
        let name = call.function.name.as_str();
        let raw = call.function.arguments.as_str();
        let mut record = |error: String, shown: &str| {
            errors.push(ToolError {
                turn,
                tool_name: name.to_owned(),
                arguments: clip(raw, 200),
                error,
                tool_result: clip(shown, 500),
            });
        };
        if !self.tools.contains(name) {
            let shown = to_python_string(
                &json!({"error": unknown_tool_message(name, &self.tools.names())}),
            );
            record(format!("Unknown tool '{name}'"), &shown);
            return shown;
        }
        let args = match parse_arguments(raw) {
            Ok(a) => a,
            Err(msg) => {
                let shown = to_python_string(&json!({
                    "error": format!("Invalid JSON in tool arguments: {msg}. Please retry with valid JSON.")
                }));
                record(format!("Invalid JSON: {msg}"), &shown);
                return shown;
            }
        };
        if name == "todo" {
            // The rollout's todo list lives in the loop, not in the sandbox.
            let mut args = args;
            if let Some(schema) = self.tools.parameters(name) {
                crate::tools::coerce_arguments(schema, &mut args);
            }
            let value = todos.call(&args);
            let shown = to_python_string(&value);
            if let Some(error) = tool_failure(&value) {
                record(error, &shown);
            }
            return shown;
        }
        let cx = ToolCallContext {
            sandbox: self.sandbox,
            terminal_timeout: self.settings.terminal_timeout,
            user_task,
        };
        let started = Instant::now();
        if self.tools.get(name).is_some_and(|t| t.uses_sandbox()) && !self.sandbox.is_created() {
            // Made before the tool takes a permit: a rollout waiting for a place on a full
            // Docker host while holding a permit would hold up the rollouts that have one (a
            // deadlock once every permit waits for a place).
            if let Err(e) = self.sandbox.get().await {
                let shown =
                    to_python_string(&json!({"error": format!("Error executing {name}: {e}")}));
                record(e.to_string(), &shown);
                return shown;
            }
        }
        let outcome = {
            let _permit = self
                .tool_permits
                .acquire()
                .await
                .expect("tool semaphore is never closed");
            std::panic::AssertUnwindSafe(self.tools.call(name, args, &cx))
                .catch_unwind()
                .instrument(tracing::debug_span!("tool", name))
                .await
        };
        let elapsed = started.elapsed();
        if elapsed > SLOW_TOOL {
            warn!("tool {name} took {elapsed:.1?}");
        }
        let value = match outcome {
            Ok(v) => v,
            Err(panic) => {
                json!({"error": format!("Tool execution failed: panic: {}", panic_message(panic.as_ref()))})
            }
        };
        let shown = to_python_string(&value);
        if let Some(error) = tool_failure(&value) {
            debug!("tool {name} failed: {error}");
            record(error, &shown);
        }
        shown
    }
}

/// Parses tool-call arguments: `""` means no arguments; anything but a JSON object is an error.
pub fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => Err(format!("expected a JSON object, got {}", json_kind(&other))),
        Err(e) => Err(e.to_string()),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether a tool result is a failure for telemetry: any truthy `error`, or a timeout
/// (exit code 124). Upstream only counted errors with a negative exit code.
pub fn tool_failure(result: &Value) -> Option<String> {
    let error = result.get("error").filter(|e| match e {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Bool(b) => *b,
        _ => true,
    });
    if let Some(e) = error {
        return Some(e.as_str().map_or_else(|| e.to_string(), str::to_owned));
    }
    if result.get("exit_code").and_then(Value::as_i64) == Some(124) {
        return Some("Command timed out (exit code 124)".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_parsing_rules() {
        assert!(parse_arguments("").unwrap().is_empty());
        assert!(parse_arguments("  ").unwrap().is_empty());
        assert_eq!(parse_arguments(r#"{"a": 1}"#).unwrap()["a"], 1);
        assert!(parse_arguments("[1]").unwrap_err().contains("an array"));
        assert!(parse_arguments("{bad").is_err());
    }

    #[test]
    fn failures_include_timeouts_and_plain_errors() {
        assert!(tool_failure(&json!({"output": "x", "exit_code": 0, "error": null})).is_none());
        assert!(tool_failure(&json!({"output": "x", "exit_code": 124, "error": null})).is_some());
        assert_eq!(
            tool_failure(&json!({"error": "boom"})).as_deref(),
            Some("boom")
        );
        assert!(tool_failure(&json!({"output": "", "exit_code": 2, "error": null})).is_none());
    }
}
