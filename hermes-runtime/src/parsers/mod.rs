//! Client-side tool-call parsers: raw model text → (content, tool calls), and the inverse
//! rendering used to rebuild Phase 2 prompts. Every parser is a pure function that never
//! panics; a malformed call is kept (its arguments fail to parse, so the agent loop answers
//! the model with an error) instead of discarding the valid ones.

mod hermes;

use crate::llm::ToolCall;

pub use hermes::HermesParser;

/// What a parser found in a model's raw output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// All non-markup text, trimmed; `None` when empty.
    pub content: Option<String>,
    /// The tool calls in order (empty when none).
    pub calls: Vec<ToolCall>,
}

/// One model family's tool-call format.
pub trait ToolCallParser: Send + Sync {
    /// Extracts content and tool calls; never panics.
    fn parse(&self, text: &str) -> Parsed;
    /// Renders an assistant turn back into the family's raw text.
    fn render(&self, content: &str, calls: &[ToolCall]) -> String;
}

/// Parser names (with aliases) and their implementations.
static PARSERS: &[(&str, &dyn ToolCallParser)] =
    &[("hermes", &HermesParser), ("qwen", &HermesParser)];

/// An unknown `--env.tool_call_parser` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool-call parser '{name}'; available: {}", names().join(", "))]
pub struct UnknownParser {
    /// The requested name.
    pub name: String,
}

/// The parser registered under `name`.
pub fn get(name: &str) -> Result<&'static dyn ToolCallParser, UnknownParser> {
    PARSERS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .ok_or_else(|| UnknownParser {
            name: name.to_owned(),
        })
}

/// Every registered parser name, aliases included.
pub fn names() -> Vec<&'static str> {
    PARSERS.iter().map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_resolves_aliases_and_rejects_unknown_names() {
        assert!(get("hermes").is_ok() && get("qwen").is_ok());
        let err = get("nope").err().unwrap().to_string();
        assert_eq!(
            err,
            "unknown tool-call parser 'nope'; available: hermes, qwen"
        );
    }
}
