//! DeepSeek V3.2 and V4 DSML tool calls, as vLLM's and SGLang's DeepSeek-V3.2/V4 parsers read
//! them:
//!
//! ```text
//! <｜DSML｜function_calls>            (V4: <｜DSML｜tool_calls>)
//! <｜DSML｜invoke name="get_weather">
//! <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
//! <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//! </｜DSML｜invoke>
//! </｜DSML｜function_calls>
//! ```
//!
//! `string="false"` values are JSON. Both parsers read both block names, and the spelling with
//! ASCII pipes (`<|DSML|invoke …>`, also spaced `< | DSML | `) that the models sometimes emit.

use super::common::unchanged;
use super::invoke::InvokeFormat;
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;

/// The fullwidth DSML marker.
const MARK: &str = "｜DSML｜";

const fn dsml(open: &'static [&'static str], close: &'static [&'static str]) -> InvokeFormat {
    InvokeFormat {
        block_open: open,
        block_close: close,
        invoke_open: "<｜DSML｜invoke",
        invoke_close: "</｜DSML｜invoke>",
        param_open: "<｜DSML｜parameter",
        param_close: "</｜DSML｜parameter>",
        call_wrap: None,
        string_attr: true,
    }
}

const V32: InvokeFormat = dsml(
    &["<｜DSML｜function_calls>", "<｜DSML｜tool_calls>"],
    &["</｜DSML｜function_calls>", "</｜DSML｜tool_calls>"],
);
const V4: InvokeFormat = dsml(
    &["<｜DSML｜tool_calls>", "<｜DSML｜function_calls>"],
    &["</｜DSML｜tool_calls>", "</｜DSML｜function_calls>"],
);

/// Parser for DeepSeek V3.2 (`<｜DSML｜function_calls>` blocks).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeepSeekV32Parser;

/// Parser for DeepSeek V4 (`<｜DSML｜tool_calls>` blocks).
#[derive(Debug, Clone, Copy, Default)]
pub struct DeepSeekV4Parser;

/// Length of a DSML marker at the start of `s` (`<`, an optional `/`, a pipe, `DSML`, a pipe;
/// pipes fullwidth or ASCII, spaces allowed) and whether it closes.
fn marker(s: &str) -> Option<(usize, bool)> {
    fn pipe(s: &str) -> Option<&str> {
        let s = s.trim_start_matches(' ');
        s.strip_prefix('|')
            .or_else(|| s.strip_prefix('｜'))
            .map(|r| r.trim_start_matches(' '))
    }
    let rest = s.strip_prefix('<')?.trim_start_matches(' ');
    let (closing, rest) = match rest.strip_prefix('/') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let rest = pipe(rest)?.strip_prefix("DSML")?;
    let rest = pipe(rest)?;
    Some((s.len() - rest.len(), closing))
}

/// Rewrites every DSML marker to the canonical fullwidth form.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        let at = &rest[i..];
        match marker(at) {
            Some((len, closing)) => {
                out.push_str(if closing { "</" } else { "<" });
                out.push_str(MARK);
                rest = &at[len..];
            }
            None => {
                out.push('<');
                rest = &at[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Parses with `format`, normalising the ASCII spelling first when present.
fn parse_dsml(format: &InvokeFormat, text: &str) -> Parsed {
    if !text.contains("DSML") {
        return unchanged(text);
    }
    if text.contains(&format!("<{MARK}")) && !text.contains('|') {
        return format.parse_text(text);
    }
    let parsed = format.parse_text(&normalize(text));
    if parsed.calls.is_empty() {
        return unchanged(text);
    }
    parsed
}

impl ToolCallParser for DeepSeekV32Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_dsml(&V32, text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        V32.render_text(content, calls)
    }
}

impl ToolCallParser for DeepSeekV4Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_dsml(&V4, text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        V4.render_text(content, calls)
    }
}
