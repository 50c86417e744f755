//! Formats with XML-style invokes inside a block: `<invoke name="NAME"><parameter
//! name="KEY">VALUE</parameter></invoke>` with a per-family tag prefix — MiniMax-M2
//! (`<minimax:tool_call>` blocks, no prefix), Step-3 (`<｜tool_calls_begin｜>` sections,
//! `steptml:`) and DeepSeek V3.2 / V4 DSML (`｜DSML｜`, see `dsml.rs`). A parameter tagged
//! `string="true"` is the raw string, `string="false"` JSON; untagged values go through the
//! JSON → Python literal → text heuristics (a string keeps its surrounding whitespace). An
//! invoke without parameter tags may hold its arguments as one JSON object. Missing closing tags are read to the next tag or
//! the end of the text.

use serde_json::{Map, Value};

use super::common::{arguments_object, heuristic_value, leading_json, plausible_name, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

/// The markup of one invoke-style family.
#[derive(Debug, Clone, Copy)]
pub struct InvokeFormat {
    /// Block starts (any of them; the first is rendered).
    pub block_open: &'static [&'static str],
    /// Block ends, matching `block_open` by position.
    pub block_close: &'static [&'static str],
    /// `<invoke`, with the family's prefix.
    pub invoke_open: &'static str,
    /// `</invoke>`, with the family's prefix.
    pub invoke_close: &'static str,
    /// `<parameter`, with the family's prefix.
    pub param_open: &'static str,
    /// `</parameter>`, with the family's prefix.
    pub param_close: &'static str,
    /// Rendered around each invoke (Step-3's per-call tokens), if any.
    pub call_wrap: Option<(&'static str, &'static str)>,
    /// Whether rendered parameters carry `string="true|false"` (DSML).
    pub string_attr: bool,
}

/// The value of attribute `key` in a tag's text (`name="x" string="true"`).
fn attribute<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = tag;
    while let Some(at) = rest.find(key) {
        let before_ok = at == 0 || rest[..at].ends_with(char::is_whitespace);
        let after = rest[at + key.len()..].trim_start();
        if before_ok {
            if let Some(value) = after.strip_prefix('=') {
                let value = value.trim_start();
                if let Some(quoted) = value.strip_prefix('"') {
                    return quoted.split('"').next();
                }
            }
        }
        rest = &rest[at + key.len()..];
    }
    None
}

/// An invoke body that is exactly one JSON object.
fn json_body(body: &str) -> Option<Value> {
    let t = body.trim();
    if !t.starts_with('{') {
        return None;
    }
    match leading_json(t) {
        Some((object @ Value::Object(_), used)) if t[used..].trim().is_empty() => Some(object),
        _ => None,
    }
}

/// A parameter value by its `string` attribute.
fn param_value(raw: &str, string: Option<&str>) -> Value {
    match string {
        Some("true") => Value::String(raw.to_owned()),
        Some("false") => serde_json::from_str(raw.trim()).unwrap_or_else(|_| heuristic_value(raw)),
        _ => heuristic_value(raw),
    }
}

/// The text up to the earliest of `ends` (and the rest from there), or all of it.
fn until<'a>(text: &'a str, ends: &[&str]) -> (&'a str, &'a str) {
    let end = ends
        .iter()
        .filter_map(|e| text.find(e))
        .min()
        .unwrap_or(text.len());
    text.split_at(end)
}

impl InvokeFormat {
    /// The parameters of one invoke body.
    fn arguments(&self, body: &str) -> Map<String, Value> {
        let mut args = Map::new();
        let mut rest = body;
        while let Some(start) = rest.find(self.param_open) {
            let after = &rest[start + self.param_open.len()..];
            let Some(tag_end) = after.find('>') else {
                break;
            };
            let tag = &after[..tag_end];
            let (raw, next) = until(&after[tag_end + 1..], &[self.param_close, self.param_open]);
            let next = next.strip_prefix(self.param_close).unwrap_or(next);
            if let Some(key) = attribute(tag, "name").filter(|k| !k.is_empty()) {
                args.insert(key.to_owned(), param_value(raw, attribute(tag, "string")));
            }
            rest = next;
        }
        args
    }

    /// Reads the invokes of one block; a block without one is kept as text.
    fn read_block(&self, block: &str, raw_block: &str, out: &mut Builder) {
        let mut found = false;
        let mut rest = block;
        while let Some(start) = rest.find(self.invoke_open) {
            let after = &rest[start + self.invoke_open.len()..];
            let (tag, body) = match after.find('>') {
                Some(i) => (&after[..i], &after[i + 1..]),
                None => (after, ""),
            };
            let (body, next) = until(body, &[self.invoke_close, self.invoke_open]);
            let next = next.strip_prefix(self.invoke_close).unwrap_or(next);
            let name = plausible_name(attribute(tag, "name").unwrap_or_default());
            if !name.is_empty() {
                let args = Value::Object(self.arguments(body));
                // Without parameter tags the body may be the JSON object itself (DSML's
                // second layout).
                let args = match json_body(body) {
                    Some(object) if args.as_object().is_some_and(Map::is_empty) => object,
                    _ => args,
                };
                out.call(ToolCall::new(name, to_python_string(&args)));
                found = true;
            }
            rest = next;
        }
        if !found {
            out.text(raw_block);
        }
    }

    /// Splits `text` into content and blocks, reading each block's invokes.
    pub(super) fn parse_text(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let mut rest = text;
        loop {
            let start = self
                .block_open
                .iter()
                .enumerate()
                .filter_map(|(i, open)| rest.find(open).map(|at| (at, i)))
                .min();
            let Some((at, which)) = start else {
                break;
            };
            out.text(&rest[..at]);
            let after = &rest[at + self.block_open[which].len()..];
            let close = self.block_close[which];
            let (block, next) = match after.find(close) {
                Some(end) => (&after[..end], &after[end + close.len()..]),
                None => (after, ""),
            };
            self.read_block(block, &rest[at..rest.len() - next.len()], &mut out);
            rest = next;
        }
        out.text(rest);
        out.finish_for(text)
    }

    /// One parameter tag with its value.
    fn render_param(&self, key: &str, value: &Value) -> String {
        let (open, close) = (self.param_open, self.param_close);
        match (value, self.string_attr) {
            (Value::String(s), true) => format!("{open} name=\"{key}\" string=\"true\">{s}{close}"),
            (other, true) => format!(
                "{open} name=\"{key}\" string=\"false\">{}{close}",
                to_python_string(other)
            ),
            (other, false) => format!(
                "{open} name=\"{key}\">{}{close}",
                super::common::render_value(other)
            ),
        }
    }

    /// Content, then one block with an invoke per call.
    pub(super) fn render_text(&self, content: &str, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return content.to_owned();
        }
        let mut s = String::new();
        if !content.is_empty() {
            s.push_str(content);
            s.push_str("\n\n");
        }
        s.push_str(self.block_open[0]);
        s.push('\n');
        for call in calls {
            let (begin, end) = self.call_wrap.unwrap_or(("", ""));
            s.push_str(begin);
            s.push_str(&format!(
                "{} name=\"{}\">\n",
                self.invoke_open, call.function.name
            ));
            for (key, value) in arguments_object(&call.function.arguments) {
                s.push_str(&self.render_param(&key, &value));
                s.push('\n');
            }
            s.push_str(self.invoke_close);
            s.push_str(end);
            s.push('\n');
        }
        s.push_str(self.block_close[0]);
        s
    }
}

/// Parser for MiniMax-M2 tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct MinimaxM2Parser;

const MINIMAX_M2: InvokeFormat = InvokeFormat {
    block_open: &["<minimax:tool_call>"],
    block_close: &["</minimax:tool_call>"],
    invoke_open: "<invoke",
    invoke_close: "</invoke>",
    param_open: "<parameter",
    param_close: "</parameter>",
    call_wrap: None,
    string_attr: false,
};

impl ToolCallParser for MinimaxM2Parser {
    fn parse(&self, text: &str) -> Parsed {
        MINIMAX_M2.parse_text(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        MINIMAX_M2.render_text(content, calls)
    }
}

/// Parser for Step-3 tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct Step3Parser;

const STEP3: InvokeFormat = InvokeFormat {
    block_open: &["<｜tool_calls_begin｜>"],
    block_close: &["<｜tool_calls_end｜>"],
    invoke_open: "<steptml:invoke",
    invoke_close: "</steptml:invoke>",
    param_open: "<steptml:parameter",
    param_close: "</steptml:parameter>",
    call_wrap: Some((
        "<｜tool_call_begin｜>function<｜tool_sep｜>",
        "<｜tool_call_end｜>",
    )),
    string_attr: false,
};

impl ToolCallParser for Step3Parser {
    fn parse(&self, text: &str) -> Parsed {
        STEP3.parse_text(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        STEP3.render_text(content, calls)
    }
}
