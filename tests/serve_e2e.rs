//! `serve` end to end against the REAL Atropos trajectory API (`run-api` from
//! `atroposlib==0.4.0`, installed into `target/atropos-venv` by the test set-up) with Phase 2
//! generation on the embedded scripted vLLM-style `/generate` server: a trainer stand-in
//! registers and pulls batches; the groups satisfy the trainer's invariants; the environment
//! pauses when the off-policy queue is full, evaluates on the step jump and exits at
//! `total_steps`; and it survives the API server restarting.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::atropos::{free_port, Api, Env, Trainer};
use hermes_runtime::llm::ChatTokenizer;
use serde_json::{json, Value};

/// Checks one group from `/batch` against what a trainer relies on.
fn assert_trainable(group: &Value, tok: &ChatTokenizer, env_id: i64) {
    assert_eq!(group["env_id"], env_id);
    let tokens = group["tokens"].as_array().unwrap();
    let masks = group["masks"].as_array().unwrap();
    let logprobs = group["inference_logprobs"]
        .as_array()
        .expect("Phase 2 groups carry inference_logprobs");
    let messages = group["messages"].as_array().unwrap();
    assert_eq!(tokens.len(), 2);
    assert_eq!(group["scores"].as_array().unwrap().len(), 2);
    assert_eq!(masks.len(), 2);
    assert_eq!(logprobs.len(), 2);
    assert_eq!(messages.len(), 2);
    assert_eq!(group["group_overrides"], json!({}), "no placeholder marker");
    for i in 0..2 {
        let t: Vec<i64> = tokens[i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let m: Vec<i64> = masks[i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let l: Vec<f64> = logprobs[i]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(t.len(), m.len(), "tokens and masks have equal lengths");
        assert_eq!(t.len(), l.len(), "tokens and logprobs have equal lengths");
        let ids: Vec<u32> = t.iter().map(|&x| x as u32).collect();
        // Masked positions have logprob 1.0; trained ones carry the sampler's (never 1.0 here).
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for p in 0..t.len() {
            if m[p] == -100 {
                assert_eq!(l[p], 1.0, "logprob 1.0 at masked position {p}");
            } else {
                assert_eq!(m[p], t[p], "a trained mask equals its token");
                assert_ne!(l[p], 1.0, "real logprob at trained position {p}");
                match spans.last_mut() {
                    Some((_, end)) if *end == p => *end = p + 1,
                    _ => spans.push((p, p + 1)),
                }
            }
        }
        // Trained spans are exactly the assistant turns: each follows an assistant header
        // and ends with the end-of-turn token; everything else (system, user, tool) is masked.
        let conv = messages[i].as_array().unwrap();
        for msg in conv {
            assert!(msg.get("role").is_some() && msg.get("content").is_some());
        }
        let assistant_turns = conv.iter().filter(|m| m["role"] == "assistant").count();
        assert_eq!(
            spans.len(),
            assistant_turns,
            "one trained span per assistant turn"
        );
        for &(start, end) in &spans {
            let before = tok.decode(&ids[..start], false).unwrap();
            assert!(
                before.ends_with("<|im_start|>assistant\n"),
                "a trained span starts right after an assistant header"
            );
            let span = tok.decode(&ids[start..end], false).unwrap();
            assert!(
                span.ends_with("<|im_end|>"),
                "trained span ends the turn: {span:?}"
            );
        }
        for msg in conv.iter().filter(|m| m["role"] == "tool") {
            let content = msg["content"].as_str().unwrap();
            let untrained: String = spans
                .iter()
                .fold((0usize, String::new()), |(at, mut acc), &(s, e)| {
                    acc.push_str(&tok.decode(&ids[at..s], false).unwrap());
                    (e, acc)
                })
                .1;
            assert!(
                untrained.contains(content),
                "tool output is in the masked part"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_feeds_a_real_atropos_trainer_pauses_and_stops_at_total_steps() {
    let port = free_port();
    let api = Api::start(port).await;
    let tmp = tempfile::tempdir().unwrap();
    let evals = tmp.path().join("evals");
    // The environment starts first and must wait for the trainer.
    let mut env = Env::start(
        &api.url,
        tmp.path(),
        &[
            "--env.total_steps",
            "3",
            "--env.max_batches_offpolicy",
            "3",
            "--env.ensure_scores_are_not_same",
            "false",
            "--env.data_dir_to_save_evals",
            evals.to_str().unwrap(),
            "--env.use_wandb",
            "true",
        ],
    );
    env.expect_line(
        "waiting for the trainer to register",
        Duration::from_secs(60),
    )
    .await;
    let trainer = Trainer::register(&api.url, 4, 3).await;
    env.expect_line("registered as env_id 0", Duration::from_secs(30))
        .await;
    // Queue cap: 3 batches of 4 sequences = 6 groups of 2; the environment pauses there.
    env.expect_line("pausing", Duration::from_secs(120)).await;
    let (step, queued) = trainer.status().await;
    assert_eq!(step, 0);
    assert_eq!(
        queued, 6,
        "the queue holds exactly max_batches_offpolicy batches"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(trainer.status().await.1, 6, "paused: nothing more is sent");

    // The trainer pulls: the first /batch forms all three batches (step 0 → 3), the next two
    // return the other pre-formed ones (meanwhile the environment resumes and sends more).
    let tok = ChatTokenizer::builtin();
    let mut groups = 0;
    for _ in 0..3 {
        let b = trainer.get("/batch").await;
        let batch = b["batch"].as_array().expect("a pre-formed batch");
        let seqs: usize = batch
            .iter()
            .map(|g| g["tokens"].as_array().unwrap().len())
            .sum();
        assert_eq!(seqs, 4, "a batch is exactly batch_size sequences");
        for g in batch {
            assert_trainable(g, &tok, 0);
            groups += 1;
        }
    }
    assert_eq!(groups, 6);
    assert_eq!(trainer.status().await.0, 3);
    // The 0 → 3 jump crosses step 3 (steps_per_eval of the example): the fixed trigger runs
    // the evaluation that upstream's modular test skips; then two more groups make
    // 3 + 2·2 // 4 = 4 > total_steps, and the environment exits.
    env.expect_line("starting evaluation", Duration::from_secs(30))
        .await;
    let (out, err) = env.finish(Duration::from_secs(120)).await;
    assert!(
        out.contains("serve stopped at total_steps at trainer step 3"),
        "summary: {out}"
    );
    assert!(out.contains("0 lost"), "summary: {out}");
    assert!(out.contains("1 evaluations"), "summary: {out}");
    assert!(
        err.contains("disconnected from the trajectory API"),
        "{err}"
    );
    assert!(
        evals.join("metrics.json").exists(),
        "the evaluation wrote its results"
    );
    let (_, queued) = trainer.status().await;
    assert!(
        queued >= 2,
        "it stopped once its queued groups would pass total_steps"
    );
    // The wandb run (offline here) logged at the API step with the registered-name prefix.
    let history = find_file(&tmp.path().join("wandb-runs"), "wandb-history.jsonl")
        .expect("serve wrote a wandb run directory");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&history)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = rows.last().expect("at least one history row");
    assert_eq!(row["_step"], 3, "logged at the trainer's step");
    for key in [
        "terminal-test_0_train/mean_reward",
        "terminal-test_0_train/avg_reward",
        "terminal-test_0_train/rollouts",
        "terminal-test_0_train_perf/task_duration_mean",
    ] {
        assert!(row.get(key).is_some(), "{key} missing from {row}");
    }
    api.kill().await;
}

/// The first file named `name` below `dir`.
fn find_file(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if entry.file_name() == name {
            return Some(path);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_re_registers_after_the_api_restarts_without_losing_groups() {
    let port = free_port();
    let api = Api::start(port).await;
    let tmp = tempfile::tempdir().unwrap();
    let trainer = Trainer::register(&api.url, 4, 2).await;
    let mut env = Env::start(
        &api.url,
        tmp.path(),
        &[
            "--env.total_steps",
            "2",
            "--env.max_batches_offpolicy",
            "50",
            "--env.steps_per_eval",
            "0",
            "--env.ensure_scores_are_not_same",
            "false",
        ],
    );
    env.expect_line("registered as env_id 0", Duration::from_secs(60))
        .await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while trainer.status().await.1 < 2 {
        assert!(Instant::now() < deadline, "no groups arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The API goes away with everything it held, and comes back empty on the same port.
    let port_again = api.port;
    api.kill().await;
    env.expect_line("re-registering", Duration::from_secs(60))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let api = Api::start(port_again).await;
    let trainer = Trainer::register(&api.url, 4, 2).await;
    let line = env
        .expect_line("re-registered as env_id 0", Duration::from_secs(60))
        .await;
    eprintln!("{line}");
    // The new trainer gets trainable groups and drives the run to total_steps.
    let tok = ChatTokenizer::builtin();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pulled = 0;
    while trainer.status().await.0 < 2 {
        assert!(
            Instant::now() < deadline,
            "the trainer never reached step 2"
        );
        if let Some(batch) = trainer.get("/batch").await["batch"].as_array() {
            for g in batch {
                assert_trainable(g, &tok, 0);
                pulled += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // One /batch may form several batches at once (the step jumps past 2) and hands them out
    // one per call: take the ones still pre-formed.
    while let Some(batch) = trainer.get("/batch").await["batch"].as_array().cloned() {
        for g in &batch {
            assert_trainable(g, &tok, 0);
            pulled += 1;
        }
    }
    assert!(pulled >= 4);
    let (out, _) = env.finish(Duration::from_secs(120)).await;
    eprintln!("{out}");
    assert!(out.contains("0 lost"), "nothing finished was lost: {out}");
    assert!(out.contains("after 1 re-registrations"), "summary: {out}");
    api.kill().await;
}
