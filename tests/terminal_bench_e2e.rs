//! The `terminal_bench` example end to end on the Docker backend: `evaluate --testing true`
//! plays every task's reference solution (one task in an image built from its Dockerfile),
//! scores pass rate 1.0 with per-category metrics, and leaves no labelled container behind;
//! `check` passes on every task. Needs the Docker daemon and the `hermes-env/python` image
//! (built by `sandbox-images/build` when missing).

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::docker::{containers_of, require_docker};
use serde_json::Value;

/// Upper bound of one run (image build included).
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Runs the example in `dir` with `args`; returns its pid and output, bounded by [`RUN_LIMIT`].
fn run(dir: &Path, args: &[&str]) -> (u32, Output) {
    let mut child = std::process::Command::new(common::example_bin("terminal_bench"))
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the example");
    let pid = child.id();
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("terminal_bench {args:?} did not finish within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (pid, child.wait_with_output().expect("output"))
}

#[test]
fn reference_solutions_pass_every_task_in_docker_and_leave_nothing() {
    require_docker();
    let tmp = tempfile::tempdir().unwrap();
    let evals = tmp.path().join("evals");
    let (pid, out) = run(
        tmp.path(),
        &[
            "evaluate",
            "--testing",
            "true",
            "--env.terminal_backend",
            "docker",
            "--env.use_wandb",
            "false",
            "--env.data_dir_to_save_evals",
            evals.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "evaluate failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(evals.join("metrics.json")).unwrap())
            .unwrap();
    let all = &doc["results"]["all"];
    for (key, want) in [
        ("eval/pass_rate", 1.0),
        ("eval/total_tasks", 3.0),
        ("eval/passed_tasks", 3.0),
        ("eval/pass_rate_file_operations", 1.0),
        ("eval/pass_rate_version_control", 1.0),
        ("eval/pass_rate_debugging", 1.0),
    ] {
        assert_eq!(all[key].as_f64(), Some(want), "{key} in {all}");
    }
    assert_eq!(
        doc["config_general"]["generation_parameters"]["terminal_backend"],
        "docker"
    );
    assert_eq!(
        std::fs::read_to_string(evals.join("verifier/fix-script/reward.txt"))
            .expect("the verifier's logs are saved")
            .trim(),
        "1"
    );
    assert_eq!(
        containers_of(pid),
        Vec::<String>::new(),
        "containers left behind"
    );

    let (pid, out) = run(
        tmp.path(),
        &["check", "--limit", "10", "--env.terminal_backend", "docker"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "check: 3 items, 3 passed, 0 failed (min score 1)"
    );
    assert_eq!(
        containers_of(pid),
        Vec::<String>::new(),
        "containers left behind by check"
    );
}
