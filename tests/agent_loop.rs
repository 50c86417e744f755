//! The agent loop's finish rules and error paths against a real HTTP scripted server.

mod common;

use common::Harness;
use hermes_env::testing::{RawTextPolicy, Reply, Script};
use hermes_env::tools::ToolRegistry;
use hermes_runtime::llm::ToolCall;
use serde_json::{json, Value};

#[tokio::test]
async fn plain_answer_finishes_naturally_in_one_turn() {
    let h = Harness::new(Script::new([Reply::text("hello")])).await;
    let r = h.run("hi").await;
    assert_eq!((r.turns_used, r.finished_naturally), (1, true));
    assert_eq!(r.messages.last().unwrap().content, "hello");
    assert_eq!(r.final_response(), Some("hello"));
    assert!(r.llm_error.is_none());
}

#[tokio::test]
async fn tool_calls_run_in_the_sandbox_and_results_are_fed_back() {
    let h = Harness::new(Script::new([
        Reply::tool(
            "write_file",
            json!({"path": "~/a.txt", "content": "hi there\n"}),
        )
        .and_tool(
            "terminal",
            json!({"command": "cat ~/a.txt; echo err >&2; exit 3"}),
        ),
        Reply::text("done"),
    ]))
    .await;
    let r = h.run("write a file").await;
    assert_eq!((r.turns_used, r.finished_naturally), (2, true));
    let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
    let assistant = &r.messages[1];
    assert_eq!(assistant.content, "");
    let calls = assistant.tool_calls.as_ref().unwrap();
    assert_eq!(
        r.messages[2].tool_call_id.as_deref(),
        Some(calls[0].id.as_str())
    );
    assert_eq!(
        r.messages[2].content,
        r#"{"bytes_written": 9, "dirs_created": false}"#
    );
    assert_eq!(
        r.messages[3].content,
        r#"{"output": "hi there\nerr", "exit_code": 3, "error": null}"#
    );
    assert!(
        r.tool_errors.is_empty(),
        "a non-zero exit is not a tool error: {:?}",
        r.tool_errors
    );

    let requests = h.server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["tool_choice"], "auto");
    let names: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "patch",
            "process",
            "read_file",
            "search_files",
            "terminal",
            "write_file"
        ]
    );
    assert_eq!(
        requests[1]["messages"][1]["content"], "",
        "assistant tool-call turns are sent with \"\" content"
    );
    assert_eq!(
        requests[1]["messages"][1]["tool_calls"][0]["function"]["name"],
        "write_file"
    );
}

#[tokio::test]
async fn unknown_tool_gets_an_error_listing_available_tools() {
    let h = Harness::new(Script::new([
        Reply::tool("web_search", json!({"query": "x"})),
        Reply::text("ok"),
    ]))
    .await;
    let r = h.run("search").await;
    assert_eq!(
        r.messages[2].content,
        r#"{"error": "Unknown tool 'web_search'. Available tools: ['patch', 'process', 'read_file', 'search_files', 'terminal', 'write_file']"}"#
    );
    assert_eq!(r.tool_errors.len(), 1);
    assert_eq!(r.tool_errors[0].error, "Unknown tool 'web_search'");
    assert_eq!(r.tool_errors[0].turn, 1);
    assert!(r.finished_naturally);
}

#[tokio::test]
async fn invalid_json_arguments_are_reported_and_not_dispatched() {
    let h = Harness::new(Script::new([
        Reply::tool_raw("write_file", r#"{"path": "~/x.txt", "content": "a""#),
        Reply::text("sorry"),
    ]))
    .await;
    let r = h.run("write").await;
    let result: Value = serde_json::from_str(&r.messages[2].content).unwrap();
    let error = result["error"].as_str().unwrap();
    assert!(
        error.starts_with("Invalid JSON in tool arguments: ")
            && error.ends_with("Please retry with valid JSON."),
        "{error}"
    );
    assert!(r.tool_errors[0].error.starts_with("Invalid JSON: "));
    assert!(
        !h.sandbox.is_created(),
        "nothing was dispatched, so no sandbox was needed"
    );
}

#[tokio::test]
async fn empty_arguments_mean_no_arguments_and_missing_required_is_an_error() {
    let h = Harness::new(Script::new([
        Reply::tool_raw("terminal", ""),
        Reply::text("ok"),
    ]))
    .await;
    let r = h.run("x").await;
    assert_eq!(
        r.messages[2].content,
        r#"{"error": "Missing required argument 'command' for tool 'terminal'"}"#
    );
    assert_eq!(r.tool_errors.len(), 1);
}

#[tokio::test]
async fn max_turns_exhausted_ends_without_a_final_answer() {
    let replies = (0..5).map(|i| Reply::tool("terminal", json!({"command": format!("echo {i}")})));
    let h = Harness::new(Script::new(replies)).await;
    let r = h.run("loop").await;
    assert_eq!((r.turns_used, r.finished_naturally), (5, false));
    assert_eq!(r.messages.last().unwrap().role, "tool");
    assert_eq!(h.server.request_count(), 5);
}

#[tokio::test]
async fn server_errors_are_retried_then_end_the_rollout() {
    let h = Harness::new(Script::new([
        Reply::Status(500, "boom".into()),
        Reply::Status(503, "busy".into()),
        Reply::Status(502, "bad gateway".into()),
    ]))
    .await;
    let r = h.run("x").await;
    assert_eq!((r.turns_used, r.finished_naturally), (1, false));
    assert_eq!(h.server.request_count(), 3, "three attempts on 5xx");
    assert!(
        r.llm_error.as_deref().unwrap().contains("HTTP 502"),
        "{:?}",
        r.llm_error
    );
}

#[tokio::test]
async fn a_5xx_followed_by_success_recovers() {
    let h = Harness::new(Script::new([
        Reply::Status(500, "boom".into()),
        Reply::text("fine"),
    ]))
    .await;
    let r = h.run("x").await;
    assert!(r.finished_naturally);
    assert_eq!(h.server.request_count(), 2);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let h = Harness::new(Script::new([
        Reply::Status(400, "bad request".into()),
        Reply::text("never"),
    ]))
    .await;
    let r = h.run("x").await;
    assert_eq!(h.server.request_count(), 1);
    assert!(!r.finished_naturally);
    assert!(r
        .llm_error
        .unwrap()
        .contains("HTTP 400: {\"error\":{\"message\":\"bad request\""));
}

#[tokio::test]
async fn empty_choices_and_garbage_end_the_rollout() {
    let h = Harness::new(Script::new([Reply::NoChoices])).await;
    let r = h.run("x").await;
    assert_eq!((r.turns_used, r.finished_naturally), (1, false));
    assert_eq!(
        r.llm_error.as_deref(),
        Some("the server returned no choices")
    );

    let h = Harness::new(Script::new([Reply::Raw("not json".into())])).await;
    let r = h.run("x").await;
    assert!(r.llm_error.unwrap().contains("invalid response"));
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let llm = common::client("http://127.0.0.1:9/v1");
    let tools = common::all_tools();
    let provider: std::sync::Arc<dyn hermes_runtime::sandbox::SandboxProvider> =
        std::sync::Arc::new(hermes_runtime::sandbox::LocalProvider::new().unwrap());
    let sandbox = hermes_env::sandbox::TaskSandbox::new("t", provider);
    let permits = tokio::sync::Semaphore::new(1);
    let h = Harness::new(Script::new([])).await;
    let r = hermes_runtime::agent::AgentLoop {
        llm: &llm,
        tools: &tools,
        sandbox: &sandbox,
        tool_permits: &permits,
        settings: &h.settings,
    }
    .run(vec![hermes_env::Message::user("x")])
    .await;
    assert_eq!(
        r.llm_error.as_deref(),
        Some("LLM server http://127.0.0.1:9/v1 unreachable after 3 attempts: connection refused")
    );
}

#[tokio::test]
async fn reasoning_is_extracted_and_kept_on_the_message() {
    let h = Harness::new(Script::new([
        Reply::tool("terminal", json!({"command": "true"})).with_reasoning("I should run it."),
        Reply::text("ok"),
    ]))
    .await;
    let r = h.run("x").await;
    assert_eq!(
        r.reasoning_per_turn,
        [Some("I should run it.".to_owned()), None]
    );
    assert_eq!(
        r.messages[1].reasoning_content.as_deref(),
        Some("I should run it.")
    );
}

#[tokio::test]
async fn timeouts_are_tool_errors_with_exit_124() {
    let h = Harness::new(Script::new([
        Reply::tool("terminal", json!({"command": "sleep 30", "timeout": "1"})),
        Reply::text("ok"),
    ]))
    .await;
    let r = h.run("x").await;
    let result: Value = serde_json::from_str(&r.messages[2].content).unwrap();
    assert_eq!(result["exit_code"], 124);
    assert!(result["output"]
        .as_str()
        .unwrap()
        .ends_with("[Command timed out after 1s]"));
    assert_eq!(r.tool_errors.len(), 1);
}

#[tokio::test]
async fn raw_hermes_markup_in_content_is_parsed_as_tool_calls() {
    let h = Harness::new(Script::new([
        Reply::text(r#"Checking.<tool_call>{"name": "terminal", "arguments": {"command": "echo hi"}}</tool_call>"#),
        Reply::text("done"),
    ]))
    .await;
    let r = h.run("x").await;
    assert_eq!(r.messages[1].content, "Checking.");
    assert_eq!(
        r.messages[1].tool_calls.as_ref().unwrap()[0].function.name,
        "terminal"
    );
    assert_eq!(
        r.messages[2].content,
        r#"{"output": "hi", "exit_code": 0, "error": null}"#
    );
}

#[tokio::test]
async fn raw_markup_of_every_parser_family_is_parsed_as_tool_calls() {
    for name in hermes_runtime::parsers::names() {
        let parser = hermes_runtime::parsers::get(name).unwrap();
        let calls = [ToolCall::new("terminal", r#"{"command": "echo hi"}"#)];
        let mut h = Harness::new(Script::new([
            Reply::text(parser.render("Checking.", &calls)),
            Reply::text("done"),
        ]))
        .await;
        h.settings.tool_call_parser = name.to_owned();
        let r = h.run("x").await;
        assert_eq!(r.messages[1].content, "Checking.", "{name}");
        assert_eq!(
            r.messages[2].content, r#"{"output": "hi", "exit_code": 0, "error": null}"#,
            "{name}"
        );
        assert!(r.finished_naturally, "{name}");
    }
}

#[tokio::test]
async fn the_raw_text_policy_renders_tool_calls_into_content() {
    let parser = hermes_runtime::parsers::get("kimi_k2").unwrap();
    let script = Script::new([
        Reply::tool("write_file", json!({"path": "~/k.txt", "content": "kimi"})),
        Reply::text("ok"),
    ]);
    let mut h = Harness::new(RawTextPolicy::new(script, parser)).await;
    h.settings.tool_call_parser = "kimi_k2".into();
    let r = h.run("x").await;
    let call = &r.messages[1].tool_calls.as_ref().unwrap()[0];
    assert_eq!(call.id, "functions.write_file:0", "Kimi's raw ids are kept");
    assert_eq!(
        r.messages[2].content,
        r#"{"bytes_written": 4, "dirs_created": false}"#
    );
    let raw = &h.server.requests()[1]["messages"][1];
    assert_eq!(raw["tool_calls"][0]["function"]["name"], "write_file");
}

#[tokio::test]
async fn todo_is_answered_from_the_rollout_store_and_memory_is_unavailable() {
    let mut h = Harness::new(Script::new([
        Reply::tool(
            "todo",
            json!({"todos": [{"id": "1", "content": "look", "status": "in_progress"}]}),
        ),
        Reply::tool(
            "todo",
            json!({"merge": true, "todos": [{"id": "1", "status": "completed"}]}),
        )
        .and_tool("memory", json!({"action": "read"})),
        Reply::text("ok"),
    ]))
    .await;
    h.tools = ToolRegistry::builtin()
        .resolve(Some(&["todo".into(), "memory".into()]), None)
        .unwrap()
        .0;
    let r = h.run("plan").await;
    assert_eq!(
        r.messages[2].content,
        r#"{"todos": [{"id": "1", "content": "look", "status": "in_progress"}], "summary": {"total": 1, "pending": 0, "in_progress": 1, "completed": 0, "cancelled": 0}}"#
    );
    let merged: Value = serde_json::from_str(&r.messages[4].content).unwrap();
    assert_eq!(merged["todos"][0]["status"], "completed");
    assert_eq!(
        r.messages[5].content,
        r#"{"error": "Memory is not available in RL environments."}"#
    );
    assert_eq!(r.tool_errors.len(), 1);
    assert!(
        !h.sandbox.is_created(),
        "todo and memory never touch the sandbox"
    );
}

#[tokio::test]
async fn oversized_results_are_saved_in_the_sandbox_with_a_preview() {
    let mut h = Harness::new(Script::new([
        Reply::tool("terminal", json!({"command": "seq 1 2000"})),
        Reply::tool("terminal", json!({"command": "seq 1 300"}))
            .and_tool("terminal", json!({"command": "seq 1 200"})),
        Reply::text("ok"),
    ]))
    .await;
    h.settings
        .result_budget
        .overrides
        .insert("terminal".into(), 5000);
    h.settings.result_budget.preview_chars = 100;
    h.settings.result_budget.turn_chars = 2000;
    let r = h.run("x").await;
    let shown = &r.messages[2].content;
    assert!(shown.starts_with("<persisted-output>\n"), "{shown}");
    assert!(shown.ends_with("\n...\n</persisted-output>"), "{shown}");
    let path = shown
        .lines()
        .find_map(|l| l.strip_prefix("Full output saved to: "))
        .unwrap();
    let saved = h
        .sandbox
        .get()
        .await
        .unwrap()
        .read_file(path)
        .await
        .unwrap();
    let saved: Value = serde_json::from_slice(&saved).unwrap();
    assert!(saved["output"].as_str().unwrap().ends_with("1999\n2000"));
    assert!(shown.contains("Preview (first "), "{shown}");
    // Turn budget: the two results (~1,440 + ~940 chars as JSON) exceed 2,000 together, so
    // the larger one is saved and the smaller one is shown.
    let first = &r.messages[4].content;
    let second = &r.messages[5].content;
    assert!(first.starts_with("<persisted-output>"), "{first}");
    assert!(second.starts_with("{\"output\": \"1\\n2"), "{second}");
    let sandbox = std::sync::Arc::clone(h.sandbox.get().await.unwrap());
    hermes_runtime::tools::cleanup_processes(sandbox.as_ref(), &h.sandbox.own_processes())
        .await
        .unwrap();
    assert!(
        sandbox.read_file(path).await.is_err(),
        "saved results are removed with the tool state"
    );
}
