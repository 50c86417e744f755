//! `swe-pytest`: the agent writes Python code in its sandbox; the reward uploads hidden pytest
//! tests into that same sandbox only at verification time (as terminal-bench does, so the
//! agent can neither see nor edit them) and runs pytest there. The reward is the fraction of
//! hidden tests that pass (1.0 = all).
//!
//! ```text
//! sandbox-images/build    # once: the python image, built offline from Debian packages
//! cargo run --example swe_pytest -- process --testing true
//! cargo run --example swe_pytest -- process \
//!     --openai.base_url URL --openai.model_name M --openai.server_type openai
//! ```
//!
//! Its sandbox defaults to Docker (the image has python3 and pytest). With
//! `--env.terminal_backend local` the host must have them too; where it does not, every
//! rollout is a verifier failure ("reward command … could not run"), never a 0 for the model.

use std::path::PathBuf;
use std::time::Duration;

use hermes_env::prelude::*;

/// Where the agent's code goes (relative to the sandbox home, so the local backend works too).
const SOLUTION: &str = "~/workspace/solution.py";
/// Where the hidden tests are uploaded at verification time (wiped first).
const HIDDEN: &str = "~/.hermes_verify";

/// One coding task: the instruction, the hidden test directory and a reference solution.
#[derive(Debug, Clone, Serialize)]
pub struct CodingTask {
    /// Short name; also the directory of its hidden tests.
    pub name: String,
    /// What to implement.
    pub instruction: String,
    /// A correct `solution.py`, played back by `--testing true`.
    #[serde(skip)]
    pub reference: String,
}

fn task(name: &str, instruction: &str, reference: &str) -> CodingTask {
    CodingTask {
        name: name.into(),
        instruction: instruction.into(),
        reference: reference.into(),
    }
}

fn tasks() -> Vec<CodingTask> {
    vec![
        task(
            "fizzbuzz",
            "Implement `fizzbuzz(n)` returning a list of strings for 1..=n: \"Fizz\" for multiples \
             of 3, \"Buzz\" for multiples of 5, \"FizzBuzz\" for both, otherwise the number.",
            "def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n        s = ('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')\n        out.append(s or str(i))\n    return out\n",
        ),
        task(
            "palindrome",
            "Implement `is_palindrome(s)`: True when `s` reads the same backwards, ignoring case \
             and every character that is not a letter or digit.",
            "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        ),
        task(
            "word_count",
            "Implement `word_count(text)` returning a dict from lower-cased word to count; words \
             are runs of letters, digits and apostrophes, punctuation is ignored.",
            "import re\n\ndef word_count(text):\n    counts = {}\n    for w in re.findall(r\"[a-z0-9']+\", text.lower()):\n        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
        ),
    ]
}

/// The hidden tests of a task, next to this example's source.
fn hidden_tests(task: &CodingTask) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/swe_pytest_tests")
        .join(&task.name)
}

/// Parses pytest's summary line (`3 passed, 1 failed in 0.05s`) into (passed, total).
fn pytest_counts(output: &str) -> Option<(u32, u32)> {
    let summary = output
        .lines()
        .rev()
        .find(|l| l.contains(" passed") || l.contains(" failed") || l.contains(" error"))?;
    let (mut passed, mut total) = (0, 0);
    let words: Vec<&str> = summary
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        if let Ok(n) = pair[0].parse::<u32>() {
            match pair[1] {
                "passed" => {
                    passed += n;
                    total += n;
                }
                "failed" | "error" | "errors" => total += n,
                _ => {}
            }
        }
    }
    (total > 0).then_some((passed, total))
}

/// Python coding tasks verified by hidden pytest tests in the rollout's own sandbox.
#[hermes_env(
    name = "swe-pytest",
    toolsets = ["terminal", "file"],
    max_agent_turns = 20,
    system_prompt = "You are a software engineer with a Linux terminal and file tools. Write the \
                     requested code, check it by running it, then reply briefly.",
    group_size = 2,
    total_steps = 3,
    ensure_scores_are_not_same = false,
    terminal_backend = "docker",
)]
pub struct SwePytest {
    /// Seconds pytest may run during verification.
    #[config(default = 120)]
    verify_timeout: i64,
    tasks: Vec<CodingTask>,
    next: usize,
}

#[hermes_env::hooks]
impl SwePytest {
    async fn setup(&mut self) -> Result<()> {
        self.tasks = tasks();
        for t in &self.tasks {
            let dir = hidden_tests(t);
            if !dir.is_dir() {
                bail!(
                    "hidden tests of task {} are missing at {}",
                    t.name,
                    dir.display()
                );
            }
        }
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<CodingTask> {
        let t = self.tasks.get(self.next % self.tasks.len().max(1)).cloned();
        self.next += 1;
        t
    }

    fn format_prompt(&self, item: &CodingTask) -> String {
        format!(
            "{}\n\nWrite it in {SOLUTION} (a plain Python module; create the directory if \
             needed). Hidden tests will import it with `from solution import ...`.",
            item.instruction
        )
    }

    async fn compute_reward(
        &self,
        item: &CodingTask,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        // Wipe anything the agent may have planted where the tests go, then upload them.
        ctx.terminal(&format!("rm -rf {HIDDEN}")).await?;
        ctx.upload_dir(hidden_tests(item), HIDDEN).await?;
        let out = ctx
            .terminal_with_timeout(
                &format!(
                    "cd ~/workspace 2>/dev/null || exit 3; PYTHONPATH=$PWD PYTHONHASHSEED=0 \
                     python3 -m pytest -q -p no:cacheprovider {HIDDEN}"
                ),
                Duration::from_secs(self.verify_timeout.max(1) as u64),
            )
            .await?;
        Ok(match pytest_counts(&out.output) {
            Some((passed, total)) => f64::from(passed) / f64::from(total),
            None => 0.0,
        })
    }

    fn eval_items(&self) -> Vec<CodingTask> {
        tasks()
    }

    fn evaluate(&self, samples: &[EvalSample<CodingTask>], metrics: &mut Metrics) {
        let solved = samples.iter().filter(|s| s.score >= 1.0).count();
        metrics.insert(
            "eval/pass_rate".into(),
            solved as f64 / samples.len().max(1) as f64,
        );
    }

    fn wandb_log(&self, rollouts: &[ScoredRollout<CodingTask>], metrics: &mut Metrics) {
        let solved = rollouts.iter().filter(|r| r.reward >= 1.0).count();
        metrics.insert(
            "train/pass_rate".into(),
            solved as f64 / rollouts.len().max(1) as f64,
        );
    }

    fn reference_solution(&self, item: &CodingTask) -> Option<ReferenceSolution> {
        Some(
            ReferenceSolution::new()
                .tool(
                    "write_file",
                    json!({"path": SOLUTION, "content": item.reference}),
                )
                .tool(
                    "terminal",
                    json!({"command": "cd ~/workspace && python3 -c 'import solution; print(\"ok\")'"}),
                )
                .answer(format!("Implemented {} in {SOLUTION}.", item.name)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::pytest_counts;

    #[test]
    fn pytest_summaries_are_counted() {
        assert_eq!(pytest_counts("...\n3 passed in 0.01s"), Some((3, 3)));
        assert_eq!(
            pytest_counts("F..\n1 failed, 2 passed in 0.02s"),
            Some((2, 3))
        );
        assert_eq!(pytest_counts("1 error in 0.1s"), Some((0, 1)));
        assert_eq!(pytest_counts("no tests ran in 0.01s"), None);
    }
}
