//! The HTTP and WebSocket routes of the `openenv` mode and the per-connection session loop.
//!
//! Episodes live on `/ws`: one connection holds at most one episode at a time (one item, one
//! sandbox); `reset` starts one, the steps drive it, and the sandbox goes at the verdict, on
//! the next `reset`, on `close`, on disconnect, when the session idles past
//! `--idle-timeout`, outlives `--session-lifetime`, or the server shuts down. HTTP `/reset`
//! is stateless as in openenv-core (a fresh item's prompt and tools, no sandbox kept) and
//! HTTP `/step` is refused with a pointer to `/ws`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{info, warn};

use super::episode::{tool_specs, Episode, Pick, ToolStep};
use super::wire::{self, ErrorCode};
use crate::env::Environment;
use crate::modes::rollout::{Runtime, SharedEnv};
use crate::shutdown::Shutdown;

/// Limits of the sessions.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Most concurrent sessions (`--max-sessions`).
    pub max_sessions: usize,
    /// A session without a message for this long is closed (`--idle-timeout`).
    pub idle_timeout: Duration,
    /// A session is closed after this long however busy (`--session-lifetime`).
    pub lifetime: Duration,
}

/// What every route shares.
pub(crate) struct Server<E> {
    pub env: SharedEnv<E>,
    pub rt: Runtime,
    pub name: &'static str,
    pub about: String,
    pub limits: SessionLimits,
    pub slots: Arc<Semaphore>,
    pub shutdown: Shutdown,
}

impl<E> Server<E> {
    /// Sessions open now.
    pub fn active(&self) -> usize {
        self.limits.max_sessions - self.slots.available_permits()
    }
}

/// The router of every route.
pub(crate) fn router<E: Environment>(server: Arc<Server<E>>) -> Router {
    Router::new()
        .route(
            "/health",
            get(|| async { Json(json!({"status": "healthy"})) }),
        )
        .route("/metadata", get(metadata::<E>))
        .route("/schema", get(schema))
        .route("/openapi.json", get(openapi::<E>))
        .route("/state", get(state::<E>))
        .route("/reset", post(reset::<E>))
        .route("/step", post(step))
        .route("/mcp", post(mcp::<E>))
        .route("/ws", get(ws::<E>))
        .with_state(server)
}

/// JSON with every known secret value scrubbed (tool output can print one).
fn scrubbed(value: &Value) -> String {
    crate::config::redact::scrub(&value.to_string()).into_owned()
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        scrubbed(value),
    )
        .into_response()
}

async fn metadata<E: Environment>(State(s): State<Arc<Server<E>>>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "name": s.name,
            "description": s.about,
            "version": env!("CARGO_PKG_VERSION"),
            "readme_content": null,
            "author": null,
            "documentation_url": null,
        }),
    )
}

async fn schema() -> Json<Value> {
    Json(json!({
        "action": wire::action_schema(),
        "observation": wire::observation_schema(),
        "state": wire::state_schema(),
    }))
}

async fn openapi<E: Environment>(State(s): State<Arc<Server<E>>>) -> Json<Value> {
    Json(wire::openapi(s.name, env!("CARGO_PKG_VERSION")))
}

async fn state<E: Environment>(State(s): State<Arc<Server<E>>>) -> Json<Value> {
    Json(json!({
        "episode_id": null,
        "step_count": 0,
        "active_sessions": s.active(),
        "max_sessions": s.limits.max_sessions,
    }))
}

/// Stateless reset: a fresh item's prompt and tools; nothing is kept (no sandbox was made).
async fn reset<E: Environment>(
    State(s): State<Arc<Server<E>>>,
    body: axum::body::Bytes,
) -> Response {
    let data: Value = match body.is_empty() {
        true => json!({}),
        false => match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return json_response(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &json!({"detail": format!("invalid JSON: {e}")}),
                )
            }
        },
    };
    let pick = match pick(&data) {
        Ok(p) => p,
        Err(message) => {
            return json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({"detail": message}),
            )
        }
    };
    let id = data
        .get("episode_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match Episode::open(&s.env, &s.rt, pick, id).await {
        Ok(mut episode) => {
            let body =
                wire::reset_observation(episode.id(), &episode.prompt(), &episode.tool_specs());
            episode.close().await;
            json_response(StatusCode::OK, &body)
        }
        Err(e) => json_response(
            StatusCode::CONFLICT,
            &json!({"detail": crate::diagnostics::error_chain(&e)}),
        ),
    }
}

async fn step() -> Response {
    json_response(
        StatusCode::CONFLICT,
        &json!({"detail": "a step needs its episode: hermes-env episodes (one item, one sandbox) \
                           live on the WebSocket /ws; HTTP /reset is stateless"}),
    )
}

/// MCP JSON-RPC over HTTP: `tools/list` (the tools every episode gets); calls need a session.
async fn mcp<E: Environment>(State(s): State<Arc<Server<E>>>, body: axum::body::Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let reply = match request.get("method").and_then(Value::as_str) {
        Some("tools/list") => rpc_result(&request, json!({"tools": mcp_tools(&tool_specs(&s.rt.group_tools()))})),
        Some("tools/call") => rpc_error(
            &request,
            -32600,
            "tools/call needs an episode: send it as an `mcp` message on the WebSocket /ws after `reset`",
        ),
        Some(other) => rpc_error(&request, -32601, &format!("method not found: {other}")),
        None => rpc_error(&request, -32600, "Invalid Request: expected a JSON-RPC 2.0 request with a method"),
    };
    json_response(StatusCode::OK, &reply)
}

fn rpc_result(request: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request.get("id").cloned().unwrap_or(Value::Null), "result": result})
}

fn rpc_error(request: &Value, code: i64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": request.get("id").cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    })
}

fn mcp_tools(specs: &[super::episode::ToolSpec]) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema}))
            .collect(),
    )
}

/// Which item a `reset` asks for: `eval_index` picks an evaluation item, otherwise the next
/// training item. A `seed` cannot choose an item (items come from `get_next_item`).
fn pick(data: &Value) -> Result<Pick, String> {
    if data.get("seed").is_some_and(|s| !s.is_null()) {
        static SEED_SAID: std::sync::Once = std::sync::Once::new();
        SEED_SAID.call_once(|| {
            info!("reset: `seed` does not choose an item (items come from get_next_item; pass `eval_index` for an eval item); said once")
        });
    }
    match data.get("eval_index") {
        None | Some(Value::Null) => Ok(Pick::Next),
        Some(v) => v
            .as_u64()
            .map(|i| Pick::Eval(i as usize))
            .ok_or_else(|| format!("eval_index must be a non-negative integer, got {v}")),
    }
}

async fn ws<E: Environment>(
    State(s): State<Arc<Server<E>>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    upgrade
        .max_message_size(16 << 20)
        .read_buffer_size(WS_READ_BUFFER)
        .on_upgrade(move |socket| session(s, socket))
}

/// The read buffer of a session's socket. The WebSocket library's default (128 KiB) is
/// allocated and filled per connection and was most of a session's memory; messages are a
/// few hundred bytes, and longer ones are read in several chunks.
const WS_READ_BUFFER: usize = 8 << 10;

/// How long a refused connection stays open for the client to send its first message.
const REFUSAL_LINGER: Duration = Duration::from_secs(10);

/// Why a session loop stops.
enum Stop {
    /// The client closed or went away.
    Client,
    /// The server ended it; the client is told why.
    Server(Value),
}

/// One WebSocket session: refuses when full, then serves messages until it stops; its
/// episode's sandbox is torn down however it stops.
async fn session<E: Environment>(s: Arc<Server<E>>, mut socket: WebSocket) {
    let Ok(_slot) = Arc::clone(&s.slots).try_acquire_owned() else {
        let refusal = wire::error(
            ErrorCode::CapacityReached,
            &format!(
                "the server is full: {} sessions are open (--max-sessions {})",
                s.limits.max_sessions, s.limits.max_sessions
            ),
            json!({"active_sessions": s.limits.max_sessions, "max_sessions": s.limits.max_sessions}),
        );
        let _ = socket
            .send(WsMessage::Text(scrubbed(&refusal).into()))
            .await;
        // Closed only after the client's first message (or a short wait): a client that sends
        // `reset` right after connecting then reads the refusal instead of a closed socket.
        let _ = tokio::time::timeout(REFUSAL_LINGER, socket.recv()).await;
        let _ = socket.send(WsMessage::Close(None)).await;
        return;
    };
    let mut episode: Option<Episode<E>> = None;
    let lifetime = tokio::time::sleep(s.limits.lifetime);
    tokio::pin!(lifetime);
    let stop = loop {
        let received = tokio::select! {
            biased;
            () = s.shutdown.requested() => break Stop::Server(wire::error(
                ErrorCode::SessionError, "the server is shutting down", json!({}))),
            () = &mut lifetime => break Stop::Server(wire::error(
                ErrorCode::SessionError,
                &format!("the session reached its lifetime of {} s (--session-lifetime)", s.limits.lifetime.as_secs()),
                json!({}))),
            r = tokio::time::timeout(s.limits.idle_timeout, socket.recv()) => r,
        };
        let text = match received {
            Err(_) => {
                break Stop::Server(wire::error(
                    ErrorCode::SessionError,
                    &format!(
                        "the session was idle for {} s (--idle-timeout)",
                        s.limits.idle_timeout.as_secs()
                    ),
                    json!({}),
                ))
            }
            Ok(None | Some(Err(_)) | Some(Ok(WsMessage::Close(_)))) => break Stop::Client,
            Ok(Some(Ok(WsMessage::Text(t)))) => t.to_string(),
            Ok(Some(Ok(WsMessage::Binary(b)))) => String::from_utf8_lossy(&b).into_owned(),
            Ok(Some(Ok(_))) => continue,
        };
        let reply = match serde_json::from_str::<Value>(&text) {
            Err(e) => Some(wire::error(
                ErrorCode::InvalidJson,
                &format!("Invalid JSON: {e}"),
                json!({}),
            )),
            Ok(message) => match handle(&s, &mut episode, &message).await {
                Handled::Reply(v) => Some(v),
                Handled::Close => break Stop::Client,
            },
        };
        if let Some(reply) = reply {
            // A client that stops reading would hold its sandbox past both limits.
            let began = Instant::now();
            let deadline = (began + s.limits.idle_timeout).min(lifetime.deadline());
            let reply = WsMessage::Text(scrubbed(&reply).into());
            match tokio::time::timeout_at(deadline, socket.send(reply)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break Stop::Client,
                Err(_) => {
                    warn!(
                        "openenv: a client read no reply for {} s; its session is closed and its sandbox removed (--idle-timeout {}, --session-lifetime {})",
                        began.elapsed().as_secs(),
                        s.limits.idle_timeout.as_secs(),
                        s.limits.lifetime.as_secs()
                    );
                    break Stop::Client;
                }
            }
        }
    };
    if let Some(mut episode) = episode.take() {
        episode.close().await;
    }
    if let Stop::Server(why) = stop {
        let farewell = async {
            socket.send(WsMessage::Text(scrubbed(&why).into())).await?;
            socket.send(WsMessage::Close(None)).await
        };
        let _ = tokio::time::timeout(FAREWELL_WAIT, farewell).await;
    }
}

/// How long a session's last words (why the server ended it, then the close) may wait for a
/// client that does not read.
const FAREWELL_WAIT: Duration = Duration::from_secs(5);

enum Handled {
    Reply(Value),
    Close,
}

async fn handle<E: Environment>(
    s: &Server<E>,
    episode: &mut Option<Episode<E>>,
    message: &Value,
) -> Handled {
    let data = message.get("data").cloned().unwrap_or_else(|| json!({}));
    let reply = match message.get("type").and_then(Value::as_str).unwrap_or("") {
        "reset" => {
            if let Some(mut old) = episode.take() {
                old.close().await;
            }
            match pick(&data) {
                Err(m) => wire::error(ErrorCode::ValidationError, &m, json!({})),
                Ok(pick) => {
                    let id = data
                        .get("episode_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    match Episode::open(&s.env, &s.rt, pick, id).await {
                        Ok(new) => {
                            let obs =
                                wire::reset_observation(new.id(), &new.prompt(), &new.tool_specs());
                            *episode = Some(new);
                            json!({"type": "observation", "data": obs})
                        }
                        Err(e) => wire::episode_error(&e),
                    }
                }
            }
        }
        "step" => match episode.as_mut() {
            None => wire::error(
                ErrorCode::ValidationError,
                "no episode: send `reset` first",
                json!({}),
            ),
            Some(ep) => step_episode(s, ep, &data).await,
        },
        "state" => {
            let data = match episode.as_ref() {
                Some(ep) => json!({
                    "episode_id": ep.id(),
                    "step_count": ep.steps(),
                    "done": ep.is_finished(),
                    "max_turns": ep.max_turns(),
                }),
                None => json!({"episode_id": null, "step_count": 0, "done": false}),
            };
            json!({"type": "state", "data": data})
        }
        "mcp" => json!({"type": "mcp", "data": mcp_in_session(s, episode, &data).await}),
        "close" => return Handled::Close,
        other => wire::error(
            ErrorCode::UnknownType,
            &format!("Unknown message type: {other}"),
            json!({}),
        ),
    };
    Handled::Reply(reply)
}

/// One `step`: `list_tools`, `call_tool` or `submit`.
async fn step_episode<E: Environment>(s: &Server<E>, ep: &mut Episode<E>, action: &Value) -> Value {
    let observation = match action.get("type").and_then(Value::as_str) {
        Some("list_tools") => {
            wire::step_result(json!({"tools": wire::tools(&ep.tool_specs())}), None)
        }
        Some("call_tool") => {
            let Some(name) = action.get("tool_name").and_then(Value::as_str) else {
                return wire::error(
                    ErrorCode::ValidationError,
                    "call_tool needs a `tool_name`",
                    json!({}),
                );
            };
            let arguments = action.get("arguments").cloned().unwrap_or(Value::Null);
            match ep.call_tool(&s.env, &s.rt, name, &arguments).await {
                Ok(step) => wire::tool_observation(name, &step),
                Err(e) => return episode_failed(ep, &e),
            }
        }
        Some("submit") => {
            let answer = action.get("answer").cloned().unwrap_or(Value::Null);
            match ep
                .call_tool(
                    &s.env,
                    &s.rt,
                    super::episode::SUBMIT_TOOL,
                    &json!({"answer": answer}),
                )
                .await
            {
                Ok(step) => submit_observation(&step),
                Err(e) => return episode_failed(ep, &e),
            }
        }
        other => {
            return wire::error(
                ErrorCode::ValidationError,
                &format!(
                    "unknown action type {}: expected list_tools, call_tool or submit",
                    other.map_or("(none)".to_owned(), |t| format!("'{t}'"))
                ),
                json!({}),
            )
        }
    };
    json!({"type": "observation", "data": observation})
}

fn submit_observation(step: &ToolStep) -> Value {
    let mut observation = json!({"result": step.content});
    if let Some(v) = &step.verdict {
        observation["metadata"] = wire::verdict_metadata(v);
    }
    wire::step_result(observation, step.verdict.as_ref())
}

fn episode_failed<E: Environment>(ep: &Episode<E>, e: &super::episode::EpisodeError) -> Value {
    if let Some(kind) = e.outcome() {
        warn!(
            "openenv episode {} failed ({} failure, no reward): {}",
            ep.id(),
            kind.as_str(),
            crate::diagnostics::error_chain(e)
        );
    }
    wire::episode_error(e)
}

/// MCP JSON-RPC inside a session: `tools/list` and `tools/call` on the episode.
async fn mcp_in_session<E: Environment>(
    s: &Server<E>,
    episode: &mut Option<Episode<E>>,
    request: &Value,
) -> Value {
    match request.get("method").and_then(Value::as_str) {
        Some("tools/list") => {
            let specs = match episode.as_ref() {
                Some(ep) => ep.tool_specs(),
                None => tool_specs(&s.rt.group_tools()),
            };
            rpc_result(request, json!({"tools": mcp_tools(&specs)}))
        }
        Some("tools/call") => {
            let Some(ep) = episode.as_mut() else {
                return rpc_error(request, -32600, "no episode: send `reset` first");
            };
            let params = request.get("params").cloned().unwrap_or(Value::Null);
            let Some(name) = params.get("name").and_then(Value::as_str) else {
                return rpc_error(request, -32602, "tools/call needs params.name");
            };
            let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
            match ep.call_tool(&s.env, &s.rt, name, &arguments).await {
                Ok(step) => {
                    let mut result = json!({
                        "content": [{"type": "text", "text": step.content}],
                        "isError": step.fault.is_some(),
                    });
                    if let Some(v) = &step.verdict {
                        result["structuredContent"] =
                            json!({"reward": v.reward, "done": true, "outcome": v.outcome_name()});
                    }
                    rpc_result(request, result)
                }
                Err(e) => {
                    let message = crate::diagnostics::error_chain(&e);
                    let mut reply = rpc_error(request, -32000, &message);
                    if let Some(kind) = e.outcome() {
                        reply["error"]["data"] = json!({"outcome": kind.as_str()});
                    }
                    reply
                }
            }
        }
        Some(other) => rpc_error(request, -32601, &format!("method not found: {other}")),
        None => rpc_error(request, -32600, "Invalid Request"),
    }
}
