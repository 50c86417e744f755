//! `ToolContext`: reward-time access to the rollout's own sandbox (same files, same
//! processes). The framework tears the sandbox down after the reward; authors never clean up.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::atropos::json::to_python_string;
use crate::sandbox::{ExecRequest, SandboxError, TaskSandbox};
use crate::tools::{ToolCallContext, ToolSet};

/// Default timeout of `ToolContext::terminal` (Hermes: 180 s).
pub const REWARD_COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

/// Result of a command run for a reward check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TerminalOutput {
    /// stdout and stderr interleaved, truncated like the terminal tool's.
    pub output: String,
    /// Exit code (124 on timeout).
    pub exit_code: i32,
    /// Set when the command timed out.
    pub error: Option<String>,
}

impl TerminalOutput {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }
}

/// The rollout's sandbox and tools, for `compute_reward`. Errors are [`SandboxError`]s: an
/// infrastructure failure is reported as such, not as a 0.0 reward for the model.
pub struct ToolContext {
    sandbox: Arc<TaskSandbox>,
    tools: Arc<ToolSet>,
    terminal_timeout: Duration,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("task_id", &self.task_id())
            .finish()
    }
}

impl ToolContext {
    /// A context over the rollout's sandbox and the tools it was offered.
    pub fn new(sandbox: Arc<TaskSandbox>, tools: Arc<ToolSet>, terminal_timeout: Duration) -> Self {
        ToolContext {
            sandbox,
            tools,
            terminal_timeout,
        }
    }

    /// The rollout's task id (its sandbox key).
    pub fn task_id(&self) -> &str {
        self.sandbox.task_id()
    }

    /// Runs a shell command in the rollout's sandbox with the default 180 s timeout.
    pub async fn terminal(&self, command: &str) -> Result<TerminalOutput, SandboxError> {
        self.terminal_with_timeout(command, REWARD_COMMAND_TIMEOUT)
            .await
    }

    /// Runs a shell command with an explicit timeout (the process group is killed on expiry).
    pub async fn terminal_with_timeout(
        &self,
        command: &str,
        timeout: Duration,
    ) -> Result<TerminalOutput, SandboxError> {
        let sandbox = self.sandbox.get().await?;
        let out = sandbox.exec(ExecRequest::new(command, timeout)).await?;
        Ok(TerminalOutput {
            output: out.output.trim().to_owned(),
            exit_code: out.exit_code,
            error: out
                .timed_out
                .then(|| format!("Command timed out after {} seconds", timeout.as_secs())),
        })
    }

    /// Reads a file as text (invalid UTF-8 is replaced); `~` is the sandbox home.
    pub async fn read_file(&self, path: &str) -> Result<String, SandboxError> {
        let bytes = self.read_bytes(path).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads a file's bytes.
    pub async fn read_bytes(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.sandbox.get().await?.read_file(path).await
    }

    /// Writes a file (binary-safe), creating parent directories.
    pub async fn write_file(
        &self,
        path: &str,
        content: impl AsRef<[u8]>,
    ) -> Result<(), SandboxError> {
        self.sandbox
            .get()
            .await?
            .write_file(path, content.as_ref())
            .await
            .map(|_| ())
    }

    /// Calls any tool the rollout was offered, exactly as the model would; returns its JSON
    /// result text.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> String {
        let args = match arguments {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => {
                return to_python_string(
                    &serde_json::json!({"error": format!("arguments must be an object, got {other}")}),
                )
            }
        };
        let cx = ToolCallContext {
            sandbox: &self.sandbox,
            terminal_timeout: self.terminal_timeout,
            user_task: "",
        };
        to_python_string(&self.tools.call(name, args, &cx).await)
    }
}
