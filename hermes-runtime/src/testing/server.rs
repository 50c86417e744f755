//! An OpenAI-compatible chat-completions server on 127.0.0.1 whose answers come from a
//! [`Policy`]: a fixed script, a reference-solution player, or any closure. Real HTTP, so the
//! whole client path (serialisation, retries, errors) is exercised. It also answers vLLM's and
//! SGLang's native `/generate` (token ids in, token ids and logprobs out) with a tokenizer —
//! the built-in tiny one unless given — so Phase 2 runs without a model: the prompt is decoded,
//! split back into ChatML messages for the policy, and the reply is rendered as raw Hermes text
//! (`<tool_call>{…}</tool_call>`), encoded, ended with the end-of-turn token and cut at
//! `max_tokens` (`finish_reason: length`). A chat request with `stream: true` is answered with
//! server-sent events, as vLLM and SGLang stream ([`super::events`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::events;
use super::local_http::serve_until_dropped;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::llm::ChatTokenizer;

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
    /// An HTTP error status with this message (in an OpenAI-style `{"error": …}` body).
    Status(u16, String),
    /// An HTTP status with exactly this JSON body: a real server's error, byte for byte.
    ErrorBody(u16, String),
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
    tokenizer: Arc<ChatTokenizer>,
    /// How long each answer waits before it is sent (a slow inference server).
    delay: Mutex<std::time::Duration>,
}

impl Shared {
    async fn wait_out_delay(&self) {
        let delay = *self.delay.lock().expect("lock poisoned");
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
    }
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
        Self::start_with_tokenizer(policy, record, Arc::new(ChatTokenizer::builtin())).await
    }

    /// Starts a server whose `/generate` uses `tokenizer` (its chat template must be ChatML
    /// for the policy to see separate messages; otherwise it sees one user message).
    pub async fn start_with_tokenizer(
        policy: impl Policy,
        record: bool,
        tokenizer: Arc<ChatTokenizer>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            policy: Box::new(policy),
            requests: Mutex::new(Vec::new()),
            counter: AtomicU64::new(0),
            record,
            tokenizer,
            delay: Mutex::default(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/generate", post(generate))
            .route("/v1/models", get(models))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stop = serve_until_dropped(listener, app);
        Ok(ScriptedServer {
            addr,
            shared,
            _stop: stop,
        })
    }

    /// The tokenizer `/generate` decodes and encodes with.
    pub fn tokenizer(&self) -> &Arc<ChatTokenizer> {
        &self.shared.tokenizer
    }

    /// `http://127.0.0.1:PORT/v1`, for `--openai.base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().expect("lock poisoned").clone()
    }

    /// Delays every later answer by `delay`, as a slow or overloaded server would.
    pub fn set_delay(&self, delay: std::time::Duration) {
        *self.shared.delay.lock().expect("lock poisoned") = delay;
    }

    /// Number of chat requests answered.
    pub fn request_count(&self) -> u64 {
        self.shared.counter.load(Ordering::Relaxed)
    }
}

/// `body` as JSON with status `code`.
fn error_body(code: u16, body: String) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
}

async fn chat(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    let n = shared.counter.fetch_add(1, Ordering::Relaxed);
    let reply = shared.policy.respond(&body);
    let body_n = body.get("n").and_then(Value::as_u64).unwrap_or(1) as usize;
    let request_body = body.clone();
    let model = body.get("model").cloned().unwrap_or(Value::Null);
    let stream = events::wants_stream(&body);
    if shared.record {
        shared.requests.lock().expect("lock poisoned").push(body);
    }
    let completion = match reply {
        Reply::NoChoices => {
            json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "choices": []})
        }
        first @ Reply::Message { .. } => {
            // `n` choices, one answer of the policy each (as `/generate` does); the first
            // answer that is not a message ends the list.
            let wanted = body_n.max(1);
            let mut replies = vec![first];
            while replies.len() < wanted {
                match shared.policy.respond(&request_body) {
                    more @ Reply::Message { .. } => replies.push(more),
                    _ => break,
                }
            }
            let choices: Vec<Value> = replies
                .into_iter()
                .enumerate()
                .map(|(index, reply)| chat_choice(n, index, reply))
                .collect();
            json!({
                "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": model,
                "choices": choices,
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            })
        }
        // Errors and broken answers come whole, before any streaming (as real servers send
        // a refused request's error).
        other => {
            shared.wait_out_delay().await;
            return match other {
                Reply::Status(code, text) => {
                    let status =
                        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                    (
                        status,
                        Json(json!({"error": {"message": text, "type": "scripted_error"}})),
                    )
                        .into_response()
                }
                Reply::Raw(text) => (StatusCode::OK, text).into_response(),
                Reply::ErrorBody(code, body) => error_body(code, body),
                Reply::NoChoices | Reply::Message { .. } => unreachable!("answered above"),
            };
        }
    };
    if stream {
        // The head at once, the events after the delay: a slow server, not a stalled one.
        let delay = *shared.delay.lock().expect("lock poisoned");
        return events::streamed(&completion, delay);
    }
    shared.wait_out_delay().await;
    Json(completion).into_response()
}

/// One chat choice at `index` of response number `n` from a message reply.
fn chat_choice(n: u64, index: usize, reply: Reply) -> Value {
    let Reply::Message {
        content,
        tool_calls,
        reasoning,
    } = reply
    else {
        unreachable!("only message replies become choices")
    };
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
                // Unique per choice; the first choice's ids are those of a one-choice answer.
                let id = match index {
                    0 => format!("call_{n:04x}{i:04x}"),
                    _ => format!("call_{n:04x}c{index}_{i:04x}"),
                };
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    if let Some(r) = reasoning {
        message["reasoning_content"] = Value::String(r);
    }
    json!({"index": index, "message": message, "finish_reason": finish})
}

/// Splits a ChatML prompt back into messages; the trailing generation prompt is dropped.
/// Text that is not ChatML becomes one user message.
pub fn chatml_messages(prompt: &str) -> Vec<Value> {
    if !prompt.contains("<|im_start|>") {
        return vec![json!({"role": "user", "content": prompt})];
    }
    prompt
        .split("<|im_start|>")
        .filter(|chunk| !chunk.is_empty())
        .filter_map(|chunk| {
            let (role, rest) = chunk.split_once('\n').unwrap_or((chunk, ""));
            let content = rest.strip_suffix('\n').unwrap_or(rest);
            let content = content.strip_suffix("<|im_end|>")?;
            Some(json!({"role": role, "content": content}))
        })
        .collect()
}

/// A reply as the model's raw text: optional `<think>` block, content, Hermes tool calls.
fn raw_text(content: &str, tool_calls: &[(String, String)], reasoning: Option<&str>) -> String {
    let mut text = String::new();
    if let Some(r) = reasoning {
        text.push_str(&format!("<think>{r}</think>"));
    }
    text.push_str(content);
    for (name, args) in tool_calls {
        let args = if args.trim().is_empty() {
            "{}"
        } else {
            args.as_str()
        };
        let name = serde_json::to_string(name).expect("a string serialises");
        text.push_str(&format!(
            "<tool_call>{{\"name\": {name}, \"arguments\": {args}}}</tool_call>"
        ));
    }
    text
}

/// A deterministic stand-in logprob for output position `i` (never 1.0).
fn scripted_logprob(i: usize) -> f64 {
    -((i % 7) as f64 + 1.0) / 8.0
}

async fn generate(State(shared): State<Arc<Shared>>, Json(body): Json<Value>) -> Response {
    shared.counter.fetch_add(1, Ordering::Relaxed);
    let ids_of = |v: &Value| -> Option<Vec<u32>> {
        v.as_array()?
            .iter()
            .map(|x| x.as_u64().map(|n| n as u32))
            .collect()
    };
    let (input, sglang) = match (
        body.pointer("/prompt/prompt_token_ids").and_then(ids_of),
        body.get("input_ids").and_then(ids_of),
    ) {
        (Some(ids), _) => (ids, false),
        (None, Some(ids)) => (ids, true),
        _ => {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                "expected prompt.prompt_token_ids (vLLM) or input_ids (SGLang)",
            )
                .into_response()
        }
    };
    let params = if sglang {
        body.get("sampling_params").cloned().unwrap_or_default()
    } else {
        body.clone()
    };
    let n = params.get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
    let max_tokens = params
        .get(if sglang {
            "max_new_tokens"
        } else {
            "max_tokens"
        })
        .and_then(Value::as_u64)
        .map(|m| m as usize);
    let tok = &shared.tokenizer;
    let prompt = match tok.decode(&input, false) {
        Ok(p) => p,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let request = json!({"messages": chatml_messages(&prompt), "max_tokens": max_tokens});
    if shared.record {
        shared
            .requests
            .lock()
            .expect("lock poisoned")
            .push(body.clone());
    }
    let mut samples = Vec::new();
    for _ in 0..n {
        shared.wait_out_delay().await;
        let text = match shared.policy.respond(&request) {
            Reply::Message {
                content,
                tool_calls,
                reasoning,
            } => raw_text(&content, &tool_calls, reasoning.as_deref()),
            Reply::Status(code, text) => {
                let status =
                    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return (status, text).into_response();
            }
            Reply::NoChoices => String::new(),
            Reply::Raw(text) => return (StatusCode::OK, text).into_response(),
            Reply::ErrorBody(code, body) => return error_body(code, body),
        };
        let mut ids = match tok.encode(&text, false) {
            Ok(ids) => ids,
            Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        };
        ids.extend(tok.eos_id());
        let mut finish = "stop";
        if let Some(m) = max_tokens.filter(|&m| ids.len() > m) {
            ids.truncate(m);
            finish = "length";
        }
        samples.push((ids, finish));
    }
    let text_of = |ids: &[u32]| tok.decode(ids, true).unwrap_or_default();
    if sglang {
        let out: Vec<Value> = samples
            .iter()
            .map(|(ids, finish)| {
                let lps: Vec<Value> = ids
                    .iter()
                    .enumerate()
                    .map(|(i, id)| json!([scripted_logprob(i), id, null]))
                    .collect();
                json!({"text": text_of(ids), "meta_info": {"output_token_logprobs": lps,
                       "finish_reason": {"type": finish}}})
            })
            .collect();
        return Json(Value::Array(out)).into_response();
    }
    let logprobs: Vec<Value> = samples
        .iter()
        .map(|(ids, _)| {
            ids.iter()
                .enumerate()
                .map(|(i, id)| json!([{ id.to_string(): scripted_logprob(i) }]))
                .collect()
        })
        .collect();
    Json(json!({
        "text": samples.iter().map(|(ids, _)| text_of(ids)).collect::<Vec<_>>(),
        "prompt": prompt,
        "finish_reasons": samples.iter().map(|(_, f)| *f).collect::<Vec<_>>(),
        "logprobs": logprobs,
        "prompt_token_ids": input,
        "token_ids": samples.iter().map(|(ids, _)| ids.clone()).collect::<Vec<_>>(),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_prompts_split_back_into_messages() {
        let prompt = "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA\nB<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(
            chatml_messages(prompt),
            vec![
                json!({"role": "user", "content": "U"}),
                json!({"role": "assistant", "content": "A\nB"})
            ]
        );
        assert_eq!(
            chatml_messages("plain"),
            vec![json!({"role": "user", "content": "plain"})]
        );
    }

    #[test]
    fn replies_become_raw_hermes_text() {
        let calls = vec![
            ("terminal".to_owned(), r#"{"command": "ls"}"#.to_owned()),
            ("todo".to_owned(), String::new()),
        ];
        assert_eq!(
            raw_text("hi", &calls, Some("r")),
            r#"<think>r</think>hi<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}</tool_call><tool_call>{"name": "todo", "arguments": {}}</tool_call>"#
        );
    }
}
