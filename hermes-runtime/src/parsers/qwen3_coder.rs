//! The `qwen3_coder` format: XML-ish functions with one tag per parameter,
//! `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`.
//! Every closing tag may be missing; without `<tool_call>` blocks the whole text is scanned.

use serde_json::{Map, Value};

use super::common::{arguments_object, call_with_id, heuristic_value, render_value, Builder};
use super::{Parsed, ToolCallParser};
use crate::atropos::json::to_python_string;
use crate::llm::ToolCall;

const BLOCK_OPEN: &str = "<tool_call>";
const BLOCK_CLOSE: &str = "</tool_call>";
const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAM_OPEN: &str = "<parameter=";
const PARAM_CLOSE: &str = "</parameter>";

/// Parser for Qwen3-Coder tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qwen3CoderParser;

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
    call_with_id(qwen_call_id(), name, to_python_string(&Value::Object(args)))
}

/// Scans `text` for functions; text outside them is kept when `keep_text`.
fn scan_functions(text: &str, out: &mut Builder, keep_text: bool) {
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
        out.call(function_call(body));
        rest = next;
    }
    if keep_text {
        out.text(rest);
    }
}

impl ToolCallParser for Qwen3CoderParser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        if !text.contains(BLOCK_OPEN) {
            scan_functions(text, &mut out, true);
            return out.finish();
        }
        let mut rest = text;
        while let Some(start) = rest.find(BLOCK_OPEN) {
            out.text(&rest[..start]);
            let after = &rest[start + BLOCK_OPEN.len()..];
            let (block, next) = match after.find(BLOCK_CLOSE) {
                Some(end) => (&after[..end], &after[end + BLOCK_CLOSE.len()..]),
                None => (after, ""),
            };
            scan_functions(block, &mut out, false);
            rest = next;
        }
        out.text(rest);
        out.finish()
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !content.is_empty() {
            parts.push(content.to_owned());
        }
        for call in calls {
            let mut s = format!("{BLOCK_OPEN}\n{FUNCTION_OPEN}{}>\n", call.function.name);
            for (key, value) in arguments_object(&call.function.arguments) {
                s.push_str(&format!(
                    "{PARAM_OPEN}{key}>\n{}\n{PARAM_CLOSE}\n",
                    render_value(&value)
                ));
            }
            s.push_str(&format!("{FUNCTION_CLOSE}\n{BLOCK_CLOSE}"));
            parts.push(s);
        }
        parts.join("\n")
    }
}
