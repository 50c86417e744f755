//! The OpenEnv wire's JSON shapes (as `openenv-core` 0.3 defines them): observations as its
//! `serialize_observation` writes them, WebSocket error codes, the MCP tool shapes, and the
//! `/schema` and `/openapi.json` documents its `openenv validate --url` reads.

use serde_json::{json, Value};

use super::episode::{EpisodeError, ToolFault, ToolSpec, ToolStep, Verdict};
use crate::llm::Message;

/// `WSErrorCode` of openenv-core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The message is not JSON.
    InvalidJson,
    /// An unknown message `type`.
    UnknownType,
    /// A malformed message or action (or a step before `reset`).
    ValidationError,
    /// The step failed: an infrastructure or verifier failure (with its `outcome`).
    ExecutionError,
    /// `--max-sessions` sessions are open.
    CapacityReached,
    /// The session ended: idle timeout, lifetime, shutdown.
    SessionError,
}

impl ErrorCode {
    fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "INVALID_JSON",
            ErrorCode::UnknownType => "UNKNOWN_TYPE",
            ErrorCode::ValidationError => "VALIDATION_ERROR",
            ErrorCode::ExecutionError => "EXECUTION_ERROR",
            ErrorCode::CapacityReached => "CAPACITY_REACHED",
            ErrorCode::SessionError => "SESSION_ERROR",
        }
    }
}

/// A WebSocket error message; `extra` keys join `message` and `code` in `data`.
pub fn error(code: ErrorCode, message: &str, extra: Value) -> Value {
    let mut data = json!({"message": message, "code": code.as_str()});
    if let (Some(d), Value::Object(extra)) = (data.as_object_mut(), extra) {
        d.extend(extra);
    }
    json!({"type": "error", "data": data})
}

/// The error message for an episode error: failures carry their `outcome` (`sandbox`,
/// `verifier`, …), never a reward.
pub fn episode_error(e: &EpisodeError) -> Value {
    let message = crate::diagnostics::error_chain(e);
    match (e, e.outcome()) {
        (_, Some(kind)) => error(
            ErrorCode::ExecutionError,
            &message,
            json!({"outcome": kind.as_str()}),
        ),
        (EpisodeError::NoItem, None) => error(ErrorCode::ExecutionError, &message, json!({})),
        _ => error(ErrorCode::ValidationError, &message, json!({})),
    }
}

/// `{"observation": …, "reward": …, "done": …}` (openenv-core's `serialize_observation`).
pub fn step_result(observation: Value, verdict: Option<&Verdict>) -> Value {
    json!({
        "observation": observation,
        "reward": verdict.map(|v| v.reward),
        "done": verdict.is_some(),
    })
}

/// The tools as MCP's `ListToolsObservation` lists them.
pub fn tools(specs: &[ToolSpec]) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect(),
    )
}

/// The observation of `reset`: the episode, its prompt messages and its tools.
pub fn reset_observation(episode_id: &str, prompt: &[Message], specs: &[ToolSpec]) -> Value {
    let messages: Vec<Value> = prompt
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    step_result(
        json!({"episode_id": episode_id, "messages": messages, "tools": tools(specs)}),
        None,
    )
}

/// The observation of a tool call (`CallToolObservation`), with the verdict when the call
/// ended the episode.
pub fn tool_observation(name: &str, step: &ToolStep) -> Value {
    let error = step.fault.as_ref().map(|f| match f {
        ToolFault::NotFound => {
            json!({"error_type": "tool_not_found", "message": format!("unknown tool '{name}'")})
        }
        ToolFault::InvalidArgs => json!({
            "error_type": "invalid_args",
            "message": "the arguments must be a JSON object",
        }),
    });
    let mut observation = json!({"tool_name": name, "result": step.content, "error": error});
    if let Some(v) = &step.verdict {
        observation["metadata"] = verdict_metadata(v);
    }
    step_result(observation, step.verdict.as_ref())
}

/// How the episode was verified: its outcome and, when tampered, `tampered: true` and the wires.
pub fn verdict_metadata(v: &Verdict) -> Value {
    let mut m = json!({"outcome": v.outcome_name()});
    if let Some(wires) = v.outcome.tampered() {
        m[crate::modes::rollout::TAMPERED_KEY] = Value::Bool(true);
        m["tripwires"] = Value::String(wires.to_owned());
    }
    m
}

/// The action schema `/schema` publishes: the MCP actions plus `submit`.
pub fn action_schema() -> Value {
    json!({
        "title": "HermesEnvAction",
        "oneOf": [
            {"type": "object", "properties": {"type": {"const": "list_tools"}}, "required": ["type"]},
            {"type": "object", "properties": {
                "type": {"const": "call_tool"},
                "tool_name": {"type": "string"},
                "arguments": {"type": "object"}
            }, "required": ["type", "tool_name"]},
            {"type": "object", "properties": {
                "type": {"const": "submit"},
                "answer": {"type": "string"}
            }, "required": ["type"]}
        ]
    })
}

/// The observation schema `/schema` publishes.
pub fn observation_schema() -> Value {
    json!({
        "title": "HermesEnvObservation",
        "type": "object",
        "properties": {
            "episode_id": {"type": "string"},
            "messages": {"type": "array", "items": {"type": "object"}},
            "tools": {"type": "array", "items": {"type": "object"}},
            "tool_name": {"type": "string"},
            "result": {},
            "error": {"type": ["object", "null"]},
            "metadata": {"type": "object"},
            "done": {"type": "boolean"},
            "reward": {"type": ["number", "null"]}
        }
    })
}

/// The state schema `/schema` publishes.
pub fn state_schema() -> Value {
    json!({
        "title": "HermesEnvState",
        "type": "object",
        "properties": {
            "episode_id": {"type": ["string", "null"]},
            "step_count": {"type": "integer"},
            "done": {"type": "boolean"},
            "max_turns": {"type": "integer"}
        }
    })
}

/// The OpenAPI document: the simulation-mode paths `openenv validate` looks for.
pub fn openapi(title: &str, version: &str) -> Value {
    let op =
        |summary: &str| json!({"summary": summary, "responses": {"200": {"description": "OK"}}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": {
            "/health": {"get": op("Health")},
            "/metadata": {"get": op("Environment metadata")},
            "/schema": {"get": op("Action, observation and state schemas")},
            "/state": {"get": op("Server state (episodes live on /ws)")},
            "/reset": {"post": op("A fresh item's prompt and tools (stateless)")},
            "/step": {"post": op("Refused: steps need the episode's session on /ws")},
            "/mcp": {"post": op("MCP JSON-RPC (tools/list)")},
            "/ws": {"get": op("WebSocket session: one item, one sandbox")}
        }
    })
}
