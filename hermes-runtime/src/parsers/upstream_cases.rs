//! Per-family test tables built from the upstream parser suites (vLLM `tests/tool_parsers/`,
//! SGLang's function-call parser tests, hermes-agent's parser tests; non-streaming
//! expectations, streaming inputs parsed whole). Every case names the upstream file it comes from and states
//! what upstream expects; where hermes-env deliberately differs, the case also states what we
//! return and why. `cargo test -p hermes-runtime --lib parsers::upstream_cases -- --nocapture`
//! prints the per-family tally.

// Upstream's test data uses 3.14 as a plain float, not as π.
#![allow(clippy::approx_constant)]

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{get, Parsed};

/// Expected arguments of one call.
#[derive(Debug, Clone)]
enum Args {
    /// Equal to this JSON value.
    Eq(Value),
    /// An object holding at least these keys with these values.
    Has(Value),
    /// The "various data types" object of vLLM's common suite (`string_field` … `object_field`
    /// with their JSON types).
    Typed,
    /// The fields are present (types not checked: `supports_typed_arguments=False`).
    Fields(&'static [&'static str]),
    /// Valid JSON, a non-empty object.
    NonEmpty,
    /// Not valid JSON (the loop answers the call with an error).
    Invalid,
    /// Anything.
    Any,
}

/// Expected content.
#[derive(Debug, Clone)]
enum Content {
    /// Equal after trimming (`None` / empty both mean no content).
    Eq(Option<&'static str>),
    /// Not checked.
    Any,
}

/// Expected calls.
#[derive(Debug, Clone)]
enum Calls {
    /// Exactly these (name, arguments).
    Exact(Vec<(&'static str, Args)>),
    /// This many, with these names.
    Names(Vec<&'static str>),
    /// At least one.
    AtLeastOne,
    /// Whatever comes back, as long as nothing panics and no call lacks a name.
    NoPanic,
    /// Upstream raises an error here (we never do).
    Raises,
}

#[derive(Debug, Clone)]
struct Want {
    content: Content,
    calls: Calls,
}

fn want(content: Content, calls: Calls) -> Want {
    Want { content, calls }
}

fn none() -> Calls {
    Calls::Exact(vec![])
}

fn one(name: &'static str, args: Value) -> Calls {
    Calls::Exact(vec![(name, Args::Eq(args))])
}

/// One upstream case.
struct Case {
    family: &'static str,
    source: &'static str,
    label: &'static str,
    text: String,
    upstream: Want,
    /// What we return instead, and why.
    ours: Option<(Want, &'static str)>,
}

fn case(
    family: &'static str,
    source: &'static str,
    label: &'static str,
    text: impl Into<String>,
    upstream: Want,
) -> Case {
    Case {
        family,
        source,
        label,
        text: text.into(),
        upstream,
        ours: None,
    }
}

impl Case {
    fn differs(mut self, ours: Want, reason: &'static str) -> Case {
        self.ours = Some((ours, reason));
        self
    }
}

fn args_match(got: &str, want: &Args) -> bool {
    let parsed = serde_json::from_str::<Value>(got);
    match want {
        Args::Eq(v) => parsed.as_ref().ok() == Some(v),
        Args::Has(v) => match (parsed, v.as_object()) {
            (Ok(Value::Object(got)), Some(keys)) => keys.iter().all(|(k, v)| got.get(k) == Some(v)),
            _ => false,
        },
        Args::Typed => match parsed {
            Ok(Value::Object(o)) => {
                o.get("string_field").is_some_and(Value::is_string)
                    && o.get("int_field").is_some_and(Value::is_i64)
                    && o.get("float_field").is_some_and(Value::is_f64)
                    && o.get("bool_field").is_some_and(Value::is_boolean)
                    && o.get("null_field").is_some_and(Value::is_null)
                    && o.get("array_field").is_some_and(Value::is_array)
                    && o.get("object_field").is_some_and(Value::is_object)
            }
            _ => false,
        },
        Args::Fields(keys) => {
            matches!(parsed, Ok(Value::Object(o)) if keys.iter().all(|k| o.contains_key(*k)))
        }
        Args::NonEmpty => matches!(parsed, Ok(Value::Object(o)) if !o.is_empty()),
        Args::Invalid => parsed.is_err(),
        Args::Any => true,
    }
}

fn matches(parsed: &Parsed, want: &Want) -> bool {
    let content_ok = match want.content {
        Content::Any => true,
        Content::Eq(c) => parsed.content.as_deref() == c.map(str::trim).filter(|c| !c.is_empty()),
    };
    let named = parsed
        .calls
        .iter()
        .all(|c| !c.function.name.trim().is_empty() && !c.id.is_empty());
    let calls_ok = match &want.calls {
        Calls::Exact(calls) => {
            parsed.calls.len() == calls.len()
                && parsed.calls.iter().zip(calls).all(|(got, (name, args))| {
                    got.function.name == *name && args_match(&got.function.arguments, args)
                })
        }
        Calls::Names(names) => {
            parsed.calls.len() == names.len()
                && parsed
                    .calls
                    .iter()
                    .zip(names)
                    .all(|(got, n)| got.function.name == *n)
        }
        Calls::AtLeastOne => !parsed.calls.is_empty(),
        Calls::NoPanic => true,
        Calls::Raises => false,
    };
    content_ok && calls_ok && named
}

/// vLLM's common suite (`tests/tool_parsers/common_tests.py`) for one family's config.
struct Common {
    family: &'static str,
    source: &'static str,
    no_tool_calls: &'static str,
    single: &'static str,
    single_name: &'static str,
    single_args: Value,
    single_content: Option<Option<&'static str>>,
    parallel: &'static str,
    parallel_names: Vec<&'static str>,
    various: &'static str,
    typed: bool,
    empty: &'static str,
    surrounding: &'static str,
    escaped: &'static str,
    malformed: Vec<&'static str>,
}

fn common(c: Common) -> Vec<Case> {
    let (f, s) = (c.family, c.source);
    let single_content = c.single_content.map_or(Content::Any, Content::Eq);
    let various = if c.typed {
        Args::Typed
    } else {
        Args::Fields(&[
            "string_field",
            "int_field",
            "float_field",
            "bool_field",
            "null_field",
            "array_field",
            "object_field",
        ])
    };
    let mut cases = vec![
        case(
            f,
            s,
            "no_tool_calls",
            c.no_tool_calls,
            want(Content::Eq(Some(c.no_tool_calls)), none()),
        ),
        case(
            f,
            s,
            "single_tool_call_simple_args",
            c.single,
            want(
                single_content,
                Calls::Exact(vec![(c.single_name, Args::Has(c.single_args))]),
            ),
        ),
        case(
            f,
            s,
            "parallel_tool_calls",
            c.parallel,
            want(Content::Any, Calls::Names(c.parallel_names)),
        ),
        case(
            f,
            s,
            "various_data_types",
            c.various,
            want(Content::Any, Calls::Exact(vec![("test_function", various)])),
        ),
        case(
            f,
            s,
            "empty_arguments",
            c.empty,
            want(
                Content::Any,
                Calls::Exact(vec![("refresh", Args::Eq(json!({})))]),
            ),
        ),
        case(
            f,
            s,
            "surrounding_text",
            c.surrounding,
            want(Content::Any, Calls::AtLeastOne),
        ),
        case(
            f,
            s,
            "escaped_strings",
            c.escaped,
            want(
                Content::Any,
                Calls::Exact(vec![("test_function", Args::NonEmpty)]),
            ),
        ),
    ];
    for m in c.malformed {
        cases.push(case(
            f,
            s,
            "malformed_input",
            m,
            want(Content::Any, Calls::NoPanic),
        ));
    }
    cases
}

const VARIOUS_JSON: &str = r#"{
  "name": "test_function",
  "arguments": {
    "string_field": "hello",
    "int_field": 42,
    "float_field": 3.14,
    "bool_field": true,
    "null_field": null,
    "array_field": ["a", "b", "c"],
    "object_field": {"nested": "value"},
    "empty_array": [],
    "empty_object": {}
  }
}"#;

const ESCAPED_JSON: &str = r#"{
  "name": "test_function",
  "arguments": {
    "quoted": "He said \"hello\"",
    "path": "C:\\Users\\file.txt",
    "newline": "line1\nline2",
    "unicode": "emoji: 🎉"
  }
}"#;

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

const CONTENT_DIFF: &str = "content keeps all text outside the markup (upstream keeps only the text before the first call)";
const KEEP_BROKEN: &str = "a malformed call with a readable name is kept with its raw text as arguments, so the loop answers it with an Invalid JSON error (upstream drops it or the whole message)";
const TRUNCATED: &str = "output cut off before the closing tag is read up to the end (upstream requires the closing tag)";
const SCHEMA: &str = "schema-driven coercion is done once, by the tool dispatcher, against the tool's schema; the parser itself returns the model's string";
const HEURISTIC: &str = "untyped values go through the JSON / Python-literal heuristics (\"5\" → 5); the dispatcher turns them back into strings where the tool's schema declares one";

fn hermes_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_hermes_tool_parser.py";
    let f = "hermes";
    vec![
        case(f, s, "non_streaming_no_tool_call", "This is not a tool call.", want(Content::Eq(Some("This is not a tool call.")), none())),
        case(f, s, "tool_call_between_tags", "<tool_call>\n{\"name\": \"final_answer\", \"arguments\": {\"trigger\": true}}\n</tool_call>", want(Content::Any, one("final_answer", json!({"trigger": true})))),
        case(f, s, "tool_call_until_eos", "<tool_call>\n{\"name\": \"final_answer\", \"arguments\": {\"trigger\": true}}", want(Content::Any, one("final_answer", json!({"trigger": true})))),
        case(f, s, "tool_call_invalid_json", "<tool_call>\n{\"name\": \"final_answer\", \"arguments\": {\"trigger\": true}", want(Content::Any, none()))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("final_answer", Args::Invalid)])), KEEP_BROKEN),
        case(f, s, "serialized_arguments", "<tool_call>\n{\"name\": \"get_db_config\", \"arguments\": \"{\\\"param\\\": \\\"max_connections\\\"}\"}\n</tool_call>", want(Content::Any, one("get_db_config", json!({"param": "max_connections"})))),
        case(f, s, "bare_string_arguments", "<tool_call>\n{\"name\": \"do_thing\", \"arguments\": \"hello\"}\n</tool_call>", want(Content::Any, one("do_thing", json!("hello"))))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("do_thing", Args::Invalid)])), "a string that is not JSON stays as written, so the loop answers with an Invalid JSON error instead of 'expected an object'"),
        case(f, s, "multiple_tool_calls (streaming text, non-streaming parse)", "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cats\"}}</tool_call><tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"dogs\"}}</tool_call>", want(Content::Any, Calls::Exact(vec![("search", Args::Eq(json!({"q": "cats"}))), ("search", Args::Eq(json!({"q": "dogs"})))]))),
        case(f, s, "content_then_tool_call (streaming text, non-streaming parse)", "Sure, let me check the weather.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"NYC\"}}</tool_call>", want(Content::Eq(Some("Sure, let me check the weather.")), one("get_weather", json!({"city": "NYC"})))),
    ]
}

fn mistral_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_mistral_tool_parser.py";
    let f = "mistral";
    let weather = json!({"city": "San Francisco", "state": "CA", "unit": "celsius"});
    let bash = json!({"command": "print(\"hello world!\")\nre.compile(r'{}')"});
    vec![
        case(f, s, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case(f, s, "pre_v11 single_tool_add", r#"[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}]"#, want(Content::Eq(None), one("add", json!({"a": 3.5, "b": 4})))),
        case(f, s, "pre_v11 single_tool_weather", r#"[TOOL_CALLS] [{"name": "get_current_weather", "arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}}]"#, want(Content::Eq(None), one("get_current_weather", weather.clone()))),
        case(f, s, "pre_v11 argument_before_name", r#"[TOOL_CALLS] [{"arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}, "name": "get_current_weather"}]"#, want(Content::Eq(None), one("get_current_weather", weather.clone()))),
        case(f, s, "pre_v11 name_in_argument", r#"[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "get_age"}]"#, want(Content::Eq(None), one("get_age", json!({"name": "John Doe"})))),
        case(f, s, "pre_v11 multiple_tools", r#"[TOOL_CALLS] [{"name": "add", "arguments": {"a": 3.5, "b": 4}}, {"name": "get_current_weather", "arguments":{"city": "San Francisco", "state": "CA", "unit": "celsius"}}]"#, want(Content::Eq(None), Calls::Exact(vec![("add", Args::Eq(json!({"a": 3.5, "b": 4}))), ("get_current_weather", Args::Eq(weather.clone()))]))),
        case(f, s, "pre_v11 content_before_tool", r#"Hello[TOOL_CALLS] [{"name": "add", "arguments":{"a": 1, "b": 2}}]"#, want(Content::Eq(Some("Hello")), one("add", json!({"a": 1, "b": 2})))),
        case(f, s, "pre_v11 trailing_data_after_json", "[TOOL_CALLS] [{\"name\": \"get_current_weather\", \"arguments\":{\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}}]\nextra trailing data", want(Content::Eq(None), one("get_current_weather", json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"}))))
            .differs(want(Content::Eq(Some("extra trailing data")), one("get_current_weather", json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"}))), CONTENT_DIFF),
        case(f, s, "pre_v11 multiple_bot_tokens_raises", r#"[TOOL_CALLS] [{"name": "add", "arguments":{"a": 1}}][TOOL_CALLS] [{"name": "sub", "arguments":{"b": 2}}]"#, want(Content::Any, Calls::Raises))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("add", Args::Eq(json!({"a": 1}))), ("sub", Args::Eq(json!({"b": 2})))])), "a parser never raises; every [TOOL_CALLS] chunk is read"),
        case(f, s, "pre_v11 regex_fallback", r#"[TOOL_CALLS]  junk [{"name": "add", "arguments":{"a": 1, "b": 2}}] trail"#, want(Content::Any, one("add", json!({"a": 1, "b": 2})))),
        case(f, s, "pre_v11 regex_fallback_fails", "[TOOL_CALLS] not json at all", want(Content::Eq(Some("not json at all")), none())),
        case(f, s, "v11 single_tool_add", r#"[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}"#, want(Content::Eq(None), one("add_this_and_that", json!({"a": 3.5, "b": 4})))),
        case(f, s, "v11 single_tool_weather", r#"[TOOL_CALLS]get_current_weather{"city": "San Francisco", "state": "CA", "unit": "celsius"}"#, want(Content::Eq(None), one("get_current_weather", weather))),
        case(f, s, "v11 multiple_tool_calls", r#"[TOOL_CALLS]add{"a": 3.5, "b": 4}[TOOL_CALLS]multiply{"a": 3, "b": 6}"#, want(Content::Eq(None), Calls::Exact(vec![("add", Args::Eq(json!({"a": 3.5, "b": 4}))), ("multiply", Args::Eq(json!({"a": 3, "b": 6})))]))),
        case(f, s, "v11 complex (arguments cut short, kept raw)", "hi{hi[TOOL_CALLS]bash{\"command\": \"print(\\\"hello world!\\\")\\nre.compile(r'{}')", want(Content::Eq(Some("hi{hi")), Calls::Exact(vec![("bash", Args::Invalid)]))),
        case(f, s, "v11 wrong_json", "hi{hi[TOOL_CALLS]bash{\"command\": \"print(\\\"hello world!\\\")\\nre.compile(r'{}')\"}", want(Content::Eq(Some("hi{hi")), one("bash", bash))),
        case(f, s, "v11 without_args_skipped", "[TOOL_CALLS]toolname_no_args", want(Content::Eq(None), none()))
            .differs(want(Content::Eq(Some("toolname_no_args")), none()), "text that is not a call stays content rather than disappearing"),
        case(f, s, "v11 content_before_tool", r#"bla[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}"#, want(Content::Eq(Some("bla")), one("add_this_and_that", json!({"a": 3.5, "b": 4})))),
    ]
}

fn llama_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_llama3_json_tool_parser.py";
    let f = "llama3_json";
    let three = Calls::Names(vec!["searchTool", "getOpenIncidentsTool", "searchTool"]);
    vec![
        case(f, s, "simple", r#"Here is the result: {"name": "getOpenIncidentsTool", "parameters": {}} Would you like to know more?"#, want(Content::Eq(None), one("getOpenIncidentsTool", json!({}))))
            .differs(want(Content::Eq(Some("Here is the result:  Would you like to know more?")), one("getOpenIncidentsTool", json!({}))), CONTENT_DIFF),
        case(f, s, "with_arguments", r#"{"name": "searchTool", "parameters": {"query": "test query", "limit": 10}}"#, want(Content::Any, one("searchTool", json!({"query": "test query", "limit": 10})))),
        case(f, s, "no_json", "This is just some text without any tool calls", want(Content::Eq(Some("This is just some text without any tool calls")), none())),
        case(f, s, "invalid_json", r#"{"name": "invalidTool", "parameters": {invalid json}"#, want(Content::Eq(Some(r#"{"name": "invalidTool", "parameters": {invalid json}"#)), none()))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("invalidTool", Args::Invalid)])), KEEP_BROKEN),
        case(f, s, "arguments_key", r#"{"name": "searchTool", "arguments": {"query": "test"}}"#, want(Content::Any, one("searchTool", json!({"query": "test"})))),
        case(f, s, "multiple_json", r#"{"name": "searchTool", "parameters": {"query": "test1"}}; {"name": "getOpenIncidentsTool", "parameters": {}}; {"name": "searchTool", "parameters": {"query": "test2"}}"#, want(Content::Any, three.clone())),
        case(f, s, "multiple_json_with_whitespace", r#"{"name": "searchTool", "parameters": {"query": "test1"}} ; {"name": "getOpenIncidentsTool", "parameters": {}} ; {"name": "searchTool", "parameters": {"query": "test2"}}"#, want(Content::Any, three.clone())),
        case(f, s, "multiple_json_with_surrounding_text", r#"Here are the results: {"name": "searchTool", "parameters": {"query": "test1"}}; {"name": "getOpenIncidentsTool", "parameters": {}}; {"name": "searchTool", "parameters": {"query": "test2"}} Would you like to know more?"#, want(Content::Any, three)),
        case(f, s, "deeply_nested_json", r#"{"name": "complexTool", "parameters": {"level1": {"level2": {"level3": {"level4": {"value": "deep"}}}}}}"#, want(Content::Any, one("complexTool", json!({"level1": {"level2": {"level3": {"level4": {"value": "deep"}}}}})))),
        case(f, s, "multiple_with_deep_nesting", r#"{"name": "simpleTool", "parameters": {"value": "test"}}; {"name": "complexTool", "parameters": {"config": {"database": {"connection": {"pool": {"size": 10}}}}}}"#, want(Content::Any, Calls::Exact(vec![("simpleTool", Args::Eq(json!({"value": "test"}))), ("complexTool", Args::Eq(json!({"config": {"database": {"connection": {"pool": {"size": 10}}}}})))]))),
        case(f, s, "quotes_and_brackets_in_string", r#"{"name": "searchTool", "parameters": {"query": "test {value} [complex]","nested": {"inner": "more {brackets}"}}}"#, want(Content::Any, one("searchTool", json!({"query": "test {value} [complex]", "nested": {"inner": "more {brackets}"}})))),
        case(f, s, "escaped_quotes_in_nested_json", r#"{"name": "parserTool", "parameters": {"text": "He said \"Hello {world}\""}}"#, want(Content::Any, one("parserTool", json!({"text": "He said \"Hello {world}\""})))),
        case(f, s, "missing_name_key", r#"{"parameters": {}}"#, want(Content::Eq(Some(r#"{"parameters": {}}"#)), none())),
        case(f, s, "missing_parameters_and_arguments_key", r#"{"name": "toolWithoutParams"}"#, want(Content::Eq(Some(r#"{"name": "toolWithoutParams"}"#)), none())),
        case(f, s, "brace_in_trailing_text", r#"{"name": "searchTool", "parameters": {"query": "test"}} I used {searchTool} for this."#, want(Content::Any, Calls::Names(vec!["searchTool"]))),
        case(f, s, "json_fragment_in_trailing_text", r#"{"name": "searchTool", "parameters": {"query": "test"}} The arguments I passed were {"query": "test"}"#, want(Content::Any, Calls::Names(vec!["searchTool"]))),
    ]
}

const PY_SIMPLE: &str = "get_weather(city='San Francisco', metric='celsius')";
const PY_MORE: &str = "register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny'])";
const PY_MORE_JSON: &str = "register_user(name='John Doe', age=37, address={'city': 'San Francisco', 'state': 'CA'}, role=null, passed_test=true, aliases=['John', 'Johnny'])";
const PY_ESCAPED: &str = r#"get_weather(city='Martha\'s Vineyard', metric='\"cool units\"')"#;

fn py_simple() -> Value {
    json!({"city": "San Francisco", "metric": "celsius"})
}

fn py_more() -> Value {
    json!({"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]})
}

/// The call list cases shared by the pythonic and olmo3 suites; `wrap` builds the model
/// output from calls and a separator.
fn python_call_cases(f: &'static str, s: &'static str, wrap: fn(&[&str]) -> String) -> Vec<Case> {
    let ok = |calls: Calls| want(Content::Eq(None), calls);
    vec![
        case(
            f,
            s,
            "no_tool_call",
            "How can I help you today?",
            want(Content::Eq(Some("How can I help you today?")), none()),
        ),
        case(
            f,
            s,
            "simple",
            wrap(&[PY_SIMPLE]),
            ok(one("get_weather", py_simple())),
        ),
        case(
            f,
            s,
            "more_types",
            wrap(&[PY_MORE]),
            ok(one("register_user", py_more())),
        ),
        case(
            f,
            s,
            "parameterless",
            wrap(&["get_weather()"]),
            ok(one("get_weather", json!({}))),
        ),
        case(
            f,
            s,
            "empty_dict",
            wrap(&["do_something_cool(additional_data={})"]),
            ok(one("do_something_cool", json!({"additional_data": {}}))),
        ),
        case(
            f,
            s,
            "empty_list",
            wrap(&["do_something_cool(steps=[])"]),
            ok(one("do_something_cool", json!({"steps": []}))),
        ),
        case(
            f,
            s,
            "escaped_string",
            wrap(&[PY_ESCAPED]),
            ok(one(
                "get_weather",
                json!({"city": "Martha's Vineyard", "metric": "\"cool units\""}),
            )),
        ),
        case(
            f,
            s,
            "parallel_calls",
            wrap(&[PY_SIMPLE, PY_MORE]),
            ok(Calls::Exact(vec![
                ("get_weather", Args::Eq(py_simple())),
                ("register_user", Args::Eq(py_more())),
            ])),
        ),
        case(
            f,
            s,
            "bad_sibling_call_does_not_drop_good_calls",
            wrap(&["bad(x=b'z')", PY_SIMPLE]),
            want(Content::Any, one("get_weather", py_simple())),
        )
        .differs(
            ok(Calls::Exact(vec![
                ("bad", Args::Invalid),
                ("get_weather", Args::Eq(py_simple())),
            ])),
            KEEP_BROKEN,
        ),
        case(
            f,
            s,
            "non_finite_argument_rejected",
            wrap(&["calc(x=1e999)", PY_SIMPLE]),
            want(Content::Any, one("get_weather", py_simple())),
        )
        .differs(
            ok(Calls::Exact(vec![
                ("calc", Args::Invalid),
                ("get_weather", Args::Eq(py_simple())),
            ])),
            KEEP_BROKEN,
        ),
    ]
}

fn pythonic_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_pythonic_tool_parser.py";
    let f = "pythonic";
    let mut cases = python_call_cases(f, s, |calls| format!("[{}]", calls.join(", ")));
    cases.push(
        case(
            f,
            s,
            "good_call_survives_unparsable_sibling",
            format!("[{PY_SIMPLE}, f(a='x 'y', b='z')]"),
            want(Content::Any, one("get_weather", py_simple())),
        )
        .differs(
            want(
                Content::Eq(None),
                Calls::Exact(vec![
                    ("get_weather", Args::Eq(py_simple())),
                    ("f", Args::Invalid),
                ]),
            ),
            KEEP_BROKEN,
        ),
    );
    cases.push(
        case(
            f,
            s,
            "unrecoverable_block_still_reports_no_tool_call",
            "[f(a='x 'y' 'z), g(b='p 'q' 'r)]",
            want(
                Content::Eq(Some("[f(a='x 'y' 'z), g(b='p 'q' 'r)]")),
                none(),
            ),
        )
        .differs(
            want(
                Content::Eq(None),
                Calls::Exact(vec![("f", Args::Invalid), ("g", Args::Invalid)]),
            ),
            KEEP_BROKEN,
        ),
    );
    cases
}

fn olmo3_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_olmo3_tool_parser.py";
    let mut cases = python_call_cases("olmo3", s, |calls| {
        format!("<function_calls>{}</function_calls>", calls.join("\n"))
    });
    cases.push(case(
        "olmo3",
        s,
        "more_types_json_literals",
        format!("<function_calls>{PY_MORE_JSON}</function_calls>"),
        want(Content::Eq(None), one("register_user", py_more())),
    ));
    cases
}

fn json_block_common_cases() -> Vec<Case> {
    let mut cases = common(Common {
        family: "granite",
        source: "vllm tests/tool_parsers/test_granite_tool_parser.py",
        no_tool_calls: "This is a regular response without any tool calls.",
        single: r#"<|tool_call|> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]"#,
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo"}),
        single_content: Some(None),
        parallel: "<|tool_call|> [\n  {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}},\n  {\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Asia/Tokyo\"}}\n]",
        parallel_names: vec!["get_weather", "get_time"],
        various: leak(format!("<tool_call> [{VARIOUS_JSON}]")),
        typed: true,
        empty: r#"<|tool_call|> [{"name": "refresh", "arguments": {}}]"#,
        surrounding: "Let me check the weather for you.\n<|tool_call|> [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}]\nI'll get that information.",
        escaped: leak(format!("<tool_call> [{ESCAPED_JSON}]")),
        malformed: vec![
            r#"<|tool_call|> [{"name": "func", "arguments": {"#,
            r#"<|tool_call|> {"name": "func", "arguments": {}}"#,
            r#"[{"name": "func", "arguments": "not a dict"}]"#,
            r#"Some text [{"name": "func"}]"#,
        ],
    });
    cases.push(case(
        "granite",
        "vllm tests/tool_parsers/test_granite_tool_parser.py",
        "granite_string_prefix_format",
        r#"<tool_call> [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]"#,
        want(Content::Any, Calls::Names(vec!["get_weather"])),
    ));
    cases.extend(common(Common {
        family: "granite_20b_fc",
        source: "vllm tests/tool_parsers/test_granite_20b_fc_tool_parser.py",
        no_tool_calls: "This is a regular response without any tool calls.",
        single: r#"<function_call> {"name": "get_weather", "arguments": {"city": "Tokyo"}}"#,
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo"}),
        single_content: Some(None),
        parallel: "<function_call> {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n<function_call> {\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Asia/Tokyo\"}}",
        parallel_names: vec!["get_weather", "get_time"],
        various: leak(format!("<function_call> {VARIOUS_JSON}")),
        typed: true,
        empty: r#"<function_call> {"name": "refresh", "arguments": {}}"#,
        surrounding: "Let me check the weather for you.\n<function_call> {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}",
        escaped: leak(format!("<function_call> {ESCAPED_JSON}")),
        malformed: vec![
            r#"<function_call> {"name": "func", "arguments": {"#,
            r#"<function_call> [{"name": "func", "arguments": {}}]"#,
            r#"{"name": "func", "arguments": {}}"#,
            r#"<function_call> {"name": 123}"#,
        ],
    }));
    cases.extend(common(Common {
        family: "internlm2",
        source: "vllm tests/tool_parsers/test_internlm2_tool_parser.py",
        no_tool_calls: "This is a regular response without any tool calls.",
        single: r#"<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|action_end|>"#,
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo"}),
        single_content: Some(None),
        parallel: r#"<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|action_end|>"#,
        parallel_names: vec!["get_weather"],
        various: leak(format!("<|action_start|><|plugin|>{}<|action_end|>", VARIOUS_JSON.replace("\"arguments\"", "\"parameters\""))),
        typed: true,
        empty: r#"<|action_start|><|plugin|>{"name": "refresh", "parameters": {}}<|action_end|>"#,
        surrounding: r#"Let me check the weather for you. <|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|action_end|>"#,
        escaped: leak(format!("<|action_start|><|plugin|>{}<|action_end|>", ESCAPED_JSON.replace("\"arguments\"", "\"parameters\""))),
        malformed: vec![
            r#"<|action_start|><|plugin|>{"name": "func", "parameters": {"#,
            r#"<|action_start|><|plugin|>{"name": "func", "parameters": "not a dict"}<|action_end|>"#,
            "<|action_start|><|plugin|>not json<|action_end|>",
            "<|action_start|><|plugin|>",
            r#"<|action_start|>{"name": "func"}"#,
        ],
    }));
    cases.extend(common(Common {
        family: "phi4_mini_json",
        source: "vllm tests/tool_parsers/test_phi4mini_tool_parser.py",
        no_tool_calls: "This is a regular response without any tool calls.",
        single: r#"functools[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]"#,
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo"}),
        single_content: Some(None),
        parallel: "functools[\n  {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}},\n  {\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Asia/Tokyo\"}}\n]",
        parallel_names: vec!["get_weather", "get_time"],
        various: leak(format!("functools[{VARIOUS_JSON}]")),
        typed: true,
        empty: r#"functools[{"name": "refresh", "arguments": {}}]"#,
        surrounding: "Let me check the weather for you.\nfunctools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}]\nWould you like to know more?",
        escaped: leak(format!("functools[{ESCAPED_JSON}]")),
        malformed: vec![
            r#"functools[{"name": "func", "arguments": {"#,
            r#"functools[{"name": "func", "arguments": "not a dict"}]"#,
            r#"functools{"name": "func"}"#,
            r#"functools[{"name": "func"}]"#,
            "functools[] This is just text",
            "functools[ This is just text ]",
        ],
    }));
    cases
}

fn tagged_json_cases() -> Vec<Case> {
    let js = "vllm tests/tool_parsers/test_jamba_tool_parser.py";
    let dallas = json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"});
    let orlando = json!({"city": "Orlando", "state": "FL", "unit": "fahrenheit"});
    let hy = "vllm tests/tool_parsers/test_hunyuan_a13b_tool_parser.py";
    let sf = json!({"city": "San Francisco", "metric": "celsius"});
    let er = "vllm tests/tool_parsers/test_ernie45_moe_tool_parser.py";
    let beijing = json!({"location": "Beijing"});
    let guangzhou = json!({"location": "Guangzhou", "unit": "c"});
    let q = "vllm tests/tool_parsers/test_qwen25_coder_tool_parser.py";
    vec![
        case("jamba", js, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case("jamba", js, "single_tool", " <tool_calls>[\n    {\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}}\n]</tool_calls>", want(Content::Eq(None), one("get_current_weather", dallas.clone()))),
        case("jamba", js, "single_tool_with_content", " Sure! let me call the tool for you.<tool_calls>[\n    {\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}}\n]</tool_calls>", want(Content::Eq(Some(" Sure! let me call the tool for you.")), one("get_current_weather", dallas.clone()))),
        case("jamba", js, "parallel_tools", " <tool_calls>[\n    {\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}},\n    {\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Orlando\", \"state\": \"FL\", \"unit\": \"fahrenheit\"}}\n]</tool_calls>", want(Content::Eq(None), Calls::Exact(vec![("get_current_weather", Args::Eq(dallas)), ("get_current_weather", Args::Eq(orlando))]))),
        case("hunyuan_a13b", hy, "no_tool_call", "How can I help you today?", want(Content::Eq(Some("How can I help you today?")), none())),
        case("hunyuan_a13b", hy, "single_tool_call", r#"<tool_calls>[{"name": "get_weather", "arguments": {"city": "San Francisco", "metric": "celsius"}}]</tool_calls>"#, want(Content::Eq(None), one("get_weather", sf.clone()))),
        case("hunyuan_a13b", hy, "multiple_tool_calls", r#"<tool_calls>[{"name": "get_weather", "arguments": {"city": "San Francisco", "metric": "celsius"}}, {"name": "register_user", "arguments": {"name": "John Doe", "age": 37, "address": {"city": "San Francisco", "state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]}}]</tool_calls>"#, want(Content::Eq(None), Calls::Exact(vec![("get_weather", Args::Eq(sf)), ("register_user", Args::Eq(py_more()))]))),
        case("hunyuan_a13b", hy, "content_before_tool_call", r#"I will call the tool now. <tool_calls>[{"name": "get_weather", "arguments": {"city": "Boston"}}]</tool_calls>"#, want(Content::Eq(Some("I will call the tool now. ")), one("get_weather", json!({"city": "Boston"})))),
        case("hunyuan_a13b", hy, "content_after_tool_call_stripped", "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Seattle\"}}]</tool_calls>\nThank you!", want(Content::Eq(None), one("get_weather", json!({"city": "Seattle"}))))
            .differs(want(Content::Eq(Some("Thank you!")), one("get_weather", json!({"city": "Seattle"}))), CONTENT_DIFF),
        case("hunyuan_a13b", hy, "nested", r#"<tool_calls>[{"name": "complex_tool", "arguments": {"level1": {"level2": {"level3": {"value": 123}}}}}]</tool_calls>"#, want(Content::Eq(None), one("complex_tool", json!({"level1": {"level2": {"level3": {"value": 123}}}})))),
        case("hunyuan_a13b", hy, "non_ascii", r#"<tool_calls>[{"name": "get_weather", "arguments": {"city": "北京"}}]</tool_calls>"#, want(Content::Any, one("get_weather", json!({"city": "北京"})))),
        case("hunyuan_a13b", hy, "empty_args_first", r#"<tool_calls>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 42}}]</tool_calls>"#, want(Content::Any, Calls::Exact(vec![("a", Args::Eq(json!({}))), ("b", Args::Eq(json!({"x": 42})))]))),
        case("hunyuan_a13b", hy, "empty_args_last", r#"<tool_calls>[{"name": "a", "arguments": {"x": 42}}, {"name": "b", "arguments": {}}]</tool_calls>"#, want(Content::Any, Calls::Exact(vec![("a", Args::Eq(json!({"x": 42}))), ("b", Args::Eq(json!({})))]))),
        case("ernie45", er, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case("ernie45", er, "single_tool_call", "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"Beijing\"}}\n</tool_call>\n", want(Content::Eq(None), one("get_current_temperature", beijing.clone()))),
        case("ernie45", er, "multiple_tool_calls", "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"Beijing\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_unit\", \"arguments\": {\"location\": \"Guangzhou\", \"unit\": \"c\"}}\n</tool_call>\n", want(Content::Eq(None), Calls::Exact(vec![("get_current_temperature", Args::Eq(beijing.clone())), ("get_temperature_unit", Args::Eq(guangzhou.clone()))]))),
        case("ernie45", er, "tool_call_with_content_before", "I need to call two tools to handle these two issues separately.\n</think>\n\n<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"Beijing\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_unit\", \"arguments\": {\"location\": \"Guangzhou\", \"unit\": \"c\"}}\n</tool_call>\n", want(Content::Eq(Some("I need to call two tools to handle these two issues separately.\n</think>")), Calls::Exact(vec![("get_current_temperature", Args::Eq(beijing)), ("get_temperature_unit", Args::Eq(guangzhou))]))),
        case("qwen25", q, "no_tool_calls", "This is a regular response without tool calls.", want(Content::Eq(Some("This is a regular response without tool calls.")), none())),
        case("qwen25", q, "single_tool_call", "<tools>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"San Francisco, CA\", \"unit\": \"celsius\"}}\n</tools>", want(Content::Any, one("get_current_weather", json!({"location": "San Francisco, CA", "unit": "celsius"})))),
        case("qwen25", q, "single_tool_call_with_content", "Let me check the weather for you.\n<tools>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Tokyo, Japan\"}}\n</tools>", want(Content::Eq(Some("Let me check the weather for you.")), one("get_current_weather", json!({"location": "Tokyo, Japan"})))),
        case("qwen25", q, "parallel_tool_calls_array", "<tools>\n[\n    {\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\"}},\n    {\"name\": \"search_web\", \"arguments\": {\"query\": \"Paris attractions\", \"num_results\": 5}}\n]\n</tools>", want(Content::Any, Calls::Exact(vec![("get_current_weather", Args::Eq(json!({"location": "Paris, France"}))), ("search_web", Args::Eq(json!({"query": "Paris attractions", "num_results": 5})))]))),
        case("qwen25", q, "multiple_tools_blocks", "<tools>\n{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"London, UK\"}}\n</tools>\n<tools>\n{\"name\": \"search_web\", \"arguments\": {\"query\": \"London events\"}}\n</tools>", want(Content::Any, Calls::Names(vec!["get_current_weather", "search_web"]))),
        case("qwen25", q, "parameters_key_support", "<tools>\n{\"name\": \"get_current_weather\", \"parameters\": {\"location\": \"Berlin, Germany\"}}\n</tools>", want(Content::Any, one("get_current_weather", json!({"location": "Berlin, Germany"})))),
        case("qwen25", q, "nested_json_arguments", "<tools>\n{\"name\": \"complex_function\", \"arguments\": {\"config\": {\"nested\": {\"deep\": true}}, \"items\": [1, 2, {\"key\": \"value\"}]}}\n</tools>", want(Content::Any, one("complex_function", json!({"config": {"nested": {"deep": true}}, "items": [1, 2, {"key": "value"}]})))),
        case("qwen25", q, "empty_arguments", "<tools>\n{\"name\": \"no_args_function\", \"arguments\": {}}\n</tools>", want(Content::Any, one("no_args_function", json!({})))),
        case("qwen25", q, "malformed_json_returns_content", "<tools>\n{\"name\": \"broken\", \"arguments\": {invalid json\n</tools>", want(Content::Any, none()))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("broken", Args::Invalid)])), KEEP_BROKEN),
    ]
}

fn gigachat_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_gigachat3_tool_parser.py";
    let f = "gigachat3";
    let simple =
        r#"{"name": "manage_user_memory", "arguments": {"action": "create", "id": "preferences"}}"#;
    let empty = r#"{"name": "manage_user_memory", "arguments": {}}"#;
    let complex = r#"{"name": "manage_user_memory", "arguments": {"action": "create", "id": "preferences", "content": {"short_answers": true, "hate_emojis": true, "english_ui": false, "russian_math_explanations": true}}}"#;
    let simple_args = json!({"action": "create", "id": "preferences"});
    let complex_args = json!({"action": "create", "id": "preferences", "content": {"short_answers": true, "hate_emojis": true, "english_ui": false, "russian_math_explanations": true}});
    let mut cases = vec![case(
        f,
        s,
        "no_tool_call",
        "How can I help you today?",
        want(Content::Eq(Some("How can I help you today?")), none()),
    )];
    for (version, header) in [
        (
            "gigachat3",
            "<|message_sep|>\n\nfunction call<|role_sep|>\n",
        ),
        ("gigachat31", "<|function_call|>"),
    ] {
        let v = leak(version.to_owned());
        cases.push(case(
            f,
            s,
            leak(format!("simple_nonstreaming_{v}")),
            format!("{header}{simple}"),
            want(
                Content::Eq(None),
                one("manage_user_memory", simple_args.clone()),
            ),
        ));
        cases.push(case(
            f,
            s,
            leak(format!("parameterless_nonstreaming_{v}")),
            format!("{header}{empty}"),
            want(Content::Eq(None), one("manage_user_memory", json!({}))),
        ));
        cases.push(case(
            f,
            s,
            leak(format!("complex_nonstreaming_{v}")),
            format!("{header}{complex}"),
            want(
                Content::Eq(None),
                one("manage_user_memory", complex_args.clone()),
            ),
        ));
        cases.push(case(
            f,
            s,
            leak(format!("mixed_content_nonstreaming_{v}")),
            format!("I'll check that for you.{header}{simple}"),
            want(
                Content::Eq(Some("I'll check that for you.")),
                one("manage_user_memory", simple_args.clone()),
            ),
        ));
        cases.push(case(
            f,
            s,
            leak(format!("mixed_content_nonstreaming_with_eos_{v}")),
            format!("I'll check that for you.{header}{simple}</s>"),
            want(
                Content::Eq(Some("I'll check that for you.")),
                one("manage_user_memory", simple_args.clone()),
            ),
        ));
    }
    cases
}

fn deepseek_cases() -> Vec<Case> {
    let mut cases = common(Common {
        family: "deepseek_v3",
        source: "vllm tests/tool_parsers/test_deepseekv3_tool_parser.py",
        no_tool_calls: "How can I help you today? I can check weather for you.",
        single: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo", "unit": "celsius"}),
        single_content: Some(None),
        parallel: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search_hotels\n```json\n{\"location\": \"Tokyo\", \"check_in\": \"2025-01-15\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        parallel_names: vec!["get_weather", "search_hotels"],
        various: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>test_function\n```json\n{\"string_field\": \"hello\", \"int_field\": 42, \"float_field\": 3.14, \"bool_field\": true, \"null_field\": null, \"array_field\": [\"a\", \"b\", \"c\"], \"object_field\": {\"nested\": \"value\"}, \"empty_array\": [], \"empty_object\": {}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        typed: true,
        empty: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>refresh\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        surrounding: "Let me check the weather for you.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        escaped: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>test_function\n```json\n{\"text\": \"He said \\\"hello\\\"\", \"path\": \"C:\\\\Users\\\\file\", \"newline\": \"line1\\nline2\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        malformed: vec![
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\"\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "<｜tool▁calls▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Tokyo\"}\n```<｜tool▁calls▁end｜>",
        ],
    });
    // The upstream empty-arguments config names its tool get_current_time.
    if let Some(c) = cases.iter_mut().find(|c| c.label == "empty_arguments") {
        c.text = c.text.replace("refresh", "get_current_time");
        c.upstream = want(Content::Any, one("get_current_time", json!({})));
    }
    let s = "vllm tests/tool_parsers/test_deepseekv31_tool_parser.py";
    let f = "deepseek_v3_1";
    cases.extend([
        case(f, s, "with_tool", "normal text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁sep｜>{\"x\":1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", want(Content::Eq(Some("normal text")), one("foo", json!({"x": 1})))),
        case(f, s, "with_multiple_tools", "some prefix text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>foo<｜tool▁sep｜>{\"x\":1}<｜tool▁call▁end｜><｜tool▁call▁begin｜>bar<｜tool▁sep｜>{\"y\":2}<｜tool▁call▁end｜><｜tool▁calls▁end｜> some suffix text", want(Content::Eq(Some("some prefix text")), Calls::Exact(vec![("foo", Args::Eq(json!({"x": 1}))), ("bar", Args::Eq(json!({"y": 2})))])))
            .differs(want(Content::Eq(Some("some prefix text some suffix text")), Calls::Exact(vec![("foo", Args::Eq(json!({"x": 1}))), ("bar", Args::Eq(json!({"y": 2})))])), CONTENT_DIFF),
        case(f, s, "unparsable_block (cut off)", "Let me look that up.<｜tool▁calls▁begin｜>get_weather", want(Content::Eq(Some("Let me look that up.<｜tool▁calls▁begin｜>get_weather")), none())),
        case(f, s, "unparsable_block (no call markers)", "<｜tool▁calls▁begin｜>foo<｜tool▁sep｜>{\"x\":1}<｜tool▁calls▁end｜>", want(Content::Eq(Some("<｜tool▁calls▁begin｜>foo<｜tool▁sep｜>{\"x\":1}<｜tool▁calls▁end｜>")), none())),
    ]);
    cases.extend(dsml_cases());
    cases
}

fn dsml_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_deepseekv32_tool_parser.py";
    let f = "deepseek_v32";
    let call = |name: &str, params: &[(&str, &str, &str)]| {
        let params: String = params
            .iter()
            .map(|(k, string, v)| {
                format!(
                    "<｜DSML｜parameter name=\"{k}\" string=\"{string}\">{v}</｜DSML｜parameter>\n"
                )
            })
            .collect();
        format!("<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"{name}\">\n{params}</｜DSML｜invoke>\n</｜DSML｜function_calls>")
    };
    vec![
        case(f, s, "no_tool_call", "just some text", want(Content::Eq(Some("just some text")), none())),
        case(f, s, "single_tool_no_params", call("get_time", &[]), want(Content::Any, one("get_time", json!({})))),
        case(f, s, "single_tool_with_params", call("get_weather", &[("location", "true", "SF"), ("date", "true", "2024-01-16")]), want(Content::Any, one("get_weather", json!({"location": "SF", "date": "2024-01-16"})))),
        case(f, s, "content_before_tool_call", format!("Sure, let me check! {}", call("get_weather", &[("location", "true", "NYC")])), want(Content::Eq(Some("Sure, let me check! ")), one("get_weather", json!({"location": "NYC"})))),
        case(f, s, "no_content_prefix_returns_none", call("get_weather", &[("location", "true", "NYC")]), want(Content::Eq(None), one("get_weather", json!({"location": "NYC"})))),
        case(f, s, "multiple_tools", "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">SF</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">NYC</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", want(Content::Any, Calls::Exact(vec![("get_weather", Args::Eq(json!({"location": "SF"}))), ("get_weather", Args::Eq(json!({"location": "NYC"})))]))),
        case(f, s, "type_conversion_in_non_streaming", call("toggle", &[("enabled", "false", "true"), ("count", "false", "42")]), want(Content::Any, one("toggle", json!({"enabled": true, "count": 42})))),
        case(f, s, "string_attr_true_coerced_by_schema", call("score", &[("value", "true", "42")]), want(Content::Any, one("score", json!({"value": 42}))))
            .differs(want(Content::Eq(None), one("score", json!({"value": "42"}))), SCHEMA),
        case(f, s, "string_attr_false_allows_schema_conversion", call("score", &[("value", "false", "42")]), want(Content::Any, one("score", json!({"value": 42})))),
        case(f, s, "composed_schema_converts_object_and_array_params", call("set_timer", &[("wait", "false", r#"{"type":"for","minutes":2880}"#), ("patches", "false", r#"[{"op":"replace","path":"/schedule","value":"quiet"}]"#)]), want(Content::Any, one("set_timer", json!({"wait": {"type": "for", "minutes": 2880}, "patches": [{"op": "replace", "path": "/schedule", "value": "quiet"}]})))),
        case(f, s, "string_attr_true_coerced_by_composed_schema", call("set_timer", &[("wait", "true", r#"{"type":"for","minutes":2880}"#)]), want(Content::Any, one("set_timer", json!({"wait": {"type": "for", "minutes": 2880}}))))
            .differs(want(Content::Eq(None), one("set_timer", json!({"wait": r#"{"type":"for","minutes":2880}"#}))), SCHEMA),
        case(f, s, "arguments_wrapper_repaired", call("get_weather", &[("arguments", "false", r#"{"location":"Beijing"}"#)]), want(Content::Any, one("get_weather", json!({"location": "Beijing"}))))
            .differs(want(Content::Eq(None), one("get_weather", json!({"arguments": {"location": "Beijing"}}))), "unwrapping a lone 'arguments'/'input' parameter needs the tool's schema, which parsers do not see"),
        case(f, s, "input_wrapper_repaired", call("get_weather", &[("input", "true", r#"{"location":"Beijing"}"#)]), want(Content::Any, one("get_weather", json!({"location": "Beijing"}))))
            .differs(want(Content::Eq(None), one("get_weather", json!({"input": r#"{"location":"Beijing"}"#}))), "unwrapping a lone 'arguments'/'input' parameter needs the tool's schema, which parsers do not see"),
        case(f, s, "object_and_array_params", call("update", &[("tags", "false", r#"["a", "b"]"#), ("meta", "false", r#"{"k": 1}"#)]), want(Content::Any, one("update", json!({"tags": ["a", "b"], "meta": {"k": 1}})))),
        case("deepseek_v4", "vllm vllm/tool_parsers/deepseekv4_tool_parser.py (V3.2 grammar in <｜DSML｜tool_calls>)", "tool_calls block", call("get_weather", &[("location", "true", "杭州")]).replace("function_calls", "tool_calls"), want(Content::Eq(None), one("get_weather", json!({"location": "杭州"})))),
    ]
}

fn kimi_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_kimi_k2_tool_parser.py";
    let f = "kimi_k2";
    let tool = |id: &str, args: &str| {
        format!("<|tool_call_begin|>{id} <|tool_call_argument_begin|>{args}<|tool_call_end|>")
    };
    let wrap = |tools: &[String]| {
        format!(
            "<|tool_calls_section_begin|>{}<|tool_calls_section_end|>",
            tools.concat()
        )
    };
    vec![
        case(f, s, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case(f, s, "single_tool_call", format!("I'll check. {}", wrap(&[tool("functions.get_weather:0", r#"{"city": "Beijing"}"#)])), want(Content::Eq(Some("I'll check. ")), one("get_weather", json!({"city": "Beijing"})))),
        case(f, s, "parallel_tool_calls", format!("Compare weather. {}", wrap(&[tool("functions.get_weather:0", r#"{"city": "Beijing"}"#), tool("functions.get_weather:1", r#"{"city": "Shanghai"}"#)])), want(Content::Eq(Some("Compare weather. ")), Calls::Exact(vec![("get_weather", Args::Eq(json!({"city": "Beijing"}))), ("get_weather", Args::Eq(json!({"city": "Shanghai"})))]))),
        case(f, s, "three_tool_calls", format!("Multiple tasks. {}", wrap(&[tool("functions.get_weather:0", r#"{"city": "New York"}"#), tool("functions.get_news:1", r#"{"topic": "technology"}"#), tool("functions.send_email:2", r#"{"to": "user@example.com", "subject": "Daily Update"}"#)])), want(Content::Eq(Some("Multiple tasks. ")), Calls::Names(vec!["get_weather", "get_news", "send_email"]))),
        case(f, s, "angle_brackets_in_json", format!("Process HTML. {}", wrap(&[tool("functions.process_html:0", r#"{"html": "<div>content</div>"}"#)])), want(Content::Eq(Some("Process HTML. ")), one("process_html", json!({"html": "<div>content</div>"})))),
        case(f, s, "multiline_json", format!("Formatted. {}", wrap(&[tool("functions.process_data:0", "{\n  \"name\": \"test\",\n  \"value\": 123\n}")])), want(Content::Eq(Some("Formatted. ")), one("process_data", json!({"name": "test", "value": 123})))),
        case(f, s, "no_functions_prefix", format!("No prefix. {}", wrap(&[tool("get_weather:0", r#"{"city": "Tokyo"}"#)])), want(Content::Eq(Some("No prefix. ")), one("get_weather", json!({"city": "Tokyo"})))),
        case(f, s, "empty_arguments", format!("Empty args. {}", wrap(&[tool("functions.test:0", "{}")])), want(Content::Eq(Some("Empty args. ")), one("test", json!({})))),
        case(f, s, "invalid_json_still_extracted", format!("Help. {}", wrap(&[tool("functions.bad:0", r#"{"city": "Beijing""#), tool("functions.good:1", r#"{"city": "Shanghai"}"#)])), want(Content::Any, Calls::Exact(vec![("bad", Args::Invalid), ("good", Args::Eq(json!({"city": "Shanghai"})))]))),
        case(f, s, "invalid_funcall_id_skipped", format!("Help. {}", wrap(&[tool("functions.invalid.0", r#"{"city": "Beijing"}"#), tool("functions.valid:1", r#"{"city": "Shanghai"}"#)])), want(Content::Any, Calls::Names(vec!["valid"]))),
        case(f, s, "native_id_extracted", format!("Checking weather. {}", wrap(&[tool("functions.get_weather:0", r#"{"city": "Tokyo"}"#)])), want(Content::Any, one("get_weather", json!({"city": "Tokyo"})))),
        case(f, s, "bare_counter (single offered tool)", format!("Let me check. {}", wrap(&[tool("0", r#"{"city": "Tokyo", "unit": "celsius"}"#)])), want(Content::Eq(Some("Let me check. ")), one("get_weather", json!({"city": "Tokyo", "unit": "celsius"}))))
            .differs(want(Content::Any, none()), "a bare counter id names no function; inferring it from the offered tools' schemas is guessing a name"),
        case(f, s, "bare_counter_multiple_tools_skips_unsafe_inference", format!("Let me check. {}", wrap(&[tool("0", r#"{"city": "Tokyo"}"#)])), want(Content::Any, none())),
    ]
}

fn glm_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_glm4_moe_tool_parser.py";
    let f = "glm45";
    let block = |name: &str, pairs: &[(&str, &str)]| {
        let args: String = pairs
            .iter()
            .map(|(k, v)| format!("    <arg_key>{k}</arg_key>\n    <arg_value>{v}</arg_value>\n"))
            .collect();
        format!("<tool_call>{name}\n{args}    </tool_call>")
    };
    let dallas = [("city", "Dallas"), ("state", "TX"), ("unit", "fahrenheit")];
    let bj = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>date</arg_key>\n<arg_value>2025-08-01</arg_value>\n</tool_call>";
    let bj_args = json!({"city": "Beijing", "date": "2025-08-01"});
    vec![
        case(f, s, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case(f, s, "single_tool_call", block("get_current_weather", &dallas), want(Content::Eq(None), one("get_current_weather", json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"})))),
        case(f, s, "multiple_tool_calls", format!("{}\n    {}", block("get_current_weather", &dallas), block("get_current_weather", &[("city", "Orlando"), ("state", "FL"), ("unit", "fahrenheit")])), want(Content::Eq(None), Calls::Names(vec!["get_current_weather", "get_current_weather"]))),
        case(f, s, "tool_call_with_content_before", format!("I'll help you check the weather. {}", block("get_current_weather", &[("city", "Seattle"), ("state", "WA"), ("unit", "celsius")])), want(Content::Eq(Some("I'll help you check the weather. ")), one("get_current_weather", json!({"city": "Seattle", "state": "WA", "unit": "celsius"})))),
        case(f, s, "tool_call_with_mixed_args", block("get_current_weather", &[("city", "New York"), ("state", "NY"), ("unit", "celsius")]), want(Content::Eq(None), one("get_current_weather", json!({"city": "New York", "state": "NY", "unit": "celsius"})))),
        case(f, s, "tool_call_with_chinese_content", format!("I will help you get the weather.{}", block("get_weather", &[("city", "Beijing"), ("date", "2025-08-01")])), want(Content::Eq(Some("I will help you get the weather.")), one("get_weather", bj_args.clone()))),
        case(f, s, "with_thinking_tags", format!("<think>I want to get the weather.</think>\n\nI will help you get the weather.\n{bj}"), want(Content::Eq(Some("<think>I want to get the weather.</think>\n\nI will help you get the weather.\n")), Calls::Names(vec!["get_weather"]))),
        case(f, s, "malformed_xml", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Seattle</arg_value>\n<arg_key>incomplete_arg\n<arg_value>value</arg_value>\n</tool_call>", want(Content::Any, Calls::NoPanic)),
        case(f, s, "empty_arguments", "<tool_call>get_current_time\n</tool_call>", want(Content::Any, one("get_current_time", json!({})))),
        case(f, s, "mixed_content", format!("I will help you get the weather info.\n\n{bj}\n\nmeaningwhile, I will also check the weather in Shanghai.\n\n{}", bj.replace("Beijing", "Shanghai")), want(Content::Eq(Some("I will help you get the weather info.\n\n")), Calls::Exact(vec![("get_weather", Args::Eq(bj_args.clone())), ("get_weather", Args::Eq(json!({"city": "Shanghai", "date": "2025-08-01"})))])))
            .differs(want(Content::Eq(Some("I will help you get the weather info.\n\n\n\nmeaningwhile, I will also check the weather in Shanghai.")), Calls::Names(vec!["get_weather", "get_weather"])), CONTENT_DIFF),
        case(f, s, "special_characters", "<tool_call>send_message\n<arg_key>recipient</arg_key>\n<arg_value>Amy</arg_value>\n<arg_key>message</arg_key>\n<arg_value>It is a nice day</arg_value>\n<arg_key>priority</arg_key>\n<arg_value>high</arg_value>\n</tool_call>", want(Content::Any, one("send_message", json!({"recipient": "Amy", "message": "It is a nice day", "priority": "high"})))),
        case(f, s, "incomplete_tool_call", bj.trim_end_matches("\n</tool_call>"), want(Content::Eq(Some(bj.trim_end_matches("\n</tool_call>"))), none()))
            .differs(want(Content::Eq(None), one("get_weather", bj_args)), TRUNCATED),
    ]
}

fn seed_cases() -> Vec<Case> {
    let s = "vllm tests/tool_parsers/test_seed_oss_tool_parser.py";
    let f = "seed_oss";
    let think_example = "<seed:think>\nSo the format is <seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n<parameter=unit>celsius</parameter>\n</function>\n</seed:tool_call>. Let me go with that.</seed:think>";
    vec![
        case(f, s, "no_tools", "This is a test response without any tool calls", want(Content::Eq(Some("This is a test response without any tool calls")), none())),
        case(f, s, "tool_call_0_thinking_budget", "<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n</function>\n</seed:tool_call>", want(Content::Eq(None), one("get_weather", json!({"location": "Barcelona, Spain"})))),
        case(f, s, "tool_call_512_thinking_budget (abridged think text)", "<seed:think>The user's current thinking budget is 512.</seed:cot_budget_reflect>\nLet me analyze the question.</seed:think>\n<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n</function>\n</seed:tool_call>", want(Content::Eq(Some("<seed:think>The user's current thinking budget is 512.</seed:cot_budget_reflect>\nLet me analyze the question.</seed:think>\n")), one("get_weather", json!({"location": "Barcelona, Spain"})))),
        case(f, s, "tool_call_unlimited_thinking_budget (a call example inside the think block; abridged)", format!("{think_example}<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n<parameter=unit>celsius</parameter>\n</function>\n</seed:tool_call>"), want(Content::Eq(Some(think_example)), one("get_weather", json!({"location": "Barcelona, Spain", "unit": "celsius"})))),
    ]
}

fn invoke_cases() -> Vec<Case> {
    let m = "vllm tests/tool_parsers/test_minimax_m2_tool_parser.py";
    let f = "minimax_m2";
    let mut cases = vec![
        case(f, m, "plain_content", "Hello world", want(Content::Eq(Some("Hello world")), none())),
        case(f, m, "content_before_tool_call", "Let me check. <minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle</parameter></invoke></minimax:tool_call>", want(Content::Eq(Some("Let me check. ")), one("get_weather", json!({"city": "Seattle"})))),
        case(f, m, "single_chunk_complete", "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle</parameter></invoke></minimax:tool_call>", want(Content::Any, one("get_weather", json!({"city": "Seattle"})))),
        case(f, m, "multiple_params", "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">Seattle</parameter><parameter name=\"days\">5</parameter></invoke></minimax:tool_call>", want(Content::Any, one("get_weather", json!({"city": "Seattle", "days": "5"}))))
            .differs(want(Content::Eq(None), one("get_weather", json!({"city": "Seattle", "days": 5}))), HEURISTIC),
        case(f, m, "two_invokes", "<minimax:tool_call><invoke name=\"search_web\"><parameter name=\"query\">OpenAI</parameter></invoke><invoke name=\"search_web\"><parameter name=\"query\">Gemini</parameter></invoke></minimax:tool_call>", want(Content::Any, Calls::Exact(vec![("search_web", Args::Eq(json!({"query": "OpenAI"}))), ("search_web", Args::Eq(json!({"query": "Gemini"})))]))),
        case(f, m, "two_invokes_in_single_delta", "<minimax:tool_call><invoke name=\"fn_a\"><parameter name=\"x\">1</parameter></invoke><invoke name=\"fn_b\"><parameter name=\"y\">2</parameter></invoke></minimax:tool_call>", want(Content::Any, Calls::Names(vec!["fn_a", "fn_b"]))),
        case(f, m, "different_functions", "<minimax:tool_call><invoke name=\"get_weather\"><parameter name=\"city\">NYC</parameter></invoke><invoke name=\"get_stock\"><parameter name=\"ticker\">AAPL</parameter></invoke></minimax:tool_call>", want(Content::Any, Calls::Names(vec!["get_weather", "get_stock"]))),
        case(f, m, "tool_call_fields", "<minimax:tool_call><invoke name=\"fn\"><parameter name=\"k\">v</parameter></invoke></minimax:tool_call>", want(Content::Any, one("fn", json!({"k": "v"})))),
    ];
    cases.extend(common(Common {
        family: "step3",
        source: "vllm tests/tool_parsers/test_step3_tool_parser.py",
        no_tool_calls: "This is a regular response without any tool calls.",
        single: "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo"}),
        single_content: None,
        parallel: "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_sep｜><｜tool_call_begin｜><steptml:invoke name=\"get_time\"><steptml:parameter name=\"timezone\">Asia/Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        parallel_names: vec!["get_weather", "get_time"],
        various: "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"test_function\"><steptml:parameter name=\"string_field\">hello</steptml:parameter><steptml:parameter name=\"int_field\">42</steptml:parameter><steptml:parameter name=\"float_field\">3.14</steptml:parameter><steptml:parameter name=\"bool_field\">true</steptml:parameter><steptml:parameter name=\"null_field\">null</steptml:parameter><steptml:parameter name=\"array_field\">[\"a\", \"b\", \"c\"]</steptml:parameter><steptml:parameter name=\"object_field\">{\"nested\": \"value\"}</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        typed: false,
        empty: "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"refresh\"></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        surrounding: "Let me check the weather for you.\n\n<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"get_weather\"><steptml:parameter name=\"city\">Tokyo</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>\n\nI'll get that information.",
        escaped: "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"test_function\"><steptml:parameter name=\"quoted\">He said \"hello\"</steptml:parameter><steptml:parameter name=\"path\">C:\\Users\\file.txt</steptml:parameter><steptml:parameter name=\"newline\">line1\nline2</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        malformed: vec![
            "<｜tool_calls_begin｜><｜tool_call_begin｜><steptml:invoke name=\"func\">",
            "<｜tool_call_begin｜><steptml:invoke name=\"func\"></steptml:invoke><｜tool_call_end｜>",
        ],
    }));
    let s = "vllm tests/tool_parsers/test_step3_tool_parser.py";
    for value in [
        "    if x:",
        "return 1\n",
        "    if x:\n        return 1\n",
        "hello ",
        "hello\u{a0}",
        "hello",
    ] {
        let text = format!("<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>edit_file\n<steptml:invoke name=\"edit_file\"><steptml:parameter name=\"old_string\">{value}</steptml:parameter><steptml:parameter name=\"indent\"> 4 </steptml:parameter><steptml:parameter name=\"enabled\"> true </steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>");
        cases.push(case(
            "step3",
            s,
            "string_value_preserved",
            text,
            want(
                Content::Any,
                one(
                    "edit_file",
                    json!({"old_string": value, "indent": 4, "enabled": true}),
                ),
            ),
        ));
    }
    cases
}

fn special_cases() -> Vec<Case> {
    let x = "vllm tests/tool_parsers/test_xlam_tool_parser.py";
    let dallas = json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"});
    let call = r#"[{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}]"#;
    let g = "vllm tests/tool_parsers/test_functiongemma_tool_parser.py";
    let o =
        "vllm tests/tool_parsers/test_openai_tool_parser.py (harmony messages rendered as text)";
    vec![
        case("xlam", x, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case("xlam", x, "parallel_tool_calls", r#"[{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}, {"name": "get_current_weather", "arguments": {"city": "Orlando", "state": "FL", "unit": "fahrenheit"}}]"#, want(Content::Eq(None), Calls::Exact(vec![("get_current_weather", Args::Eq(dallas.clone())), ("get_current_weather", Args::Eq(json!({"city": "Orlando", "state": "FL", "unit": "fahrenheit"})))]))),
        case("xlam", x, "single_tool_with_think_tag", format!("<think>I'll help you with that.</think>{call}"), want(Content::Eq(Some("<think>I'll help you with that.</think>")), one("get_current_weather", dallas.clone()))),
        case("xlam", x, "single_tool_with_json_code_block", format!("I'll help you with that.\n```json\n{call}\n```"), want(Content::Eq(Some("I'll help you with that.")), one("get_current_weather", dallas.clone()))),
        case("xlam", x, "single_tool_with_tool_calls_tag", format!("I'll check the weather for you.[TOOL_CALLS]{call}"), want(Content::Eq(Some("I'll check the weather for you.")), one("get_current_weather", dallas.clone()))),
        case("xlam", x, "single_tool_with_tool_call_xml_tags", format!("I'll help you check the weather.<tool_call>{call}</tool_call>"), want(Content::Eq(Some("I'll help you check the weather.")), one("get_current_weather", dallas))),
        case("xlam", x, "list_structured_tool_call", r#"[{"name": "get_current_weather", "arguments": {"city": "Seattle", "state": "WA", "unit": "celsius"}}]"#, want(Content::Eq(None), one("get_current_weather", json!({"city": "Seattle", "state": "WA", "unit": "celsius"})))),
        case("functiongemma", g, "no_tool_calls", "Hello, how can I help you today?", want(Content::Eq(Some("Hello, how can I help you today?")), none())),
        case("functiongemma", g, "single_tool_call", "<start_function_call>call:get_weather{location:<escape>London<escape>}<end_function_call>", want(Content::Any, one("get_weather", json!({"location": "London"})))),
        case("functiongemma", g, "multiple_arguments", "<start_function_call>call:get_weather{location:<escape>San Francisco<escape>,unit:<escape>celsius<escape>}<end_function_call>", want(Content::Any, one("get_weather", json!({"location": "San Francisco", "unit": "celsius"})))),
        case("functiongemma", g, "text_before_tool_call", "Let me check the weather for you. <start_function_call>call:get_weather{location:<escape>Paris<escape>}<end_function_call>", want(Content::Eq(Some("Let me check the weather for you.")), one("get_weather", json!({"location": "Paris"})))),
        case("functiongemma", g, "multiple_tool_calls", "<start_function_call>call:get_weather{location:<escape>London<escape>}<end_function_call><start_function_call>call:get_time{timezone:<escape>UTC<escape>}<end_function_call>", want(Content::Any, Calls::Names(vec!["get_weather", "get_time"]))),
        case("functiongemma", g, "parse_arguments: numeric_argument", "<start_function_call>call:f{count:<escape>42<escape>}<end_function_call>", want(Content::Any, one("f", json!({"count": 42}))))
            .differs(want(Content::Eq(None), one("f", json!({"count": "42"}))), "an <escape>d value is a string as written (a string \"42\" must survive a round trip); the dispatcher coerces it to the schema's type"),
        case("functiongemma", g, "parse_arguments: boolean_argument", "<start_function_call>call:f{enabled:<escape>true<escape>}<end_function_call>", want(Content::Any, one("f", json!({"enabled": true}))))
            .differs(want(Content::Eq(None), one("f", json!({"enabled": "true"}))), "an <escape>d value is a string as written; the dispatcher coerces it to the schema's type"),
        case("functiongemma", g, "parse_arguments: argument_with_spaces", "<start_function_call>call:f{message:<escape>Hello World<escape>}<end_function_call>", want(Content::Any, one("f", json!({"message": "Hello World"})))),
        case("gpt_oss", o, "no_tools (final channel)", "<|channel|>final<|message|>This is a test<|return|>", want(Content::Eq(Some("This is a test")), none())),
        case("gpt_oss", o, "single_tool", "<|channel|>analysis<|message|>User asks: \"What is the weather in Tokyo?\" We need to use get_current_weather tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|>", want(Content::Eq(None), one("get_current_weather", json!({"location": "Tokyo"})))),
        case("gpt_oss", o, "single_tool (multiline args)", "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\n\"location\": \"Tokyo\"\n}<|call|>", want(Content::Eq(None), one("get_current_weather", json!({"location": "Tokyo"})))),
        case("gpt_oss", o, "multiple_tools", "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|end|><|start|>assistant<|channel|>commentary to=functions.get_user_location <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|end|><|start|>assistant<|channel|>commentary to=functions.no_content_type<|message|>{\"location\": \"Tokyo\"}<|end|><|start|>assistant<|channel|>commentary to=functions.not_json_no_content_type<|message|>foo<|end|><|start|>assistant<|channel|>commentary to=functions.empty_args <|constrain|>json<|message|>{}<|end|><|start|>assistant<|channel|>commentary to=functions.no_args <|constrain|>json<|message|><|call|>", want(Content::Eq(None), Calls::Exact(vec![("get_current_weather", Args::Eq(json!({"location": "Tokyo"}))), ("get_user_location", Args::Eq(json!({"location": "Tokyo"}))), ("no_content_type", Args::Eq(json!({"location": "Tokyo"}))), ("not_json_no_content_type", Args::Invalid), ("empty_args", Args::Eq(json!({}))), ("no_args", Args::Any)]))),
        case("gpt_oss", o, "with_content", "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\": \"Tokyo\"}<|call|><|start|>assistant<|channel|>final<|message|>This tool call will get the weather.<|return|>", want(Content::Eq(Some("This tool call will get the weather.")), one("get_current_weather", json!({"location": "Tokyo"})))),
    ]
}

fn hermes_agent_cases() -> Vec<Case> {
    let s = "hermes-agent tests/test_tool_call_parsers.py";
    let h = "hermes";
    let d = "deepseek_v3";
    let ds = |calls: &[(&str, &str)]| {
        let body: String = calls
            .iter()
            .map(|(n, a)| format!("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n{a}\n```<｜tool▁call▁end｜>"))
            .collect();
        format!("<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>")
    };
    vec![
        case(h, s, "no_tool_call", "Hello, I can help you with that.", want(Content::Eq(Some("Hello, I can help you with that.")), none())),
        case(h, s, "single_tool_call", r#"<tool_call>{"name": "terminal", "arguments": {"command": "ls -la"}}</tool_call>"#, want(Content::Any, one("terminal", json!({"command": "ls -la"})))),
        case(h, s, "tool_call_with_surrounding_text", "Let me check that for you.\n<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"pwd\"}}</tool_call>", want(Content::Eq(Some("Let me check that for you.")), one("terminal", json!({"command": "pwd"})))),
        case(h, s, "multiple_tool_calls", "<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}</tool_call>\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"test.py\"}}</tool_call>", want(Content::Any, Calls::Names(vec!["terminal", "read_file"]))),
        case(h, s, "tool_call_ids_are_unique", "<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}</tool_call>\n<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"pwd\"}}</tool_call>", want(Content::Any, Calls::Names(vec!["terminal", "terminal"]))),
        case(h, s, "empty_string", "", want(Content::Eq(None), none())),
        case(h, s, "malformed_json_in_tool_call", "<tool_call>not valid json</tool_call>", want(Content::Any, Calls::NoPanic)),
        case(h, s, "truncated_tool_call", r#"<tool_call>{"name": "terminal", "arguments": {"command": "ls -la"}"#, want(Content::Any, Calls::NoPanic)),
        case(h, s, "contract: no_tools_returns_none_tool_calls", "Just plain text, no tools.", want(Content::Eq(Some("Just plain text, no tools.")), none())),
        case(d, s, "no_tool_call", "Hello, I can help you with that.", want(Content::Eq(Some("Hello, I can help you with that.")), none())),
        case(d, s, "single_tool_call", ds(&[("terminal", r#"{"command": "ls -la"}"#)]), want(Content::Any, one("terminal", json!({"command": "ls -la"})))),
        case(d, s, "multiple_tool_calls (issue #989)", format!("Let me run some commands.\n{}", ds(&[("terminal", r#"{"command": "ls"}"#), ("read_file", r#"{"path": "test.py"}"#)])), want(Content::Any, Calls::Names(vec!["terminal", "read_file"]))),
        case(d, s, "three_tool_calls", ds(&[("terminal", r#"{"command": "echo 1"}"#), ("terminal", r#"{"command": "echo 2"}"#), ("terminal", r#"{"command": "echo 3"}"#)]), want(Content::Any, Calls::Names(vec!["terminal", "terminal", "terminal"]))),
        case(d, s, "tool_call_ids_unique", ds(&[("terminal", r#"{"command": "ls"}"#), ("terminal", r#"{"command": "pwd"}"#)]), want(Content::Any, Calls::Names(vec!["terminal", "terminal"]))),
        case(d, s, "content_before_tool_calls", format!("I will help you check that.\n{}", ds(&[("terminal", r#"{"command": "pwd"}"#)])), want(Content::Eq(Some("I will help you check that.")), one("terminal", json!({"command": "pwd"})))),
    ]
}

fn sglang_cases() -> Vec<Case> {
    let s = "sglang test function_call/test_function_call_parser.py (TestDeepSeekV32Detector)";
    let f = "deepseek_v32";
    let xml = "I'll help you with information about San Francisco and get its favorite tourist spot for you.\n\n\n        <｜DSML｜function_calls>\n\n            <｜DSML｜invoke name=\"get_favorite_tourist_spot\">\n\n                <｜DSML｜parameter name=\"city\" string=\"true\">San Francisco</｜DSML｜parameter>\n\n            </｜DSML｜invoke>\n\n            <｜DSML｜invoke name=\"search\">\n                <｜DSML｜parameter name=\"query\" string=\"true\">WebNav benchmark</｜DSML｜parameter>\n                <｜DSML｜parameter name=\"topn\" string=\"false\">10</｜DSML｜parameter>\n                <｜DSML｜parameter name=\"source\" string=\"true\">web</｜DSML｜parameter>\n            </｜DSML｜invoke>\n        </｜DSML｜function_calls>\n        ";
    let json_layout = "I'll help you with information about San Francisco and get its favorite tourist spot for you.\n\n        <｜DSML｜function_calls>\n            <｜DSML｜invoke name=\"get_favorite_tourist_spot\">\n            {\n                \"city\": \"San Francisco\"\n            }\n        </｜DSML｜invoke>\n            <｜DSML｜invoke name=\"search\">\n            {\n                \"query\": \"WebNav benchmark\",\n                \"topn\": 10,\n                \"source\": \"web\"\n            }\n        </｜DSML｜invoke>\n        </｜DSML｜function_calls>\n        ";
    let two = || {
        Calls::Exact(vec![
            (
                "get_favorite_tourist_spot",
                Args::Eq(json!({"city": "San Francisco"})),
            ),
            (
                "search",
                Args::Eq(json!({"query": "WebNav benchmark", "topn": 10, "source": "web"})),
            ),
        ])
    };
    vec![
        case(f, s, "detect_and_parse_xml_format", xml, want(Content::Eq(Some("I'll help you with information about San Francisco and get its favorite tourist spot for you.")), two())),
        case(f, s, "detect_and_parse_json_format", json_layout, want(Content::Eq(Some("I'll help you with information about San Francisco and get its favorite tourist spot for you.")), two())),
        case(f, s, "streaming_xml_format (non-streaming parse)", "<｜DSML｜function_calls>\n            <｜DSML｜invoke name=\"get_favorite_tourist_spot\">\n                <｜DSML｜parameter name=\"city\" string=\"true\">San Francisco</｜DSML｜parameter>\n                <｜DSML｜parameter name=\"another_city\" string=\"true\">London</｜DSML｜parameter>\n                <｜DSML｜parameter name=\"topn\" string=\"false\">10</｜DSML｜parameter>\n                <｜DSML｜parameter name=\"obj\" string=\"false\">{\"name\": \"John\", \"age\": 30}</｜DSML｜parameter>\n            </｜DSML｜invoke>\n        </｜DSML｜function_calls>", want(Content::Eq(None), one("get_favorite_tourist_spot", json!({"city": "San Francisco", "another_city": "London", "topn": 10, "obj": {"name": "John", "age": 30}})))),
        case(f, s, "detect_and_parse_no_parameters", "Let me get the current date for you.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_date\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", want(Content::Eq(Some("Let me get the current date for you.")), one("get_date", json!({})))),
        case(f, s, "no_parameters_with_whitespace (non-streaming parse)", "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_date\">\n\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", want(Content::Eq(None), one("get_date", json!({})))),
    ]
}

fn more_cases() -> Vec<Case> {
    let m = "vllm tests/tool_parsers/test_minimax_tool_parser.py";
    let f = "minimax";
    let dallas = json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"});
    let think = "<think>I should use a tool. <tool_calls>\n{\"name\": \"ignored_tool\", \"arguments\": {\"should\": \"ignore\"}}\n</tool_calls></think>\n\nLet me help you with the weather.";
    let mut cases = vec![
        case(f, m, "no_tools", "This is a test", want(Content::Eq(Some("This is a test")), none())),
        case(f, m, "single_tool_call", "<tool_calls>\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}}\n</tool_calls>", want(Content::Eq(None), one("get_current_weather", dallas.clone()))),
        case(f, m, "multiple_tool_calls", "<tool_calls>\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Dallas\", \"state\": \"TX\", \"unit\": \"fahrenheit\"}}\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Orlando\", \"state\": \"FL\", \"unit\": \"fahrenheit\"}}\n</tool_calls>", want(Content::Eq(None), Calls::Exact(vec![("get_current_weather", Args::Eq(dallas)), ("get_current_weather", Args::Eq(json!({"city": "Orlando", "state": "FL", "unit": "fahrenheit"})))]))),
        case(f, m, "tool_call_with_content_before", "I'll help you check the weather. <tool_calls>\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Seattle\", \"state\": \"WA\", \"unit\": \"celsius\"}}\n</tool_calls>", want(Content::Eq(Some("I'll help you check the weather.")), one("get_current_weather", json!({"city": "Seattle", "state": "WA", "unit": "celsius"})))),
        case(f, m, "tool_call_incomplete_tag", "<tool_calls>\n{\"name\": \"get_current_weather\", \"arguments\": {\"city\": \"Boston\", \"state\": \"MA\"}}", want(Content::Eq(None), one("get_current_weather", json!({"city": "Boston", "state": "MA"})))),
        case(f, m, "with_thinking_tags", format!("{think} <tool_calls>\n{{\"name\": \"get_current_weather\", \"arguments\": {{\"city\": \"Miami\", \"state\": \"FL\", \"unit\": \"fahrenheit\"}}}}\n</tool_calls>"), want(Content::Eq(Some(think)), Calls::Names(vec!["get_current_weather"]))),
        case(f, m, "invalid_json", "<tool_calls>\n{\"name\": \"valid_tool\", \"arguments\": {\"city\": \"Seattle\"}}\n{invalid json here}\n{\"name\": \"another_valid_tool\", \"arguments\": {\"param\": \"value\"}}\n</tool_calls>", want(Content::Any, Calls::Names(vec!["valid_tool", "another_valid_tool"]))),
        case(f, m, "missing_name_or_arguments", "<tool_calls>\n{\"name\": \"valid_tool\", \"arguments\": {\"city\": \"Seattle\"}}\n{\"name\": \"missing_args\"}\n{\"arguments\": {\"city\": \"Portland\"}}\n{\"name\": \"another_valid_tool\", \"arguments\": {\"param\": \"value\"}}\n</tool_calls>", want(Content::Any, Calls::Names(vec!["valid_tool", "another_valid_tool"])))
            .differs(want(Content::Any, Calls::Names(vec!["valid_tool", "missing_args", "another_valid_tool"])), "a call without arguments is a call with none ({}), as in every JSON family here"),
        case(f, m, "multiline_json_not_supported", "<tool_calls>\n{\n  \"name\": \"get_current_weather\",\n  \"arguments\": {\n    \"city\": \"New York\",\n    \"state\": \"NY\",\n    \"unit\": \"celsius\"\n  }\n}\n</tool_calls>", want(Content::Eq(None), none()))
            .differs(want(Content::Eq(None), one("get_current_weather", json!({"city": "New York", "state": "NY", "unit": "celsius"}))), "a pretty-printed call object is read like a one-line one"),
    ];
    cases.extend(common(Common {
        family: "longcat",
        source: "vllm tests/tool_parsers/test_longcat_tool_parser.py",
        no_tool_calls: "This is a regular response without any tool calls.",
        single: r#"<longcat_tool_call>{"name": "get_weather", "arguments": {"city": "Tokyo"}}</longcat_tool_call>"#,
        single_name: "get_weather",
        single_args: json!({"city": "Tokyo"}),
        single_content: Some(None),
        parallel: "<longcat_tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}</longcat_tool_call>\n<longcat_tool_call>{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"Asia/Tokyo\"}}</longcat_tool_call>",
        parallel_names: vec!["get_weather", "get_time"],
        various: leak(format!("<longcat_tool_call>{VARIOUS_JSON}</longcat_tool_call>")),
        typed: true,
        empty: r#"<longcat_tool_call>{"name": "refresh", "arguments": {}}</longcat_tool_call>"#,
        surrounding: "Let me check the weather for you.\n<longcat_tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}</longcat_tool_call>\nHere is the result.",
        escaped: leak(format!("<longcat_tool_call>{ESCAPED_JSON}</longcat_tool_call>")),
        malformed: vec![
            r#"<longcat_tool_call>{"name": "func", "arguments": {"#,
            r#"<longcat_tool_call>{"name": "func", "arguments": "not a dict"}</longcat_tool_call>"#,
            "Some text with <longcat_tool_call>invalid json",
        ],
    }));
    let q = "vllm tests/tool_parsers/test_qwen3coder_tool_parser.py";
    let f = "qwen3_coder";
    let weather = |city: &str, state: &str| {
        format!("<tool_call>\n<function=get_current_weather>\n<parameter=city>\n{city}\n</parameter>\n<parameter=state>\n{state}\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>")
    };
    let dallas = json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"});
    cases.extend([
        case(f, q, "no_tools", "This is a test response without any tool calls", want(Content::Eq(Some("This is a test response without any tool calls")), none())),
        case(f, q, "single_tool", weather("Dallas", "TX"), want(Content::Eq(None), one("get_current_weather", dallas.clone()))),
        case(f, q, "single_tool_with_content", format!("Sure! Let me check the weather for you.{}", weather("Dallas", "TX")), want(Content::Eq(Some("Sure! Let me check the weather for you.")), one("get_current_weather", dallas.clone()))),
        case(f, q, "single_tool_multiline_param", "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n<parameter=dimensions>\n{\"width\": 10, \n \"height\": 20}\n</parameter>\n<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>", want(Content::Eq(None), one("calculate_area", json!({"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2})))),
        case(f, q, "parallel_tools", format!("{}\n{}", weather("Dallas", "TX"), weather("Orlando", "FL")), want(Content::Eq(None), Calls::Exact(vec![("get_current_weather", Args::Eq(dallas)), ("get_current_weather", Args::Eq(json!({"city": "Orlando", "state": "FL", "unit": "fahrenheit"})))]))),
        case(f, q, "tool_with_typed_params", "Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n<parameter=shape>\ncircle\n</parameter>\n<parameter=dimensions>\n{\"radius\": 15.5}\n</parameter>\n<parameter=precision>\n3\n</parameter>\n</function>\n</tool_call>", want(Content::Eq(Some("Let me calculate that area for you.")), one("calculate_area", json!({"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3})))),
        case(f, q, "fallback_no_tags", "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n</function>", want(Content::Any, Calls::Names(vec!["get_current_weather"]))),
        case(f, q, "type_conversion", "<tool_call>\n<function=test_types>\n<parameter=int_param>\n42\n</parameter>\n<parameter=float_param>\n3.14\n</parameter>\n<parameter=bool_param>\ntrue\n</parameter>\n<parameter=str_param>\nhello world\n</parameter>\n<parameter=obj_param>\n{\"key\": \"value\"}\n</parameter>\n</function>\n</tool_call>", want(Content::Any, one("test_types", json!({"int_param": 42, "float_param": 3.14, "bool_param": true, "str_param": "hello world", "obj_param": {"key": "value"}})))),
    ]);
    let g = "vllm tests/tool_parsers/test_glm47_moe_tool_parser.py";
    let f = "glm47";
    let beijing = json!({"city": "Beijing"});
    cases.extend([
        case(f, g, "no_tool_call", "This is a plain response.", want(Content::Eq(Some("This is a plain response.")), none())),
        case(f, g, "zero_arg_inline", "<tool_call>get_current_date</tool_call>", want(Content::Eq(None), one("get_current_date", json!({})))),
        case(f, g, "zero_arg_newline", "<tool_call>get_current_date\n</tool_call>", want(Content::Any, Calls::Names(vec!["get_current_date"]))),
        case(f, g, "args_same_line", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call>", want(Content::Any, one("get_weather", beijing.clone()))),
        case(f, g, "args_with_newlines", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n</tool_call>", want(Content::Any, one("get_weather", beijing))),
        case(f, g, "content_before", "Checking.<tool_call>get_current_date</tool_call>", want(Content::Eq(Some("Checking.")), Calls::Names(vec!["get_current_date"]))),
        case(f, g, "multiple", "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Shanghai</arg_value></tool_call>", want(Content::Any, Calls::Names(vec!["get_weather", "get_weather"]))),
        case(f, g, "whitespace_content_none", "  \n  <tool_call>get_current_date</tool_call>", want(Content::Eq(None), Calls::Names(vec!["get_current_date"]))),
    ]);
    let d = "vllm tests/tool_parsers/test_deepseekv4_tool_parser.py";
    let v4 = |name: &str, params: &[(&str, &str)]| {
        let params: String = params
            .iter()
            .map(|(k, v)| {
                format!("<｜DSML｜parameter name=\"{k}\" string=\"true\">{v}</｜DSML｜parameter>\n")
            })
            .collect();
        format!("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"{name}\">\n{params}</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
    };
    let search = v4("search", &[("query", "vllm")]).replace("tool_calls", "function_calls");
    cases.extend([
        case("deepseek_v4", d, "extract_tool_calls", format!("Let me check. {}", v4("get_weather", &[("location", "Beijing"), ("unit", "celsius")])), want(Content::Eq(Some("Let me check. ")), one("get_weather", json!({"location": "Beijing", "unit": "celsius"})))),
        case("deepseek_v4", d, "function_calls_block_is_not_accepted", search.clone(), want(Content::Eq(Some(leak(search))), none()))
            .differs(want(Content::Eq(None), one("search", json!({"query": "vllm"}))), "both DSML block names carry the same invoke grammar; reading the V3.2 name too loses no call and invents nothing"),
        case("deepseek_v4", d, "streaming_extracts_complete_invokes (non-streaming parse)", v4("search", &[("query", "deepseek v4")]), want(Content::Any, one("search", json!({"query": "deepseek v4"})))),
    ]);
    let l = "vllm tests/tool_parsers/test_llama4_pythonic_tool_parser.py";
    let f = "llama4_pythonic";
    let la = json!({"city": "LA", "metric": "C"});
    let pair = || {
        Calls::Exact(vec![
            (
                "get_weather",
                Args::Eq(json!({"city": "LA", "metric": "C"})),
            ),
            ("register_user", Args::Eq(json!({"name": "Doe", "age": 9}))),
        ])
    };
    cases.extend([
        case(f, l, "no_tool_call", "How can I help you today?", want(Content::Eq(Some("How can I help you today?")), none())),
        case(f, l, "simple", "[get_weather(city='LA', metric='C')]", want(Content::Any, one("get_weather", la.clone()))),
        case(f, l, "more_types", "[register_user(name='Doe', age=9, address={'city': 'LA', 'state': 'CA'}, role=None, passed_test=True, aliases=['John', 'Johnny'])]", want(Content::Any, one("register_user", json!({"name": "Doe", "age": 9, "address": {"city": "LA", "state": "CA"}, "role": null, "passed_test": true, "aliases": ["John", "Johnny"]})))),
        case(f, l, "parameterless", "[get_weather()]", want(Content::Any, one("get_weather", json!({})))),
        case(f, l, "empty_dict", "[do_something_cool(additional_data={})]", want(Content::Any, one("do_something_cool", json!({"additional_data": {}})))),
        case(f, l, "empty_list", "[do_something_cool(steps=[])]", want(Content::Any, one("do_something_cool", json!({"steps": []})))),
        case(f, l, "escaped_string", r#"[get_weather(city='Martha\'s Vineyard', metric='\"cool units\"')]"#, want(Content::Any, one("get_weather", json!({"city": "Martha's Vineyard", "metric": "\"cool units\""})))),
        case(f, l, "parallel_calls (no spaces)", "[get_weather(city='LA',metric='C'),register_user(name='Doe',age=9)]", want(Content::Any, pair())),
        case(f, l, "python_tag", "<|python_start|>[get_weather(city='LA', metric='C')]<|python_end|>", want(Content::Any, one("get_weather", la.clone()))),
        case(f, l, "parallel_calls (python tag, no end tag)", "<|python_start|>[get_weather(city='LA', metric='C'), register_user(name='Doe', age=9)]", want(Content::Any, pair())),
        case(f, l, "bad_sibling_call_does_not_drop_good_calls", "<|python_start|>[bad(x=b'z'), get_weather(city='LA', metric='C')]<|python_end|>", want(Content::Any, one("get_weather", la.clone())))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("bad", Args::Invalid), ("get_weather", Args::Eq(la.clone()))])), KEEP_BROKEN),
        case(f, l, "non_finite_argument_rejected", "<|python_start|>[calc(x=1e999), get_weather(city='LA', metric='C')]<|python_end|>", want(Content::Any, one("get_weather", la)))
            .differs(want(Content::Eq(None), Calls::Exact(vec![("calc", Args::Invalid), ("get_weather", Args::Eq(json!({"city": "LA", "metric": "C"})))])), KEEP_BROKEN),
    ]);
    cases
}

fn all_cases() -> Vec<Case> {
    let mut cases = hermes_cases();
    cases.extend(hermes_agent_cases());
    cases.extend(sglang_cases());
    cases.extend(more_cases());
    cases.extend(mistral_cases());
    cases.extend(llama_cases());
    cases.extend(pythonic_cases());
    cases.extend(olmo3_cases());
    cases.extend(json_block_common_cases());
    cases.extend(tagged_json_cases());
    cases.extend(gigachat_cases());
    cases.extend(deepseek_cases());
    cases.extend(kimi_cases());
    cases.extend(glm_cases());
    cases.extend(seed_cases());
    cases.extend(invoke_cases());
    cases.extend(special_cases());
    cases
}

#[derive(Default)]
struct Tally {
    total: usize,
    passed: usize,
    differs: Vec<String>,
}

#[test]
fn upstream_cases_pass_or_differ_for_a_stated_reason() {
    let mut tallies: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut failures = Vec::new();
    for c in all_cases() {
        let parser = get(c.family).unwrap_or_else(|e| panic!("{e}"));
        let parsed = parser.parse(&c.text);
        let tally = tallies.entry(c.family).or_default();
        tally.total += 1;
        let upstream_ok = matches(&parsed, &c.upstream);
        match &c.ours {
            None if upstream_ok => tally.passed += 1,
            None => failures.push(format!(
                "{} / {} ({}): {:?}",
                c.family, c.label, c.source, parsed
            )),
            Some((_, reason)) if upstream_ok => failures.push(format!(
                "{} / {}: now matches upstream; remove the stated difference ({reason})",
                c.family, c.label
            )),
            Some((ours, reason)) if matches(&parsed, ours) => {
                tally.differs.push(format!("{}: {reason}", c.label));
            }
            Some(_) => failures.push(format!(
                "{} / {} (differs case): {:?}",
                c.family, c.label, parsed
            )),
        }
    }
    for (family, t) in &tallies {
        println!(
            "{family}: {}/{} upstream cases pass, {} differ",
            t.passed,
            t.total,
            t.differs.len()
        );
        for d in &t.differs {
            println!("    differs — {d}");
        }
    }
    let total: usize = tallies.values().map(|t| t.total).sum();
    let passed: usize = tallies.values().map(|t| t.passed).sum();
    println!("all families: {passed}/{total} pass");
    assert!(
        failures.is_empty(),
        "{} upstream cases fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
