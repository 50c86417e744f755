//! The vocabulary every layer of the sandbox shares: the [`Sandbox`] and [`SandboxProvider`]
//! traits that tools and `ToolContext` are written against, and the values they pass (a
//! command and its output, an item's sandbox settings, what a transfer moved).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::change_scan::ChangeScan;
use super::error::SandboxError;
use super::survival::{LeftoverKill, LeftoverRules, Survivor};

/// Character budget of command output shown to the model (Hermes: 50,000).
pub const OUTPUT_LIMIT_CHARS: usize = 50_000;

/// One command to run in a sandbox.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Shell command (run with `bash -c`).
    pub command: String,
    /// Deadline for the whole command including its output stream.
    pub timeout: Duration,
    /// Working directory; `None` = the sandbox's working directory.
    pub workdir: Option<String>,
    /// Character budget of the returned output.
    pub output_limit: usize,
    /// How many leading bytes of `command` are the framework's own complete script that
    /// prepares the command (0: none). The persistent shell runs it on its own first, so the
    /// rest can still be `exec`ed when it is one plain program; other backends run the whole.
    pub preamble_len: usize,
    /// User to run the command as (a name or uid, Docker's `--user` syntax); `None` = the
    /// sandbox's user. Docker runs it as that user; the local and ssh backends cannot change
    /// user and refuse a request that names one (never run it as their own user instead).
    pub user: Option<String>,
}

impl ExecRequest {
    /// A command with the given timeout and the default output budget.
    pub fn new(command: impl Into<String>, timeout: Duration) -> Self {
        ExecRequest {
            command: command.into(),
            timeout,
            workdir: None,
            output_limit: OUTPUT_LIMIT_CHARS,
            preamble_len: 0,
            user: None,
        }
    }

    /// The same command run after `preamble`, a complete script of the framework's own
    /// (a line of its own before the command).
    pub fn with_preamble(mut self, preamble: &str) -> Self {
        self.command = format!("{preamble}\n{}", self.command);
        self.preamble_len = preamble.len() + 1;
        self
    }

    /// The preamble and the command after it. A `preamble_len` that is not a place in the
    /// command runs it all as the command.
    pub(crate) fn parts(&self) -> (&str, &str) {
        self.command
            .split_at_checked(self.preamble_len)
            .unwrap_or(("", &self.command))
    }

    /// The same request run in `workdir` (the shell's persistent directory is left alone).
    pub fn with_workdir(mut self, workdir: impl Into<String>) -> Self {
        self.workdir = Some(workdir.into());
        self
    }

    /// The same request run as `user` (a name or uid); see [`ExecRequest::user`].
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }
}

/// Refuses a request that names a user on a backend that cannot change user.
pub(crate) fn refuse_user(
    request: &ExecRequest,
    backend: &'static str,
) -> Result<(), SandboxError> {
    match &request.user {
        Some(user) => Err(SandboxError::Unsupported {
            backend,
            what: format!("run a command as user {user}"),
        }),
        None => Ok(()),
    }
}

/// What a finished (or killed) command produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOutput {
    /// stdout and stderr interleaved, truncated to the budget (40% head / 60% tail).
    pub output: String,
    /// Exit code; 124 when the deadline killed it.
    pub exit_code: i32,
    /// True when the deadline killed the command's process group.
    pub timed_out: bool,
}

/// Per-item sandbox settings an environment chooses with its `sandbox_spec` hook (as
/// terminal-bench tasks choose their image). The default uses the run's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxSpec {
    /// Docker image for this item's sandbox; `None` = `--env.docker_image`. The local backend
    /// ignores it.
    pub image: Option<String>,
    /// Extra paths the verifier relies on (e.g. an oracle directory baked into the image):
    /// any change the agent makes under them fires the integrity tripwire.
    pub protected_paths: Vec<String>,
    /// Lets the agent change system directories (install packages system-wide) without
    /// firing the integrity tripwire, for tasks that require it; the verifier is then only as
    /// trustworthy as the binaries the agent left behind.
    pub mutable_system: bool,
    /// Processes allowed to outlive the agent phase (services the task asks for); every other
    /// process the agent left is killed before verification and fires the process wire.
    pub survivors: Vec<Survivor>,
    /// The item's own container settings (resources, network, working directory); each one
    /// unset keeps the run's. Docker only; an item with any set never takes a pooled container.
    pub container: ContainerOverrides,
    /// A readiness check run right after the sandbox is created, before any command of the
    /// agent's or the verifier's: failing it makes the rollout a sandbox failure.
    pub ready: Option<ReadyCheck>,
    /// The agent phase's time limit for this item's rollouts, counted as
    /// `--env.rollout_timeout` counts (inference waits excluded) and over it: Harbor's
    /// per-task `[agent] timeout_sec`.
    pub agent_timeout: Option<Duration>,
    /// A command run once right after the sandbox is ready, before any command of the
    /// agent's: the item's own setup (a multi-step task's first step).
    pub setup: Option<SetupCommand>,
    /// The item's preparation (a clone, an install, a build): the same for every rollout of
    /// the item, so a group runs it once and its rollouts start from copies of the prepared
    /// sandbox (Docker: containers from a snapshot image; local: a copy of the scratch
    /// directory). A rollout outside a group, or on a backend that cannot copy a sandbox,
    /// runs it in its own. It runs after the ready check, before `setup`; processes it leaves
    /// are not kept. A failure makes the group's rollouts sandbox failures.
    pub prepare: Option<SetupCommand>,
}

/// An item's setup command ([`SandboxSpec::setup`]): run once as the sandbox's default user in
/// a fresh shell; a non-zero exit or a timeout makes the rollout a sandbox failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupCommand {
    /// What it is, for the failure's message (`step 1 setup`).
    pub name: String,
    /// Shell command.
    pub command: String,
    /// Time it may run.
    pub timeout: Duration,
}

impl SetupCommand {
    /// Runs it in `sandbox`; `Err` says why it failed.
    pub async fn run(&self, sandbox: &dyn Sandbox) -> Result<(), SandboxError> {
        let out = sandbox
            .exec_one_shot(ExecRequest::new(self.command.clone(), self.timeout))
            .await?;
        if out.exit_code == 0 {
            return Ok(());
        }
        let tail: Vec<&str> = out.output.trim().lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(SandboxError::Create(format!(
            "the item's {} failed (exit code {}): {}",
            self.name,
            out.exit_code,
            tail.join(" | ")
        )))
    }
}

/// Docker HEALTHCHECK's semantics for a sandbox (Harbor's `[environment.healthcheck]`): the
/// command runs until it exits 0; failures within `start_period` (retried every
/// `start_interval`) do not count, after it `retries` consecutive failures (every `interval`)
/// fail the check. Each attempt is bounded by `timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyCheck {
    /// Shell command; exit 0 = ready.
    pub command: String,
    /// Time between attempts after the start period.
    pub interval: Duration,
    /// Time one attempt may run.
    pub timeout: Duration,
    /// Grace period in which failures do not count.
    pub start_period: Duration,
    /// Time between attempts in the grace period.
    pub start_interval: Duration,
    /// Consecutive failures (after the grace period) that fail the check; at least 1.
    pub retries: u32,
}

impl ReadyCheck {
    /// Runs the check in `sandbox` (fresh shells); `Err` says why it failed.
    pub async fn run(&self, sandbox: &dyn Sandbox) -> Result<(), SandboxError> {
        let start = tokio::time::Instant::now();
        let mut failures = 0;
        loop {
            let out = sandbox
                .exec_one_shot(ExecRequest::new(self.command.clone(), self.timeout))
                .await?;
            if out.exit_code == 0 {
                return Ok(());
            }
            let in_start = start.elapsed() < self.start_period;
            if !in_start {
                failures += 1;
                if failures >= self.retries.max(1) {
                    return Err(SandboxError::Create(format!(
                        "the environment is unhealthy: its healthcheck `{}` failed {failures} time(s) after the start period (last exit code {}: {})",
                        self.command,
                        out.exit_code,
                        out.output.trim()
                    )));
                }
            }
            tokio::time::sleep(if in_start {
                self.start_interval
            } else {
                self.interval
            })
            .await;
        }
    }
}

/// An item's own container settings, over the run's `--env.container_*` flags (a task format
/// that carries its own, like Harbor's `[environment]`). `None` keeps the run's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerOverrides {
    /// CPUs in billionths (Docker's `NanoCpus`).
    pub nano_cpus: Option<i64>,
    /// Memory limit in MiB.
    pub memory_mb: Option<i64>,
    /// Network mode (`none`, `bridge`, a network name).
    pub network: Option<String>,
    /// Working directory of the container and of the sandbox's commands (and relative paths).
    pub workdir: Option<String>,
    /// The user the sandbox's commands run as unless a command names its own (Docker's
    /// `--user`), over `--env.container_user`: Harbor's per-task `[agent] user`.
    pub user: Option<String>,
    /// An egress allowlist (host names, `*.` wildcards, addresses, CIDR ranges): the
    /// container reaches only these, over HTTP(S) through a proxy this process runs (its
    /// `HTTP(S)_PROXY` set), and nothing else. The Docker daemon must be this machine's.
    pub allow_hosts: Option<Vec<String>>,
}

impl ContainerOverrides {
    /// True when nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == ContainerOverrides::default()
    }
}

impl SandboxSpec {
    /// A spec that runs the item in `image`.
    pub fn image(image: impl Into<String>) -> Self {
        SandboxSpec {
            image: Some(image.into()),
            ..Default::default()
        }
    }

    /// Adds a path the verifier relies on to the integrity tripwire's watch list.
    pub fn protect(mut self, path: impl Into<String>) -> Self {
        self.protected_paths.push(path.into());
        self
    }

    /// Lets processes that execute `exe` (a path in the sandbox; links followed) with a
    /// command line matching `command` (`*` = any characters, the rest literal) outlive the
    /// agent phase: a service the task asks the agent to leave running keeps running while the
    /// verifier runs, and fires no wire. Everything else is still killed. The verifier then
    /// runs beside a process the agent started: see [`Survivor`].
    pub fn allow_survivor(mut self, exe: impl Into<String>, command: impl Into<String>) -> Self {
        self.survivors.push(Survivor {
            exe: exe.into(),
            command: command.into(),
        });
        self
    }

    /// Lets every process the agent leaves running that holds a listening socket (a service,
    /// whatever program serves it) outlive the agent phase and fire no wire, for task formats
    /// whose tests query the agent's services after it is done (Harbor's); every other
    /// process is still killed and fires the process wire. A service runs beside the
    /// verifier with the agent's user: see [`Survivor::LISTENING`] and the verification design
    /// note for what it could still do.
    pub fn keep_services(self) -> Self {
        self.allow_survivor(Survivor::LISTENING, "*")
    }

    /// Runs `check` right after the sandbox is created, before anything else runs in it.
    pub fn with_ready_check(mut self, check: ReadyCheck) -> Self {
        self.ready = Some(check);
        self
    }

    /// Runs `setup` once the sandbox is ready, before anything else (see [`SetupCommand`]).
    pub fn with_setup(mut self, setup: SetupCommand) -> Self {
        self.setup = Some(setup);
        self
    }

    /// Runs `prepare` once per group, its rollouts starting from copies (see
    /// [`SandboxSpec::prepare`]).
    pub fn with_prepare(mut self, prepare: SetupCommand) -> Self {
        self.prepare = Some(prepare);
        self
    }

    /// Bounds the agent phase of this item's rollouts (see [`SandboxSpec::agent_timeout`]).
    pub fn with_agent_timeout(mut self, limit: Duration) -> Self {
        self.agent_timeout = Some(limit);
        self
    }

    /// Sets the item's own container settings.
    pub fn with_container(mut self, container: ContainerOverrides) -> Self {
        self.container = container;
        self
    }
}

/// What a file transfer moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfer {
    /// Regular files copied.
    pub files: u64,
    /// Bytes of file content copied.
    pub bytes: u64,
}

/// The operations every backend provides; tools and `ToolContext` are written against this.
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The rollout this sandbox belongs to.
    fn task_id(&self) -> &str;
    /// The default working directory (and `~`).
    fn workdir(&self) -> &str;
    /// Where the sandbox's commands and the framework's tools keep temporary files and state
    /// (`/tmp`; a confined local sandbox's own temp directory, as `/tmp` is shared there).
    fn temp_dir(&self) -> &str {
        "/tmp"
    }
    /// Runs a command in the sandbox's persistent shell; a timeout kills its whole process
    /// group and yields exit code 124.
    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError>;
    /// Runs a command in a fresh shell of its own (not the persistent one), with the same
    /// semantics: for reward commands whose author wants them isolated from the agent's shell.
    async fn exec_one_shot(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.exec(request).await
    }
    /// Kills every process the sandbox's commands started, the persistent shell included (a
    /// later command gets a fresh shell; the working directory is kept).
    async fn reset_processes(&self) -> Result<(), SandboxError> {
        Ok(())
    }
    /// Reads a file's bytes (`~` and relative paths resolve against the working directory).
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError>;
    /// Writes a file atomically, creating parent directories; returns whether any were created.
    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError>;
    /// Copies the host file `local` to the sandbox file `remote` (binary-safe, any size,
    /// permission bits kept, parents created).
    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError>;
    /// Copies the contents of the host directory `local` into the sandbox directory `remote`
    /// (created if missing; symbolic links are copied as links).
    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError>;
    /// Copies the sandbox file `remote` to the host file `local` (parents created).
    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError>;
    /// Copies the contents of the sandbox directory `remote` into the host directory `local`;
    /// entries that would land outside `local` (`..`, absolute or escaping link targets) are
    /// refused with [`SandboxError::Path`].
    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError>;
    /// Kills everything the sandbox started and removes it. Idempotent.
    async fn teardown(&self) -> Result<(), SandboxError>;
    /// Before verification: kills every process still running that the agent started, except
    /// the declared survivors of `rules` (checked against the kernel's view of each process),
    /// and reports each killed process (`pid command`) that is not one of the `process` tool's
    /// own (`rules.own`, matched by pid and start time) or below one. Docker runs the
    /// tripwires' `LEFTOVER_SCRIPT` in the container (everything but init and the entrypoint),
    /// the local backend scans for the rollout's groups and `HOME`. The default kills nothing:
    /// on a host the sandbox shares with others (ssh) "everything else" is not the agent's.
    async fn kill_leftover_processes(
        &self,
        rules: &LeftoverRules,
    ) -> Result<LeftoverKill, SandboxError> {
        let _ = rules;
        Ok(LeftoverKill::default())
    }
    /// Paths the sandbox's filesystem changed at, as seen by the engine rather than from
    /// inside (an agent cannot hide a change from it), at least those at or under `roots` and
    /// the roots' ancestors the sandbox replaced or deleted; `None` when the backend cannot
    /// tell. Docker reads the container's upper directory in the daemon's storage when this
    /// process can, else asks the daemon for its diff (`docker diff`), which reports every
    /// path.
    async fn changed_paths(&self, roots: &[String]) -> Result<Option<Vec<String>>, SandboxError> {
        let _ = roots;
        Ok(None)
    }
    /// Runs a check's tripwire file scans without a process in the sandbox, where the backend
    /// sees its files from here: the paths each scan found, in order; `None` when it cannot (the
    /// wires then run the scans as `find` inside). All of a check at once, so a backend that
    /// walks on a file-system thread hands off once per check, not once per scan.
    async fn scan_changes(
        &self,
        scans: &[ChangeScan],
    ) -> Result<Option<Vec<Vec<String>>>, SandboxError> {
        let _ = scans;
        Ok(None)
    }
}

/// Creates sandboxes for task ids (one backend per run).
#[async_trait]
pub trait SandboxProvider: Send + Sync {
    /// A fresh sandbox for `task_id`, configured by the item's `spec`.
    async fn create(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError>;

    /// A sandbox for `group`, made ready and prepared ([`prepare_in`]), kept as the source
    /// its rollouts' sandboxes are copied from; `None` when this backend cannot copy a
    /// sandbox (each rollout then prepares its own).
    async fn prepare(
        &self,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Prepared>>, SandboxError> {
        let _ = (group, spec);
        Ok(None)
    }
}

/// Prepares a new sandbox as `spec` asks: its ready check, its `prepare` command, then every
/// process left stopped (a copy carries files, not processes).
pub(crate) async fn prepare_in(
    sandbox: &dyn Sandbox,
    spec: &SandboxSpec,
) -> Result<(), SandboxError> {
    if let Some(check) = &spec.ready {
        check.run(sandbox).await?;
    }
    if let Some(prepare) = &spec.prepare {
        prepare.run(sandbox).await?;
    }
    sandbox
        .kill_leftover_processes(&LeftoverRules::default())
        .await?;
    sandbox.reset_processes().await
}

/// A prepared sandbox a group's rollouts start from copies of; removed with [`Prepared::remove`]
/// (its owner also removes it when dropped).
#[async_trait]
pub trait Prepared: Send + Sync {
    /// A new sandbox for `task_id` holding a copy of the prepared one's files, configured by
    /// `spec` (the prepared one's own); nothing it does reaches the prepared copy or its
    /// siblings.
    async fn fork(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError>;
    /// Removes the prepared copy (a snapshot image, a directory). Idempotent.
    async fn remove(&self) -> Result<(), SandboxError>;
}
