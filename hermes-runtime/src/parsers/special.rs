//! Two formats with their own layout: xLAM (a JSON list of calls, bare or in a ```` ```json ````
//! fence, `<tool_call>` or after `[TOOL_CALLS]`) and FunctionGemma
//! (`<start_function_call>call:NAME{key:<escape>value<escape>,…}<end_function_call>`).

use serde_json::{Map, Value};

use super::common::{
    arguments_object, call_object, fences, heuristic_value, leading_json, plausible_name,
    unchanged, value_calls, Builder,
};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

/// Parser for Salesforce xLAM tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct XlamParser;

/// Parser for Google FunctionGemma tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct FunctionGemmaParser;

/// Calls from text that must be exactly one JSON list or object of calls.
fn exact_calls(text: &str) -> Option<Vec<ToolCall>> {
    let t = text.trim();
    let (value, used) = leading_json(t)?;
    if !t[used..].trim().is_empty() {
        return None;
    }
    value_calls(&value)
}

/// The first `open … close` span whose inside is a call list: (start, end, calls).
fn delimited(text: &str, open: &str, close: &str) -> Option<(usize, usize, Vec<ToolCall>)> {
    let mut pos = 0;
    while let Some(rel) = text[pos..].find(open) {
        let start = pos + rel;
        let inner_start = start + open.len();
        let inner_end = text[inner_start..]
            .find(close)
            .map_or(text.len(), |e| inner_start + e);
        let end = (inner_end + close.len()).min(text.len());
        if let Some(calls) = exact_calls(&text[inner_start..inner_end]) {
            return Some((start, end, calls));
        }
        pos = inner_start;
    }
    None
}

/// The xLAM call list in `text`, searched as upstream does: fences, `[TOOL_CALLS]`,
/// `<tool_call>`, then the whole answer (after any `</think>`).
fn xlam_span(text: &str) -> Option<(usize, usize, Vec<ToolCall>)> {
    for fence in fences(text) {
        if let Some(calls) = fence.json().and_then(exact_calls) {
            let (start, end) = (fence.start, fence.end);
            return Some((start, end, calls));
        }
    }
    delimited(text, "[TOOL_CALLS]", "\n")
        .or_else(|| delimited(text, "<tool_call>", "</tool_call>"))
        .or_else(|| {
            let body_start = text.find("</think>").map_or(0, |i| i + "</think>".len());
            let body = &text[body_start..];
            let lead = body.len() - body.trim_start().len();
            body.trim_start()
                .starts_with('[')
                .then(|| exact_calls(body))
                .flatten()
                .map(|calls| (body_start + lead, text.len(), calls))
        })
}

impl ToolCallParser for XlamParser {
    fn parse(&self, text: &str) -> Parsed {
        let Some((start, end, calls)) = xlam_span(text) else {
            return unchanged(text);
        };
        let mut out = Builder::default();
        out.text(&text[..start]);
        out.text(&text[end..]);
        for call in calls {
            out.call(call);
        }
        out.finish()
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return content.to_owned();
        }
        let list: Vec<Value> = calls.iter().map(|c| call_object(c, "arguments")).collect();
        let list = to_python_string(&Value::Array(list));
        if content.is_empty() {
            list
        } else {
            format!("{content}\n```json\n{list}\n```")
        }
    }
}

const GEMMA_OPEN: &str = "<start_function_call>";
const GEMMA_CLOSE: &str = "<end_function_call>";
const ESCAPE: &str = "<escape>";

/// The `{key:value,…}` arguments of a FunctionGemma call (the text after `{`): `<escape>`d
/// values are strings, bare ones go through the value heuristics.
fn gemma_arguments(mut rest: &str) -> Map<String, Value> {
    let mut args = Map::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if rest.is_empty() || rest.starts_with('}') {
            return args;
        }
        let Some(colon) = rest.find(':') else {
            return args;
        };
        let key = rest[..colon].trim().to_owned();
        let after = &rest[colon + 1..];
        let (value, next) = match after.strip_prefix(ESCAPE) {
            Some(quoted) => match quoted.find(ESCAPE) {
                Some(end) => (
                    Value::String(quoted[..end].to_owned()),
                    &quoted[end + ESCAPE.len()..],
                ),
                None => (Value::String(quoted.to_owned()), ""),
            },
            None => match leading_json(after) {
                Some((v, used)) => (v, &after[used..]),
                None => {
                    let end = after.find([',', '}']).unwrap_or(after.len());
                    (heuristic_value(after[..end].trim()), &after[end..])
                }
            },
        };
        if !key.is_empty() {
            args.insert(key, value);
        }
        rest = next;
    }
}

/// One call body (after the start token): `call:NAME{…}`.
fn gemma_call(body: &str) -> ToolCall {
    let Some(rest) = body.trim_start().strip_prefix("call:") else {
        return ToolCall::new("", body);
    };
    let (name, args) = match rest.find('{') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let args = Value::Object(gemma_arguments(args));
    ToolCall::new(plausible_name(name), to_python_string(&args))
}

/// A value in FunctionGemma's argument syntax.
fn gemma_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{ESCAPE}{s}{ESCAPE}"),
        other => to_python_string(other),
    }
}

impl ToolCallParser for FunctionGemmaParser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let mut rest = text;
        while let Some(start) = rest.find(GEMMA_OPEN) {
            out.text(&rest[..start]);
            let after = &rest[start + GEMMA_OPEN.len()..];
            let (body, next) = match after.find(GEMMA_CLOSE) {
                Some(end) => (&after[..end], &after[end + GEMMA_CLOSE.len()..]),
                None => (after, ""),
            };
            out.call_or_text(gemma_call(body), &rest[start..rest.len() - next.len()]);
            rest = next;
        }
        out.text(rest);
        out.finish_for(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        let mut s = content.to_owned();
        for call in calls {
            let args: Vec<String> = arguments_object(&call.function.arguments)
                .iter()
                .map(|(k, v)| format!("{k}:{}", gemma_value(v)))
                .collect();
            s.push_str(&format!(
                "{GEMMA_OPEN}call:{}{{{}}}{GEMMA_CLOSE}",
                call.function.name,
                args.join(",")
            ));
        }
        s
    }
}
