//! The `next_step` hook in a real `process` run against a scripted model, local sandboxes: a
//! two-step item continues one conversation in one sandbox (step 1 verified between the
//! steps, the reward from both), every turn is trained on, and a failing `next_step` is a
//! verifier failure, recorded and never written as a group.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use hermes_env::prelude::*;
use hermes_runtime::testing::{Reply, ScriptedServer};
use serde_json::{json, Value};

#[derive(Debug, Clone, Serialize)]
pub struct Task {
    /// `next_step` fails for this item.
    broken: bool,
}

#[hermes_env(name = "two-steps", toolsets = ["file"], max_agent_turns = 3, main = false)]
pub struct TwoSteps {
    served: u32,
    /// Step 1's score, by rollout.
    first: Mutex<HashMap<String, f64>>,
}

const STEP_ONE: &str = "Step 1: write 7 to answer.txt, then say done.";
const STEP_TWO: &str = "Step 2: now write 8 to answer.txt, then say done.";

impl TwoSteps {
    async fn answer_is(ctx: &ToolContext, want: &str) -> f64 {
        match ctx.read_file("answer.txt").await {
            Ok(text) if text.trim() == want => 1.0,
            _ => 0.0,
        }
    }
}

#[hermes_env::hooks]
impl TwoSteps {
    async fn get_next_item(&mut self) -> Option<Task> {
        self.served += 1;
        Some(Task {
            broken: self.served == 2,
        })
    }

    fn format_prompt(&self, _item: &Task) -> String {
        STEP_ONE.to_owned()
    }

    async fn next_step(
        &self,
        item: &Task,
        run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<Option<String>> {
        let users = run.messages.iter().filter(|m| m.role == "user").count();
        if users > 1 {
            return Ok(None);
        }
        anyhow::ensure!(!item.broken, "the next step's files are missing");
        let score = Self::answer_is(ctx, "7").await;
        self.first
            .lock()
            .unwrap()
            .insert(ctx.task_id().to_owned(), score);
        Ok(Some(STEP_TWO.to_owned()))
    }

    async fn compute_reward(
        &self,
        _item: &Task,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let first = self
            .first
            .lock()
            .unwrap()
            .remove(ctx.task_id())
            .unwrap_or(0.0);
        Ok((first + Self::answer_is(ctx, "8").await) / 2.0)
    }
}

/// Writes the number the last instruction asks for, then says done.
fn model(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages.iter().rposition(|m| m["role"] == "user").unwrap();
    let text = messages[last_user]["content"].as_str().unwrap_or_default();
    if messages[last_user + 1..]
        .iter()
        .any(|m| m["role"] == "tool")
    {
        return Reply::text("done");
    }
    let number = if text.starts_with("Step 2") { "8" } else { "7" };
    Reply::Message {
        content: String::new(),
        tool_calls: vec![(
            "write_file".into(),
            json!({"path": "answer.txt", "content": number}).to_string(),
        )],
        reasoning: None,
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
async fn next_step_continues_the_conversation_in_the_same_sandbox() {
    let server = ScriptedServer::start(model).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("groups.jsonl");
    common::run_process::<TwoSteps>(
        "two-steps",
        &server.base_url(),
        &jsonl,
        &[
            "--env.total_steps",
            "2",
            "--env.group_size",
            "2",
            "--env.max_rollout_retries",
            "0",
            "--env.include_messages",
            "true",
            "--env.terminal_backend",
            "local",
        ],
    )
    .await;

    let groups = lines(&jsonl);
    assert_eq!(
        groups.len(),
        1,
        "the broken item's group is not written: {groups:?}"
    );
    let group = &groups[0];
    assert_eq!(group["scores"], json!([1.0, 1.0]), "both steps paid");
    for conversation in group["messages"].as_array().unwrap() {
        let roles: Vec<&str> = conversation
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
                "tool",
                "assistant"
            ],
            "one conversation over both steps"
        );
        assert_eq!(conversation[4]["content"], STEP_TWO);
    }
    // Every assistant turn of both steps is trained on: the masks hold the step-two answer.
    let masks: Vec<Vec<i64>> = serde_json::from_value(group["masks"].clone()).unwrap();
    let tokens: Vec<Vec<i64>> = serde_json::from_value(group["tokens"].clone()).unwrap();
    for (mask, tokens) in masks.iter().zip(&tokens) {
        assert_eq!(mask.len(), tokens.len());
        let trained = mask.iter().filter(|&&m| m != -100).count();
        assert!(trained > 0);
        let last = mask.iter().rposition(|&m| m != -100).unwrap();
        let first = mask.iter().position(|&m| m != -100).unwrap();
        assert!(last > first, "several trained spans");
    }
    // Two requests per step: 4 per rollout of the good item; the broken item's rollouts stop
    // after step 1 (the group is abandoned at its first failure, so its second rollout may
    // not have run: a bound).
    let requests = server.request_count();
    assert!(
        (2 * 4 + 2..=2 * 4 + 2 * 2).contains(&requests),
        "{requests} requests"
    );
    let failures = lines(&tmp.path().join("groups.failures.jsonl"));
    assert!(
        !failures.is_empty(),
        "the broken item's failure is recorded"
    );
    for f in &failures {
        let text = f.to_string();
        assert!(text.contains("verifier"), "{text}");
        assert!(
            text.contains("next_step failed: the next step's files are missing"),
            "{text}"
        );
    }
}
