//! Formats with special-token sections holding one or more calls: DeepSeek V3 / V3.1 and
//! Kimi K2. Text outside the sections is content; a section or a call cut short by the end of
//! the text is read up to the end; a text in which no call could be read is returned as is.

use super::common::{arguments_json, leading_json, plausible_name, raw_arguments, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;

/// The special tokens of one format.
struct Tokens {
    /// Section starts (any of them).
    section_begin: &'static [&'static str],
    /// Section ends (any of them).
    section_end: &'static [&'static str],
    /// Start of one call.
    call_begin: &'static str,
    /// End of one call.
    call_end: &'static str,
}

const DEEPSEEK: Tokens = Tokens {
    section_begin: &["<｜tool▁calls▁begin｜>"],
    section_end: &["<｜tool▁calls▁end｜>"],
    call_begin: "<｜tool▁call▁begin｜>",
    call_end: "<｜tool▁call▁end｜>",
};
const DEEPSEEK_SEP: &str = "<｜tool▁sep｜>";

const KIMI: Tokens = Tokens {
    section_begin: &[
        "<|tool_calls_section_begin|>",
        "<|tool_call_section_begin|>",
    ],
    section_end: &["<|tool_calls_section_end|>", "<|tool_call_section_end|>"],
    call_begin: "<|tool_call_begin|>",
    call_end: "<|tool_call_end|>",
};
const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";

/// The earliest occurrence of any of `needles`: (position, length).
fn find_any(hay: &str, needles: &[&str]) -> Option<(usize, usize)> {
    needles
        .iter()
        .filter_map(|n| hay.find(n).map(|i| (i, n.len())))
        .min()
}

/// Splits `text` into content and call bodies; `call` turns each body into a call. A call
/// start outside any section opens one (the section token is sometimes dropped).
fn parse_sections(text: &str, tokens: &Tokens, call: impl Fn(&str) -> ToolCall) -> Parsed {
    let mut out = Builder::default();
    let mut rest = text;
    loop {
        let start = find_any(rest, tokens.section_begin)
            .into_iter()
            .chain(rest.find(tokens.call_begin).map(|i| (i, 0)))
            .min();
        let Some((start, skip)) = start else {
            break;
        };
        out.text(&rest[..start]);
        let section = &rest[start + skip..];
        let (section, next) = match find_any(section, tokens.section_end) {
            Some((end, len)) => (&section[..end], &section[end + len..]),
            None => (section, ""),
        };
        let mut inner = section;
        while let Some(begin) = inner.find(tokens.call_begin) {
            out.text(&inner[..begin]);
            let body = &inner[begin + tokens.call_begin.len()..];
            let (body, after) = match find_any(body, &[tokens.call_end, tokens.call_begin]) {
                Some((end, _)) if body[end..].starts_with(tokens.call_end) => {
                    (&body[..end], &body[end + tokens.call_end.len()..])
                }
                Some((end, _)) => (&body[..end], &body[end..]),
                None => (body, ""),
            };
            let raw = &inner[begin..inner.len() - after.len()];
            out.call_or_text(call(body), raw);
            inner = after;
        }
        out.text(inner);
        rest = next;
    }
    out.text(rest);
    out.finish_for(text)
}

/// Arguments in a ```` ```json ```` fence (or a bare fence), else the leading JSON value, else
/// the raw text.
fn fenced_or_json(text: &str) -> String {
    let t = text.trim();
    if let Some(fence) = t.find("```") {
        let after = &t[fence + 3..];
        let after = after.strip_prefix("json").unwrap_or(after);
        if let Some((_, used)) = leading_json(after) {
            return raw_arguments(&after[..used]);
        }
        let inner = match after.find("```") {
            Some(end) => &after[..end],
            None => after,
        };
        return raw_arguments(inner);
    }
    match leading_json(t) {
        Some((_, used)) => raw_arguments(&t[..used]),
        None => raw_arguments(t),
    }
}

/// DeepSeek V3: `TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```` .
fn deepseek_v3_call(body: &str) -> ToolCall {
    let Some(sep) = body.find(DEEPSEEK_SEP) else {
        return ToolCall::new("", body);
    };
    let after_sep = &body[sep + DEEPSEEK_SEP.len()..];
    let name_end = [after_sep.find('\n'), after_sep.find("```")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(after_sep.len());
    ToolCall::new(
        plausible_name(&after_sep[..name_end]),
        fenced_or_json(&after_sep[name_end..]),
    )
}

/// DeepSeek V3.1: `NAME<｜tool▁sep｜>ARGS`.
fn deepseek_v31_call(body: &str) -> ToolCall {
    match body.find(DEEPSEEK_SEP) {
        Some(i) => ToolCall::new(
            plausible_name(&body[..i]),
            raw_arguments(&body[i + DEEPSEEK_SEP.len()..]),
        ),
        None => ToolCall::new("", body),
    }
}

/// Kimi K2: `functions.NAME:IDX<|tool_call_argument_begin|>ARGS`; the raw id is kept. An id
/// without the `:IDX` suffix is not a call (its name cannot be told apart from the index).
fn kimi_call(body: &str) -> ToolCall {
    let (id, args) = match body.find(KIMI_ARGS) {
        Some(i) => (
            body[..i].trim(),
            raw_arguments(&body[i + KIMI_ARGS.len()..]),
        ),
        None => (body.trim(), "{}".to_owned()),
    };
    let name = match id.rsplit_once(':') {
        Some((head, index)) if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) => {
            head.rsplit('.').next().unwrap_or(head)
        }
        _ => "",
    };
    let mut call = ToolCall::new(name.trim(), args);
    if !id.is_empty() {
        call.id = id.to_owned();
    }
    call
}

/// Parser for DeepSeek V3 / R1 tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeepSeekV3Parser;

/// Parser for DeepSeek V3.1 tool calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeepSeekV31Parser;

/// Parser for Kimi K2 tool calls (raw ids kept).
#[derive(Debug, Clone, Copy, Default)]
pub struct KimiK2Parser;

/// `content` + section begin + rendered calls + section end.
fn render_section(
    content: &str,
    calls: &[ToolCall],
    tokens: &Tokens,
    separator: &str,
    body: impl Fn(usize, &ToolCall) -> String,
) -> String {
    if calls.is_empty() {
        return content.to_owned();
    }
    let rendered: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{}{}{}", tokens.call_begin, body(i, c), tokens.call_end))
        .collect();
    format!(
        "{content}{}{}{}",
        tokens.section_begin[0],
        rendered.join(separator),
        tokens.section_end[0]
    )
}

impl ToolCallParser for DeepSeekV3Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_sections(text, &DEEPSEEK, deepseek_v3_call)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_section(content, calls, &DEEPSEEK, "\n", |_, c| {
            format!(
                "function{DEEPSEEK_SEP}{}\n```json\n{}\n```",
                c.function.name,
                arguments_json(&c.function.arguments)
            )
        })
    }
}

impl ToolCallParser for DeepSeekV31Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_sections(text, &DEEPSEEK, deepseek_v31_call)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_section(content, calls, &DEEPSEEK, "", |_, c| {
            format!(
                "{}{DEEPSEEK_SEP}{}",
                c.function.name,
                arguments_json(&c.function.arguments)
            )
        })
    }
}

/// The call's id when it is a Kimi id for this tool, else `functions.NAME:INDEX`.
fn kimi_id(index: usize, call: &ToolCall) -> String {
    let kimi_form = call
        .id
        .split(':')
        .next()
        .and_then(|head| head.rsplit('.').next())
        .is_some_and(|name| name == call.function.name && call.id.contains(':'));
    if kimi_form {
        call.id.clone()
    } else {
        format!("functions.{}:{index}", call.function.name)
    }
}

impl ToolCallParser for KimiK2Parser {
    fn parse(&self, text: &str) -> Parsed {
        parse_sections(text, &KIMI, kimi_call)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_section(content, calls, &KIMI, "", |i, c| {
            format!(
                "{}{KIMI_ARGS}{}",
                kimi_id(i, c),
                arguments_json(&c.function.arguments)
            )
        })
    }
}
