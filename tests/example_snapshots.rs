//! Snapshot tests of the example environments' prompts, tool schemas, tool calls and rewards,
//! made with the testing kit (`hermes_env::testing::Kit`): each item runs through the whole
//! pipeline (prompt → agent loop against the in-process scripted server → reward in a real
//! sandbox: local, or Docker for swe_pytest, whose default backend it is) in milliseconds to
//! seconds, offline. Changing a prompt template or a reward makes
//! exactly the affected snapshot fail; review changes with `cargo insta review`.

mod common;

#[allow(dead_code)]
#[path = "../examples/swe_pytest.rs"]
mod swe_pytest;
#[allow(dead_code)]
#[path = "../examples/terminal_bench.rs"]
mod terminal_bench;
#[allow(dead_code)]
#[path = "../examples/terminal_test.rs"]
mod terminal_test;
#[allow(dead_code)]
#[path = "../examples/web_research.rs"]
mod web_research;

use hermes_env::testing::{
    Cassette, CassettePlayer, CassetteRecorder, Kit, Reply, Script, ScriptedServer,
};
use hermes_env::Environment;
use hermes_runtime::llm::Split;
use serde_json::{json, Value};

use swe_pytest::SwePytest;
use terminal_bench::TerminalBench;
use terminal_test::TerminalTest;
use web_research::WebResearch;

/// Summaries of the first `n` training items and every eval item.
async fn summaries<E: Environment>(kit: &mut Kit<E>, n: usize) -> Value {
    let mut train = Vec::new();
    for _ in 0..n {
        train.push(kit.run_next().await.expect("an item").summary());
    }
    let mut eval = Vec::new();
    for item in kit.env().eval_items() {
        eval.push(kit.run_item(item, Split::Eval).await.summary());
    }
    json!({"train": train, "eval": eval})
}

#[tokio::test]
async fn terminal_test_reference_solutions() {
    let mut kit = Kit::<TerminalTest>::builder().start().await.unwrap();
    let value = summaries(&mut kit, 3).await;
    for reward in value.pointer("/train").unwrap().as_array().unwrap() {
        assert_eq!(reward["reward"], 1.0, "{reward}");
    }
    insta::assert_yaml_snapshot!(value);
}

#[tokio::test]
async fn terminal_test_full_report() {
    let mut kit = Kit::<TerminalTest>::builder().start().await.unwrap();
    let report = kit.run_next().await.unwrap();
    assert_eq!(report.reward, 1.0);
    insta::assert_yaml_snapshot!(report.snapshot());
}

#[tokio::test]
async fn terminal_test_partial_and_wrong_answers() {
    let script = Script::new([
        Reply::tool(
            "terminal",
            json!({"command": "echo 'says: Hello from Hermes Agent!' > ~/greeting.txt"}),
        ),
        Reply::text("Written."),
        Reply::tool("terminal", json!({"command": "echo 1 2 3 > ~/count.txt"})),
        Reply::text("Done."),
        Reply::text("I cannot do that."),
    ]);
    let mut kit = Kit::<TerminalTest>::builder()
        .policy(script)
        .start()
        .await
        .unwrap();
    let partial = kit.run_next().await.unwrap();
    let wrong = kit.run_next().await.unwrap();
    let nothing = kit.run_next().await.unwrap();
    assert_eq!(
        (partial.reward, wrong.reward, nothing.reward),
        (0.5, 0.0, 0.0)
    );
    insta::assert_yaml_snapshot!(json!([
        partial.summary(),
        wrong.summary(),
        nothing.summary()
    ]));
}

#[tokio::test]
async fn swe_pytest_prompts_and_tools() {
    // The example's default backend is Docker: its image has the pytest the verifier runs.
    tokio::task::spawn_blocking(common::docker::require_docker)
        .await
        .unwrap();
    let mut kit = Kit::<SwePytest>::builder()
        .policy(Script::new([
            Reply::tool(
                "write_file",
                json!({"path": "~/workspace/solution.py", "content": "def fizzbuzz(n):\n    return []\n"}),
            ),
            Reply::text("Implemented."),
        ]))
        .start()
        .await
        .unwrap();
    // A wrong solution passes only the hidden test for n = 0.
    let report = kit.run_next().await.unwrap();
    assert_eq!(report.outcome, hermes_env::RewardOutcome::Scored);
    assert!(
        (report.reward - 1.0 / 3.0).abs() < 1e-9,
        "{}",
        report.reward
    );
    let prompts: Vec<String> = kit
        .env()
        .eval_items()
        .iter()
        .map(|item| kit.env().format_prompt(item))
        .collect();
    insta::assert_yaml_snapshot!(json!({
        "wrong_solution": report.summary(),
        "system_prompt": report.system_prompt,
        "tools": report.snapshot()["tools"],
        "prompts": prompts,
    }));
}

#[tokio::test]
async fn web_research_reference_solutions() {
    let mut kit = Kit::<WebResearch>::builder()
        .arg("--env.dataset_name", "none")
        .start()
        .await
        .unwrap();
    let value = summaries(&mut kit, 2).await;
    assert_eq!(
        value["eval"].as_array().unwrap().len(),
        2,
        "built-in 80/20 split"
    );
    insta::assert_yaml_snapshot!(value);
}

#[tokio::test]
async fn web_research_judge_scores_through_the_run_server() {
    let script = Script::new([
        Reply::tool("web_search", json!({"query": "moons"})),
        Reply::text("Saturn, see https://www.nasa.gov/saturn and https://web.dev/moons"),
        // The judge's answer, fenced as models often do.
        Reply::text("```json\n{\"score\": 0.5, \"reason\": \"half right\"}\n```"),
    ]);
    let mut kit = Kit::<WebResearch>::builder()
        .arg("--env.dataset_name", "none")
        .policy(script)
        .start()
        .await
        .unwrap();
    let report = kit.run_next().await.unwrap();
    // 0.5 (judge) × (0.6 + 0.2 (web tool) + 0.2 (2 turns) + 0.1 (nasa.gov, web.dev)) = 0.55
    assert!((report.reward - 0.55).abs() < 1e-9, "{}", report.reward);
    let requests = kit.server().unwrap().requests();
    let judge = requests.last().unwrap();
    assert_eq!(judge["temperature"], 0.0);
    assert_eq!(judge["max_tokens"], 150);
    assert!(judge.get("tools").is_none(), "{judge}");
    insta::assert_yaml_snapshot!(json!({
        "report": report.summary(),
        "judge_messages": judge["messages"],
    }));
}

#[tokio::test]
async fn a_recorded_cassette_replays_the_same_rollout() {
    // "The real model" is a scripted server here; recording goes through the proxy.
    let model = ScriptedServer::start(Script::new([
        Reply::tool(
            "terminal",
            json!({"command": "echo 'Hello from Hermes Agent' > ~/greeting.txt"}),
        ),
        Reply::text("Written."),
    ]))
    .await
    .unwrap();
    let recorder = CassetteRecorder::start(&model.base_url(), None)
        .await
        .unwrap();
    let mut kit = Kit::<TerminalTest>::builder()
        .upstream(&recorder.base_url())
        .start()
        .await
        .unwrap();
    let recorded = kit.run_next().await.unwrap();
    assert!(kit.server().is_none());
    assert_eq!(recorded.reward, 1.0);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("count.cassette.jsonl");
    recorder.cassette().save(&path).unwrap();

    let player = CassettePlayer::new(Cassette::load(&path).unwrap());
    let mut kit = Kit::<TerminalTest>::builder()
        .policy(player)
        .start()
        .await
        .unwrap();
    let replayed = kit.run_next().await.unwrap();
    assert_eq!(replayed.summary(), recorded.summary());
    // The next item was never recorded: the player says so instead of inventing an answer.
    let unrecorded = kit.run_next().await.unwrap();
    assert!(
        unrecorded
            .run
            .llm_error
            .as_deref()
            .is_some_and(|e| e.contains("the cassette has no answer")),
        "{:?}",
        unrecorded.run.llm_error
    );
}

#[tokio::test]
async fn terminal_bench_prompts_and_verifier_rewards() {
    // On the local backend the tasks that need their own image are skipped at setup; their
    // images and Docker runs are covered by tests/terminal_bench_e2e.rs.
    let mut kit = Kit::<TerminalBench>::builder().start().await.unwrap();
    let value = summaries(&mut kit, 0).await;
    for item in value.pointer("/eval").unwrap().as_array().unwrap() {
        assert_eq!(item["reward"], 1.0, "{item}");
    }
    insta::assert_yaml_snapshot!(value);
}
