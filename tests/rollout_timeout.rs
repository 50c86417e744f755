//! `--env.rollout_timeout`: a rollout whose agent loop runs past the limit is stopped, scores 0
//! with outcome `timeout`, and its sandbox is still torn down.

#[allow(dead_code)]
#[path = "../examples/terminal_test.rs"]
mod terminal_test;

use hermes_env::testing::{Kit, Reply, Script};
use hermes_env::RewardOutcome;
use serde_json::json;
use terminal_test::TerminalTest;

#[tokio::test]
async fn a_rollout_past_its_deadline_scores_zero_with_a_timeout_outcome() {
    let script = Script::new([Reply::tool(
        "terminal",
        json!({"command": "sleep 30", "timeout": 60}),
    )]);
    let mut kit = Kit::<TerminalTest>::builder()
        .policy(script)
        .arg("--env.rollout_timeout", "1")
        .start()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let report = kit.run_next().await.unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "stopped at the deadline"
    );
    assert_eq!(report.reward, 0.0);
    assert_eq!(report.outcome, RewardOutcome::Timeout { seconds: 1.0 });
}
