//! Background commands (`terminal` with `background: true`) and the `process` tool that
//! manages them: list, poll, log, wait, kill, write/submit. State lives in files inside the
//! sandbox (command, pid, cwd, start time, log, exit code, a stdin FIFO), so every backend
//! behaves the same and reward code sees the same processes as the agent. Those files are the
//! model's to write, so they decide nothing about survival: each process started is also
//! recorded in this process ([`OwnProcess`]: its pid and kernel start time, as the start
//! command read them), and only that record makes it the tool's own before verification.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{state_dir, Tool, ToolCallContext};
use crate::llm::ToolSchema;
use crate::sandbox::{
    shell_functions, ExecRequest, LeftoverRules, OwnProcess, Sandbox, SandboxError,
};

/// Rolling output buffer per process, in bytes read from the end of its log.
const LOG_BUFFER: usize = 200_000;
/// Running background processes allowed per task.
const MAX_PROCESSES: usize = 64;
/// Default `log` line count.
const DEFAULT_LOG_LINES: usize = 200;
/// Deadline for the bookkeeping commands themselves.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(20);
/// Shell function printing every descendant pid of `$1` (children first), from `/proc`.
const TREE: &str = r#"tree() { for c in $(grep -l "^PPid:[[:space:]]*$1\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3); do tree "$c"; echo "$c"; done; }"#;
/// Actions the tool accepts, for the error message.
const ACTIONS: &str = "list, poll, log, wait, kill, write, submit";

/// Manages the task's background processes.
pub struct ProcessTool;

/// `proc_` and 12 hex digits.
fn new_session_id() -> String {
    format!("proc_{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// Runs a bookkeeping script; its output is returned unmodified.
async fn script(
    sandbox: &dyn Sandbox,
    body: &str,
    timeout: Duration,
) -> Result<String, SandboxError> {
    let out = sandbox
        .exec(ExecRequest {
            command: body.to_owned(),
            timeout,
            workdir: None,
            output_limit: LOG_BUFFER + 16_384,
            preamble_len: 0,
            user: None,
        })
        .await?;
    Ok(out.output)
}

/// Shell prelude: `d` = the task's process directory, and helpers to report one process.
fn prelude(sandbox: &dyn Sandbox, nonce: &str) -> String {
    format!(
        r#"d='{dir}/bg'
mkdir -p "$d" 2>/dev/null
alive() {{ [ ! -f "$d/$1.exit" ] && kill -0 "$(cat "$d/$1.pid" 2>/dev/null)" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$(cat "$d/$1.pid")/status" 2>/dev/null; }}
report() {{
  id=$1; tailn=$2
  pid=$(cat "$d/$id.pid" 2>/dev/null); start=$(cat "$d/$id.start" 2>/dev/null)
  if [ -f "$d/$id.exit" ]; then st=exited; code=$(cat "$d/$id.exit")
  elif alive "$id"; then st=running; code=-
  else st=exited; code=-; fi
  echo "@@{nonce} rec $id ${{pid:--}} ${{start:-0}} $st ${{code:--}} $(date +%s)"
  echo "@@{nonce} command"; head -c 400 "$d/$id.sh" 2>/dev/null; echo
  echo "@@{nonce} cwd"; cat "$d/$id.cwd" 2>/dev/null
  echo "@@{nonce} started_at"; cat "$d/$id.started_at" 2>/dev/null
  echo "@@{nonce} log"; tail -c "$tailn" "$d/$id.log" 2>/dev/null; echo
}}
"#,
        dir = state_dir(sandbox)
    )
}

/// One process as reported by the `report` shell function.
#[derive(Debug, Default)]
struct Record {
    id: String,
    pid: Option<i64>,
    start: i64,
    running: bool,
    exit_code: Option<i64>,
    now: i64,
    command: String,
    cwd: String,
    started_at: String,
    log: String,
}

impl Record {
    fn status(&self) -> &'static str {
        if self.running {
            "running"
        } else {
            "exited"
        }
    }

    fn uptime(&self) -> i64 {
        (self.now - self.start).max(0)
    }
}

/// The last `n` characters of `s`.
fn last_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}

/// Parses the records printed by `report`.
fn parse_records(output: &str, nonce: &str) -> Vec<Record> {
    let marker = format!("@@{nonce} ");
    let mut records: Vec<Record> = Vec::new();
    let mut section = String::new();
    let mut text = String::new();
    let flush = |records: &mut Vec<Record>, section: &str, text: &mut String| {
        let body = text.strip_suffix('\n').unwrap_or(text).to_owned();
        if let Some(r) = records.last_mut() {
            match section {
                "command" => r.command = body.strip_suffix('\n').unwrap_or(&body).to_owned(),
                "cwd" => r.cwd = body.trim().to_owned(),
                "started_at" => r.started_at = body.trim().to_owned(),
                "log" => r.log = body,
                _ => {}
            }
        }
        text.clear();
    };
    for line in output.split_inclusive('\n') {
        let Some(rest) = line.strip_prefix(&marker) else {
            text.push_str(line);
            continue;
        };
        flush(&mut records, &section, &mut text);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"rec") && fields.len() >= 7 {
            records.push(Record {
                id: fields[1].to_owned(),
                pid: fields[2].parse().ok(),
                start: fields[3].parse().unwrap_or(0),
                running: fields[4] == "running",
                exit_code: fields[5].parse().ok(),
                now: fields[6].parse().unwrap_or(0),
                ..Default::default()
            });
            section.clear();
        } else {
            section = fields.first().copied().unwrap_or("").to_owned();
        }
    }
    flush(&mut records, &section, &mut text);
    records
}

fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
}

fn not_found(id: &str) -> Value {
    json!({"status": "not_found", "error": format!("No process with ID {id}")})
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Starts `command` detached in the task's sandbox and returns the terminal tool's result.
pub async fn start_background(
    cx: &ToolCallContext<'_>,
    command: &str,
    workdir: Option<&str>,
) -> Value {
    let failed = |e: String| json!({"output": "", "exit_code": -1, "error": e});
    let sandbox = match cx.sandbox.get().await {
        Ok(s) => s,
        Err(e) => return failed(format!("Command execution failed: {e}")),
    };
    let id = new_session_id();
    cx.sandbox.mark_tool_state();
    let dir = format!("{}/bg", state_dir(sandbox.as_ref()));
    if let Err(e) = sandbox
        .write_file(&format!("{dir}/{id}.sh"), command.as_bytes())
        .await
    {
        return failed(format!("Failed to start background process: {e}"));
    }
    let launcher = format!(
        r#"d='{dir}'; id='{id}'
find "$d" -name '*.exit' -mmin +30 2>/dev/null | while read -r f; do rm -f "${{f%.exit}}".*; done
n=0; for f in "$d"/*.pid; do [ -e "$f" ] || continue; [ -f "${{f%.pid}}.exit" ] || n=$((n+1)); done
if [ "$n" -ge {MAX_PROCESSES} ]; then rm -f "$d/$id.sh"; echo LIMIT; exit 3; fi
pwd > "$d/$id.cwd"; date +%s > "$d/$id.start"; date '+%Y-%m-%dT%H:%M:%S' > "$d/$id.started_at"
if mkfifo "$d/$id.in" 2>/dev/null; then
  ( bash "$d/$id.sh"; echo $? > "$d/$id.exit" ) 0<>"$d/$id.in" > "$d/$id.log" 2>&1 &
else
  ( bash "$d/$id.sh"; echo $? > "$d/$id.exit" ) < /dev/null > "$d/$id.log" 2>&1 &
fi
p=$!; echo $p > "$d/$id.pid"
st=; read -r st < "/proc/$p/stat" 2>/dev/null; st=${{st##*) }}; IFS=' '; set -- $st
echo "PID $p ${{20:--}}""#
    );
    let request = ExecRequest {
        command: launcher,
        timeout: SCRIPT_TIMEOUT,
        workdir: workdir.map(str::to_owned),
        output_limit: 4096,
        preamble_len: 0,
        user: None,
    };
    match sandbox.exec(request).await {
        Ok(out) => {
            if out.output.contains("LIMIT") {
                return failed(format!(
                    "Too many background processes ({MAX_PROCESSES} running); kill some with the process tool first"
                ));
            }
            let started = out.output.lines().find_map(|l| l.strip_prefix("PID "));
            let mut fields = started.unwrap_or_default().split_whitespace();
            let pid = fields.next().and_then(|p| p.parse::<u32>().ok());
            match pid {
                Some(pid) => {
                    match fields.next().and_then(|s| s.parse::<u64>().ok()) {
                        Some(started) => cx.sandbox.record_own_process(OwnProcess { pid, started }),
                        None => tracing::warn!(
                            "the start time of background process {pid} could not be read in the sandbox; if it outlives the agent phase it fires the process wire"
                        ),
                    }
                    json!({"output": "Background process started", "session_id": id,
                        "pid": pid, "exit_code": 0, "error": null})
                }
                None => failed(format!(
                    "Failed to start background process: {}",
                    out.output.trim()
                )),
            }
        }
        Err(e) => failed(format!("Failed to start background process: {e}")),
    }
}

/// Kills the task's background processes that `own` records (each while its pid still names
/// it, by start time, and everything below it) and removes the tool's state directory; called
/// before verification and before a rollout's sandbox is torn down. Files in the sandbox
/// choose nothing here: a pid the model wrote there could name any process.
pub async fn cleanup(sandbox: &dyn Sandbox, own: &[OwnProcess]) -> Result<(), SandboxError> {
    let rules = LeftoverRules {
        own: own.to_vec(),
        survivors: Vec::new(),
    };
    let body = format!(
        r#"{functions}held=
if [ -n "${{own// /}}" ]; then
  for d in /proc/[0-9]*; do p=${{d#/proc/}}; [ "$p" = "$$" ] && continue; owned "$p" && kill -STOP "$p" 2>/dev/null && held="$held $p"; done
  [ -n "$held" ] && kill -KILL $held 2>/dev/null
fi
rm -rf '{dir}'"#,
        functions = shell_functions(&rules),
        dir = state_dir(sandbox)
    );
    script(sandbox, &body, SCRIPT_TIMEOUT).await.map(|_| ())
}

#[async_trait]
impl Tool for ProcessTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "process",
            "Manage background processes started with terminal(background=true): list them, poll \
             status and recent output, read the log, wait for completion, kill, or write to stdin.",
            json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "kill", "write", "submit"],
                        "description": "list: all processes; poll: status + recent output; log: output lines; wait: block until exit or timeout; kill: terminate; write: raw stdin; submit: stdin + newline."},
                    "session_id": {"type": "string", "description": "Process id from terminal(background=true); required except for list."},
                    "data": {"type": "string", "description": "Text for write/submit."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "wait: maximum seconds (clamped to the terminal timeout)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "log: first line (0 = the last `limit` lines)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "log: maximum lines (default 200)."}
                },
                "required": ["action"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "terminal"
    }

    fn uses_sandbox(&self) -> bool {
        true
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let action = args.get("action").and_then(Value::as_str).unwrap_or("");
        let id = args
            .get("session_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if !matches!(
            action,
            "list" | "poll" | "log" | "wait" | "kill" | "write" | "submit"
        ) {
            return json!({"error": format!("Unknown process action: {action}. Use: {ACTIONS}")});
        }
        if action != "list" && id.is_none() {
            return json!({"error": format!("session_id is required for {action}")});
        }
        let id = id.unwrap_or("");
        if action != "list" && !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return not_found(id);
        }
        let sandbox = match cx.sandbox.get().await {
            Ok(s) => s.as_ref(),
            Err(e) => return json!({"error": format!("Process {action} failed: {e}")}),
        };
        let result = match action {
            "list" => list(sandbox).await,
            "poll" => poll(sandbox, id).await,
            "log" => {
                let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
                let limit = args
                    .get("limit")
                    .and_then(Value::as_u64)
                    .map_or(DEFAULT_LOG_LINES, |l| l.max(1) as usize);
                log(sandbox, id, offset, limit).await
            }
            "wait" => {
                let limit = cx.terminal_timeout.as_secs().max(1);
                let requested = args.get("timeout").and_then(Value::as_u64);
                wait(sandbox, id, requested, limit).await
            }
            "kill" => kill(sandbox, id).await,
            _ => {
                let mut data = args
                    .get("data")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                if action == "submit" {
                    data.push('\n');
                }
                write(sandbox, id, &data).await
            }
        };
        result.unwrap_or_else(|e| json!({"error": format!("Process {action} failed: {e}")}))
    }
}

async fn records(sandbox: &dyn Sandbox, select: &str) -> Result<Vec<Record>, SandboxError> {
    let n = nonce();
    let body = format!("{}{select}", prelude(sandbox, &n));
    let out = script(sandbox, &body, SCRIPT_TIMEOUT).await?;
    Ok(parse_records(&out, &n))
}

async fn one(sandbox: &dyn Sandbox, id: &str, tail: usize) -> Result<Option<Record>, SandboxError> {
    let select = format!(r#"[ -f "$d/{id}.pid" ] && report {id} {tail}"#);
    Ok(records(sandbox, &select).await?.into_iter().next())
}

async fn list(sandbox: &dyn Sandbox) -> Result<Value, SandboxError> {
    let select = r#"for f in "$d"/*.pid; do [ -e "$f" ] || continue; report "$(basename "$f" .pid)" 800; done"#;
    let mut all = records(sandbox, select).await?;
    all.sort_by(|a, b| (a.start, &a.id).cmp(&(b.start, &b.id)));
    let processes: Vec<Value> = all
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("session_id".into(), r.id.clone().into());
            m.insert(
                "command".into(),
                r.command.chars().take(200).collect::<String>().into(),
            );
            m.insert("cwd".into(), r.cwd.clone().into());
            m.insert("pid".into(), r.pid.into());
            m.insert("started_at".into(), r.started_at.clone().into());
            m.insert("uptime_seconds".into(), r.uptime().into());
            m.insert("status".into(), r.status().into());
            m.insert("output_preview".into(), last_chars(&r.log, 200).into());
            if let Some(code) = r.exit_code {
                m.insert("exit_code".into(), code.into());
            }
            Value::Object(m)
        })
        .collect();
    Ok(json!({"processes": processes}))
}

async fn poll(sandbox: &dyn Sandbox, id: &str) -> Result<Value, SandboxError> {
    let Some(r) = one(sandbox, id, 4000).await? else {
        return Ok(not_found(id));
    };
    let mut m = Map::new();
    m.insert("session_id".into(), r.id.clone().into());
    m.insert("command".into(), r.command.clone().into());
    m.insert("status".into(), r.status().into());
    m.insert("pid".into(), r.pid.into());
    m.insert("uptime_seconds".into(), r.uptime().into());
    m.insert("output_preview".into(), last_chars(&r.log, 1000).into());
    if let Some(code) = r.exit_code {
        m.insert("exit_code".into(), code.into());
    }
    Ok(Value::Object(m))
}

async fn log(
    sandbox: &dyn Sandbox,
    id: &str,
    offset: usize,
    limit: usize,
) -> Result<Value, SandboxError> {
    let Some(r) = one(sandbox, id, LOG_BUFFER).await? else {
        return Ok(not_found(id));
    };
    let lines: Vec<&str> = r.log.lines().collect();
    let total = lines.len();
    let selected: &[&str] = if offset == 0 {
        &lines[total.saturating_sub(limit)..]
    } else {
        let start = offset.min(total);
        &lines[start..start.saturating_add(limit).min(total)]
    };
    Ok(
        json!({"session_id": r.id, "status": r.status(), "output": selected.join("\n"),
        "total_lines": total, "showing": format!("{} lines", selected.len())}),
    )
}

async fn wait(
    sandbox: &dyn Sandbox,
    id: &str,
    requested: Option<u64>,
    limit: u64,
) -> Result<Value, SandboxError> {
    let seconds = requested.unwrap_or(limit).clamp(1, limit);
    let n = nonce();
    let body = format!(
        r#"{prelude}[ -f "$d/{id}.pid" ] || exit 0
end=$(( $(date +%s) + {seconds} ))
while alive {id} && [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
sleep 0.05
report {id} 8000"#,
        prelude = prelude(sandbox, &n)
    );
    let out = script(sandbox, &body, Duration::from_secs(seconds + 15)).await?;
    let Some(r) = parse_records(&out, &n).into_iter().next() else {
        return Ok(not_found(id));
    };
    let clamp_note = requested
        .filter(|&t| t > limit)
        .map(|t| format!("Requested wait of {t}s was clamped to configured limit of {limit}s"));
    let mut m = Map::new();
    if r.running {
        m.insert("status".into(), "timeout".into());
        m.insert("output".into(), last_chars(&r.log, 1000).into());
        m.insert(
            "timeout_note".into(),
            clamp_note
                .unwrap_or_else(|| format!("Process still running after {seconds}s"))
                .into(),
        );
    } else {
        m.insert("status".into(), "exited".into());
        m.insert("exit_code".into(), r.exit_code.into());
        m.insert("output".into(), last_chars(&r.log, 2000).into());
        if let Some(note) = clamp_note {
            m.insert("timeout_note".into(), note.into());
        }
    }
    Ok(Value::Object(m))
}

async fn kill(sandbox: &dyn Sandbox, id: &str) -> Result<Value, SandboxError> {
    let n = nonce();
    let body = format!(
        r#"{prelude}{TREE}
[ -f "$d/{id}.pid" ] || exit 0
if alive {id}; then
  p=$(cat "$d/{id}.pid"); kids=$(tree "$p")
  kill -KILL "$p" 2>/dev/null; kill -TERM $kids 2>/dev/null; sleep 0.2; kill -KILL $kids 2>/dev/null
  echo -15 > "$d/{id}.exit"; echo KILLED
fi
report {id} 0"#,
        prelude = prelude(sandbox, &n)
    );
    let out = script(sandbox, &body, SCRIPT_TIMEOUT).await?;
    let Some(r) = parse_records(&out, &n).into_iter().next() else {
        return Ok(not_found(id));
    };
    if out.lines().any(|l| l == "KILLED") {
        Ok(json!({"status": "killed", "session_id": id}))
    } else {
        Ok(json!({"status": "already_exited", "exit_code": r.exit_code}))
    }
}

async fn write(sandbox: &dyn Sandbox, id: &str, data: &str) -> Result<Value, SandboxError> {
    let dir = format!("{}/bg", state_dir(sandbox));
    let Some(r) = one(sandbox, id, 0).await? else {
        return Ok(not_found(id));
    };
    if !r.running {
        return Ok(
            json!({"status": "error", "error": format!("Process {id} has exited; stdin is closed")}),
        );
    }
    let staged = format!("{dir}/{id}.stdin");
    sandbox.write_file(&staged, data.as_bytes()).await?;
    let body = format!(
        "[ -p {fifo} ] || {{ echo NOSTDIN; exit 0; }}\ncat {staged} > {fifo} && echo OK; rm -f {staged}",
        fifo = quote(&format!("{dir}/{id}.in")),
        staged = quote(&staged)
    );
    let out = script(sandbox, &body, Duration::from_secs(10)).await?;
    if out.lines().any(|l| l == "OK") {
        Ok(json!({"status": "ok", "bytes_written": data.len()}))
    } else {
        Ok(json!({"status": "error", "error": format!("Process stdin not available for {id}")}))
    }
}
