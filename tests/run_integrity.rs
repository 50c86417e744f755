//! Run integrity, end to end with the real binaries: a failure is never training data (an
//! unreachable LLM server writes nothing and names the cause; a verifier that cannot run is a
//! verifier failure, not a 0), drops are announced with their knob, and `serve` stops cleanly
//! on SIGTERM — disconnecting from the real `run-api`, or spooling what it could not deliver
//! for the next start, which delivers it: none lost, none twice.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::atropos::{free_port, Api, Env, Trainer};
use common::proxy::FaultProxy;
use serde_json::{json, Value};
use tokio::process::Command;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    free_port()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_llm_server_writes_nothing_exits_non_zero_and_names_the_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/v1", closed_port());
    let run = |extra: &'static [&'static str]| {
        Command::new(common::example_bin("terminal_test"))
            .args(["process", "--env.total_steps", "2", "--env.group_size", "2"])
            .args(["--env.use_wandb", "false", "--openai.base_url", &url])
            .args(extra)
            .current_dir(tmp.path())
            .env("TMPDIR", tmp.path())
            .env("HF_HUB_OFFLINE", "1")
            .output()
    };
    // The start-up health check finds it: one line, before any rollout. (terminal_test
    // declares an OpenRouter default server, which skips the check unless asked.)
    let out = run(&["--openai.health_check", "true"]).await.unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: no LLM server passed its health check"),
        "{err}"
    );
    assert!(last.contains(&url), "{last}");
    assert!(!tmp.path().join("data").exists(), "nothing is written");
    // Without it, every rollout is an LLM failure: nothing is written, the cause is named.
    // (Three attempts per request instead of the default ten keep the backoff short.)
    let out = run(&["--openai.health_check", "false", "--env.llm_retries", "2"])
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: no group could be produced"),
        "{err}"
    );
    assert!(last.contains(&url), "the cause names the server: {last}");
    assert!(last.contains("unreachable after 3 attempts"), "{last}");
    assert!(last.contains("llm"), "{last}");
    let jsonl = tmp.path().join("data/terminal-test.jsonl");
    assert_eq!(lines(&jsonl), 0, "no reward-0 groups are written");
    let failures = tmp.path().join("data/terminal-test.failures.jsonl");
    let text = std::fs::read_to_string(&failures).expect("the failures file");
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["outcome"], "llm");
    assert_eq!(first["attempts"], 3, "1 + --env.max_rollout_retries 2");
    assert!(first["item"].is_object(), "{first}");
}

/// `PATH` for a host that has a shell and coreutils but no Python.
fn path_without_python(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in [
        "bash", "sh", "rm", "mkdir", "cat", "ls", "cp", "mv", "env", "sleep", "kill",
    ] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("this test needs {tool} in /usr/bin or /bin"));
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    bin.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn swe_pytest_on_a_host_without_python_reports_a_verifier_failure_not_a_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let path = path_without_python(tmp.path());
    let out = Command::new(common::example_bin("swe_pytest"))
        .args([
            "process",
            "--testing",
            "true",
            "--env.terminal_backend",
            "local",
        ])
        .args(["--env.total_steps", "1", "--env.use_wandb", "false"])
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .env("HF_HUB_OFFLINE", "1")
        .env("PATH", &path)
        .output()
        .await
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("verifier"), "{last}");
    assert!(last.contains("could not run (exit 127)"), "{last}");
    assert!(last.contains("python3: command not found"), "{last}");
    assert_eq!(lines(&tmp.path().join("data/swe-pytest.jsonl")), 0);
    let failures = std::fs::read_to_string(tmp.path().join("data/swe-pytest.failures.jsonl"))
        .expect("the failures file");
    assert!(failures.contains("\"outcome\": \"verifier\""), "{failures}");
}

/// Sends SIGTERM to the serve process.
fn sigterm(env: &Env) {
    let pid = env.child.id().expect("running") as i32;
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

/// Registers a second, passive env and returns its id: its `env_weight` in `/status-env`
/// is its share among the *connected* envs, so it shows when another env disconnects.
async fn register_probe(trainer: &Trainer) -> i64 {
    let r = trainer
        .post(
            "/register-env",
            json!({"max_token_length": 2048, "desired_name": "probe", "weight": 1.0,
                   "group_size": 2, "min_batch_allocation": null}),
        )
        .await;
    r["env_id"].as_i64().expect("probe env id")
}

async fn probe_weight(api: &str, probe: i64) -> f64 {
    let v: Value = common::atropos::http()
        .get(format!("{api}/status-env"))
        .json(&json!({ "env_id": probe }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["env_weight"].as_f64().expect("env_weight")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_announces_length_drops_and_on_sigterm_disconnects_and_exits_zero() {
    let api = Api::start(free_port()).await;
    // A trainer whose sequence limit is below every rollout's length.
    let trainer = Trainer::register_with_limit(&api.url, 4, 1000, 64).await;
    let tmp = tempfile::tempdir().unwrap();
    let mut env = Env::start(
        &api.url,
        tmp.path(),
        &["--env.total_steps", "1000", "--env.shutdown_grace", "5"],
    );
    env.expect_line("registered as env_id 0", Duration::from_secs(60))
        .await;
    let probe = register_probe(&trainer).await;
    let shared = probe_weight(&api.url, probe).await;
    assert!(
        shared < 1.0,
        "two envs connected: the probe's share is {shared}"
    );
    let warn = env
        .expect_line(
            "dropped: a sequence reached the trainer's max_token_len 64",
            Duration::from_secs(60),
        )
        .await;
    assert!(warn.contains("WARN"), "{warn}");
    assert!(
        warn.contains("raise it in the trainer or lower --env.max_token_length"),
        "{warn}"
    );
    assert_eq!(trainer.status().await.1, 0, "nothing reached the trainer");
    let signalled = Instant::now();
    sigterm(&env);
    let (stdout, err) = env.finish(Duration::from_secs(30)).await;
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(5 + 10), "exited in {took:?}");
    assert!(
        err.contains("disconnected from the trajectory API"),
        "{err}"
    );
    assert!(stdout.contains("serve stopped by a signal"), "{stdout}");
    assert!(
        stdout.contains("too_long"),
        "the summary counts the drops: {stdout}"
    );
    // The real run-api saw the disconnect: the probe is now the only connected env.
    assert_eq!(probe_weight(&api.url, probe).await, 1.0);
    api.kill().await;
}

/// Waits until `f` holds, or panics with `what` after `within`.
async fn eventually<F: std::future::Future<Output = bool>>(
    within: Duration,
    what: &str,
    mut f: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelivered_groups_are_spooled_on_sigterm_and_the_next_start_delivers_them_once() {
    let api = Api::start(free_port()).await;
    let trainer = Trainer::register(&api.url, 4, 1000).await;
    let proxy = FaultProxy::start(&api.url).await;
    let tmp = tempfile::tempdir().unwrap();
    let spool = tmp.path().join("spool");
    let spool_arg = spool.to_str().unwrap().to_owned();
    let run = |n: usize| {
        let jsonl = tmp.path().join(format!("run{n}.jsonl"));
        let args = vec![
            "--env.total_steps".to_owned(),
            "1000".to_owned(),
            "--env.shutdown_grace".to_owned(),
            "5".to_owned(),
            "--env.outbox_spool_dir".to_owned(),
            spool_arg.clone(),
            "--env.data_path_to_save_groups".to_owned(),
            jsonl.to_str().unwrap().to_owned(),
        ];
        (args, jsonl)
    };

    // Run 1: the API takes registrations and status calls, but no scored data.
    proxy.block(&["/scored_data"]);
    let (args, jsonl1) = run(1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut env = Env::start(&proxy.url, tmp.path(), &args);
    env.expect_line("cannot send a group", Duration::from_secs(60))
        .await;
    eventually(Duration::from_secs(30), "4 groups produced", || async {
        lines(&jsonl1) >= 4
    })
    .await;
    // Then the API goes down altogether (status calls fail, the env tries to re-register)
    // and the env is stopped.
    proxy.block(&["/"]);
    env.expect_line(
        "re-registering with the trajectory API",
        Duration::from_secs(30),
    )
    .await;
    sigterm(&env);
    let (stdout, err) = env.finish(Duration::from_secs(40)).await;
    let produced1 = lines(&jsonl1);
    let spooled_line = err
        .lines()
        .find(|l| l.contains("undelivered groups spooled to"))
        .unwrap_or_else(|| panic!("no spool line:\n{err}"));
    let before = &spooled_line[..spooled_line.find(" undelivered groups spooled to").unwrap()];
    let spooled: usize = before
        .rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("count in {spooled_line:?}"));
    assert_eq!(
        spooled, produced1,
        "every produced group is spooled:\n{stdout}"
    );
    assert_eq!(trainer.status().await.1, 0, "the API received nothing");

    // Run 2: the API works again; the spool is delivered first, then new groups follow.
    proxy.block(&[]);
    let (args, jsonl2) = run(2);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut env = Env::start(&proxy.url, tmp.path(), &args);
    let resend = env
        .expect_line("could not deliver (spooled in", Duration::from_secs(60))
        .await;
    assert!(
        resend.contains(&format!("resending {produced1} groups")),
        "{resend}"
    );
    eventually(
        Duration::from_secs(60),
        "the spooled groups queued at the API",
        || async { trainer.status().await.1 as usize >= produced1 },
    )
    .await;
    sigterm(&env);
    let (stdout, err) = env.finish(Duration::from_secs(40)).await;
    assert!(!err.contains("undelivered groups spooled"), "{err}");
    let produced2 = lines(&jsonl2);
    let queued = trainer.status().await.1 as usize;
    assert_eq!(
        queued,
        produced1 + produced2,
        "none lost, none twice:\n{stdout}\n{err}"
    );
    assert!(
        std::fs::read_dir(&spool)
            .into_iter()
            .flatten()
            .flatten()
            .all(|d| std::fs::read_dir(d.path()).map_or(true, |mut f| f.next().is_none())),
        "the spool is empty after delivery"
    );
    api.kill().await;
}
