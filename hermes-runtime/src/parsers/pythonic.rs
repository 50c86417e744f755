//! Python-call formats: `pythonic` / `llama4_pythonic` — a list of calls with keyword
//! arguments, `[get_weather(city='SF', days=3), get_time()]` (Llama 4 may wrap it in
//! `<|python_start|>…<|python_end|>`); `olmo3` — one call per line inside
//! `<function_calls>…</function_calls>`, with JSON's `true`/`false`/`null` allowed. Values are
//! Python literals. A call cut short keeps its name with its raw text as (invalid) arguments;
//! a call with positional arguments is not a call.

use serde_json::{Map, Value};

use super::common::{arguments_object, python_literal_prefix, Builder};
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

const PYTHON_START: &str = "<|python_start|>";
const PYTHON_END: &str = "<|python_end|>";
const OLMO_OPEN: &str = "<function_calls>";
const OLMO_CLOSE: &str = "</function_calls>";

/// Parser for `[name(key=value, …), …]` call lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct PythonicParser;

/// Parser for Olmo 3's newline-separated calls in `<function_calls>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Olmo3Parser;

/// How reading one call ended.
enum CallRead {
    /// A complete call and the bytes it used.
    Done(ToolCall, usize),
    /// A name and `(` were read but the rest is cut short or broken.
    Broken(String),
    /// Not a call.
    No,
}

/// Length of a Python identifier (dots allowed) at the start of `s`.
fn identifier_len(s: &str) -> usize {
    let mut len = 0;
    for (i, c) in s.char_indices() {
        let ok = if i == 0 {
            c.is_alphabetic() || c == '_'
        } else {
            c.is_alphanumeric() || matches!(c, '_' | '.' | '-')
        };
        if !ok {
            break;
        }
        len = i + c.len_utf8();
    }
    len
}

/// Reads `name(key=value, …)` at the start of `s`.
fn read_call(s: &str) -> CallRead {
    let name_len = identifier_len(s);
    if name_len == 0 || !s[name_len..].starts_with('(') {
        return CallRead::No;
    }
    let name = &s[..name_len];
    let broken = || CallRead::Broken(name.to_owned());
    let mut pos = name_len + 1;
    let mut args = Map::new();
    loop {
        let rest = &s[pos..];
        let trimmed = rest.trim_start();
        if let Some(after) = trimmed.strip_prefix(')') {
            let used = s.len() - after.len();
            let call = ToolCall::new(name, to_python_string(&Value::Object(args)));
            return CallRead::Done(call, used);
        }
        let key_len = identifier_len(trimmed);
        let after_key = trimmed[key_len..].trim_start();
        let Some(value_text) = after_key.strip_prefix('=').filter(|_| key_len > 0) else {
            return if trimmed.is_empty() || key_len > 0 {
                broken()
            } else {
                CallRead::No
            };
        };
        let Some((value, used)) = python_literal_prefix(value_text) else {
            return broken();
        };
        args.insert(trimmed[..key_len].to_owned(), value);
        let after_value = value_text[used..].trim_start();
        let after_value = after_value.strip_prefix(',').unwrap_or(after_value);
        pos = s.len() - after_value.len();
    }
}

/// Reads calls separated by `,`/whitespace from the start of `s` into `out`, up to `end`
/// (`]` for a list); returns the bytes used, or `None` when `s` does not start with a call.
fn read_calls(s: &str, end: Option<char>, out: &mut Builder) -> Option<usize> {
    let mut pos = 0;
    let mut any = false;
    loop {
        let rest = &s[pos..];
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        pos = s.len() - trimmed.len();
        if let Some(close) = end {
            if let Some(after) = trimmed.strip_prefix(close) {
                return any.then_some(s.len() - after.len());
            }
        }
        if trimmed.is_empty() {
            // The text ends here (a list cut short after a complete call).
            return any.then_some(s.len());
        }
        match read_call(trimmed) {
            CallRead::Done(call, used) => {
                out.call(call);
                any = true;
                pos += used;
            }
            CallRead::Broken(name) => {
                // Keep the name with the raw text as (invalid) arguments, then go on with the
                // next call of the list, if one can be found.
                let resume = next_call_start(trimmed).unwrap_or(trimmed.len());
                let raw = trimmed[..resume].trim_end().trim_end_matches(',');
                out.call(ToolCall::new(name, raw.trim()));
                any = true;
                if resume == trimmed.len() {
                    return Some(s.len());
                }
                pos += resume;
            }
            CallRead::No => return (any && end.is_none()).then_some(pos),
        }
    }
}

/// Offset of the next `, name(` (or a new line starting `name(`) after the start of `s`, where
/// a list resumes after a broken call.
fn next_call_start(s: &str) -> Option<usize> {
    let mut pos = 0;
    while let Some(rel) = s[pos..].find([',', '\n']) {
        let after = &s[pos + rel + 1..];
        let lead = after.len() - after.trim_start().len();
        let candidate = pos + rel + 1 + lead;
        let len = identifier_len(&s[candidate..]);
        if len > 0 && s[candidate + len..].starts_with('(') {
            return Some(candidate);
        }
        pos += rel + 1;
    }
    None
}

/// Finds `[name(` call lists anywhere in `text`.
fn parse_lists(text: &str) -> Parsed {
    let body = text.replace(PYTHON_START, "").replace(PYTHON_END, "");
    let mut out = Builder::default();
    let mut kept = 0;
    let mut pos = 0;
    while let Some(rel) = body[pos..].find('[') {
        let at = pos + rel;
        let mut calls = Builder::default();
        match read_calls(&body[at + 1..], Some(']'), &mut calls) {
            Some(used) => {
                out.text(&body[kept..at]);
                for call in calls.finish().calls {
                    out.call(call);
                }
                kept = at + 1 + used;
                pos = kept;
            }
            None => pos = at + 1,
        }
    }
    out.text(&body[kept..]);
    out.finish_for(text)
}

/// A value as Python source; `json_words` spells booleans and null the JSON way.
fn python_value(v: &Value, json_words: bool) -> String {
    match v {
        Value::Null => if json_words { "null" } else { "None" }.to_owned(),
        Value::Bool(b) => match (b, json_words) {
            (true, false) => "True".into(),
            (false, false) => "False".into(),
            (b, true) => b.to_string(),
        },
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(|i| python_value(i, json_words)).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(m) => {
            let inner: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", to_python_string(k), python_value(v, json_words)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        other => to_python_string(other),
    }
}

/// `name(key=value, …)`.
fn python_call(call: &ToolCall, json_words: bool) -> String {
    let args: Vec<String> = arguments_object(&call.function.arguments)
        .iter()
        .map(|(k, v)| format!("{k}={}", python_value(v, json_words)))
        .collect();
    format!("{}({})", call.function.name, args.join(", "))
}

impl ToolCallParser for PythonicParser {
    fn parse(&self, text: &str) -> Parsed {
        parse_lists(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return content.to_owned();
        }
        let list: Vec<String> = calls.iter().map(|c| python_call(c, false)).collect();
        let list = format!("[{}]", list.join(", "));
        if content.is_empty() {
            list
        } else {
            format!("{content}\n{list}")
        }
    }
}

impl ToolCallParser for Olmo3Parser {
    fn parse(&self, text: &str) -> Parsed {
        let mut out = Builder::default();
        let mut rest = text;
        while let Some(start) = rest.find(OLMO_OPEN) {
            out.text(&rest[..start]);
            let after = &rest[start + OLMO_OPEN.len()..];
            let (block, next) = match after.find(OLMO_CLOSE) {
                Some(end) => (&after[..end], &after[end + OLMO_CLOSE.len()..]),
                None => (after, ""),
            };
            let inner = block.trim_start();
            let mut calls = Builder::default();
            let read = match inner.strip_prefix('[') {
                Some(list) => read_calls(list, Some(']'), &mut calls),
                None => read_calls(inner, None, &mut calls),
            };
            match read {
                Some(_) => calls.finish().calls.into_iter().for_each(|c| out.call(c)),
                None => out.text(&rest[start..rest.len() - next.len()]),
            }
            rest = next;
        }
        out.text(rest);
        out.finish_for(text)
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        if calls.is_empty() {
            return content.to_owned();
        }
        let lines: Vec<String> = calls.iter().map(|c| python_call(c, true)).collect();
        let block = format!("{OLMO_OPEN}\n{}\n{OLMO_CLOSE}", lines.join("\n"));
        if content.is_empty() {
            block
        } else {
            format!("{content}\n{block}")
        }
    }
}
