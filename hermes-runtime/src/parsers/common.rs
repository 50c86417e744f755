//! Helpers shared by the parsers: content assembly, argument serialisation, the value
//! heuristics of the XML-ish formats (JSON, then a Python literal, then the raw string) and
//! leading-JSON decoding.

use serde_json::{Map, Number, Value};

use super::Parsed;
use crate::calls::ToolCall;
use crate::pyjson::to_python_string;

/// Deepest nesting the Python-literal reader follows (deeper input is read as a string).
const MAX_LITERAL_DEPTH: usize = 64;

/// Collects non-markup text and calls while a parser walks its input.
#[derive(Debug, Default)]
pub(super) struct Builder {
    content: String,
    calls: Vec<ToolCall>,
}

impl Builder {
    /// Keeps `text` as content.
    pub fn text(&mut self, text: &str) {
        self.content.push_str(text);
    }

    /// Adds a call.
    pub fn call(&mut self, call: ToolCall) {
        self.calls.push(call);
    }

    /// Adds `call`, or keeps `raw` (its markup as written) as content when the call has no
    /// name: a name is never invented.
    pub fn call_or_text(&mut self, call: ToolCall, raw: &str) {
        if call.function.name.trim().is_empty() {
            self.content.push_str(raw);
        } else {
            self.calls.push(call);
        }
    }

    /// The result: content trimmed (`None` when empty), calls in order.
    pub fn finish(self) -> Parsed {
        let content = self.content.trim();
        Parsed {
            content: (!content.is_empty()).then(|| content.to_owned()),
            calls: self.calls,
        }
    }

    /// Like [`Builder::finish`], but a parse that found no call returns `original` unchanged
    /// (trimmed): markup that did not make a call is never half-removed.
    pub fn finish_for(self, original: &str) -> Parsed {
        if self.calls.is_empty() {
            unchanged(original)
        } else {
            self.finish()
        }
    }
}

/// `name` when it can be a function name (non-empty, no whitespace or markup characters),
/// else `""` so the call is kept as text.
pub(super) fn plausible_name(name: &str) -> &str {
    let name = name.trim();
    let bad = |c: char| c.is_whitespace() || matches!(c, '<' | '>' | '{' | '}' | '[' | ']' | '"');
    if name.contains(bad) {
        ""
    } else {
        name
    }
}

/// A Markdown code fence found in a text.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fence<'a> {
    /// Byte offset of the opening backticks.
    pub start: usize,
    /// Byte offset just past the closing backticks (the end of the text when unclosed).
    pub end: usize,
    /// The info string (`json`, `bash`, empty).
    pub lang: &'a str,
    /// The text between the fences.
    pub inner: &'a str,
}

impl<'a> Fence<'a> {
    /// The inside, when the fence is untagged or tagged `json`.
    pub fn json(&self) -> Option<&'a str> {
        (self.lang.is_empty() || self.lang.eq_ignore_ascii_case("json")).then_some(self.inner)
    }
}

/// Every ```` ``` ```` fence in `text`, in order.
pub(super) fn fences(text: &str) -> Vec<Fence<'_>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(rel) = text[pos..].find("```") {
        let start = pos + rel;
        let after = &text[start + 3..];
        let info_end = after.find('\n').unwrap_or(after.len());
        let lang = after[..info_end].trim();
        let inner_start = start + 3 + info_end;
        // A fence holding JSON closes after the JSON value: a string in it may hold backticks.
        let search_from = inner_start + json_extent(&text[inner_start..]).unwrap_or(0);
        let (inner_end, end) = match text[search_from..].find("```") {
            Some(e) => (search_from + e, search_from + e + 3),
            None => (text.len(), text.len()),
        };
        out.push(Fence {
            start,
            end,
            lang,
            inner: &text[inner_start..inner_end],
        });
        pos = end;
    }
    out
}

/// Bytes of `text` up to the end of the JSON array or object it starts with (after white
/// space), if it starts with one that parses.
fn json_extent(text: &str) -> Option<usize> {
    let body = text.trim_start();
    if !body.starts_with(['[', '{']) {
        return None;
    }
    let (_, used) = leading_json(body)?;
    Some(text.len() - body.len() + used)
}

/// `text` as plain content, no calls.
pub(super) fn unchanged(text: &str) -> Parsed {
    let t = text.trim();
    Parsed {
        content: (!t.is_empty()).then(|| t.to_owned()),
        calls: Vec::new(),
    }
}

/// A call from a JSON object `{"name": "…", "arguments" | "parameters": …}` with a non-empty
/// name; missing arguments mean `{}`.
pub(super) fn object_call(value: &Value) -> Option<ToolCall> {
    let obj = value.as_object()?;
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = arguments_text(obj.get("arguments").or_else(|| obj.get("parameters")));
    Some(ToolCall::new(name, arguments))
}

/// Calls from a JSON object or an array of them; `None` unless every element is a call.
pub(super) fn value_calls(value: &Value) -> Option<Vec<ToolCall>> {
    match value {
        Value::Array(items) if !items.is_empty() => items.iter().map(object_call).collect(),
        Value::Object(_) => object_call(value).map(|c| vec![c]),
        _ => None,
    }
}

/// The JSON object rendered for a call: `{"name": …, KEY: arguments}`.
pub(super) fn call_object(call: &ToolCall, arguments_key: &str) -> Value {
    let mut obj = Map::new();
    obj.insert("name".into(), Value::String(call.function.name.clone()));
    obj.insert(
        arguments_key.into(),
        arguments_value(&call.function.arguments),
    );
    Value::Object(obj)
}

/// Serialises arguments as the upstream parsers did (`json.dumps`, non-ASCII kept): an object
/// or other JSON value as text, a string verbatim, nothing as `{}`.
pub(super) fn arguments_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(s)) if s.trim().is_empty() => "{}".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => to_python_string(v),
    }
}

/// Raw argument text as found in the output: trimmed, `""` meaning no arguments.
pub(super) fn raw_arguments(text: &str) -> String {
    let t = text.trim();
    if t.is_empty() {
        "{}".to_owned()
    } else {
        t.to_owned()
    }
}

/// A call's arguments as a JSON value for rendering: the parsed object, or the raw text as a
/// string when it is not JSON.
pub(super) fn arguments_value(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(Map::new());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// Compact arguments text for formats that carry JSON verbatim (`{}` for none).
pub(super) fn arguments_json(arguments: &str) -> String {
    match arguments_value(arguments) {
        Value::String(raw) => raw,
        v => to_python_string(&v),
    }
}

/// The object a call's arguments hold, for formats that render one parameter per key.
pub(super) fn arguments_object(arguments: &str) -> Map<String, Value> {
    match arguments_value(arguments) {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("arguments".into(), other);
            m
        }
    }
}

/// The first JSON value at the start of `text` (after whitespace) and the byte offset just
/// past it.
pub(super) fn leading_json(text: &str) -> Option<(Value, usize)> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) => Some((v, stream.byte_offset())),
        _ => None,
    }
}

/// A parameter value of the XML-ish formats: `null`, else JSON, else a Python literal, else
/// the raw string.
pub(super) fn heuristic_value(raw: &str) -> Value {
    let t = raw.trim();
    if t == "null" {
        return Value::Null;
    }
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return v;
    }
    if let Some(v) = python_literal(t) {
        return v;
    }
    Value::String(raw.to_owned())
}

/// Text for one parameter value such that [`heuristic_value`] reads back the same value:
/// strings verbatim unless they would be read as something else, then JSON-quoted.
pub(super) fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) if matches!(heuristic_value(s), Value::String(ref back) if back == s) => {
            s.clone()
        }
        other => to_python_string(other),
    }
}

/// Reads a Python literal (`True`, `None`, `'text'`, `(1, 2)`, `{'a': [1]}`) as JSON.
pub(super) fn python_literal(text: &str) -> Option<Value> {
    let (v, used) = python_literal_prefix(text)?;
    text[used..].trim().is_empty().then_some(v)
}

/// The Python literal at the start of `text` (JSON's `true`/`false`/`null` accepted too) and
/// the byte offset just past it.
pub(super) fn python_literal_prefix(text: &str) -> Option<(Value, usize)> {
    let mut reader = PyReader {
        chars: text.char_indices().peekable(),
        text,
    };
    let v = reader.value(0)?;
    let used = reader.chars.peek().map_or(text.len(), |(i, _)| *i);
    Some((v, used))
}

struct PyReader<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    text: &'a str,
}

impl PyReader<'_> {
    fn skip_ws(&mut self) {
        while self.chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            self.chars.next();
        }
    }

    fn eat(&mut self, want: char) -> bool {
        self.skip_ws();
        if self.chars.peek().is_some_and(|(_, c)| *c == want) {
            self.chars.next();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_LITERAL_DEPTH {
            return None;
        }
        self.skip_ws();
        let (start, c) = *self.chars.peek()?;
        match c {
            '\'' | '"' => self.string(c).map(Value::String),
            '[' | '(' => {
                self.chars.next();
                let close = if c == '[' { ']' } else { ')' };
                let mut items = Vec::new();
                loop {
                    if self.eat(close) {
                        return Some(Value::Array(items));
                    }
                    items.push(self.value(depth + 1)?);
                    if !self.eat(',') {
                        return self.eat(close).then_some(Value::Array(items));
                    }
                }
            }
            '{' => {
                self.chars.next();
                let mut map = Map::new();
                loop {
                    if self.eat('}') {
                        return Some(Value::Object(map));
                    }
                    let key = match self.value(depth + 1)? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    if !self.eat(':') {
                        return None;
                    }
                    map.insert(key, self.value(depth + 1)?);
                    if !self.eat(',') {
                        return self.eat('}').then_some(Value::Object(map));
                    }
                }
            }
            _ => {
                let mut end = start;
                while let Some(&(i, ch)) = self.chars.peek() {
                    if ch.is_alphanumeric() || matches!(ch, '_' | '.' | '-' | '+') {
                        end = i + ch.len_utf8();
                        self.chars.next();
                    } else {
                        break;
                    }
                }
                let word = self.text.get(start..end)?;
                match word {
                    "True" | "true" => Some(Value::Bool(true)),
                    "False" | "false" => Some(Value::Bool(false)),
                    "None" | "null" => Some(Value::Null),
                    w => {
                        if let Ok(i) = w.parse::<i64>() {
                            Some(Value::from(i))
                        } else {
                            w.parse::<f64>()
                                .ok()
                                .filter(|f| f.is_finite())
                                .and_then(Number::from_f64)
                                .map(Value::Number)
                        }
                    }
                }
            }
        }
    }

    fn string(&mut self, quote: char) -> Option<String> {
        self.chars.next();
        let mut out = String::new();
        loop {
            let (_, c) = self.chars.next()?;
            match c {
                c if c == quote => return Some(out),
                '\\' => {
                    let (_, e) = self.chars.next()?;
                    if e == 'u' {
                        let hex: String = (0..4)
                            .filter_map(|_| self.chars.next())
                            .map(|(_, c)| c)
                            .collect();
                        out.push(
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)?,
                        );
                        continue;
                    }
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        '0' => '\0',
                        other => other,
                    });
                }
                c => out.push(c),
            }
        }
    }
}

/// The `"name": "…"` value of a broken JSON body, if one can be read.
pub(super) fn salvage_name(body: &str) -> String {
    let Some(at) = body.find("\"name\"") else {
        return String::new();
    };
    let rest = body[at + 6..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return String::new();
    };
    let rest = rest.trim_start();
    let Some(rest) = rest.strip_prefix('"') else {
        return String::new();
    };
    rest.split('"').next().unwrap_or("").to_owned()
}

/// A random id of `len` characters from `[A-Za-z0-9]`.
pub(super) fn alphanumeric_id(len: usize) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A call with a chosen id.
pub(super) fn call_with_id(id: String, name: &str, arguments: String) -> ToolCall {
    let mut call = ToolCall::new(name.trim(), arguments);
    call.id = id;
    call
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_json_fence_closes_after_its_value_even_with_backticks_in_a_string() {
        let text = ".\n```json\n[{\"name\": \"_\", \"arguments\": {\"a\": \"```\"}}]\n``` after";
        let fence = fences(text)[0];
        assert_eq!(
            fence.inner.trim(),
            r#"[{"name": "_", "arguments": {"a": "```"}}]"#
        );
        assert_eq!(&text[fence.end..], " after");
        // Not JSON inside: the first closing backticks end it, as before.
        let fence = fences("```bash\necho hi\n``` x")[0];
        assert_eq!(fence.inner, "\necho hi\n");
    }

    #[test]
    fn heuristics_read_json_then_python_then_text() {
        assert_eq!(heuristic_value("42"), json!(42));
        assert_eq!(heuristic_value("null"), Value::Null);
        assert_eq!(heuristic_value("{\"a\": [1]}"), json!({"a": [1]}));
        assert_eq!(
            heuristic_value("{'a': (1, True, None)}"),
            json!({"a": [1, true, null]})
        );
        assert_eq!(heuristic_value("ls -la"), json!("ls -la"));
        assert_eq!(heuristic_value("'x"), json!("'x"));
        let deep = "[".repeat(500);
        assert_eq!(heuristic_value(&deep), json!(deep));
    }

    #[test]
    fn rendered_values_read_back() {
        for v in [
            json!("ls"),
            json!("42"),
            json!("true"),
            json!(" spaced "),
            json!(7),
            json!([1, "a"]),
            json!({"k": null}),
            json!("None"),
        ] {
            assert_eq!(heuristic_value(&render_value(&v)), v, "{v}");
        }
    }
}
