//! `TaskSandbox`: the rollout's handle to its sandbox, created on first use and shared by the
//! agent's tools and the reward's `ToolContext`. Dropping the last handle tears it down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::OnceCell;

use super::api::{Sandbox, SandboxProvider, SandboxSpec};
use super::error::SandboxError;
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
        }
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
                let created = self.provider.create(&self.task_id, &self.spec).await;
                let created = match created {
                    Ok(inner) => match self.make_ready(inner.as_ref()).await {
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

    /// The spec's ready check, then its setup command, in a new sandbox.
    async fn make_ready(&self, sandbox: &dyn Sandbox) -> Result<(), SandboxError> {
        if let Some(check) = &self.spec.ready {
            check.run(sandbox).await?;
        }
        if let Some(setup) = &self.spec.setup {
            setup.run(sandbox).await?;
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
