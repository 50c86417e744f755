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

/// Every answer of the scripted server takes 1.5 s, past the 1 s limit, twice: the rollout's
/// budget counts the agent's own work, not the wait on inference, so it is scored (the file
/// was written) instead of ending as a reward-0 `timeout` that would be trained on.
#[tokio::test]
async fn slow_inference_does_not_use_up_the_rollout_timeout() {
    let script = Script::new([
        Reply::tool(
            "terminal",
            json!({"command": "echo 'Hello from Hermes Agent' > ~/greeting.txt"}),
        ),
        Reply::text("done"),
    ]);
    let mut kit = Kit::<TerminalTest>::builder()
        .policy(script)
        .arg("--env.rollout_timeout", "1")
        .start()
        .await
        .unwrap();
    kit.server()
        .unwrap()
        .set_delay(std::time::Duration::from_millis(1500));
    let report = kit.run_next().await.unwrap();
    assert_eq!(report.outcome, RewardOutcome::Scored);
    assert_eq!(report.reward, 1.0);
    assert_eq!(kit.server().unwrap().request_count(), 2);
}

/// An inference call past its own `--openai.timeout` is the infrastructure's failure (`llm`,
/// not trained on), never the rollout's `timeout`.
#[tokio::test]
async fn an_inference_call_past_its_own_timeout_is_an_llm_failure() {
    let script = Script::new([Reply::text("done")]);
    let mut kit = Kit::<TerminalTest>::builder()
        .policy(script)
        .args([
            "--env.rollout_timeout",
            "1",
            "--openai.timeout",
            "1",
            "--env.llm_retries",
            "0",
        ])
        .start()
        .await
        .unwrap();
    kit.server()
        .unwrap()
        .set_delay(std::time::Duration::from_secs(3));
    let report = kit.run_next().await.unwrap();
    assert!(
        matches!(&report.outcome, RewardOutcome::LlmFailure { message }
            if message.contains("not answering")),
        "{:?}",
        report.outcome
    );
    assert!(!report.outcome.is_training_data());
}
