//! End-to-end Docker lifecycle against the real daemon: the example environments earn 1.0
//! with `--env.terminal_backend docker`, and no labelled container survives a normal run, a
//! panic in `compute_reward`, SIGINT mid-run (twice), SIGKILL with nothing restarted (the
//! watchdog), SIGKILL of the run and its watchdog (the daemon-side lifetime; the reaper of an
//! immediate restart); the watchdog of a dead run removes its groups' snapshots too.
//! `sandbox list|reap` shows and removes orphans by hand.

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::docker::{
    containers_of, owned_by_this_process, require_docker, sandbox_states_of, states_of,
    wait_until_no_containers, watchdog_of, IMAGE,
};
use common::example_bin;
use hermes_env::prelude::*;
use hermes_runtime::app::{execute, parse_invocation, Resolved};

/// Longest a child run may take.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// One run at a time: the start-up reaper of one run must not race another test's orphans,
/// and the 2-core machine stays responsive.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn wait_bounded(mut child: Child, limit: Duration) -> std::process::ExitStatus {
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

fn run_example(name: &str, dir: &Path, extra: &[&str]) -> (u32, std::process::Output) {
    let child = Command::new(example_bin(name))
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
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn example");
    let pid = child.id();
    let start = Instant::now();
    let output = child.wait_with_output().expect("example output");
    assert!(
        start.elapsed() < RUN_LIMIT,
        "the run took {:?}",
        start.elapsed()
    );
    (pid, output)
}

fn scores(jsonl: &Path) -> Vec<f64> {
    std::fs::read_to_string(jsonl)
        .expect("jsonl written")
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

fn assert_reference_earns_one(example: &str, steps: &str) {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let (pid, out) = run_example(
        example,
        dir.path(),
        &["--env.total_steps", steps, "--env.group_size", "2"],
    );
    assert!(
        out.status.success(),
        "{example} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scores = scores(&dir.path().join("out.jsonl"));
    assert_eq!(scores.len(), 2 * steps.parse::<usize>().unwrap());
    assert!(
        scores.iter().all(|s| *s == 1.0),
        "{example} scores: {scores:?}"
    );
    assert_eq!(
        containers_of(pid),
        Vec::<String>::new(),
        "containers left behind"
    );
}

#[test]
fn terminal_test_reference_earns_1_in_docker_and_leaves_nothing() {
    assert_reference_earns_one("terminal_test", "3");
}

#[test]
fn swe_pytest_reference_earns_1_in_docker_and_leaves_nothing() {
    assert_reference_earns_one("swe_pytest", "3");
}

/// Waits until process `pid` owns at least one sandbox container (its lease comes first).
fn wait_for_a_container(pid: u32, child: &mut Child) {
    let start = Instant::now();
    loop {
        if !sandbox_states_of(pid).is_empty() {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before any container appeared");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no container appeared within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spawn_long_run(dir: &Path, extra: &[&str]) -> Child {
    Command::new(example_bin("swe_pytest"))
        .current_dir(dir)
        .args([
            "process",
            "--testing",
            "true",
            "--env.terminal_backend",
            "docker",
            "--env.use_wandb",
            "false",
            "--env.total_steps",
            "200",
            "--env.group_size",
            "4",
            "--env.data_path_to_save_groups",
            "out.jsonl",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn swe_pytest")
}

/// Polls (every 200 ms, up to `limit`) until process `pid` owns no labelled container; returns
/// how long that took, or the states still there at the limit.
fn time_until_gone(pid: u32, limit: Duration) -> Result<Duration, Vec<String>> {
    let start = Instant::now();
    loop {
        let states = states_of(pid);
        if states.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            return Err(states);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child we spawned.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

#[test]
fn sigint_mid_run_twice_still_removes_every_container() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_long_run(dir.path(), &[]);
    let pid = child.id();
    wait_for_a_container(pid, &mut child);
    // The first SIGINT stops gracefully (30 s of grace by default); the second, as a user
    // pressing Ctrl-C again would, cancels at once. Signals that arrive before the listener
    // runs again coalesce (as signals do), so the second comes a moment later.
    signal(pid, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(500));
    signal(pid, libc::SIGINT);
    let status = wait_bounded(child, Duration::from_secs(90));
    // 130 when the second signal cancelled the groups still in flight; 0 when they had all
    // finished within the 500 ms (terminal_test_e2e's commands never finish, so it checks the
    // 130 path exactly). Either way no container may be left.
    assert!(
        matches!(status.code(), Some(130) | Some(0)),
        "interrupted runs exit with 130 (or 0 when nothing was left to cancel): {status}"
    );
    // Creations cancelled in flight may land after the exit; the watchdog takes them.
    assert_eq!(
        wait_until_no_containers(pid, Duration::from_secs(15)),
        Vec::<String>::new(),
        "containers left after SIGINT"
    );
}

#[test]
fn sigkill_with_nothing_restarted_leaves_no_container_within_60s() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_long_run(dir.path(), &["--env.terminal_lifetime", "20"]);
    let pid = child.id();
    wait_for_a_container(pid, &mut child);
    let before = states_of(pid);
    signal(pid, libc::SIGKILL);
    let _ = wait_bounded(child, Duration::from_secs(30));
    match time_until_gone(pid, Duration::from_secs(60)) {
        Ok(took) => eprintln!(
            "figures: SIGKILL with {} container(s) ({before:?}), none left after {took:?}",
            before.len()
        ),
        Err(left) => {
            panic!("60 s after SIGKILL, containers remain: {left:?} (at the kill: {before:?})")
        }
    }
}

/// A killed run's pipe to its watchdog ends without a goodbye (the test above): the watchdog
/// then removes the run's containers and its groups' snapshot images.
#[test]
fn a_dead_runs_watchdog_removes_its_containers_and_group_snapshots() {
    let _serial = serial();
    require_docker();
    let run = format!("watchdog{}", &uuid_like()[..8]);
    let docker = |args: &[&str]| {
        let out = Command::new("docker").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let run_label = format!("hermes-env.run-id={run}");
    // A container of the run, committed as a group's snapshot is (its labels and the role).
    let container = docker(&[
        "create",
        "--label",
        "hermes-env=1",
        "--label",
        &run_label,
        IMAGE,
        "true",
    ]);
    let snapshot = format!("hermes-env-snapshot:{run}");
    docker(&[
        "commit",
        "--change",
        "LABEL hermes-env.role=snapshot",
        &container,
        &snapshot,
    ]);
    let mut watchdog = Command::new(example_bin("terminal_test"))
        .args(["sandbox", "watch", "--run-id", &run])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watchdog");
    drop(watchdog.stdin.take());
    let start = Instant::now();
    let left = loop {
        let left = (
            docker(&["ps", "-aq", "--filter", &format!("label={run_label}")]),
            docker(&["images", "-q", &snapshot]),
        );
        if left == (String::new(), String::new()) || start.elapsed() > Duration::from_secs(20) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = watchdog.kill();
    let _ = watchdog.wait();
    assert_eq!(
        left,
        (String::new(), String::new()),
        "the run's container and snapshot are gone within 20 s"
    );
}

/// Kills the run and its watchdog at once (as a kill of the whole process tree would).
fn kill_run_and_watchdog(child: Child) -> u32 {
    let pid = child.id();
    let watchdog = watchdog_of(pid);
    signal(watchdog, libc::SIGKILL);
    signal(pid, libc::SIGKILL);
    let _ = wait_bounded(child, Duration::from_secs(30));
    pid
}

#[test]
fn without_its_watchdog_a_killed_runs_started_containers_end_at_their_lifetime() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_long_run(dir.path(), &["--env.terminal_lifetime", "20"]);
    let pid = child.id();
    // Wait until some sandboxes run, so the lifetime has something to end.
    let start = Instant::now();
    while !sandbox_states_of(pid).iter().any(|s| s == "running") {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no running container"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = Instant::now();
    let pid = kill_run_and_watchdog(child);
    let before = states_of(pid);
    // The sleep is 20 s from the start; allow the daemon 15 s more to stop and remove.
    let deadline = Duration::from_secs(35);
    let mut left = states_of(pid);
    while left.iter().any(|s| s != "created") && killed.elapsed() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        left = states_of(pid);
    }
    assert!(
        left.iter().all(|s| s == "created"),
        "{:?} after the kill, started containers remain: {left:?}",
        killed.elapsed()
    );
    eprintln!(
        "figures: killed run + watchdog with {before:?}; after {:?}: {left:?} (never started: \
         no process, removed by the next reaper)",
        killed.elapsed()
    );
    // Whatever the daemon created but nobody started belongs to a run without a lease.
    let reap = Command::new(example_bin("swe_pytest"))
        .args(["sandbox", "reap"])
        .output()
        .unwrap();
    assert!(
        reap.status.success(),
        "{}",
        String::from_utf8_lossy(&reap.stderr)
    );
    assert_eq!(
        states_of(pid),
        Vec::<String>::new(),
        "sandbox reap removed the rest"
    );
}

#[test]
fn sigkill_of_run_and_watchdog_then_an_immediate_restart_leaves_nothing() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_long_run(dir.path(), &[]);
    wait_for_a_container(child.id(), &mut child);
    let pid = kill_run_and_watchdog(child);
    let before = states_of(pid);
    assert!(!before.is_empty(), "nothing cleaned up after the kill");
    let next = tempfile::tempdir().unwrap();
    let (_, out) = run_example("swe_pytest", next.path(), &["--env.total_steps", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("orphaned sandbox container"),
        "the restart's reaper reports what it removed:\n{stderr}"
    );
    let after = states_of(pid);
    eprintln!("figures: killed run + watchdog left {before:?}; after the restart's run: {after:?}");
    assert_eq!(
        after,
        Vec::<String>::new(),
        "the restart removed every container of the killed run"
    );
}

#[test]
fn sandbox_subcommand_lists_and_reaps_by_lease() {
    let _serial = serial();
    require_docker();
    let label = |k: &str, v: &str| ["--label".to_owned(), format!("{k}={v}")];
    let fake = |name: &str, role: &str, run: &str, cmd: &[&str]| {
        let out = Command::new("docker")
            .args(["run", "-d", "--init", "--network", "none", "--name", name])
            .args(label("hermes-env", "1"))
            .args(label("hermes-env.env", "lifecycle-test"))
            .args(label("hermes-env.role", role))
            .args(label("hermes-env.task-id", name))
            .args(label("hermes-env.run-id", run))
            .args(owned_by_this_process())
            .args(label("hermes-env.created", &unix_now().to_string()))
            .args(label("hermes-env.deadline", "1"))
            .arg(IMAGE)
            .args(cmd)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let suffix = &uuid_like()[..8];
    let (live_run, dead_run) = (format!("live{suffix}"), format!("dead{suffix}"));
    let (lease, kept, orphan) = (
        format!("hermes-test-lease-{suffix}"),
        format!("hermes-test-kept-{suffix}"),
        format!("hermes-test-orphan-{suffix}"),
    );
    fake(&lease, "lease", &live_run, &["sleep", "120"]);
    fake(&kept, "sandbox", &live_run, &["sleep", "120"]);
    fake(&orphan, "sandbox", &dead_run, &["sleep", "120"]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let this_process = format!("{}@{}", std::process::id(), host.trim());
    let bin = example_bin("swe_pytest");
    let list = Command::new(&bin)
        .args(["sandbox", "list"])
        .output()
        .unwrap();
    assert!(list.status.success());
    let table = String::from_utf8_lossy(&list.stdout);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "ROLE", "TASK", "ENV", "RUN", "ALIVE", "PROCESS", "STATE", "AGE", "DEADLINE",
            "ORPHAN"
        ]
    );
    let row = |name: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} is listed:\n{table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    // The deadline passed long ago, yet a live lease keeps the container.
    let kept_row = row(&kept);
    assert_eq!(
        kept_row[1..8],
        [
            "sandbox",
            &kept,
            "lifecycle-test",
            &live_run,
            "yes",
            &this_process,
            "running"
        ]
    );
    assert_eq!(kept_row[9..], ["passed", "no"]);
    assert_eq!(row(&lease)[1], "lease");
    assert_eq!(row(&lease)[10], "no");
    assert_eq!(row(&orphan)[5], "no", "its run has no lease");
    assert_eq!(row(&orphan)[10], "yes");
    let reap = Command::new(&bin)
        .args(["sandbox", "reap"])
        .output()
        .unwrap();
    assert!(reap.status.success());
    let reaped = String::from_utf8_lossy(&reap.stdout);
    assert!(reaped.contains(&format!("removed {orphan} ")), "{reaped}");
    assert!(
        !reaped.contains(&kept) && !reaped.contains(&lease),
        "{reaped}"
    );
    // Ending the lease ends the run: the next reap takes its container too.
    let stopped = Command::new("docker")
        .args(["rm", "-f", &lease])
        .output()
        .unwrap();
    assert!(stopped.status.success());
    let reap = Command::new(&bin)
        .args(["sandbox", "reap"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&reap.stdout).contains(&format!("removed {kept} ")));
    for name in [&lease, &kept, &orphan] {
        let gone = Command::new("docker")
            .args(["inspect", name])
            .output()
            .unwrap();
        assert!(!gone.status.success(), "{name} is gone");
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A random hex string (the test's names must not collide with another run's).
fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// An environment whose reward panics after using the sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct Job(u32);

/// Panics in `compute_reward`.
#[hermes_env(
    name = "panicky",
    toolsets = ["terminal"],
    max_agent_turns = 3,
    group_size = 2,
    total_steps = 2,
    ensure_scores_are_not_same = false,
    main = false
)]
pub struct Panicky {
    next: u32,
}

#[hermes_env::hooks]
impl Panicky {
    async fn get_next_item(&mut self) -> Option<Job> {
        self.next += 1;
        Some(Job(self.next))
    }

    fn format_prompt(&self, item: &Job) -> String {
        format!("job {}", item.0)
    }

    async fn compute_reward(
        &self,
        _item: &Job,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        ctx.terminal("touch ~/scored").await?;
        panic!("the reward exploded");
    }

    fn reference_solution(&self, item: &Job) -> Option<ReferenceSolution> {
        Some(
            ReferenceSolution::new()
                .tool(
                    "terminal",
                    json!({"command": format!("echo job {}", item.0)}),
                )
                .answer("done"),
        )
    }
}

#[test]
fn a_panic_in_compute_reward_leaves_no_container() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("out.jsonl");
    let args: Vec<OsString> = [
        "panicky",
        "process",
        "--testing",
        "true",
        "--env.terminal_backend",
        "docker",
        "--env.use_wandb",
        "false",
        "--env.data_path_to_save_groups",
        jsonl.to_str().unwrap(),
    ]
    .map(OsString::from)
    .to_vec();
    let Some(Resolved::Run(cfg)) = parse_invocation::<Panicky>("panicky", args).unwrap() else {
        panic!("expected a run");
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let shutdown = hermes_runtime::shutdown::Shutdown::new();
    let err = runtime
        .block_on(async {
            tokio::time::timeout(RUN_LIMIT, execute::<Panicky>(*cfg, &shutdown)).await
        })
        .expect("bounded")
        .expect_err("a verifier that always panics produces no training data");
    let err = format!("{err:#}");
    assert!(err.contains("compute_reward panicked"), "{err}");
    // A verifier failure is never a 0.0 reward: nothing in the JSONL, the item in the
    // failures file.
    assert_eq!(scores(&jsonl), Vec::<f64>::new());
    let failures = std::fs::read_to_string(dir.path().join("out.failures.jsonl")).unwrap();
    assert!(failures.lines().count() >= 1, "{failures}");
    for line in failures.lines() {
        assert!(line.contains("\"outcome\": \"verifier\""), "{line}");
        assert!(line.contains("\"attempts\": 3"), "{line}");
    }
    let left = wait_until_no_containers(std::process::id(), Duration::from_secs(30));
    assert_eq!(left, Vec::<String>::new(), "containers left after a panic");
}

fn eval_outcomes(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("samples.jsonl"))
        .expect("samples.jsonl written")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["outcome"].clone())
        .collect()
}

#[test]
fn a_bad_image_is_an_infrastructure_failure_per_rollout_and_the_run_goes_on() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(example_bin("swe_pytest"))
        .args([
            "evaluate",
            "--testing",
            "true",
            "--env.terminal_backend",
            "docker",
        ])
        .args(["--env.docker_image", "hermes-env/no-such-image:nope"])
        .args(["--env.use_wandb", "false", "--env.data_dir_to_save_evals"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Nothing could be evaluated: a non-zero exit naming the cause, never a 0.0 score.
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: no eval item could be scored"),
        "{stderr}"
    );
    assert!(last.contains("hermes-env/no-such-image:nope"), "{stderr}");
    let outcomes = eval_outcomes(dir.path());
    assert_eq!(outcomes.len(), 3);
    for o in outcomes {
        assert_eq!(o["kind"], "sandbox_failure", "{o}");
        assert!(
            o["message"]
                .as_str()
                .unwrap()
                .contains("hermes-env/no-such-image:nope"),
            "{o}"
        );
    }
}

#[test]
fn an_unreachable_daemon_is_one_clear_line() {
    let _serial = serial();
    let out = Command::new(example_bin("swe_pytest"))
        .args([
            "process",
            "--testing",
            "true",
            "--env.terminal_backend",
            "docker",
        ])
        .args(["--env.docker_host", "unix:///nonexistent/docker.sock"])
        .args(["--env.use_wandb", "false"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains("/nonexistent/docker.sock"),
        "{stderr}"
    );
}

/// Removes its own container in `compute_reward`, as if the daemon lost it mid-rollout.
#[hermes_env(
    name = "vanishing",
    toolsets = ["terminal"],
    max_agent_turns = 3,
    main = false
)]
pub struct Vanishing {}

#[hermes_env::hooks]
impl Vanishing {
    async fn get_next_item(&mut self) -> Option<Job> {
        None
    }

    fn format_prompt(&self, item: &Job) -> String {
        format!("job {}", item.0)
    }

    async fn compute_reward(
        &self,
        _item: &Job,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let filter = format!("label=hermes-env.task-id={}", ctx.task_id());
        let ids = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()?;
        let id = String::from_utf8_lossy(&ids.stdout).trim().to_owned();
        anyhow::ensure!(!id.is_empty(), "no container for task {}", ctx.task_id());
        Command::new("docker").args(["rm", "-f", &id]).output()?;
        let out = ctx.terminal("cat ~/result.txt").await?;
        Ok(if out.success() { 1.0 } else { 0.0 })
    }

    fn eval_items(&self) -> Vec<Job> {
        vec![Job(1), Job(2)]
    }

    fn reference_solution(&self, _item: &Job) -> Option<ReferenceSolution> {
        Some(
            ReferenceSolution::new()
                .tool("terminal", json!({"command": "echo 42 > ~/result.txt"}))
                .answer("done"),
        )
    }
}

#[test]
fn a_container_killed_mid_rollout_is_an_infrastructure_failure() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<OsString> = ["vanishing", "evaluate", "--testing", "true"]
        .into_iter()
        .chain([
            "--env.terminal_backend",
            "docker",
            "--env.use_wandb",
            "false",
        ])
        .chain(["--env.data_dir_to_save_evals", dir.path().to_str().unwrap()])
        .map(OsString::from)
        .collect();
    let Some(Resolved::Run(cfg)) = parse_invocation::<Vanishing>("vanishing", args).unwrap() else {
        panic!("expected a run");
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let shutdown = hermes_runtime::shutdown::Shutdown::new();
    let err = runtime
        .block_on(async {
            tokio::time::timeout(RUN_LIMIT, execute::<Vanishing>(*cfg, &shutdown)).await
        })
        .expect("bounded")
        .expect_err("every container vanishes: nothing can be scored");
    assert!(
        format!("{err:#}").contains("no eval item could be scored"),
        "{err:#}"
    );
    let outcomes = eval_outcomes(dir.path());
    assert_eq!(outcomes.len(), 2);
    for o in outcomes {
        assert_eq!(o["kind"], "sandbox_failure", "{o}");
        assert!(
            o["message"].as_str().unwrap().contains("no longer exists"),
            "{o}"
        );
    }
    let left = wait_until_no_containers(std::process::id(), Duration::from_secs(30));
    assert_eq!(left, Vec::<String>::new());
}
