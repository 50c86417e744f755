//! The `mistral` formats after the `[TOOL_CALLS]` token: pre-v11 tokenizers emit a JSON list
//! (or object) of `{"name", "arguments"}`; v11+ emit `NAME{json args}` per token (optionally
//! `NAME[CALL_ID]ID[ARGS]{json}`). Both are read; rendering uses the v11 form.

use serde_json::Value;

use super::common::{
    alphanumeric_id, arguments_json, arguments_text, call_with_id, leading_json, Builder,
};
use super::{Parsed, ToolCallParser};
use crate::llm::ToolCall;

const TOKEN: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

/// Parser for Mistral tool calls (both formats).
#[derive(Debug, Clone, Copy, Default)]
pub struct MistralParser;

/// A call from a legacy `{"name", "arguments"}` object, if it is one.
fn object_call(v: &Value) -> Option<ToolCall> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?;
    let arguments = arguments_text(obj.get("arguments").or_else(|| obj.get("parameters")));
    Some(call_with_id(alphanumeric_id(9), name, arguments))
}

/// Every `{…}` object with a name in `text`, scanning brace by brace (legacy fallback).
fn scan_objects(text: &str, out: &mut Builder) -> bool {
    let mut found = false;
    let mut pos = 0;
    while let Some(rel) = text[pos..].find('{') {
        let at = pos + rel;
        match leading_json(&text[at..]) {
            Some((v, used)) => {
                if let Some(call) = object_call(&v) {
                    out.call(call);
                    found = true;
                }
                pos = at + used;
            }
            None => pos = at + 1,
        }
    }
    found
}

/// The pre-v11 list after the token.
fn legacy_chunk(chunk: &str, out: &mut Builder) {
    match leading_json(chunk) {
        Some((v, used)) => {
            let items = match v {
                Value::Array(items) => items,
                other => vec![other],
            };
            for item in &items {
                match object_call(item) {
                    Some(call) => out.call(call),
                    None => out.call(call_with_id(alphanumeric_id(9), "", item.to_string())),
                }
            }
            out.text(&chunk[used..]);
        }
        None => {
            if !scan_objects(chunk, out) {
                out.call(call_with_id(
                    alphanumeric_id(9),
                    "",
                    chunk.trim().to_owned(),
                ));
            }
        }
    }
}

/// One v11 `NAME[CALL_ID]ID[ARGS]{json}` chunk.
fn v11_chunk(chunk: &str, out: &mut Builder) {
    let name_end = [chunk.find('{'), chunk.find(ARGS), chunk.find(CALL_ID)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(chunk.len());
    let name = chunk[..name_end].trim();
    let mut rest = &chunk[name_end..];
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
        _ => {
            let raw = trimmed.trim();
            let raw = if raw.is_empty() { "{}" } else { raw };
            out.call(call_with_id(id, name, raw.to_owned()));
        }
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
            if lead.starts_with('[') || lead.starts_with('{') {
                legacy_chunk(lead, &mut out);
            } else {
                v11_chunk(lead, &mut out);
            }
        }
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
