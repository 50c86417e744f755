//! `harbor`: any Harbor task directory or dataset of them as an environment. Each task is
//! `task.toml` + `instruction.md` (the prompt) + `environment/` (its image's build context, or
//! `[environment] docker_image`) + `solution/solve.sh` (the oracle `check` plays) + `tests/`
//! (uploaded only at verification, then `tests/test.sh` writes `/logs/verifier/reward.txt` or
//! `reward.json`). Docker only: every Harbor task runs in its own image.
//!
//! ```text
//! cargo run --example harbor -- check --env.tasks_dir DIR --env.terminal_backend docker
//! cargo run --example harbor -- evaluate --env.tasks_dir DIR --env.terminal_backend docker \
//!     --env.data_dir_to_save_evals out --openai.base_url URL --openai.model_name M
//! ```
//!
//! Instead of `--env.tasks_dir`, `--env.dataset_name` reads upstream Hermes's Terminal-Bench 2
//! rows (`NousResearch/terminal-bench-2`, a file or a hub id; split `--env.dataset_split`),
//! each unpacked into a Harbor task directory under `--env.unpack_dir`.
//!
//! `evaluate` also writes `harbor_result.json` (Harbor's `JobResult` shape) beside
//! `metrics.json`; docs/guide/harbor.md has the mapping.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hermes_env::data::Dataset;
use hermes_env::harbor::{self, HarborTask, ImageBuilder, Rewards};
use hermes_env::prelude::*;

/// One Harbor task as an item.
#[derive(Debug, Clone, Serialize)]
pub struct HarborItem {
    /// The task directory's name.
    pub task_name: String,
    /// `[metadata] category`.
    pub category: String,
    /// `instruction.md`.
    pub instruction: String,
    /// The image its sandbox runs.
    pub image: String,
    /// Every metric its verification wrote (`reward.json`'s or `reward.txt`'s), or why it
    /// gave none: in `samples.jsonl`, written once the task ran.
    pub rewards: TaskVerdict,
    #[serde(skip)]
    task: Arc<HarborTask>,
    #[serde(skip)]
    spec: SandboxSpec,
    #[serde(skip)]
    verifier: Arc<harbor::VerifierPlan>,
    /// Where its commands run (a multi-step task's step files go there).
    #[serde(skip)]
    workdir: String,
}

/// A multi-step rollout's progress, kept between its `next_step` calls and `compute_reward`.
#[derive(Debug, Default)]
struct Progress {
    /// The step the agent is on.
    step: usize,
    /// The verified steps' metrics.
    rewards: Vec<Rewards>,
    /// A step missed its `min_reward`: the later steps do not run.
    stopped: bool,
}

/// Each task's last verification: its metrics, or why it had no verdict.
type Verdicts = Arc<Mutex<BTreeMap<String, Result<Rewards, String>>>>;

/// One task's entry of the [`Verdicts`], serialized as it stands when written: its metrics,
/// `{"error": why}`, or null before it ran.
#[derive(Debug, Clone)]
pub struct TaskVerdict {
    task: String,
    all: Verdicts,
}

impl Serialize for TaskVerdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.all.lock().expect("lock poisoned").get(&self.task) {
            Some(Ok(metrics)) => metrics.serialize(s),
            Some(Err(why)) => BTreeMap::from([("error", why)]).serialize(s),
            None => s.serialize_none(),
        }
    }
}

/// Harbor tasks: per-task images, hidden tests, Harbor's reward files.
#[hermes_env(
    name = "harbor",
    toolsets = ["terminal", "file"],
    max_agent_turns = 60,
    max_token_length = 16000,
    agent_temperature = 0.6,
    terminal_timeout = 300,
    group_size = 1,
    total_steps = 1,
    steps_per_eval = 1,
    ensure_scores_are_not_same = false,
    rollout_timeout = 1800.0
)]
pub struct Harbor {
    /// A Harbor dataset directory (task directories inside) or one task directory.
    #[config(default = "")]
    tasks_dir: String,
    /// Where --env.dataset_name's Terminal-Bench 2 rows are unpacked as task directories
    /// (empty = harbor-tasks/<dataset> under the system's temporary directory).
    #[config(default = "")]
    unpack_dir: String,
    /// The metric of reward.json used as the reward (reward.txt's value is `reward`); all
    /// metrics go to harbor_result.json.
    #[config(default = "reward")]
    reward_metric: String,
    /// Task images built at once.
    #[config(default = 2)]
    image_build_concurrency: i64,
    /// Build environment/Dockerfile even when the task names a docker_image.
    #[config(default = false)]
    force_build: bool,
    /// Comma list of task names to run (empty = all).
    #[config(default = "")]
    task_filter: String,
    tasks: Vec<HarborItem>,
    next: usize,
    verdicts: Verdicts,
    /// Multi-step rollouts under way, by task id.
    progress: Mutex<BTreeMap<String, Progress>>,
    /// Tasks that could not start (image missing, unsupported), with the reason.
    stopped: BTreeMap<String, String>,
}

impl Harbor {
    /// Unpacks the Terminal-Bench 2 rows of dataset `name` into task directories; returns
    /// their parent.
    async fn unpack_rows(&self, name: &str) -> Result<String> {
        let split = &self.env_config().dataset_split;
        let rows = Dataset::open(name, split)
            .await?
            .items::<harbor::tb2::Tb2Row>()?;
        let dir = if self.unpack_dir.is_empty() {
            let stem: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            std::env::temp_dir().join("harbor-tasks").join(stem)
        } else {
            PathBuf::from(&self.unpack_dir)
        };
        for row in &rows {
            harbor::tb2::unpack_row(row, &dir)?;
        }
        eprintln!(
            "harbor: {} Terminal-Bench 2 rows of {name} ({split}) unpacked into {}",
            rows.len(),
            dir.display()
        );
        Ok(dir.display().to_string())
    }

    async fn item(
        builder: &ImageBuilder,
        task: HarborTask,
        force: bool,
        verdicts: Verdicts,
    ) -> Result<HarborItem> {
        let image = builder.resolve(&task, force).await?;
        let verifier = harbor::plan_verifier(builder, &task, &image, force).await?;
        Ok(HarborItem {
            verifier: Arc::new(verifier),
            workdir: harbor::task_workdir(&task, &image),
            rewards: TaskVerdict {
                task: task.name.clone(),
                all: verdicts,
            },
            task_name: task.name.clone(),
            category: task.config.category(),
            instruction: task.instruction.clone(),
            image: image.tag.clone(),
            spec: harbor::sandbox_spec(&task, &image)?,
            task: Arc::new(task),
        })
    }
}

#[hermes_env::hooks]
impl Harbor {
    async fn setup(&mut self) -> Result<()> {
        if self.tasks_dir.is_empty() {
            let Some(name) = self.env_config().dataset_name.clone() else {
                bail!(
                    "harbor: pass --env.tasks_dir DIR (a Harbor dataset directory or one task \
                     directory) or --env.dataset_name (Terminal-Bench 2 rows)"
                );
            };
            self.tasks_dir = self.unpack_rows(&name).await?;
        }
        anyhow::ensure!(
            self.env_config().terminal_backend == "docker",
            "harbor: Harbor tasks run in their own images: pass --env.terminal_backend docker"
        );
        let only: Vec<&str> = self
            .task_filter
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let mut tasks = harbor::load_tasks(&PathBuf::from(&self.tasks_dir))?;
        tasks.retain(|t| only.is_empty() || only.contains(&t.name.as_str()));
        let builder = ImageBuilder::connect(
            self.env_config().docker_host.as_deref(),
            self.image_build_concurrency.max(1) as usize,
        )
        .await?;
        let mut pending = Vec::new();
        for task in tasks {
            match task.unsupported() {
                Some(why) => {
                    eprintln!("harbor: skipping task {}: {why}", task.name);
                    self.stopped.insert(task.name.clone(), why);
                }
                None => {
                    let name = task.name.clone();
                    let item = Self::item(&builder, task, self.force_build, self.verdicts.clone());
                    pending.push(async move { (name, item.await) });
                }
            }
        }
        // Concurrently; the builder bounds the builds (--env.image_build_concurrency).
        for (name, item) in futures::future::join_all(pending).await {
            match item {
                Ok(item) => self.tasks.push(item),
                Err(e) => {
                    eprintln!("harbor: stopping this task: {e}");
                    self.stopped.insert(name, e.to_string());
                }
            }
        }
        anyhow::ensure!(
            !self.tasks.is_empty(),
            "harbor: no task to run in {}",
            self.tasks_dir
        );
        Ok(())
    }

    async fn get_next_item(&mut self) -> Option<HarborItem> {
        let item = self.tasks.get(self.next % self.tasks.len().max(1)).cloned();
        self.next += 1;
        item
    }

    fn format_prompt(&self, item: &HarborItem) -> String {
        match item.task.steps.first() {
            Some(first) => first.instruction.clone().unwrap_or_default(),
            None => item.instruction.clone(),
        }
    }

    /// A multi-step task: verifies the step just done, then readies the next one and gives
    /// its instruction (none after the last step, or once a step missed its `min_reward`).
    async fn next_step(
        &self,
        item: &HarborItem,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<Option<String>> {
        let next = self.advance(item, ctx).await;
        if let Err(e) = &next {
            // No verdict: the task counts as errored in harbor_result.json, as in compute_reward.
            self.progress
                .lock()
                .expect("lock poisoned")
                .remove(ctx.task_id());
            self.verdicts
                .lock()
                .expect("lock poisoned")
                .insert(item.task_name.clone(), Err(e.to_string()));
        }
        Ok(next?)
    }

    async fn compute_reward(
        &self,
        item: &HarborItem,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let verdict = self.verdict(item, ctx).await.map_err(|e| e.to_string());
        let picked = verdict.as_ref().map_err(Clone::clone).and_then(|m| {
            m.get(&self.reward_metric).copied().ok_or_else(|| {
                format!(
                    "task {}: the verifier wrote no metric {} (--env.reward_metric); it wrote {:?}",
                    item.task_name,
                    self.reward_metric,
                    m.keys().collect::<Vec<_>>()
                )
            })
        });
        let record = match (&verdict, &picked) {
            (Ok(_), Err(e)) => Err(e.clone()),
            _ => verdict,
        };
        self.verdicts
            .lock()
            .expect("lock poisoned")
            .insert(item.task_name.clone(), record);
        picked.map_err(|e| anyhow!(e))
    }

    fn eval_items(&self) -> Vec<HarborItem> {
        self.tasks.clone()
    }

    fn evaluate(&self, samples: &[EvalSample<HarborItem>], metrics: &mut Metrics) {
        let total = self.tasks.len() + self.stopped.len();
        let passed = samples.iter().filter(|s| s.score >= 1.0).count();
        metrics.insert("eval/pass_rate".into(), passed as f64 / total.max(1) as f64);
        metrics.insert("eval/total_tasks".into(), total as f64);
        metrics.insert("eval/passed_tasks".into(), passed as f64);
        let verdicts = self.verdicts.lock().expect("lock poisoned").clone();
        for (task, verdict) in &verdicts {
            for (key, value) in verdict.iter().flatten() {
                metrics.insert(format!("eval/reward/{task}/{key}"), *value);
            }
        }
        let Some(dir) = &self.env_config().data_dir_to_save_evals else {
            return;
        };
        let dataset = PathBuf::from(&self.tasks_dir)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "adhoc".into());
        let doc = job_result(&verdicts, &self.stopped, &self.reward_metric, &dataset);
        let path = PathBuf::from(dir).join("harbor_result.json");
        if let Err(e) = std::fs::create_dir_all(dir).and_then(|_| {
            std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap_or_default())
        }) {
            eprintln!("harbor: cannot write {}: {e}", path.display());
        }
    }

    fn sandbox_spec(&self, item: &HarborItem) -> SandboxSpec {
        item.spec.clone()
    }

    fn reference_solution(&self, item: &HarborItem) -> Option<ReferenceSolution> {
        let mut exports = String::new();
        for (k, v) in &item.task.config.solution.env {
            let v = harbor::resolve_env(v).ok()?;
            exports.push_str(&format!("export {k}='{}'; ", v.replace('\'', r"'\''")));
        }
        if item.task.steps.is_empty() {
            item.task.solution.as_ref()?;
            let command = solve_command(&item.task.dir.join("solution"), &exports)?;
            return Some(
                ReferenceSolution::new()
                    .tool("terminal", json!({ "command": command }))
                    .answer(format!("Done: {}.", item.task_name)),
            );
        }
        // One phase per step: its solution, then the answer that ends the step.
        let mut solution = ReferenceSolution::new();
        for step in &item.task.steps {
            let command = solve_command(&step.solution_dir(), &exports)?;
            solution = solution
                .tool("terminal", json!({ "command": command }))
                .answer(format!("Done: {} / {}.", item.task_name, step.config.name));
        }
        Some(solution)
    }
}

impl Harbor {
    /// Verifies the step just done, then readies the next one and gives its instruction (none
    /// after the last step, or once a step missed its `min_reward`).
    async fn advance(
        &self,
        item: &HarborItem,
        ctx: &ToolContext,
    ) -> Result<Option<String>, harbor::HarborError> {
        let steps = &item.task.steps;
        let done = self.step_of(ctx);
        let Some(next) = steps.get(done + 1) else {
            return Ok(None);
        };
        let rewards = harbor::verify(&item.task, &item.verifier, steps.get(done), ctx).await?;
        let unmet = steps[done]
            .config
            .min_reward
            .as_ref()
            .and_then(|m| m.unmet(&rewards));
        {
            let mut all = self.progress.lock().expect("lock poisoned");
            let progress = all.entry(ctx.task_id().to_owned()).or_default();
            progress.rewards.push(rewards);
            if let Some(why) = unmet {
                eprintln!(
                    "harbor: task {}: step {} {why}: the remaining steps do not run",
                    item.task_name, steps[done].config.name
                );
                progress.stopped = true;
                return Ok(None);
            }
            progress.step = done + 1;
        }
        harbor::prepare_step(&item.task, next, &item.workdir, ctx).await?;
        Ok(next.instruction.clone())
    }

    /// The step the rollout `ctx` belongs to is on (0 before its first step ends).
    fn step_of(&self, ctx: &ToolContext) -> usize {
        let all = self.progress.lock().expect("lock poisoned");
        all.get(ctx.task_id()).map_or(0, |p| p.step)
    }

    /// The rollout's metrics: its verification, or for a multi-step task its last step's
    /// (unless a step before missed its `min_reward`) taken together with the others'.
    async fn verdict(&self, item: &HarborItem, ctx: &ToolContext) -> Result<Rewards> {
        let task = &item.task;
        if task.steps.is_empty() {
            return Ok(harbor::verify(task, &item.verifier, None, ctx).await?);
        }
        let mut progress = self
            .progress
            .lock()
            .expect("lock poisoned")
            .remove(ctx.task_id())
            .unwrap_or_default();
        if !progress.stopped {
            let step = task.steps.get(progress.step);
            progress
                .rewards
                .push(harbor::verify(task, &item.verifier, step, ctx).await?);
        }
        Ok(harbor::aggregate(task, &progress.rewards))
    }
}

/// The command that unpacks `dir` (a `solution/` directory) where Harbor uploads it,
/// `/solution` (a temporary directory when the task's agent user may not make /solution),
/// and runs its `solve.sh` with the `[solution] env` in `exports`.
fn solve_command(dir: &std::path::Path, exports: &str) -> Option<String> {
    let archive = harbor::dir_archive_base64(dir).ok()?;
    Some(format!(
        "d=/solution; rm -rf $d 2>/dev/null; {{ mkdir -p $d && [ -w $d ]; }} 2>/dev/null || d=$(mktemp -d); \
         echo {archive} | base64 -d | tar -x -C $d && {exports}bash $d/solve.sh"
    ))
}

/// Harbor's `JobResult` (result.json of a job) for this evaluation: one trial per task, agent
/// `hermes-env`, dataset = the tasks directory's name. docs/guide/harbor.md has the mapping.
fn job_result(
    verdicts: &BTreeMap<String, Result<Rewards, String>>,
    stopped: &BTreeMap<String, String>,
    metric: &str,
    dataset: &str,
) -> serde_json::Value {
    let mut reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut errors: Vec<String> = Vec::new();
    let mut sum = 0.0;
    for (task, verdict) in verdicts {
        match verdict {
            Ok(m) => {
                for (k, v) in m {
                    reward_stats
                        .entry(k.clone())
                        .or_default()
                        .entry(format!("{v:?}"))
                        .or_default()
                        .push(task.clone());
                }
                sum += m.get(metric).copied().unwrap_or(0.0);
            }
            Err(_) => errors.push(task.clone()),
        }
    }
    errors.extend(stopped.keys().cloned());
    let total = verdicts.len() + stopped.len();
    let now = chrono_like_now();
    json!({
        "schema_version": 1,
        "id": uuid_like(),
        "started_at": now,
        "finished_at": now,
        "n_total_trials": total,
        "stats": {
            "n_completed_trials": total,
            "n_errored_trials": errors.len(),
            "evals": {
                format!("hermes-env__{dataset}"): {
                    "n_trials": verdicts.values().filter(|v| v.is_ok()).count(),
                    "n_errors": errors.len(),
                    "metrics": [{ "mean": sum / total.max(1) as f64 }],
                    "reward_stats": reward_stats,
                    "exception_stats": if errors.is_empty() { json!({}) } else { json!({ "VerifierFailure": errors }) },
                }
            }
        },
        "trial_results": [],
    })
}

/// Now as RFC 3339 UTC, from the system clock.
fn chrono_like_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A random UUID v4 string.
fn uuid_like() -> String {
    let mut b = [0u8; 16];
    for (i, chunk) in b.chunks_mut(8).enumerate() {
        let x = std::collections::hash_map::RandomState::new();
        let v = std::hash::BuildHasher::hash_one(&x, i).to_le_bytes();
        chunk.copy_from_slice(&v);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}
