//! MCP servers' tools offered to the model next to the built-ins, through the official Rust
//! SDK (`rmcp`, client side): stdio children started with only an allowlisted environment and
//! Streamable HTTP endpoints. Tools are named `mcp__<server>__<tool>` (the convention of
//! Claude Code, Codex and hermes-agent) and carry the server's input schema unchanged.
//!
//! Servers live for the run (started before the first rollout, stopped when the run's tools
//! are dropped): a stdio server costs a process start and a handshake, far more than a
//! rollout's tool call, and the tool list must be known before any prompt is sent. A server
//! that fails is reconnected on the next call, so a retried rollout meets a fresh one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{json, Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Mutex;
use tracing::{debug, info, warn};

use super::{Tool, ToolCallContext, ToolRegistry};
use crate::config::McpServer;
use crate::llm::ToolSchema;

/// Longest tool name providers accept (OpenAI's limit); longer names end in a stable hash.
const MAX_TOOL_NAME: usize = 64;

/// Why an MCP server could not serve: the server's failure, never the model's.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The declaration cannot be started (bad name, both or neither of command and url, …).
    #[error("{0}")]
    Invalid(String),
    /// The child could not be started, or a header's variable is unset.
    #[error("MCP server '{server}' could not be started: {message}")]
    Start {
        /// The server's name.
        server: String,
        /// What failed.
        message: String,
    },
    /// The process exited or the connection closed.
    #[error("MCP server '{server}' crashed or closed the connection: {message}")]
    Crashed {
        /// The server's name.
        server: String,
        /// What the transport said.
        message: String,
    },
    /// No answer within the server's `timeout`.
    #[error("MCP server '{server}' did not answer {what} within {seconds} s")]
    Timeout {
        /// The server's name.
        server: String,
        /// The request (`initialize`, `tools/list`, `tools/call <tool>`).
        what: String,
        /// The limit.
        seconds: f64,
    },
    /// An answer that breaks the protocol (a JSON-RPC error other than invalid arguments, an
    /// unexpected response type).
    #[error("MCP server '{server}' broke the protocol: {message}")]
    Protocol {
        /// The server's name.
        server: String,
        /// What it answered.
        message: String,
    },
}

/// The run's MCP servers, connected, with their tools.
pub struct McpServers {
    servers: Vec<Arc<Connection>>,
}

impl McpServers {
    /// Starts every declared server and lists its tools; any failure stops the run before a
    /// rollout starts. One line names each server with its tool count.
    pub async fn start(specs: &[McpServer]) -> Result<McpServers, McpError> {
        let mut seen = std::collections::BTreeSet::new();
        for spec in specs {
            if let Some(problem) = spec.problem() {
                return Err(McpError::Invalid(problem));
            }
            if !seen.insert(sanitize(&spec.name)) {
                return Err(McpError::Invalid(format!(
                    "two MCP servers are named '{}' (after '-' became '_')",
                    spec.name
                )));
            }
        }
        let mut servers = Vec::new();
        for spec in specs {
            let conn = Arc::new(Connection {
                spec: spec.clone(),
                live: Mutex::new(None),
                tools: Vec::new(),
            });
            let live = conn.connect().await?;
            let listed = timed(spec, "tools/list", live.service.peer().list_all_tools())
                .await?
                .map_err(|message| McpError::Protocol {
                    server: spec.name.clone(),
                    message: format!("tools/list: {message}"),
                })?;
            let mut conn = Arc::into_inner(conn).expect("not shared yet");
            conn.tools = listed;
            *conn.live.get_mut() = Some(live);
            servers.push(Arc::new(conn));
        }
        if !servers.is_empty() {
            let listing: Vec<String> = servers
                .iter()
                .map(|s| {
                    let kind = if s.spec.url.is_some() {
                        "http"
                    } else {
                        "stdio"
                    };
                    format!("{} ({kind}, {} tools)", s.spec.name, s.tools.len())
                })
                .collect();
            info!("MCP servers: {}", listing.join(", "));
        }
        Ok(McpServers { servers })
    }

    /// Registers every server's tools (toolset = the server's name, also in `mcp`).
    pub fn register(&self, registry: &mut ToolRegistry) {
        for server in &self.servers {
            let toolset: &'static str = Box::leak(server.spec.name.clone().into_boxed_str());
            for tool in &server.tools {
                let description = tool.description.as_deref().map(str::to_owned);
                registry.register(McpTool {
                    name: tool_name(&server.spec.name, &tool.name),
                    remote: tool.name.to_string(),
                    description: description.unwrap_or_else(|| {
                        format!("MCP tool {} from {}", tool.name, server.spec.name)
                    }),
                    parameters: parameters(&tool.input_schema),
                    toolset,
                    server: Arc::clone(server),
                });
            }
        }
    }

    /// The servers' names, in declaration order.
    pub fn names(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.spec.name.as_str()).collect()
    }
}

/// `mcp__<server>__<tool>`, each part with characters outside `[A-Za-z0-9_]` made `_`;
/// a name over 64 characters is cut and ends in a hash of the whole.
pub fn tool_name(server: &str, tool: &str) -> String {
    let name = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    let mut hash: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{}_{hash:08x}", &name[..MAX_TOOL_NAME - 9])
}

fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The server's input schema as the function's parameters (an object schema without
/// `properties` gets an empty one, which some providers require).
fn parameters(schema: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    if schema.get("type").and_then(Value::as_str) == Some("object")
        && !schema.contains_key("properties")
    {
        schema.insert("properties".into(), json!({}));
    }
    Value::Object(schema)
}

/// One server: its declaration, its tools as listed at start, and the live session (none
/// after a failure until the next call reconnects).
struct Connection {
    spec: McpServer,
    live: Mutex<Option<Arc<Live>>>,
    tools: Vec<rmcp::model::Tool>,
}

/// A connected session; dropping it stops the server (a stdio child's whole process group).
struct Live {
    service: RunningService<RoleClient, ()>,
    /// Held for its `Drop`: the child's group goes with the session.
    _group: Option<ProcessGroup>,
}

/// A stdio child's process group, killed when dropped (the child may have started others).
struct ProcessGroup(i32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a process group this process created; no memory is touched.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

impl Connection {
    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.spec.timeout)
    }

    async fn connect(&self) -> Result<Arc<Live>, McpError> {
        let spec = &self.spec;
        let start = |message: String| McpError::Start {
            server: spec.name.clone(),
            message,
        };
        let (service, group) = match (&spec.command, &spec.url) {
            (Some(command), _) if !command.is_empty() => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(&spec.args).env_clear().kill_on_drop(true);
                for (name, value) in allowed_env(&spec.env) {
                    cmd.env(name, value);
                }
                if let Some(dir) = &spec.cwd {
                    cmd.current_dir(dir);
                }
                cmd.process_group(0);
                // SAFETY: prctl in the forked child before exec; async-signal-safe.
                unsafe {
                    cmd.pre_exec(|| {
                        // The child dies with this process even when it is SIGKILLed.
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                        Ok(())
                    });
                }
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| start(format!("cannot run '{command}': {e}")))?;
                let group = transport.id().map(|pid| ProcessGroup(pid as i32));
                if let Some(stderr) = stderr {
                    let name = spec.name.clone();
                    tokio::spawn(async move {
                        let mut lines = tokio::io::BufReader::new(stderr).lines();
                        while let Ok(Some(line)) = lines.next_line().await {
                            debug!("MCP server {name}: {line}");
                        }
                    });
                }
                let service = timed(spec, "initialize", async {
                    ().serve(transport).await.map_err(|e| e.to_string())
                })
                .await?
                .map_err(|e| start(format!("initialize: {e}")))?;
                (service, group)
            }
            (_, Some(url)) => {
                let mut headers = HashMap::new();
                for (header, var) in &spec.headers_from_env {
                    let value = std::env::var(var).map_err(|_| {
                        start(format!("header {header} reads ${var}, which is not set"))
                    })?;
                    crate::config::redact::remember_secret(&value);
                    let name = reqwest::header::HeaderName::try_from(header.as_str())
                        .map_err(|e| start(format!("header name '{header}': {e}")))?;
                    let mut value = reqwest::header::HeaderValue::try_from(value)
                        .map_err(|_| start(format!("${var} is not a valid header value")))?;
                    value.set_sensitive(true);
                    headers.insert(name, value);
                }
                let http = crate::tls::client_builder()
                    .pool_max_idle_per_host(0)
                    .build()
                    .map_err(|e| start(format!("HTTP client: {e}")))?;
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                let service = timed(spec, "initialize", async {
                    ().serve(transport).await.map_err(|e| e.to_string())
                })
                .await?
                .map_err(|e| start(format!("initialize: {e}")))?;
                (service, None)
            }
            _ => return Err(McpError::Invalid(spec.problem().unwrap_or_default())),
        };
        Ok(Arc::new(Live {
            service,
            _group: group,
        }))
    }

    /// The live session, reconnecting after a failure.
    async fn session(&self) -> Result<Arc<Live>, McpError> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref().filter(|l| !l.service.is_transport_closed()) {
            return Ok(Arc::clone(l));
        }
        if live.take().is_some() {
            info!(
                "MCP server {}: reconnecting after a failure",
                self.spec.name
            );
        }
        let fresh = self.connect().await?;
        *live = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// Forgets `failed` (stopping it) so that the next call starts afresh.
    async fn discard(&self, failed: &Arc<Live>) {
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| Arc::ptr_eq(l, failed)) {
            *live = None;
        }
    }

    /// Calls `tool`: `Ok` is the server's result (an `isError` one included: the model's
    /// data); `Err` is the server's failure.
    async fn call(&self, tool: &str, args: Map<String, Value>) -> Result<Value, McpError> {
        let live = self.session().await?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        let what = format!("tools/call {tool}");
        let answer =
            tokio::time::timeout(self.timeout(), live.service.peer().call_tool(params)).await;
        let failure = match answer {
            Ok(Ok(result)) => return Ok(render(&result)),
            Ok(Err(ServiceError::McpError(e)))
                if e.code == rmcp::model::ErrorCode::INVALID_PARAMS =>
            {
                // Arguments the tool refused are the model's doing: shown, not a failure.
                return Ok(json!({"error": e.message}));
            }
            Ok(Err(e)) => self.classify(e),
            Err(_) => McpError::Timeout {
                server: self.spec.name.clone(),
                what,
                seconds: self.spec.timeout,
            },
        };
        self.discard(&live).await;
        Err(failure)
    }

    fn classify(&self, e: ServiceError) -> McpError {
        let server = self.spec.name.clone();
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => McpError::Crashed {
                server,
                message: e.to_string(),
            },
            ServiceError::Timeout { timeout } => McpError::Timeout {
                server,
                what: "a request".into(),
                seconds: timeout.as_secs_f64(),
            },
            other => McpError::Protocol {
                server,
                message: other.to_string(),
            },
        }
    }
}

async fn timed<T, E: std::fmt::Display>(
    spec: &McpServer,
    what: &str,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<Result<T, String>, McpError>
where
    T: Sized,
{
    match tokio::time::timeout(Duration::from_secs_f64(spec.timeout), work).await {
        Ok(r) => Ok(r.map_err(|e| e.to_string())),
        Err(_) => Err(McpError::Timeout {
            server: spec.name.clone(),
            what: what.to_owned(),
            seconds: spec.timeout,
        }),
    }
}

/// The child's environment from its allowlist: `NAME` copies the host's value (skipped, with
/// a debug line, when unset), `NAME=value` sets it.
fn allowed_env(entries: &[String]) -> Vec<(String, String)> {
    entries
        .iter()
        .filter_map(|entry| match entry.split_once('=') {
            Some((name, value)) => Some((name.to_owned(), value.to_owned())),
            None => match std::env::var(entry) {
                Ok(value) => Some((entry.clone(), value)),
                Err(_) => {
                    debug!("MCP server env allowlist: {entry} is not set here; not passed");
                    None
                }
            },
        })
        .collect()
}

/// A tool result as the model sees it: `{"result": text}` (with `structuredContent` when the
/// server gave no text), or `{"error": text}` for an `isError` result. Non-text content is
/// described, not inlined.
fn render(result: &CallToolResult) -> Value {
    let text: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => {
                format!("[image {}, {} base64 chars]", i.mime_type, i.data.len())
            }
            ContentBlock::Audio(a) => {
                format!("[audio {}, {} base64 chars]", a.mime_type, a.data.len())
            }
            ContentBlock::Resource(r) => match serde_json::to_value(&r.resource) {
                Ok(v) => v
                    .get("text")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        format!("[resource {}]", v.get("uri").unwrap_or(&Value::Null))
                    }),
                Err(_) => "[resource]".into(),
            },
            ContentBlock::ResourceLink(l) => format!("[resource link {}]", l.uri),
            _ => "[content of a kind this client does not show]".into(),
        })
        .collect();
    let text = text.join("\n");
    if result.is_error == Some(true) {
        return json!({ "error": text });
    }
    // The spec asks servers to send structured results as text too; the text is shown, and
    // the structured value only when there is no text.
    match &result.structured_content {
        Some(structured) if result.content.is_empty() => {
            json!({ "result": text, "structuredContent": structured })
        }
        _ => json!({ "result": text }),
    }
}

/// One MCP tool as a model-facing tool.
struct McpTool {
    name: String,
    remote: String,
    description: String,
    parameters: Value,
    toolset: &'static str,
    server: Arc<Connection>,
}

#[async_trait]
impl Tool for McpTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(&self.name, &self.description, self.parameters.clone())
    }

    fn toolset(&self) -> &'static str {
        self.toolset
    }

    fn also_in(&self) -> &'static [&'static str] {
        &["mcp"]
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        match self.server.call(&self.remote, args).await {
            Ok(v) => v,
            Err(e) => {
                warn!("{e}; the rollout fails (not a reward)");
                let message = e.to_string();
                cx.sandbox.record_tool_server_failure(message.clone());
                json!({ "error": message })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_namespaced_sanitized_and_bounded() {
        assert_eq!(tool_name("files", "read"), "mcp__files__read");
        assert_eq!(tool_name("my-srv", "get.item"), "mcp__my_srv__get_item");
        let long = tool_name("s", &"x".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert_ne!(long, tool_name("s", &"x".repeat(101)));
    }

    #[test]
    fn allowlist_copies_names_and_sets_pairs() {
        std::env::set_var("HERMES_MCP_ALLOW_TEST", "v");
        let env = allowed_env(&[
            "HERMES_MCP_ALLOW_TEST".into(),
            "HERMES_MCP_UNSET_TEST".into(),
            "MODE=x=y".into(),
        ]);
        assert_eq!(
            env,
            [
                ("HERMES_MCP_ALLOW_TEST".to_owned(), "v".to_owned()),
                ("MODE".to_owned(), "x=y".to_owned())
            ]
        );
    }
}
