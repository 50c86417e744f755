//! Table-driven tests for every parser (the spec's example, several calls, unicode and nested
//! JSON, truncated output, garbage), render → parse round trips, and a bounded property test
//! that no input makes any parser panic.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{families, get, names, Parsed};
use crate::calls::ToolCall;

/// What a call's arguments must be.
#[derive(Debug)]
enum Args {
    /// Valid JSON equal to this value.
    Json(Value),
    /// Text that does not parse (the loop answers with an "Invalid JSON" error).
    Invalid,
}

struct Case {
    parser: &'static str,
    label: &'static str,
    text: &'static str,
    content: Option<&'static str>,
    calls: Vec<(&'static str, Args)>,
}

fn case(
    parser: &'static str,
    label: &'static str,
    text: &'static str,
    content: Option<&'static str>,
    calls: Vec<(&'static str, Args)>,
) -> Case {
    Case {
        parser,
        label,
        text,
        content,
        calls,
    }
}

fn j(v: Value) -> Args {
    Args::Json(v)
}

fn ls() -> Vec<(&'static str, Args)> {
    vec![("terminal", j(json!({"command": "ls"})))]
}

fn cases() -> Vec<Case> {
    use Args::Invalid;
    vec![
        // hermes / qwen
        case("hermes", "spec", r#"Let me check.<tool_call>{"name":"terminal","arguments":{"command":"ls"}}</tool_call>"#, Some("Let me check."), ls()),
        case("qwen", "multiple", r#"A<tool_call>{"name":"a","arguments":{}}</tool_call>B<tool_call>{"name":"b","arguments":{"x":1}}</tool_call>C"#, Some("ABC"), vec![("a", j(json!({}))), ("b", j(json!({"x": 1})))]),
        case("hermes", "unicode+nested", r#"Héllo 🌍<tool_call>{"name":"write_file","arguments":{"path":"ü/文件.txt","meta":{"a":[1,{"b":"ß"}]}}}</tool_call>"#, Some("Héllo 🌍"), vec![("write_file", j(json!({"path": "ü/文件.txt", "meta": {"a": [1, {"b": "ß"}]}})))]),
        case("hermes", "truncated", r#"<tool_call>{"name": "terminal", "arguments": {"command": "ls"#, None, vec![("terminal", Invalid)]),
        case("hermes", "a nameless block among good ones stays text", r#"<tool_call>{"name":"a","arguments":{}}</tool_call><tool_call>oops</tool_call><tool_call>{"name":"b","arguments":{}}</tool_call>"#, Some("<tool_call>oops</tool_call>"), vec![("a", j(json!({}))), ("b", j(json!({})))]),
        case("hermes", "garbage is returned unchanged", "}{<<tool_call>>", Some("}{<<tool_call>>"), vec![]),
        case("hermes", "an empty name is not a call", r#"<tool_call>{"name":"","arguments":{}}</tool_call>"#, Some(r#"<tool_call>{"name":"","arguments":{}}</tool_call>"#), vec![]),
        case("hermes", "string arguments and no arguments", r#"<tool_call>{"name":"a","arguments":"{\"k\": 1}"}</tool_call><tool_call>{"name":"b"}</tool_call>"#, None, vec![("a", j(json!({"k": 1}))), ("b", j(json!({})))]),
        // longcat
        case("longcat", "spec", r#"<longcat_tool_call>{"name":"read_file","arguments":{"path":"a.py"}}</longcat_tool_call>"#, None, vec![("read_file", j(json!({"path": "a.py"})))]),
        case("longcat", "multiple+unicode", "é<longcat_tool_call>{\"name\":\"a\",\"arguments\":{\"x\":\"ü\"}}</longcat_tool_call>\n<longcat_tool_call>{\"name\":\"b\",\"arguments\":{\"n\":{\"m\":[1]}}}</longcat_tool_call> fin", Some("é\n fin"), vec![("a", j(json!({"x": "ü"}))), ("b", j(json!({"n": {"m": [1]}})))]),
        case("longcat", "truncated", r#"<longcat_tool_call>{"name":"a","argu"#, None, vec![("a", Invalid)]),
        // qwen3_coder
        case("qwen3_coder", "spec", "<tool_call>\n<function=terminal>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>", None, vec![("terminal", j(json!({"command": "ls -la"})))]),
        case("qwen3_coder", "multiple", "Sure.<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=limit>\n10\n</parameter>\n</function>\n</tool_call><tool_call>\n<function=todo>\n</function>\n</tool_call> Done", Some("Sure. Done"), vec![("read_file", j(json!({"path": "a.py", "limit": 10}))), ("todo", j(json!({})))]),
        case("qwen3_coder", "unicode+nested without blocks", "Ok <function=write_file><parameter=path>ü.txt</parameter><parameter=data>{\"a\": [1, {\"b\": \"ß\"}]}</parameter><parameter=flag>True</parameter></function>", Some("Ok"), vec![("write_file", j(json!({"path": "ü.txt", "data": {"a": [1, {"b": "ß"}]}, "flag": true})))]),
        case("qwen3_coder", "truncated", "<tool_call>\n<function=terminal>\n<parameter=command>\nls -", None, vec![("terminal", j(json!({"command": "ls -"})))]),
        case("qwen3_coder", "garbage", "<function=>>><parameter=", Some("<function=>>><parameter="), vec![]),
        case("seed_oss", "spec", "<seed:tool_call>\n<function=terminal>\n<parameter=command>\nls\n</parameter>\n</function>\n</seed:tool_call>", None, ls()),
        case("seed_oss", "text around, two calls", "Ok.<seed:tool_call><function=a><parameter=x>1</parameter></function><function=b></function></seed:tool_call> done", Some("Ok. done"), vec![("a", j(json!({"x": 1}))), ("b", j(json!({})))]),
        // glm45 / glm47
        case("glm45", "spec", "<tool_call>terminal\n<arg_key>command</arg_key><arg_value>ls</arg_value></tool_call>", None, ls()),
        case("glm45", "multiple+nested", "Hi<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>a.py</arg_value>\n<arg_key>limit</arg_key>\n<arg_value>5</arg_value>\n</tool_call><tool_call>write_file\n<arg_key>obj</arg_key>\n<arg_value>{\"k\": [1, {\"z\": \"ß\"}]}</arg_value>\n</tool_call>", Some("Hi"), vec![("read_file", j(json!({"path": "a.py", "limit": 5}))), ("write_file", j(json!({"obj": {"k": [1, {"z": "ß"}]}})))]),
        case("glm45", "truncated", "<tool_call>terminal\n<arg_key>command</arg_key><arg_value>ls -l", None, vec![("terminal", j(json!({"command": "ls -l"})))]),
        case("glm47", "spec", "<tool_call>terminal<arg_key>command</arg_key>\n<arg_value>ls</arg_value></tool_call>", None, ls()),
        case("glm47", "literal backslash-n", "<tool_call>terminal<arg_key>command</arg_key>\\n<arg_value>ls</arg_value></tool_call>", None, ls()),
        case("glm47", "unicode", "ça<tool_call>write_file<arg_key>path</arg_key><arg_value>日本.txt</arg_value><arg_key>content</arg_key><arg_value>ü</arg_value></tool_call>va", Some("çava"), vec![("write_file", j(json!({"path": "日本.txt", "content": "ü"})))]),
        case("glm47", "garbage", "<tool_call><arg_key></arg_key>", Some("<tool_call><arg_key></arg_key>"), vec![]),
        case("glm45", "GLM-4.6 literal backslash-n after the name", "<tool_call>terminal\\n<arg_key>command</arg_key>\\n<arg_value>ls</arg_value>\\n</tool_call>", None, ls()),
        case("glm45", "unparsable block returned unchanged", "a <tool_call>not a call at all</tool_call>\nb", Some("a <tool_call>not a call at all</tool_call>\nb"), vec![]),
        // mistral
        case("mistral", "spec pre-v11", r#"[TOOL_CALLS] [{"name":"terminal","arguments":{"command":"ls"}}]"#, None, ls()),
        case("mistral", "spec v11", r#"[TOOL_CALLS]terminal{"command":"ls"}"#, None, ls()),
        case("mistral", "multiple v11 + text", r#"Plan: [TOOL_CALLS]a{"x": {"y": [1, "ü"]}}[TOOL_CALLS]b{} done"#, Some("Plan:  done"), vec![("a", j(json!({"x": {"y": [1, "ü"]}}))), ("b", j(json!({})))]),
        case("mistral", "multiple pre-v11", r#"[TOOL_CALLS] [{"name":"a","arguments":{}}, {"name":"b","arguments":{"k":"é"}}] after"#, Some("after"), vec![("a", j(json!({}))), ("b", j(json!({"k": "é"})))]),
        case("mistral", "v13 with ARGS", r#"[TOOL_CALLS]terminal[ARGS]{"command":"ls"}"#, None, ls()),
        case("mistral", "truncated v11", r#"[TOOL_CALLS]terminal{"command":"l"#, None, vec![("terminal", Invalid)]),
        case("mistral", "truncated pre-v11 keeps complete objects", r#"[TOOL_CALLS] [{"name":"a","arguments":{}}, {"name":"b","argu"#, None, vec![("a", j(json!({})))]),
        case("mistral", "garbage: the token alone", "[TOOL_CALLS]", None, vec![]),
        case("mistral", "not json at all is text", "[TOOL_CALLS] not json at all", Some("not json at all"), vec![]),
        case("mistral", "text before the list is not a name", r#"[TOOL_CALLS]  junk [{"name":"terminal","arguments":{"command":"ls"}}] trail"#, Some("junk  trail"), ls()),
        case("mistral", "pre-v11 without arguments", r#"[TOOL_CALLS] [{"name":"todo"}]"#, None, vec![("todo", j(json!({})))]),
        case("mistral", "an empty name is not a call", r#"[TOOL_CALLS] [{"name":"","arguments":{}}]"#, Some(r#"[{"name":"","arguments":{}}]"#), vec![]),
        // llama
        case("llama3_json", "spec", r#"<|python_tag|>{"name":"terminal","parameters":{"command":"ls"}}"#, None, ls()),
        case("llama4_json", "multiple with separators", r#"I will. {"name":"a","parameters":{"x":{"y":[1]}}}; {"name":"b","arguments":{"k":"ü"}}"#, Some("I will."), vec![("a", j(json!({"x": {"y": [1]}}))), ("b", j(json!({"k": "ü"})))]),
        case("llama3_json", "plain JSON is content", r#"The config is {"a": 1}."#, Some(r#"The config is {"a": 1}."#), vec![]),
        case("llama3_json", "truncated", r#"<|python_tag|>{"name": "terminal", "parameters": {"command": "l"#, None, vec![("terminal", Invalid)]),
        case("llama3_json", "garbage", "{{{{ }", Some("{{{{ }"), vec![]),
        // deepseek_v3
        case("deepseek_v3", "spec", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>terminal\n```json\n{\"command\":\"ls\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", None, ls()),
        case("deepseek_v3", "multiple+unicode", "Voilà<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{\"p\":\"ü\",\"n\":{\"m\":[1]}}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>!", Some("Voilà\n!"), vec![("a", j(json!({"p": "ü", "n": {"m": [1]}}))), ("b", j(json!({})))]),
        case("deepseek_v3", "truncated", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>terminal\n```json\n{\"command\":", None, vec![("terminal", Invalid)]),
        case("deepseek_v3", "garbage returned unchanged", "<｜tool▁calls▁begin｜>```", Some("<｜tool▁calls▁begin｜>```"), vec![]),
        case("deepseek_v3", "unparsable call returned unchanged", "x <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nonsense<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>", Some("x <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nonsense<｜tool▁call▁end｜>\n<｜tool▁calls▁end｜>"), vec![]),
        // deepseek_v3_1
        case("deepseek_v3_1", "spec", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>terminal<｜tool▁sep｜>{\"command\":\"ls\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", None, ls()),
        case("deepseek_v31", "multiple+nested", "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{\"k\":{\"l\":[\"é\"]}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>b<｜tool▁sep｜><｜tool▁call▁end｜><｜tool▁calls▁end｜>", Some("x"), vec![("a", j(json!({"k": {"l": ["é"]}}))), ("b", j(json!({})))]),
        case("deepseek_v3_1", "unparsable call returned unchanged", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>no separator<｜tool▁call▁end｜><｜tool▁calls▁end｜>", Some("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>no separator<｜tool▁call▁end｜><｜tool▁calls▁end｜>"), vec![]),
        case("deepseek_v3_1", "truncated", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>terminal<｜tool▁sep｜>{\"comm", None, vec![("terminal", Invalid)]),
        // kimi_k2
        case("kimi_k2", "spec", "<|tool_calls_section_begin|><|tool_call_begin|>functions.terminal:0<|tool_call_argument_begin|>{\"command\":\"ls\"}<|tool_call_end|><|tool_calls_section_end|>", None, ls()),
        case("kimi_k2", "multiple, singular section token", "先<|tool_call_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\":[{\"y\":\"ü\"}]}<|tool_call_end|><|tool_call_begin|>functions.b:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_section_end|>后", Some("先后"), vec![("a", j(json!({"x": [{"y": "ü"}]}))), ("b", j(json!({})))]),
        case("kimi_k2", "id without :N is not a call", "<|tool_calls_section_begin|><|tool_call_begin|>functions.invalid.0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>", Some("<|tool_calls_section_begin|><|tool_call_begin|>functions.invalid.0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"), vec![]),
        case("kimi_k2", "truncated", "<|tool_calls_section_begin|><|tool_call_begin|>functions.terminal:0<|tool_call_argument_begin|>{\"c", None, vec![("terminal", Invalid)]),
        // deepseek_v32 / deepseek_v4 (DSML)
        case("deepseek_v32", "spec", "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"terminal\">\n<｜DSML｜parameter name=\"command\" string=\"true\">ls</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>", None, ls()),
        case("deepseek_v4", "tool_calls block, JSON and string values, two calls", "Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜parameter>\n<｜DSML｜parameter name=\"s\" string=\"true\">42</｜DSML｜parameter>\n<｜DSML｜parameter name=\"o\" string=\"false\">{\"k\": [1, \"ü\"]}</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", Some("Sure."), vec![("a", j(json!({"n": 3, "s": "42", "o": {"k": [1, "ü"]}}))), ("b", j(json!({})))]),
        case("deepseek_dsml", "ascii pipes", "ok<|DSML|function_calls><|DSML|invoke name=\"terminal\"><|DSML|parameter name=\"command\" string=\"true\">ls</|DSML|parameter></|DSML|invoke></|DSML|function_calls>", Some("ok"), ls()),
        case("deepseek_v4", "truncated", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"terminal\">\n<｜DSML｜parameter name=\"command\" string=\"true\">ls", None, ls()),
        case("deepseek_v4", "garbage", "< | DSML | > <｜DSML｜", Some("< | DSML | > <｜DSML｜"), vec![]),
        case("deepseek_v32", "block without invokes returned unchanged", "<｜DSML｜function_calls>nothing</｜DSML｜function_calls>", Some("<｜DSML｜function_calls>nothing</｜DSML｜function_calls>"), vec![]),
        // pythonic / llama4_pythonic / olmo3
        case("pythonic", "spec", "[terminal(command='ls')]", None, ls()),
        case("llama4_pythonic", "python tags, two calls, literals", "<|python_start|>[a(x=[1, 'ü'], y=True, z=None), b()]<|python_end|>", None, vec![("a", j(json!({"x": [1, "ü"], "y": true, "z": null}))), ("b", j(json!({})))]),
        case("pythonic", "truncated", "[terminal(command='l", None, vec![("terminal", Invalid)]),
        case("pythonic", "positional arguments are not a call", "[f(1, 2)]", Some("[f(1, 2)]"), vec![]),
        case("olmo3", "spec", "<function_calls>\nterminal(command=\"ls\")\n</function_calls>", None, ls()),
        case("olmo3", "two calls, JSON literals", "x<function_calls>\na(v=true, w=null)\nb(n=2)\n</function_calls>", Some("x"), vec![("a", j(json!({"v": true, "w": null}))), ("b", j(json!({"n": 2})))]),
        // gpt_oss (harmony)
        case("gpt_oss", "spec", "<|channel|>analysis<|message|>Need ls.<|end|><|start|>assistant<|channel|>commentary to=functions.terminal <|constrain|>json<|message|>{\"command\":\"ls\"}<|call|>", None, ls()),
        case("openai", "recipient in the header, final content", "<|channel|>commentary to=functions.a<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>Done.<|return|>", Some("Done."), vec![("a", j(json!({})))]),
        // JSON-after-a-marker families
        case("granite", "spec", r#"<|tool_call|>[{"name":"terminal","arguments":{"command":"ls"}}]"#, None, ls()),
        case("granite", "3.1 tag, two calls", r#"<tool_call>[{"name":"a","arguments":{}},{"name":"b","arguments":{"k":"é"}}]"#, None, vec![("a", j(json!({}))), ("b", j(json!({"k": "é"})))]),
        case("granite_20b_fc", "two calls", r#"<function_call> {"name":"a","arguments":{}} <function_call> {"name":"terminal","arguments":{"command":"ls"}}"#, None, vec![("a", j(json!({}))), ("terminal", j(json!({"command": "ls"})))]),
        case("internlm2", "spec", "Sure<|action_start|><|plugin|>\n{\"name\": \"terminal\", \"parameters\": {\"command\": \"ls\"}}<|action_end|>", Some("Sure"), ls()),
        case("jamba", "spec", r#"<tool_calls>[{"name":"terminal","arguments":{"command":"ls"}}]</tool_calls>"#, None, ls()),
        case("minimax", "one per line", "t<tool_calls>\n{\"name\":\"a\",\"arguments\":{}}\n{\"name\":\"terminal\",\"arguments\":{\"command\":\"ls\"}}\n</tool_calls>", Some("t"), vec![("a", j(json!({}))), ("terminal", j(json!({"command": "ls"})))]),
        case("hunyuan_a13b", "spec", r#"<tool_calls>[{"name":"terminal","arguments":{"command":"ls"}}]</tool_calls>"#, None, ls()),
        case("ernie45", "spec", "<tool_call>\n{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>", None, ls()),
        case("phi4_mini_json", "spec", r#"functools[{"name":"terminal","arguments":{"command":"ls"}}]"#, None, ls()),
        case("phi4_mini_json", "prose mentioning functools", "use functools.partial here", Some("use functools.partial here"), vec![]),
        case("gigachat3", "spec", "Ok<|message_sep|>function call<|role_sep|>\n{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}", Some("Ok"), ls()),
        case("qwen25", "spec", "<tools>\n{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}\n</tools>", None, ls()),
        case("qwen25", "list", r#"<tools>[{"name":"a","arguments":{}},{"name":"b","parameters":{"x":1}}]</tools>"#, None, vec![("a", j(json!({}))), ("b", j(json!({"x": 1})))]),
        case("jamba", "truncated", r#"<tool_calls>[{"name":"terminal","arguments":{"command":"l"#, None, vec![("terminal", Invalid)]),
        // invoke families
        case("minimax_m2", "spec", "<minimax:tool_call>\n<invoke name=\"terminal\">\n<parameter name=\"command\">ls</parameter>\n</invoke>\n</minimax:tool_call>", None, ls()),
        case("step3", "spec", "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"terminal\"><steptml:parameter name=\"command\">ls</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>", None, ls()),
        // xlam / functiongemma
        case("xlam", "bare list", r#"[{"name":"terminal","arguments":{"command":"ls"}}]"#, None, ls()),
        case("xlam", "fenced after text", "I will.\n```json\n[{\"name\":\"terminal\",\"arguments\":{\"command\":\"ls\"}}]\n```", Some("I will."), ls()),
        case("xlam", "prose with brackets is content", "[1, 2] are numbers", Some("[1, 2] are numbers"), vec![]),
        case("functiongemma", "spec", "<start_function_call>call:terminal{command:<escape>ls<escape>}<end_function_call>", None, ls()),
        case("functiongemma", "bare values, two calls", "x<start_function_call>call:a{n:3,f:true}<end_function_call><start_function_call>call:b{}<end_function_call>", Some("x"), vec![("a", j(json!({"n": 3, "f": true}))), ("b", j(json!({})))]),
        // auto without offered tools: explicit markup only
        case("auto", "hermes tags", r#"<tool_call>{"name":"terminal","arguments":{"command":"ls"}}</tool_call>"#, None, ls()),
        case("auto", "qwen3-coder xml", "<function=terminal>\n<parameter=command>\nls\n</parameter>\n</function>", None, ls()),
        case("auto", "bare JSON needs offered tools", r#"{"name":"terminal","arguments":{"command":"ls"}}"#, Some(r#"{"name":"terminal","arguments":{"command":"ls"}}"#), vec![]),
    ]
}

fn check(case: &Case, parsed: &Parsed) {
    let what = format!("{} / {}: {:?}", case.parser, case.label, parsed);
    assert_eq!(parsed.content.as_deref(), case.content, "content of {what}");
    assert_eq!(parsed.calls.len(), case.calls.len(), "calls of {what}");
    for (call, (name, args)) in parsed.calls.iter().zip(&case.calls) {
        assert_eq!(call.function.name, *name, "{what}");
        assert!(!call.id.is_empty(), "{what}");
        let got = serde_json::from_str::<Value>(&call.function.arguments);
        match args {
            Args::Json(v) => assert_eq!(got.as_ref().ok(), Some(v), "{what}"),
            Args::Invalid => assert!(got.is_err(), "{what}"),
        }
    }
}

#[test]
fn every_parser_passes_its_table() {
    let cases = cases();
    for case in &cases {
        let parser = get(case.parser).unwrap();
        check(case, &parser.parse(case.text));
    }
    for family in families() {
        assert!(
            cases.iter().any(|c| family.names.contains(&c.parser)),
            "{} has no cases",
            family.names[0]
        );
    }
}

#[test]
fn plain_text_is_content_for_every_parser() {
    for name in names() {
        let p = get(name).unwrap().parse("  Just an answer: 42. ");
        assert_eq!(p.content.as_deref(), Some("Just an answer: 42."), "{name}");
        assert!(p.calls.is_empty(), "{name}");
        assert_eq!(get(name).unwrap().parse(""), Parsed::default(), "{name}");
    }
}

#[test]
fn qwen3_coder_ids_are_24_hex_and_mistral_ids_9_alphanumerics() {
    let p = get("qwen3_coder").unwrap().parse("<function=a></function>");
    let id = &p.calls[0].id;
    assert!(id.starts_with("call_") && id.len() == 29, "{id}");
    let p = get("mistral").unwrap().parse("[TOOL_CALLS]a{}");
    let id = &p.calls[0].id;
    assert!(
        id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()),
        "{id}"
    );
    let p = get("mistral")
        .unwrap()
        .parse("[TOOL_CALLS]a[CALL_ID]abc123XYZ[ARGS]{}");
    assert_eq!(p.calls[0].id, "abc123XYZ");
}

#[test]
fn kimi_keeps_raw_ids() {
    let p = get("kimi_k2").unwrap().parse("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:3<|tool_call_argument_begin|>{}<|tool_call_end|>");
    assert_eq!(p.calls[0].id, "functions.get_weather:3");
    assert_eq!(p.calls[0].function.name, "get_weather");
}

fn sample_calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new("terminal", r#"{"command": "ls -la && echo \"hi\""}"#),
        ToolCall::new(
            "write_file",
            r#"{"path": "ü/文件.txt", "content": "line1\nline2", "n": 3, "flag": true, "nested": {"a": [1, null, "x"]}, "num_text": "42"}"#,
        ),
        ToolCall::new("todo", "{}"),
    ]
}

fn assert_round_trip(name: &str, content: &str, calls: &[ToolCall]) {
    let parser = get(name).unwrap();
    let text = parser.render(content, calls);
    let parsed = parser.parse(&text);
    let expected_content = (!content.is_empty()).then_some(content);
    assert_eq!(
        parsed.content.as_deref(),
        expected_content,
        "{name}: {text}"
    );
    assert_eq!(parsed.calls.len(), calls.len(), "{name}: {text}");
    for (got, want) in parsed.calls.iter().zip(calls) {
        assert_eq!(got.function.name, want.function.name, "{name}: {text}");
        let got_args: Value = serde_json::from_str(&got.function.arguments).unwrap();
        let want_args: Value = serde_json::from_str(&want.function.arguments).unwrap();
        assert_eq!(got_args, want_args, "{name}: {text}");
    }
}

#[test]
fn render_then_parse_round_trips_for_every_parser() {
    for name in names() {
        assert_round_trip(name, "Let me do it.", &sample_calls());
        assert_round_trip(name, "", &sample_calls()[..1]);
        assert_round_trip(name, "Só texto, nada mais.", &[]);
    }
}

#[test]
fn kimi_render_keeps_kimi_ids_and_makes_them_otherwise() {
    let parser = get("kimi_k2").unwrap();
    let mut kimi = ToolCall::new("a", "{}");
    kimi.id = "functions.a:7".into();
    let plain = ToolCall::new("b", "{}");
    let parsed = parser.parse(&parser.render("", &[kimi, plain]));
    assert_eq!(parsed.calls[0].id, "functions.a:7");
    assert_eq!(parsed.calls[1].id, "functions.b:1");
}

#[test]
fn every_prefix_of_rendered_output_parses_without_panicking() {
    for name in names() {
        let parser = get(name).unwrap();
        let text = parser.render("Thinking… ünïcode", &sample_calls());
        for (i, _) in text.char_indices() {
            let _ = parser.parse(&text[..i]);
        }
    }
}

/// Fragments the fuzzer splices: every family's markup, JSON pieces and odd characters.
const FRAGMENTS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<longcat_tool_call>",
    "</longcat_tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    ">",
    "<",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "\\n",
    "\n",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "```json",
    "```",
    "<|tool_calls_section_begin|>",
    "<|tool_call_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<｜DSML｜",
    "< | DSML | ",
    "tool_calls_begin",
    "tool_call_begin",
    "tool_call_end",
    "｜>",
    " | >",
    "functions.",
    ":0",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    ":",
    ",",
    ";",
    "\\",
    "{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}",
    "{\"name\":",
    "\"arguments\":",
    "\"parameters\":",
    "null",
    "True",
    "(1, 'a')",
    "terminal",
    "é",
    "🌍",
    "\u{0}",
    "\u{ffff}",
    "日本",
    "<｜DSML｜function_calls>",
    "</｜DSML｜function_calls>",
    "<｜DSML｜tool_calls>",
    "<｜DSML｜invoke name=\"",
    "</｜DSML｜invoke>",
    "<｜DSML｜parameter name=\"",
    "\" string=\"false\">",
    "</｜DSML｜parameter>",
    "<|DSML|",
    "</|DSML|",
    "<minimax:tool_call>",
    "<invoke name=\"",
    "<parameter name=\"",
    "<steptml:invoke name=\"",
    "<｜tool_calls_begin｜>",
    "<seed:tool_call>",
    "<|python_start|>",
    "[a(x=",
    "f(",
    ")",
    "=",
    "<function_calls>",
    "<|channel|>",
    "commentary to=functions.",
    "<|message|>",
    "<|call|>",
    "<|start|>",
    "<|tool_call|>",
    "<function_call>",
    "<|action_start|><|plugin|>",
    "<|action_end|>",
    "<tool_calls>",
    "</tool_calls>",
    "functools",
    "function call<|role_sep|>\n",
    "<tools>",
    "<start_function_call>call:",
    "<escape>",
    "<end_function_call>",
    "</think>",
    "```json\n",
    "functions.terminal:",
    "{\"name\": \"write_file\", \"arguments\": \"{}\"}",
    "{\"type\": \"function\", \"function\": ",
];

fn fragment_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(FRAGMENTS).prop_map(str::to_owned),
        1 => any::<String>(),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1500,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_input_makes_a_parser_panic(text in fragment_text()) {
        for name in names() {
            let parser = get(name).unwrap();
            for call in parser.parse_offered(&text, &["terminal", "write_file"]).calls {
                prop_assert!(!call.function.name.trim().is_empty());
            }
            let parsed = parser.parse(&text);
            for call in &parsed.calls {
                prop_assert!(!call.id.is_empty());
            }
            if let Some(content) = &parsed.content {
                prop_assert_eq!(content.trim(), content.as_str());
            }
        }
    }

    #[test]
    fn rendered_calls_round_trip(
        names_and_values in proptest::collection::vec(
            ("[a-z_]{1,12}", proptest::collection::btree_map("[a-z]{1,6}", "[ -~ü日]{0,12}", 0..4)),
            0..3,
        ),
        content in "[A-Za-z0-9 .,é]{0,20}",
    ) {
        let calls: Vec<ToolCall> = names_and_values
            .iter()
            .map(|(n, args)| ToolCall::new(n.as_str(), serde_json::to_string(args).unwrap()))
            .collect();
        let content = content.trim();
        for name in names() {
            let parser = get(name).unwrap();
            let text = parser.render(content, &calls);
            let parsed = parser.parse(&text);
            prop_assert_eq!(parsed.calls.len(), calls.len(), "{}: {}", name, text);
            for (got, want) in parsed.calls.iter().zip(&calls) {
                prop_assert_eq!(&got.function.name, &want.function.name);
                let got_args: Value = serde_json::from_str(&got.function.arguments).unwrap();
                let want_args: Value = serde_json::from_str(&want.function.arguments).unwrap();
                prop_assert_eq!(got_args, want_args, "{}: {}", name, text);
            }
        }
    }
}
