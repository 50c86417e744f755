//! Formats that put JSON call objects `{"name": …, "arguments"|"parameters": …}` (alone, in
//! a list, or one per line) after a family's marker, with or without a closing marker:
//! Granite, Granite-20B-FC, InternLM2, Jamba, MiniMax (M1), Hunyuan-A13B, ERNIE 4.5,
//! Phi-4-mini, GigaChat 3 and Qwen2.5-Coder's `<tools>`. A value cut short keeps its name and
//! gets its raw text as (invalid) arguments; text after the JSON is content.

use serde_json::Value;

use super::common::{call_object, leading_json, object_call, salvage_name, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

/// How a family lays out several calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One block holding a JSON list.
    List,
    /// One block per call.
    Each,
    /// One block, one object per line.
    Lines,
}

/// One JSON-after-a-marker family.
#[derive(Debug, Clone, Copy)]
pub struct JsonBlockParser {
    /// Block starts (any of them; the first is rendered).
    open: &'static [&'static str],
    /// Block end; without one a block runs to the next start or the end of the text.
    close: Option<&'static str>,
    /// The arguments key rendered (`arguments` or `parameters`; both are read).
    arguments_key: &'static str,
    /// How several calls are rendered.
    layout: Layout,
    /// Rendered between the marker and the JSON (and before the closing marker).
    pad: &'static str,
    /// An end-of-turn token dropped from the end of the text (GigaChat's `</s>`).
    eos: Option<&'static str>,
    /// Reasoning tags whose inside is content, never calls (MiniMax-M1 thinks in `<think>`).
    reasoning: Option<(&'static str, &'static str)>,
}

const fn family(
    open: &'static [&'static str],
    close: Option<&'static str>,
    arguments_key: &'static str,
    layout: Layout,
    pad: &'static str,
) -> JsonBlockParser {
    JsonBlockParser {
        open,
        close,
        arguments_key,
        layout,
        pad,
        eos: None,
        reasoning: None,
    }
}

/// IBM Granite 3.x: `<|tool_call|>[{…}]` (3.1+: `<tool_call>[{…}]`).
pub const GRANITE: JsonBlockParser = family(
    &["<|tool_call|>", "<tool_call>"],
    None,
    "arguments",
    Layout::List,
    "",
);
/// Granite-20B-FunctionCalling: `<function_call> {…}` per call.
pub const GRANITE_20B_FC: JsonBlockParser =
    family(&["<function_call>"], None, "arguments", Layout::Each, " ");
/// InternLM2: `<|action_start|><|plugin|>{…}<|action_end|>`.
pub const INTERNLM2: JsonBlockParser = family(
    &["<|action_start|><|plugin|>"],
    Some("<|action_end|>"),
    "parameters",
    Layout::Each,
    "\n",
);
/// AI21 Jamba: `<tool_calls>[{…}]</tool_calls>`.
pub const JAMBA: JsonBlockParser = family(
    &["<tool_calls>"],
    Some("</tool_calls>"),
    "arguments",
    Layout::List,
    "",
);
/// MiniMax-M1 (`minimax`): `<tool_calls>` with one object per line; calls inside `<think>`
/// are part of the reasoning.
pub const MINIMAX: JsonBlockParser = JsonBlockParser {
    reasoning: Some(("<think>", "</think>")),
    ..family(
        &["<tool_calls>"],
        Some("</tool_calls>"),
        "arguments",
        Layout::Lines,
        "\n",
    )
};
/// Hunyuan-A13B: `<tool_calls>[{…}]</tool_calls>`.
pub const HUNYUAN: JsonBlockParser = family(
    &["<tool_calls>"],
    Some("</tool_calls>"),
    "arguments",
    Layout::List,
    "",
);
/// ERNIE 4.5: `<tool_call>\n{…}\n</tool_call>` per call.
pub const ERNIE45: JsonBlockParser = family(
    &["<tool_call>"],
    Some("</tool_call>"),
    "arguments",
    Layout::Each,
    "\n",
);
/// Phi-4-mini: `functools[{…}]`.
pub const PHI4_MINI: JsonBlockParser = family(&["functools"], None, "arguments", Layout::List, "");
/// GigaChat 3: `<|message_sep|>\n\nfunction call<|role_sep|>\n{…}` (3.1: `<|function_call|>{…}`),
/// optionally ended by `</s>`.
pub const GIGACHAT3: JsonBlockParser = JsonBlockParser {
    eos: Some("</s>"),
    ..family(
        &[
            "<|message_sep|>\n\nfunction call<|role_sep|>\n",
            "<|message_sep|>function call<|role_sep|>\n",
            "function call<|role_sep|>\n",
            "<|function_call|>",
        ],
        None,
        "arguments",
        Layout::Each,
        "",
    )
};
/// Qwen2.5-Coder: `<tools>{…}</tools>` (or a list).
pub const QWEN25_CODER: JsonBlockParser = family(
    &["<tools>"],
    Some("</tools>"),
    "arguments",
    Layout::Each,
    "\n",
);

/// Reads the JSON values of one block body into `out`; returns whether a call was read.
fn read_values(body: &str, out: &mut Builder) -> bool {
    let mut found = false;
    let mut rest = body;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',' || c == ';');
        if rest.is_empty() {
            return found;
        }
        if !rest.starts_with(['{', '[']) {
            out.text(rest);
            return found;
        }
        match leading_json(rest) {
            Some((value, used)) => {
                let calls: Vec<ToolCall> = match &value {
                    Value::Array(items) => items.iter().filter_map(object_call).collect(),
                    other => object_call(other).into_iter().collect(),
                };
                if calls.is_empty() {
                    out.text(&rest[..used]);
                }
                for call in calls {
                    out.call(call);
                    found = true;
                }
                rest = &rest[used..];
            }
            None => {
                // Broken JSON: up to the next line that starts a new object is this value.
                let end = rest.find("\n{").map_or(rest.len(), |i| i + 1);
                let (broken, next) = rest.split_at(end);
                let name = salvage_name(broken);
                if name.trim().is_empty() {
                    out.text(broken);
                } else {
                    out.call(ToolCall::new(name.trim(), broken.trim()));
                    found = true;
                }
                rest = next;
            }
        }
    }
}

impl JsonBlockParser {
    /// The earliest block start in `text`: (position, marker length).
    fn next_open(&self, text: &str) -> Option<(usize, usize)> {
        self.open
            .iter()
            .filter_map(|o| text.find(o).map(|at| (at, o.len())))
            .min()
    }

    /// A block's body and the text after it.
    fn block<'a>(&self, after: &'a str) -> (&'a str, &'a str) {
        match self.close {
            Some(close) => match after.find(close) {
                Some(end) => (&after[..end], &after[end + close.len()..]),
                None => (after, ""),
            },
            None => match self.next_open(after) {
                Some((end, _)) => after.split_at(end),
                None => (after, ""),
            },
        }
    }

    fn object_text(&self, call: &ToolCall) -> String {
        to_python_string(&call_object(call, self.arguments_key))
    }

    fn wrap(&self, json: &str) -> String {
        let close = self
            .close
            .map(|c| format!("{}{c}", self.pad))
            .unwrap_or_default();
        format!("{}{}{json}{close}", self.open[0], self.pad)
    }

    /// Reads the blocks of `text` (no reasoning inside) into `out`.
    fn read_blocks(&self, text: &str, out: &mut Builder) {
        let mut rest = text;
        while let Some((at, len)) = self.next_open(rest) {
            out.text(&rest[..at]);
            let (body, next) = self.block(&rest[at + len..]);
            let mut block = Builder::default();
            if read_values(body, &mut block) {
                let parsed = block.finish();
                if let Some(c) = parsed.content {
                    out.text(" ");
                    out.text(&c);
                }
                for call in parsed.calls {
                    out.call(call);
                }
            } else {
                out.text(&rest[at..rest.len() - next.len()]);
            }
            rest = next;
        }
        out.text(rest);
    }
}

impl ToolCallParser for JsonBlockParser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let mut rest = match self.eos {
            Some(eos) => text.trim_end().strip_suffix(eos).unwrap_or(text),
            None => text,
        };
        if let Some((think_open, think_close)) = self.reasoning {
            while let Some(start) = rest.find(think_open) {
                self.read_blocks(&rest[..start], &mut out);
                let after = &rest[start..];
                let end = after
                    .find(think_close)
                    .map_or(after.len(), |e| e + think_close.len());
                out.text(&after[..end]);
                rest = &after[end..];
            }
        }
        self.read_blocks(rest, &mut out);
        out.finish_for(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return content.to_owned();
        }
        let objects: Vec<String> = calls.iter().map(|c| self.object_text(c)).collect();
        let blocks = match self.layout {
            Layout::List => self.wrap(&format!("[{}]", objects.join(", "))),
            Layout::Lines => self.wrap(&objects.join("\n")),
            Layout::Each => objects
                .iter()
                .map(|o| self.wrap(o))
                .collect::<Vec<_>>()
                .join("\n"),
        };
        if content.is_empty() {
            blocks
        } else {
            format!("{content}\n{blocks}")
        }
    }
}
