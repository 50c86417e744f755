//! Plays environments' reference solutions: the policy behind `--testing true`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::server::{Policy, Reply};
use crate::env::{ReferenceSolution, ReferenceTurn};

/// Reply given when an item has no reference solution.
pub const NO_REFERENCE_REPLY: &str = "(scripted reply: this item has no reference solution)";

/// Reference solutions by prompt text, filled by the runner as rollouts start.
#[derive(Debug, Clone, Default)]
pub struct ReferenceBook {
    solutions: Arc<Mutex<HashMap<String, ReferenceSolution>>>,
}

impl crate::modes::ReferenceSink for ReferenceBook {
    fn offer(&self, prompt: &str, solution: ReferenceSolution) {
        self.insert(prompt, solution);
    }
}

impl ReferenceBook {
    /// Registers the solution for the rollout whose user prompt is `prompt`.
    pub fn insert(&self, prompt: &str, solution: ReferenceSolution) {
        self.solutions
            .lock()
            .expect("lock poisoned")
            .insert(prompt.to_owned(), solution);
    }

    fn turn(&self, prompt: &str, index: usize) -> Option<ReferenceTurn> {
        let book = self.solutions.lock().expect("lock poisoned");
        let solution = book.get(prompt)?;
        Some(
            solution
                .turns
                .get(index)
                .cloned()
                .unwrap_or_else(|| ReferenceTurn::Answer("Done.".into())),
        )
    }
}

/// Answers each request with the next turn of the solution registered for its user prompt;
/// the turn index is the number of assistant messages already in the conversation.
#[derive(Debug, Clone, Default)]
pub struct ReferencePolicy {
    book: ReferenceBook,
}

impl ReferencePolicy {
    /// A policy reading from `book`.
    pub fn new(book: ReferenceBook) -> Self {
        ReferencePolicy { book }
    }
}

impl Policy for ReferencePolicy {
    fn respond(&self, request: &Value) -> Reply {
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let role = |m: &Value, r: &str| m.get("role").and_then(Value::as_str) == Some(r);
        let prompt = messages
            .iter()
            .find(|m| role(m, "user"))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let index = messages.iter().filter(|m| role(m, "assistant")).count();
        match self.book.turn(prompt, index) {
            None => Reply::text(NO_REFERENCE_REPLY),
            Some(ReferenceTurn::Answer(text)) => Reply::text(text),
            Some(ReferenceTurn::ToolCalls(calls)) => Reply::Message {
                content: String::new(),
                tool_calls: calls.into_iter().map(|(n, a)| (n, a.to_string())).collect(),
                reasoning: None,
            },
        }
    }
}
