//! `terminal-bench`: a terminal-bench-2 style, eval-only benchmark. Each task is a directory
//! under `examples/terminal_bench_tasks/` (or `--env.tasks_dir`) holding `task.toml` or
//! `task.json` (instruction, category, optional `docker_image`), an optional `Dockerfile` (built
//! locally into the task's image), `tests/test.sh` (the verifier) and `solution.sh` (the
//! reference solution). The tests are copied into the rollout's own sandbox only at
//! verification time, after `/tests` and any old reward file are wiped, so the agent can
//! neither read them nor plant a reward. The reward comes from `/logs/verifier/reward.txt`
//! (`1`, `0` or a float), else from the exit code of `bash /tests/test.sh`.
//!
//! ```text
//! sandbox-images/build    # once: the python image the task Dockerfiles build on
//! cargo run --example terminal_bench -- evaluate --testing true --env.terminal_backend docker
//! cargo run --example terminal_bench -- evaluate --env.terminal_backend docker \
//!     --env.task_filter fix-script,git-commit \
//!     --openai.base_url URL --openai.model_name M --openai.server_type openai
//! ```
//!
//! On the local backend, tasks that need their own image (a `Dockerfile` or `docker_image`)
//! are skipped and the verifier paths live under the scratch home (`~/.tb/tests`,
//! `~/.tb/logs/verifier`); `test.sh` finds them through `TESTS_DIR` and `LOGS_DIR`. With
//! `--env.data_dir_to_save_evals DIR`, each task's verifier logs are saved to
//! `DIR/verifier/<task>/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hermes_env::prelude::*;

/// One benchmark task, loaded from its directory.
#[derive(Debug, Clone, Serialize)]
pub struct BenchTask {
    /// The directory name.
    pub task_name: String,
    /// Category for the per-category pass rates.
    pub category: String,
    /// What the agent is asked to do.
    pub instruction: String,
    /// The image the task's sandbox runs (`docker_image`, or the one built from its
    /// `Dockerfile`); `None` = the run's `--env.docker_image`.
    pub docker_image: Option<String>,
    /// The task directory on the host.
    #[serde(skip)]
    pub dir: PathBuf,
    /// The reference solution script, played back by `--testing true` and `check`.
    #[serde(skip)]
    pub solution: Option<String>,
}

/// The fields of `task.toml` / `task.json`.
#[derive(Debug, Deserialize)]
struct TaskFile {
    instruction: String,
    #[serde(default = "default_category")]
    category: String,
    #[serde(default)]
    docker_image: Option<String>,
}

fn default_category() -> String {
    "uncategorized".into()
}

/// Parses the flat TOML subset task files use: `key = "basic string"` or `key = 'literal'`
/// lines, comments and blank lines. Anything else is an error, never silently ignored.
fn parse_flat_toml(text: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = || anyhow!("line {}: expected `key = \"string\"`, got `{line}`", n + 1);
        let (key, value) = line.split_once('=').ok_or_else(err)?;
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(err());
        }
        let parsed = if let Some(body) = value.strip_prefix('\'') {
            body.strip_suffix('\'')
                .filter(|b| !b.contains('\''))
                .ok_or_else(err)?
                .to_owned()
        } else {
            let body = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(err)?;
            let mut s = String::with_capacity(body.len());
            let mut chars = body.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some('n') => s.push('\n'),
                        Some('t') => s.push('\t'),
                        Some('"') => s.push('"'),
                        Some('\\') => s.push('\\'),
                        _ => return Err(err()),
                    },
                    '"' => return Err(err()),
                    c => s.push(c),
                }
            }
            s
        };
        if out.insert(key.to_owned(), parsed).is_some() {
            bail!("line {}: duplicate key `{key}`", n + 1);
        }
    }
    Ok(out)
}

/// Reads one task directory; `None` when it is not a task (no task file).
fn load_task(dir: &Path) -> Result<Option<BenchTask>> {
    let toml = dir.join("task.toml");
    let json = dir.join("task.json");
    let file: TaskFile = if toml.is_file() {
        let text = std::fs::read_to_string(&toml)?;
        let map = parse_flat_toml(&text).with_context(|| format!("{}", toml.display()))?;
        serde_json::from_value(serde_json::to_value(map)?)
            .with_context(|| format!("{}", toml.display()))?
    } else if json.is_file() {
        serde_json::from_str(&std::fs::read_to_string(&json)?)
            .with_context(|| format!("{}", json.display()))?
    } else {
        return Ok(None);
    };
    let task_name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("task directory {} has no UTF-8 name", dir.display()))?
        .to_owned();
    if !dir.join("tests/test.sh").is_file() {
        bail!("task {task_name} has no tests/test.sh");
    }
    let solution = dir.join("solution.sh");
    let solution = if solution.is_file() {
        Some(std::fs::read_to_string(&solution)?)
    } else {
        None
    };
    Ok(Some(BenchTask {
        task_name,
        category: file.category,
        instruction: file.instruction,
        docker_image: file.docker_image.filter(|i| !i.is_empty()),
        dir: dir.to_owned(),
        solution,
    }))
}

/// A comma list as a set of trimmed, non-empty names.
fn comma_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `eval/pass_rate_<category>` key: lower-cased, spaces and hyphens become `_`.
fn category_key(category: &str) -> String {
    format!(
        "eval/pass_rate_{}",
        category.to_lowercase().replace([' ', '-'], "_")
    )
}

/// The reward from `reward.txt` (`"1"`, `"0"` or a float); a missing or unparsable file
/// falls back to the verifier's exit code (0 ⇒ 1.0).
fn parse_reward(reward_txt: Option<&str>, exit_code: i32) -> f64 {
    let fallback = if exit_code == 0 { 1.0 } else { 0.0 };
    match reward_txt.map(str::trim) {
        Some("1") => 1.0,
        Some("0") => 0.0,
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .unwrap_or(fallback),
        None => fallback,
    }
}

/// A sandbox path for use in a shell command (`~/x` → `"$HOME/x"`, others quoted).
fn shell_path(path: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("\"$HOME/{rest}\""),
        None => format!("'{path}'"),
    }
}

/// Builds a task's `Dockerfile` into `tag` with the local daemon; the context is the task's
/// `environment/` directory (an empty context without it), so tests never enter the image.
async fn build_image(task_dir: &Path, tag: &str) -> Result<()> {
    let dockerfile = task_dir.join("Dockerfile");
    let context = task_dir.join("environment");
    let mut cmd = tokio::process::Command::new("docker");
    cmd.args(["build", "-q", "-t", tag]);
    if context.is_dir() {
        cmd.arg("-f").arg(&dockerfile).arg(&context);
        cmd.stdin(std::process::Stdio::null());
    } else {
        cmd.arg("-");
        cmd.stdin(std::fs::File::open(&dockerfile)?);
    }
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(600), cmd.output())
        .await
        .map_err(|_| anyhow!("docker build of {tag} took more than 600 s"))?
        .context("cannot run `docker build`")?;
    if !out.status.success() {
        bail!(
            "docker build of {tag} from {} failed: {}",
            dockerfile.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Terminal-bench style tasks: per-task images, hidden `tests/test.sh` verifiers, pass rates.
#[hermes_env(
    name = "terminal-bench",
    toolsets = ["terminal", "file"],
    max_agent_turns = 60,
    max_token_length = 16000,
    agent_temperature = 0.6,
    terminal_timeout = 300,
    group_size = 1,
    total_steps = 1,
    steps_per_eval = 1,
    ensure_scores_are_not_same = false,
    rollout_timeout = 1800.0,
    // Upstream terminal-bench-2's config_init server; evaluation samples at agent_temperature.
    servers = [DefaultServer::openrouter("anthropic/claude-sonnet-4.5")],
)]
pub struct TerminalBench {
    /// Directory of task directories; empty = `examples/terminal_bench_tasks`.
    #[config(default = "")]
    tasks_dir: String,
    /// Seconds `bash /tests/test.sh` may run.
    #[config(default = 180)]
    test_timeout: i64,
    /// Seconds the whole verification of a task may take (wipe, upload, tests, reward).
    #[config(default = 1800)]
    task_timeout: i64,
    /// Build from the task's Dockerfile even when it names a `docker_image`.
    #[config(default = false)]
    force_build: bool,
    /// Comma list of task names to run (empty = all).
    #[config(default = "")]
    task_filter: String,
    /// Comma list of task names to skip.
    #[config(default = "")]
    skip_tasks: String,
    tasks: Vec<BenchTask>,
}

impl TerminalBench {
    fn docker(&self) -> bool {
        self.env_config().terminal_backend == "docker"
    }

    /// Where the tests and the verifier logs go in the sandbox.
    fn verifier_paths(&self) -> (&'static str, &'static str) {
        if self.docker() {
            ("/tests", "/logs/verifier")
        } else {
            ("~/.tb/tests", "~/.tb/logs/verifier")
        }
    }

    async fn verify(&self, item: &BenchTask, ctx: &ToolContext) -> Result<f64> {
        let (tests, logs) = self.verifier_paths();
        let (tests_sh, logs_sh) = (shell_path(tests), shell_path(logs));
        // Wipe whatever the agent may have planted, then copy the tests in.
        let wipe = ctx
            .terminal(&format!(
                "rm -rf {tests_sh} {logs_sh} && mkdir -p {tests_sh} {logs_sh}"
            ))
            .await?;
        if !wipe.success() {
            bail!("cannot prepare the verifier directories: {}", wipe.output);
        }
        ctx.upload_dir(item.dir.join("tests"), tests).await?;
        let run = ctx
            .terminal_isolated(
                &format!(
                    "chmod +x {tests_sh}/test.sh; TESTS_DIR={tests_sh} LOGS_DIR={logs_sh} \
                     bash {tests_sh}/test.sh"
                ),
                Duration::from_secs(self.test_timeout.max(1) as u64),
            )
            .await?;
        // Code the tests run is the model's: it may write the reward file and then kill or
        // hang the run. Only a run that ended on its own has a verdict.
        if let Some(why) = run.abnormal_end() {
            bail!(
                "the verifier run of {} ended abnormally ({why}): its reward file is not trusted",
                item.task_name
            );
        }
        let reward_txt = ctx.read_file(&format!("{logs}/reward.txt")).await.ok();
        // Keep the verifier's logs next to the eval results.
        if let Some(dir) = &self.env_config().data_dir_to_save_evals {
            let local = Path::new(dir).join("verifier").join(&item.task_name);
            if let Err(e) = ctx.download_dir(logs, &local).await {
                eprintln!(
                    "terminal-bench: {}: cannot save {logs}: {e}",
                    item.task_name
                );
            }
        }
        Ok(parse_reward(reward_txt.as_deref(), run.exit_code))
    }
}

#[hermes_env::hooks]
impl TerminalBench {
    async fn setup(&mut self) -> Result<()> {
        let root = if self.tasks_dir.is_empty() {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/terminal_bench_tasks")
        } else {
            PathBuf::from(&self.tasks_dir)
        };
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .with_context(|| format!("cannot read the tasks directory {}", root.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        let (only, skip) = (comma_list(&self.task_filter), comma_list(&self.skip_tasks));
        let docker = self.docker();
        let mut tasks = Vec::new();
        for dir in dirs {
            let Some(mut task) = load_task(&dir)? else {
                continue;
            };
            if (!only.is_empty() && !only.contains(&task.task_name))
                || skip.contains(&task.task_name)
            {
                continue;
            }
            let has_dockerfile = dir.join("Dockerfile").is_file();
            if !docker {
                if has_dockerfile || task.docker_image.is_some() {
                    eprintln!(
                        "terminal-bench: skipping {} (it needs its own image; use \
                         --env.terminal_backend docker)",
                        task.task_name
                    );
                    continue;
                }
            } else if has_dockerfile && (self.force_build || task.docker_image.is_none()) {
                let tag = format!("hermes-env/tb-{}:latest", task.task_name.to_lowercase());
                build_image(&dir, &tag).await?;
                task.docker_image = Some(tag);
            }
            tasks.push(task);
        }
        if tasks.is_empty() {
            bail!(
                "no terminal-bench tasks to run in {} (check --env.task_filter / --env.skip_tasks)",
                root.display()
            );
        }
        self.tasks = tasks;
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<BenchTask> {
        // Eval-only: nothing to train on.
        None
    }

    fn format_prompt(&self, item: &BenchTask) -> String {
        item.instruction.clone()
    }

    async fn compute_reward(
        &self,
        item: &BenchTask,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let limit = self.task_timeout.max(1) as u64;
        tokio::time::timeout(Duration::from_secs(limit), self.verify(item, ctx))
            .await
            .map_err(|_| anyhow!("timeout ({limit} s)"))?
    }

    fn eval_items(&self) -> Vec<BenchTask> {
        self.tasks.clone()
    }

    fn evaluate(&self, samples: &[EvalSample<BenchTask>], metrics: &mut Metrics) {
        let passed = |s: &EvalSample<BenchTask>| s.score >= 1.0;
        let total = samples.len();
        let solved = samples.iter().filter(|s| passed(s)).count();
        metrics.insert("eval/pass_rate".into(), solved as f64 / total.max(1) as f64);
        metrics.insert("eval/total_tasks".into(), total as f64);
        metrics.insert("eval/passed_tasks".into(), solved as f64);
        let mut by_category: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for s in samples {
            let entry = by_category
                .entry(category_key(&s.item.category))
                .or_default();
            entry.0 += usize::from(passed(s));
            entry.1 += 1;
        }
        for (key, (ok, n)) in by_category {
            metrics.insert(key, ok as f64 / n as f64);
        }
    }

    fn sandbox_spec(&self, item: &BenchTask) -> SandboxSpec {
        match &item.docker_image {
            Some(image) if self.docker() => SandboxSpec::image(image),
            _ => SandboxSpec::default(),
        }
    }

    fn reference_solution(&self, item: &BenchTask) -> Option<ReferenceSolution> {
        let script = item.solution.as_ref()?;
        Some(
            ReferenceSolution::new()
                .tool(
                    "terminal",
                    json!({"command": format!("bash <<'TB_SOLUTION'\n{}\nTB_SOLUTION", script.trim_end())}),
                )
                .answer(format!("Done: {}.", item.task_name)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_come_from_the_file_else_the_exit_code() {
        assert_eq!(parse_reward(Some("1\n"), 1), 1.0);
        assert_eq!(parse_reward(Some("0"), 0), 0.0);
        assert_eq!(parse_reward(Some(" 0.75 "), 1), 0.75);
        assert_eq!(parse_reward(Some("yes"), 0), 1.0);
        assert_eq!(parse_reward(Some("nan"), 2), 0.0);
        assert_eq!(parse_reward(None, 0), 1.0);
        assert_eq!(parse_reward(None, 124), 0.0);
    }

    #[test]
    fn flat_toml_is_parsed_strictly() {
        let map = parse_flat_toml(
            "# c\ninstruction = \"say \\\"hi\\\"\\n\"\ncategory = 'a-b'\n\ndocker_image = \"\"\n",
        )
        .unwrap();
        assert_eq!(map["instruction"], "say \"hi\"\n");
        assert_eq!(map["category"], "a-b");
        assert_eq!(map["docker_image"], "");
        assert!(parse_flat_toml("[table]").is_err());
        assert!(parse_flat_toml("a = 1").is_err());
        assert!(parse_flat_toml("a = \"x\"\na = \"y\"").is_err());
    }

    #[test]
    fn categories_and_lists_are_normalised() {
        assert_eq!(
            category_key("Version Control-x"),
            "eval/pass_rate_version_control_x"
        );
        assert_eq!(comma_list(" a, ,b ,"), ["a", "b"]);
        assert_eq!(shell_path("~/.tb/tests"), "\"$HOME/.tb/tests\"");
        assert_eq!(shell_path("/tests"), "'/tests'");
    }

    #[test]
    fn the_built_in_tasks_load() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/terminal_bench_tasks");
        for name in ["create-files", "fix-script", "git-commit"] {
            let task = load_task(&root.join(name)).unwrap().expect(name);
            assert!(
                task.solution.is_some() && !task.category.is_empty(),
                "{name}"
            );
        }
    }
}
