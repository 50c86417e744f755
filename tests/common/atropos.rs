//! The real Atropos trajectory API (`run-api` from atroposlib 0.4.0), a trainer stand-in that
//! speaks its protocol, and the example binary in `serve` mode, for the serve tests.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A `run-api` process, killed when dropped.
pub struct Api {
    child: Child,
    pub url: String,
    pub port: u16,
}

/// An HTTP client; building a `TrajectoryApi` first installs the TLS crypto provider that
/// reqwest's `rustls-no-provider` build needs.
pub fn http() -> reqwest::Client {
    hermes_runtime::atropos::TrajectoryApi::new(
        "http://127.0.0.1:1",
        hermes_runtime::llm::RetryPolicy::default(),
        Duration::from_secs(1),
    )
    .expect("client");
    reqwest::Client::new()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Api {
    /// `run-api` on 127.0.0.1.
    pub async fn start(port: u16) -> Api {
        Self::start_on("127.0.0.1", port).await
    }

    /// `run-api` bound to `host` (an address of this machine, e.g. a test network's bridge).
    pub async fn start_on(host: &str, port: u16) -> Api {
        let python = super::atropos_python();
        let run_api = python.parent().expect("venv bin").join("run-api");
        assert!(
            run_api.exists(),
            "{} is missing: atroposlib==0.4.0 did not install its run-api script",
            run_api.display()
        );
        let child = Command::new(&run_api)
            .args(["--host", host, "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", run_api.display()));
        let url = format!("http://{host}:{port}");
        let http = http();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http.get(format!("{url}/info")).send().await.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "run-api did not come up on {url}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Api { child, url, port }
    }

    pub async fn kill(mut self) {
        self.child.kill().await.expect("kill run-api");
        let _ = self.child.wait().await;
    }
}

/// The trainer side of the protocol (§2.7 of the spec).
pub struct Trainer {
    http: reqwest::Client,
    url: String,
}

impl Trainer {
    pub async fn register(url: &str, batch_size: i64, num_steps: i64) -> Trainer {
        Self::register_with_limit(url, batch_size, num_steps, 1_000_000).await
    }

    /// Registers with the trainer's sequence-length limit `max_token_len`.
    pub async fn register_with_limit(
        url: &str,
        batch_size: i64,
        num_steps: i64,
        max_token_len: i64,
    ) -> Trainer {
        let t = Trainer {
            http: http(),
            url: url.to_owned(),
        };
        let r: Value = t
            .post(
                "/register",
                json!({"wandb_group": "grp", "wandb_project": "proj", "batch_size": batch_size,
                       "max_token_len": max_token_len, "checkpoint_dir": "ckpts",
                       "save_checkpoint_interval": 2, "starting_step": 0, "num_steps": num_steps}),
            )
            .await;
        assert!(r.get("uuid").is_some(), "register: {r}");
        // The first /batch marks the trainer as started, which unblocks /register-env.
        assert_eq!(t.get("/batch").await["batch"], Value::Null);
        t
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await
            .expect("POST")
            .json()
            .await
            .expect("JSON")
    }

    pub async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("JSON")
    }

    pub async fn status(&self) -> (i64, i64) {
        let s = self.get("/status").await;
        (
            s["current_step"].as_i64().unwrap(),
            s["queue_size"].as_i64().unwrap(),
        )
    }
}

fn builtin_tokenizer_dir() -> &'static str {
    static DIR: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        hermes_runtime::llm::ChatTokenizer::builtin_dir()
            .to_string_lossy()
            .into_owned()
    })
}

/// The example binary in `serve` mode, with its stderr lines forwarded to a channel.
pub struct Env {
    pub child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Env {
    pub fn start(api_url: &str, tmp: &Path, extra: &[&str]) -> Env {
        Self::start_via(&[], api_url, tmp, extra)
    }

    /// Starts the binary through the command `prefix` (e.g. `ip netns exec NS`), which must
    /// exec it, so that the child's pid is the environment's.
    pub fn start_via(prefix: &[String], api_url: &str, tmp: &Path, extra: &[&str]) -> Env {
        let mut args = vec![
            "serve",
            "--testing",
            "true",
            "--openai.server_type",
            "vllm",
            "--env.rollout_server_url",
            api_url,
            "--env.use_wandb",
            "false",
            "--env.group_size",
            "2",
            "--env.max_num_workers",
            "2",
            // The groups are checked with the built-in tokenizer, whatever the hub cache holds.
            "--env.tokenizer_name",
            builtin_tokenizer_dir(),
        ];
        args.extend_from_slice(extra);
        let bin = super::example_bin("terminal_test");
        let mut command = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let mut child = command
            .args(&args)
            .current_dir(tmp)
            .env("TMPDIR", tmp)
            .env("RUST_LOG", "info")
            .env("WANDB_MODE", "offline")
            .env("WANDB_DIR", tmp.join("wandb-runs"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the example");
        let (tx, lines) = mpsc::unbounded_channel();
        let stderr = child.stderr.take().unwrap();
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = r.next_line().await {
                let _ = tx.send(l);
            }
        });
        Env {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `needle`.
    pub async fn expect_line(&mut self, needle: &str, within: Duration) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(l)) => {
                    self.seen.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                _ => panic!(
                    "no stderr line with {needle:?} within {within:?}; stderr so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for a successful exit; returns stdout and stderr.
    pub async fn finish(mut self, within: Duration) -> (String, String) {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("serve did not exit within {within:?}"))
            .expect("wait");
        // The reader ends at EOF of stderr, closing the channel.
        while let Ok(Some(l)) =
            tokio::time::timeout(Duration::from_secs(5), self.lines.recv()).await
        {
            self.seen.push(l);
        }
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            use tokio::io::AsyncReadExt;
            stdout.read_to_string(&mut out).await.unwrap();
        }
        assert!(
            status.success(),
            "serve failed ({status}); stdout:\n{out}\nstderr:\n{}",
            self.seen.join("\n")
        );
        (out, self.seen.join("\n"))
    }
}
