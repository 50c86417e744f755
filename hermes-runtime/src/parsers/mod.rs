//! Client-side tool-call parsers: raw model text → (content, tool calls), and the inverse
//! rendering used to rebuild Phase 2 prompts. Every parser is a pure function that never
//! panics; a malformed call with a readable name is kept (its arguments fail to parse, so the
//! agent loop answers the model with an error) instead of discarding the valid ones, and a
//! text without any call comes back unchanged.

mod auto;
mod common;
mod dsml;
mod glm;
mod harmony;
mod hermes;
mod invoke;
mod json_blocks;
mod llama;
mod mistral;
mod pythonic;
mod qwen3_coder;
mod sectioned;
mod special;

use crate::calls::ToolCall;

pub(crate) use auto::AutoParser;
pub(crate) use dsml::{DeepSeekV32Parser, DeepSeekV4Parser};
pub(crate) use glm::{Glm45Parser, Glm47Parser};
pub(crate) use harmony::HarmonyParser;
pub(crate) use hermes::{HermesParser, LongcatParser};
pub(crate) use invoke::{MinimaxM2Parser, Step3Parser};
pub(crate) use llama::LlamaJsonParser;
pub(crate) use mistral::MistralParser;
pub(crate) use pythonic::{Olmo3Parser, PythonicParser};
pub(crate) use sectioned::{DeepSeekV31Parser, DeepSeekV3Parser, KimiK2Parser};
pub(crate) use special::{FunctionGemmaParser, XlamParser};

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
    /// Like [`ToolCallParser::parse`], knowing the names of the tools the model was offered.
    /// Formats with explicit markup ignore them; `auto` only accepts unmarked JSON calls that
    /// name one of them.
    fn parse_offered(&self, text: &str, offered: &[&str]) -> Parsed {
        let _ = offered;
        self.parse(text)
    }
}

/// One registered format: its names (the first is canonical; the others are the names vLLM
/// and SGLang use for it) and its implementation.
pub struct Family {
    /// Canonical name first, then aliases.
    pub names: &'static [&'static str],
    /// The parser.
    pub parser: &'static dyn ToolCallParser,
}

/// Every format, canonical name first.
static FAMILIES: &[Family] = &[
    family(&["hermes", "qwen", "qwen2_5"], &HermesParser),
    family(&["qwen3_coder", "qwen3_xml"], &qwen3_coder::QWEN3_CODER),
    family(&["mistral"], &MistralParser),
    family(&["llama3_json", "llama4_json", "llama3"], &LlamaJsonParser),
    family(&["deepseek_v3", "deepseekv3"], &DeepSeekV3Parser),
    family(
        &["deepseek_v3_1", "deepseek_v31", "deepseekv31"],
        &DeepSeekV31Parser,
    ),
    family(&["deepseek_v32", "deepseekv32"], &DeepSeekV32Parser),
    family(
        &["deepseek_v4", "deepseek_dsml", "deepseekv4"],
        &DeepSeekV4Parser,
    ),
    family(&["kimi_k2"], &KimiK2Parser),
    family(&["longcat"], &LongcatParser),
    family(&["glm45", "glm4_moe"], &Glm45Parser),
    family(&["glm47", "glm47_moe"], &Glm47Parser),
    family(&["auto", "local"], &AutoParser),
    family(&["pythonic", "llama4_pythonic"], &PythonicParser),
    family(&["olmo3"], &Olmo3Parser),
    family(&["gpt_oss", "openai", "gpt-oss", "harmony"], &HarmonyParser),
    family(&["granite"], &json_blocks::GRANITE),
    family(
        &["granite_20b_fc", "granite-20b-fc"],
        &json_blocks::GRANITE_20B_FC,
    ),
    family(&["internlm2", "internlm"], &json_blocks::INTERNLM2),
    family(&["jamba"], &json_blocks::JAMBA),
    family(&["minimax", "minimax_m1"], &json_blocks::MINIMAX),
    family(&["minimax_m2", "minimax-m2"], &MinimaxM2Parser),
    family(&["seed_oss"], &qwen3_coder::SEED_OSS),
    family(&["step3"], &Step3Parser),
    family(&["xlam"], &XlamParser),
    family(&["hunyuan_a13b", "hunyuan"], &json_blocks::HUNYUAN),
    family(&["ernie45", "ernie"], &json_blocks::ERNIE45),
    family(&["phi4_mini_json", "phi4mini"], &json_blocks::PHI4_MINI),
    family(&["gigachat3"], &json_blocks::GIGACHAT3),
    family(&["functiongemma"], &FunctionGemmaParser),
    family(
        &["qwen25", "qwen2_5_coder", "qwen25_coder"],
        &json_blocks::QWEN25_CODER,
    ),
];

const fn family(names: &'static [&'static str], parser: &'static dyn ToolCallParser) -> Family {
    Family { names, parser }
}

/// An unknown `--env.tool_call_parser` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool-call parser '{name}'; available: {}", names().join(", "))]
pub struct UnknownParser {
    /// The requested name.
    pub name: String,
}

/// The parser registered under `name`.
pub fn get(name: &str) -> Result<&'static dyn ToolCallParser, UnknownParser> {
    FAMILIES
        .iter()
        .find(|f| f.names.contains(&name))
        .map(|f| f.parser)
        .ok_or_else(|| UnknownParser {
            name: name.to_owned(),
        })
}

/// Every registered parser name, aliases included.
pub fn names() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .flat_map(|f| f.names.iter().copied())
        .collect()
}

/// Every format once, in registration order.
pub fn families() -> &'static [Family] {
    FAMILIES
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn registry_resolves_aliases_and_rejects_unknown_names() {
        assert!(get("hermes").is_ok() && get("qwen").is_ok() && get("deepseek_v31").is_ok());
        assert!(get("openai").is_ok() && get("llama4_pythonic").is_ok());
        let err = get("nope").err().unwrap().to_string();
        assert!(
            err.starts_with(
                "unknown tool-call parser 'nope'; available: hermes, qwen, qwen2_5, qwen3_coder,"
            ),
            "{err}"
        );
        let all = names();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "a name is registered twice");
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod upstream_cases;
