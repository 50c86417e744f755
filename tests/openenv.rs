//! `terminal_test openenv` against the OpenEnv wire's own package (`openenv-core` 0.3.0 from
//! PyPI, in the suite's venv under `target/`): its conformance check
//! (`validate_running_environment`, what `openenv validate --url` runs) and its own clients
//! (`MCPToolClient`, `GenericEnvClient` over `/ws`) driving whole episodes with the local
//! sandbox backend (and Docker for the disconnect check).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `terminal_test openenv` on a free port, its local sandboxes under `tmp`.
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
            .args(["openenv", "--port", "0"])
            .args(extra)
            .args(match extra.contains(&"--env.terminal_backend") {
                true => &[][..],
                false => &["--env.terminal_backend", "local"][..],
            })
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::piped())
            .stderr(log.reopen().expect("log file"))
            .spawn()
            .expect("spawn terminal_test openenv");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let Some(url) = line.trim().strip_prefix("openenv listening on ") else {
            let err = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("terminal_test openenv did not start: {line:?}\n{err}");
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

    /// SIGINT, then the exit status and stderr.
    fn interrupt(&mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().expect("wait");
        (
            status,
            std::fs::read_to_string(self.log.path()).unwrap_or_default(),
        )
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

/// Runs `script` (Python, `URL` bound to the server's URL) and returns its stdout's JSON lines.
fn python(url: &str, script: &str) -> Vec<Value> {
    let out = Command::new(common::openenv_python())
        .args(["-c", &format!("URL = {url:?}\n{script}")])
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

#[test]
fn openenv_validate_passes_every_criterion() {
    let server = Server::start(&[]);
    let report = &python(
        &server.url,
        "import json\n\
         from openenv.cli._validation import validate_running_environment\n\
         print(json.dumps(validate_running_environment(URL)))",
    )[0];
    let failed: Vec<&Value> = report["criteria"]
        .as_array()
        .expect("criteria")
        .iter()
        .filter(|c| c["passed"] != true)
        .collect();
    assert!(failed.is_empty(), "failed criteria: {failed:#?}");
    assert_eq!(report["passed"], true);
    assert_eq!(report["mode"], "simulation");
    // Every criterion `openenv validate --url` knows, none skipped.
    let ids: Vec<&str> = report["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "openapi_version_available",
            "health_endpoint",
            "metadata_endpoint",
            "schema_endpoint",
            "mcp_endpoint",
            "mode_endpoint_consistency"
        ]
    );
}

/// The episode script: MCPToolClient over /ws, the reference solution's tool call (or a wrong
/// one), an unknown tool, then the final answer.
const EPISODE: &str = r#"
import asyncio, json
from openenv.core.mcp_client import MCPToolClient
from openenv.core.env_server.mcp_types import CallToolAction

async def episode(content):
    async with MCPToolClient(base_url=URL) as env:
        reset = await env.reset()
        tools = [t.name for t in await env.list_tools(use_cache=False)]
        out = await env.call_tool("terminal", command=f"printf '{content}' > ~/greeting.txt && echo written")
        unknown = await env.step(CallToolAction(tool_name="no_such_tool", arguments={}))
        final = await env.step(CallToolAction(tool_name="submit", arguments={"answer": "done"}))
        state = await env.state()
        print(json.dumps({
            "reset_tools": [t.name for t in reset.observation.tools],
            "tools": tools,
            "terminal": out,
            "unknown_error": unknown.observation.error.error_type.value,
            "unknown_done": unknown.done,
            "reward": final.reward,
            "done": final.done,
            "steps": state.step_count,
        }))

async def main():
    # terminal_test's items come in order: the first is the greeting task.
    await episode("Hello from Hermes Agent")
    for _ in range(2):  # the two other tasks, answered with the greeting: wrong
        await episode("Hello from Hermes Agent")
    await episode("Goodbye")  # the greeting task again, wrong content
asyncio.run(main())
"#;

#[test]
fn openenv_cores_client_drives_episodes_to_their_rewards() {
    let server = Server::start(&[]);
    let episodes = python(&server.url, EPISODE);
    assert_eq!(episodes.len(), 4);
    let first = &episodes[0];
    for name in ["terminal", "read_file", "write_file", "submit"] {
        assert!(
            first["tools"].as_array().unwrap().iter().any(|t| t == name),
            "{name} not listed: {first}"
        );
    }
    assert_eq!(first["tools"], first["reset_tools"]);
    assert!(
        first["terminal"].as_str().unwrap().contains("written"),
        "{first}"
    );
    assert_eq!(first["unknown_error"], "tool_not_found");
    assert_eq!(first["unknown_done"], false);
    assert_eq!(
        (first["reward"].as_f64(), first["done"].as_bool()),
        (Some(1.0), Some(true))
    );
    // terminal, the unknown tool and the answer: three turns.
    assert_eq!(first["steps"], 3);
    for wrong in &episodes[1..] {
        assert_eq!(
            (wrong["reward"].as_f64(), wrong["done"].as_bool()),
            (Some(0.0), Some(true)),
            "{wrong}"
        );
    }
    assert!(
        server.scratch_dirs().is_empty(),
        "{:?}",
        server.scratch_dirs()
    );
}

#[test]
fn a_full_server_refuses_with_capacity_reached() {
    let server = Server::start(&["--max-sessions", "1"]);
    let out = python(
        &server.url,
        r#"
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
async def main():
    async with GenericEnvClient(base_url=URL) as first:
        await first.reset()
        try:
            async with GenericEnvClient(base_url=URL) as second:
                await second.reset()
                print(json.dumps({"second": "admitted"}))
        except RuntimeError as e:
            print(json.dumps({"second": str(e)}))
    # The slot is free again once the first session is closed.
    async with GenericEnvClient(base_url=URL) as third:
        r = await third.reset()
        print(json.dumps({"third": r.observation["messages"][-1]["role"]}))
asyncio.run(main())
"#,
    );
    let refused = out[0]["second"].as_str().unwrap();
    assert!(refused.contains("CAPACITY_REACHED"), "{refused}");
    assert!(refused.contains("--max-sessions 1"), "{refused}");
    assert_eq!(out[1]["third"], "user");
}

/// `--max-sessions` beyond what the process's open-file limit can hold is said at start, with
/// the knobs, before any session fails for it.
#[test]
fn more_sessions_than_open_files_allow_is_said_at_start() {
    use std::os::unix::process::CommandExt;
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut command = Command::new(common::example_bin("terminal_test"));
    command
        .args(["openenv", "--port", "0", "--max-sessions", "200"])
        .args(["--env.terminal_backend", "local"])
        .stdout(Stdio::piped())
        .stderr(log.reopen().expect("log file"));
    // SAFETY: setrlimit(2) only, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 512,
                rlim_max: 512,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let mut child = command.spawn().expect("spawn terminal_test openenv");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    let _ = child.kill();
    let _ = child.wait();
    let stderr = std::fs::read_to_string(log.path()).unwrap_or_default();
    assert!(
        line.starts_with("openenv listening on "),
        "{line:?}\n{stderr}"
    );
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("--max-sessions 200"))
        .collect();
    assert_eq!(warned.len(), 1, "one line:\n{stderr}");
    for said in [
        "limit of 512",
        "Too many open files",
        "ulimit -Hn",
        "lower --max-sessions",
    ] {
        assert!(warned[0].contains(said), "{said:?} in {}", warned[0]);
    }
}

/// A client that opens an episode, runs one command in its sandbox, says `READY` and waits.
const MID_EPISODE: &str = r#"
import asyncio, sys
from openenv.core.generic_client import GenericEnvClient
async def main():
    env = GenericEnvClient(base_url=URL)
    await env.connect()
    await env.reset()
    await env.step({"type": "call_tool", "tool_name": "terminal", "arguments": {"command": "echo hi > ~/x"}})
    print("READY", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"#;

/// Starts [`MID_EPISODE`] against `url` and returns it once it is `READY`.
fn client_mid_episode(url: &str) -> Child {
    let mut client = Command::new(common::openenv_python())
        .args(["-c", &format!("URL = {url:?}\n{MID_EPISODE}")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "READY");
    client
}

#[test]
fn killing_the_client_mid_episode_leaves_no_container() {
    common::docker::require_docker();
    let server = Server::start(&["--env.terminal_backend", "docker"]);
    let mut client = client_mid_episode(&server.url);
    let pid = server.child.id();
    assert_eq!(
        common::docker::sandbox_states_of(pid),
        ["running"],
        "the episode's container runs while the episode does"
    );
    client.kill().expect("kill the client");
    client.wait().expect("wait");
    // The server notices the closed socket and removes the container; wait for it (bounded).
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
fn killing_the_client_mid_episode_leaves_no_sandbox() {
    let server = Server::start(&[]);
    let mut client = client_mid_episode(&server.url);
    assert_eq!(
        server.scratch_dirs().len(),
        1,
        "the episode's sandbox exists while it runs"
    );
    client.kill().expect("kill the client");
    client.wait().expect("wait");
    // The server notices the closed socket and tears the sandbox down; how soon depends on
    // the scheduler, so wait for it (bounded) rather than for a fixed time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.scratch_dirs().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        server.scratch_dirs().is_empty(),
        "sandbox left behind: {:?}",
        server.scratch_dirs()
    );
}

/// A client that opens an episode, runs one command in its sandbox, says `READY`, then sends
/// steps without ever reading their replies until the server stops taking them (plain
/// sockets: a WebSocket library would read in the background).
const NEVER_READS: &str = r#"
import base64, json, os, socket, struct, sys, time
host, port = URL.removeprefix("http://").split(":")
s = socket.create_connection((host, int(port)))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall(f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += s.recv(1)
assert b" 101 " in head.split(b"\r\n")[0], head
def exactly(n):
    data = b""
    while len(data) < n:
        data += s.recv(n - len(data))
    return data
def send(message):
    data = json.dumps(message).encode()
    mask = os.urandom(4)
    n = len(data)
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
    return bytes([0x81]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))
def reply():
    first, second = exactly(2)
    n = second & 0x7F
    if n == 126:
        n = struct.unpack(">H", exactly(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", exactly(8))[0]
    return json.loads(exactly(n))
s.sendall(send({"type": "reset", "data": {}}))
assert reply()["type"] == "observation"
s.sendall(send({"type": "step", "data": {"type": "call_tool", "tool_name": "terminal", "arguments": {"command": "echo hi > ~/x"}}}))
assert reply()["type"] == "observation"
print("READY", flush=True)
s.setblocking(False)
step = send({"type": "step", "data": {"type": "list_tools"}})
stuck_since = None
while stuck_since is None or time.time() - stuck_since < 1:
    try:
        s.send(step)
        stuck_since = None
    except BlockingIOError:
        stuck_since = stuck_since or time.time()
        time.sleep(0.01)
print("STUCK", flush=True)
time.sleep(3600)
"#;

/// A client that stops reading its replies is closed at `--idle-timeout`, however long its
/// lifetime, and its sandbox removed: the server does not wait on it forever.
#[test]
fn a_client_that_stops_reading_is_closed_and_its_sandbox_removed() {
    let server = Server::start(&["--idle-timeout", "2", "--session-lifetime", "3600"]);
    let mut client = KilledOnDrop(
        Command::new(common::openenv_python())
            .args(["-c", &format!("URL = {:?}\n{NEVER_READS}", server.url)])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python"),
    );
    let mut lines = BufReader::new(client.0.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    assert_eq!(
        server.scratch_dirs().len(),
        1,
        "the episode's sandbox exists while it runs"
    );
    assert_eq!(lines.next().unwrap().unwrap(), "STUCK");
    // The client is alive and connected; only the server's timeout can end the session.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.scratch_dirs().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(server.log.path()).unwrap_or_default();
    assert!(
        server.scratch_dirs().is_empty(),
        "sandbox held by a client that does not read: {:?}\n{log}",
        server.scratch_dirs()
    );
    assert!(
        client.0.try_wait().expect("try_wait").is_none(),
        "the client must still be running"
    );
    assert!(
        log.contains("openenv: a client read no reply for")
            && log.contains("its sandbox removed (--idle-timeout 2, --session-lifetime 3600)"),
        "{log}"
    );
}

/// A child process killed when the test ends, passed or not.
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_sandbox_failure_while_verifying_is_an_error_not_a_reward() {
    // Unconfined, the model can remove its own scratch directory (confined it cannot: the
    // directory itself is its parent's), which fails the verification's sandbox.
    let server = Server::start(&["--env.local_confinement", "false"]);
    let out = python(
        &server.url,
        r#"
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
async def main():
    async with GenericEnvClient(base_url=URL) as env:
        await env.reset()
        await env.step({"type": "call_tool", "tool_name": "terminal",
                        "arguments": {"command": "cd /; rm -rf \"$HOME\"; echo gone"}})
        try:
            r = await env.step({"type": "submit", "answer": "done"})
            print(json.dumps({"reward": r.reward}))
        except RuntimeError as e:
            print(json.dumps({"error": str(e)}))
asyncio.run(main())
"#,
    );
    let error = out[0]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("a failed verification gave a reward: {}", out[0]));
    assert!(error.contains("EXECUTION_ERROR"), "{error}");
    assert!(error.contains("sandbox failure"), "{error}");
}

#[test]
fn a_stop_request_ends_open_sessions_and_removes_their_sandboxes() {
    let mut server = Server::start(&[]);
    let mut client = Command::new(common::openenv_python())
        .args([
            "-c",
            &format!(
                "URL = {:?}\n{}",
                server.url,
                r#"
import asyncio, json, sys
from websockets.asyncio.client import connect
async def main():
    ws = await connect(URL.replace("http", "ws") + "/ws")
    await ws.send(json.dumps({"type": "reset", "data": {}}))
    await ws.recv()
    await ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "terminal", "arguments": {"command": "echo hi > ~/x"}}}))
    await ws.recv()
    print("READY", flush=True)
    print(await ws.recv(), flush=True)
asyncio.run(main())
"#
            ),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "READY");
    assert_eq!(server.scratch_dirs().len(), 1);
    let (status, stderr) = server.interrupt();
    assert!(status.success(), "exit {status:?}\n{stderr}");
    line.clear();
    out.read_line(&mut line).expect("read the goodbye");
    let goodbye: Value = serde_json::from_str(line.trim()).expect("JSON");
    assert_eq!(goodbye["data"]["code"], "SESSION_ERROR", "{goodbye}");
    assert!(
        goodbye["data"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{goodbye}"
    );
    client.wait().expect("wait");
    let left: Vec<PathBuf> = std::fs::read_dir(server.tmp.path())
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The wire's details as the guide's tables give them, over a raw WebSocket and HTTP.
#[test]
fn the_wire_answers_as_the_guide_says() {
    let server = Server::start(&["--idle-timeout", "2"]);
    let out = python(
        &server.url,
        r#"
import asyncio, json, requests
from websockets.asyncio.client import connect
def show(name, value): print(json.dumps({"name": name, "value": value}), flush=True)
async def ask(ws, message):
    await ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(await ws.recv())
async def main():
    show("http_reset", requests.post(URL + "/reset", json={}).json())
    r = requests.post(URL + "/step", json={"action": {"type": "list_tools"}})
    show("http_step", [r.status_code, r.json()])
    show("http_mcp", requests.post(URL + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).json())
    show("http_mcp_empty", requests.post(URL + "/mcp", json={}).json())
    show("http_mcp_call", requests.post(URL + "/mcp", json={"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "terminal", "arguments": {"command": "true"}}}).json())
    ws = await connect(URL.replace("http", "ws") + "/ws")
    show("not_json", await ask(ws, "{nope"))
    show("unknown_type", await ask(ws, {"type": "dance"}))
    show("step_first", await ask(ws, {"type": "step", "data": {"type": "list_tools"}}))
    show("eval_reset", await ask(ws, {"type": "reset", "data": {"eval_index": 0, "seed": 7}}))
    show("bad_eval", await ask(ws, {"type": "reset", "data": {"eval_index": 99}}))
    await ask(ws, {"type": "reset", "data": {"eval_index": 0}})
    show("invalid_args", await ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "terminal", "arguments": [1]}}))
    show("unknown_action", await ask(ws, {"type": "step", "data": {"type": "fly"}}))
    show("mcp_list", await ask(ws, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}}))
    show("mcp_call", await ask(ws, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "terminal", "arguments": {"command": "echo 42 > ~/result.txt"}}}}))
    show("mcp_submit", await ask(ws, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "submit", "arguments": {"answer": "42"}}}}))
    show("after_verdict", await ask(ws, {"type": "step", "data": {"type": "submit", "answer": "again"}}))
    show("state", await ask(ws, {"type": "state"}))
    await ask(ws, {"type": "reset", "data": {}})
    await ask(ws, {"type": "step", "data": {"type": "call_tool", "tool_name": "terminal", "arguments": {"command": "echo hi > ~/x"}}})
    # Silence past --idle-timeout: the server removes the sandbox, says why and closes.
    show("idle", json.loads(await ws.recv()))
asyncio.run(main())
"#,
    );
    let get = |name: &str| -> &Value {
        &out.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))["value"]
    };
    let reset = get("http_reset");
    assert_eq!(reset["done"], false);
    assert_eq!(reset["observation"]["messages"][1]["role"], "user");
    assert!(reset["observation"]["tools"].as_array().unwrap().len() > 1);
    assert_eq!(get("http_step")[0], 409);
    assert!(get("http_step")[1]["detail"]
        .as_str()
        .unwrap()
        .contains("/ws"));
    let listed = get("http_mcp")["result"]["tools"].as_array().unwrap();
    assert!(listed
        .iter()
        .any(|t| t["name"] == "submit" && t["inputSchema"].is_object()));
    assert_eq!(get("http_mcp_empty")["jsonrpc"], "2.0");
    assert!(get("http_mcp_empty")["error"]["code"].is_i64());
    let call = &get("http_mcp_call")["error"]["message"];
    assert!(call.as_str().unwrap().contains("/ws"), "{call}");
    let code = |name: &str| {
        get(name)["data"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(code("not_json"), "INVALID_JSON");
    assert_eq!(code("unknown_type"), "UNKNOWN_TYPE");
    assert_eq!(code("step_first"), "VALIDATION_ERROR");
    // eval_index 0 is terminal_test's eval item; a seed does not change it.
    let eval = &get("eval_reset")["data"]["observation"];
    assert!(
        eval["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("6 * 7"),
        "{eval}"
    );
    assert_eq!(code("bad_eval"), "VALIDATION_ERROR");
    assert!(get("bad_eval")["data"]["message"]
        .as_str()
        .unwrap()
        .contains("eval_index 99"));
    assert_eq!(
        get("invalid_args")["data"]["observation"]["error"]["error_type"],
        "invalid_args"
    );
    assert_eq!(code("unknown_action"), "VALIDATION_ERROR");
    let mcp_tools = get("mcp_list")["data"]["result"]["tools"]
        .as_array()
        .unwrap();
    assert!(mcp_tools.iter().any(|t| t["name"] == "terminal"));
    assert_eq!(get("mcp_call")["data"]["result"]["isError"], false);
    let verdict = &get("mcp_submit")["data"]["result"]["structuredContent"];
    assert_eq!(
        (verdict["reward"].as_f64(), verdict["done"].as_bool()),
        (Some(1.0), Some(true)),
        "{verdict}"
    );
    assert_eq!(verdict["outcome"], "scored");
    assert_eq!(code("after_verdict"), "VALIDATION_ERROR");
    let state = &get("state")["data"];
    assert_eq!(
        (state["done"].as_bool(), state["step_count"].as_u64()),
        (Some(true), Some(3)),
        "{state}"
    );
    assert_eq!(code("idle"), "SESSION_ERROR");
    assert!(get("idle")["data"]["message"]
        .as_str()
        .unwrap()
        .contains("--idle-timeout"));
    assert!(
        server.scratch_dirs().is_empty(),
        "{:?}",
        server.scratch_dirs()
    );
}

/// A session past `--session-lifetime` is ended however busy it keeps the server.
#[test]
fn a_session_ends_at_its_lifetime() {
    let server = Server::start(&["--session-lifetime", "2"]);
    let out = python(
        &server.url,
        r#"
import asyncio, json
from websockets.asyncio.client import connect
async def main():
    ws = await connect(URL.replace("http", "ws") + "/ws")
    await ws.send(json.dumps({"type": "reset", "data": {}}))
    await ws.recv()
    await ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "terminal", "arguments": {"command": "echo hi > ~/x"}}}))
    await ws.recv()
    async def keep_busy():
        try:
            while True:
                await ws.send(json.dumps({"type": "state"}))
                await asyncio.sleep(0.2)
        except Exception:
            pass
    busy = asyncio.create_task(keep_busy())
    while True:
        reply = json.loads(await ws.recv())
        if reply["type"] == "error":
            print(json.dumps(reply))
            break
    busy.cancel()
asyncio.run(main())
"#,
    );
    assert_eq!(out[0]["data"]["code"], "SESSION_ERROR");
    assert!(
        out[0]["data"]["message"]
            .as_str()
            .unwrap()
            .contains("--session-lifetime"),
        "{}",
        out[0]
    );
    assert!(
        server.scratch_dirs().is_empty(),
        "{:?}",
        server.scratch_dirs()
    );
}

/// Tampering is the model's outcome: scored `tampered_reward` and marked, as in the other
/// modes. A process left running past the agent phase trips a wire.
#[test]
fn a_tampered_episode_is_scored_tampered_reward_and_marked() {
    let server = Server::start(&["--env.tampered_reward", "-1"]);
    let out = python(
        &server.url,
        r#"
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
async def main():
    async with GenericEnvClient(base_url=URL) as env:
        await env.reset()
        await env.step({"type": "call_tool", "tool_name": "terminal", "arguments": {"command":
            "printf 'Hello from Hermes Agent' > ~/greeting.txt; setsid nohup sleep 300 >/dev/null 2>&1 & echo started"}})
        r = await env.step({"type": "submit", "answer": "done"})
        print(json.dumps({"reward": r.reward, "done": r.done, "observation": r.observation}))
asyncio.run(main())
"#,
    );
    let verdict = &out[0];
    assert_eq!(
        (verdict["reward"].as_f64(), verdict["done"].as_bool()),
        (Some(-1.0), Some(true)),
        "{verdict}"
    );
    let metadata = &verdict["observation"]["metadata"];
    assert_eq!(metadata["outcome"], "tampered");
    assert_eq!(metadata["tampered"], true);
    assert!(
        metadata["tripwires"]
            .as_str()
            .unwrap()
            .contains("outlived the agent phase"),
        "{metadata}"
    );
}

/// A secret the sandbox holds (the author's `container_env`) never leaves in a response.
#[test]
fn secrets_stay_out_of_responses() {
    let secret = "s3cr3t-openenv-7f2c9a";
    let entry = format!("[\"HERMES_OPENENV_PROBE={secret}\"]");
    let server = Server::start(&["--env.container_env", &entry]);
    let out = python(
        &server.url,
        r#"
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
async def main():
    async with GenericEnvClient(base_url=URL) as env:
        await env.reset()
        r = await env.step({"type": "call_tool", "tool_name": "terminal",
                            "arguments": {"command": "echo \"token=$HERMES_OPENENV_PROBE\""}})
        print(json.dumps(r.observation))
asyncio.run(main())
"#,
    );
    let result = out[0]["result"].as_str().unwrap();
    assert!(result.contains("token="), "{result}");
    assert!(
        !result.contains(secret),
        "the secret reached the client: {result}"
    );
    assert!(result.contains("<redacted>"), "{result}");
}

/// An environment whose verifier reads the final answer from the transcript: `42` pays 1.0,
/// `fail` makes `compute_reward` fail, `panic` makes it panic.
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
                Some("panic") => panic!("the grader exploded"),
                Some(answer) => Ok(if answer.trim() == "42" { 1.0 } else { 0.0 }),
                None => Ok(0.0),
            }
        }
    }
}

/// Serves `E` in this process on a free port until the returned handle is dropped.
struct InProcess {
    url: String,
    stop: hermes_runtime::shutdown::Shutdown,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    fn start<E: hermes_runtime::env::Environment>() -> InProcess {
        use hermes_runtime::modes::openenv::{serve, start, OpenEnvOptions, SessionLimits};
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
                serve(env, rt, options, shutdown, |addr| {
                    tx.send(addr).unwrap();
                })
                .await
                .expect("serve");
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(60)).expect("listening");
        InProcess {
            url: format!("http://{addr}"),
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
fn a_verifier_failure_is_an_error_and_the_answer_reaches_the_verifier() {
    let server = InProcess::start::<answers::Answers>();
    let out = python(
        &server.url,
        r#"
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
async def answer(text):
    async with GenericEnvClient(base_url=URL) as env:
        await env.reset()
        try:
            r = await env.step({"type": "submit", "answer": text})
            return {"reward": r.reward, "done": r.done}
        except RuntimeError as e:
            return {"error": str(e)}
async def main():
    for text in ["42", "41", "fail", "panic"]:
        print(json.dumps(await answer(text)))
asyncio.run(main())
"#,
    );
    assert_eq!(out[0]["reward"], 1.0, "{}", out[0]);
    assert_eq!(out[1]["reward"], 0.0, "{}", out[1]);
    for (failed, why) in [
        (&out[2], "the grader is down"),
        (&out[3], "the grader exploded"),
    ] {
        let error = failed["error"]
            .as_str()
            .unwrap_or_else(|| panic!("a verifier failure gave a reward: {failed}"));
        assert!(error.contains("verifier failure"), "{error}");
        assert!(error.contains(why), "{error}");
        assert!(error.contains("EXECUTION_ERROR"), "{error}");
    }
}

/// The turn limit is a forced stop: the call that uses the last turn (`--env.max_agent_turns`)
/// runs the verifier, and its observation carries the reward and `done`; a later step is
/// refused.
#[test]
fn the_call_that_uses_the_last_turn_is_verified() {
    let server = Server::start(&["--env.max_agent_turns", "2"]);
    let out = python(
        &server.url,
        r#"
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
async def main():
    async with GenericEnvClient(base_url=URL) as env:
        await env.reset()
        first = await env.step({"type": "call_tool", "tool_name": "write_file",
                                "arguments": {"path": "~/greeting.txt", "content": "Hello from Hermes Agent"}})
        last = await env.step({"type": "call_tool", "tool_name": "read_file",
                               "arguments": {"path": "~/greeting.txt"}})
        try:
            await env.step({"type": "call_tool", "tool_name": "terminal", "arguments": {"command": "true"}})
            after = "accepted"
        except RuntimeError as e:
            after = str(e)
        state = await env.state()
        print(json.dumps({"first": [first.reward, first.done], "last": [last.reward, last.done],
                          "outcome": last.observation["metadata"]["outcome"],
                          "result": last.observation["result"], "after": after,
                          "steps": state["step_count"]}))
asyncio.run(main())
"#,
    );
    let v = &out[0];
    assert_eq!(v["first"], serde_json::json!([null, false]), "{v}");
    assert_eq!(v["last"], serde_json::json!([1.0, true]), "{v}");
    assert_eq!(v["outcome"], "scored");
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .contains("Hello from Hermes Agent"),
        "{v}"
    );
    assert!(
        v["after"].as_str().unwrap().contains("VALIDATION_ERROR"),
        "{v}"
    );
    assert_eq!(v["steps"], 2);
    assert!(
        server.scratch_dirs().is_empty(),
        "{:?}",
        server.scratch_dirs()
    );
}

/// `eval_index` in the reset options picks the item, on HTTP `/reset` and on `/ws`; a `seed`
/// alone does not (items come from `get_next_item`), and the log says so once.
#[test]
fn eval_index_picks_the_item_and_a_seed_is_said_not_to() {
    let server = Server::start(&[]);
    let out = python(
        &server.url,
        r#"
import asyncio, json, requests
from openenv.core.generic_client import GenericEnvClient
def task(obs): return obs["messages"][-1]["content"]
async def main():
    http = requests.post(URL + "/reset", json={"eval_index": 0}).json()
    async with GenericEnvClient(base_url=URL) as env:
        ws = await env.reset(eval_index=0)
        seeded = [task((await env.reset(seed=7)).observation) for _ in range(2)]
    print(json.dumps({"http": task(http["observation"]), "ws": task(ws.observation), "seeded": seeded}))
asyncio.run(main())
"#,
    );
    let v = &out[0];
    for way in ["http", "ws"] {
        assert!(v[way].as_str().unwrap().contains("6 * 7"), "{v}");
    }
    // The same seed twice: the next training items, one after the other.
    assert_ne!(v["seeded"][0], v["seeded"][1], "{v}");
    assert!(!v["seeded"][0].as_str().unwrap().contains("6 * 7"), "{v}");
    let log = std::fs::read_to_string(server.log.path()).unwrap_or_default();
    assert_eq!(
        log.matches("`seed` does not choose an item").count(),
        1,
        "{log}"
    );
}
