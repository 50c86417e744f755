//! The `mistral` formats after the `[TOOL_CALLS]` token: pre-v11 tokenizers emit a JSON list
//! (or object) of `{"name", "arguments"}`; v11+ emit `NAME{json args}` per token (optionally
//! `NAME[CALL_ID]ID[ARGS]{json}`). Both are read; rendering uses the v11 form. Text after the
//! token that is neither (`[TOOL_CALLS] not json at all`) is content, never a name.

use serde_json::Value;

use super::common::{
    alphanumeric_id, arguments_json, call_with_id, leading_json, object_call, raw_arguments,
    Builder,
};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;

const TOKEN: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

/// Parser for Mistral tool calls (both formats).
#[derive(Debug, Clone, Copy, Default)]
pub struct MistralParser;

/// A legacy call object with a Mistral id.
fn legacy_call(v: &Value) -> Option<ToolCall> {
    object_call(v).map(|c| call_with_id(alphanumeric_id(9), &c.function.name, c.function.arguments))
}

/// The calls of the JSON list (or object) that starts `text`, and the bytes it used; `None`
/// when `text` does not start with one holding at least one call.
fn leading_calls(text: &str) -> Option<(Vec<ToolCall>, usize)> {
    let (v, used) = leading_json(text)?;
    let items = match v {
        Value::Array(items) => items,
        other => vec![other],
    };
    let calls: Vec<ToolCall> = items.iter().filter_map(legacy_call).collect();
    (!calls.is_empty()).then_some((calls, used))
}

/// Keeps `text` unless it is only list punctuation (`[`, `]`, `,`, whitespace).
fn keep_unless_punctuation(text: &str, out: &mut Builder) {
    if text.contains(|c: char| !(c.is_whitespace() || matches!(c, '[' | ']' | ','))) {
        out.text(text);
    }
}

/// Every complete `{…}` call object in `text` (a list cut short or broken), scanning brace by
/// brace; returns whether one was found. Text around them is kept.
fn scan_objects(text: &str, out: &mut Builder) -> bool {
    let mut found = false;
    let mut pos = 0;
    let mut kept = 0;
    while let Some(rel) = text[pos..].find('{') {
        let at = pos + rel;
        match leading_json(&text[at..]) {
            Some((v, used)) => {
                if let Some(call) = legacy_call(&v) {
                    keep_unless_punctuation(&text[kept..at], out);
                    out.call(call);
                    found = true;
                    kept = at + used;
                }
                pos = at + used;
            }
            None => pos = at + 1,
        }
    }
    if found {
        let tail = &text[kept..];
        if !tail.contains('{') {
            keep_unless_punctuation(tail, out);
        }
    }
    found
}

/// A pre-v11 chunk: a JSON list of calls, possibly after stray text (which stays content,
/// never a name) and cut short.
fn legacy_chunk(chunk: &str, out: &mut Builder) {
    let mut pos = 0;
    while let Some(rel) = chunk[pos..].find(['[', '{']) {
        let at = pos + rel;
        match leading_json(&chunk[at..]) {
            Some((_, used)) => {
                if let Some((calls, used)) = leading_calls(&chunk[at..]) {
                    out.text(&chunk[..at]);
                    calls.into_iter().for_each(|c| out.call(c));
                    out.text(&chunk[at + used..]);
                    return;
                }
                pos = at + used;
            }
            None => {
                let mut calls = Builder::default();
                if scan_objects(&chunk[at..], &mut calls) {
                    out.text(&chunk[..at]);
                    let parsed = calls.finish();
                    if let Some(c) = parsed.content {
                        out.text(&c);
                    }
                    parsed.calls.into_iter().for_each(|c| out.call(c));
                    return;
                }
                pos = at + 1;
            }
        }
    }
    out.text(chunk);
}

/// Length of the function name at the start of a v11 chunk, when one is followed by its
/// arguments (`{`, `[ARGS]` or `[CALL_ID]`).
fn v11_name_len(chunk: &str) -> Option<usize> {
    let len = chunk
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(chunk.len());
    let after = chunk[len..].trim_start();
    (len > 0 && (after.starts_with('{') || after.starts_with(ARGS) || after.starts_with(CALL_ID)))
        .then_some(len)
}

/// One v11 `NAME[CALL_ID]ID[ARGS]{json}` chunk (`name_len` from [`v11_name_len`]).
fn v11_chunk(chunk: &str, name_len: usize, out: &mut Builder) {
    let name = &chunk[..name_len];
    let mut rest = chunk[name_len..].trim_start();
    let mut id = None;
    if let Some(after) = rest.strip_prefix(CALL_ID) {
        let end = [after.find('{'), after.find(ARGS)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(after.len());
        id = Some(after[..end].trim().to_owned()).filter(|s| !s.is_empty());
        rest = &after[end..];
    }
    rest = rest.strip_prefix(ARGS).unwrap_or(rest);
    let id = id.unwrap_or_else(|| alphanumeric_id(9));
    let trimmed = rest.trim_start();
    match leading_json(trimmed) {
        Some((Value::Object(_), used)) => {
            out.call(call_with_id(id, name, trimmed[..used].trim().to_owned()));
            out.text(&trimmed[used..]);
        }
        _ => out.call(call_with_id(id, name, raw_arguments(trimmed))),
    }
}

impl ToolCallParser for MistralParser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let mut chunks = text.split(TOKEN);
        out.text(chunks.next().unwrap_or(""));
        for chunk in chunks {
            let lead = chunk.trim_start();
            if lead.is_empty() {
                continue;
            }
            match v11_name_len(lead) {
                Some(len) => v11_chunk(lead, len, &mut out),
                None => legacy_chunk(lead, &mut out),
            }
        }
        // Without a call the text comes back without the special tokens, as upstream does.
        out.finish()
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        let mut s = content.to_owned();
        for call in calls {
            s.push_str(&format!(
                "{TOKEN}{}{}",
                call.function.name,
                arguments_json(&call.function.arguments)
            ));
        }
        s
    }
}
