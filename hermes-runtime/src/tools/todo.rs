//! The `todo` tool: a per-rollout task list. The agent loop owns one [`TodoStore`] per
//! rollout and answers `todo` calls from it (nothing runs in the sandbox); the `memory` and
//! `session_search` tools answer with the errors Hermes gives inside RL environments.

use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;

const STATUSES: [&str; 4] = ["pending", "in_progress", "completed", "cancelled"];

/// One rollout's todo list.
#[derive(Debug, Default)]
pub struct TodoStore {
    items: Mutex<Vec<Map<String, Value>>>,
}

/// One item normalised: missing id → `"?"`, empty content → `"(no description)"`, invalid
/// status → `pending`.
fn normalize(item: &Value) -> Map<String, Value> {
    let text = |k: &str| match item.get(k) {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let id = text("id");
    let content = text("content");
    let status = text("status");
    let mut m = Map::new();
    m.insert(
        "id".into(),
        if id.is_empty() { "?".into() } else { id }.into(),
    );
    m.insert(
        "content".into(),
        if content.is_empty() {
            "(no description)".into()
        } else {
            content
        }
        .into(),
    );
    m.insert(
        "status".into(),
        if STATUSES.contains(&status.as_str()) {
            status
        } else {
            "pending".into()
        }
        .into(),
    );
    m
}

impl TodoStore {
    /// Applies a `todo` call: no `todos` reads; otherwise replace (default) or merge by id.
    pub fn call(&self, args: &Map<String, Value>) -> Value {
        let mut items = self.items.lock().expect("todo store lock poisoned");
        match args.get("todos") {
            None | Some(Value::Null) => {}
            Some(Value::Array(todos)) => {
                let merge = args.get("merge").and_then(Value::as_bool).unwrap_or(false);
                if merge {
                    for todo in todos {
                        let id = todo.get("id").and_then(Value::as_str).unwrap_or("?");
                        match items
                            .iter_mut()
                            .find(|i| i.get("id").and_then(Value::as_str) == Some(id))
                        {
                            Some(existing) => {
                                for key in ["content", "status"] {
                                    if let Some(v) = todo.get(key).filter(|v| !v.is_null()) {
                                        let fixed = normalize(&json!({"id": id, key: v}));
                                        if key == "content"
                                            || STATUSES.contains(&v.as_str().unwrap_or(""))
                                        {
                                            existing.insert(key.into(), fixed[key].clone());
                                        }
                                    }
                                }
                            }
                            None => items.push(normalize(todo)),
                        }
                    }
                } else {
                    *items = todos.iter().map(normalize).collect();
                }
            }
            Some(_) => {
                return json!({"error": "todos must be an array of {id, content, status} objects"})
            }
        }
        let count = |s: &str| {
            items
                .iter()
                .filter(|i| i.get("status").and_then(Value::as_str) == Some(s))
                .count()
        };
        json!({
            "todos": items.clone(),
            "summary": {"total": items.len(), "pending": count("pending"), "in_progress": count("in_progress"),
                        "completed": count("completed"), "cancelled": count("cancelled")}
        })
    }
}

/// The `todo` schema; calls are answered by the agent loop's per-rollout [`TodoStore`].
pub struct TodoTool;

#[async_trait]
impl Tool for TodoTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "todo",
            "Manage your task list for this task. Call without todos to read it; pass todos to \
             replace it, or with merge=true to update items by id and append new ones.",
            json!({
                "type": "object",
                "properties": {
                    "todos": {"type": "array", "description": "The items to write.", "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": STATUSES}
                        },
                        "required": ["id", "content", "status"]
                    }},
                    "merge": {"type": "boolean", "default": false, "description": "Update by id instead of replacing the list."}
                }
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "todo"
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let _ = cx;
        // Outside an agent loop (e.g. ToolContext::call_tool) there is no rollout list.
        TodoStore::default().call(&args)
    }
}

/// `memory`: not available inside RL environments.
pub struct MemoryTool;

/// `session_search`: not available inside RL environments.
pub struct SessionSearchTool;

#[async_trait]
impl Tool for MemoryTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "memory",
            "Persistent memory across sessions (not available in RL environments).",
            json!({"type": "object", "properties": {
                "action": {"type": "string", "description": "add, replace, remove or read."},
                "content": {"type": "string"}
            }}),
        )
    }

    fn toolset(&self) -> &'static str {
        "memory"
    }

    async fn call(&self, _args: Map<String, Value>, _cx: &ToolCallContext<'_>) -> Value {
        json!({"error": "Memory is not available in RL environments."})
    }
}

#[async_trait]
impl Tool for SessionSearchTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "session_search",
            "Search past sessions (not available in RL environments).",
            json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        )
    }

    fn toolset(&self) -> &'static str {
        "session_search"
    }

    async fn call(&self, _args: Map<String, Value>, _cx: &ToolCallContext<'_>) -> Value {
        json!({"error": "Session search is not available in RL environments."})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn replace_merge_and_read() {
        let store = TodoStore::default();
        let r = store.call(&args(json!({"todos": [
            {"id": "1", "content": "write tests", "status": "in_progress"},
            {"content": "", "status": "bogus"}
        ]})));
        assert_eq!(
            r["todos"][1],
            json!({"id": "?", "content": "(no description)", "status": "pending"})
        );
        assert_eq!(
            r["summary"],
            json!({"total": 2, "pending": 1, "in_progress": 1, "completed": 0, "cancelled": 0})
        );
        let r = store.call(&args(json!({"merge": true, "todos": [
            {"id": "1", "status": "completed"},
            {"id": "3", "content": "ship", "status": "pending"}
        ]})));
        assert_eq!(
            r["todos"][0],
            json!({"id": "1", "content": "write tests", "status": "completed"})
        );
        assert_eq!(r["summary"]["total"], 3);
        assert_eq!(store.call(&Map::new())["summary"]["completed"], 1);
        assert!(store.call(&args(json!({"todos": "x"})))["error"].is_string());
    }
}
