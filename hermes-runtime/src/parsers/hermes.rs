//! The `hermes` / `qwen` format: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, with a
//! trailing unclosed block accepted (truncated generation); `longcat` is the same with
//! `<longcat_tool_call>` tags.

use serde_json::{Map, Value};

use super::common::{arguments_text, arguments_value, salvage_name, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const LONGCAT_OPEN: &str = "<longcat_tool_call>";
const LONGCAT_CLOSE: &str = "</longcat_tool_call>";

/// Parser for Hermes / Qwen style tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct HermesParser;

/// Parser for LongCat's `<longcat_tool_call>` blocks (Hermes rules).
#[derive(Debug, Clone, Copy, Default)]
pub struct LongcatParser;

/// One call from a block body: valid JSON gives name + serialised arguments; anything else
/// keeps the salvaged name and the raw body as arguments, which the loop reports as invalid.
/// A body without a readable name gives a call without a name (kept as text by the caller).
pub(super) fn call_from_body(body: &str) -> ToolCall {
    let parsed: Option<Map<String, Value>> = serde_json::from_str(body).ok();
    match parsed {
        Some(obj) => {
            let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
            let arguments = arguments_text(obj.get("arguments").or_else(|| obj.get("parameters")));
            ToolCall::new(name.trim(), arguments)
        }
        None => ToolCall::new(salvage_name(body).trim(), body),
    }
}

/// Parses `open … close` blocks of JSON calls; text outside the blocks is content, and so is
/// a block without a name.
pub(super) fn parse_tagged(text: &str, open: &str, close: &str) -> Parsed {
    let mut out = Builder::default();
    let mut rest = text;
    while let Some(start) = rest.find(open) {
        out.text(&rest[..start]);
        let after = &rest[start + open.len()..];
        let (body, next) = match after.find(close) {
            Some(end) => (&after[..end], &after[end + close.len()..]),
            None => (after, ""),
        };
        let raw = &rest[start..rest.len() - next.len()];
        out.call_or_text(call_from_body(body.trim()), raw);
        rest = next;
    }
    out.text(rest);
    out.finish_for(text)
}

/// Renders content, then one `open {json} close` block per call, separated by newlines.
pub(super) fn render_tagged(content: &str, calls: &[ToolCall], open: &str, close: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    if !content.is_empty() {
        lines.push(content.to_owned());
    }
    for call in calls {
        let mut obj = Map::new();
        obj.insert("name".into(), Value::String(call.function.name.clone()));
        obj.insert(
            "arguments".into(),
            arguments_value(&call.function.arguments),
        );
        lines.push(format!("{open}{}{close}", to_python_string(&obj)));
    }
    lines.join("\n")
}

impl ToolCallParser for HermesParser {
    fn parse(&self, text: &str) -> Parsed {
        parse_tagged(text, OPEN, CLOSE)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_tagged(content, calls, OPEN, CLOSE)
    }
}

impl ToolCallParser for LongcatParser {
    fn parse(&self, text: &str) -> Parsed {
        parse_tagged(text, LONGCAT_OPEN, LONGCAT_CLOSE)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_tagged(content, calls, LONGCAT_OPEN, LONGCAT_CLOSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_and_args(p: &Parsed) -> Vec<(String, String)> {
        p.calls
            .iter()
            .map(|c| (c.function.name.clone(), c.function.arguments.clone()))
            .collect()
    }

    #[test]
    fn spec_example() {
        let p = HermesParser.parse(r#"Let me check.<tool_call>{"name":"terminal","arguments":{"command":"ls"}}</tool_call>"#);
        assert_eq!(p.content.as_deref(), Some("Let me check."));
        assert_eq!(
            names_and_args(&p),
            [("terminal".into(), r#"{"command": "ls"}"#.into())]
        );
    }

    #[test]
    fn multiple_calls_text_between_and_after_and_an_unclosed_tail() {
        let text = "a<tool_call>\n{\"name\": \"x\", \"arguments\": {}}\n</tool_call> b <tool_call>{\"name\": \"y\", \"arguments\": {\"k\": \"é\"}}";
        let p = HermesParser.parse(text);
        assert_eq!(p.content.as_deref(), Some("a b"));
        assert_eq!(
            names_and_args(&p),
            [
                ("x".into(), "{}".into()),
                ("y".into(), r#"{"k": "é"}"#.into())
            ]
        );
    }

    #[test]
    fn a_malformed_call_is_kept_next_to_valid_ones() {
        let text = r#"<tool_call>{"name": "terminal", "arguments": {"command": "ls"</tool_call><tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>"#;
        let p = HermesParser.parse(text);
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].function.name, "terminal");
        assert!(serde_json::from_str::<Value>(&p.calls[0].function.arguments).is_err());
        assert_eq!(p.calls[1].function.arguments, r#"{"path": "a"}"#);
    }

    #[test]
    fn plain_text_and_garbage_never_panic() {
        for text in [
            "",
            "no calls",
            "<tool_call>",
            "<tool_call></tool_call>",
            "</tool_call>",
            "<tool_call>{\"name\":",
            "<tool_call>\u{0}\u{ffff}",
        ] {
            let p = HermesParser.parse(text);
            assert!(p.calls.len() <= 1, "{text:?}");
        }
        assert_eq!(
            HermesParser.parse("hello").content.as_deref(),
            Some("hello")
        );
    }

    #[test]
    fn render_then_parse_round_trips() {
        let calls = vec![
            ToolCall::new("terminal", r#"{"command": "ls -la"}"#),
            ToolCall::new("read_file", r#"{"path": "ü.txt"}"#),
        ];
        let text = HermesParser.render("thinking", &calls);
        assert_eq!(
            text,
            "thinking\n<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls -la\"}}</tool_call>\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"ü.txt\"}}</tool_call>"
        );
        let p = HermesParser.parse(&text);
        assert_eq!(p.content.as_deref(), Some("thinking"));
        assert_eq!(
            names_and_args(&p),
            calls
                .iter()
                .map(|c| (c.function.name.clone(), c.function.arguments.clone()))
                .collect::<Vec<_>>()
        );
    }
}
