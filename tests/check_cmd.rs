//! The `check` subcommand (the oracle): every item's reference solution through the real
//! sandbox and verifier; items below the maximum score are reported and fail the command.

mod common;

use hermes_env::prelude::*;
use hermes_env::testing::{CheckOptions, Kit};

/// One numbered task: write the number to a file.
#[derive(Debug, Clone, Serialize)]
pub struct Numbered {
    n: u32,
}

/// Three train tasks and one eval task; task 1's verifier reads the wrong file (a broken
/// verifier the oracle must catch) and the eval task has no reference solution.
#[hermes_env(name = "tiny-oracle", toolsets = ["file"], max_agent_turns = 4, main = false)]
pub struct TinyOracle {
    next: u32,
}

#[hermes_env::hooks]
impl TinyOracle {
    async fn get_next_item(&mut self) -> Option<Numbered> {
        self.next += 1;
        (self.next <= 3).then_some(Numbered { n: self.next - 1 })
    }

    fn format_prompt(&self, item: &Numbered) -> String {
        format!("Write {} to ~/n{}.txt", item.n, item.n)
    }

    async fn compute_reward(
        &self,
        item: &Numbered,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let path = if item.n == 1 {
            "~/wrong.txt".to_owned()
        } else {
            format!("~/n{}.txt", item.n)
        };
        let out = ctx.terminal(&format!("cat {path}")).await?;
        Ok(if out.success() && out.output == item.n.to_string() {
            1.0
        } else {
            0.0
        })
    }

    fn eval_items(&self) -> Vec<Numbered> {
        vec![Numbered { n: 7 }]
    }

    fn reference_solution(&self, item: &Numbered) -> Option<ReferenceSolution> {
        (item.n != 7).then(|| {
            ReferenceSolution::new()
                .tool(
                    "write_file",
                    json!({"path": format!("~/n{}.txt", item.n), "content": item.n.to_string()}),
                )
                .answer("Done.")
        })
    }
}

#[tokio::test]
async fn the_oracle_reports_a_broken_verifier_and_a_missing_reference() {
    let mut kit = Kit::<TinyOracle>::builder().start().await.unwrap();
    let report = kit.check(&CheckOptions::default()).await;
    assert_eq!(report.items.len(), 4);
    let failures: Vec<String> = report.failures().iter().map(|f| f.describe()).collect();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(
        failures[0].starts_with("train #1: reward 0 (scored)"),
        "{failures:?}"
    );
    assert!(
        failures[1].starts_with("eval #0: reward 0 (no reference solution)"),
        "{failures:?}"
    );
    assert!(!report.passed());
    // --min-score 0 still fails the item without a reference solution.
    let mut kit = Kit::<TinyOracle>::builder().start().await.unwrap();
    let lenient = kit
        .check(&CheckOptions {
            min_score: 0.0,
            ..CheckOptions::default()
        })
        .await;
    assert_eq!(lenient.failures().len(), 1);
}

#[tokio::test]
async fn the_check_command_fails_on_a_broken_item() {
    let matches = hermes_runtime::commands::definitions(
        &<TinyOracle as hermes_env::EnvDefinition>::descriptor(),
    )
    .into_iter()
    .find(|c| c.get_name() == "check")
    .expect("check is a utility subcommand")
    .try_get_matches_from(["check", "--limit", "2", "--env.max_agent_turns", "3"])
    .unwrap();
    let err = hermes_runtime::commands::run::<TinyOracle>("check", &matches)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "2 of 3 items did not reach 1 with their reference solution"
    );
}

async fn check_example(name: &str, flags: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(common::example_bin(name))
        .args(["check", "--limit", "10"])
        .args(flags)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.trim().to_owned()
}

#[tokio::test]
async fn check_passes_on_terminal_test() {
    assert_eq!(
        check_example("terminal_test", &[]).await,
        "check: 4 items, 4 passed, 0 failed (min score 1) (7 repeated training items skipped)"
    );
}

#[tokio::test]
async fn check_passes_on_web_research() {
    assert_eq!(
        // The built-in questions, whatever the hub cache or network holds.
        check_example("web_research", &["--env.dataset_name", "none"]).await,
        "check: 10 items, 10 passed, 0 failed (min score 1) (2 repeated training items skipped)"
    );
}

/// Needs the Docker daemon and the `hermes-env/python` image (built when missing).
#[tokio::test]
async fn check_passes_on_swe_pytest_in_docker() {
    common::docker::require_docker();
    assert_eq!(
        check_example("swe_pytest", &["--env.terminal_backend", "docker"]).await,
        "check: 6 items, 6 passed, 0 failed (min score 1) (7 repeated training items skipped)"
    );
}
