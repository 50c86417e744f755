//! MCP servers' tools inside an environment: a real FastMCP server (PyPI `mcp`) over stdio and
//! over Streamable HTTP, offered to a scripted model next to the built-ins, its results in the
//! conversation and the reward; its crash a typed rollout failure, never a reward; its stdio
//! child started with nothing of this process's environment but the allowlist.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hermes_env::prelude::*;
use hermes_env::testing::{Kit, Reply, Script};
use hermes_env::RewardOutcome;
use hermes_runtime::env::FailureKind;
use hermes_runtime::llm::Split;

fn server_script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/server.py")
        .display()
        .to_string()
}

/// The stdio server as the attribute declares it: the venv's Python, `PATH` from this
/// process and one literal variable; nothing else.
fn stdio_kv() -> McpServer {
    let python = common::fastmcp_python();
    McpServer::stdio("kv", python.to_str().unwrap(), [server_script().as_str()])
        .env(["PATH", "MCP_MODE=test"])
        .timeout(20.0)
}

/// `sha256(key)[:8]`, as the server's `lookup` computes it.
const ALPHA_CODE: &str = "code-8ed3f6ad";

/// Pays 1.0 when a tool result of the run carries the code stored under "alpha" and the final
/// answer repeats it.
#[hermes_env(name = "mcp-tools", toolsets = ["file"], main = false, max_agent_turns = 4,
    mcp_servers = [stdio_kv()])]
struct McpTools {}

#[hermes_env::hooks]
impl McpTools {
    async fn get_next_item(&mut self) -> Option<String> {
        Some("alpha".into())
    }

    fn format_prompt(&self, item: &String) -> String {
        format!("Look up the code stored under {item} and answer with it.")
    }

    async fn compute_reward(
        &self,
        _item: &String,
        run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        let seen = run
            .messages
            .iter()
            .any(|m| m.role == "tool" && m.content.contains(ALPHA_CODE));
        let said = run.final_response().is_some_and(|a| a.contains(ALPHA_CODE));
        Ok(if seen && said { 1.0 } else { 0.0 })
    }
}

fn check_code() {
    let out = Command::new(common::fastmcp_python())
        .args([
            "-c",
            "import hashlib; print('code-' + hashlib.sha256(b'alpha').hexdigest()[:8])",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), ALPHA_CODE);
}

/// The tool messages of the run, in order.
fn tool_results(report: &hermes_env::testing::ItemReport<String>) -> Vec<String> {
    report
        .run
        .messages
        .iter()
        .filter(|m| m.role == "tool")
        .map(|m| m.content.clone())
        .collect()
}

#[tokio::test]
async fn a_stdio_servers_tool_reaches_the_model_the_next_request_and_the_reward() {
    check_code();
    let script = Script::new([
        Reply::tool("mcp__kv__lookup", json!({"key": "alpha"})),
        Reply::tool("mcp__kv__refuse", json!({"reason": "not today"})),
        Reply::text(format!("The code is {ALPHA_CODE}.")),
    ]);
    let mut kit = Kit::<McpTools>::builder()
        .policy(script)
        .start()
        .await
        .unwrap();
    let report = kit.run_next().await.unwrap();
    // Offered next to the built-ins, namespaced, with the server's own input schema.
    let names: Vec<&str> = report
        .tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for name in [
        "mcp__kv__lookup",
        "mcp__kv__refuse",
        "mcp__kv__env_report",
        "read_file",
    ] {
        assert!(names.contains(&name), "{name} offered: {names:?}");
    }
    let lookup = report
        .tools
        .iter()
        .find(|t| t["function"]["name"] == "mcp__kv__lookup")
        .unwrap();
    assert_eq!(
        lookup["function"]["parameters"]["properties"]["key"]["type"],
        "string"
    );
    assert_eq!(lookup["function"]["parameters"]["required"], json!(["key"]));
    assert_eq!(
        lookup["function"]["description"],
        "The code stored under `key`."
    );
    // The result, then the tool's own isError result: both model-visible data.
    let results = tool_results(&report);
    assert_eq!(results[0], format!(r#"{{"result": "{ALPHA_CODE}"}}"#));
    assert_eq!(
        results[1],
        r#"{"error": "Error executing tool refuse: not today"}"#
    );
    assert_eq!(
        report.run.tool_errors.len(),
        1,
        "the isError result counted"
    );
    // The result reached the next request the model answered.
    let requests = kit.server().unwrap().requests();
    assert_eq!(requests.len(), 3);
    let second = requests[1]["messages"].to_string();
    assert!(second.contains(ALPHA_CODE), "{second}");
    assert_eq!(report.outcome, RewardOutcome::Scored);
    assert_eq!(report.reward, 1.0);
}

#[tokio::test]
async fn the_stdio_child_gets_only_the_allowlist_and_dies_with_the_run() {
    // SAFETY: set before any thread of this test reads the environment.
    unsafe { std::env::set_var("HERMES_MCP_FAKE_SECRET", "sk-fake-mcp-secret-123") };
    let script = Script::new([
        Reply::tool("mcp__kv__env_report", json!({})),
        Reply::text("done"),
    ]);
    let mut kit = Kit::<McpTools>::builder()
        .policy(script)
        .start()
        .await
        .unwrap();
    let report = kit.run_next().await.unwrap();
    let result: serde_json::Value = serde_json::from_str(&tool_results(&report)[0]).unwrap();
    let inner: serde_json::Value =
        serde_json::from_str(result["result"].as_str().unwrap()).unwrap();
    let env = inner["env"].as_object().unwrap();
    let mut keys: Vec<&str> = env.keys().map(String::as_str).collect();
    keys.sort_unstable();
    // LC_CTYPE is Python's own locale coercion (PEP 538) in an environment without a locale.
    assert_eq!(keys, ["LC_CTYPE", "MCP_MODE", "PATH"], "{env:?}");
    assert_eq!(env["MCP_MODE"], "test");
    assert_eq!(env["PATH"], std::env::var("PATH").unwrap());
    assert!(!inner.to_string().contains("sk-fake-mcp-secret-123"));
    let pid = inner["pid"].as_i64().unwrap();
    assert!(alive(pid), "the server runs during the run");
    drop(kit);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "the stdio server {pid} outlived the run");
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn alive(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_server_crash_mid_run_is_a_typed_failure_and_the_next_rollout_gets_a_fresh_server() {
    let script = Script::new([
        Reply::tool("mcp__kv__crash", json!({})),
        Reply::tool("mcp__kv__lookup", json!({"key": "alpha"})),
        Reply::text(format!("The code is {ALPHA_CODE}.")),
    ]);
    let kit = Kit::<McpTools>::builder()
        .policy(script)
        .start()
        .await
        .unwrap();
    let crashed = kit.run_item("alpha".into(), Split::Train).await;
    let RewardOutcome::SandboxFailure { message } = &crashed.outcome else {
        panic!(
            "a crash is an infrastructure failure: {:?}",
            crashed.outcome
        );
    };
    assert!(
        message.contains("a tool server failed during the rollout: MCP server 'kv' crashed"),
        "{message}"
    );
    assert_eq!(crashed.outcome.failure(), Some(FailureKind::Sandbox));
    assert!(!crashed.outcome.is_training_data());
    assert_eq!(crashed.reward, 0.0);
    assert_eq!(
        kit.server().unwrap().request_count(),
        1,
        "the rollout stopped at the failure instead of asking the model again"
    );
    // The next rollout reconnects (a new child) and is scored as usual.
    let next = kit.run_item("alpha".into(), Split::Train).await;
    assert_eq!(next.outcome, RewardOutcome::Scored);
    assert_eq!(next.reward, 1.0);
}

/// A FastMCP server over Streamable HTTP on a free port, killed when dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(common::fastmcp_python())
            .args([server_script(), "--http".into(), port.to_string()])
            .spawn()
            .expect("start the FastMCP HTTP server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the FastMCP HTTP server did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_streamable_http_server_declared_by_flag_serves_with_headers_from_the_environment() {
    let server = HttpServer::start();
    // SAFETY: set before the kit (and any thread reading it) starts.
    unsafe { std::env::set_var("HERMES_MCP_TEST_KEY", "key-from-env-456") };
    let servers = json!([{
        "name": "remote-kv",
        "url": server.url,
        "headers_from_env": {"X-Api-Key": "HERMES_MCP_TEST_KEY"},
        "timeout": 20
    }]);
    let script = Script::new([
        Reply::tool("mcp__remote_kv__lookup", json!({"key": "alpha"}))
            .and_tool("mcp__remote_kv__header", json!({"name": "x-api-key"})),
        Reply::text(format!("The code is {ALPHA_CODE}.")),
    ]);
    let mut kit = Kit::<McpTools>::builder()
        .policy(script)
        .arg("--env.mcp_servers", &servers.to_string())
        .start()
        .await
        .unwrap();
    let report = kit.run_next().await.unwrap();
    let names: Vec<&str> = report
        .tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"mcp__remote_kv__lookup"), "{names:?}");
    assert!(
        !names.contains(&"mcp__kv__lookup"),
        "the flag replaces the attribute's servers"
    );
    let results = tool_results(&report);
    assert_eq!(results[0], format!(r#"{{"result": "{ALPHA_CODE}"}}"#));
    assert_eq!(results[1], r#"{"result": "key-from-env-456"}"#);
    assert_eq!(report.outcome, RewardOutcome::Scored);
    assert_eq!(report.reward, 1.0);
    drop(server);
}

/// A server that cannot start stops the run before any rollout, with one line naming it; so
/// does a header whose variable is unset.
#[tokio::test]
async fn a_server_that_cannot_start_stops_the_run_with_its_name() {
    let start = |servers: serde_json::Value| async move {
        Kit::<McpTools>::builder()
            .policy(Script::new([Reply::text("unused")]))
            .arg("--env.mcp_servers", &servers.to_string())
            .start()
            .await
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let missing = start(json!([{"name": "nope", "command": "/nonexistent/mcp-server"}])).await;
    assert!(
        missing.starts_with(
            "MCP server 'nope' could not be started: cannot run '/nonexistent/mcp-server'"
        ),
        "{missing}"
    );
    let unset = start(json!([{"name": "web", "url": "http://127.0.0.1:9/mcp",
        "headers_from_env": {"Authorization": "HERMES_MCP_UNSET_VAR"}}]))
    .await;
    assert_eq!(
        unset,
        "MCP server 'web' could not be started: header Authorization reads $HERMES_MCP_UNSET_VAR, which is not set"
    );
    let both = start(json!([{"name": "x", "command": "a", "url": "http://b"}])).await;
    assert!(both.contains("has both `command` and `url`"), "{both}");
}
