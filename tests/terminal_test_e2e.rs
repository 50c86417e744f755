//! The `terminal_test` example end to end: `process` and `evaluate` with the embedded scripted
//! server, the original Hermes command lines against an external OpenAI-compatible server,
//! error exits, and cleanup on SIGINT.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use hermes_env::testing::{Reply, ScriptedServer};
use serde_json::{Map, Value};
use tokio::process::Command;

async fn run(args: &[&str], tmp: &Path) -> Output {
    Command::new(common::example_bin("terminal_test"))
        .args(args)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENROUTER_API_KEY")
        // Phase 1 without the default tokenizer, whatever the machine's hub cache or network.
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HUB_CACHE", tmp.join("empty-hub-cache"))
        .output()
        .await
        .expect("run the example")
}

fn lines(path: &Path) -> Vec<Map<String, Value>> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is a JSON object"))
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Atropos `ScoredDataGroup` invariants for one JSONL line written by process mode.
fn assert_scored_data_group(g: &Map<String, Value>, group_size: usize) {
    let keys: Vec<&str> = g.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "tokens",
            "masks",
            "scores",
            "advantages",
            "ref_logprobs",
            "messages",
            "group_overrides",
            "overrides",
            "images",
            "distill_token_ids",
            "distill_logprobs"
        ],
        "key set and order of a Hermes group (no env_id in JSONL)"
    );
    let tokens = g["tokens"].as_array().unwrap();
    let masks = g["masks"].as_array().unwrap();
    assert_eq!(tokens.len(), group_size);
    assert_eq!(g["scores"].as_array().unwrap().len(), group_size);
    assert_eq!(g["messages"].as_array().unwrap().len(), group_size);
    for (t, m) in tokens.iter().zip(masks) {
        let (t, m) = (t.as_array().unwrap(), m.as_array().unwrap());
        assert_eq!(t.len(), m.len());
        for (ti, mi) in t.iter().zip(m) {
            assert!(ti.is_i64() && mi.is_i64());
            assert!(
                mi.as_i64() == Some(-100) || mi == ti,
                "mask is -100 or the token id"
            );
        }
    }
    for conversation in g["messages"].as_array().unwrap() {
        for m in conversation.as_array().unwrap() {
            assert!(
                m.get("role").is_some() && m.get("content").is_some(),
                "Atropos requires role and content"
            );
        }
    }
    assert_eq!(
        g["group_overrides"]["placeholder_tokens"], true,
        "Phase 1 groups are marked"
    );
    for k in ["advantages", "ref_logprobs", "overrides", "images"] {
        assert_eq!(g[k], Value::Array(vec![]), "{k}");
    }
    assert!(g["distill_token_ids"].is_null() && g["distill_logprobs"].is_null());
}

#[tokio::test(flavor = "multi_thread")]
async fn process_testing_writes_groups_with_reference_rewards_and_a_viewer() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "process",
        "--testing",
        "true",
        "--env.total_steps",
        "5",
        "--env.group_size",
        "3",
        "--env.use_wandb",
        "false",
    ];
    let out = run(&args, tmp.path()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let jsonl = tmp.path().join("data/terminal-test.jsonl");
    let groups = lines(&jsonl);
    assert_eq!(groups.len(), 5);
    for g in &groups {
        assert_scored_data_group(g, 3);
        assert_eq!(
            g["scores"],
            serde_json::json!([1.0, 1.0, 1.0]),
            "reference solutions earn full reward"
        );
        let convo = g["messages"][0].as_array().unwrap();
        assert_eq!(convo[0]["role"], "system");
        assert!(convo.iter().any(|m| m["role"] == "tool"), "tool calls ran");
    }
    let html = std::fs::read_to_string(tmp.path().join("data/terminal-test.html")).unwrap();
    assert!(
        html.contains("5 groups, 15 rollouts") && html.contains(r#""name": "write_file""#),
        "the viewer embeds every group (rendering is tested in tests/viewer.rs)"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("5 groups written") && stdout.contains("mean reward 1.000"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path())
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("hermes-env-"))
            .count(),
        0,
        "sandbox root removed"
    );

    // A second run never overwrites: it writes terminal-test_1.jsonl and .html.
    let out = run(
        &[
            "process",
            "--testing",
            "true",
            "--env.total_steps",
            "1",
            "--env.use_wandb",
            "false",
        ],
        tmp.path(),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        lines(&tmp.path().join("data/terminal-test_1.jsonl")).len(),
        1
    );
    assert!(tmp.path().join("data/terminal-test_1.html").exists());
    assert_eq!(lines(&jsonl).len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn process_jsonl_line_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "process",
        "--testing",
        "true",
        "--env.total_steps",
        "1",
        "--env.group_size",
        "1",
        "--env.use_wandb",
        "false",
        "--env.data_path_to_save_groups",
        "out.jsonl",
    ];
    let out = run(&args, tmp.path()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    insta::with_settings!({filters => vec![(r"call_[0-9a-f]{8}", "call_[id]"), (r"hermes-env-[0-9]+-[0-9a-f]{8}", "hermes-env-[run]"), (r"task-[0-9a-f-]{36}", "task-[id]")]}, {
        insta::assert_snapshot!(text);
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn evaluate_writes_config_metrics_and_samples_without_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "evaluate",
        "--testing",
        "true",
        "--env.data_dir_to_save_evals",
        "evals",
        "--env.eval_size",
        "20",
        "--openai.api_key",
        "sk-test-SECRET",
        "--openai.model_name",
        "M",
    ];
    let out = run(&args, tmp.path()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let dir = tmp.path().join("evals");
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["config_general"]["model_name"], "M");
    assert!(metrics["config_general"]["total_evaluation_time_seconds"]
        .as_str()
        .unwrap()
        .parse::<f64>()
        .is_ok());
    assert_eq!(
        metrics["results"]["atropos|terminal-test_eval|0"],
        metrics["results"]["all"]
    );
    assert_eq!(metrics["results"]["all"]["eval/mean_reward"], 1.0);
    assert_eq!(metrics["results"]["all"]["eval/accuracy"], 1.0);
    let samples = lines(&dir.join("samples.jsonl"));
    assert_eq!(samples.len(), 1);
    assert_eq!(samples[0]["score"], 1.0);
    assert_eq!(samples[0]["item"]["verify_path"], "~/result.txt");
    let config = std::fs::read_to_string(dir.join("evaluate_config.yaml")).unwrap();
    assert!(
        config.contains("api_key: <redacted>") && config.contains("group_size: 3"),
        "{config}"
    );
    for name in ["metrics.json", "samples.jsonl", "evaluate_config.yaml"] {
        assert!(
            !std::fs::read_to_string(dir.join(name))
                .unwrap()
                .contains("SECRET"),
            "{name} leaks the key"
        );
    }
    assert!(!stderr(&out).contains("SECRET"));

    let metrics_text = std::fs::read_to_string(dir.join("metrics.json")).unwrap();
    insta::with_settings!({filters => vec![
        (r#""total_evaluation_time_seconds": "[0-9.e-]+""#, r#""total_evaluation_time_seconds": "[secs]""#),
        (r#""eval/evaluation_time_seconds": [0-9.e-]+"#, r#""eval/evaluation_time_seconds": "[secs]""#),
    ]}, {
        insta::assert_snapshot!(metrics_text);
    });
}

/// The original Hermes command lines, verbatim, against an external OpenAI-compatible server.
#[tokio::test(flavor = "multi_thread")]
async fn hermes_command_lines_work_against_an_openai_compatible_server() {
    let server = ScriptedServer::start(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::text("finished")
        } else {
            Reply::tool(
                "terminal",
                serde_json::json!({"command": "echo 579 > ~/answer.txt"}),
            )
        }
    })
    .await
    .unwrap();
    let url = server.base_url();
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "process",
            "--env.total_steps",
            "10",
            "--env.group_size",
            "1",
            "--env.use_wandb",
            "false",
            "--env.data_path_to_save_groups",
            "output.jsonl",
            "--openai.base_url",
            &url,
            "--openai.model_name",
            "M",
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
        ],
        tmp.path(),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let groups = lines(&tmp.path().join("output.jsonl"));
    assert_eq!(groups.len(), 10);
    let scores: Vec<f64> = groups
        .iter()
        .map(|g| g["scores"][0].as_f64().unwrap())
        .collect();
    assert_eq!(
        scores,
        [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
        "only the 123+456 task is solved"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 20);
    assert!(requests
        .iter()
        .all(|r| r["model"] == "M" && r["max_tokens"] == 16000 && r["tool_choice"] == "auto"));

    let out = run(
        &[
            "evaluate",
            "--env.eval_size",
            "20",
            "--env.data_dir_to_save_evals",
            "evals",
            "--openai.base_url",
            &url,
            "--openai.model_name",
            "M",
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
        ],
        tmp.path(),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(tmp.path().join("evals/metrics.json").exists());
    let eval_request = server.requests().pop().unwrap();
    assert_eq!(
        eval_request["temperature"], 0.0,
        "evaluation runs at temperature 0"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_errors_are_one_line_with_exit_code_2() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["process", "--env.totl_steps", "3"],
            "a similar argument exists: '--env.total_steps'",
        ),
        (
            &["process", "--env.partial_credit", "half"],
            "expected a number, got 'half'",
        ),
        (
            &["serve", "--testing", "true"],
            "serve needs trainable tokens",
        ),
        // The declared default server (OpenRouter, as upstream config_init) needs its key.
        (&["process"], "OPENROUTER_API_KEY is not set: the server https://openrouter.ai/api/v1 takes its API key from it"),
        (
            &["process", "--openai.base_url", ""],
            "--openai.base_url is not set",
        ),
        (
            &[
                "process",
                "--testing",
                "true",
                "--env.terminal_backend",
                "modal",
            ],
            "terminal_backend 'modal' is not supported; supported backends: local, docker, ssh; use docker",
        ),
        (
            &[
                "process",
                "--testing",
                "true",
                "--env.enabled_toolsets",
                "terminal,fiel",
            ],
            "unknown toolset 'fiel'",
        ),
    ];
    for (args, needle) in cases {
        let out = run(args, tmp.path()).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let error_lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(error_lines.len(), 1, "{args:?}: {err}");
        assert!(error_lines[0].contains(needle), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn own_config_fields_are_flags_with_help() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&["process", "--help"], tmp.path()).await;
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--env.partial_credit"));
    assert!(help.contains("Score for output that contains the expected text but is not an exact match. [default: 0.5]"));
    assert!(help.contains("[default: terminal-test]") || help.contains("--env.wandb_name"));
}

/// hermes-env's default `jemalloc` feature makes jemalloc the allocator of an environment
/// binary (README, "Memory allocator"): asked through its own environment variable, the
/// example's allocator prints jemalloc's statistics at exit; without it, nothing of them.
#[tokio::test(flavor = "multi_thread")]
async fn an_environment_binary_allocates_with_jemalloc() {
    let tmp = tempfile::tempdir().unwrap();
    let probe = |stats: bool| {
        let mut cmd = Command::new(common::example_bin("terminal_test"));
        cmd.args(["process", "--help"]).current_dir(tmp.path());
        if stats {
            cmd.env("_RJEM_MALLOC_CONF", "stats_print:true");
        } else {
            cmd.env_remove("_RJEM_MALLOC_CONF");
        }
        cmd.output()
    };
    let with = probe(true).await.expect("run the example");
    assert!(with.status.success(), "{}", stderr(&with));
    let text = format!("{}{}", String::from_utf8_lossy(&with.stdout), stderr(&with));
    assert!(
        text.contains("Begin jemalloc statistics") && text.contains("End jemalloc statistics"),
        "no jemalloc statistics: the example does not allocate with jemalloc:\n{text}"
    );
    let without = probe(false).await.expect("run the example");
    assert!(without.status.success(), "{}", stderr(&without));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&without.stdout),
        stderr(&without)
    );
    assert!(!text.contains("jemalloc statistics"), "{text}");
    assert!(text.contains("--env.partial_credit"), "{text}");
}

/// Starts a `process` run of two groups of two rollouts whose agent commands sleep for ever,
/// waits until all four sandboxes exist, sends `signals` (in order, 300 ms apart), and
/// returns the exit status with its output, after checking that no sandbox directory and no
/// agent command outlived the run.
async fn signal_mid_run(signals: &[i32], extra: &[&str]) -> std::process::Output {
    // A unique duration tells this test's agent commands apart from any other `sleep`.
    let seconds = 100_000_000 + std::process::id() % 1_000_000 + signals.len() as u32;
    let command = format!("sleep {seconds}");
    let pattern = format!("^{command}$");
    let server = ScriptedServer::start(move |_: &Value| {
        Reply::tool(
            "terminal",
            serde_json::json!({"command": command, "timeout": 300}),
        )
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let child = Command::new(common::example_bin("terminal_test"))
        .args([
            "process",
            "--env.total_steps",
            "2",
            "--env.group_size",
            "2",
            "--env.use_wandb",
            "false",
            "--openai.base_url",
        ])
        .arg(server.base_url())
        .args(extra)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap() as i32;
    let sandbox_dirs = || -> usize {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("hermes-env-"))
            .flat_map(|root| {
                std::fs::read_dir(root.path())
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            // One scratch directory per sandbox (the persistent shell keeps a state file
            // beside it).
            .filter(|e| e.path().is_dir() && e.file_name().to_string_lossy().starts_with("task-"))
            .count()
    };
    for _ in 0..200 {
        if sandbox_dirs() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sandbox_dirs(), 4, "two groups of two rollouts are running");
    for &signal in signals {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // SAFETY: signalling the child we spawned.
        unsafe { libc::kill(pid, signal) };
    }
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("exits promptly")
        .unwrap();
    assert_eq!(sandbox_dirs(), 0, "{}", stderr(&out));
    let leftover = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("hermes-env-"))
        .count();
    assert_eq!(leftover, 0, "the per-run sandbox root is removed");
    let state_root = format!("hermes-env-{pid}-");
    let state_leftover: Vec<String> = std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&state_root))
        .collect();
    assert!(
        state_leftover.is_empty(),
        "the shells' state directory in /dev/shm is removed: {state_leftover:?}"
    );
    let survivors = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    for _ in 0..100 {
        if survivors().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(survivors(), "", "no agent command survives");
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigint_cancels_at_once_and_removes_every_sandbox() {
    // The grace period (30 s by default) would outlast the test's limit: only the second
    // signal can end this run in time.
    let out = signal_mid_run(&[libc::SIGINT, libc::SIGINT], &[]).await;
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("SIGINT again: cancelling in-flight work now"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_gracefully_after_the_grace_period() {
    let out = signal_mid_run(&[libc::SIGTERM], &["--env.shutdown_grace", "1"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("SIGTERM: stopping"), "{err}");
    assert!(err.contains("--env.shutdown_grace"), "{err}");
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("stopped   by a signal: no new items taken, 2 groups in flight cancelled"),
        "{summary}"
    );
}

/// Every JSONL line validates against `atroposlib.api.server.ScoredData` (atroposlib 0.4.0),
/// the model the trajectory API uses for `/scored_data`.
#[tokio::test(flavor = "multi_thread")]
async fn jsonl_lines_validate_against_atroposlib_models() {
    let python = tokio::task::spawn_blocking(common::atropos_python)
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "process",
        "--testing",
        "true",
        "--env.total_steps",
        "3",
        "--env.group_size",
        "2",
        "--env.use_wandb",
        "false",
    ];
    let out = run(&args, tmp.path()).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let script = "import json, sys\nfrom atroposlib.api.server import ScoredData\nn = 0\n\
                  for line in open(sys.argv[1], encoding='utf-8'):\n    g = ScoredData.model_validate(json.loads(line))\n    \
                  assert len(g.tokens) == len(g.masks) == len(g.scores) == 2\n    n += 1\nprint(n)\n";
    let check = Command::new(python)
        .args(["-c", script])
        .arg(tmp.path().join("data/terminal-test.jsonl"))
        .output()
        .await
        .unwrap();
    assert!(
        check.status.success(),
        "atroposlib rejected a group: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "3");
}

/// A run killed with SIGKILL cannot clean up: its scratch root stays, and so does a daemon
/// the agent started with a cleared environment in its own session (cwd in its home). The
/// next local run on the host removes both, with one line saying so.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_run_removes_what_a_sigkilled_run_left() {
    let seconds = 200_000_000 + std::process::id() % 1_000_000;
    // One daemon works in the sandbox's directory; the other leaves it (`cd /`) with a
    // cleared environment and a session of its own: only the sandbox's cgroup still knows it.
    let daemons = [format!("sleep {seconds}"), format!("sleep {}", seconds + 1)];
    let start = format!(
        "cd ~ && nohup setsid env -i /bin/sh -c 'exec {}' >/dev/null 2>&1 < /dev/null & \
         cd / && nohup setsid env -i /bin/sh -c 'exec {}' >/dev/null 2>&1 < /dev/null & echo started",
        daemons[0], daemons[1]
    );
    let server = ScriptedServer::start(move |request: &Value| {
        let turns = request["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
            .unwrap_or(0);
        let command = if turns == 0 {
            start.clone()
        } else {
            "sleep 600".into()
        };
        Reply::tool(
            "terminal",
            serde_json::json!({"command": command, "timeout": 300}),
        )
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(common::example_bin("terminal_test"))
        .args([
            "process",
            "--env.total_steps",
            "1",
            "--env.group_size",
            "1",
            "--env.use_wandb",
            "false",
            "--openai.base_url",
        ])
        .arg(server.base_url())
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(tmp.path().join("first.log")).unwrap())
        .spawn()
        .unwrap();
    let first_log = || std::fs::read_to_string(tmp.path().join("first.log")).unwrap_or_default();
    let daemon_pids = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c).replace('\0', " ");
                    daemons.iter().any(|d| c.trim() == d)
                })
            })
            .collect()
    };
    for _ in 0..400 {
        if daemon_pids().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        daemon_pids().len(),
        2,
        "the agent's daemons run:\n{}\n{}",
        first_log(),
        std::fs::read_to_string(tmp.path().join("data/terminal-test.jsonl")).unwrap_or_default()
    );
    // SAFETY: killing the child we spawned.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGKILL) };
    child.wait().await.unwrap();
    let roots = || -> usize {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("hermes-env-"))
            .count()
    };
    assert_eq!(roots(), 1, "a SIGKILLed run leaves its root");
    assert_eq!(daemon_pids().len(), 2, "and its agent's daemons");

    let next = run(
        &["process", "--testing", "true", "--env.total_steps", "1"],
        tmp.path(),
    )
    .await;
    assert!(next.status.success(), "{}", stderr(&next));
    // At least the daemon; the dead run's shell and its `sleep 600` may still be running too
    // (they end on their own once their pipes close, so how many are left races).
    let text = stderr(&next);
    let killed: usize = text
        .split("removed the scratch roots of 1 run(s) that ended without cleaning up (killed with SIGKILL or crashed) and killed ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no reaper line:\n{text}"));
    assert!(killed >= 1, "{text}");
    assert!(
        text.contains(
            "local sandboxes: removed the cgroups of 1 run(s) that ended without cleaning up"
        ),
        "the dead run's cgroup is reaped: {text}"
    );
    assert_eq!(roots(), 0, "the next run removed it");
    for _ in 0..40 {
        if daemon_pids().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(daemon_pids().is_empty(), "and killed both daemons");
}

/// A confined local run says at start, at the default level, how to take away the wait of a
/// sandbox's first process joining its cgroup: exactly when the host's cgroup v2 mount lacks
/// `favordynmods` and its kernel offers it.
#[tokio::test(flavor = "multi_thread")]
async fn the_cgroup_join_wait_and_its_knob_are_said_at_start() {
    let (mount, options) = common::cgroup2_mount();
    let favoured = options.split(',').any(|o| o == "favordynmods");
    let offered = std::fs::read_to_string("/sys/kernel/cgroup/features")
        .unwrap_or_default()
        .lines()
        .any(|l| l == "favordynmods");
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "process",
            "--testing",
            "true",
            "--env.total_steps",
            "1",
            "--env.terminal_backend",
            "local",
        ],
        tmp.path(),
    )
    .await;
    let text = stderr(&out);
    assert!(out.status.success(), "{text}");
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("remount,favordynmods"))
        .collect();
    if offered && !favoured {
        assert_eq!(said.len(), 1, "said once: {text}");
        assert!(
            said[0].contains("INFO"),
            "at the default level: {}",
            said[0]
        );
        assert!(
            said[0].contains(&format!(
                "mount -o remount,favordynmods {}",
                mount.display()
            )),
            "naming the mount: {}",
            said[0]
        );
    } else {
        assert!(
            said.is_empty(),
            "not said (mounted favordynmods: {favoured}, offered: {offered}): {text}"
        );
    }
}
