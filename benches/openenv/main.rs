//! Concurrent OpenEnv sessions: N WebSocket sessions at once against an environment served by
//! `openenv` (this binary re-executed as the server: the generated `main`, one thread, local
//! sandboxes), and the same load, in the same run, against `openenv-core`'s own Python server
//! (its `create_app` under uvicorn) hosting a minimal echo environment (`echo_env.py`).
//!
//! Each session: connect to `/ws`, `reset`, K `call_tool` steps of an `echo` tool (in-process
//! on both sides: what is measured is the server's own cost per step), then the final answer,
//! whose verification touches the session's sandbox (a file written and read back in its
//! scratch directory), then `close`. Between messages a session thinks as a model would: a
//! uniform 0.5–1.5 s (`--think-ms` is the mean), and sessions open spread over the first
//! think, so each level holds all its sessions open at once.
//!
//! Per server and level: sessions that ended with reward 1.0 (success), p50 / p99 latency of
//! the echo steps and of the final answer (client-side, send to reply), the server's CPU per
//! message and cores used (its user + system time over the wall), its peak resident memory
//! (`VmHWM`) and growth per session, and sessions per core (sessions / cores used). At the end,
//! each server's capacity: its most sessions per core at a level it kept up with (see
//! `Capacity`), and the ratio of the Rust server's to openenv-core's.
//!
//! Each level runs the Rust server twice: `rust` as above, `rust-echo` with a verifier that
//! does no sandbox work (the Python environment's work, so no sandbox is made).
//!
//! Run: `cargo bench --bench openenv` (`-- --levels 256,1024,4096,8192 --steps 8 --think-ms 1000
//! --capacity-p99-ms 100`,
//! `-- --only rust` (both Rust rows), `rust-echo` or `python`). The first run makes `target/openenv-venv` (openenv-core
//! 0.3.0 from PyPI: the test suite's venv, from `tests/common`). `-- --uvloop` runs openenv-core's server with
//! uvloop and httptools installed (`target/openenv-venv-uvloop`), uvicorn's fast paths.

#[path = "../../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use hermes_env::prelude::*;
use hermes_env::schemars::JsonSchema;
use hermes_env::tools::{typed_tool, ToolRegistry};
use serde_json::Value;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as Ws;

/// The environment variable that makes this binary the `openenv` server.
const ROLE: &str = "HERMES_OPENENV_BENCH_SERVER";

/// Arguments of `echo`.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "hermes_env::schemars")]
struct EchoArgs {
    /// Text to send back.
    message: String,
}

/// An environment whose one tool echoes its argument (in-process, no sandbox); the final
/// answer "done" is paid 1.0 after the verifier wrote and read back a file in the session's
/// sandbox.
#[hermes_env(name = "echo-bench", toolsets = ["echo"], max_agent_turns = 1000, main = false)]
struct EchoBench {
    /// Whether the verifier writes and reads back a file in the session's sandbox (false: the
    /// Python echo environment's work alone, no sandbox is made).
    #[config(default = true)]
    sandbox_verdict: bool,
    next: usize,
}

#[hermes_env::hooks]
impl EchoBench {
    async fn get_next_item(&mut self) -> Option<usize> {
        self.next += 1;
        Some(self.next)
    }

    fn format_prompt(&self, item: &usize) -> String {
        format!("Echo a few messages, then answer `done` (task {item}).")
    }

    async fn compute_reward(
        &self,
        item: &usize,
        run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let read = match self.sandbox_verdict {
            true => {
                ctx.write_file("verdict.txt", item.to_string()).await?;
                ctx.read_file("verdict.txt").await?
            }
            false => item.to_string(),
        };
        Ok(
            if read == item.to_string() && run.final_response() == Some("done") {
                1.0
            } else {
                0.0
            },
        )
    }

    fn register_tools(&self, registry: &mut ToolRegistry) {
        registry.register(typed_tool(
            "echo",
            "Send the message back.",
            "echo",
            |args: EchoArgs| async move { Ok::<_, anyhow::Error>(args.message) },
        ));
    }
}

/// The value after flag `name`.
fn arg_value(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() -> ExitCode {
    if std::env::var_os(ROLE).is_some() {
        return hermes_env::__private::main::<EchoBench>();
    }
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What a load against one server gave.
struct Load {
    sessions: usize,
    ok: usize,
    first_failure: Option<String>,
    steps: Vec<Duration>,
    finals: Vec<Duration>,
    wall: Duration,
}

/// A server under test: its process and WebSocket URL.
struct Server {
    child: Child,
    ws: String,
    _tmp: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rust_server(max_sessions: usize, sandbox: bool) -> anyhow::Result<Server> {
    let tmp = tempfile::tempdir()?;
    let log = std::fs::File::create(tmp.path().join("server.log"))?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE, "1")
        .env("TMPDIR", tmp.path())
        .args(["openenv", "--port", "0", "--max-sessions"])
        .arg(max_sessions.to_string())
        .args(["--env.terminal_backend", "local", "--env.sandbox_verdict"])
        .arg(sandbox.to_string())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
    let Some(url) = line.trim().strip_prefix("openenv listening on http://") else {
        let log = std::fs::read_to_string(tmp.path().join("server.log")).unwrap_or_default();
        anyhow::bail!("the openenv server did not start: {line:?}\n{log}");
    };
    Ok(Server {
        ws: format!("ws://{url}/ws"),
        child,
        _tmp: tmp,
    })
}

fn python_server(max_sessions: usize, uvloop: bool) -> anyhow::Result<Server> {
    // The test suite's venvs, made on first use.
    let python = match uvloop {
        false => common::openenv_python(),
        true => common::openenv_uvloop_python(),
    };
    let tmp = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/openenv/echo_env.py");
    let log = std::fs::File::create(tmp.path().join("server.log"))?;
    let child = Command::new(python)
        .arg(script)
        .args([port.to_string(), max_sessions.to_string()])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let server = Server {
        ws: format!("ws://127.0.0.1:{port}/ws"),
        child,
        _tmp: tmp,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Python server did not listen within 60 s: {}",
            std::fs::read_to_string(server._tmp.path().join("server.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(server)
}

/// A small deterministic generator (xorshift), one per session.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What one session measured; `Err` says why it did not end at reward 1.0.
struct Session {
    steps: Vec<Duration>,
    fin: Option<Duration>,
    result: Result<(), String>,
}

const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

async fn session(ws: String, index: usize, steps: usize, think: Duration) -> Session {
    let mut rng =
        Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut out = Session {
        steps: Vec::with_capacity(steps),
        fin: None,
        result: Ok(()),
    };
    let think_once = |rng: &mut Rng| think.mul_f64(0.5 + rng.unit());
    tokio::time::sleep(think.mul_f64(rng.unit())).await;
    let run = async {
        // A small read buffer: the library's default (128 KiB) is zeroed on each read.
        let config = WebSocketConfig::default().read_buffer_size(8 << 10);
        let (mut socket, _) =
            tokio_tungstenite::connect_async_with_config(&ws, Some(config), false)
                .await
                .map_err(|e| format!("connect: {e}"))?;
        let mut ask = async |message: Value| -> Result<(Value, Duration), String> {
            let sent = Instant::now();
            socket
                .send(Ws::text(message.to_string()))
                .await
                .map_err(|e| format!("send: {e}"))?;
            loop {
                let reply = tokio::time::timeout(REPLY_TIMEOUT, socket.next())
                    .await
                    .map_err(|_| "no reply within 120 s".to_owned())?
                    .ok_or("connection closed")?
                    .map_err(|e| format!("receive: {e}"))?;
                if let Ws::Text(text) = reply {
                    let value: Value =
                        serde_json::from_str(&text).map_err(|e| format!("reply: {e}"))?;
                    return match value["type"] == "observation" {
                        true => Ok((value["data"].clone(), sent.elapsed())),
                        false => Err(format!("reply: {value}")),
                    };
                }
            }
        };
        ask(json!({"type": "reset", "data": {}})).await?;
        for i in 0..steps {
            tokio::time::sleep(think_once(&mut rng)).await;
            let message = format!("hello {index}.{i}");
            let (data, took) = ask(json!({"type": "step", "data": {
                "type": "call_tool", "tool_name": "echo", "arguments": {"message": message}}}))
            .await?;
            let result = data["observation"]["result"].as_str().unwrap_or_default();
            if !result.contains(&message) {
                return Err(format!("echo step {i}: {data}"));
            }
            out.steps.push(took);
        }
        tokio::time::sleep(think_once(&mut rng)).await;
        let (data, took) =
            ask(json!({"type": "step", "data": {"type": "submit", "answer": "done"}})).await?;
        out.fin = Some(took);
        if data["reward"] != json!(1.0) || data["done"] != json!(true) {
            return Err(format!("final answer: {data}"));
        }
        let _ = socket
            .send(Ws::text(json!({"type": "close"}).to_string()))
            .await;
        let _ = socket.close(None).await;
        Ok(())
    };
    out.result = run.await;
    out
}

async fn load(ws: &str, sessions: usize, steps: usize, think: Duration) -> Load {
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|i| tokio::spawn(session(ws.to_owned(), i, steps, think)))
        .collect();
    let mut done = Load {
        sessions,
        ok: 0,
        first_failure: None,
        steps: Vec::new(),
        finals: Vec::new(),
        wall: Duration::ZERO,
    };
    for task in tasks {
        let s = task.await.expect("session task");
        done.steps.extend(s.steps);
        done.finals.extend(s.fin);
        match s.result {
            Ok(()) => done.ok += 1,
            Err(e) => {
                done.first_failure.get_or_insert(e);
            }
        }
    }
    done.wall = start.elapsed();
    done
}

/// CPU time of process `pid`: user, then system (`/proc/PID/stat`, in 10 ms ticks).
fn cpu_of(pid: u32) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let time = |i: usize| Duration::from_millis(ticks(i) * 10);
    (time(11), time(12))
}

/// A `/proc/PID/status` field in kB (`VmHWM`, `VmRSS`) or a count (`Threads`).
fn status_of(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn quantile(v: &mut [Duration], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i].as_secs_f64() * 1e3
}

fn bench() -> anyhow::Result<()> {
    let limit = hermes_runtime::app::raise_descriptor_limit();
    let levels: Vec<usize> = arg_value("--levels")
        .unwrap_or_else(|| "256,1024,4096,8192".into())
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let steps: usize = arg_value("--steps").map_or(Ok(8), |v| v.parse())?;
    let think = Duration::from_millis(arg_value("--think-ms").map_or(Ok(1000), |v| v.parse())?);
    let only = arg_value("--only");
    let uvloop = std::env::args().any(|a| a == "--uvloop");
    let bound = arg_value("--capacity-p99-ms").map_or(Ok(100.0), |v| v.parse::<f64>())?;
    let mut capacity = Capacity::new(bound);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "openenv sessions: reset, {steps} echo steps, final answer; think {} ms mean per message; \
         {} cores; open-file limit {limit}; load average {}",
        think.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    if uvloop {
        println!(
            "python: openenv-core's server under uvicorn with uvloop and httptools (--uvloop)"
        );
    }
    println!(
        "{:>9} {:>9} {:>9} {:>16} {:>16} {:>13} {:>9} {:>6} {:>8} {:>11} {:>13}",
        "server",
        "sessions",
        "success",
        "step p50/p99 ms",
        "final p50/p99",
        "cpu ms/msg",
        "of it sys",
        "cores",
        "peak MB",
        "KB/session",
        "sessions/core"
    );
    for &n in &levels {
        for which in ["rust", "rust-echo", "python"] {
            if only.as_deref().is_some_and(|o| !which.starts_with(o)) {
                continue;
            }
            if let Some(past) = capacity.past(which) {
                println!(
                    "{which:>9} {n:>9}   skipped: past its capacity at {past} sessions (step p99 over {bound} ms or under 99.9% success)"
                );
                continue;
            }
            let server = match which {
                "rust" => rust_server(n, true)?,
                "rust-echo" => rust_server(n, false)?,
                _ => python_server(n + 16, uvloop)?,
            };
            let pid = server.child.id();
            std::thread::sleep(Duration::from_millis(500));
            let (rss0, (user0, sys0)) = (status_of(pid, "VmRSS"), cpu_of(pid));
            let mut result = rt.block_on(load(&server.ws, n, steps, think));
            let (user1, sys1) = cpu_of(pid);
            let sys = sys1 - sys0;
            let cpu = user1 - user0 + sys;
            let hwm = status_of(pid, "VmHWM");
            drop(server);
            let messages = n * (steps + 2);
            let cores = cpu.as_secs_f64() / result.wall.as_secs_f64();
            let per_core = n as f64 / cores.max(1e-9);
            let (s50, s99) = (
                quantile(&mut result.steps, 0.5),
                quantile(&mut result.steps, 0.99),
            );
            let (f50, f99) = (
                quantile(&mut result.finals, 0.5),
                quantile(&mut result.finals, 0.99),
            );
            println!(
                "{which:>9} {:>9} {:>8.2}% {:>16} {:>16} {:>13.3} {:>9.3} {:>6.2} {:>8.0} {:>11.1} {:>13.0}",
                result.sessions,
                100.0 * result.ok as f64 / result.sessions as f64,
                format!("{s50:.2} / {s99:.2}"),
                format!("{f50:.1} / {f99:.1}"),
                cpu.as_secs_f64() * 1e3 / messages as f64,
                sys.as_secs_f64() * 1e3 / messages as f64,
                cores,
                hwm as f64 / 1024.0,
                hwm.saturating_sub(rss0) as f64 / n as f64,
                per_core,
            );
            capacity.record(
                which,
                n,
                result.ok as f64 / result.sessions as f64,
                s99,
                per_core,
            );
            if let Some(why) = &result.first_failure {
                println!(
                    "         {} failed; the first: {}",
                    result.sessions - result.ok,
                    why.chars().take(300).collect::<String>()
                );
            }
        }
    }
    println!(
        "latency: client-side, send to reply, on the same machine (the client shares the cores);"
    );
    println!("cpu/msg = the server process's user+system time / messages (reset, steps, final), of it sys = the system part;");
    println!("cores = that time / wall;");
    println!("peak MB = the server's VmHWM; KB/session = (VmHWM - RSS before the load) / sessions; sessions/core = sessions / cores");
    capacity.report();
    Ok(())
}

/// Each server's capacity: its most sessions per core at a level where it kept up (at least
/// 99.9 % of sessions at reward 1.0 and a step p99 within the bound). Sessions per core at
/// one level alone flatters a server that could not keep up: its sessions slow down to its
/// pace (openenv-core at 4,096 answered steps in up to 2.4 s), so it spends its core on
/// fewer messages than the level asks; a level past the bound ends that server's climb.
struct Capacity {
    bound_ms: f64,
    /// Per server: the best level within the bound (sessions, sessions per core).
    best: Vec<(&'static str, usize, f64)>,
    /// Per server: the first level past the bound.
    past: Vec<(&'static str, usize)>,
}

impl Capacity {
    fn new(bound_ms: f64) -> Self {
        Self {
            bound_ms,
            best: Vec::new(),
            past: Vec::new(),
        }
    }

    fn past(&self, which: &str) -> Option<usize> {
        self.past.iter().find(|(w, _)| *w == which).map(|p| p.1)
    }

    fn record(&mut self, which: &'static str, n: usize, success: f64, p99_ms: f64, per_core: f64) {
        // A NaN p99 (no step answered) is past the bound too.
        if success < 0.999 || p99_ms.is_nan() || p99_ms > self.bound_ms {
            self.past.push((which, n));
            return;
        }
        match self.best.iter_mut().find(|(w, _, _)| *w == which) {
            Some(b) if b.2 >= per_core => {}
            Some(b) => *b = (which, n, per_core),
            None => self.best.push((which, n, per_core)),
        }
    }

    fn report(&self) {
        println!(
            "capacity = a server's most sessions/core at a level with >= 99.9% success and step p99 <= {} ms:",
            self.bound_ms
        );
        for (which, n, per_core) in &self.best {
            println!("  {which:>9}: {per_core:.0} sessions/core (at {n} sessions)");
        }
        let of = |w: &str| self.best.iter().find(|b| b.0 == w).map(|b| b.2);
        if let Some(python) = of("python") {
            for rust in ["rust", "rust-echo"] {
                if let Some(r) = of(rust) {
                    println!("  {rust} / python: {:.1}x", r / python);
                }
            }
        }
    }
}
