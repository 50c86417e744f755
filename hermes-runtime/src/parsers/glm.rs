//! The GLM formats: `<tool_call>NAME\n<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`
//! (`glm45`) and its GLM-4.7 variant without the newline after the name, where whitespace or a
//! literal `\n` may sit between `</arg_key>` and `<arg_value>` (`glm47`). Both read either.

use serde_json::{Map, Value};

use super::common::{arguments_object, heuristic_value, plausible_name, render_value, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const KEY_OPEN: &str = "<arg_key>";
const KEY_CLOSE: &str = "</arg_key>";
const VALUE_OPEN: &str = "<arg_value>";
const VALUE_CLOSE: &str = "</arg_value>";

/// Parser for GLM-4.5 / GLM-4.6 tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Glm45Parser;

/// Parser for GLM-4.7 tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Glm47Parser;

/// `text` without leading whitespace and literal `\n` sequences.
fn skip_separators(mut text: &str) -> &str {
    loop {
        let trimmed = text.trim_start();
        match trimmed.strip_prefix("\\n") {
            Some(rest) => text = rest,
            None => return trimmed,
        }
    }
}

/// One block body: the name (ended by a newline, a literal `\n` or the first key), then
/// key/value pairs.
fn block_call(body: &str) -> ToolCall {
    let name_end = [body.find('\n'), body.find("\\n"), body.find(KEY_OPEN)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(body.len());
    let name = plausible_name(&body[..name_end]);
    let mut args = Map::new();
    let mut rest = &body[name_end..];
    while let Some(start) = rest.find(KEY_OPEN) {
        let after = &rest[start + KEY_OPEN.len()..];
        let Some(key_end) = after.find(KEY_CLOSE) else {
            break;
        };
        let key = after[..key_end].trim();
        let after_key = skip_separators(&after[key_end + KEY_CLOSE.len()..]);
        let Some(value_text) = after_key.strip_prefix(VALUE_OPEN) else {
            if !key.is_empty() {
                args.insert(key.to_owned(), Value::Null);
            }
            rest = after_key;
            continue;
        };
        let (raw, next) = match value_text.find(VALUE_CLOSE) {
            Some(end) => (&value_text[..end], &value_text[end + VALUE_CLOSE.len()..]),
            None => (value_text, ""),
        };
        if !key.is_empty() {
            args.insert(key.to_owned(), heuristic_value(raw));
        }
        rest = next;
    }
    ToolCall::new(name, to_python_string(&Value::Object(args)))
}

fn parse_glm(text: &str) -> Parsed {
    let mut out = Builder::default();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.text(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let (body, next) = match after.find(CLOSE) {
            Some(end) => (&after[..end], &after[end + CLOSE.len()..]),
            None => (after, ""),
        };
        let raw = &rest[start..rest.len() - next.len()];
        out.call_or_text(block_call(body), raw);
        rest = next;
    }
    out.text(rest);
    out.finish_for(text)
}

/// Renders calls with `after_name` after the name and `after_value` after each value.
fn render_glm(content: &str, calls: &[ToolCall], after_name: &str, after_value: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !content.is_empty() {
        parts.push(content.to_owned());
    }
    for call in calls {
        let mut s = format!("{OPEN}{}{after_name}", call.function.name);
        for (key, value) in arguments_object(&call.function.arguments) {
            s.push_str(&format!(
                "{KEY_OPEN}{key}{KEY_CLOSE}{after_value}{VALUE_OPEN}{}{VALUE_CLOSE}{after_value}",
                render_value(&value)
            ));
        }
        s.push_str(CLOSE);
        parts.push(s);
    }
    parts.join("\n")
}

impl ToolCallParser for Glm45Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_glm(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_glm(content, calls, "\n", "\n")
    }
}

impl ToolCallParser for Glm47Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_glm(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_glm(content, calls, "", "")
    }
}
