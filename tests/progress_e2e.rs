//! Progress output and the end-of-run summary of the `terminal_test` example when stdout and
//! stderr are not terminals (plain lines), snapshot-tested with timing filtered out.

mod common;

use std::path::Path;
use std::process::Output;

use tokio::process::Command;

async fn run(args: &[&str], tmp: &Path) -> Output {
    Command::new(common::example_bin("terminal_test"))
        .args(args)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env("WANDB_MODE", "disabled")
        .env_remove("OPENAI_API_KEY")
        .env_remove("RUST_LOG")
        .output()
        .await
        .expect("run the example")
}

/// Progress lines (stderr) and the summary (stdout), with rates, times and ETAs replaced.
fn normalized(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("process: ") || l.starts_with("evaluate: "))
        .collect();
    format!(
        "--- stderr (progress)\n{}\n--- stdout\n{}",
        progress.join("\n"),
        String::from_utf8_lossy(&out.stdout)
    )
}

macro_rules! snapshot {
    ($text:expr) => {
        insta::with_settings!({filters => vec![
            (r"\d+\.\d+ (groups|items|rollouts)/s", "[rate] $1/s"),
            (r"ETA [0-9hms.]+", "ETA [eta]"),
            (r"(done|finished) in [0-9hms.]+", "$1 in [time]"),
            (r"(eval/evaluation_time_seconds +)[0-9.]+", "$1[seconds]"),
        ]}, {
            insta::assert_snapshot!($text);
        });
    };
}

#[tokio::test(flavor = "multi_thread")]
async fn process_progress_lines_and_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "process",
        "--testing",
        "true",
        "--env.total_steps",
        "5",
        "--env.group_size",
        "2",
        "--env.max_num_workers",
        "1",
        "--env.data_path_to_save_groups",
        "out.jsonl",
    ];
    let out = run(&args, tmp.path()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    snapshot!(normalized(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn evaluate_progress_lines_and_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "evaluate",
        "--testing",
        "true",
        "--env.data_dir_to_save_evals",
        "evals",
    ];
    let out = run(&args, tmp.path()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    snapshot!(normalized(&out));
}
