//! Client-side tool-call parsers: raw model text → (content, tool calls), and the inverse
//! rendering used to rebuild Phase 2 prompts. Every parser is a pure function that never
//! panics; a malformed call is kept (its arguments fail to parse, so the agent loop answers
//! the model with an error) instead of discarding the valid ones.

mod common;
mod glm;
mod hermes;
mod llama;
mod mistral;
mod qwen3_coder;
mod sectioned;

use crate::llm::ToolCall;

pub use glm::{Glm45Parser, Glm47Parser};
pub use hermes::{HermesParser, LongcatParser};
pub use llama::LlamaJsonParser;
pub use mistral::MistralParser;
pub use qwen3_coder::Qwen3CoderParser;
pub use sectioned::{DeepSeekV31Parser, DeepSeekV3Parser, DeepSeekV4Parser, KimiK2Parser};

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
static PARSERS: &[(&str, &dyn ToolCallParser)] = &[
    ("hermes", &HermesParser),
    ("qwen", &HermesParser),
    ("qwen3_coder", &Qwen3CoderParser),
    ("mistral", &MistralParser),
    ("llama3_json", &LlamaJsonParser),
    ("llama4_json", &LlamaJsonParser),
    ("deepseek_v3", &DeepSeekV3Parser),
    ("deepseek_v3_1", &DeepSeekV31Parser),
    ("deepseek_v31", &DeepSeekV31Parser),
    ("kimi_k2", &KimiK2Parser),
    ("longcat", &LongcatParser),
    ("glm45", &Glm45Parser),
    ("glm47", &Glm47Parser),
    ("deepseek_v4", &DeepSeekV4Parser),
    ("deepseek_dsml", &DeepSeekV4Parser),
];

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
mod registry_tests {
    use super::*;

    #[test]
    fn registry_resolves_aliases_and_rejects_unknown_names() {
        assert!(get("hermes").is_ok() && get("qwen").is_ok() && get("deepseek_v31").is_ok());
        let err = get("nope").err().unwrap().to_string();
        assert_eq!(
            err,
            "unknown tool-call parser 'nope'; available: hermes, qwen, qwen3_coder, mistral, \
             llama3_json, llama4_json, deepseek_v3, deepseek_v3_1, deepseek_v31, kimi_k2, longcat, \
             glm45, glm47, deepseek_v4, deepseek_dsml"
        );
    }
}

#[cfg(test)]
mod tests;
