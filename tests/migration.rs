//! Migrating from the Python originals: the upstream YAML files of the migration audit
//! (reproduced in `tests/upstream_configs/` from its key lists) load with no unknown-key
//! warning for a key the port supports, upstream backends get a one-line refusal, and an
//! environment's declared default server takes its key from `./.env` without overriding an
//! exported variable.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstream_configs")
        .join(name)
}

async fn run(example: &str, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(common::example_bin(example));
    command
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("TAVILY_API_KEY")
        .env_remove("SEARXNG_URL")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", dir.join("empty-hub-cache"))
        .env("WANDB_MODE", "disabled");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().await.expect("run the example")
}

/// The keys the run warned about as unknown (`env.presets`, `top-level setup`, …).
fn unknown_keys(stderr: &str) -> BTreeSet<String> {
    stderr
        .lines()
        .filter_map(|line| {
            if let Some((_, rest)) = line.split_once("unknown key ") {
                rest.split_whitespace().next().map(str::to_owned)
            } else if let Some((_, rest)) = line.split_once("unknown top-level key '") {
                rest.split('\'').next().map(|k| format!("top-level {k}"))
            } else {
                None
            }
        })
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_test_default_yaml_loads_clean_and_modal_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = fixture("terminal_test_default.yaml");
    let yaml = yaml.to_str().unwrap();
    let key = [("OPENROUTER_API_KEY", "sk-or-test")];
    let out = run(
        "terminal_test",
        &["process", "--config", yaml],
        tmp.path(),
        &key,
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(unknown_keys(&err), set(&[]), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "error: terminal_backend 'modal' is not supported; supported backends: local, docker, ssh; use docker \
         (a container per rollout, the same isolation on your own daemon; --env.docker_host reaches a remote one)"
    );
    for backend in ["daytona", "singularity", "ssh-typo"] {
        let flags = [
            "process",
            "--config",
            yaml,
            "--env.terminal_backend",
            backend,
        ];
        let out = run("terminal_test", &flags, tmp.path(), &key).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("error: terminal_backend '{backend}' is not supported; supported backends: local, docker, ssh;")),
            "{err}"
        );
    }
    // With the backend swapped, the upstream file runs as it is.
    let flags = [
        "process",
        "--config",
        yaml,
        "--env.terminal_backend",
        "local",
        "--testing",
        "true",
        "--env.total_steps",
        "1",
    ];
    let out = run("terminal_test", &flags, tmp.path(), &[]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(unknown_keys(&err), set(&[]), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn terminalbench_2_default_yaml_loads_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = fixture("terminalbench_2_default.yaml");
    let flags = ["evaluate", "--config", yaml.to_str().unwrap()];
    let key = [("OPENROUTER_API_KEY", "sk-or-test")];
    let out = run("terminal_bench", &flags, tmp.path(), &key).await;
    let err = String::from_utf8_lossy(&out.stderr);
    // test_timeout / task_timeout are the env's own fields; max_concurrent_tasks is
    // max_eval_workers; nothing is unknown. The run stops at the backend, before any task.
    assert_eq!(unknown_keys(&err), set(&[]), "{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("terminal_backend 'modal' is not supported"),
        "{err}"
    );
}

/// Runs an upstream file whose environment the port lacks on terminal_test (local backend,
/// scripted model) and returns the keys it warned about.
async fn keys_warned_on_terminal_test(name: &str) -> BTreeSet<String> {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = fixture(name);
    let flags = [
        "process",
        "--config",
        yaml.to_str().unwrap(),
        "--testing",
        "true",
        "--env.total_steps",
        "1",
        "--env.terminal_backend",
        "local",
        "--env.enabled_toolsets",
        "terminal,file",
    ];
    let out = run("terminal_test", &flags, tmp.path(), &[]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    unknown_keys(&err)
}

#[tokio::test(flavor = "multi_thread")]
async fn yc_bench_yaml_warns_only_about_the_keys_of_its_missing_environment() {
    let warned = keys_warned_on_terminal_test("yc_bench_default.yaml").await;
    assert_eq!(
        warned,
        set(&[
            "env.db_dir",
            "env.funds_weight",
            "env.presets",
            "env.run_timeout",
            "env.seeds",
            "env.survival_weight",
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finetune_bench_yaml_warns_only_about_the_keys_of_its_missing_environment() {
    let warned = keys_warned_on_terminal_test("finetune_bench_default.yaml").await;
    assert_eq!(
        warned,
        set(&[
            "env.custom_cases_dir",
            "env.format_compliance_minimum",
            "env.prompt_bank_path",
            "env.regression_threshold_pass_rate",
            "top-level setup",
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn atropos_example_yaml_loads_clean_weight_included() {
    let warned = keys_warned_on_terminal_test("atropos_example.yaml").await;
    assert_eq!(warned, set(&[]));
}

/// A chat-completions server that records each request's Authorization header and answers
/// with a final message.
async fn recording_server() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(seen): State<Arc<Mutex<Vec<Option<String>>>>>,
                 headers: HeaderMap,
                 Json(_): Json<Value>| async move {
                    let auth = headers
                        .get("authorization")
                        .map(|v| v.to_str().unwrap_or_default().to_owned());
                    seen.lock().unwrap().push(auth);
                    Json(json!({
                        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "done"}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                    }))
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_key_comes_from_dot_env_and_an_exported_variable_wins() {
    let (url, seen) = recording_server().await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join(".env"),
        "# as upstream's .env\nOPENROUTER_API_KEY=sk-or-from-dotenv\n",
    )
    .unwrap();
    let yaml = tmp.path().join("run.yaml");
    std::fs::write(
        &yaml,
        format!(
            "openai:\n  base_url: \"{url}\"\n  model_name: m\n  api_key_env: OPENROUTER_API_KEY\nenv:\n  use_wandb: false\n"
        ),
    )
    .unwrap();
    let flags = [
        "process",
        "--config",
        yaml.to_str().unwrap(),
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
    ];
    let out = run("terminal_test", &flags, tmp.path(), &[]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("loaded 1 variable(s) from .env (OPENROUTER_API_KEY)")
            && !err.contains("sk-or-from-dotenv"),
        "{err}"
    );
    let from_file = seen.lock().unwrap().drain(..).collect::<Vec<_>>();
    assert!(!from_file.is_empty());
    assert!(
        from_file
            .iter()
            .all(|a| a.as_deref() == Some("Bearer sk-or-from-dotenv")),
        "{from_file:?}"
    );

    let exported = [("OPENROUTER_API_KEY", "sk-or-from-shell")];
    let out = run("terminal_test", &flags, tmp.path(), &exported).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("already set, kept from the environment: OPENROUTER_API_KEY"),
        "{err}"
    );
    let from_shell = seen.lock().unwrap().drain(..).collect::<Vec<_>>();
    assert!(
        from_shell
            .iter()
            .all(|a| a.as_deref() == Some("Bearer sk-or-from-shell")),
        "{from_shell:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn moving_the_default_server_elsewhere_never_sends_its_key_there() {
    let (url, seen) = recording_server().await;
    let tmp = tempfile::tempdir().unwrap();
    let flags = [
        "process",
        "--openai.base_url",
        url.as_str(),
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
        "--env.use_wandb",
        "false",
    ];
    let exported = [("OPENROUTER_API_KEY", "sk-or-secret")];
    let out = run("terminal_test", &flags, tmp.path(), &exported).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let auth = seen.lock().unwrap().clone();
    assert!(!auth.is_empty());
    assert!(auth.iter().all(Option::is_none), "{auth:?}");
}
