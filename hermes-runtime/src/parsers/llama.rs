//! The `llama3_json` / `llama4_json` format: JSON objects `{"name", "parameters"|"arguments"}`,
//! optionally after `<|python_tag|>` and separated by `;`. Every `{` is tried with a JSON
//! decoder; braces inside an object already read are skipped.

use serde_json::{Map, Value};

use super::common::{arguments_text, arguments_value, leading_json, salvage_name, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

const PYTHON_TAG: &str = "<|python_tag|>";

/// Parser for Llama 3.x / Llama 4 JSON tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct LlamaJsonParser;

/// A call from `{"name": …, "parameters"|"arguments": …}`.
fn object_call(v: &Value) -> Option<ToolCall> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let args = obj.get("parameters").or_else(|| obj.get("arguments"))?;
    Some(ToolCall::new(name, arguments_text(Some(args))))
}

/// Keeps text between calls unless it is only separators (`;`, `,`, whitespace).
fn keep_between(out: &mut Builder, text: &str) {
    if text
        .chars()
        .any(|c| !(c.is_whitespace() || c == ';' || c == ','))
    {
        out.text(text);
    }
}

impl ToolCallParser for LlamaJsonParser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let body = text.replace(PYTHON_TAG, " ");
        let mut pos = 0;
        let mut text_start = 0;
        let mut found = false;
        while let Some(rel) = body[pos..].find('{') {
            let at = pos + rel;
            let decoded = leading_json(&body[at..]);
            let call = match &decoded {
                Some((value, _)) => object_call(value),
                // A call cut short (or broken): keep it so the model hears about it.
                None if body[at + 1..].trim_start().starts_with("\"name\"") => {
                    let raw = body[at..].trim();
                    Some(ToolCall::new(salvage_name(raw), raw))
                        .filter(|c| !c.function.name.trim().is_empty())
                }
                None => None,
            };
            let used = decoded.as_ref().map_or(body.len() - at, |(_, used)| *used);
            if let Some(call) = call {
                if found {
                    keep_between(&mut out, &body[text_start..at]);
                } else {
                    out.text(&body[text_start..at]);
                }
                out.call(call);
                found = true;
                text_start = at + used;
                pos = at + used;
            } else {
                pos = if decoded.is_some() { at + used } else { at + 1 };
            }
        }
        let tail = &body[text_start..];
        if found {
            keep_between(&mut out, tail);
        } else {
            out.text(tail);
        }
        let mut parsed = out.finish();
        if !found {
            // No call: the original text (tag included) is the content.
            let t = text.trim();
            parsed.content = (!t.is_empty()).then(|| t.to_owned());
        }
        parsed
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        let rendered: Vec<String> = calls
            .iter()
            .map(|call| {
                let mut obj = Map::new();
                obj.insert("name".into(), Value::String(call.function.name.clone()));
                obj.insert(
                    "parameters".into(),
                    arguments_value(&call.function.arguments),
                );
                to_python_string(&Value::Object(obj))
            })
            .collect();
        match (content.is_empty(), rendered.is_empty()) {
            (_, true) => content.to_owned(),
            (true, false) => format!("{PYTHON_TAG}{}", rendered.join("; ")),
            (false, false) => format!("{content}{PYTHON_TAG}{}", rendered.join("; ")),
        }
    }
}
