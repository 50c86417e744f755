//! Secrets never reach the model or anything saved: the `terminal_test` example runs with
//! `OPENAI_API_KEY`, `WANDB_API_KEY` and `AWS_SECRET_ACCESS_KEY` in its environment (and an
//! api key on its command line) on the default local backend, and a scripted model runs
//! `env` and reads `/proc/$PPID/environ` and `/proc/$PPID/cmdline` (its parent is the env
//! process itself). None of the values may appear in what the model was sent, the JSONL, the
//! HTML viewer, the W&B offline run, the evaluate files or the logs, and neither may the
//! values of the author's `container_env` (the model may print them: they are in its sandbox).
//! Nor can a command read the env process's memory or reach the terminal it runs in.

mod common;

use std::path::Path;
use std::process::Output;

use hermes_env::testing::{Reply, ScriptedServer};
use serde_json::{json, Value};
use tokio::process::Command;

const OPENAI_KEY: &str = "sk-env-openai-7c1f0a9e55d2";
const WANDB_KEY: &str = "wandb-env-key-3b8e61d0c4a7f2";
const AWS_SECRET: &str = "aws-env-secret-5e2d9c7b1a0f";
const CLI_KEY: &str = "sk-cli-openai-90d4e7a2b6c1";
const SECRETS: [&str; 4] = [OPENAI_KEY, WANDB_KEY, AWS_SECRET, CLI_KEY];
/// The author's `container_env`: its value reaches the sandbox (on purpose) but no saved
/// config.
const CONTAINER_ENV: &str = r#"["HERMES_E2E_SETTING=cfg-value-5a1b2c3d"]"#;

/// What the scripted model runs on its first turn.
const SNOOP: &str = "env; echo '==ENVIRON=='; tr '\\0' '\\n' < /proc/$PPID/environ; \
                     echo '==CMDLINE=='; tr '\\0' ' ' < /proc/$PPID/cmdline; echo '==END=='";

/// A model that snoops on its first turn and stops on the second.
async fn snooping_model() -> ScriptedServer {
    ScriptedServer::start(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::text("done")
        } else {
            Reply::tool("terminal", json!({"command": SNOOP}))
        }
    })
    .await
    .unwrap()
}

async fn run(args: &[&str], tmp: &Path) -> Output {
    Command::new(common::example_bin("terminal_test"))
        .args(args)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("WANDB_API_KEY", WANDB_KEY)
        .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        .env("WANDB_MODE", "offline")
        .env("WANDB_DIR", tmp)
        .env("HERMES_WANDB_FINISH_TIMEOUT", "3")
        .output()
        .await
        .expect("run the example")
}

/// Every file below `dir`, as text.
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = entry.path();
        if p.is_dir() {
            out.push_str(&all_text(&p));
        } else {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
        }
    }
    out
}

/// The text between the last `start` (the tool result, after the command) and the following `end`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.rfind(start).expect("start marker") + start.len();
    let to = from + text[from..].find(end).expect("end marker");
    &text[from..to]
}

fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(
            !text.contains(secret),
            "{what} contains the secret {secret}"
        );
    }
}

fn server_args(url: &str) -> Vec<String> {
    [
        "--openai.base_url",
        url,
        "--openai.model_name",
        "M",
        "--openai.server_type",
        "openai",
        "--openai.health_check",
        "false",
        "--openai.api_key",
        CLI_KEY,
    ]
    .map(String::from)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_of_the_env_process_reaches_the_model_or_any_output() {
    let server = snooping_model().await;
    let tmp = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = [
        "process",
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
        "--env.use_wandb",
        "true",
        "--env.data_path_to_save_groups",
        "out.jsonl",
        "--env.container_env",
        CONTAINER_ENV,
    ]
    .map(String::from)
    .to_vec();
    args.extend(server_args(&server.base_url()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&argv, tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");

    // The model's command ran and read all three sources (so the test is not vacuous).
    let jsonl = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    for marker in [
        "==ENVIRON==",
        "==CMDLINE==",
        "==END==",
        "HOME=",
        "--openai.api_key",
    ] {
        assert!(
            jsonl.contains(marker),
            "the tool result lacks {marker}: {jsonl}"
        );
    }
    assert!(
        !jsonl.contains("CARGO_MANIFEST_DIR") && !foreign_tmpdir(&jsonl),
        "host variables outside the allowlist reached the command: {jsonl}"
    );
    let environ = between(&jsonl, "==ENVIRON==", "==CMDLINE==");
    assert!(
        !environ.contains('='),
        "/proc/<env pid>/environ is zeroed: {environ}"
    );
    let cmdline = between(&jsonl, "==CMDLINE==", "==END==");
    assert!(
        cmdline.contains(&format!("--openai.api_key {}", "*".repeat(CLI_KEY.len()))),
        "/proc/<env pid>/cmdline hides the key: {cmdline}"
    );
    let sent: String = server.requests().iter().map(Value::to_string).collect();
    assert!(
        sent.contains("==CMDLINE=="),
        "the model saw the tool result"
    );
    assert_clean("what the model was sent", &sent);
    assert_clean("the JSONL", &jsonl);
    assert_clean(
        "the HTML viewer",
        &std::fs::read_to_string(tmp.path().join("out.html")).unwrap(),
    );
    let wandb = tmp.path().join("wandb");
    assert!(wandb.is_dir(), "an offline W&B run: {stderr}");
    assert_clean("the W&B offline run", &all_text(&wandb));
    assert!(
        jsonl.contains("HERMES_E2E_SETTING=<redacted>"),
        "container_env reached the sandbox, and its value is a secret to the JSONL"
    );
    for (what, text) in [
        ("the JSONL", jsonl.clone()),
        (
            "the HTML viewer",
            std::fs::read_to_string(tmp.path().join("out.html")).unwrap(),
        ),
        ("the W&B offline run", all_text(&wandb)),
        ("the logs", stderr.clone()),
    ] {
        assert!(
            !text.contains("cfg-value-5a1b2c3d"),
            "a container_env value reached {what}"
        );
    }
    let run_dir = std::fs::read_dir(&wandb)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let config = std::fs::read_to_string(run_dir.join("files/config.json")).unwrap();
    assert!(
        config.contains("HERMES_E2E_SETTING=<redacted>") && !config.contains("cfg-value-5a1b2c3d"),
        "the W&B run config redacts container_env values: {config}"
    );
    assert_clean("stdout", &String::from_utf8_lossy(&out.stdout));
    assert_clean("the logs", &stderr);

    let mut args: Vec<String> = [
        "evaluate",
        "--env.eval_size",
        "1",
        "--env.data_dir_to_save_evals",
        "evals",
        "--env.container_env",
        CONTAINER_ENV,
    ]
    .map(String::from)
    .to_vec();
    args.extend(server_args(&server.base_url()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&argv, tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let evals = all_text(&tmp.path().join("evals"));
    assert!(
        evals.contains("==ENVIRON=="),
        "samples hold the tool result"
    );
    assert_clean("the evaluate files", &evals);
    let config = std::fs::read_to_string(tmp.path().join("evals/evaluate_config.yaml")).unwrap();
    assert!(
        config.contains("HERMES_E2E_SETTING=<redacted>") && config.contains("api_key: <redacted>"),
        "{config}"
    );
    assert!(!evals.contains("cfg-value-5a1b2c3d"), "{evals}");
    assert_clean("the evaluate logs", &stderr);
    let sent: String = server.requests().iter().map(Value::to_string).collect();
    assert_clean("what the model was sent during evaluate", &sent);
}

/// `serve` with the local backend says once that it is not isolated; `process` does not.
#[tokio::test(flavor = "multi_thread")]
async fn serve_with_the_local_backend_warns_once() {
    const WARNING: &str = "the local sandbox backend runs the model's commands as this user";
    let tmp = tempfile::tempdir().unwrap();
    let serve = [
        "serve",
        "--testing",
        "true",
        "--env.use_wandb",
        "false",
        "--env.rollout_server_url",
        "http://127.0.0.1:9",
    ];
    let out = run(&serve, tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(WARNING).count(), 1, "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains(WARNING)),
        "{stderr}"
    );
    let process = [
        "process",
        "--testing",
        "true",
        "--env.use_wandb",
        "false",
        "--env.total_steps",
        "1",
        "--env.data_path_to_save_groups",
        "p.jsonl",
    ];
    let out = run(&process, tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(WARNING), "{stderr}");
}

/// The same snooping model on the Docker backend: the container sees only the image's
/// environment and `container_env`.
#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_a_docker_sandbox() {
    common::docker::require_docker();
    let server = snooping_model().await;
    let tmp = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = [
        "process",
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
        "--env.use_wandb",
        "false",
        "--env.terminal_backend",
        "docker",
        "--env.data_path_to_save_groups",
        "out.jsonl",
        "--env.container_env",
        CONTAINER_ENV,
    ]
    .map(String::from)
    .to_vec();
    args.extend(server_args(&server.base_url()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&argv, tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let jsonl = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    let sent: String = server.requests().iter().map(Value::to_string).collect();
    assert!(
        sent.contains("HERMES_E2E_SETTING=cfg-value-5a1b2c3d") && jsonl.contains("==END=="),
        "the command ran in the container with container_env (the model saw it): {sent}"
    );
    assert!(
        jsonl.contains("HERMES_E2E_SETTING=<redacted>") && !jsonl.contains("cfg-value-5a1b2c3d"),
        "container_env values are secrets to the JSONL: {jsonl}"
    );
    assert!(!jsonl.contains("CARGO_MANIFEST_DIR"), "{jsonl}");
    assert_clean("what the model was sent", &sent);
    assert_clean("the JSONL", &jsonl);
    assert_clean("the logs", &stderr);
}

/// A non-root env process is non-dumpable: a command of the same user cannot read its
/// environment at all (its /proc files become root's, as for its memory), not just a zeroed
/// block.
#[tokio::test(flavor = "multi_thread")]
async fn a_same_user_command_cannot_read_the_env_process_memory() {
    const PROBE: &str = "id -u; stat -c 'owner=%u' /proc/$PPID/environ; \
                         head -c 1 /proc/$PPID/environ >/dev/null 2>&1 \
                           && echo environ=readable || echo environ=denied";
    let server = ScriptedServer::start(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::text("done")
        } else {
            Reply::tool("terminal", json!({"command": PROBE}))
        }
    })
    .await
    .unwrap();
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output();
    assert!(
        setpriv.is_ok_and(|o| o.status.success()),
        "this test runs the env process as another user with `setpriv` (util-linux)"
    );
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut args: Vec<String> = [
        "process",
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
        "--env.use_wandb",
        "false",
        "--env.data_path_to_save_groups",
        "out.jsonl",
    ]
    .map(String::from)
    .to_vec();
    args.extend(server_args(&server.base_url()));
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::example_bin("terminal_test"))
        .args(&args)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .output()
        .await
        .expect("run the example as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let jsonl = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    let result = between(&jsonl, "\"role\": \"tool\"", "exit_code");
    assert!(
        result.contains("65534"),
        "the command ran as nobody: {result}"
    );
    assert!(
        result.contains("owner=0"),
        "non-dumpable: /proc files are root's: {result}"
    );
    assert!(result.contains("environ=denied"), "{result}");
    assert_clean("the JSONL", &jsonl);
}

/// Run from a terminal (here `script`'s pseudo-terminal), the env process has a controlling
/// terminal; a command of the model's must not reach it: writing to `/dev/tty` would print on
/// the user's screen, and `TIOCSTI` (where the kernel allows it) would type into the user's
/// shell. The local backend starts commands in a session of their own, so `/dev/tty` does not
/// open, for the one-shot first command, the persistent shell's, and one started without a
/// shell.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_cannot_reach_the_terminal_the_env_process_runs_in() {
    const PROBE: &str =
        "sh -c 'if (: >/dev/tty) 2>/dev/null; then echo tty=open; else echo tty=none; fi'";
    common::ensure_debian_package("script", "bsdutils");
    let server = ScriptedServer::start(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        match messages.iter().filter(|m| m["role"] == "assistant").count() {
            0 | 1 => Reply::tool("terminal", json!({"command": PROBE})),
            // Literal words only: started without a shell.
            2 => Reply::tool("terminal", json!({"command": "head -c0 /dev/tty"})),
            _ => Reply::text("done"),
        }
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = [
        "process",
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
        "--env.use_wandb",
        "false",
        "--env.data_path_to_save_groups",
        "out.jsonl",
    ]
    .map(String::from)
    .to_vec();
    args.extend(server_args(&server.base_url()));
    // `script` runs the line in a new session on a pseudo-terminal; the line first shows that
    // the session has a terminal at all.
    let quoted: Vec<String> =
        std::iter::once(common::example_bin("terminal_test").display().to_string())
            .chain(args)
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
    let line = format!(
        "{{ : >/dev/tty; }} 2>/dev/null && echo env-tty=open; exec {} 2>stderr.log",
        quoted.join(" ")
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run the example under script");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = std::fs::read_to_string(tmp.path().join("stderr.log")).unwrap_or_default();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("env-tty=open"),
        "the env process must have a controlling terminal for this test: {stdout}"
    );
    let jsonl = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    // The tool results, as the JSONL's messages hold them (the command text names both).
    assert_eq!(
        jsonl.matches(r#"\"output\": \"tty=none\""#).count(),
        2,
        "both commands ran without a terminal: {jsonl}"
    );
    assert!(
        jsonl.contains("cannot open '/dev/tty' for reading: No such device or address"),
        "the command started without a shell ran without a terminal: {jsonl}"
    );
}

/// Whether the command saw a `TMPDIR` other than its confined sandbox's own temp directory
/// (`…/hermes-env-<pid>-<id>/tmp-task-…`): the host's would be a variable outside the allowlist.
fn foreign_tmpdir(jsonl: &str) -> bool {
    jsonl.split("TMPDIR=").skip(1).any(|rest| {
        let value = rest.split(['\\', '"']).next().unwrap_or_default();
        !(value.contains("/hermes-env-") && value.contains("/tmp-task-"))
    })
}
