//! `TaskSandbox`: the rollout's handle to its sandbox, created on first use and shared by the
//! agent's tools and the reward's `ToolContext`. Dropping the last handle tears it down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use tokio::sync::OnceCell;

use super::api::{prepare_in, Sandbox, SandboxProvider, SandboxSpec};
use super::change_scan::STAMP_LAG;
use super::error::SandboxError;
use super::fork::GroupFork;
use super::survival::OwnProcess;
use super::watched::{FailureRecord, Watched};

/// A lazily created sandbox keyed by one rollout's task id.
pub struct TaskSandbox {
    task_id: String,
    provider: Arc<dyn SandboxProvider>,
    spec: SandboxSpec,
    cell: OnceCell<Arc<dyn Sandbox>>,
    tool_state: AtomicBool,
    /// The `process` tool's background processes, as its start command reported them: the
    /// only account of them the pre-verification kill believes (files in the sandbox are the
    /// model's to write).
    own: Mutex<Vec<OwnProcess>>,
    failure: FailureRecord,
    /// The first failure of a tool server (an MCP server that crashed, hung or broke the
    /// protocol) met by this rollout's tool calls.
    tool_server_failure: OnceLock<String>,
    /// The rollout's group, whose prepared sandbox this one is copied from.
    group: Option<Arc<GroupFork>>,
    /// Set when the framework laid files in the new sandbox (its preparation, copy or
    /// setup): a moment after the last of them, which the tripwires do not count.
    laid: OnceLock<SystemTime>,
}

/// A sandbox being made ahead of its first use ([`TaskSandbox::warm`]). Dropped unfinished
/// (the rollout cancelled), the making stops.
#[must_use = "finish it before the sandbox is released"]
pub(crate) struct Warming(Option<tokio::task::JoinHandle<()>>);

impl Warming {
    /// Waits until the making ended (the sandbox made, or its failure recorded), so that the
    /// release that follows finds what was made.
    pub(crate) async fn finish(mut self) {
        if let Some(making) = self.0.take() {
            let _ = making.await;
        }
    }
}

impl Drop for Warming {
    fn drop(&mut self) {
        if let Some(making) = self.0.take() {
            making.abort();
        }
    }
}

/// Most background-process records kept per rollout; past it the oldest is forgotten (were it
/// still running it would then fire the process wire: a wrong wire, never a spared process).
const OWN_RECORDS: usize = 4096;

impl std::fmt::Debug for TaskSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSandbox")
            .field("task_id", &self.task_id)
            .field("created", &self.cell.initialized())
            .finish()
    }
}

impl TaskSandbox {
    /// A handle for `task_id`; nothing is created until a tool needs it.
    pub fn new(task_id: impl Into<String>, provider: Arc<dyn SandboxProvider>) -> Self {
        TaskSandbox {
            task_id: task_id.into(),
            provider,
            spec: SandboxSpec::default(),
            cell: OnceCell::new(),
            tool_state: AtomicBool::new(false),
            own: Mutex::new(Vec::new()),
            failure: Arc::new(OnceLock::new()),
            tool_server_failure: OnceLock::new(),
            group: None,
            laid: OnceLock::new(),
        }
    }

    /// Copies the sandbox from `group`'s prepared one when the spec has a `prepare`.
    pub fn in_group(mut self, group: Option<Arc<GroupFork>>) -> Self {
        self.group = group;
        self
    }

    /// A moment after the last file the framework laid in the sandbox before the agent's
    /// first command (none laid: `None`); see [`crate::sandbox::tripwire::Armed::after`].
    pub fn laid_at(&self) -> Option<SystemTime> {
        self.laid.get().copied()
    }

    /// Records that a tool left state in the sandbox (background processes, saved results)
    /// which must be cleaned up before teardown.
    pub fn mark_tool_state(&self) {
        self.tool_state.store(true, Ordering::Relaxed);
    }

    /// Records a background process the `process` tool started (and that tool state is left
    /// to clean up).
    pub fn record_own_process(&self, process: OwnProcess) {
        self.mark_tool_state();
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        if own.len() >= OWN_RECORDS {
            own.remove(0);
            tracing::warn!(
                "rollout {}: over {OWN_RECORDS} background processes started; the oldest record is forgotten (if that process still runs at verification it fires the process wire)",
                self.task_id
            );
        }
        own.push(process);
    }

    /// The background processes the `process` tool started, as recorded.
    pub fn own_processes(&self) -> Vec<OwnProcess> {
        self.own.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// True when a tool left state to clean up.
    pub fn has_tool_state(&self) -> bool {
        self.tool_state.load(Ordering::Relaxed)
    }

    /// Uses `spec` (for example a per-item image) when the sandbox is created.
    pub fn with_spec(mut self, spec: SandboxSpec) -> Self {
        self.spec = spec;
        self
    }

    /// The spec the sandbox is (or will be) created with.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// The provider the sandbox is made by.
    pub(crate) fn provider(&self) -> Arc<dyn SandboxProvider> {
        Arc::clone(&self.provider)
    }

    /// The rollout's task id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The sandbox, created on first call (concurrent callers wait for one creation).
    pub async fn get(&self) -> Result<&Arc<dyn Sandbox>, SandboxError> {
        self.cell
            .get_or_try_init(|| async {
                let created = match self.forked().await {
                    Ok(Some(inner)) => Ok((inner, true)),
                    Ok(None) => self
                        .provider
                        .create(&self.task_id, &self.spec)
                        .await
                        .map(|s| (s, false)),
                    Err(e) => Err(e),
                };
                let created = match created {
                    Ok((inner, forked)) => match self.make_ready(inner.as_ref(), forked).await {
                        Ok(()) => Ok(inner),
                        Err(e) => {
                            let _ = inner.teardown().await;
                            Err(e)
                        }
                    },
                    Err(e) => Err(e),
                };
                match created {
                    Ok(inner) => Ok(Arc::new(Watched {
                        inner,
                        failure: Arc::clone(&self.failure),
                    }) as Arc<dyn Sandbox>),
                    Err(e) => {
                        if e.is_infra() {
                            let _ = self.failure.set(e.to_string());
                        }
                        Err(e)
                    }
                }
            })
            .await
    }

    /// A copy of the group's prepared sandbox, when the spec has a `prepare` and the group
    /// can give one.
    async fn forked(&self) -> Result<Option<Arc<dyn Sandbox>>, SandboxError> {
        match (&self.group, &self.spec.prepare) {
            (Some(group), Some(_)) => group.sandbox(&self.task_id, &self.spec).await,
            _ => Ok(None),
        }
    }

    /// In a new sandbox: the spec's ready check and `prepare` (a copy was prepared already:
    /// only the ready check, its services being new), then its setup command. What they laid
    /// is then the framework's, not the agent's ([`TaskSandbox::laid_at`]).
    async fn make_ready(&self, sandbox: &dyn Sandbox, forked: bool) -> Result<(), SandboxError> {
        let laid = forked || self.spec.prepare.is_some() || self.spec.setup.is_some();
        if forked {
            if let Some(check) = &self.spec.ready {
                check.run(sandbox).await?;
            }
        } else if self.spec.prepare.is_some() {
            prepare_in(sandbox, &self.spec).await?;
        } else if let Some(check) = &self.spec.ready {
            check.run(sandbox).await?;
        }
        if let Some(setup) = &self.spec.setup {
            setup.run(sandbox).await?;
        }
        if laid {
            // Files stamped by a lagging clock are then older than the moment recorded.
            tokio::time::sleep(STAMP_LAG).await;
            let _ = self.laid.set(SystemTime::now() - STAMP_LAG);
        }
        Ok(())
    }

    /// The first infrastructure failure any user of this sandbox met (creation, a daemon
    /// error, a vanished container), if any: the rollout is then a sandbox failure.
    pub fn infra_failure(&self) -> Option<&str> {
        self.failure
            .get()
            .or(self.tool_server_failure.get())
            .map(String::as_str)
    }

    /// Records that a tool server failed under a tool call (the first failure is kept): the
    /// rollout is then an infrastructure failure, never a reward.
    pub fn record_tool_server_failure(&self, message: String) {
        let _ = self.tool_server_failure.set(message);
    }

    /// The first tool-server failure recorded, if any.
    pub fn tool_server_failure(&self) -> Option<&str> {
        self.tool_server_failure.get().map(String::as_str)
    }

    /// True once the sandbox exists.
    pub fn is_created(&self) -> bool {
        self.cell.initialized()
    }

    /// For a rollout of a group whose item declares a `prepare`: starts making its sandbox (a
    /// copy of the group's prepared one) now, while the model's first turn runs, instead of at
    /// the first tool call. Nothing otherwise: a sandbox no tool may use is not made.
    pub(crate) fn warm(self: &Arc<Self>) -> Warming {
        if self.group.is_none() || self.spec.prepare.is_none() {
            return Warming(None);
        }
        let sandbox = Arc::clone(self);
        Warming(Some(tokio::spawn(async move {
            // A failure is recorded by `get` and met again by the first use.
            let _ = sandbox.get().await;
        })))
    }

    /// Tears the sandbox down now (idempotent). Runs on a spawned task so that cancelling the
    /// caller cannot interrupt it halfway.
    pub async fn close(&self) -> Result<(), SandboxError> {
        let Some(sandbox) = self.cell.get().cloned() else {
            return Ok(());
        };
        match tokio::spawn(async move { sandbox.teardown().await }).await {
            Ok(result) => result,
            Err(e) => Err(SandboxError::worker("teardown task", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sandbox::api::SetupCommand;
    use crate::sandbox::LocalProvider;

    fn prepared_spec() -> SandboxSpec {
        SandboxSpec::default().with_prepare(SetupCommand {
            name: "prepare".into(),
            command: "echo prepared > p.txt".into(),
            timeout: Duration::from_secs(60),
        })
    }

    #[tokio::test]
    async fn a_group_copy_is_made_ahead_of_its_first_use_and_nothing_else_is() {
        let provider: Arc<dyn SandboxProvider> = Arc::new(LocalProvider::new().unwrap());
        let group = GroupFork::new(Arc::clone(&provider), 1);
        let warmed = Arc::new(
            TaskSandbox::new("warmed", Arc::clone(&provider))
                .with_spec(prepared_spec())
                .in_group(Some(Arc::clone(&group))),
        );
        warmed.warm().finish().await;
        assert!(warmed.is_created(), "made before any tool asked");
        let made = warmed.get().await.unwrap();
        assert_eq!(made.read_file("p.txt").await.unwrap(), b"prepared\n");
        warmed.close().await.unwrap();
        group.close().await;
        // Outside a group, or without a preparation, a sandbox is made at its first use only.
        let alone =
            Arc::new(TaskSandbox::new("alone", Arc::clone(&provider)).with_spec(prepared_spec()));
        let plain = Arc::new(
            TaskSandbox::new("plain", Arc::clone(&provider))
                .in_group(Some(GroupFork::new(Arc::clone(&provider), 1))),
        );
        for sandbox in [alone, plain] {
            sandbox.warm().finish().await;
            assert!(!sandbox.is_created(), "{sandbox:?}");
        }
    }
}
