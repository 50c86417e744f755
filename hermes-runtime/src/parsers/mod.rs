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
/// and SGLang use for it), the models it is for and its implementation.
pub struct Family {
    /// Canonical name first, then aliases.
    pub names: &'static [&'static str],
    /// The models that write this format and its markup, one line (for the parsers reference).
    pub models: &'static str,
    /// The parser.
    pub parser: &'static dyn ToolCallParser,
}

/// Every format, canonical name first.
static FAMILIES: &[Family] = &[
    family(
        &["hermes", "qwen", "qwen2_5"],
        "Hermes and Qwen: `<tool_call>{…}</tool_call>`",
        &HermesParser,
    ),
    family(
        &["qwen3_coder", "qwen3_xml"],
        "Qwen3-Coder: `<tool_call><function=NAME><parameter=KEY>…` XML",
        &qwen3_coder::QWEN3_CODER,
    ),
    family(
        &["mistral"],
        "Mistral: `[TOOL_CALLS]` then a JSON list (pre-v11 tokenizers) or `NAME{…}` (v11+)",
        &MistralParser,
    ),
    family(
        &["llama3_json", "llama4_json", "llama3"],
        "Llama 3.x / Llama 4: JSON objects, optionally after `<|python_tag|>`",
        &LlamaJsonParser,
    ),
    family(
        &["deepseek_v3", "deepseekv3"],
        "DeepSeek V3: special-token sections",
        &DeepSeekV3Parser,
    ),
    family(
        &["deepseek_v3_1", "deepseek_v31", "deepseekv31"],
        "DeepSeek V3.1: special-token sections",
        &DeepSeekV31Parser,
    ),
    family(
        &["deepseek_v32", "deepseekv32"],
        "DeepSeek V3.2: `<｜DSML｜function_calls>` blocks",
        &DeepSeekV32Parser,
    ),
    family(
        &["deepseek_v4", "deepseek_dsml", "deepseekv4"],
        "DeepSeek V4: `<｜DSML｜tool_calls>` blocks",
        &DeepSeekV4Parser,
    ),
    family(
        &["kimi_k2"],
        "Kimi K2: special-token sections",
        &KimiK2Parser,
    ),
    family(
        &["longcat"],
        "LongCat: `<longcat_tool_call>` blocks (Hermes rules)",
        &LongcatParser,
    ),
    family(
        &["glm45", "glm4_moe"],
        "GLM-4.5 / GLM-4.6: `<tool_call>NAME` with `<arg_key>`/`<arg_value>` pairs",
        &Glm45Parser,
    ),
    family(
        &["glm47", "glm47_moe"],
        "GLM-4.7: the GLM-4.5 format without the newline after the name",
        &Glm47Parser,
    ),
    family(
        &["auto", "local"],
        "Local servers (llama.cpp, Ollama, llama-cpp-python) returning calls in `content`",
        &AutoParser,
    ),
    family(
        &["pythonic", "llama4_pythonic"],
        "Python call lists `[f(a=1), g()]` (Llama 4 pythonic)",
        &PythonicParser,
    ),
    family(
        &["olmo3"],
        "Olmo 3: one Python call per line in `<function_calls>`",
        &Olmo3Parser,
    ),
    family(
        &["gpt_oss", "openai", "gpt-oss", "harmony"],
        "gpt-oss: OpenAI harmony messages",
        &HarmonyParser,
    ),
    family(
        &["granite"],
        "IBM Granite 3.x: `<|tool_call|>[{…}]` (3.1+: `<tool_call>[{…}]`)",
        &json_blocks::GRANITE,
    ),
    family(
        &["granite_20b_fc", "granite-20b-fc"],
        "Granite-20B-FunctionCalling: `<function_call> {…}` per call",
        &json_blocks::GRANITE_20B_FC,
    ),
    family(
        &["internlm2", "internlm"],
        "InternLM2: `<|action_start|><|plugin|>{…}<|action_end|>`",
        &json_blocks::INTERNLM2,
    ),
    family(
        &["jamba"],
        "AI21 Jamba: `<tool_calls>[{…}]</tool_calls>`",
        &json_blocks::JAMBA,
    ),
    family(
        &["minimax", "minimax_m1"],
        "MiniMax-M1: `<tool_calls>` with one object per line",
        &json_blocks::MINIMAX,
    ),
    family(
        &["minimax_m2", "minimax-m2"],
        "MiniMax-M2: `<minimax:tool_call>` blocks of `<invoke>`s",
        &MinimaxM2Parser,
    ),
    family(
        &["seed_oss"],
        "Seed-OSS: Qwen3-Coder functions in `<seed:tool_call>` blocks",
        &qwen3_coder::SEED_OSS,
    ),
    family(
        &["step3"],
        "Step-3: `<｜tool_calls_begin｜>` sections of `steptml:` invokes",
        &Step3Parser,
    ),
    family(&["xlam"], "xLAM: a JSON list of calls", &XlamParser),
    family(
        &["hunyuan_a13b", "hunyuan"],
        "Hunyuan-A13B: `<tool_calls>[{…}]</tool_calls>`",
        &json_blocks::HUNYUAN,
    ),
    family(
        &["ernie45", "ernie"],
        "ERNIE 4.5: `<tool_call>{…}</tool_call>` per call",
        &json_blocks::ERNIE45,
    ),
    family(
        &["phi4_mini_json", "phi4mini"],
        "Phi-4-mini: `functools[{…}]`",
        &json_blocks::PHI4_MINI,
    ),
    family(
        &["gigachat3"],
        "GigaChat 3 / 3.1: JSON after `function call<|role_sep|>` or `<|function_call|>`",
        &json_blocks::GIGACHAT3,
    ),
    family(
        &["functiongemma"],
        "FunctionGemma: `<start_function_call>call:NAME{…}<end_function_call>`",
        &FunctionGemmaParser,
    ),
    family(
        &["qwen25", "qwen2_5_coder", "qwen25_coder"],
        "Qwen2.5-Coder: `<tools>{…}</tools>`",
        &json_blocks::QWEN25_CODER,
    ),
];

const fn family(
    names: &'static [&'static str],
    models: &'static str,
    parser: &'static dyn ToolCallParser,
) -> Family {
    Family {
        names,
        models,
        parser,
    }
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
