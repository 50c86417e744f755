//! Atropos's GSM8K environment (`environments/gsm8k_server.py`), ported: grade-school math
//! questions from `openai/gsm8k` (config `main`), answered in one turn with `\boxed{}`; +1 for
//! a correct answer and -1 otherwise, a length penalty when every answer of a group is
//! correct, rollouts with fewer than 10 trainable tokens dropped, groups whose gold answer
//! cannot be read or whose scores are all equal skipped, the `test` split as the eval set and
//! `train/percent_correct` / `eval/percent_correct` as metrics. The dataset position is
//! checkpointed in `serve` (upstream's `save_checkpoint` of `iter`).
//!
//! ```text
//! hf download openai/gsm8k --repo-type dataset      # once; offline afterwards
//! cargo run --example gsm8k -- process --testing true --env.total_steps 5
//! cargo run --example gsm8k -- serve --openai.base_url http://localhost:9001/v1 \
//!     --openai.model_name NousResearch/DeepHermes-3-Llama-3-3B-Preview --openai.server_type vllm
//! ```

use std::sync::Mutex;

use hermes_env::data::{self, Cursor, Dataset};
use hermes_env::prelude::*;

/// Upstream's system prompt, word for word.
const SYSTEM_PROMPT: &str =
    "You are a deep thinking AI, you may use extremely long chains of thought \
to deeply consider the problem and deliberate with yourself via systematic \
reasoning processes to help come to a correct solution prior to answering. \
You should enclose your thoughts and internal monologue inside <think> </think> \
tags, and then provide your solution or response to the problem.\n\n\
You are allocated a maximum of 2048 tokens, please strive to use less.

You will then provide your answer like this: \\boxed{your answer here}
It is important that you provide your answer in the correct format.
If you do not, you will not receive credit for your answer.
So please end your answer with \\boxed{your answer here}";

/// Rollouts with fewer trainable tokens are dropped ("remove obviously bad examples").
const MIN_TRAINABLE_TOKENS: usize = 10;

/// One GSM8K row: the question and the worked solution ending in `#### <answer>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Question {
    /// The question.
    pub question: String,
    /// The worked solution; the gold answer follows the last `#`.
    pub answer: String,
}

impl Question {
    /// The gold answer as upstream reads it: after the last `#`, trimmed, commas removed.
    pub fn gold(&self) -> String {
        self.answer
            .rsplit('#')
            .next()
            .unwrap_or_default()
            .trim()
            .replace(',', "")
    }
}

/// What the model wrote after its thinking (upstream scores `content.split("</think>")[-1]`).
fn after_think(text: &str) -> &str {
    text.rsplit("</think>").next().unwrap_or(text)
}

/// Whether `run`'s answer is `item`'s gold answer (as `math_verify` reads both).
fn correct(item: &Question, run: &AgentResult) -> bool {
    let reply = run.final_response().unwrap_or_default();
    hermes_env::math::verify(&format!("\\boxed{{{}}}", item.gold()), after_think(reply))
}

/// GSM8K: single-turn math answers checked against the dataset's gold answer.
#[hermes_env(
    name = "gsm8k",
    toolsets = [],
    max_agent_turns = 1,
    system_prompt = SYSTEM_PROMPT,
    dataset_name = "openai/gsm8k:main",
    tokenizer_name = "NousResearch/DeepHermes-3-Llama-3-3B-Preview",
    group_size = 8,
    total_steps = 1000,
    batch_size = 12,
    steps_per_eval = 100,
    max_token_length = 2048,
    wandb_name = "gsm8k",
    agent_temperature = 1.0,
    // Upstream's eval requests sample at 0.6 (its metrics.json says 0.0, which it never used).
    eval_temperature = 0.6,
    servers = [DefaultServer::openai(
        "http://localhost:9001/v1",
        "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    )],
)]
pub struct Gsm8k {
    /// Seed of the shuffle of both splits (upstream: `shuffle(seed=42)`).
    #[config(default = 42)]
    shuffle_seed: u64,
    train: Option<Cursor<Question>>,
    test: Vec<Question>,
    /// Groups scored since the last checkpoint's restart (saved as the environment's own
    /// state; upstream kept only `iter`, which the cursor keeps here).
    groups_scored: Mutex<u64>,
}

#[hermes_env::hooks]
impl Gsm8k {
    async fn setup(&mut self) -> Result<()> {
        let cfg = self.env_config();
        let name = cfg.dataset_name.clone().unwrap_or_default();
        let config = cfg.dataset_config.clone();
        let open = |split: &'static str| {
            let (name, config) = (name.clone(), config.clone());
            async move {
                let rows = Dataset::open_config(&name, config.as_deref(), split).await?;
                anyhow::Ok(rows.items::<Question>()?)
            }
        };
        let mut train = open("train").await?;
        let mut test = open("test").await?;
        data::shuffle(&mut train, self.shuffle_seed);
        data::shuffle(&mut test, self.shuffle_seed);
        self.train = Some(Cursor::new("train", train));
        self.test = test;
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<Question> {
        self.train.as_mut()?.next_item()
    }

    fn format_prompt(&self, item: &Question) -> String {
        item.question.clone()
    }

    async fn compute_reward(
        &self,
        item: &Question,
        run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        Ok(if correct(item, run) { 1.0 } else { -1.0 })
    }

    fn score_group(&self, item: &Question, group: &mut ScoredGroup) {
        *self.groups_scored.lock().unwrap() += 1;
        if hermes_env::math::extract_answer(&format!("\\boxed{{{}}}", item.gold())).is_none() {
            group.skip("the gold answer cannot be parsed");
            return;
        }
        for r in &mut group.rollouts {
            if r.trainable_tokens < MIN_TRAINABLE_TOKENS {
                r.drop_rollout(format!("only {} trainable tokens", r.trainable_tokens));
            }
        }
        let max_len = self.env_config().max_token_length as f64;
        let kept = |g: &ScoredGroup| {
            g.rollouts
                .iter()
                .filter(|r| r.dropped().is_none())
                .map(|r| r.reward)
                .collect::<Vec<f64>>()
        };
        if kept(group).iter().all(|&r| r == 1.0) {
            // Upstream's length penalty: none up to half of max_token_length, then linear to
            // 0 at max_token_length.
            let threshold = max_len * 0.5;
            for r in &mut group.rollouts {
                let length = r.trainable_tokens as f64;
                r.reward = if length <= threshold {
                    1.0
                } else {
                    1.0 - ((length - threshold) / (max_len - threshold)).min(1.0)
                };
            }
        }
        let scores = kept(group);
        if scores.iter().all(|&s| Some(s) == scores.first().copied()) && !scores.is_empty() {
            group.skip("every score is the same");
        }
    }

    fn reference_solution(&self, item: &Question) -> Option<ReferenceSolution> {
        Some(ReferenceSolution::new().answer(format!(
            "<think>\nThe worked solution gives {}.\n</think>\nThe answer is \\boxed{{{}}}",
            item.gold(),
            item.gold()
        )))
    }

    fn eval_items(&self) -> Vec<Question> {
        self.test.clone()
    }

    fn evaluate(&self, samples: &[EvalSample<Question>], metrics: &mut Metrics) {
        let right = samples.iter().filter(|s| correct(&s.item, &s.run)).count();
        metrics.insert(
            "eval/percent_correct".into(),
            right as f64 / samples.len().max(1) as f64,
        );
    }

    fn wandb_log(&self, rollouts: &[ScoredRollout<Question>], metrics: &mut Metrics) {
        if rollouts.is_empty() {
            return;
        }
        let right = rollouts.iter().filter(|r| correct(&r.item, &r.run)).count();
        metrics.insert(
            "train/percent_correct".into(),
            right as f64 / rollouts.len() as f64,
        );
    }

    fn save_checkpoint(&self, checkpoint: &mut Checkpoint) -> Result<()> {
        checkpoint.set("groups_scored", &*self.groups_scored.lock().unwrap())
    }

    fn load_checkpoint(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        *self.groups_scored.get_mut().unwrap() = checkpoint.get("groups_scored")?;
        Ok(())
    }
}
