//! `terminal_test mcp` driven by the official MCP Python SDK (`mcp` from PyPI, its `Client`
//! over Streamable HTTP, in the suite's venv under `target/`): the prompt in the `initialize`
//! instructions and the `task` prompt, tools/list, tools/call of real tools in the session's
//! local sandbox, `submit` → the verifier's reward, typed errors, and no sandbox left behind
//! when a session is deleted, goes silent or the server stops.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `terminal_test mcp` on a free port, its local sandboxes under `tmp`.
struct Server {
    child: Child,
    url: String,
    tmp: tempfile::TempDir,
    /// The server's stderr, in a file so a chatty server never blocks on a full pipe.
    log: tempfile::NamedTempFile,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut child = Command::new(common::example_bin("terminal_test"))
            .args(["mcp", "--port", "0"])
            // The serving flags first: the `--env.*` flags end the command line.
            .args(extra)
            .args(match extra.contains(&"--env.terminal_backend") {
                true => &[][..],
                false => &["--env.terminal_backend", "local"][..],
            })
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::piped())
            .stderr(log.reopen().expect("log file"))
            .spawn()
            .expect("spawn terminal_test mcp");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let Some(url) = line.trim().strip_prefix("mcp listening on ") else {
            let err = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("terminal_test mcp did not start: {line:?}\n{err}");
        };
        Server {
            url: url.to_owned(),
            child,
            tmp,
            log,
        }
    }

    /// The task scratch directories of the local backend's run root(s).
    fn scratch_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        for root in std::fs::read_dir(self.tmp.path()).expect("tmp").flatten() {
            if let Ok(entries) = std::fs::read_dir(root.path()) {
                dirs.extend(
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| file_name(p).starts_with("task-")),
                );
            }
        }
        dirs
    }

    /// Waits (bounded) until no scratch directory is left; the teardown runs after the
    /// session's end is noticed, so its timing is the scheduler's.
    fn assert_no_sandbox_within(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.scratch_dirs().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            self.scratch_dirs().is_empty(),
            "sandbox left behind: {:?}\n{}",
            self.scratch_dirs(),
            std::fs::read_to_string(self.log.path()).unwrap_or_default()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// Python preamble of every script: `URL`, `show` (one JSON line) and `tool` (a call's result
/// as JSON, or the protocol error it raised).
const PRELUDE: &str = r#"
import asyncio, json, sys
from mcp import Client
from mcp.shared.exceptions import MCPError
def show(**fields): print(json.dumps(fields), flush=True)
async def tool(client, name, arguments):
    try:
        r = await client.call_tool(name, arguments)
        return {"text": "".join(c.text for c in r.content if c.type == "text"),
                "is_error": r.is_error, "structured": r.structured_content}
    except MCPError as e:
        return {"protocol_error": e.error.code, "message": e.error.message, "data": e.error.data}
"#;

/// Runs `script` (after [`PRELUDE`], `URL` bound to the server's MCP URL) to its end and
/// returns its stdout's JSON lines.
fn python(url: &str, script: &str) -> Vec<Value> {
    let out = Command::new(common::mcp_python())
        .args(["-c", &format!("URL = {url:?}\n{PRELUDE}\n{script}")])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Two sessions: the greeting task with the reference solution's calls (write_file,
/// read_file, then the answer), then the count task answered without any work.
const EPISODES: &str = r#"
async def main():
    async with Client(URL) as c:
        prompt = await c.get_prompt("task")
        show(instructions=c.instructions, server=c.server_info.name,
             tools=[t.name for t in (await c.list_tools()).tools],
             prompt=[m.content.text for m in prompt.messages],
             write=await tool(c, "write_file", {"path": "~/greeting.txt", "content": "Hello from Hermes Agent"}),
             read=await tool(c, "read_file", {"path": "~/greeting.txt"}),
             unknown=await tool(c, "no_such_tool", {}),
             invalid=await tool(c, "terminal", {"command": 7}),
             submit=await tool(c, "submit", {"answer": "Done: ~/greeting.txt is written."}),
             after=await tool(c, "submit", {"answer": "again"}))
    async with Client(URL) as c:
        show(instructions=c.instructions, submit=await tool(c, "submit", {"answer": "done"}))
asyncio.run(main())
"#;

#[test]
fn the_mcp_sdk_client_drives_episodes_to_their_rewards() {
    let server = Server::start(&[]);
    let out = python(&server.url, EPISODES);
    assert_eq!(out.len(), 2, "{out:?}");
    let first = &out[0];
    assert_eq!(first["server"], "terminal-test");
    // The prompt reaches the agent as the server's instructions: system prompt, then the task.
    let instructions = first["instructions"].as_str().expect("instructions");
    assert!(
        instructions.starts_with("You are a helpful assistant"),
        "{instructions}"
    );
    assert!(
        instructions.ends_with("containing exactly the text: Hello from Hermes Agent"),
        "{instructions}"
    );
    assert_eq!(first["prompt"].as_array().unwrap().len(), 2, "{first}");
    assert!(first["prompt"][1]
        .as_str()
        .unwrap()
        .contains("~/greeting.txt"));
    for name in ["terminal", "read_file", "write_file", "submit"] {
        assert!(
            first["tools"].as_array().unwrap().iter().any(|t| t == name),
            "{name} not listed: {first}"
        );
    }
    // Arguments a tool cannot use get the tool's own answer, as in a rollout.
    assert_eq!(first["invalid"]["is_error"], false, "{first}");
    assert!(
        first["invalid"]["text"]
            .as_str()
            .unwrap()
            .contains("exit_code"),
        "{first}"
    );
    assert_eq!(first["write"]["is_error"], false, "{first}");
    assert!(
        first["read"]["text"]
            .as_str()
            .unwrap()
            .contains("Hello from Hermes Agent"),
        "{first}"
    );
    // An unknown tool is a protocol error (-32602, as the MCP spec says), typed in its data.
    assert_eq!(first["unknown"]["protocol_error"], -32602, "{first}");
    assert_eq!(first["unknown"]["data"]["error_type"], "tool_not_found");
    assert!(first["unknown"]["message"]
        .as_str()
        .unwrap()
        .contains("no_such_tool"));
    let submit = &first["submit"];
    assert_eq!(submit["is_error"], false, "{submit}");
    assert_eq!(
        (
            submit["structured"]["reward"].as_f64(),
            submit["structured"]["done"].as_bool()
        ),
        (Some(1.0), Some(true)),
        "{submit}"
    );
    assert_eq!(submit["structured"]["outcome"], "scored");
    // A call after the verdict is a tool error, never a second reward.
    assert_eq!(first["after"]["is_error"], true, "{first}");
    assert_eq!(
        first["after"]["structured"]["error_type"],
        "episode_finished"
    );
    assert!(first["after"]["structured"].get("reward").is_none());
    // The second session gets the next item, and no work earns nothing.
    let second = &out[1];
    assert!(
        second["instructions"]
            .as_str()
            .unwrap()
            .contains("~/count.txt"),
        "{second}"
    );
    assert_eq!(
        second["submit"]["structured"]["reward"].as_f64(),
        Some(0.0),
        "{second}"
    );
    server.assert_no_sandbox_within(Duration::from_secs(10));
}

/// A client that opens a session, runs one command in its sandbox, says `READY`, waits for a
/// line on stdin and then leaves: `delete` ends the session (DELETE), `vanish` exits without.
const MID_EPISODE: &str = r#"
async def main():
    c = Client(URL)
    await c.__aenter__()
    await tool(c, "terminal", {"command": "echo hi > ~/x"})
    show(ready=True)
    how = sys.stdin.readline().strip()
    if how == "delete":
        await c.__aexit__(None, None, None)
    else:
        import os
        os._exit(0)
    show(left=how)
asyncio.run(main())
"#;

/// Starts [`MID_EPISODE`] and returns it (and its stdout) once it is `READY`.
fn client_mid_episode(url: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut client = Command::new(common::mcp_python())
        .args(["-c", &format!("URL = {url:?}\n{PRELUDE}\n{MID_EPISODE}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), r#"{"ready": true}"#);
    (client, out)
}

#[test]
fn a_session_deleted_mid_episode_leaves_no_sandbox() {
    let server = Server::start(&[]);
    let (mut client, mut out) = client_mid_episode(&server.url);
    assert_eq!(
        server.scratch_dirs().len(),
        1,
        "the episode's sandbox exists while it runs"
    );
    writeln!(client.stdin.as_mut().unwrap(), "delete").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), r#"{"left": "delete"}"#);
    let done = client.wait_with_output().expect("wait");
    assert!(done.status.success());
    // The SDK counts only 200 and 204 as a terminated session (and warns otherwise).
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    server.assert_no_sandbox_within(Duration::from_secs(10));
}

#[test]
fn a_session_deleted_mid_episode_leaves_no_container() {
    common::docker::require_docker();
    let server = Server::start(&["--env.terminal_backend", "docker"]);
    let (mut client, mut out) = client_mid_episode(&server.url);
    let pid = server.child.id();
    assert_eq!(
        common::docker::sandbox_states_of(pid),
        ["running"],
        "the episode's container runs while the episode does"
    );
    writeln!(client.stdin.as_mut().unwrap(), "delete").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), r#"{"left": "delete"}"#);
    client.wait().expect("wait");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !common::docker::sandbox_states_of(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        common::docker::sandbox_states_of(pid),
        Vec::<String>::new(),
        "container left behind"
    );
}

#[test]
fn a_silent_session_is_closed_at_the_idle_timeout() {
    let server = Server::start(&["--idle-timeout", "2"]);
    let (mut client, _out) = client_mid_episode(&server.url);
    assert_eq!(server.scratch_dirs().len(), 1);
    // The client goes away without a DELETE: only its silence tells.
    writeln!(client.stdin.as_mut().unwrap(), "vanish").unwrap();
    client.wait().expect("wait");
    server.assert_no_sandbox_within(Duration::from_secs(15));
}

#[test]
fn a_full_server_refuses_with_capacity_reached() {
    let server = Server::start(&["--max-sessions", "1"]);
    let out = python(
        &server.url,
        r#"
async def main():
    async with Client(URL) as first:
        try:
            async with Client(URL) as second:
                show(second="admitted")
        except Exception as e:
            def leaves(x):
                return [l for s in x.exceptions for l in leaves(s)] if hasattr(x, "exceptions") else [x]
            show(second=" | ".join(f"{type(x).__name__}: {x}" for x in leaves(e)))
    # The slot is free again once the first session is gone.
    async with Client(URL) as third:
        show(third=(await tool(third, "submit", {"answer": "x"}))["structured"])
asyncio.run(main())
"#,
    );
    let refused = out[0]["second"].as_str().unwrap();
    assert!(refused.contains("the server is full"), "{refused}");
    assert!(refused.contains("--max-sessions 1"), "{refused}");
    assert!(out[1]["third"]["reward"].is_number(), "{}", out[1]);
}

/// A secret the sandbox holds (the author's `container_env`) never leaves in a response.
#[test]
fn secrets_stay_out_of_tool_results() {
    let secret = "s3cr3t-mcp-4b1e77";
    let entry = format!("[\"HERMES_MCP_PROBE={secret}\"]");
    let server = Server::start(&["--env.container_env", &entry]);
    let out = python(
        &server.url,
        r#"
async def main():
    async with Client(URL) as c:
        show(out=await tool(c, "terminal", {"command": "echo \"token=$HERMES_MCP_PROBE\""}))
asyncio.run(main())
"#,
    );
    let text = out[0]["out"]["text"].as_str().unwrap();
    assert!(text.contains("token="), "{text}");
    assert!(
        !text.contains(secret),
        "the secret reached the client: {text}"
    );
    assert!(text.contains("<redacted>"), "{text}");
}

/// The call that uses the last turn (`max_agent_turns`) runs the verifier: its result carries
/// the reward and `done`.
#[test]
fn the_last_turn_runs_the_verifier() {
    let server = Server::start(&["--env.max_agent_turns", "2"]);
    let out = python(
        &server.url,
        r#"
async def main():
    async with Client(URL) as c:
        show(first=await tool(c, "write_file", {"path": "~/greeting.txt", "content": "Hello from Hermes Agent"}),
             last=await tool(c, "read_file", {"path": "~/greeting.txt"}),
             after=await tool(c, "terminal", {"command": "true"}))
asyncio.run(main())
"#,
    );
    assert!(out[0]["first"]["structured"].is_null(), "{}", out[0]);
    let last = &out[0]["last"];
    assert!(last["text"]
        .as_str()
        .unwrap()
        .contains("Hello from Hermes Agent"));
    assert_eq!(
        (
            last["structured"]["reward"].as_f64(),
            last["structured"]["done"].as_bool()
        ),
        (Some(1.0), Some(true)),
        "{last}"
    );
    assert_eq!(
        out[0]["after"]["structured"]["error_type"],
        "episode_finished"
    );
    server.assert_no_sandbox_within(Duration::from_secs(10));
}

#[test]
fn sigint_ends_open_sessions_and_removes_their_sandboxes() {
    let mut server = Server::start(&[]);
    let (mut client, _out) = client_mid_episode(&server.url);
    assert_eq!(server.scratch_dirs().len(), 1);
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGINT) };
    let status = server.child.wait().expect("wait");
    let log = std::fs::read_to_string(server.log.path()).unwrap_or_default();
    assert!(status.success(), "exit {status:?}\n{log}");
    assert!(log.contains("every session ended"), "{log}");
    let left: Vec<PathBuf> = std::fs::read_dir(server.tmp.path())
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = client.kill();
    let _ = client.wait();
}

/// An environment whose verifier reads the final answer: `42` pays 1.0, `fail` makes
/// `compute_reward` fail.
mod answers {
    use hermes_env::prelude::*;

    /// The one question.
    #[derive(Debug, Clone, Serialize)]
    pub struct Question;

    /// Verified from the episode's final answer.
    #[hermes_env(name = "answers", toolsets = ["terminal"], max_agent_turns = 5, main = false)]
    pub struct Answers {}

    #[hermes_env::hooks]
    impl Answers {
        async fn get_next_item(&mut self) -> Option<Question> {
            Some(Question)
        }

        fn format_prompt(&self, _item: &Question) -> String {
            "What is 6 * 7?".into()
        }

        async fn compute_reward(
            &self,
            _item: &Question,
            run: &AgentResult,
            _ctx: &ToolContext,
        ) -> Result<f64> {
            match run.final_response() {
                Some("fail") => Err(anyhow::anyhow!("the grader is down")),
                Some(answer) => Ok(if answer.trim() == "42" { 1.0 } else { 0.0 }),
                None => Ok(0.0),
            }
        }
    }
}

/// Serves `E` over MCP in this process on a free port until dropped.
struct InProcess {
    url: String,
    stop: hermes_runtime::shutdown::Shutdown,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    fn start<E: hermes_runtime::env::Environment>() -> InProcess {
        use hermes_runtime::modes::openenv::{start, OpenEnvOptions, SessionLimits};
        let cfg = hermes_runtime::config::cli::resolve_flags(
            &E::descriptor(),
            hermes_runtime::config::Mode::Process,
            ["--env.terminal_backend", "local"],
        )
        .expect("config");
        let stop = hermes_runtime::shutdown::Shutdown::new();
        let shutdown = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (env, rt) = start::<E>(&cfg).await.expect("start");
                let options = OpenEnvOptions {
                    addr: "127.0.0.1:0".parse().unwrap(),
                    limits: SessionLimits {
                        max_sessions: 4,
                        idle_timeout: Duration::from_secs(60),
                        lifetime: Duration::from_secs(600),
                    },
                    grace: Duration::from_secs(10),
                };
                hermes_runtime::modes::mcp::serve(env, rt, options, shutdown, |addr| {
                    tx.send(addr).unwrap();
                })
                .await
                .expect("serve");
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(60)).expect("listening");
        InProcess {
            url: format!("http://{addr}/mcp"),
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.request();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn a_verifier_failure_is_a_tool_error_with_its_outcome_not_a_reward() {
    let server = InProcess::start::<answers::Answers>();
    let out = python(
        &server.url,
        r#"
async def main():
    for answer in ["42", "41", "fail"]:
        async with Client(URL) as c:
            show(answer=answer, result=await tool(c, "submit", {"answer": answer}))
asyncio.run(main())
"#,
    );
    assert_eq!(out[0]["result"]["structured"]["reward"], 1.0, "{}", out[0]);
    assert_eq!(out[1]["result"]["structured"]["reward"], 0.0, "{}", out[1]);
    let failed = &out[2]["result"];
    assert_eq!(failed["is_error"], true, "{failed}");
    assert_eq!(failed["structured"]["outcome"], "verifier", "{failed}");
    assert!(failed["structured"].get("reward").is_none(), "{failed}");
    assert!(
        failed["text"]
            .as_str()
            .unwrap()
            .contains("the grader is down"),
        "{failed}"
    );
}

/// Tampering is the model's outcome: scored `tampered_reward` with `outcome: tampered`, as in
/// the other modes. A process left running past the agent phase trips a wire.
#[test]
fn a_tampered_episode_is_scored_tampered_reward() {
    let server = Server::start(&["--env.tampered_reward", "-1"]);
    let out = python(
        &server.url,
        r#"
async def main():
    async with Client(URL) as c:
        await tool(c, "terminal", {"command":
            "printf 'Hello from Hermes Agent' > ~/greeting.txt; setsid nohup sleep 300 >/dev/null 2>&1 & echo started"})
        show(verdict=await tool(c, "submit", {"answer": "done"}))
asyncio.run(main())
"#,
    );
    let verdict = &out[0]["verdict"]["structured"];
    assert_eq!(verdict["reward"].as_f64(), Some(-1.0), "{verdict}");
    assert_eq!(verdict["outcome"], "tampered", "{verdict}");
}

/// The sandbox goes at the verdict, while the session is still open.
#[test]
fn the_sandbox_is_removed_at_submit() {
    let server = Server::start(&[]);
    let mut client = Command::new(common::mcp_python())
        .args([
            "-c",
            &format!(
                "URL = {:?}\n{PRELUDE}\n{}",
                server.url,
                r#"
async def main():
    async with Client(URL) as c:
        await tool(c, "terminal", {"command": "echo hi > ~/x"})
        show(step="worked")
        sys.stdin.readline()
        show(verdict=(await tool(c, "submit", {"answer": "done"}))["structured"])
        sys.stdin.readline()
asyncio.run(main())
"#
            ),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), r#"{"step": "worked"}"#);
    assert_eq!(server.scratch_dirs().len(), 1);
    writeln!(client.stdin.as_mut().unwrap(), "submit").unwrap();
    line.clear();
    out.read_line(&mut line).expect("read");
    let verdict: Value = serde_json::from_str(line.trim()).expect("JSON");
    assert_eq!(verdict["verdict"]["done"], true, "{verdict}");
    // The session is still open: only the verdict removed the sandbox.
    assert!(
        server.scratch_dirs().is_empty(),
        "{:?}",
        server.scratch_dirs()
    );
    writeln!(client.stdin.as_mut().unwrap(), "bye").unwrap();
    assert!(client.wait().expect("wait").success());
}

/// A session past `--session-lifetime` loses its episode and sandbox; later calls say why.
#[test]
fn a_session_ends_at_its_lifetime() {
    let server = Server::start(&["--session-lifetime", "2"]);
    let out = python(
        &server.url,
        r#"
async def main():
    async with Client(URL) as c:
        await tool(c, "terminal", {"command": "echo hi > ~/x"})
        await asyncio.sleep(3)
        show(late=await tool(c, "terminal", {"command": "true"}))
asyncio.run(main())
"#,
    );
    let late = &out[0]["late"];
    assert_eq!(late["is_error"], true, "{late}");
    assert_eq!(late["structured"]["error_type"], "session_ended", "{late}");
    assert!(
        late["text"]
            .as_str()
            .unwrap()
            .contains("--session-lifetime"),
        "{late}"
    );
    assert!(
        server.scratch_dirs().is_empty(),
        "{:?}",
        server.scratch_dirs()
    );
}

/// The sandbox failing under the verifier is a tool error with outcome `sandbox`, no reward.
#[test]
fn a_sandbox_failure_while_verifying_is_an_error_not_a_reward() {
    // Unconfined, the model can remove its own scratch directory (confined it cannot: the
    // directory itself is its parent's), which fails the verification's sandbox.
    let server = Server::start(&["--env.local_confinement", "false"]);
    let out = python(
        &server.url,
        r#"
async def main():
    async with Client(URL) as c:
        await tool(c, "terminal", {"command": "cd /; rm -rf \"$HOME\"; echo gone"})
        show(verdict=await tool(c, "submit", {"answer": "done"}))
asyncio.run(main())
"#,
    );
    let verdict = &out[0]["verdict"];
    assert_eq!(verdict["is_error"], true, "{verdict}");
    assert!(verdict["structured"].get("reward").is_none(), "{verdict}");
    assert_eq!(verdict["structured"]["done"], true, "{verdict}");
    assert_eq!(verdict["structured"]["outcome"], "sandbox", "{verdict}");
    assert!(
        verdict["text"]
            .as_str()
            .unwrap()
            .contains("sandbox failure"),
        "{verdict}"
    );
}
