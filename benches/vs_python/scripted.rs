//! The scripted model both frameworks talk to, run as its own process (this bench binary
//! with `--scripted-server`), so its CPU is nobody's framework time. Every rollout of the
//! `terminal-test` tasks gets 4 turns: 3 `terminal` calls (write the file, `cat` it, `wc -c`
//! it), then a short answer.
//!
//! Line protocol on the server's stdin/stdout: it prints its base URL first; each `count`
//! line is answered with the number of chat requests so far; end of input stops it.

use std::io::{BufRead, Write};

use hermes_env::testing::{Reply, ScriptedServer};
use serde_json::{json, Value};

/// LLM turns per rollout.
pub const TURNS: usize = 4;

/// The flag that makes this binary the scripted server.
pub const SERVER_FLAG: &str = "--scripted-server";

/// The path a task's prompt names and the command that writes its expected content.
fn task_of(prompt: &str) -> Option<(&'static str, &'static str)> {
    [
        (
            "greeting.txt",
            "~/greeting.txt",
            "printf 'Hello from Hermes Agent' > ~/greeting.txt",
        ),
        ("count.txt", "~/count.txt", "seq 1 5 > ~/count.txt"),
        (
            "answer.txt",
            "~/answer.txt",
            "echo $((123 + 456)) > ~/answer.txt",
        ),
    ]
    .into_iter()
    .find(|(needle, _, _)| prompt.contains(needle))
    .map(|(_, path, write)| (path, write))
}

/// Answers by turn index (the number of assistant messages so far).
fn policy(request: &Value) -> Reply {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let prompt = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let turn = messages.iter().filter(|m| m["role"] == "assistant").count();
    let Some((path, write)) = task_of(prompt) else {
        return Reply::text("I do not know this task.");
    };
    let terminal = |command: String| Reply::tool("terminal", json!({ "command": command }));
    match turn {
        0 => terminal(write.to_owned()),
        1 => terminal(format!("cat {path}")),
        2 => terminal(format!("wc -c {path}")),
        _ => Reply::text(format!("Done: {path} is written.")),
    }
}

/// Runs the server until stdin closes (the `--scripted-server` mode of this binary).
pub fn serve() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let server = rt.block_on(ScriptedServer::start_with(policy, false))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", server.base_url())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == "count" {
            writeln!(out, "{}", server.request_count())?;
            out.flush()?;
        }
    }
    Ok(())
}

/// The scripted server as a child process of the bench.
pub struct ServerProcess {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
}

impl ServerProcess {
    /// Starts this binary in server mode and reads its URL.
    pub fn start() -> anyhow::Result<Self> {
        use std::process::{Command, Stdio};
        let mut child = Command::new(std::env::current_exe()?)
            .arg(SERVER_FLAG)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut base_url = String::new();
        stdout.read_line(&mut base_url)?;
        anyhow::ensure!(
            base_url.starts_with("http://"),
            "the scripted server did not print its URL (got {base_url:?})"
        );
        Ok(ServerProcess {
            child,
            stdin,
            stdout,
            base_url: base_url.trim().to_owned(),
        })
    }

    /// Chat requests answered so far.
    pub fn request_count(&mut self) -> anyhow::Result<u64> {
        writeln!(self.stdin, "count")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        Ok(line.trim().parse()?)
    }

    /// Closes its stdin and waits for it to exit.
    pub fn stop(self) -> anyhow::Result<()> {
        let ServerProcess {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        child.wait()?;
        Ok(())
    }
}
