//! Harbor's task directory, read as Harbor's `harbor.models.task.config.TaskConfig` reads it:
//! `task.toml` (schema 1.x; fields this runtime does not use are accepted and ignored, as
//! pydantic does), `instruction.md`, `environment/`, `solution/solve.sh`, `tests/test.sh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::HarborError;

/// A user as Harbor writes it: a name or a uid.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum TaskUser {
    /// A user name.
    Name(String),
    /// A numeric uid.
    Uid(i64),
}

impl TaskUser {
    /// Docker's `--user` form.
    pub fn as_docker(&self) -> String {
        match self {
            TaskUser::Name(n) => n.clone(),
            TaskUser::Uid(u) => u.to_string(),
        }
    }
}

/// `[agent]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// Seconds the agent may run.
    pub timeout_sec: Option<f64>,
    /// User the agent runs as.
    pub user: Option<TaskUser>,
    /// Phase network override.
    pub network_mode: Option<String>,
}

/// `[verifier]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct VerifierConfig {
    /// Seconds `tests/test.sh` may run (Harbor's default: 600).
    pub timeout_sec: f64,
    /// Environment of the verifier run.
    pub env: BTreeMap<String, String>,
    /// User the verifier runs as (`None`: the environment's default user).
    pub user: Option<TaskUser>,
    /// `shared` or `separate`.
    pub environment_mode: Option<String>,
    /// The separate verifier container's environment.
    pub environment: Option<Box<EnvironmentConfig>>,
    /// Phase network override.
    pub network_mode: Option<String>,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        VerifierConfig {
            timeout_sec: 600.0,
            env: BTreeMap::new(),
            user: None,
            environment_mode: None,
            environment: None,
            network_mode: None,
        }
    }
}

impl VerifierConfig {
    /// True when the verifier runs in a container of its own (Harbor: `separate`, implied by
    /// a `[verifier.environment]`).
    pub fn separate(&self) -> bool {
        match self.environment_mode.as_deref() {
            Some(mode) => mode == "separate",
            None => self.environment.is_some(),
        }
    }
}

/// `[environment.healthcheck]`, Docker HEALTHCHECK's options.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct HealthcheckConfig {
    /// Shell command; exit 0 = healthy.
    pub command: String,
    /// Seconds between attempts.
    pub interval_sec: f64,
    /// Seconds one attempt may run.
    pub timeout_sec: f64,
    /// Grace period in which failures do not count.
    pub start_period_sec: f64,
    /// Seconds between attempts in the grace period.
    pub start_interval_sec: f64,
    /// Consecutive failures that fail it.
    pub retries: u32,
}

impl Default for HealthcheckConfig {
    fn default() -> Self {
        HealthcheckConfig {
            command: String::new(),
            interval_sec: 5.0,
            timeout_sec: 30.0,
            start_period_sec: 0.0,
            start_interval_sec: 5.0,
            retries: 3,
        }
    }
}

/// `[environment]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct EnvironmentConfig {
    /// Seconds the image build may take (Harbor's default: 600).
    pub build_timeout_sec: f64,
    /// A prebuilt image, used as is.
    pub docker_image: Option<String>,
    /// CPUs.
    pub cpus: Option<f64>,
    /// Memory in MiB.
    pub memory_mb: Option<i64>,
    /// Deprecated `memory = "2G"`.
    pub memory: Option<String>,
    /// GPUs (refused: no GPU sandboxes here).
    pub gpus: Option<i64>,
    /// `public`, `no-network` or `allowlist`.
    pub network_mode: Option<String>,
    /// Deprecated: `false` = `no-network`.
    pub allow_internet: Option<bool>,
    /// Hosts of an allowlist policy.
    pub allowed_hosts: Option<Vec<String>>,
    /// Readiness check after the environment starts.
    pub healthcheck: Option<HealthcheckConfig>,
    /// Working directory (over the image's `WORKDIR`).
    pub workdir: Option<String>,
    /// Environment variables (`${VAR}` templates resolved from the host).
    pub env: BTreeMap<String, String>,
    /// `linux` or `windows`.
    pub os: Option<String>,
}

impl Default for EnvironmentConfig {
    fn default() -> Self {
        EnvironmentConfig {
            build_timeout_sec: 600.0,
            docker_image: None,
            cpus: None,
            memory_mb: None,
            memory: None,
            gpus: None,
            network_mode: None,
            allow_internet: None,
            allowed_hosts: None,
            healthcheck: None,
            workdir: None,
            env: BTreeMap::new(),
            os: None,
        }
    }
}

/// Network policy of the agent's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// Harbor's `public`: the run's `--env.container_network`.
    Public,
    /// Harbor's `no-network` (`allow_internet = false`): Docker network `none`.
    None,
    /// Harbor's `allowlist`: only `allowed_hosts`, over HTTP(S) through this process's proxy
    /// ([`ContainerOverrides::allow_hosts`](crate::sandbox::ContainerOverrides::allow_hosts)).
    Allowlist(Vec<String>),
}

impl EnvironmentConfig {
    /// The network policy: `network_mode`, else the deprecated `allow_internet`, else public.
    pub fn network(&self) -> Result<Network, String> {
        let mode = match (&self.network_mode, self.allow_internet) {
            (Some(m), _) => m.as_str(),
            (None, Some(false)) => "no-network",
            _ => "public",
        };
        match mode {
            "public" => Ok(Network::Public),
            "no-network" => Ok(Network::None),
            "allowlist" => Ok(Network::Allowlist(
                self.allowed_hosts.clone().unwrap_or_default(),
            )),
            other => Err(format!(
                "network_mode = \"{other}\" is not supported (only public, no-network and allowlist)"
            )),
        }
    }

    /// Memory in MiB from `memory_mb`, else the deprecated `memory = "2G"`.
    pub fn memory_mib(&self) -> Option<i64> {
        self.memory_mb.or_else(|| {
            let m = self.memory.as_deref()?.trim().to_uppercase();
            let (num, unit) = m.split_at(m.len().checked_sub(1)?);
            let n: f64 = num.parse().ok()?;
            match unit {
                "G" => Some((n * 1024.0) as i64),
                "M" => Some(n as i64),
                _ => None,
            }
        })
    }
}

/// `[solution]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SolutionConfig {
    /// Environment of `solve.sh`.
    pub env: BTreeMap<String, String>,
}

/// One entry of the top-level `artifacts`: a path in the agent's container, or a table
/// naming it as `source`. A separate verifier finds each at the same path in its own
/// container (Harbor's `upload_artifacts`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ArtifactEntry {
    /// A path.
    Path(String),
    /// `{ source = "...", destination, exclude, service }`.
    Table {
        /// The path in the agent's container.
        source: String,
        /// Where Harbor keeps it on the host (unused here).
        #[serde(default)]
        destination: Option<String>,
        /// Harbor's tar `--exclude` patterns (unused here).
        #[serde(default)]
        exclude: Vec<String>,
        /// A Docker Compose service (only `main`, the agent's container, runs here).
        #[serde(default)]
        service: Option<String>,
    },
}

impl ArtifactEntry {
    /// The path in the agent's container.
    pub fn source(&self) -> &str {
        match self {
            ArtifactEntry::Path(p) => p,
            ArtifactEntry::Table { source, .. } => source,
        }
    }

    /// The Compose service it comes from, when not the agent's own container.
    fn sidecar(&self) -> Option<&str> {
        match self {
            ArtifactEntry::Table {
                service: Some(s), ..
            } if s != "main" => Some(s),
            _ => None,
        }
    }
}

/// Harbor's convention directory for artifacts: always carried to a separate verifier.
pub const ARTIFACTS_DIR: &str = "/logs/artifacts";

/// Where a separate verifier's image comes from (Harbor's
/// `resolve_verifier_environment_definition`, in its order).
#[derive(Debug, Clone, PartialEq)]
pub enum VerifierImage {
    /// `[verifier.environment] docker_image`: the tests are in the image.
    Prebuilt(String),
    /// `tests/Dockerfile`: built with `tests/` as its context; the tests are in the image.
    Build(PathBuf),
    /// The task's own image; the tests are uploaded, as for a shared verifier.
    Task,
}

impl VerifierImage {
    /// True when the image holds the tests (nothing is uploaded to `/tests`).
    pub fn bundles_tests(&self) -> bool {
        !matches!(self, VerifierImage::Task)
    }
}

/// A separate verifier's environment: its settings and its image.
#[derive(Debug, Clone)]
pub struct VerifierEnvironment {
    /// `[verifier.environment]`, else a copy of `[environment]`.
    pub config: EnvironmentConfig,
    /// Where its image comes from.
    pub image: VerifierImage,
}

/// One entry of `[[steps]]`.
#[derive(Debug, Clone, Deserialize)]
pub struct StepConfig {
    /// Directory name under `steps/`.
    pub name: String,
    /// `[steps.agent]`: per-step agent settings (not supported: the task's apply).
    #[serde(default)]
    pub agent: Option<toml::Table>,
    /// `[steps.verifier]`: per-step verifier settings (not supported: the task's apply).
    #[serde(default)]
    pub verifier: Option<toml::Table>,
    /// The rewards this step must reach for the next steps to run.
    #[serde(default)]
    pub min_reward: Option<MinReward>,
    /// Run after the step's setup, before its agent phase.
    #[serde(default)]
    pub healthcheck: Option<HealthcheckConfig>,
    /// Per-step artifacts (collected by Harbor after the step; a separate verifier here gets
    /// the task's).
    #[serde(default)]
    pub artifacts: Vec<ArtifactEntry>,
}

/// A step's `min_reward`: a floor for the metric `reward`, or one per named metric.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum MinReward {
    /// A floor for `reward`.
    Reward(f64),
    /// A floor per metric (a missing metric fails it).
    Each(BTreeMap<String, f64>),
}

impl MinReward {
    /// Why `rewards` fall short of the floor(s), if they do (Harbor's rule).
    pub fn unmet(&self, rewards: &BTreeMap<String, f64>) -> Option<String> {
        let floors = match self {
            MinReward::Reward(floor) => BTreeMap::from([("reward".to_owned(), *floor)]),
            MinReward::Each(floors) => floors.clone(),
        };
        floors.iter().find_map(|(key, floor)| {
            let got = rewards.get(key).copied().unwrap_or(f64::NEG_INFINITY);
            (got < *floor).then(|| format!("{key} = {got} is below min_reward {floor}"))
        })
    }
}

/// One step of a multi-step task, loaded.
#[derive(Debug, Clone)]
pub struct TaskStep {
    /// `[[steps]]`.
    pub config: StepConfig,
    /// `steps/<name>/`.
    pub dir: PathBuf,
    /// `steps/<name>/instruction.md` (`None`: missing).
    pub instruction: Option<String>,
}

impl TaskStep {
    /// `steps/<name>/tests/`: uploaded over the task's `tests/` when this step is verified.
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// `steps/<name>/workdir/`: copied into the working directory before the step runs.
    pub fn workdir_dir(&self) -> PathBuf {
        self.dir.join("workdir")
    }

    /// `steps/<name>/solution/`: the step's part of the oracle.
    pub fn solution_dir(&self) -> PathBuf {
        self.dir.join("solution")
    }
}

/// `task.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TaskConfig {
    /// Schema version (`version` in old files).
    #[serde(alias = "version")]
    pub schema_version: Option<String>,
    /// `[metadata]`: free-form (`category`, `difficulty`, …).
    pub metadata: BTreeMap<String, toml::Value>,
    /// `[verifier]`.
    pub verifier: VerifierConfig,
    /// `[agent]`.
    pub agent: AgentConfig,
    /// `[environment]`.
    pub environment: EnvironmentConfig,
    /// `[solution]`.
    pub solution: SolutionConfig,
    /// `[[steps]]`: a multi-step task.
    pub steps: Option<Vec<StepConfig>>,
    /// How a multi-step task's reward comes from its steps': `mean` (the default) or `final`.
    pub multi_step_reward_strategy: Option<String>,
    /// Paths in the agent's container a separate verifier gets copies of.
    pub artifacts: Vec<ArtifactEntry>,
}

impl TaskConfig {
    /// Parses `task.toml` text.
    pub fn parse(text: &str) -> Result<TaskConfig, toml::de::Error> {
        toml::from_str(text)
    }

    /// `[metadata] category`, else `uncategorized`.
    pub fn category(&self) -> String {
        self.metadata
            .get("category")
            .and_then(|v| v.as_str())
            .unwrap_or("uncategorized")
            .to_owned()
    }
}

/// One Harbor task directory, loaded.
#[derive(Debug, Clone)]
pub struct HarborTask {
    /// The directory's name.
    pub name: String,
    /// The directory.
    pub dir: PathBuf,
    /// `task.toml`.
    pub config: TaskConfig,
    /// `instruction.md`.
    pub instruction: String,
    /// `solution/solve.sh`, when present.
    pub solution: Option<String>,
    /// The steps of a multi-step task, in order (empty: a single-step task).
    pub steps: Vec<TaskStep>,
}

impl HarborTask {
    /// `environment/`: the image's build context.
    pub fn environment_dir(&self) -> PathBuf {
        self.dir.join("environment")
    }

    /// `environment/Dockerfile`, when the task builds its image.
    pub fn dockerfile(&self) -> Option<PathBuf> {
        let file = self.environment_dir().join("Dockerfile");
        file.is_file().then_some(file)
    }

    /// `tests/`: uploaded only at verification time.
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// The environment of a separate verifier, when the task asks for one (`None`: the tests
    /// run in the agent's container).
    pub fn verifier_environment(&self) -> Option<VerifierEnvironment> {
        let verifier = &self.config.verifier;
        if !verifier.separate() {
            return None;
        }
        let own = verifier.environment.as_deref();
        let image = match own.and_then(|e| e.docker_image.clone()) {
            Some(image) => VerifierImage::Prebuilt(image),
            None if self.tests_dir().join("Dockerfile").is_file() => {
                VerifierImage::Build(self.tests_dir())
            }
            None => VerifierImage::Task,
        };
        Some(VerifierEnvironment {
            config: own
                .cloned()
                .unwrap_or_else(|| self.config.environment.clone()),
            image,
        })
    }

    /// Why this runtime cannot run the task as Harbor would, if it cannot.
    pub fn unsupported(&self) -> Option<String> {
        let c = &self.config;
        for step in &self.steps {
            let name = &step.config.name;
            if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
                return Some(format!("step name {name:?} is not a directory name"));
            }
            if step.instruction.is_none() {
                return Some(format!("step {name} has no steps/{name}/instruction.md"));
            }
            if step.config.agent.as_ref().is_some_and(|t| !t.is_empty())
                || step.config.verifier.as_ref().is_some_and(|t| !t.is_empty())
            {
                return Some(format!(
                    "step {name} has its own [steps.agent] or [steps.verifier] settings (not supported: the task's apply to every step)"
                ));
            }
            if !step.tests_dir().join("test.sh").is_file()
                && !self.tests_dir().join("test.sh").is_file()
                && self.verifier_environment().is_none()
            {
                return Some(format!(
                    "step {name} has neither steps/{name}/tests/test.sh nor tests/test.sh"
                ));
            }
        }
        match c.multi_step_reward_strategy.as_deref() {
            None | Some("mean" | "final") => {}
            Some(other) => {
                return Some(format!(
                    "multi_step_reward_strategy = {other:?} is neither mean nor final"
                ))
            }
        }
        if let Some(sidecar) = c.artifacts.iter().find_map(ArtifactEntry::sidecar) {
            return Some(format!(
                "its artifacts come from the Docker Compose service {sidecar:?} (Compose tasks are not supported)"
            ));
        }
        if c.agent.network_mode.is_some() || c.verifier.network_mode.is_some() {
            return Some(
                "[agent] or [verifier] network_mode (a network policy per phase) is not supported"
                    .into(),
            );
        }
        match c.verifier.environment_mode.as_deref() {
            None | Some("separate") => {}
            Some("shared") if c.verifier.environment.is_some() => return Some(
                "[verifier] environment_mode = \"shared\" conflicts with [verifier.environment]"
                    .into(),
            ),
            Some("shared") => {}
            Some(other) => {
                return Some(format!(
                    "[verifier] environment_mode = {other:?} is neither shared nor separate"
                ))
            }
        }
        if let Some(v) = self.verifier_environment() {
            if self.tests_dir().join("docker-compose.yaml").is_file() {
                return Some(
                    "its verifier environment is a Docker Compose file (not supported)".into(),
                );
            }
            if let Err(e) = v.config.network() {
                return Some(format!("its verifier environment: {e}"));
            }
        }
        if c.environment.gpus.is_some_and(|g| g > 0) {
            return Some("GPU tasks are not supported".into());
        }
        if c.environment
            .os
            .as_deref()
            .is_some_and(|o| !o.eq_ignore_ascii_case("linux"))
        {
            return Some("only linux tasks are supported".into());
        }
        if let Err(e) = c.environment.network() {
            return Some(e);
        }
        if c.environment.docker_image.is_none() && self.dockerfile().is_none() {
            return Some(
                "it has neither [environment] docker_image nor environment/Dockerfile".into(),
            );
        }
        let bundled = self
            .verifier_environment()
            .is_some_and(|v| v.image.bundles_tests());
        if !bundled && self.steps.is_empty() && !self.tests_dir().join("test.sh").is_file() {
            return Some("it has no tests/test.sh".into());
        }
        None
    }
}

/// Loads one task directory (`None` when it has no `task.toml`).
pub fn load_task(dir: &Path) -> Result<Option<HarborTask>, HarborError> {
    let toml_path = dir.join("task.toml");
    if !toml_path.is_file() {
        return Ok(None);
    }
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| HarborError::Read {
            path: p.to_owned(),
            source: e,
        })
    };
    let config = TaskConfig::parse(&read(&toml_path)?).map_err(|e| HarborError::Toml {
        path: toml_path.clone(),
        message: e.message().to_owned(),
        line: e.span().and_then(|s| {
            let text = read(&toml_path).ok()?;
            Some(text.get(..s.start)?.matches('\n').count() + 1)
        }),
    })?;
    let mut steps = Vec::new();
    for step in config.steps.iter().flatten() {
        let step_dir = dir.join("steps").join(&step.name);
        let instruction = step_dir.join("instruction.md");
        steps.push(TaskStep {
            config: step.clone(),
            instruction: match instruction.is_file() && !step.name.contains(['/', '\\']) {
                true => Some(read(&instruction)?),
                false => None,
            },
            dir: step_dir,
        });
    }
    // A multi-step task's instructions are its steps'.
    let top = dir.join("instruction.md");
    let instruction = match steps.is_empty() || top.is_file() {
        true => read(&top)?,
        false => String::new(),
    };
    let solve = dir.join("solution/solve.sh");
    let solution = if solve.is_file() {
        Some(read(&solve)?)
    } else {
        None
    };
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| HarborError::Layout(format!("{} has no UTF-8 name", dir.display())))?
        .to_owned();
    Ok(Some(HarborTask {
        name,
        dir: dir.to_owned(),
        config,
        instruction,
        solution,
        steps,
    }))
}

/// Loads `root`: one task directory (it holds `task.toml`) or a dataset directory of them
/// (sorted by name; entries without `task.toml` are not tasks).
pub fn load_tasks(root: &Path) -> Result<Vec<HarborTask>, HarborError> {
    if let Some(task) = load_task(root)? {
        return Ok(vec![task]);
    }
    let entries = std::fs::read_dir(root).map_err(|e| HarborError::Read {
        path: root.to_owned(),
        source: e,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut tasks = Vec::new();
    for dir in dirs {
        if let Some(task) = load_task(&dir)? {
            tasks.push(task);
        }
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harbor_defaults_and_unknown_fields() {
        let c = TaskConfig::parse(
            "version = \"1.0\"\nfuture = 3\n[metadata]\ncategory = \"web\"\n\
             [verifier]\nuser = 1000\nenv = { A = \"b\" }\n[environment]\nallow_internet = false\n\
             memory = \"2G\"\n[environment.healthcheck]\ncommand = \"true\"\n[solution]\n",
        )
        .unwrap();
        assert_eq!(c.schema_version.as_deref(), Some("1.0"));
        assert_eq!(c.category(), "web");
        assert_eq!(c.verifier.timeout_sec, 600.0);
        assert_eq!(c.verifier.user, Some(TaskUser::Uid(1000)));
        assert_eq!(c.verifier.env["A"], "b");
        assert_eq!(c.environment.network(), Ok(Network::None));
        assert_eq!(c.environment.memory_mib(), Some(2048));
        assert_eq!(c.environment.healthcheck.unwrap().retries, 3);
        let public =
            TaskConfig::parse("[environment]\nnetwork_mode = \"public\"\nallow_internet = false\n")
                .unwrap();
        assert_eq!(public.environment.network(), Ok(Network::Public));
        assert_eq!(
            TaskConfig::parse(
                "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n"
            )
            .unwrap()
            .environment
            .network(),
            Ok(Network::Allowlist(vec!["pypi.org".into()]))
        );
        assert!(
            TaskConfig::parse("[environment]\nnetwork_mode = \"bridge\"\n")
                .unwrap()
                .environment
                .network()
                .is_err()
        );
        assert!(TaskConfig::parse("[verifier]\ntimeout_sec = \"x\"\n").is_err());
    }
}
