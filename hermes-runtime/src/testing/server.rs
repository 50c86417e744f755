//! An OpenAI-compatible chat-completions server on 127.0.0.1 whose answers come from a
//! [`Policy`]: a fixed script, a reference-solution player, or any closure. Real HTTP, so the
//! whole client path (serialisation, retries, errors) is exercised.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An assistant message, with optional tool calls (name, raw argument text) and reasoning.
    Message {
        /// Text content.
        content: String,
        /// Tool calls as (name, raw JSON arguments).
        tool_calls: Vec<(String, String)>,
        /// `reasoning_content` to return.
        reasoning: Option<String>,
    },
    /// An HTTP error status with this body.
    Status(u16, String),
    /// A 200 response with an empty `choices` list.
    NoChoices,
    /// A 200 response whose body is this raw text (e.g. not JSON).
    Raw(String),
}

impl Reply {
    /// A plain answer.
    pub fn text(content: impl Into<String>) -> Self {
        Reply::Message {
            content: content.into(),
            tool_calls: Vec::new(),
            reasoning: None,
        }
    }

    /// A single tool call with JSON arguments.
    pub fn tool(name: &str, arguments: Value) -> Self {
        Self::tool_raw(name, &arguments.to_string())
    }

    /// A single tool call with raw argument text (may be malformed on purpose).
    pub fn tool_raw(name: &str, arguments: &str) -> Self {
        Reply::Message {
            content: String::new(),
            tool_calls: vec![(name.to_owned(), arguments.to_owned())],
            reasoning: None,
        }
    }

    /// Adds another tool call to a message reply.
    pub fn and_tool(mut self, name: &str, arguments: Value) -> Self {
        if let Reply::Message { tool_calls, .. } = &mut self {
            tool_calls.push((name.to_owned(), arguments.to_string()));
        }
        self
    }

    /// Sets the reasoning text of a message reply.
    pub fn with_reasoning(mut self, text: &str) -> Self {
        if let Reply::Message { reasoning, .. } = &mut self {
            *reasoning = Some(text.to_owned());
        }
        self
    }
}

/// Decides the answer to each chat request (the request body as JSON).
pub trait Policy: Send + Sync + 'static {
    /// The answer to `request`.
    fn respond(&self, request: &Value) -> Reply;
}

impl<F: Fn(&Value) -> Reply + Send + Sync + 'static> Policy for F {
    fn respond(&self, request: &Value) -> Reply {
        self(request)
    }
}

/// Answers requests with a fixed sequence of replies, in order, whatever they ask; once
/// exhausted, every request gets HTTP 500 "script exhausted".
#[derive(Debug, Default)]
pub struct Script {
    replies: Mutex<VecDeque<Reply>>,
}

impl Script {
    /// A script of these replies.
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> Self {
        Script {
            replies: Mutex::new(replies.into_iter().collect()),
        }
    }
}

impl Policy for Script {
    fn respond(&self, _request: &Value) -> Reply {
        self.replies
            .lock()
            .expect("lock poisoned")
            .pop_front()
            .unwrap_or_else(|| Reply::Status(500, "script exhausted".into()))
    }
}

struct Shared {
    policy: Box<dyn Policy>,
    requests: Mutex<Vec<Value>>,
    counter: AtomicU64,
    record: bool,
}

/// A running scripted server; stops when dropped.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ScriptedServer {
    /// Starts a server on a free port of 127.0.0.1 that records every request body.
    pub async fn start(policy: impl Policy) -> std::io::Result<Self> {
        Self::start_with(policy, true).await
    }

    /// Starts a server; `record = false` keeps no request bodies (for long benchmarks).
    pub async fn start_with(policy: impl Policy, record: bool) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            policy: Box::new(policy),
            requests: Mutex::new(Vec::new()),
            counter: AtomicU64::new(0),
            record,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(ScriptedServer {
            addr,
            shared,
            _stop: stop,
        })
    }

    /// `http://127.0.0.1:PORT/v1`, for `--openai.base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().expect("lock poisoned").clone()
    }

    /// Number of chat requests answered.
    pub fn request_count(&self) -> u64 {
        self.shared.counter.load(Ordering::Relaxed)
    }
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
}

async fn chat(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    let n = shared.counter.fetch_add(1, Ordering::Relaxed);
    let reply = shared.policy.respond(&body);
    let model = body.get("model").cloned().unwrap_or(Value::Null);
    if shared.record {
        shared.requests.lock().expect("lock poisoned").push(body);
    }
    match reply {
        Reply::Status(code, text) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                status,
                Json(json!({"error": {"message": text, "type": "scripted_error"}})),
            )
                .into_response()
        }
        Reply::Raw(text) => (StatusCode::OK, text).into_response(),
        Reply::NoChoices => {
            Json(json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "choices": []}))
                .into_response()
        }
        Reply::Message {
            content,
            tool_calls,
            reasoning,
        } => {
            let mut message = json!({"role": "assistant", "content": content});
            let finish = if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args))| {
                        json!({"id": format!("call_{n:04x}{i:04x}"), "type": "function",
                               "function": {"name": name, "arguments": args}})
                    })
                    .collect();
                message["tool_calls"] = Value::Array(calls);
            }
            if let Some(r) = reasoning {
                message["reasoning_content"] = Value::String(r);
            }
            Json(json!({
                "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            }))
            .into_response()
        }
    }
}
