//! Two live Docker-backed runs whose owners look alike — the same host name, different pid
//! namespaces (one under `unshare --pid --fork --mount-proc`, where its pid is 1, which on the
//! host is init) — each reaping every second: a short run goes from start to end while a long
//! one runs, both ways round, so every reaper (start-up, periodic, end of run) of each kind of
//! run meets a live run of the other kind. A removed container would fail its rollout's
//! verification, so every score of both runs must be 1.0.

mod common;

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::docker::require_docker;
use common::{ensure_debian_package, example_bin};

fn swe_pytest_args(steps: &str) -> Vec<String> {
    [
        "process",
        "--testing",
        "true",
        "--env.terminal_backend",
        "docker",
        "--env.use_wandb",
        "false",
        "--env.group_size",
        "2",
        "--env.sandbox_reap_interval",
        "1",
        "--env.data_path_to_save_groups",
        "out.jsonl",
        "--env.total_steps",
        steps,
    ]
    .map(String::from)
    .to_vec()
}

/// Sandbox containers whose owner-pid label is `pid` (in the owner's own pid namespace).
fn sandboxes_labelled_pid(pid: u32) -> usize {
    let out = Command::new("docker")
        .args(["ps", "-q", "--filter", "label=hermes-env.role=sandbox"])
        .args(["--filter", &format!("label=hermes-env.owner-pid={pid}")])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

fn scores(dir: &Path) -> Vec<f64> {
    std::fs::read_to_string(dir.join("out.jsonl"))
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
        .collect()
}

fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A run's command: the example binary, in a new pid namespace or not.
fn command(namespaced: bool, steps: &str, dir: &Path) -> Command {
    let bin = example_bin("swe_pytest");
    let mut cmd = if namespaced {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc"]).arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    cmd.args(swe_pytest_args(steps)).current_dir(dir);
    cmd
}

/// The owner-pid label of a run's containers: 1 in its own namespace, else its host pid.
fn label_pid(namespaced: bool, child: &Child) -> u32 {
    if namespaced {
        1
    } else {
        child.id()
    }
}

/// Starts a long run, runs a short one from start to end meanwhile, then stops the long one.
fn short_run_during_a_long_one(long_namespaced: bool) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    require_docker();
    ensure_debian_package("unshare", "util-linux");
    let (dir_long, dir_short) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut long = command(long_namespaced, "300", dir_long.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn the long run (unshare is util-linux)");
    let long_pid = label_pid(long_namespaced, &long);
    let start = Instant::now();
    while sandboxes_labelled_pid(long_pid) == 0 {
        if let Some(status) = long.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(long.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the long run ended ({status}) before its first container (unshare --pid needs root):\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the long run made no container"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let short_started = Instant::now();
    let short = command(!long_namespaced, "8", dir_short.path())
        .output()
        .expect("the short run");
    let short_took = short_started.elapsed();
    let short_stderr = String::from_utf8_lossy(&short.stderr);
    assert!(
        short.status.success(),
        "the short run failed:\n{short_stderr}"
    );
    assert!(
        long.try_wait().unwrap().is_none(),
        "the long run must outlive the short one for the test to mean anything"
    );
    let long_live = sandboxes_labelled_pid(long_pid);
    // The long run's reaper passes now see the short run gone; let a few pass, then stop it.
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) on the process group we created.
    unsafe { libc::kill(-(long.id() as i32), libc::SIGINT) };
    let status = wait_bounded(&mut long, Duration::from_secs(90));
    let mut long_stderr = String::new();
    std::io::Read::read_to_string(long.stderr.as_mut().unwrap(), &mut long_stderr).unwrap();
    // One SIGINT stops it gracefully: the groups in flight finish (exit 0).
    assert_eq!(
        status.code(),
        Some(0),
        "the long run stops gracefully:\n{long_stderr}"
    );

    let (long_scores, short_scores) = (scores(dir_long.path()), scores(dir_short.path()));
    eprintln!(
        "figures (long run namespaced: {long_namespaced}): short run {short_took:?}, {} rollouts; \
         long run {} rollouts, {long_live} of its sandboxes live when the short one ended",
        short_scores.len(),
        long_scores.len()
    );
    assert_eq!(short_scores.len(), 16, "{short_stderr}");
    assert!(
        short_scores.iter().all(|s| *s == 1.0),
        "the short run lost rollouts: {short_scores:?}\n{short_stderr}"
    );
    assert!(
        long_scores.len() >= 4,
        "the long run did too little: {long_scores:?}\n{long_stderr}"
    );
    assert!(
        long_scores.iter().all(|s| *s == 1.0),
        "the long run lost rollouts: {long_scores:?}\n{long_stderr}"
    );
    assert_eq!(
        sandboxes_labelled_pid(long_pid),
        0,
        "the long run cleaned up after itself"
    );
}

/// One test at a time: both start runs of the same environment.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_host_run_never_reaps_a_live_run_in_another_pid_namespace() {
    short_run_during_a_long_one(true);
}

#[test]
fn a_run_in_another_pid_namespace_never_reaps_a_live_host_run() {
    short_run_during_a_long_one(false);
}
