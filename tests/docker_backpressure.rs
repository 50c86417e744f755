//! Backpressure against a slow Docker daemon: the real daemon behind a fault-injecting proxy on
//! a unix socket that answers the exec endpoints (creating and starting an exec) one at a time,
//! each after a delay, as an overloaded daemon does. Rollouts of `swe_pytest` through it wait
//! for their turn in the framework's exec lane and finish at full reward with no failed
//! attempt; the wait is said in one line naming the queue and its knob, and the verifier's
//! timeout (shorter than the queue) does not run while its command waits.
//!
//! Without the lane (`--env.sandbox_exec_concurrency` as large as the run) the same requests
//! queue inside the daemon, where the verifier's timeout runs: its `pytest` run is never started
//! in time and the attempt fails as a sandbox failure that is re-run.
//!
//! Also: rollouts waiting for a place on a full host hold no tool permit (they did, and a run
//! with fewer permits than waiting rollouts never ended).

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use common::docker::{containers_of, require_docker};
use common::example_bin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// The daemon the proxy forwards to.
const DAEMON: &str = "/var/run/docker.sock";
/// How long the slow daemon holds each exec request before it handles it.
const DELAY: Duration = Duration::from_millis(1000);
/// Rollouts at once (one group).
const ROLLOUTS: usize = 8;
/// The verifier's timeout: shorter than the exec queue the rollouts build up in the daemon.
const VERIFY_TIMEOUT: &str = "10";
/// Longest the run may take (it takes 2–3 minutes with the lane).
const RUN_LIMIT: Duration = Duration::from_secs(400);

/// A unix-socket proxy in front of the Docker daemon that serialises the exec endpoints (`POST
/// …/containers/{id}/exec`, `POST …/exec/{id}/start`) and delays each by [`DELAY`]; everything
/// else, including the attached streams of running execs, passes through at once.
struct SlowDaemon {
    socket: PathBuf,
    /// Exec requests delayed so far.
    delayed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowDaemon {
    fn start(dir: &Path) -> Self {
        let socket = dir.join("slow-docker.sock");
        let listener = UnixListener::bind(&socket).expect("bind the proxy socket");
        let delayed = Arc::new(AtomicUsize::new(0));
        // One exec request at a time, FIFO (tokio's mutex is fair).
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        let counter = Arc::clone(&delayed);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let (gate, counter) = (Arc::clone(&gate), Arc::clone(&counter));
                tokio::spawn(async move {
                    if let Ok(daemon) = UnixStream::connect(DAEMON).await {
                        pump(client, daemon, gate, counter).await;
                    }
                });
            }
        });
        SlowDaemon {
            socket,
            delayed,
            task,
        }
    }

    fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }
}

impl Drop for SlowDaemon {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a chunk from the client starts an exec request (a request head is written in one
/// piece by the client; bytes on an attached exec's stream never start with `POST /`).
fn is_exec_request(chunk: &[u8]) -> bool {
    let line = chunk.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    if words.next() != Some("POST") {
        return false;
    }
    let path = words.next().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    path.ends_with("/exec") || (path.contains("/exec/") && path.ends_with("/start"))
}

async fn pump(
    client: UnixStream,
    daemon: UnixStream,
    gate: Arc<tokio::sync::Mutex<()>>,
    delayed: Arc<AtomicUsize>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_daemon, mut to_daemon) = daemon.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            if is_exec_request(chunk) {
                let _held = gate.lock().await;
                tokio::time::sleep(DELAY).await;
                delayed.fetch_add(1, Relaxed);
                if to_daemon.write_all(chunk).await.is_err() {
                    break;
                }
            } else if to_daemon.write_all(chunk).await.is_err() {
                break;
            }
        }
        let _ = to_daemon.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut from_daemon, &mut to_client).await;
        let _ = to_client.shutdown().await;
    };
    tokio::join!(up, down);
}

/// One run at a time: the first test's timing is the point, and the machine has 2 cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Run {
    ok: bool,
    log: String,
    scores: Vec<f64>,
    failed_attempts: Option<usize>,
    left: Vec<String>,
    took: Duration,
}

/// Runs `swe_pytest --testing` (one group of `rollouts`) in `dir` with `extra` flags.
async fn run_swe_pytest(dir: &Path, rollouts: usize, extra: &[&str]) -> Run {
    let log_path = dir.join("run.log");
    let log_file = std::fs::File::create(&log_path).expect("log file");
    let mut child = tokio::process::Command::new(example_bin("swe_pytest"))
        .current_dir(dir)
        .args([
            "process",
            "--testing",
            "true",
            "--env.terminal_backend",
            "docker",
            "--env.use_wandb",
            "false",
            "--env.data_path_to_save_groups",
            "out.jsonl",
            "--env.total_steps",
            "1",
            "--env.group_size",
            &rollouts.to_string(),
        ])
        .args(extra)
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn swe_pytest");
    let pid = child.id().expect("child pid");
    let start = std::time::Instant::now();
    let status = tokio::time::timeout(RUN_LIMIT, child.wait()).await;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let status = match status {
        Ok(status) => status.expect("wait for swe_pytest"),
        Err(_) => {
            // Interrupted, so that its own cleanup removes its containers (the watchdog could
            // not: it reaches the daemon through this test's proxy).
            let _ = std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
            let _ = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
            panic!("the run did not finish within {RUN_LIMIT:?}:\n{log}");
        }
    };
    let failed_attempts = log
        .lines()
        .find_map(|l| l.trim().strip_prefix("failures  "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    let scores = std::fs::read_to_string(dir.join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .flat_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            v["scores"]
                .as_array()
                .expect("scores")
                .iter()
                .map(|s| s.as_f64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    Run {
        ok: status.success(),
        log,
        scores,
        failed_attempts,
        left: containers_of(pid),
        took: start.elapsed(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_wait_for_a_slow_daemon_and_finish_without_a_failed_attempt() {
    let _serial = SERIAL.lock().await;
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let slow = SlowDaemon::start(dir.path());
    // One exec in flight at a time, as many as the slow daemon handles.
    let host = slow.host();
    let flags = [
        "--env.verify_timeout",
        VERIFY_TIMEOUT,
        "--env.sandbox_exec_concurrency",
        "1",
        "--env.docker_host",
        &host,
    ];
    let run = run_swe_pytest(dir.path(), ROLLOUTS, &flags).await;
    let log = &run.log;
    assert!(run.ok, "the run failed:\n{log}");
    assert_eq!(
        run.failed_attempts,
        Some(0),
        "rollout attempts failed (the queue became failures):\n{log}"
    );
    assert_eq!(run.scores, vec![1.0; ROLLOUTS], "{log}");
    assert!(
        run.left.is_empty(),
        "containers left behind: {:?}",
        run.left
    );
    // The proxy really was slow: every rollout started at least its shell and the verifier's
    // command through it (two requests each).
    let delayed = slow.delayed.load(Relaxed);
    assert!(
        delayed >= 4 * ROLLOUTS,
        "only {delayed} exec requests went through the slow daemon"
    );
    // The wait was said, naming the queue and its knob, at most once a minute (a storm of
    // lines would be one per waiting request: hundreds here).
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("exec starts waiting for one of 1 slots"))
        .collect();
    let most = 1 + run.took.as_secs() as usize / 60;
    assert!(
        !said.is_empty() && said.len() <= most,
        "{} saturation lines in {:?} (1 to {most} expected):\n{log}",
        said.len(),
        run.took
    );
    assert!(
        said[0].contains("--env.sandbox_exec_concurrency") && said[0].contains("INFO"),
        "{}",
        said[0]
    );
}

/// Rollouts waiting for a place on a full host (`--env.max_containers_per_host`) hold no tool
/// permit: with 2 places and 2 permits, 8 rollouts of a group take turns. (When a rollout took
/// its permit first and then waited for a place, the waiting rollouts held both permits and the
/// two with places waited for a permit: the run never ended.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_waiting_for_a_place_hold_no_tool_permit() {
    let _serial = SERIAL.lock().await;
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--env.docker_hosts",
        "[\"unix:///var/run/docker.sock\"]",
        "--env.max_containers_per_host",
        "2",
        "--env.tool_pool_size",
        "2",
    ];
    let run = run_swe_pytest(dir.path(), 8, &flags).await;
    let log = &run.log;
    assert!(run.ok, "the run failed:\n{log}");
    assert_eq!(run.failed_attempts, Some(0), "{log}");
    assert_eq!(run.scores, vec![1.0; 8], "{log}");
    assert!(
        run.left.is_empty(),
        "containers left behind: {:?}",
        run.left
    );
}
