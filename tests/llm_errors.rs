//! What an inference server's error means for the run: a context-length error (the bodies
//! vLLM, SGLang, llama.cpp's server and OpenAI send) ends the rollout as the model's own
//! outcome `context_exceeded`, verified and kept, never retried; a wrong key, an unknown model
//! or a request the server cannot accept stops the run at once with one line.

#[allow(dead_code)]
#[path = "../examples/terminal_test.rs"]
mod terminal_test;

mod common;

use hermes_env::testing::{Kit, Reply, ScriptedServer};
use hermes_env::RewardOutcome;
use hermes_runtime::env::Environment;
use hermes_runtime::modes::collect_group;
use serde_json::{json, Value};
use std::time::Duration;
use terminal_test::TerminalTest;

/// Real context-length error bodies, as each server sends them (all with HTTP 400).
const CONTEXT_ERRORS: [(&str, &str); 5] = [
    (
        "vLLM",
        r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 4608 tokens (4352 in the messages, 256 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
    ),
    (
        "vLLM (v1 engine)",
        r#"{"object":"error","message":"The decoder prompt (length 5951) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}"#,
    ),
    (
        "SGLang",
        r#"{"object":"error","message":"The input (4352 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}"#,
    ),
    (
        "llama.cpp server",
        r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4352,"n_ctx":4096}}"#,
    ),
    (
        "OpenAI",
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
    ),
];

/// The first turn solves the first task (the greeting file); every later turn gets `body`.
fn solves_then(status: u16, body: &'static str) -> impl Fn(&Value) -> Reply + Send + Sync {
    move |request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::ErrorBody(status, body.to_owned())
        } else {
            Reply::tool(
                "terminal",
                json!({"command": "echo 'Hello from Hermes Agent' > ~/greeting.txt"}),
            )
        }
    }
}

#[tokio::test]
async fn each_servers_context_error_ends_the_rollout_as_context_exceeded_and_keeps_the_group() {
    for (server, body) in CONTEXT_ERRORS {
        let mut kit = Kit::<TerminalTest>::builder()
            .policy(solves_then(400, body))
            .arg("--env.group_size", "2")
            .start()
            .await
            .unwrap();
        let item = kit.env_mut().get_next_item().await.unwrap();
        let run = collect_group(kit.env(), kit.runtime(), item).await;
        let group = run
            .result
            .unwrap_or_else(|f| panic!("{server}: the group is kept, not failed: {f:?}"));
        assert_eq!(
            kit.server().unwrap().request_count(),
            4,
            "{server}: two requests per rollout (the tool call, the context error), none retried"
        );
        assert_eq!(run.failures.total(), 0, "{server}: no failed attempt");
        for r in &run.rollouts {
            assert!(
                matches!(&r.outcome, RewardOutcome::ContextExceeded { message }
                    if message.contains("exceeds the model's context")),
                "{server}: {:?}",
                r.outcome
            );
            assert!(r.run.llm_error.is_none(), "{server}: not an LLM failure");
            assert!(
                r.run.messages.iter().any(|m| m.role == "tool"),
                "{server}: the conversation so far is kept"
            );
        }
        assert_eq!(
            group.scores,
            [1.0, 1.0],
            "{server}: the verifier scored the conversation so far (the file was written)"
        );
    }
}

/// `process` of the terminal_test example against `server`, one rollout at a time (so "one
/// request" is exact, not a bound).
async fn process_against(server: &ScriptedServer) -> (std::process::ExitStatus, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(common::example_bin("terminal_test"))
        .args([
            "process",
            "--env.total_steps",
            "3",
            "--env.group_size",
            "1",
            "--env.max_num_workers",
            "1",
            "--env.use_wandb",
            "false",
            "--env.data_path_to_save_groups",
            "output.jsonl",
            "--openai.base_url",
        ])
        .arg(server.base_url())
        .args([
            "--openai.model_name",
            "M",
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
        ])
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_an_unknown_model_or_a_bad_request_stops_the_run_after_one_request() {
    let cases: [(u16, &str, &str); 4] = [
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            "check --openai.api_key",
        ),
        (
            404,
            r#"{"object":"error","message":"The model `M` does not exist.","type":"NotFoundError","param":null,"code":404}"#,
            "check --openai.model_name",
        ),
        (
            400,
            r#"{"object":"error","message":"[{'type': 'extra_forbidden', 'loc': ('body', 'bogus'), 'msg': 'Extra inputs are not permitted'}]","type":"BadRequestError","param":null,"code":400}"#,
            "cannot accept this run's requests",
        ),
        (
            422,
            r#"{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required"}]}"#,
            "cannot accept this run's requests",
        ),
    ];
    for (status, body, hint) in cases {
        let server =
            ScriptedServer::start(move |_: &Value| Reply::ErrorBody(status, body.to_owned()))
                .await
                .unwrap();
        let (exit, stderr) = process_against(&server).await;
        assert!(!exit.success(), "HTTP {status}: the run fails: {stderr}");
        assert_eq!(
            server.request_count(),
            1,
            "HTTP {status}: exactly one request, never retried: {stderr}"
        );
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(&format!("HTTP {status}")))
            .collect();
        assert_eq!(lines.len(), 1, "HTTP {status}: one line: {stderr}");
        assert!(
            lines[0].starts_with("error: LLM server ") && lines[0].contains(hint),
            "HTTP {status}: the line names the knob: {}",
            lines[0]
        );
        assert!(
            !stderr.contains("re-running") && !stderr.contains("retrying"),
            "HTTP {status}: not treated as an outage: {stderr}"
        );
    }
}

/// `serve` against the real trajectory API and a server answering 401: it stops after that one
/// request with one line naming the knob, still disconnecting from the API on the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stops_on_a_wrong_key_after_one_request_and_disconnects() {
    use common::atropos::{free_port, Api, Env, Trainer};
    let api = Api::start(free_port()).await;
    let tmp = tempfile::tempdir().unwrap();
    let llm = ScriptedServer::start(|_: &Value| {
        Reply::ErrorBody(
            401,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#.into(),
        )
    })
    .await
    .unwrap();
    let mut env = Env::start(
        &api.url,
        tmp.path(),
        &[
            "--testing",
            "false",
            "--openai.server_type",
            "openai",
            "--openai.base_url",
            &llm.base_url(),
            "--openai.health_check",
            "false",
            "--env.max_num_workers",
            "1",
            "--env.group_size",
            "1",
        ],
    );
    env.expect_line("waiting for the trainer to start", Duration::from_secs(60))
        .await;
    let _trainer = Trainer::register(&api.url, 64, 100).await;
    let status = tokio::time::timeout(Duration::from_secs(60), env.child.wait())
        .await
        .expect("serve stops on the refusal")
        .unwrap();
    assert!(!status.success(), "exits non-zero: {status}");
    let line = env
        .expect_line("error: LLM server", Duration::from_secs(10))
        .await;
    assert!(
        line.contains("HTTP 401") && line.contains("check --openai.api_key"),
        "{line}"
    );
    env.expect_line(
        "disconnected from the trajectory API",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(llm.request_count(), 1, "one request, never retried");
    api.kill().await;
}
