//! `ToolContext`: reward-time access to the rollout's own sandbox (same files, same
//! processes). The framework tears the sandbox down after the reward; authors never clean up.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::agent::panic_message;
use crate::atropos::json::to_python_string;
use crate::llm::{ChatRequest, LlmClient, LlmError, Message, Split};
use crate::sandbox::CLEAN_PREAMBLE;
use crate::sandbox::{ExecRequest, SandboxError, SandboxSpec, TaskSandbox, Transfer};
use crate::tools::{ToolCallContext, ToolSet};

/// Completion token limit of [`ToolContext::judge`] (Hermes: 150).
pub(crate) const JUDGE_MAX_TOKENS: u32 = 150;

/// The Python side of [`ToolContext::write_call_harness`].
const CALL_HARNESS: &str = include_str!("hermes_call.py");

/// Default timeout of `ToolContext::terminal` (Hermes: 180 s).
pub(crate) const REWARD_COMMAND_TIMEOUT: Duration = Duration::from_secs(180);

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

    /// Why the command did not end on its own, if it did not: it timed out, or a signal killed
    /// it (exit code 128 + n, as the shell reports it). A verifier run that ended so has no
    /// verdict — the code under test may have written a reward file and then killed or hung
    /// the run — so return it as an error from `compute_reward` (a verifier failure, never a
    /// reward) instead of reading what the run left behind.
    pub fn abnormal_end(&self) -> Option<String> {
        if let Some(error) = &self.error {
            return Some(error.to_lowercase());
        }
        match self.exit_code {
            129..=192 => Some(format!(
                "killed by signal {} (exit code {})",
                self.exit_code - 128,
                self.exit_code
            )),
            code if code < 0 => Some(format!("ended without an exit status ({code})")),
            _ => None,
        }
    }
}

/// The rollout's sandbox and tools, for `compute_reward`. Errors are [`SandboxError`]s: an
/// infrastructure failure is reported as such, not as a 0.0 reward for the model.
pub struct ToolContext {
    sandbox: Arc<TaskSandbox>,
    tools: Arc<ToolSet>,
    terminal_timeout: Duration,
    llm: Option<LlmClient>,
    unrunnable: OnceLock<String>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("task_id", &self.task_id())
            .finish()
    }
}

/// A sandbox of its own beside the rollout's ([`ToolContext::companion`]): a [`ToolContext`]
/// whose sandbox this value owns.
#[derive(Debug)]
pub struct Companion(ToolContext);

impl std::ops::Deref for Companion {
    type Target = ToolContext;

    fn deref(&self) -> &ToolContext {
        &self.0
    }
}

impl Companion {
    /// Tears the sandbox down now (a dropped companion is torn down in the background).
    pub async fn close(self) -> Result<(), SandboxError> {
        self.0.sandbox.close().await
    }
}

impl ToolContext {
    /// A context over the rollout's sandbox and the tools it was offered.
    pub fn new(sandbox: Arc<TaskSandbox>, tools: Arc<ToolSet>, terminal_timeout: Duration) -> Self {
        ToolContext {
            sandbox,
            tools,
            terminal_timeout,
            llm: None,
            unrunnable: OnceLock::new(),
        }
    }

    /// A second sandbox for this rollout, made from `spec` (another image, say: a verifier
    /// environment of its own, as Harbor's separate verifier is), with the same tools and
    /// limits. Nothing of the rollout's sandbox is in it unless copied in. Created on first
    /// use; torn down by [`Companion::close`], or when dropped.
    pub fn companion(&self, role: &str, spec: SandboxSpec) -> Companion {
        let id = format!("{}-{role}", self.task_id());
        let sandbox = TaskSandbox::new(id, self.sandbox.provider()).with_spec(spec);
        let mut ctx = ToolContext::new(
            Arc::new(sandbox),
            Arc::clone(&self.tools),
            self.terminal_timeout,
        );
        ctx.llm = self.llm.clone();
        Companion(ctx)
    }

    /// The first reward command that could not run (see [`SandboxError::NotRunnable`]), even
    /// when `compute_reward` swallowed the error: the rollout is then a verifier failure.
    pub fn unrunnable_command(&self) -> Option<&str> {
        self.unrunnable.get().map(String::as_str)
    }

    /// Lets [`ToolContext::judge`] call the run's inference servers through `llm`.
    pub fn with_llm(mut self, llm: LlmClient) -> Self {
        self.llm = Some(llm);
        self
    }

    /// Asks the run's own inference server (an LLM judge) and returns the answer's text:
    /// no tools, temperature 0, at most `JUDGE_MAX_TOKENS` tokens, under the evaluation
    /// request limit so judging never starves training rollouts. With `--testing true` the
    /// scripted server answers (its reference policy has no solution for a judge prompt), so
    /// rewards should fall back to a heuristic when the answer does not parse.
    pub async fn judge(&self, messages: Vec<Message>) -> Result<String, LlmError> {
        let llm = self.llm.as_ref().ok_or_else(|| {
            LlmError::Config("this ToolContext has no inference server to judge with".into())
        })?;
        let request = ChatRequest {
            messages,
            tools: Vec::new().into(),
            n: 1,
            temperature: 0.0,
            max_tokens: Some(JUDGE_MAX_TOKENS),
            extra_body: Default::default(),
            split: Split::Eval,
        };
        let response = llm.chat(&request).await?;
        Ok(response
            .choices
            .into_iter()
            .next()
            .map(|c| c.message.content)
            .unwrap_or_default())
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

    /// Runs a shell command with an explicit timeout (the process group is killed on expiry),
    /// from the sandbox home in a clean context ([`CLEAN_PREAMBLE`]).
    ///
    /// A command that could not run at all — its program is not installed (exit 127,
    /// "command not found"), its interpreter is missing (exit 126), or `python -m X` finds no
    /// module `X` — is [`SandboxError::NotRunnable`]: the verifier is broken, and the
    /// rollout becomes a verifier failure rather than a 0 for the model. A verifier for which a
    /// missing program *is* the model's failure tests for it itself (`command -v X || exit 1`).
    pub async fn terminal_with_timeout(
        &self,
        command: &str,
        timeout: Duration,
    ) -> Result<TerminalOutput, SandboxError> {
        self.run_terminal(command, timeout, false).await
    }

    /// Like [`ToolContext::terminal_with_timeout`], but in a fresh shell of its own instead of
    /// the agent's persistent shell (same working directory), for a verifier that wants
    /// nothing the agent's shell holds to touch its command.
    pub async fn terminal_isolated(
        &self,
        command: &str,
        timeout: Duration,
    ) -> Result<TerminalOutput, SandboxError> {
        self.run_terminal(command, timeout, true).await
    }

    /// Like [`ToolContext::terminal_isolated`], run as `user` (a name or uid; `None` = the
    /// sandbox's user) in `workdir` (`None` = the sandbox home): a verifier a task format
    /// says runs as its own user from the working directory (Harbor's `[verifier] user`).
    /// Docker only; the other backends refuse a user.
    pub async fn terminal_isolated_as(
        &self,
        command: &str,
        timeout: Duration,
        user: Option<&str>,
        workdir: Option<&str>,
    ) -> Result<TerminalOutput, SandboxError> {
        let mut request = ExecRequest::new(command, timeout)
            .with_preamble(CLEAN_PREAMBLE)
            .with_workdir(workdir.unwrap_or("~"));
        request.user = user.map(str::to_owned);
        self.run_request(request, true).await
    }

    async fn run_terminal(
        &self,
        command: &str,
        timeout: Duration,
        isolated: bool,
    ) -> Result<TerminalOutput, SandboxError> {
        let request = ExecRequest::new(command, timeout)
            .with_preamble(CLEAN_PREAMBLE)
            .with_workdir("~");
        self.run_request(request, isolated).await
    }

    async fn run_request(
        &self,
        request: ExecRequest,
        isolated: bool,
    ) -> Result<TerminalOutput, SandboxError> {
        let sandbox = self.sandbox.get().await?;
        let (command, timeout) = (request.parts().1.to_owned(), request.timeout);
        let command = command.as_str();
        let out = if isolated {
            sandbox.exec_one_shot(request).await?
        } else {
            sandbox.exec(request).await?
        };
        if let Some(why) = not_runnable(command, out.exit_code, &out.output) {
            let _ = self.unrunnable.set(why.clone());
            return Err(SandboxError::NotRunnable(why));
        }
        Ok(TerminalOutput {
            output: out.output.trim().to_owned(),
            exit_code: out.exit_code,
            error: out
                .timed_out
                .then(|| format!("Command timed out after {} seconds", timeout.as_secs())),
        })
    }

    /// A new, empty directory with an unguessable name, created now: the place to upload
    /// hidden tests and verifier files, which the agent cannot have prepared.
    pub async fn fresh_dir(&self) -> Result<String, SandboxError> {
        let temp = self.sandbox.get().await?.temp_dir().to_owned();
        let name = format!("{temp}/hermes-verify-{}", uuid::Uuid::new_v4().simple());
        let out = self
            .terminal(&format!("mkdir -m 700 {name} && echo ok"))
            .await?;
        if out.output != "ok" {
            return Err(SandboxError::Io(format!(
                "cannot create the verifier directory {name}: {}",
                out.output
            )));
        }
        Ok(name)
    }

    /// Writes `hermes_call.py` into `dir` (a [`ToolContext::fresh_dir`] holding hidden
    /// tests), for Python tests that must judge code they never import:
    /// `solution = hermes_call.load("solution")`, then `solution.f(x)` runs `f` in a child
    /// interpreter (as `nobody`, on a private copy, when the verifier runs as root) and returns
    /// its value as JSON data. The code under test then cannot patch the test runner, its
    /// reports or the comparison, and cannot claim equality with anything; an exception or a
    /// hang fails the test that made the call. The testing guide has the whole contract.
    pub async fn write_call_harness(&self, dir: &str) -> Result<(), SandboxError> {
        self.write_file(&format!("{dir}/hermes_call.py"), CALL_HARNESS)
            .await
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

    /// Copies a host file into the sandbox (through Docker's archive API on the docker
    /// backend: binary-safe, any size, mode kept, parents created).
    pub async fn upload_file(
        &self,
        local: impl AsRef<Path>,
        remote: &str,
    ) -> Result<Transfer, SandboxError> {
        self.sandbox
            .get()
            .await?
            .upload_file(local.as_ref(), remote)
            .await
    }

    /// Copies the contents of a host directory into a sandbox directory (created if missing),
    /// for example hidden tests uploaded only at verification time.
    pub async fn upload_dir(
        &self,
        local: impl AsRef<Path>,
        remote: &str,
    ) -> Result<Transfer, SandboxError> {
        self.sandbox
            .get()
            .await?
            .upload_dir(local.as_ref(), remote)
            .await
    }

    /// Copies a sandbox file to a host path (parents created, written atomically).
    pub async fn download_file(
        &self,
        remote: &str,
        local: impl AsRef<Path>,
    ) -> Result<Transfer, SandboxError> {
        self.sandbox
            .get()
            .await?
            .download_file(remote, local.as_ref())
            .await
    }

    /// Copies the contents of a sandbox directory into a host directory; entries that would
    /// land outside it are refused with [`SandboxError::Path`].
    pub async fn download_dir(
        &self,
        remote: &str,
        local: impl AsRef<Path>,
    ) -> Result<Transfer, SandboxError> {
        self.sandbox
            .get()
            .await?
            .download_dir(remote, local.as_ref())
            .await
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
        let outcome = std::panic::AssertUnwindSafe(self.tools.call(name, args, &cx))
            .catch_unwind()
            .await;
        let value = outcome.unwrap_or_else(|panic| {
            serde_json::json!({"error": format!("Tool execution failed: panic: {}", panic_message(panic.as_ref()))})
        });
        to_python_string(&value)
    }
}

/// Why a reward command's result means it could not run at all, or `None`.
fn not_runnable(command: &str, exit_code: i32, output: &str) -> Option<String> {
    let last = output
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let shown = crate::agent::clip(command.trim(), 200);
    let missing_program = exit_code == 127
        && output
            .lines()
            .any(|l| l.ends_with("command not found") || l.ends_with(": not found"));
    let missing_interpreter = exit_code == 126
        && (output.contains("bad interpreter") || output.contains("cannot execute"));
    let missing_module =
        python_module(command).is_some_and(|m| output.contains(&format!("No module named {m}")));
    (missing_program || missing_interpreter || missing_module)
        .then(|| format!("reward command `{shown}` could not run (exit {exit_code}): {last}"))
}

/// `X` of a `python… -m X` command.
fn python_module(command: &str) -> Option<&str> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words.windows(3).find_map(|w| {
        let interpreter = w[0].rsplit('/').next().unwrap_or(w[0]);
        (interpreter.starts_with("python") && w[1] == "-m").then_some(w[2])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_that_cannot_run_are_told_apart_from_failing_ones() {
        let cases = [
            (
                "pytest -q",
                127,
                "bash: line 1: pytest: command not found",
                true,
            ),
            (
                "python3 -m pytest -q t",
                1,
                "/usr/bin/python3: No module named pytest",
                true,
            ),
            (
                "./t.sh",
                126,
                "bash: ./t.sh: /usr/bin/ruby: bad interpreter: No such file",
                true,
            ),
            ("sh -c 'pytest'", 127, "sh: 1: pytest: not found", true),
            // The model's own failures: a script it did not write, a failing test run.
            (
                "./run.sh",
                127,
                "bash: line 1: ./run.sh: No such file or directory",
                false,
            ),
            ("./run.sh", 126, "bash: ./run.sh: Permission denied", false),
            (
                "python3 -m pytest -q t",
                1,
                "1 failed, 2 passed in 0.1s",
                false,
            ),
            (
                "python3 t.py",
                1,
                "ModuleNotFoundError: No module named 'solution'",
                false,
            ),
            (
                "cat out.txt",
                1,
                "cat: out.txt: No such file or directory",
                false,
            ),
        ];
        for (command, code, output, expected) in cases {
            assert_eq!(
                not_runnable(command, code, output).is_some(),
                expected,
                "{command} → {code}: {output}"
            );
        }
        let why = not_runnable("pytest -q", 127, "x\nbash: pytest: command not found\n").unwrap();
        assert_eq!(
            why,
            "reward command `pytest -q` could not run (exit 127): bash: pytest: command not found"
        );
    }
}
