//! The Hermes `terminal-test` environment: the agent creates files with its terminal and file
//! tools; the reward reads them back inside the rollout's own sandbox with `cat`
//! (exact match 1.0, expected text contained 0.5, otherwise 0.0).
//!
//! ```text
//! cargo run --example terminal_test -- process --testing true --env.total_steps 5 --env.group_size 3
//! cargo run --example terminal_test -- process --env.total_steps 10 --env.group_size 1 \
//!     --env.use_wandb false --env.data_path_to_save_groups output.jsonl \
//!     --openai.base_url URL --openai.model_name M --openai.server_type openai --openai.health_check false
//! ```

use hermes_env::prelude::*;

/// One task: what to ask, which file to check and what it must contain.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    /// The instruction given to the agent.
    pub prompt: String,
    /// The file the reward reads.
    pub verify_path: String,
    /// The exact expected content (whitespace-trimmed).
    pub expected_content: String,
}

impl Task {
    fn new(prompt: &str, verify_path: &str, expected_content: &str) -> Self {
        Task {
            prompt: prompt.into(),
            verify_path: verify_path.into(),
            expected_content: expected_content.into(),
        }
    }
}

fn train_tasks() -> Vec<Task> {
    vec![
        Task::new(
            "Create a file at ~/greeting.txt containing exactly the text: Hello from Hermes Agent",
            "~/greeting.txt",
            "Hello from Hermes Agent",
        ),
        Task::new(
            "Create a file at ~/count.txt containing the numbers 1 to 5, one per line.",
            "~/count.txt",
            "1\n2\n3\n4\n5",
        ),
        Task::new(
            "Compute 123 + 456 and write only the result to ~/answer.txt",
            "~/answer.txt",
            "579",
        ),
    ]
}

/// Terminal and file tasks verified by reading the file the agent wrote.
#[hermes_env(
    name = "terminal-test",
    toolsets = ["terminal", "file"],
    max_agent_turns = 10,
    max_token_length = 16000,
    agent_temperature = 1.0,
    system_prompt = "You are a helpful assistant with access to a terminal and file tools. \
                     Complete the user's request using the tools, then reply briefly. Be precise.",
    group_size = 3,
    steps_per_eval = 3,
    total_steps = 3,
    ensure_scores_are_not_same = false,
    // Upstream evaluated terminal-test at temperature 0; it trains at agent_temperature.
    eval_temperature = 0.0,
    // Upstream config_init's server: OpenRouter, key from OPENROUTER_API_KEY (or ./.env).
    servers = [DefaultServer::openrouter("anthropic/claude-sonnet-4.5")],
)]
pub struct TerminalTest {
    /// Score for output that contains the expected text but is not an exact match.
    #[config(default = 0.5)]
    partial_credit: f64,
    tasks: Vec<Task>,
    next: usize,
}

#[hermes_env::hooks]
impl TerminalTest {
    async fn setup(&mut self) -> Result<()> {
        self.tasks = train_tasks();
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<Task> {
        let task = self.tasks.get(self.next % self.tasks.len().max(1)).cloned();
        self.next += 1;
        task
    }

    fn format_prompt(&self, item: &Task) -> String {
        item.prompt.clone()
    }

    async fn compute_reward(
        &self,
        item: &Task,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let out = ctx.terminal(&format!("cat {}", item.verify_path)).await?;
        if !out.success() {
            return Ok(0.0);
        }
        let got = out.output.trim();
        Ok(if got == item.expected_content {
            1.0
        } else if got.contains(&item.expected_content) {
            self.partial_credit
        } else {
            0.0
        })
    }

    fn eval_items(&self) -> Vec<Task> {
        vec![Task::new(
            "Compute 6 * 7 and write only the result to ~/result.txt",
            "~/result.txt",
            "42",
        )]
    }

    fn evaluate(&self, samples: &[EvalSample<Task>], metrics: &mut Metrics) {
        let exact = samples.iter().filter(|s| s.score >= 1.0).count();
        metrics.insert(
            "eval/accuracy".into(),
            exact as f64 / samples.len().max(1) as f64,
        );
    }

    fn wandb_log(&self, rollouts: &[ScoredRollout<Task>], metrics: &mut Metrics) {
        let n = rollouts.len().max(1) as f64;
        let count =
            |pred: &dyn Fn(f64) -> bool| rollouts.iter().filter(|r| pred(r.reward)).count() as f64;
        metrics.insert(
            "train/avg_reward".into(),
            rollouts.iter().map(|r| r.reward).sum::<f64>() / n,
        );
        metrics.insert("train/accuracy".into(), count(&|r| r >= 1.0) / n);
        metrics.insert(
            "train/partial_match_rate".into(),
            count(&|r| r > 0.0 && r < 1.0) / n,
        );
        metrics.insert("train/total_rollouts".into(), rollouts.len() as f64);
    }

    fn reference_solution(&self, item: &Task) -> Option<ReferenceSolution> {
        let solution = if item.verify_path == "~/count.txt" {
            ReferenceSolution::new().tool(
                "terminal",
                json!({"command": "seq 1 5 > ~/count.txt && cat ~/count.txt"}),
            )
        } else {
            ReferenceSolution::new()
                .tool(
                    "write_file",
                    json!({"path": item.verify_path, "content": item.expected_content}),
                )
                .tool("read_file", json!({"path": item.verify_path}))
        };
        Some(solution.answer(format!("Done: {} is written.", item.verify_path)))
    }
}
