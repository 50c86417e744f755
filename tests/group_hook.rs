//! The group hook `score_group` in a real `process` run against a scripted model: Atropos
//! GSM8K's length penalty (applied when every answer of a group is correct) reaches the
//! JSONL's scores, a dropped rollout leaves its group smaller (declared in
//! `group_overrides.group_size`, so the size rule keeps it), and a skipped group is counted
//! as a `skipped` drop, never written and never re-run.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use common::logs::Logs;
use hermes_env::prelude::*;
use hermes_runtime::testing::{Policy, Reply, ScriptedServer};
use serde_json::Value;

/// A GSM8K-shaped question: `n + 1` is the answer; `gold` is `None` when the dataset's gold
/// answer could not be parsed.
#[derive(Debug, Clone, Serialize)]
pub struct Question {
    n: u32,
    gold: Option<u32>,
    drop_shortest: bool,
}

/// Trainable tokens at which the penalty takes the whole reward (upstream uses
/// `max_token_length`).
const PENALTY_SCALE: f64 = 1000.0;

#[hermes_env(name = "length-penalty", toolsets = ["file"], max_agent_turns = 1, main = false)]
pub struct LengthPenalty {
    next: u32,
}

#[hermes_env::hooks]
impl LengthPenalty {
    async fn get_next_item(&mut self) -> Option<Question> {
        self.next += 1;
        let n = self.next;
        Some(Question {
            n,
            gold: (n != 3).then_some(n + 1),
            drop_shortest: n == 2,
        })
    }

    fn format_prompt(&self, item: &Question) -> String {
        format!("Question {}: what is {} + 1?", item.n, item.n)
    }

    async fn compute_reward(
        &self,
        item: &Question,
        run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        let answer = run.final_response().unwrap_or_default();
        let correct = item
            .gold
            .is_some_and(|g| answer.trim_end().ends_with(&format!("#### {g}")));
        Ok(if correct { 1.0 } else { -1.0 })
    }

    fn score_group(&self, item: &Question, group: &mut ScoredGroup) {
        if item.gold.is_none() {
            group.skip("the gold answer cannot be parsed");
            return;
        }
        if item.drop_shortest {
            let shortest = group
                .rollouts
                .iter()
                .map(|r| r.trainable_tokens)
                .min()
                .unwrap_or(0);
            for r in &mut group.rollouts {
                if r.trainable_tokens == shortest {
                    r.drop_rollout(format!("only {shortest} trainable tokens"));
                }
            }
        }
        let kept = || group.rollouts.iter().filter(|r| r.dropped().is_none());
        if kept().all(|r| r.reward == 1.0) {
            for r in &mut group.rollouts {
                assert_eq!(r.finish_reasons, [Some("stop".to_owned())]);
                r.reward = 1.0 - r.trainable_tokens as f64 / PENALTY_SCALE;
            }
        }
    }
}

/// Answers each question correctly, in the k-th request for that question with the k-th
/// length: `#### N` alone, then with 5 and 15 sentences of working.
fn model() -> impl Policy {
    let seen: Mutex<HashMap<String, usize>> = Mutex::default();
    move |request: &Value| {
        let prompt = request["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        let n: u32 = prompt
            .split_whitespace()
            .nth(1)
            .and_then(|w| w.trim_end_matches(':').parse().ok())
            .expect("a question number");
        let mut seen = seen.lock().unwrap();
        let k = seen.entry(prompt).or_default();
        let working = "Let me add the numbers carefully. ".repeat([0, 5, 15][*k % 3]);
        *k += 1;
        Reply::text(format!("{working}#### {}", n + 1))
    }
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn score_group_reshapes_drops_and_skips_in_a_process_run() {
    let server = ScriptedServer::start(model()).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("groups.jsonl");
    let logs = Logs::default();
    {
        let _capture = logs.capture();
        common::run_process::<LengthPenalty>(
            "length-penalty",
            &server.base_url(),
            &jsonl,
            &[
                "--env.total_steps",
                "3",
                "--env.group_size",
                "3",
                "--env.include_messages",
                "true",
            ],
        )
        .await;
    }
    // Three items, one request with n = 3 each (single-turn groups): the skipped group was
    // not re-run.
    assert_eq!(server.request_count(), 3);
    let groups = lines(&jsonl);
    assert_eq!(groups.len(), 2, "the skipped group is not written");
    for g in &groups {
        let scores: Vec<f64> = serde_json::from_value(g["scores"].clone()).unwrap();
        let masks: Vec<Vec<i64>> = serde_json::from_value(g["masks"].clone()).unwrap();
        assert_eq!(scores.len(), masks.len());
        for (score, mask) in scores.iter().zip(&masks) {
            let trainable = mask.iter().filter(|&&m| m != -100).count();
            assert!(trainable > 0);
            assert_eq!(*score, 1.0 - trainable as f64 / PENALTY_SCALE, "{g}");
        }
    }
    let first = &groups[0];
    let second = &groups[1];
    let question = |g: &Value| -> String {
        g["messages"][0]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (full, smaller) = if question(first).starts_with("Question 1") {
        (first, second)
    } else {
        (second, first)
    };
    assert!(question(smaller).starts_with("Question 2"));
    assert_eq!(full["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(smaller["tokens"].as_array().unwrap().len(), 2);
    assert_eq!(smaller["group_overrides"]["group_size"], 2);
    assert!(full["group_overrides"].get("group_size").is_none());
    let announced = logs.lines_with("dropped: skipped by the environment's score_group");
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert!(announced[0].contains("1 group dropped"), "{}", announced[0]);
    assert!(std::fs::read_to_string(tmp.path().join("groups.failures.jsonl")).is_err());
}
