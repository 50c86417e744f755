//! The Jinja environment chat templates are rendered in, made to behave like the one
//! Hugging Face `transformers` builds for `apply_chat_template` (which vLLM and SGLang use):
//! `trim_blocks` and `lstrip_blocks`, loop controls, Python string methods, `raise_exception`,
//! `strftime_now` (local time), and `tojson` as plain `json.dumps` — no HTML escaping,
//! `ensure_ascii=False`, Python's `", "`/`": "` separators. Also the template inputs: tool-call
//! arguments decoded to objects, as the inference servers pass them.

use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use minijinja::value::{
    DynObject, Enumerator, Kwargs, Object, ObjectRepr, Serde, Value, ValueKind,
};
use minijinja::{Environment, Error, ErrorKind, State};

/// A template environment with transformers' semantics, holding `template` as `chat`.
pub fn environment(template: String) -> Result<Environment<'static>, Error> {
    environment_with(vec![("chat".to_owned(), template)])
}

/// A template environment with transformers' semantics, holding each `(name, template)`.
pub fn environment_with(templates: Vec<(String, String)>) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()?,
    );
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    for (name, template) in templates {
        env.add_template_owned(name, template)?;
    }
    Ok(env)
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `strftime_now`: `datetime.now().strftime(format)`.
fn strftime_now(format: String) -> Result<String, Error> {
    use std::fmt::Write;
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(out)
}

/// transformers' `tojson` filter: `json.dumps(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)` with those keyword arguments.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    // Most templates call it bare; four `Kwargs::get` lookups cost more than the memoised text.
    let style = if kwargs.args().next().is_none() {
        PyJson::default()
    } else {
        tojson_style(kwargs)?
    };
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(Value::from_safe_string(out))
}

/// The [`PyJson`] style `tojson`'s keyword arguments ask for.
fn tojson_style(kwargs: Kwargs) -> Result<PyJson, Error> {
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let indent = kwargs.get::<Option<Value>>("indent")?;
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_owned(),
            None => " ".repeat(usize::try_from(v).map_err(|_| {
                Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an int")
            })?),
        }),
    };
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair",
            ))
        }
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    Ok(PyJson {
        ensure_ascii,
        sort_keys,
        indent,
        item,
        key,
    })
}

/// `value` as a template value that keeps what `tojson` made of it (per set of options and
/// nesting depth), for values rendered again and again unchanged (a run's tool schemas). It
/// behaves as `value` does in every other respect.
pub(crate) fn json_memo(value: Value) -> Value {
    match value.as_object() {
        Some(inner) => Value::from_object(JsonMemo {
            inner: inner.clone(),
            texts: Mutex::new(Vec::new()),
        }),
        None => value,
    }
}

/// See [`json_memo`].
#[derive(Debug)]
struct JsonMemo {
    inner: DynObject,
    texts: Mutex<Vec<(PyJson, usize, Arc<str>)>>,
}

impl JsonMemo {
    fn write(&self, style: &PyJson, out: &mut String, depth: usize) -> Result<(), Error> {
        let known = self
            .texts
            .lock()
            .expect("tojson memo poisoned")
            .iter()
            .find_map(|(s, d, text)| (s == style && *d == depth).then(|| text.clone()));
        let text = match known {
            Some(text) => text,
            None => {
                let mut fresh = String::new();
                style.write(
                    &mut fresh,
                    &Value::from_dyn_object(self.inner.clone()),
                    depth,
                )?;
                let text: Arc<str> = fresh.into();
                let mut texts = self.texts.lock().expect("tojson memo poisoned");
                texts.push((style.clone(), depth, text.clone()));
                text
            }
        };
        out.push_str(&text);
        Ok(())
    }
}

impl Object for JsonMemo {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        self.inner.repr()
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.inner.get_value(key)
    }
    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        self.inner.get_value_by_str(key)
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.inner.enumerate()
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        self.inner.enumerator_len()
    }
    fn is_true(self: &Arc<Self>) -> bool {
        self.inner.is_true()
    }
    fn call_method(
        self: &Arc<Self>,
        state: &mut State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        self.inner.call_method(state, method, args)
    }
    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.render(f)
    }
}

/// The options of one `json.dumps` call.
#[derive(Debug, Clone, PartialEq)]
struct PyJson {
    ensure_ascii: bool,
    sort_keys: bool,
    indent: Option<String>,
    item: String,
    key: String,
}

impl Default for PyJson {
    /// `json.dumps(x, ensure_ascii=False)`: transformers' `tojson` without arguments.
    fn default() -> Self {
        PyJson {
            ensure_ascii: false,
            sort_keys: false,
            indent: None,
            item: ", ".into(),
            key: ": ".into(),
        }
    }
}

impl PyJson {
    fn write(&self, out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
        if let Some(memo) = v.downcast_object_ref::<JsonMemo>() {
            return memo.write(self, out, depth);
        }
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => write_number(out, v),
            ValueKind::String => self.write_str(out, v.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.write_container(out, '[', ']', depth, &items, |out, item, depth| {
                    self.write(out, item, depth)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort_by_key(|k| k.to_string());
                }
                self.write_container(out, '{', '}', depth, &keys, |out, k, depth| {
                    match k.as_str() {
                        Some(s) => self.write_str(out, s),
                        None => self.write_str(out, &k.to_string()),
                    }
                    out.push_str(&self.key);
                    self.write(out, &v.get_item(k)?, depth)
                })?;
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: cannot serialise a {} value", v.kind()),
                ))
            }
        }
        Ok(())
    }

    fn write_container(
        &self,
        out: &mut String,
        open: char,
        close: char,
        depth: usize,
        items: &[Value],
        mut each: impl FnMut(&mut String, &Value, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return Ok(());
        }
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.item);
            }
            self.newline(out, depth + 1);
            each(out, item, depth + 1)?;
        }
        self.newline(out, depth);
        out.push(close);
        Ok(())
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn write_str(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A number as Python prints it: ints as they are, floats with `repr` (`1.0`, `1e-05`).
fn write_number(out: &mut String, v: &Value) {
    if v.is_integer() {
        out.push_str(&v.to_string());
        return;
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else if f == f.trunc() && f.abs() < 1e16 {
        out.push_str(&format!("{f:.1}"));
    } else if f.abs() >= 1e16 || f.abs() < 1e-4 {
        // Rust prints `1e-5`, Python `1e-05`.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').expect("exponent form");
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |rest| ("-", rest));
        out.push_str(&format!("{mantissa}e{sign}{digits:0>2}"));
    } else {
        out.push_str(&format!("{f}"));
    }
}

/// The names a message's reasoning may come under; transformers fills `thinking` (read by
/// gpt-oss templates) and `reasoning_content` (read by the rest) from the first one set.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Messages as inference servers hand them to the template: a tool call's `arguments` JSON
/// string decoded to an object (kept as the string when it is not valid JSON), as vLLM does;
/// then transformers' own normalisation: keys whose value is null dropped, reasoning aliased.
pub(crate) fn template_messages(messages: &[serde_json::Value]) -> Vec<serde_json::Value> {
    messages.iter().map(template_message).collect()
}

fn template_message(m: &serde_json::Value) -> serde_json::Value {
    let Some(fields) = m.as_object() else {
        return m.clone();
    };
    let mut fields: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(calls) = fields.get_mut("tool_calls").and_then(|c| c.as_array_mut()) {
        for call in calls {
            if let Some(args) = call.pointer_mut("/function/arguments") {
                if let Some(parsed) = args
                    .as_str()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
                {
                    *args = parsed;
                }
            }
        }
    }
    let reasoning = REASONING_FIELDS
        .iter()
        .find_map(|k| fields.get(*k).cloned());
    let Some(reasoning) = reasoning else {
        return serde_json::Value::Object(fields);
    };
    let mut out = serde_json::Map::new();
    out.insert("thinking".into(), reasoning.clone());
    out.extend(fields);
    out.insert("reasoning_content".into(), reasoning);
    serde_json::Value::Object(out)
}

/// A message from [`template_messages`] as a template value. Its tool calls' `arguments` keep
/// the text `tojson` makes of them ([`json_memo`]): a chat is rendered once per trained span
/// boundary (eight times for four assistant turns), and most templates write each call's
/// arguments with `tojson` every time.
pub(crate) fn template_value(message: &serde_json::Value) -> Value {
    match message.as_object() {
        Some(fields) if fields.contains_key("tool_calls") => map_value(fields, |key, calls| {
            (key == "tool_calls").then(|| each_call(calls))
        }),
        _ => Value::from(Serde(message)),
    }
}

/// A list of tool calls, each `function.arguments` memoised.
fn each_call(calls: &serde_json::Value) -> Value {
    let Some(calls) = calls.as_array() else {
        return Value::from(Serde(calls));
    };
    calls
        .iter()
        .map(|call| match call.as_object() {
            Some(call) => map_value(call, |key, function| {
                let function = function.as_object().filter(|_| key == "function")?;
                Some(map_value(function, |key, arguments| {
                    (key == "arguments").then(|| json_memo(Value::from(Serde(arguments))))
                }))
            }),
            None => Value::from(Serde(call)),
        })
        .collect()
}

/// `fields` as a template map in their order (as a converted JSON object is), with the values
/// `special` gives for some keys.
fn map_value(
    fields: &serde_json::Map<String, serde_json::Value>,
    special: impl Fn(&str, &serde_json::Value) -> Option<Value>,
) -> Value {
    let map: IndexMap<Value, Value> = fields
        .iter()
        .map(|(k, v)| {
            let v = special(k, v).unwrap_or_else(|| Value::from(Serde(v)));
            (Value::from(k.as_str()), v)
        })
        .collect();
    Value::from_object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, ctx: serde_json::Value) -> String {
        let env = environment(template.into()).unwrap();
        env.get_template("chat")
            .unwrap()
            .render(Value::from(minijinja::value::Serde(&ctx)))
            .unwrap()
    }

    #[test]
    fn messages_with_memoised_arguments_render_as_the_plain_messages() {
        let messages = template_messages(&[
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "t", "arguments": "{\"a\": [1, 2.5], \"b\": \"é\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "u", "arguments": "not json"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}),
        ]);
        let template = "{% for m in messages %}{% for k, v in m.items() %}{{ k }};{% endfor %}\
            {% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}|\
            {{ c.function.arguments | tojson(indent=2) }}|{{ c | tojson }}|{{ m | tojson }}|\
            {% for k, v in c.function.items() %}{{ k }},{% endfor %}\
            {{ c.function.arguments is mapping }}{{ c.function.arguments.a }}\
            {% endfor %}{% endfor %}";
        let env = environment(template.into()).unwrap();
        let render = |messages: Vec<Value>| {
            env.get_template("chat")
                .unwrap()
                .render(minijinja::context! { messages => messages })
                .unwrap()
        };
        let plain = render(messages.iter().map(|m| Value::from(Serde(m))).collect());
        let memo: Vec<Value> = messages.iter().map(template_value).collect();
        assert_eq!(render(memo.clone()), plain);
        // Again, from the memo.
        assert_eq!(render(memo), plain);
        assert!(plain.contains(r#"{"a": [1, 2.5], "b": "é"}|"#), "{plain}");
    }

    #[test]
    fn a_memoised_value_renders_as_the_plain_value_in_every_use() {
        let tools = json!([
            {"type": "function", "function": {"name": "terminal", "parameters": {"x": [1, 2.5]}}},
            {"type": "function", "function": {"name": "read_file", "description": "é \"q\""}}
        ]);
        let template = "{{ tools | tojson }}|{{ tools | length }}|{% for t in tools %}\
            {{ t.function.name }}={{ t['type'] }}:{{ t | tojson }};{{ t | tojson(indent=2) }};\
            {% for k, v in t.items() %}{{ k }}{% endfor %}{{ t is mapping }}{% endfor %}|\
            {{ tools[1].function }}|{{ tools[0].function.parameters.x | tojson(sort_keys=True) }}";
        let env = environment(template.into()).unwrap();
        let render = |tools: Value| {
            env.get_template("chat")
                .unwrap()
                .render(minijinja::context! { tools => tools })
                .unwrap()
        };
        let plain = render(Value::from(minijinja::value::Serde(&tools)));
        let each: Vec<Value> = tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| json_memo(Value::from(minijinja::value::Serde(t))))
            .collect();
        let memo = json_memo(Value::from(each));
        assert_eq!(render(memo.clone()), plain);
        // Again, from the memo.
        assert_eq!(render(memo), plain);
        assert!(plain.contains(r#"[{"type": "function", "function": {"name": "terminal""#));
    }

    #[test]
    fn tojson_is_python_json_dumps_without_html_escaping() {
        let ctx = json!({"x": {"d": "it's <a> & \"b\" é\n", "n": [1, 2.5, 1.0, true, null]}});
        assert_eq!(
            render("{{ x | tojson }}", ctx.clone()),
            r#"{"d": "it's <a> & \"b\" é\n", "n": [1, 2.5, 1.0, true, null]}"#
        );
        assert_eq!(
            render("{{ x.n | tojson(indent=2) }}", ctx.clone()),
            "[\n  1,\n  2.5,\n  1.0,\n  true,\n  null\n]"
        );
        assert_eq!(
            render(
                "{{ x | tojson(ensure_ascii=True, sort_keys=True, separators=[',', ':']) }}",
                ctx
            ),
            r#"{"d":"it's <a> & \"b\" \u00e9\n","n":[1,2.5,1.0,true,null]}"#
        );
    }

    #[test]
    fn python_methods_loop_controls_namespace_and_raise_exception_work() {
        let t = "{% set ns = namespace(n=0) %}{% for w in s.split(' ') %}{% if w == 'skip' %}{% continue %}{% endif %}\
                 {% set ns.n = ns.n + 1 %}{{ w.upper() }}{% endfor %}{{ ns.n }}{{ s.startswith('a') }}";
        assert_eq!(render(t, json!({"s": "a skip b"})), "AB2True");
        let t = "{% for m in ms %}{% if not loop.last and loop.nextitem.r != 't' %}\
                 [{{ loop.nextitem.r }}]{% endif %}{% endfor %}";
        let ms = json!({"ms": [{"r": "a"}, {"r": "t"}, {"r": "b"}, {"r": "c"}]});
        assert_eq!(render(t, ms), "[b][c]");
        let env = environment("{{ raise_exception('no system role') }}".into()).unwrap();
        let err = env.get_template("chat").unwrap().render(()).unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
    }

    #[test]
    fn tool_call_arguments_become_objects_and_bad_json_stays_a_string() {
        let msgs = [json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{\"k\": 1}"}},
            {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{oops"}}]})];
        let out = template_messages(&msgs);
        assert_eq!(
            out[0]["tool_calls"][0]["function"]["arguments"],
            json!({"k": 1})
        );
        assert_eq!(
            out[0]["tool_calls"][1]["function"]["arguments"],
            json!("{oops")
        );
    }

    #[test]
    fn floats_print_like_python_repr() {
        let cases = [(1e-5, "1e-05"), (0.1, "0.1"), (1e20, "1e+20"), (3.0, "3.0")];
        for (f, want) in cases {
            let mut out = String::new();
            PyJson::default()
                .write(&mut out, &Value::from(f), 0)
                .unwrap();
            assert_eq!(out, want);
        }
    }
}
