//! A policy wrapper that turns another policy's tool calls into one model family's raw text
//! (rendered with that family's parser into `content`), as a server without a tool parser
//! returns them. The agent loop then has to parse them with `--env.tool_call_parser`.

use serde_json::Value;

use super::server::{Policy, Reply};
use crate::llm::ToolCall;
use crate::parsers::ToolCallParser;

/// Wraps `inner`, moving its tool calls into `content` as `parser`'s raw text.
pub struct RawTextPolicy<P> {
    inner: P,
    parser: &'static dyn ToolCallParser,
}

impl<P: Policy> RawTextPolicy<P> {
    /// Renders `inner`'s tool calls with `parser`.
    pub fn new(inner: P, parser: &'static dyn ToolCallParser) -> Self {
        RawTextPolicy { inner, parser }
    }
}

impl<P: Policy> Policy for RawTextPolicy<P> {
    fn respond(&self, request: &Value) -> Reply {
        match self.inner.respond(request) {
            Reply::Message {
                content,
                tool_calls,
                reasoning,
            } if !tool_calls.is_empty() => {
                let calls: Vec<ToolCall> = tool_calls
                    .iter()
                    .map(|(name, args)| ToolCall::new(name.as_str(), args.as_str()))
                    .collect();
                Reply::Message {
                    content: self.parser.render(&content, &calls),
                    tool_calls: Vec::new(),
                    reasoning,
                }
            }
            other => other,
        }
    }
}
