//! End-to-end Docker lifecycle against the real daemon: the example environments earn 1.0
//! with `--env.terminal_backend docker`, and no labelled container survives a normal run, a
//! panic in `compute_reward`, SIGINT mid-run (twice), or SIGKILL followed by the next start
//! (the start-up reaper). `sandbox list|reap` shows and removes orphans by hand.

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::docker::{containers_of, require_docker, wait_until_no_containers, IMAGE};
use common::example_bin;
use hermes_env::app::{execute, parse_invocation, Resolved};
use hermes_env::prelude::*;

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

/// Waits until process `pid` owns at least one labelled container.
fn wait_for_a_container(pid: u32, child: &mut Child) -> Vec<String> {
    let start = Instant::now();
    loop {
        let names = containers_of(pid);
        if !names.is_empty() {
            return names;
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

fn spawn_long_run(dir: &Path) -> Child {
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
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn swe_pytest")
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
    let mut child = spawn_long_run(dir.path());
    let pid = child.id();
    wait_for_a_container(pid, &mut child);
    // The first SIGINT stops gracefully (30 s of grace by default); the second, as a user
    // pressing Ctrl-C again would, cancels at once. Signals that arrive before the listener
    // runs again coalesce (as signals do), so the second comes a moment later.
    signal(pid, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(500));
    signal(pid, libc::SIGINT);
    let status = wait_bounded(child, Duration::from_secs(90));
    assert_eq!(
        status.code(),
        Some(130),
        "runs cancelled by a second signal exit with 130"
    );
    assert_eq!(
        containers_of(pid),
        Vec::<String>::new(),
        "containers left after SIGINT"
    );
}

#[test]
fn sigkill_leaves_containers_that_the_next_start_reaps() {
    let _serial = serial();
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_long_run(dir.path());
    let pid = child.id();
    wait_for_a_container(pid, &mut child);
    signal(pid, libc::SIGKILL);
    let _ = wait_bounded(child, Duration::from_secs(30));
    let orphans = containers_of(pid);
    assert!(!orphans.is_empty(), "SIGKILL runs no cleanup");
    let next = tempfile::tempdir().unwrap();
    let (_, out) = run_example("swe_pytest", next.path(), &["--env.total_steps", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("orphaned sandbox container"),
        "the start-up reaper reports what it removed"
    );
    assert_eq!(
        containers_of(pid),
        Vec::<String>::new(),
        "the next start removed the orphans"
    );
}

#[test]
fn sandbox_subcommand_lists_and_reaps_orphans() {
    let _serial = serial();
    require_docker();
    // An orphan: a labelled container whose owner pid does not exist.
    let dead_pid = "4000000";
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let created = Command::new("docker")
        .args(["run", "-d", "--rm=false", "--network", "none"])
        .args([
            "--label",
            "hermes-env=1",
            "--label",
            "hermes-env.task-id=orphan-task",
        ])
        .args(["--label", &format!("hermes-env.owner-pid={dead_pid}")])
        .args(["--label", "hermes-env.owner-start=1"])
        .args(["--label", &format!("hermes-env.owner-host={}", host.trim())])
        .args([IMAGE, "sleep", "infinity"])
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let bin = example_bin("swe_pytest");
    let list = Command::new(&bin)
        .args(["sandbox", "list"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success());
    let row = table
        .lines()
        .find(|l| l.contains("orphan-task"))
        .unwrap_or_else(|| panic!("the orphan is listed:\n{table}"));
    assert!(
        row.contains(&format!("{dead_pid} (gone)")) && row.ends_with("yes"),
        "{row}"
    );
    let reap = Command::new(&bin)
        .args(["sandbox", "reap"])
        .output()
        .unwrap();
    assert!(reap.status.success());
    assert!(String::from_utf8_lossy(&reap.stdout).contains("task orphan-task"));
    assert_eq!(
        containers_of(dead_pid.parse().unwrap()),
        Vec::<String>::new()
    );
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
    let shutdown = hermes_env::shutdown::Shutdown::new();
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
    let shutdown = hermes_env::shutdown::Shutdown::new();
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
