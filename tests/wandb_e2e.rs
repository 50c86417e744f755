//! W&B logging end to end through the `terminal_test` example against a request-recording
//! stand-in on 127.0.0.1: run creation, history rows at the right steps with the exact keys,
//! summary, rollout tables, offline runs uploaded later with `wandb sync` (same requests as
//! online), and a failing or hanging endpoint that does not slow rollouts.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use hermes_runtime::testing::{Reply, ScriptedServer, StandInBehavior, WandbStandIn};
use serde_json::Value;
use tokio::process::Command;

const KEY: &str = "test-SECRET-key";
/// `Basic base64("api:test-SECRET-key")`.
const AUTH: &str = "Basic YXBpOnRlc3QtU0VDUkVULWtleQ==";

async fn run(args: &[&str], tmp: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(common::example_bin("terminal_test"));
    cmd.args(args)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env("WANDB_DIR", tmp)
        .env("HERMES_WANDB_FINISH_TIMEOUT", "3")
        .env_remove("OPENAI_API_KEY");
    for name in [
        "WANDB_API_KEY",
        "WANDB_BASE_URL",
        "WANDB_ENTITY",
        "WANDB_PROJECT",
        "WANDB_MODE",
    ] {
        cmd.env_remove(name);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.expect("run the example")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const PROCESS: &[&str] = &[
    "process",
    "--testing",
    "true",
    "--env.total_steps",
    "3",
    "--env.group_size",
    "2",
];

/// The run directories under `{tmp}/wandb`.
fn run_dirs(tmp: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(tmp.join("wandb"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn keys(row: &Value) -> BTreeSet<String> {
    row.as_object().unwrap().keys().cloned().collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// Every file under `dir`, concatenated (to look for leaked secrets).
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

/// What a run looks like on the server, independent of how requests were batched.
#[derive(Debug, PartialEq)]
struct ServerView {
    upserts: Vec<Value>,
    history: Vec<Value>,
    summary: Option<Value>,
    uploads: Vec<(String, Vec<u8>)>,
    exit_code: Option<i64>,
}

fn view(s: &WandbStandIn) -> ServerView {
    ServerView {
        upserts: s.graphql("UpsertBucket"),
        history: s.history(),
        summary: s.summary(),
        uploads: s.uploads().into_iter().collect(),
        exit_code: s.exit_code(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn process_streams_the_run_and_sync_replays_it() {
    let server = WandbStandIn::start(StandInBehavior::Ok).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.base_url();
    let env = [("WANDB_BASE_URL", url.as_str()), ("WANDB_API_KEY", KEY)];
    let out = run(PROCESS, tmp.path(), &env).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");

    // Run creation: Atropos's process-mode name, no project (→ uncategorized), the config.
    let upserts = server.graphql("UpsertBucket");
    assert_eq!(upserts.len(), 1, "{upserts:?}");
    let vars = &upserts[0];
    let name = vars["displayName"].as_str().unwrap();
    let parts: Vec<&str> = name
        .strip_prefix("terminal-test-")
        .unwrap_or_else(|| panic!("{name}"))
        .split('-')
        .collect();
    assert!(
        parts.len() == 4
            && [4, 2, 2]
                .iter()
                .zip(&parts)
                .all(|(n, p)| p.len() == *n && p.chars().all(|c| c.is_ascii_digit()))
            && parts[3].len() == 6
            && parts[3].chars().all(|c| c.is_ascii_lowercase()),
        "{{wandb_name}}-{{date}}-{{6 letters}}: {name}"
    );
    assert_eq!(vars["project"], "uncategorized");
    assert_eq!(vars["entity"], Value::Null);
    assert_eq!(vars["groupName"], Value::Null);
    let run_id = vars["name"].as_str().unwrap().to_owned();
    let config: Value = serde_json::from_str(vars["config"].as_str().unwrap()).unwrap();
    assert_eq!(config["group_size"]["value"], 2);
    assert_eq!(config["total_steps"]["value"], 3);

    // Every API request is authenticated; uploads go to the signed URL without credentials.
    for r in server.requests() {
        if r.method == "PUT" {
            assert_eq!(r.authorization, None);
        } else {
            assert_eq!(r.authorization.as_deref(), Some(AUTH), "{}", r.path);
            assert_eq!(
                r.path.starts_with("/files/"),
                r.path == format!("/files/stand-in-entity/uncategorized/{run_id}/file_stream"),
            );
        }
    }

    // History: one row per group at steps 0, 1, 2 with exactly these keys.
    let history = server.history();
    let steps: Vec<i64> = history
        .iter()
        .map(|r| r["_step"].as_i64().unwrap())
        .collect();
    assert_eq!(steps, [0, 1, 2]);
    let base = [
        "_runtime",
        "_step",
        "_timestamp",
        "train/accuracy",
        "train/avg_reward",
        "train/partial_match_rate",
        "train/total_rollouts",
        "train/mean_reward",
        "train/tampered",
        "train/tampered_rate",
        "train/tool_errors_count",
        "train/rollout_failures_llm",
        "train/rollout_failures_sandbox",
        "train/rollout_failures_verifier",
        "train/rollout_failures_tokenization",
        "train/completion_lengths",
        "train/completion_lengths_std",
        "train/completion_lengths_max",
        "train/completion_lengths_min",
        "train/completion_lengths_p95",
        "train/rollouts",
    ];
    let server_keys = [
        "server/server_0_request_time_avg",
        "server/server_0_request_time_std",
        "server/server_0_request_time_99p",
        "server/server_0_average_num_attempts",
    ];
    let perf = [
        "train_perf/task_duration_mean",
        "train_perf/task_duration_std",
        "train_perf/task_duration_max",
        "train_perf/task_duration_min",
        "train_perf/succeeded_task_duration_mean",
        "train_perf/succeeded_task_duration_std",
        "train_perf/succeeded_task_duration_max",
        "train_perf/succeeded_task_duration_min",
        "train/items_sent_to_api",
    ];
    // The three groups run in one window: the first log takes every request time.
    assert_eq!(
        keys(&history[0]),
        set(&[&base[..], &server_keys[..]].concat())
    );
    assert_eq!(keys(&history[1]), set(&[&base[..], &perf[..]].concat()));
    assert_eq!(keys(&history[2]), set(&base));
    for row in &history {
        assert_eq!(row["train/mean_reward"], 1.0);
        assert_eq!(
            row["train/avg_reward"], 1.0,
            "the author's wandb_log is merged"
        );
        assert_eq!(row["train/tool_errors_count"], 0.0);
        assert_eq!(row["train/rollouts"]["_type"], "table-file");
        assert_eq!(
            row["train/rollouts"]["nrows"], 1,
            "num_rollouts_per_group_for_logging"
        );
    }
    assert_eq!(history[1]["train/items_sent_to_api"], 2.0);

    // Summary: the latest value of every key.
    let summary = server.summary().unwrap();
    assert_eq!(summary["_step"], 2);
    assert_eq!(summary["train/rollouts"], history[2]["train/rollouts"]);
    assert!(summary.get("server/server_0_request_time_avg").is_some());

    // Rollout tables: uploaded through createRunFiles, formatted transcripts with scores.
    let uploads = server.uploads();
    assert_eq!(uploads.len(), 3);
    for row in &history {
        let path = row["train/rollouts"]["path"].as_str().unwrap();
        let table: Value = serde_json::from_slice(&uploads[path]).unwrap();
        assert_eq!(table["columns"], serde_json::json!(["text", "score"]));
        let text = table["data"][0][0].as_str().unwrap();
        assert!(
            text.starts_with("[SYSTEM]\n") && text.contains("\n\n[USER]\n"),
            "{text}"
        );
        assert!(text.contains("[TOOL CALL] write_file(") || text.contains("[TOOL CALL] terminal("));
        assert!(text.contains("[TOOL RESULT] "));
        assert_eq!(table["data"][0][1], 1.0);
    }
    assert_eq!(server.exit_code(), Some(0));

    // The summary names the run; the key never leaks.
    let run_url = format!("{url}/stand-in-entity/uncategorized/runs/{run_id}");
    assert!(
        stdout.contains(&format!("wandb     {run_url} (3 rows uploaded)")),
        "{stdout}"
    );
    let dirs = run_dirs(tmp.path());
    assert_eq!(dirs.len(), 1);
    for haystack in [&stdout, &stderr, &all_text(&dirs[0])] {
        assert!(!haystack.contains("SECRET"), "the API key leaked");
    }

    // `wandb sync` of the same run directory sends the same run to a fresh server.
    let replay = WandbStandIn::start(StandInBehavior::Ok).await.unwrap();
    let replay_url = replay.base_url();
    let dir = dirs[0].to_str().unwrap();
    let out = run(
        &["wandb", "sync", dir],
        tmp.path(),
        &[
            ("WANDB_BASE_URL", replay_url.as_str()),
            ("WANDB_API_KEY", KEY),
        ],
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("(3 rows)"), "{stdout}");
    assert_eq!(view(&replay), view(&server));
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_runs_are_written_locally_and_synced_later() {
    let server = WandbStandIn::start(StandInBehavior::Ok).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let url = server.base_url();
    let env = [
        ("WANDB_MODE", "offline"),
        ("WANDB_BASE_URL", url.as_str()),
        ("WANDB_API_KEY", KEY),
        ("WANDB_PROJECT", "hermes"),
    ];
    let out = run(PROCESS, tmp.path(), &env).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(server.requests().is_empty(), "offline sends nothing");
    let dirs = run_dirs(tmp.path());
    assert_eq!(dirs.len(), 1);
    let dir = &dirs[0];
    assert!(dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("offline-run-"));
    assert!(
        stdout.contains("offline run saved to") && stdout.contains("wandb sync"),
        "{stdout}"
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["project"], "hermes");
    let lines = std::fs::read_to_string(dir.join("files/wandb-history.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 3);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("files/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["group_size"]["value"], 2);
    assert!(dir.join("files/wandb-summary.json").is_file());

    // Sync the parent `wandb/` directory: finds the run and uploads it.
    let parent = tmp.path().join("wandb");
    let out = run(
        &["wandb", "sync", parent.to_str().unwrap()],
        tmp.path(),
        &env,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let upserts = server.graphql("UpsertBucket");
    assert_eq!(upserts.len(), 1);
    assert_eq!(upserts[0]["name"], meta["id"]);
    assert_eq!(upserts[0]["displayName"], meta["display_name"]);
    assert_eq!(upserts[0]["project"], "hermes");
    let history = server.history();
    let sent: Vec<String> = history.iter().map(Value::to_string).collect();
    let stored: Vec<String> = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
        .collect();
    assert_eq!(sent, stored, "the history goes up unchanged");
    assert_eq!(server.uploads().len(), 3);
    assert_eq!(server.exit_code(), Some(0));
    assert!(
        stdout.contains(&format!("{url}/stand-in-entity/hermes/runs/")),
        "{stdout}"
    );

    // A directory without runs is a clear error.
    let out = run(&["wandb", "sync", "data"], tmp.path(), &env).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).1.contains("no run directory"),
        "{}",
        text(&out).1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn disabled_mode_and_use_wandb_false_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(PROCESS, tmp.path(), &[("WANDB_MODE", "disabled")]).await;
    assert!(out.status.success(), "{}", text(&out).1);
    let mut args = PROCESS.to_vec();
    args.extend(["--env.use_wandb", "false"]);
    let out = run(&args, tmp.path(), &[("WANDB_MODE", "offline")]).await;
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!tmp.path().join("wandb").exists());
    assert!(!text(&out).0.contains("wandb"), "{}", text(&out).0);
}

/// Groups per second from the summary's `rate` line.
fn rate(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("rate"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {stdout}"))
}

/// A failing (HTTP 500) or hanging W&B endpoint does not change rollout throughput: the run
/// finishes, reports the failure once, and keeps the rows for `wandb sync`.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_or_hanging_endpoint_does_not_slow_rollouts() {
    // A model that answers at once; every rollout still runs its reward in a sandbox.
    let llm = ScriptedServer::start(|_: &Value| Reply::text("done"))
        .await
        .unwrap();
    let llm_url = llm.base_url();
    let failing = WandbStandIn::start(StandInBehavior::Fail(500))
        .await
        .unwrap();
    let hanging = WandbStandIn::start(StandInBehavior::Hang).await.unwrap();
    let args = [
        "process",
        "--env.total_steps",
        "60",
        "--env.group_size",
        "4",
        "--openai.base_url",
        &llm_url,
        "--openai.model_name",
        "M",
        "--openai.server_type",
        "openai",
    ];
    let tmp = tempfile::tempdir().unwrap();
    let mut rates = Vec::new();
    let (failing_url, hanging_url) = (failing.base_url(), hanging.base_url());
    // The first run warms caches (binary, sandbox root) and is not counted.
    let cases: [(&str, Vec<(&str, &str)>); 4] = [
        ("warm-up", vec![("WANDB_MODE", "disabled")]),
        ("no wandb", vec![("WANDB_MODE", "disabled")]),
        (
            "HTTP 500",
            vec![
                ("WANDB_BASE_URL", failing_url.as_str()),
                ("WANDB_API_KEY", KEY),
            ],
        ),
        (
            "hanging",
            vec![
                ("WANDB_BASE_URL", hanging_url.as_str()),
                ("WANDB_API_KEY", KEY),
            ],
        ),
    ];
    for (label, env) in &cases {
        let started = Instant::now();
        let out = run(&args, tmp.path(), env).await;
        let wall = started.elapsed();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{label}: {stderr}");
        let r = rate(&stdout);
        eprintln!("{label}: {r:.2} groups/s ({:.1}s wall)", wall.as_secs_f64());
        rates.push(r);
        if matches!(*label, "HTTP 500" | "hanging") {
            assert!(
                stdout.contains("60 rows not uploaded") && stdout.contains("wandb sync"),
                "{label}: {stdout}"
            );
            assert!(
                wall < Duration::from_secs(60),
                "{label}: finish is bounded by HERMES_WANDB_FINISH_TIMEOUT"
            );
        }
        if *label == "HTTP 500" {
            assert_eq!(
                stderr.matches("wandb: upload failed").count(),
                1,
                "failures are logged once: {stderr}"
            );
        }
    }
    assert!(failing.requests().len() > 1, "the uploader retried");
    assert!(!hanging.requests().is_empty());
    for (i, label) in ["HTTP 500", "hanging"].iter().enumerate() {
        assert!(
            rates[i + 2] >= 0.6 * rates[1],
            "{label}: {:.2} groups/s vs {:.2} without wandb",
            rates[i + 2],
            rates[1]
        );
    }
}
