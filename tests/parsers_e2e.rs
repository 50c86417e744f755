//! The example environments (terminal-test locally, swe-pytest on Docker) switched to every tool-call parser: with `--testing true
//! --env.testing_raw_tool_calls true` the scripted server answers in the parser family's raw
//! text, the agent loop parses it, and the reference solutions still earn full reward. Also
//! the `parsers check` subcommand.

mod common;

use std::process::Output;

use tokio::process::Command;

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
    for name in hermes_env::parsers::names() {
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
    for name in hermes_env::parsers::names() {
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
    assert!(names.lines().any(|l| l == "deepseek_v31"), "{names}");
}
