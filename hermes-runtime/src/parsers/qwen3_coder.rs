//! The `qwen3_coder` format: XML-ish functions with one tag per parameter,
//! `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`.
//! Every closing tag may be missing; without `<tool_call>` blocks the whole text is scanned.
//! Seed-OSS uses the same functions inside `<seed:tool_call>` blocks.

use serde_json::{Map, Value};

use super::common::{
    arguments_object, call_with_id, heuristic_value, plausible_name, render_value, Builder,
};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAM_OPEN: &str = "<parameter=";
const PARAM_CLOSE: &str = "</parameter>";

/// Parser for `<function=…>` calls inside one family's block tags.
#[derive(Debug, Clone, Copy)]
pub struct XmlFunctionParser {
    block_open: &'static str,
    block_close: &'static str,
    /// Reasoning tags whose inside is content, never calls (Seed-OSS writes call examples
    /// while thinking).
    reasoning: Option<(&'static str, &'static str)>,
}

/// Qwen3-Coder: `<tool_call>` blocks.
pub const QWEN3_CODER: XmlFunctionParser = XmlFunctionParser {
    block_open: "<tool_call>",
    block_close: "</tool_call>",
    reasoning: None,
};

/// Seed-OSS: `<seed:tool_call>` blocks.
pub const SEED_OSS: XmlFunctionParser = XmlFunctionParser {
    block_open: "<seed:tool_call>",
    block_close: "</seed:tool_call>",
    reasoning: Some(("<seed:think>", "</seed:think>")),
};

/// `call_` and 24 hex digits.
fn qwen_call_id() -> String {
    format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
}

/// One parameter value: one leading and one trailing newline removed, then the heuristics.
fn param_value(raw: &str) -> Value {
    let v = raw.strip_prefix('\n').unwrap_or(raw);
    let v = v.strip_suffix('\n').unwrap_or(v);
    heuristic_value(v)
}

/// The earliest position of any of `needles` in `hay`.
fn first_of(hay: &str, needles: &[&str]) -> Option<usize> {
    needles.iter().filter_map(|n| hay.find(n)).min()
}

/// One function body (after `<function=`): name up to `>`, then parameters.
fn function_call(body: &str) -> ToolCall {
    let (name, params) = match body.find('>') {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => {
            let end = body.find('\n').unwrap_or(body.len());
            (&body[..end], &body[end..])
        }
    };
    let mut args = Map::new();
    let mut rest = params;
    while let Some(start) = rest.find(PARAM_OPEN) {
        let after = &rest[start + PARAM_OPEN.len()..];
        let Some(key_end) = after.find('>') else {
            break;
        };
        let key = after[..key_end].trim();
        let value_text = &after[key_end + 1..];
        let (raw, next) = match first_of(value_text, &[PARAM_CLOSE, PARAM_OPEN]) {
            Some(end) if value_text[end..].starts_with(PARAM_CLOSE) => {
                (&value_text[..end], &value_text[end + PARAM_CLOSE.len()..])
            }
            Some(end) => (&value_text[..end], &value_text[end..]),
            None => (value_text, ""),
        };
        if !key.is_empty() {
            args.insert(key.to_owned(), param_value(raw));
        }
        rest = next;
    }
    call_with_id(
        qwen_call_id(),
        plausible_name(name),
        to_python_string(&Value::Object(args)),
    )
}

/// Scans `text` for functions; text outside them is kept when `keep_text` (a function
/// without a name is always kept as text).
pub(super) fn scan_functions(text: &str, out: &mut Builder, keep_text: bool) {
    let mut rest = text;
    while let Some(start) = rest.find(FUNCTION_OPEN) {
        if keep_text {
            out.text(&rest[..start]);
        }
        let after = &rest[start + FUNCTION_OPEN.len()..];
        let (body, next) = match first_of(after, &[FUNCTION_CLOSE, FUNCTION_OPEN]) {
            Some(end) if after[end..].starts_with(FUNCTION_CLOSE) => {
                (&after[..end], &after[end + FUNCTION_CLOSE.len()..])
            }
            Some(end) => (&after[..end], &after[end..]),
            None => (after, ""),
        };
        let raw = &rest[start..rest.len() - next.len()];
        out.call_or_text(function_call(body), raw);
        rest = next;
    }
    if keep_text {
        out.text(rest);
    }
}

impl XmlFunctionParser {
    /// Reads the functions of `text`'s blocks (or of the whole text without blocks) into `out`.
    pub(super) fn read_into(&self, text: &str, out: &mut Builder) {
        if !text.contains(self.block_open) {
            scan_functions(text, out, true);
            return;
        }
        let mut rest = text;
        while let Some(start) = rest.find(self.block_open) {
            out.text(&rest[..start]);
            let after = &rest[start + self.block_open.len()..];
            let (block, next) = match after.find(self.block_close) {
                Some(end) => (&after[..end], &after[end + self.block_close.len()..]),
                None => (after, ""),
            };
            if block.contains(FUNCTION_OPEN) {
                scan_functions(block, out, false);
            } else {
                out.text(&rest[start..rest.len() - next.len()]);
            }
            rest = next;
        }
        out.text(rest);
    }
}

impl ToolCallParser for XmlFunctionParser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let Some((think_open, think_close)) = self.reasoning else {
            self.read_into(text, &mut out);
            return out.finish_for(text);
        };
        let mut rest = text;
        while let Some(start) = rest.find(think_open) {
            self.read_into(&rest[..start], &mut out);
            let after = &rest[start..];
            let end = after
                .find(think_close)
                .map_or(after.len(), |e| e + think_close.len());
            out.text(&after[..end]);
            rest = &after[end..];
        }
        self.read_into(rest, &mut out);
        out.finish_for(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !content.is_empty() {
            parts.push(content.to_owned());
        }
        for call in calls {
            let mut s = format!(
                "{}\n{FUNCTION_OPEN}{}>\n",
                self.block_open, call.function.name
            );
            for (key, value) in arguments_object(&call.function.arguments) {
                s.push_str(&format!(
                    "{PARAM_OPEN}{key}>\n{}\n{PARAM_CLOSE}\n",
                    render_value(&value)
                ));
            }
            s.push_str(&format!("{FUNCTION_CLOSE}\n{}", self.block_close));
            parts.push(s);
        }
        parts.join("\n")
    }
}
