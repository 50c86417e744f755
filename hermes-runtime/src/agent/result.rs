//! What one agent-loop run produced.

use serde::{Deserialize, Serialize};

use crate::llm::Message;

/// The outcome of one multi-turn rollout (Hermes `AgentResult`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentResult {
    /// The whole conversation, prompt included.
    pub messages: Vec<Message>,
    /// Number of LLM calls made.
    pub turns_used: u32,
    /// True iff the model ended with a message without tool calls.
    pub finished_naturally: bool,
    /// Reasoning text per successful LLM response.
    pub reasoning_per_turn: Vec<Option<String>>,
    /// Tool failures seen during the run.
    pub tool_errors: Vec<ToolError>,
    /// Why the run ended early, when an LLM call failed.
    pub llm_error: Option<String>,
    /// How each assistant turn's generation ended and what it cost, in turn order.
    #[serde(default)]
    pub turns: Vec<TurnRecord>,
}

impl AgentResult {
    /// `earlier` continued by `next`, a later phase of the same conversation (a multi-step
    /// task's next step): `next`'s transcript (it holds `earlier`'s), both phases' counts.
    pub fn continued(earlier: AgentResult, next: AgentResult) -> AgentResult {
        let mut merged = earlier;
        merged.messages = next.messages;
        merged.turns_used += next.turns_used;
        merged.finished_naturally = next.finished_naturally;
        merged.reasoning_per_turn.extend(next.reasoning_per_turn);
        merged.tool_errors.extend(next.tool_errors);
        merged.llm_error = next.llm_error;
        merged.turns.extend(next.turns);
        merged
    }
}

/// One assistant turn's generation, as the server reported it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Index in [`AgentResult::messages`] of the assistant message the turn became.
    pub message: usize,
    /// `stop`, `tool_calls`, `length` (cut at `max_tokens`), … as the server said.
    pub finish_reason: Option<String>,
    /// Prompt tokens, from the response's `usage`.
    pub prompt_tokens: Option<u64>,
    /// Generated tokens, from the response's `usage`.
    pub completion_tokens: Option<u64>,
}

impl TurnRecord {
    /// True when the generation was cut at `max_tokens` (`finish_reason == "length"`).
    pub fn is_truncated(&self) -> bool {
        self.finish_reason.as_deref() == Some("length")
    }
}

/// One failed tool call, for telemetry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// 1-based turn.
    pub turn: u32,
    /// The tool the model called.
    pub tool_name: String,
    /// Raw arguments, first 200 characters.
    pub arguments: String,
    /// What went wrong.
    pub error: String,
    /// What the model saw, first 500 characters.
    pub tool_result: String,
}

impl AgentResult {
    /// The content of the last assistant message that has content.
    pub fn final_response(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == "assistant" && !m.content.is_empty())
            .map(|m| m.content.as_str())
    }

    /// Every tool call the model made, in order, as (name, raw arguments).
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str)> {
        self.messages
            .iter()
            .filter_map(|m| m.tool_calls.as_ref())
            .flatten()
            .map(|c| (c.function.name.as_str(), c.function.arguments.as_str()))
    }

    /// The transcript with each assistant message's `finish_reason` and `usage` from its turn
    /// record: what the groups' JSONL carries and the viewer shows.
    pub fn annotated_messages(&self) -> Vec<Message> {
        let mut messages = self.messages.clone();
        for t in &self.turns {
            if let Some(m) = messages.get_mut(t.message) {
                m.finish_reason = t.finish_reason.clone();
                m.usage = Some(crate::llm::Usage {
                    prompt_tokens: t.prompt_tokens,
                    completion_tokens: t.completion_tokens,
                })
                .filter(|u| u.prompt_tokens.is_some() || u.completion_tokens.is_some());
            }
        }
        messages
    }

    /// The record of the turn that produced message `index`, if it is an assistant turn.
    pub fn turn_of(&self, index: usize) -> Option<&TurnRecord> {
        self.turns.iter().find(|t| t.message == index)
    }

    /// True when the transcript holds nothing beyond the system and user prompt.
    pub fn has_no_agent_output(&self) -> bool {
        self.turns_used == 0
            || self
                .messages
                .iter()
                .all(|m| m.role == "system" || m.role == "user")
    }
}

/// First `n` characters of `s` (never splits a character).
pub fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The message of a caught panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
