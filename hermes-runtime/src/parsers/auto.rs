//! `auto`: tool calls as local servers hand them back in `content` (llama.cpp `llama-server
//! --jinja`, Ollama, llama-cpp-python) when the model's template and the server's parser
//! disagree. Explicit markup is read as its family reads it: Hermes `<tool_call>{…}` blocks
//! and Qwen3-Coder `<function=NAME><parameter=KEY>…` XML. Unmarked calls — a ```` ```json ````
//! fence or a bare JSON object / list `{"name": …, "arguments" | "parameters": {…} | "…"}`,
//! and llama-cpp-python's `functions.NAME:` followed by JSON (or nothing) — count only when
//! every call names an offered tool, so prose, JSON examples and code samples stay content;
//! fences of other languages are never searched.

use serde_json::Value;

use super::common::{fences, leading_json, object_call, unchanged, Builder};
use super::hermes::{parse_tagged, render_tagged};
use super::qwen3_coder::QWEN3_CODER;
use super::{Parsed, ToolCallParser};
use crate::calls::ToolCall;

const FUNCTIONS_PREFIX: &str = "functions.";

/// Parser for local models' tool calls in any of the common shapes.
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoParser;

/// A call object, also in the OpenAI shape `{"type": "function", "function": {…}}`.
fn auto_call(value: &Value) -> Option<ToolCall> {
    match value.get("function") {
        Some(inner @ Value::Object(_)) => object_call(inner),
        _ => object_call(value),
    }
}

/// The calls a JSON value holds when every one names an offered tool.
fn offered_calls(value: &Value, offered: &[&str]) -> Option<Vec<ToolCall>> {
    let calls: Vec<ToolCall> = match value {
        Value::Array(items) if !items.is_empty() => {
            items.iter().map(auto_call).collect::<Option<_>>()?
        }
        Value::Object(_) => vec![auto_call(value)?],
        _ => return None,
    };
    calls
        .iter()
        .all(|c| offered.contains(&c.function.name.as_str()))
        .then_some(calls)
}

/// What starts at one position of the text.
enum Found {
    /// Calls spanning `len` bytes.
    Calls(Vec<ToolCall>, usize),
    /// Something to step over whole (a fence or JSON that is not a call).
    Skip(usize),
    /// Nothing here.
    Nothing,
}

/// `functions.NAME:` followed by JSON arguments, or by nothing but whitespace (the call then
/// has no arguments and the tool reports what is missing).
fn prefixed_call(text: &str, offered: &[&str]) -> Found {
    let rest = &text[FUNCTIONS_PREFIX.len()..];
    let Some(colon) = rest.find(':') else {
        return Found::Nothing;
    };
    let name = &rest[..colon];
    if !offered.contains(&name) {
        return Found::Nothing;
    }
    let after = &rest[colon + 1..];
    let head = FUNCTIONS_PREFIX.len() + colon + 1;
    match leading_json(after) {
        Some((args @ Value::Object(_), used)) => Found::Calls(
            vec![ToolCall::new(name, crate::pyjson::to_python_string(&args))],
            head + used,
        ),
        _ if after.trim().is_empty() => Found::Calls(vec![ToolCall::new(name, "{}")], text.len()),
        _ => Found::Nothing,
    }
}

/// What starts at the beginning of `text` (one of `` ` ``, `f`, `{`, `[`).
fn found_at(text: &str, offered: &[&str]) -> Found {
    if text.starts_with("```") {
        let Some(fence) = fences(text).into_iter().next() else {
            return Found::Nothing;
        };
        let calls = fence
            .json()
            .and_then(|inner| {
                let inner = inner.trim();
                let (value, used) = leading_json(inner)?;
                inner[used..].trim().is_empty().then_some(value)
            })
            .and_then(|value| offered_calls(&value, offered));
        return match calls {
            Some(calls) => Found::Calls(calls, fence.end),
            None => Found::Skip(fence.end),
        };
    }
    if text.starts_with(FUNCTIONS_PREFIX) {
        return prefixed_call(text, offered);
    }
    if text.starts_with(['{', '[']) {
        return match leading_json(text) {
            Some((value, used)) => match offered_calls(&value, offered) {
                Some(calls) => Found::Calls(calls, used),
                None => Found::Skip(used),
            },
            None => Found::Nothing,
        };
    }
    Found::Nothing
}

/// Unmarked calls naming offered tools; text around them is content.
fn parse_unmarked(text: &str, offered: &[&str]) -> Parsed {
    let mut out = Builder::default();
    let mut kept = 0;
    let mut pos = 0;
    while let Some(rel) = text[pos..].find(['`', 'f', '{', '[']) {
        let at = pos + rel;
        match found_at(&text[at..], offered) {
            Found::Calls(calls, len) => {
                out.text(&text[kept..at]);
                calls.into_iter().for_each(|c| out.call(c));
                kept = at + len;
                pos = kept;
            }
            Found::Skip(len) => pos = at + len.max(1),
            Found::Nothing => pos = at + 1,
        }
    }
    out.text(&text[kept..]);
    out.finish_for(text)
}

impl ToolCallParser for AutoParser {
    /// Without the offered tools only explicit markup is read.
    fn parse(&self, text: &str) -> Parsed {
        self.parse_offered(text, &[])
    }

    fn render(&self, content: &str, calls: &[ToolCall]) -> String {
        render_tagged(content, calls, "<tool_call>", "</tool_call>")
    }

    fn parse_offered(&self, text: &str, offered: &[&str]) -> Parsed {
        if text.contains("<function=") {
            let parsed = QWEN3_CODER.parse(text);
            if !parsed.calls.is_empty() {
                return parsed;
            }
        }
        if text.contains("<tool_call>") {
            let parsed = parse_tagged(text, "<tool_call>", "</tool_call>");
            if !parsed.calls.is_empty() {
                return parsed;
            }
        }
        if offered.is_empty() {
            return unchanged(text);
        }
        parse_unmarked(text, offered)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    const OFFERED: &[&str] = &["terminal", "read_file", "write_file"];

    /// (name, arguments as JSON) of each call, and the content.
    fn parse(text: &str) -> (Option<String>, Vec<(String, Value)>) {
        let p = AutoParser.parse_offered(text, OFFERED);
        let calls = p
            .calls
            .iter()
            .map(|c| {
                let args = serde_json::from_str(&c.function.arguments).expect("valid JSON");
                (c.function.name.clone(), args)
            })
            .collect();
        (p.content, calls)
    }

    fn greeting() -> Value {
        json!({"path": "~/greeting.txt", "content": "Hello from Hermes Agent"})
    }

    #[test]
    fn qwen25_coder_on_llama_server_answers_with_a_fenced_json_call() {
        // Qwen2.5-Coder-1.5B-Instruct behind `llama-server --jinja`, terminal_test's first
        // turn: the right call, as a fenced block in `content`, no `tool_calls`.
        let text = "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"~/greeting.txt\", \"content\": \"Hello from Hermes Agent\"}}\n```";
        assert_eq!(parse(text), (None, vec![("write_file".into(), greeting())]));
    }

    #[test]
    fn llama_cpp_python_chatml_function_calling_prefix() {
        // llama-cpp-python's `chatml-function-calling` handler with a system prompt.
        let text = "functions.write_file:\n{\"path\": \"~/greeting.txt\", \"content\": \"Hello from Hermes Agent\"}";
        assert_eq!(parse(text), (None, vec![("write_file".into(), greeting())]));
        assert_eq!(
            parse("functions.write_file:"),
            (None, vec![("write_file".into(), json!({}))])
        );
    }

    #[test]
    fn bare_objects_lists_string_arguments_parameters_and_the_openai_shape() {
        let (content, calls) = parse(
            "I'll list it. {\"name\": \"terminal\", \"arguments\": \"{\\\"command\\\": \\\"ls\\\"}\"} then \
             [{\"name\": \"read_file\", \"parameters\": {\"path\": \"a\"}}, \
              {\"type\": \"function\", \"function\": {\"name\": \"terminal\", \"arguments\": {\"command\": \"pwd\"}}}]",
        );
        assert_eq!(content.as_deref(), Some("I'll list it.  then"));
        assert_eq!(
            calls,
            vec![
                ("terminal".into(), json!({"command": "ls"})),
                ("read_file".into(), json!({"path": "a"})),
                ("terminal".into(), json!({"command": "pwd"})),
            ]
        );
    }

    #[test]
    fn prose_json_examples_and_code_samples_stay_content() {
        for text in [
            "Sure! The answer is 42.",
            "Your package.json: {\"name\": \"my-app\", \"version\": \"1.0.0\"}",
            "Call it like {\"name\": \"delete_everything\", \"arguments\": {}}.",
            "```python\ncall = {\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}\n```",
            "```bash\nls -la\n```",
            "[{\"name\": \"terminal\", \"arguments\": {}}, {\"name\": \"rm_rf\", \"arguments\": {}}]",
            "{\"config\": {\"name\": \"terminal\", \"arguments\": {}}}",
            "The functions.write_file: helper writes files.",
            "```json\n{\"name\": \"terminal\", \"arguments\": {}} and more\n```",
        ] {
            assert_eq!(parse(text), (Some(text.to_owned()), vec![]), "{text}");
        }
    }

    #[test]
    fn explicit_markup_needs_no_offered_tools_and_wins() {
        let text = "<tool_call>{\"name\": \"other\", \"arguments\": {}}</tool_call>";
        assert_eq!(parse(text).1, vec![("other".into(), json!({}))]);
        let p = AutoParser.parse("{\"name\": \"terminal\", \"arguments\": {}}");
        assert!(p.calls.is_empty());
    }
}
