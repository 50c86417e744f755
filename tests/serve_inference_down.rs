//! `serve` against the real trajectory API (`run-api` of atroposlib 0.4.0) when inference dies
//! mid-run: after `--env.inference_down_grace` without a successful LLM call it delivers the
//! groups it finished, disconnects and exits non-zero naming the cause, instead of failing
//! item after item for ever.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::atropos::{free_port, Api, Env, Trainer};
use hermes_env::testing::{Reply, ScriptedServer};
use hermes_runtime::llm::ChatTokenizer;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_stops_after_the_grace_when_inference_dies_and_delivers_its_groups() {
    let api = Api::start(free_port()).await;
    let tmp = tempfile::tempdir().unwrap();
    let llm = ScriptedServer::start_with_tokenizer(
        |_: &Value| Reply::text("ok"),
        false,
        Arc::new(ChatTokenizer::builtin()),
    )
    .await
    .unwrap();
    let llm_url = llm.base_url();
    let mut env = Env::start(
        &api.url,
        tmp.path(),
        &[
            "--testing",
            "false",
            "--openai.base_url",
            &llm_url,
            "--openai.health_check",
            "false",
            "--env.inference_down_grace",
            "3",
            "--env.llm_retry_backoff",
            "0.05",
            "--env.llm_retry_backoff_cap",
            "0.2",
            "--env.ensure_scores_are_not_same",
            "false",
            "--env.max_batches_offpolicy",
            "100",
            "--env.data_path_to_save_groups",
            "groups.jsonl",
        ],
    );
    env.expect_line("waiting for the trainer to start", Duration::from_secs(60))
        .await;
    // A trainer that never pulls: the queue holds every group delivered.
    let trainer = Trainer::register(&api.url, 64, 100).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while trainer.status().await.1 < 2 {
        assert!(Instant::now() < deadline, "no group reached the API");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    drop(llm);
    let killed = Instant::now();
    let status = tokio::time::timeout(Duration::from_secs(120), env.child.wait())
        .await
        .expect("serve exits once inference is down past the grace")
        .unwrap();
    let took = killed.elapsed();
    assert!(!status.success(), "exits non-zero: {status}");
    assert!(
        took >= Duration::from_secs(3),
        "not before the 3 s grace: {took:?}"
    );
    let cause = env
        .expect_line("error: inference is down", Duration::from_secs(10))
        .await;
    assert!(
        cause.contains("--env.inference_down_grace 3 s") && cause.contains(&llm_url),
        "the line names the knob and the server: {cause}"
    );
    env.expect_line(
        "disconnected from the trajectory API",
        Duration::from_secs(5),
    )
    .await;
    let written = std::fs::read_to_string(tmp.path().join("groups.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        trainer.status().await.1 as usize,
        written,
        "every group it finished reached the API before it exited"
    );
    api.kill().await;
}
