//! The model is an adversary: no tool argument may panic us. The three arguments that used to
//! panic (a V4A hunk longer than the file, `process log` and `search_files` with offsets near
//! `u64::MAX`) are tool errors or empty pages now; a panicking tool called from reward code
//! is a tool error too; and a property test feeds random JSON arguments to every built-in
//! tool on a real local sandbox and requires 0 panics.

use std::sync::Arc;
use std::time::Duration;

use hermes_env::ToolContext;
use hermes_runtime::sandbox::{LocalProvider, SandboxProvider, TaskSandbox};
use hermes_runtime::tools::{
    typed_tool, FakeWebBackend, Tool, ToolCallContext, ToolRegistry, ToolSet,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Registers further tools.
type AddTools = Box<dyn FnOnce(&mut ToolRegistry)>;

/// Every built-in tool (web over the fake backend), plus what `extra` registers.
fn every_tool(extra: Option<AddTools>) -> ToolSet {
    let mut registry = ToolRegistry::builtin().with_web(Arc::new(FakeWebBackend::new()));
    if let Some(add) = extra {
        add(&mut registry);
    }
    registry.resolve(None, None).expect("builtin toolsets").0
}

fn sandbox(provider: &Arc<dyn SandboxProvider>, name: &str) -> TaskSandbox {
    TaskSandbox::new(
        format!("panics-{name}-{}", std::process::id()),
        Arc::clone(provider),
    )
}

async fn call(tools: &ToolSet, sandbox: &TaskSandbox, name: &str, args: Value) -> Value {
    let args: Map<String, Value> = serde_json::from_value(args).expect("object");
    let cx = ToolCallContext {
        sandbox,
        terminal_timeout: Duration::from_secs(2),
        user_task: "",
    };
    tools.call(name, args, &cx).await
}

fn local() -> Arc<dyn SandboxProvider> {
    Arc::new(LocalProvider::new().expect("local provider"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_v4a_hunk_longer_than_the_file_is_a_tool_error() {
    let (provider, tools) = (local(), every_tool(None));
    let sb = sandbox(&provider, "v4a");
    let w = call(
        &tools,
        &sb,
        "write_file",
        json!({"path": "short.txt", "content": "one\n"}),
    )
    .await;
    assert!(w.get("error").is_none(), "{w}");
    let patch =
        "*** Begin Patch\n*** Update File: short.txt\n@@\n-one\n-two\n-three\n+x\n*** End Patch\n";
    let r = call(
        &tools,
        &sb,
        "patch",
        json!({"mode": "patch", "patch": patch}),
    )
    .await;
    let error = r["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error: {r}"));
    assert!(error.contains("does not apply"), "{error}");
    assert!(!error.contains("panic"), "{error}");
    sb.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn process_log_with_huge_offset_and_limit_is_a_page() {
    let (provider, tools) = (local(), every_tool(None));
    let sb = sandbox(&provider, "log");
    let started = call(
        &tools,
        &sb,
        "terminal",
        json!({"command": "printf 'a\\nb\\n'", "background": true}),
    )
    .await;
    let id = started["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    call(
        &tools,
        &sb,
        "process",
        json!({"action": "wait", "session_id": id}),
    )
    .await;
    for (offset, limit) in [
        (u64::MAX, u64::MAX),
        (1, u64::MAX),
        (0, u64::MAX),
        (u64::MAX, 1),
    ] {
        let r = call(
            &tools,
            &sb,
            "process",
            json!({"action": "log", "session_id": id, "offset": offset, "limit": limit}),
        )
        .await;
        assert!(
            r.get("error").is_none(),
            "offset {offset} limit {limit}: {r}"
        );
        assert_eq!(r["total_lines"], 2, "{r}");
    }
    let sandbox = Arc::clone(sb.get().await.unwrap());
    hermes_runtime::tools::cleanup_processes(sandbox.as_ref(), &sb.own_processes())
        .await
        .unwrap();
    sb.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn search_files_with_a_huge_offset_is_an_empty_page() {
    let (provider, tools) = (local(), every_tool(None));
    let sb = sandbox(&provider, "search");
    call(
        &tools,
        &sb,
        "write_file",
        json!({"path": "a.txt", "content": "needle\n"}),
    )
    .await;
    for target in ["content", "files"] {
        for mode in ["content", "files_only", "count"] {
            let r = call(
                &tools,
                &sb,
                "search_files",
                json!({
                    "pattern": if target == "files" { "*.txt" } else { "needle" },
                    "target": target, "output_mode": mode,
                    "offset": u64::MAX, "limit": 10_000,
                }),
            )
            .await;
            assert!(r.get("error").is_none(), "{target}/{mode}: {r}");
        }
    }
    sb.close().await.unwrap();
}

/// Arguments of the panicking tool.
#[derive(serde::Deserialize, hermes_env::schemars::JsonSchema)]
#[schemars(crate = "hermes_env::schemars")]
struct NoArgs {}

/// A tool that panics, to prove `ToolContext::call_tool` turns a panic into a tool error.
fn exploding() -> impl Tool {
    typed_tool("explode", "Panics.", "explode", |_: NoArgs| async move {
        if true {
            panic!("boom from a tool");
        }
        Ok::<Value, String>(Value::Null)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_tool_called_from_reward_code_is_a_tool_error() {
    let provider = local();
    let tools = every_tool(Some(Box::new(|r: &mut ToolRegistry| {
        r.register(exploding())
    })));
    let sb = Arc::new(sandbox(&provider, "ctx"));
    let ctx = ToolContext::new(Arc::clone(&sb), Arc::new(tools), Duration::from_secs(5));
    let shown = ctx.call_tool("explode", json!({})).await;
    assert!(
        shown.contains("Tool execution failed: panic: boom from a tool"),
        "{shown}"
    );
    sb.close().await.unwrap();
}

/// Interesting strings, with no `/` and no shell metacharacters, so a random path or command
/// stays inside the scratch directory and does nothing harmful.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("~".to_owned()),
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just("a.txt".to_owned()),
        Just("patch".to_owned()),
        Just("replace".to_owned()),
        Just("log".to_owned()),
        Just("list".to_owned()),
        Just("files".to_owned()),
        Just("count".to_owned()),
        Just("*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n-y\n+z\n*** End Patch".to_owned()),
        "[a-z0-9._~-]{0,12}",
        "\\PC{0,8}".prop_map(|s| s.replace(['/', '$', '`', ';', '|', '&', '>', '<'], "_")),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => Just(json!(u64::MAX)),
        1 => Just(json!(u64::MAX - 1)),
        1 => Just(json!(i64::MIN)),
        1 => Just(json!(0)),
        1 => Just(json!(-1)),
        1 => Just(json!(1e308)),
        1 => Just(json!(f64::MIN_POSITIVE)),
        2 => (0u64..1_000).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(text(), inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Commands the fuzzer may run: harmless whatever the other arguments are.
const COMMANDS: &[&str] = &["true", "echo hi", "exit 3", "printf x", ""];

/// A value for one schema property: mostly of its declared type (an enum's values, numbers
/// near the edges, interesting strings), sometimes anything; `command` only from
/// [`COMMANDS`].
fn property(name: &str, schema: &Value) -> BoxedStrategy<Value> {
    if name == "command" {
        return prop_oneof![
            4 => prop::sample::select(COMMANDS).prop_map(Value::from),
            1 => number(),
        ]
        .boxed();
    }
    let typed = match (
        schema.get("enum").and_then(Value::as_array),
        schema["type"].as_str(),
    ) {
        (Some(values), _) => prop::sample::select(values.clone()).boxed(),
        (None, Some("integer" | "number")) => number().boxed(),
        (None, Some("boolean")) => any::<bool>().prop_map(Value::from).boxed(),
        (None, Some("string")) => text().prop_map(Value::from).boxed(),
        _ => value().boxed(),
    };
    prop_oneof![9 => typed, 1 => value()].boxed()
}

/// Random arguments for a tool: each property of its schema (and a stray key) present or
/// not, required ones more often.
fn arguments(schema: &Value) -> impl Strategy<Value = Map<String, Value>> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut per_key: Vec<BoxedStrategy<(String, Option<Value>)>> = Vec::new();
    let props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (name, prop) in props.iter().chain([(&"stray".to_owned(), &Value::Null)]) {
        let p = if required.contains(&name.as_str()) {
            0.95
        } else {
            0.6
        };
        let key = name.clone();
        per_key.push(
            prop::option::weighted(p, property(name, prop))
                .prop_map(move |v| (key.clone(), v))
                .boxed(),
        );
    }
    per_key.prop_map(|pairs| {
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    })
}

/// Random cases per tool.
const CASES: u32 = 256;

#[test]
fn random_arguments_never_panic_a_builtin_tool() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let provider = local();
    let tools = every_tool(None);
    let sb = sandbox(&provider, "fuzz");
    // A file for `patch` hunks and `read_file` to find (the pool's hunk is longer than it).
    let seeded = runtime.block_on(call(
        &tools,
        &sb,
        "write_file",
        json!({"path": "a.txt", "content": "x\n"}),
    ));
    assert!(seeded.get("error").is_none(), "{seeded}");
    let names: Vec<String> = tools.names().iter().map(|n| n.to_string()).collect();
    assert!(names.len() >= 10, "expected every built-in tool: {names:?}");
    let mut tested = Vec::new();
    for name in &names {
        let schema = tools.get(name).unwrap().schema().function.parameters;
        let config = ProptestConfig {
            cases: CASES,
            failure_persistence: None,
            ..ProptestConfig::default()
        };
        let mut runner = proptest::test_runner::TestRunner::new(config);
        let result = runner.run(&arguments(&schema), |args| {
            let outcome = runtime.block_on(async {
                let cx = ToolCallContext {
                    sandbox: &sb,
                    terminal_timeout: Duration::from_secs(2),
                    user_task: "",
                };
                futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(tools.call(
                    name,
                    args.clone(),
                    &cx,
                )))
                .await
            });
            prop_assert!(
                outcome.is_ok(),
                "{name} panicked on {}",
                Value::Object(args)
            );
            Ok(())
        });
        if let Err(e) = result {
            panic!("{name}: {e}");
        }
        tested.push(name.clone());
    }
    runtime.block_on(async {
        if sb.is_created() {
            let sandbox = Arc::clone(sb.get().await.unwrap());
            hermes_runtime::tools::cleanup_processes(sandbox.as_ref(), &sb.own_processes())
                .await
                .unwrap();
        }
        sb.close().await.unwrap();
    });
    eprintln!("fuzzed {} tools × {CASES} cases: {tested:?}", tested.len());
}
