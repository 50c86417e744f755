//! `swe-pytest`: the agent writes Python code in its sandbox; the reward uploads hidden pytest
//! tests into that same sandbox only at verification time (as terminal-bench does, so the
//! agent can neither see nor edit them) and runs pytest there. The reward is the fraction of
//! hidden tests that pass (1.0 = all), read from pytest's JUnit report.
//!
//! Hardened against `hack`: the tests, a copy of `solution.py` and the report go to a fresh
//! directory with a random name (nothing else of the workspace is importable, no config or
//! `conftest.py` from above applies); the printed summary is never parsed (the solution's
//! own code could print one); the report must list every hidden test; and the tests compare
//! canonical JSON, so an object whose `__eq__` always says yes passes nothing.
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

use std::path::{Path, PathBuf};
use std::time::Duration;

use hermes_env::prelude::*;

/// Where the agent's code goes (relative to the sandbox home, so the local backend works too).
const SOLUTION: &str = "~/workspace/solution.py";

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

/// (passed, total) from a pytest JUnit XML report: test cases without a failure, error or
/// skip element, and all test cases.
fn junit_counts(xml: &str) -> (u32, u32) {
    let (mut passed, mut total) = (0, 0);
    for case in xml.split("<testcase").skip(1) {
        let body = case.split("</testcase>").next().unwrap_or(case);
        total += 1;
        if !["<failure", "<error", "<skipped"]
            .iter()
            .any(|bad| body.contains(bad))
        {
            passed += 1;
        }
    }
    (passed, total)
}

/// The number of test functions in a task's hidden tests (the report must list all of them).
fn expected_tests(dir: &Path) -> Result<u32> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let text = std::fs::read_to_string(entry?.path()).unwrap_or_default();
        n += text.lines().filter(|l| l.starts_with("def test_")).count() as u32;
    }
    Ok(n)
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
        // Tests, the solution and the report live in a directory made now under a random name,
        // which the agent cannot have prepared; only solution.py is copied in (nothing else of
        // the workspace reaches the import path), and pytest takes its config from there. The
        // tests call the solution through `hermes_call`, in child interpreters: pytest never
        // imports it, so it cannot patch the runner that judges it.
        let dir = ctx.fresh_dir().await?;
        let tests = hidden_tests(item);
        ctx.upload_dir(&tests, &dir).await?;
        ctx.write_call_harness(&dir).await?;
        ctx.write_file(&format!("{dir}/pytest.ini"), "[pytest]\n")
            .await?;
        let copied = ctx
            .terminal(&format!("cat {SOLUTION} > {dir}/solution.py"))
            .await?;
        if !copied.success() {
            return Ok(0.0);
        }
        let out = ctx
            .terminal_isolated(
                &format!(
                    "cd {dir} && PYTHONHASHSEED=0 python3 -I -m pytest -q -p no:cacheprovider \
                     -c {dir}/pytest.ini --rootdir {dir} --junitxml {dir}/report.xml {dir}"
                ),
                Duration::from_secs(self.verify_timeout.max(1) as u64),
            )
            .await?;
        // pytest exits 0 (all passed) or 1 (some failed); the solution's failures (even one
        // that cannot be imported) are failed tests, so anything else — a run killed, hung or
        // broken — has no verdict: a verifier failure, never a reward. Its printed summary is
        // never trusted (the solution's own code can print one).
        if let Some(why) = out.abnormal_end() {
            bail!("the pytest run ended abnormally ({why})");
        }
        if !matches!(out.exit_code, 0 | 1) {
            let last = out.output.lines().last().unwrap_or_default();
            bail!("pytest exited with {}: {last}", out.exit_code);
        }
        let Ok(xml) = ctx.read_file(&format!("{dir}/report.xml")).await else {
            return Ok(0.0);
        };
        let (passed, total) = junit_counts(&xml);
        let expected = expected_tests(&tests)?;
        Ok(if total == expected && total > 0 {
            f64::from(passed) / f64::from(total)
        } else {
            0.0
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
    use super::junit_counts;

    #[test]
    fn junit_reports_are_counted() {
        let xml = r#"<testsuites><testsuite name="pytest" tests="3"><testcase classname="t" name="a" time="0.0" /><testcase classname="t" name="b"><failure message="x">boom</failure></testcase><testcase classname="t" name="c"></testcase></testsuite></testsuites>"#;
        assert_eq!(junit_counts(xml), (2, 3));
        assert_eq!(junit_counts("<testsuites/>"), (0, 0));
    }
}
