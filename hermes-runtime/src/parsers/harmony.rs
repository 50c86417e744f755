//! gpt-oss (OpenAI harmony) output decoded with its special tokens: messages
//! `[<|start|>assistant]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY`
//! ended by `<|end|>`, `<|call|>` or `<|return|>`. A message addressed `to=functions.NAME` is a
//! call whose body is the JSON arguments; `final` and recipient-less `commentary` messages are
//! content; `analysis` messages are reasoning and left out of the content. Text without
//! harmony messages is returned unchanged; the framing tokens are never content.

use super::common::{arguments_json, raw_arguments, unchanged, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const ENDS: &[&str] = &["<|end|>", "<|call|>", "<|return|>", START];

/// Parser for gpt-oss harmony messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct HarmonyParser;

/// The function a message header addresses (`to=functions.NAME`).
fn recipient(header: &str) -> Option<&str> {
    let at = header.find("to=")?;
    let target = &header[at + 3..];
    let end = target
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(target.len());
    target[..end]
        .strip_prefix("functions.")
        .filter(|n| !n.is_empty())
}

/// The channel a header names (`analysis`, `commentary`, `final`), if any.
fn channel(header: &str) -> Option<&str> {
    let at = header.find(CHANNEL)?;
    let rest = &header[at + CHANNEL.len()..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The body of a message starting at `text` and the text after its terminator.
fn body(text: &str) -> (&str, &str) {
    let end = ENDS
        .iter()
        .filter_map(|e| text.find(e).map(|at| (at, *e)))
        .min();
    match end {
        Some((at, START)) => (&text[..at], &text[at..]),
        Some((at, e)) => (&text[..at], &text[at + e.len()..]),
        None => (text, ""),
    }
}

impl ToolCallParser for HarmonyParser {
    fn parse(&self, text: &str) -> Parsed {
        if !text.contains(MESSAGE) {
            return unchanged(text);
        }
        let mut out = Builder::default();
        let mut rest = text;
        while let Some(at) = rest.find(MESSAGE) {
            let header = &rest[..at];
            let (message, next) = body(&rest[at + MESSAGE.len()..]);
            // Text before the header's markup (prose outside any message) is content.
            let markup = [header.find(START), header.find(CHANNEL)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(header.len());
            out.text(&header[..markup]);
            match (recipient(header), channel(header)) {
                (Some(name), _) => out.call(ToolCall::new(name, raw_arguments(message))),
                (None, Some("analysis")) => {}
                (None, _) => {
                    out.text(message);
                    out.text("\n");
                }
            }
            rest = next;
        }
        out.text(rest);
        // Harmony framing is never content, calls or not.
        out.finish()
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return content.to_owned();
        }
        let mut s = String::new();
        if !content.is_empty() {
            s.push_str(&format!(
                "{CHANNEL}commentary{MESSAGE}{content}<|end|>{START}assistant"
            ));
        }
        for (i, call) in calls.iter().enumerate() {
            if i > 0 {
                s.push_str(&format!("{START}assistant"));
            }
            s.push_str(&format!(
                "{CHANNEL}commentary to=functions.{} <|constrain|>json{MESSAGE}{}<|call|>",
                call.function.name,
                arguments_json(&call.function.arguments)
            ));
        }
        s
    }
}
