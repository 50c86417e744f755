//! The `terminal` tool: one shell command in the rollout's sandbox.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;
use crate::sandbox::{ExecRequest, OUTPUT_LIMIT_CHARS};

/// Longest foreground timeout a model may ask for, in seconds.
pub const MAX_FOREGROUND_TIMEOUT: i64 = 600;

/// Runs `command` with bash in the task's sandbox; output capped at 50,000 characters
/// (40% head / 60% tail); exit code 124 when the timeout kills the process group.
pub struct TerminalTool;

#[async_trait]
impl Tool for TerminalTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "terminal",
            "Execute a shell command in the task's Linux environment and return its combined \
             stdout/stderr and exit code. Output over 50,000 characters is truncated (head and tail kept). \
             Use non-interactive commands; long-running servers should be started in the background.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run with bash."},
                    "background": {"type": "boolean", "default": false, "description": "Start the command detached and return a session_id at once; manage it with the process tool (servers, long jobs)."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Timeout in seconds (default: the environment's terminal_timeout, max 600)."},
                    "workdir": {"type": "string", "description": "Working directory (absolute path, or relative to the task directory)."}
                },
                "required": ["command"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "terminal"
    }

    fn uses_sandbox(&self) -> bool {
        true
    }

    fn max_result_chars(&self) -> Option<usize> {
        Some(100_000)
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let Some(command) = args.get("command").and_then(Value::as_str) else {
            return json!({"output": "", "exit_code": -1, "error": "command must be a string"});
        };
        let workdir = args.get("workdir").and_then(Value::as_str);
        if args.get("background").and_then(Value::as_bool) == Some(true) {
            return super::process::start_background(cx, command, workdir).await;
        }
        let timeout = match args.get("timeout").and_then(Value::as_i64) {
            Some(t) if t > MAX_FOREGROUND_TIMEOUT => {
                return json!({"output": "", "exit_code": -1,
                    "error": format!("timeout {t}s exceeds the {MAX_FOREGROUND_TIMEOUT}s limit for foreground commands")});
            }
            Some(t) if t >= 1 => Duration::from_secs(t as u64),
            _ => cx.terminal_timeout,
        };
        let request = ExecRequest {
            command: command.to_owned(),
            timeout,
            workdir: workdir.map(str::to_owned),
            output_limit: OUTPUT_LIMIT_CHARS,
            preamble_len: 0,
            user: None,
        };
        let result = match cx.sandbox.get().await {
            Ok(sandbox) => sandbox.exec(request).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(out) => {
                json!({"output": out.output.trim(), "exit_code": out.exit_code, "error": null})
            }
            Err(e) => {
                json!({"output": "", "exit_code": -1, "error": format!("Command execution failed: {e}")})
            }
        }
    }
}
