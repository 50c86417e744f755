//! An environment crate built the way an author's is: outside this workspace, hermes-env as a
//! path dependency and nothing else (no `serde`, no `anyhow`), a lockfile resolved fresh (so
//! the newest semver-compatible releases of every dependency, not this workspace's pins).
//! The build must succeed without one warning, and the binary must run.
//!
//! Its own target directory under `target/` (this test's cargo cannot share the workspace's
//! while `cargo test` holds it); the first run builds every dependency.

use std::path::Path;
use std::process::Command;

/// The environment: the `terminal_test` example's shape, prelude only.
const MAIN_RS: &str = r#"
use hermes_env::prelude::*;

/// One task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// The instruction.
    pub prompt: String,
    /// What the answer file must hold.
    #[serde(rename = "answer")]
    pub expected: String,
}

/// Writes one file; the reward reads it back.
#[hermes_env(name = "outside-env", toolsets = ["terminal"], max_agent_turns = 3)]
pub struct OutsideEnv {
    /// Appended to every prompt.
    #[config(default = "")]
    prompt_suffix: String,
    next: usize,
}

#[hermes_env::hooks]
impl OutsideEnv {
    async fn setup(&mut self) -> Result<()> {
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<Task> {
        self.next += 1;
        Some(Task { prompt: format!("Write {} to ~/a.txt", self.next), expected: self.next.to_string() })
    }

    fn format_prompt(&self, item: &Task) -> String {
        format!("{}{}", item.prompt, self.prompt_suffix)
    }

    async fn compute_reward(&self, item: &Task, _run: &AgentResult, ctx: &ToolContext) -> Result<f64> {
        let out = ctx.terminal("cat ~/a.txt").await?;
        Ok(if out.output.trim() == item.expected { 1.0 } else { 0.0 })
    }
}
"#;

#[test]
fn an_author_crate_builds_without_warnings_and_without_serde() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("outside-crate");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let manifest = format!(
        "[package]\nname = \"outside-env\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nhermes-env = {{ path = {:?} }}\n\n[workspace]\n",
        workspace.display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(src.join("main.rs"), MAIN_RS).unwrap();
    let _ = std::fs::remove_file(dir.join("Cargo.lock"));
    let target = workspace.join("target").join("outside-crate");

    let cargo = |args: &[&str]| {
        let out = Command::new(env!("CARGO"))
            .args(args)
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .output()
            .expect("cargo runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "`cargo {}` in the author crate failed (needs crates.io, as a user's build does):\n{stderr}",
            args.join(" ")
        );
        stderr
    };
    cargo(&["generate-lockfile"]);
    // cargo replays a path dependency's cached warnings, so a warm build shows them too.
    let stderr = cargo(&["build", "--message-format", "short"]);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert!(
        warnings.is_empty(),
        "an author's build printed warnings:\n{}",
        warnings.join("\n")
    );

    let help = Command::new(target.join("debug").join("outside-env"))
        .args(["process", "--help"])
        .output()
        .expect("the author's binary runs");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    assert!(
        text.contains("--env.prompt_suffix"),
        "the author's own flag is in --help:\n{text}"
    );
}
