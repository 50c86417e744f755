//! The example environments (terminal-test locally, swe-pytest on Docker) switched to every
//! tool-call parser family: with `--testing true --env.testing_raw_tool_calls true` the
//! scripted server answers in the family's raw text, the agent loop parses it, and the
//! reference solutions still earn full reward. terminal-test against an HTTP server answering
//! the way local servers do (llama.cpp's fenced JSON, llama-cpp-python's `functions.NAME:`)
//! with `auto`. Also the `parsers check` / `parsers list` subcommands and their JSON.

mod common;

use std::process::Output;

use hermes_env::testing::{Reply, ScriptedServer};
use serde_json::{json, Value};
use tokio::process::Command;

/// Canonical name of every parser family (aliases share an implementation).
fn family_names() -> Vec<&'static str> {
    hermes_runtime::parsers::families()
        .iter()
        .map(|f| f.names[0])
        .collect()
}

async fn run(args: &[&str], dir: &std::path::Path) -> Output {
    run_example("terminal_test", args, dir).await
}

async fn run_example(example: &str, args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(common::example_bin(example))
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .output()
        .await
        .expect("run the example")
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_test_scores_full_reward_with_every_parser() {
    for name in family_names() {
        let tmp = tempfile::tempdir().unwrap();
        let out = run(
            &[
                "process",
                "--testing",
                "true",
                "--env.testing_raw_tool_calls",
                "true",
                "--env.tool_call_parser",
                name,
                "--env.total_steps",
                "3",
                "--env.group_size",
                "1",
                "--env.use_wandb",
                "false",
            ],
            tmp.path(),
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("mean reward 1.000"),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let jsonl = std::fs::read_to_string(tmp.path().join("data/terminal-test.jsonl")).unwrap();
        assert!(
            jsonl.contains("\"tool_calls\""),
            "{name}: calls were parsed"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn swe_pytest_scores_full_reward_with_every_parser_on_docker() {
    common::docker::require_docker();
    for name in family_names() {
        let tmp = tempfile::tempdir().unwrap();
        let out = run_example(
            "swe_pytest",
            &[
                "process",
                "--testing",
                "true",
                "--env.terminal_backend",
                "docker",
                "--env.testing_raw_tool_calls",
                "true",
                "--env.tool_call_parser",
                name,
                "--env.total_steps",
                "2",
                "--env.group_size",
                "1",
                "--env.use_wandb",
                "false",
            ],
            tmp.path(),
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("mean reward 1.000"),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_parser_names_fall_back_to_hermes_with_a_warning_as_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "process",
            "--testing",
            "true",
            "--env.tool_call_parser",
            "qwen4",
            "--env.total_steps",
            "1",
        ],
        tmp.path(),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("WARN")
            && err.contains("unknown tool-call parser 'qwen4'; available: hermes, qwen,")
            && err.contains("falling back to the hermes parser"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn parsers_check_prints_what_a_parser_extracts() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("out.txt");
    std::fs::write(
        &file,
        "Let me check.<tool_call>{\"name\":\"terminal\",\"arguments\":{\"command\":\"ls\"}}</tool_call><tool_call>{\"name\": \"x\", </tool_call>",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = run(
        &["parsers", "check", "--parser", "hermes", path],
        tmp.path(),
    )
    .await;
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("parser: hermes\ncontent: \"Let me check.\"\ntool calls: 2\n"),
        "{text}"
    );
    assert!(text.contains("[1] terminal"), "{text}");
    assert!(text.contains("! invalid arguments"), "{text}");

    let out = run(
        &["parsers", "check", "--parser", "kimi_k2", "--json", path],
        tmp.path(),
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tool_calls"], serde_json::json!([]));

    let out = run(&["parsers", "check", "--parser", "nope", path], tmp.path()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown tool-call parser 'nope'"));

    let out = run(&["parsers", "list"], tmp.path()).await;
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(
        names.lines().any(|l| l.starts_with("deepseek_v3_1 ")
            && l.ends_with("aliases: deepseek_v31, deepseekv31")),
        "{names}"
    );
    let out = run(&["parsers", "list", "--json"], tmp.path()).await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let families = list.as_array().unwrap();
    assert_eq!(families.len(), hermes_runtime::parsers::families().len());
    assert!(
        families.contains(&json!({"name": "gpt_oss", "aliases": ["openai", "gpt-oss", "harmony"]}))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn parsers_check_json_has_a_fixed_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("out.txt");
    std::fs::write(
        &file,
        "Writing it.\n```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```\n<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": </tool_call>",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = run(
        &[
            "parsers",
            "check",
            "--parser",
            "auto",
            "--tools",
            "write_file,terminal",
            "--json",
            path,
        ],
        tmp.path(),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["tool_calls"][0]["id"].take();
    assert!(id.as_str().is_some_and(|id| !id.is_empty()), "{v}");
    assert_eq!(
        v,
        json!({
            "parser": "auto",
            "offered": ["write_file", "terminal"],
            "content": "Writing it.\n```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```",
            "tool_calls": [{
                "id": null,
                "type": "function",
                "function": {"name": "terminal", "arguments": "{\"name\": \"terminal\", \"arguments\": {\"command\":"},
                "arguments_error": v["tool_calls"][0]["arguments_error"].clone(),
            }],
        }),
        "explicit markup wins over unmarked calls"
    );
    assert!(v["tool_calls"][0]["arguments_error"]
        .as_str()
        .is_some_and(|e| !e.is_empty()));

    std::fs::write(
        &file,
        "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```",
    )
    .unwrap();
    let out = run(
        &[
            "parsers",
            "check",
            "--parser",
            "auto",
            "--tools",
            "write_file,terminal",
            "--json",
            path,
        ],
        tmp.path(),
    )
    .await;
    let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["tool_calls"][0]["id"].take();
    assert_eq!(
        v,
        json!({
            "parser": "auto",
            "offered": ["write_file", "terminal"],
            "content": null,
            "tool_calls": [{
                "id": null,
                "type": "function",
                "function": {"name": "write_file", "arguments": "{\"path\": \"a.txt\"}"},
                "arguments_error": null,
            }],
        })
    );
}

/// A chat server that answers the first turn with `first` as plain `content` (no
/// `tool_calls`, as local servers do when their parser does not match the model) and
/// finishes once a tool result came back.
async fn local_server(first: &'static str) -> ScriptedServer {
    ScriptedServer::start(move |request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "tool") {
            Reply::text("Done.")
        } else {
            Reply::text(first)
        }
    })
    .await
    .unwrap()
}

/// terminal-test's first task against `server` with `parser`; returns the mean reward line.
async fn first_task_reward(server: &ScriptedServer, parser: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let url = server.base_url();
    let out = run(
        &[
            "process",
            "--env.total_steps",
            "1",
            "--env.group_size",
            "1",
            "--env.use_wandb",
            "false",
            "--env.tool_call_parser",
            parser,
            "--openai.base_url",
            &url,
            "--openai.model_name",
            "qwen2.5-coder-1.5b-instruct",
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
        ],
        tmp.path(),
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_scores_a_llama_server_fenced_json_call() {
    // What Qwen2.5-Coder-1.5B-Instruct behind `llama-server --jinja` answers to the first task.
    let server = local_server(
        "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"~/greeting.txt\", \"content\": \"Hello from Hermes Agent\"}}\n```",
    )
    .await;
    let auto = first_task_reward(&server, "auto").await;
    assert!(auto.contains("mean reward 1.000"), "{auto}");
    let hermes = first_task_reward(&server, "hermes").await;
    assert!(hermes.contains("mean reward 0.000"), "{hermes}");
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_scores_a_llama_cpp_python_functions_prefix_call() {
    // llama-cpp-python's `chatml-function-calling` handler with a system prompt present.
    let server = local_server(
        "functions.write_file:\n{\"path\": \"~/greeting.txt\", \"content\": \"Hello from Hermes Agent\"}",
    )
    .await;
    let auto = first_task_reward(&server, "auto").await;
    assert!(auto.contains("mean reward 1.000"), "{auto}");
}
