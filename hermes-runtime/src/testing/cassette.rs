//! Cassettes: record a real inference server's answers once, replay them deterministically.
//!
//! [`CassetteRecorder`] is an OpenAI-compatible proxy on 127.0.0.1 that forwards chat requests
//! to a real server and keeps each answer; [`Cassette`] saves them as JSON lines; and
//! [`CassettePlayer`] is a [`Policy`] that answers a conversation with the answer recorded for
//! the same branch (same prompt, same assistant turns so far), so replays are deterministic even
//! when a group's rollouts run concurrently. Only bodies are stored: no headers, no API keys.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::events;
use super::local_http::serve_until_dropped;
use super::server::{Policy, Reply};
use crate::atropos::json::to_python_string;

/// Which conversation branch a request belongs to: its first user message and the assistant
/// turns so far (content and tool calls; tool results are left out since paths and timings vary).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BranchKey {
    /// The first user message.
    pub prompt: String,
    /// Each earlier assistant turn as compact JSON of its content and `(name, arguments)` calls.
    pub assistant_turns: Vec<String>,
}

impl BranchKey {
    /// The key of a chat-completions request body.
    pub fn of(request: &Value) -> Self {
        let messages = request
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let role = |m: &Value, r: &str| m.get("role").and_then(Value::as_str) == Some(r);
        let prompt = messages
            .iter()
            .find(|m| role(m, "user"))
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let assistant_turns = messages
            .iter()
            .filter(|m| role(m, "assistant"))
            .map(|m| {
                let calls: Vec<Value> = m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        json!([
                            c.pointer("/function/name"),
                            c.pointer("/function/arguments")
                        ])
                    })
                    .collect();
                to_python_string(&json!([m.get("content"), calls]))
            })
            .collect();
        BranchKey {
            prompt,
            assistant_turns,
        }
    }
}

/// One recorded request and the server's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// The branch the request belonged to.
    pub key: BranchKey,
    /// The request body as sent.
    pub request: Value,
    /// HTTP status of the answer.
    pub status: u16,
    /// The answer body (JSON when the server sent JSON, else a string).
    pub response: Value,
}

/// A recorded session: interactions in the order they happened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cassette {
    /// The interactions.
    pub interactions: Vec<Interaction>,
}

impl Cassette {
    /// Reads a cassette file (one interaction per line).
    pub fn load(path: &Path) -> std::io::Result<Self> {
        let file = std::io::BufReader::new(std::fs::File::open(path)?);
        let mut interactions = Vec::new();
        for (i, line) in file.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let entry = serde_json::from_str(&line).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} line {}: {e}", path.display(), i + 1),
                )
            })?;
            interactions.push(entry);
        }
        Ok(Cassette { interactions })
    }

    /// Writes the cassette (one interaction per line), creating parent directories.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for entry in &self.interactions {
            writeln!(out, "{}", to_python_string(entry))?;
        }
        out.flush()
    }
}

/// Replays a [`Cassette`]: each request gets the answer recorded for its branch; several
/// answers for one branch (identical rollouts of a group) are handed out in recorded order.
#[derive(Debug)]
pub struct CassettePlayer {
    answers: HashMap<BranchKey, Vec<(u16, Value)>>,
    cursors: Mutex<HashMap<BranchKey, usize>>,
}

impl CassettePlayer {
    /// A player over `cassette`.
    pub fn new(cassette: Cassette) -> Self {
        let mut answers: HashMap<BranchKey, Vec<(u16, Value)>> = HashMap::new();
        for i in cassette.interactions {
            answers
                .entry(i.key)
                .or_default()
                .push((i.status, i.response));
        }
        CassettePlayer {
            answers,
            cursors: Mutex::new(HashMap::new()),
        }
    }
}

fn reply_from_response(status: u16, response: &Value) -> Reply {
    if status != 200 {
        return Reply::Status(
            status,
            response
                .as_str()
                .map_or_else(|| response.to_string(), str::to_owned),
        );
    }
    let Some(message) = response.pointer("/choices/0/message") else {
        return if response.get("choices").is_some() {
            Reply::NoChoices
        } else {
            Reply::Raw(response.to_string())
        };
    };
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let name = c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let args = match c.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            (name, args)
        })
        .collect();
    Reply::Message {
        content: message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        tool_calls,
        reasoning: message
            .get("reasoning_content")
            .or_else(|| message.get("reasoning"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

impl Policy for CassettePlayer {
    fn respond(&self, request: &Value) -> Reply {
        let key = BranchKey::of(request);
        let Some(answers) = self.answers.get(&key) else {
            return Reply::Status(
                500,
                format!(
                    "the cassette has no answer for this conversation (prompt {:?}, assistant turn {}); record it again",
                    key.prompt.chars().take(80).collect::<String>(),
                    key.assistant_turns.len() + 1
                ),
            );
        };
        let mut cursors = self.cursors.lock().expect("lock poisoned");
        let cursor = cursors.entry(key).or_default();
        let (status, response) = &answers[*cursor % answers.len()];
        *cursor += 1;
        reply_from_response(*status, response)
    }
}

struct Upstream {
    http: reqwest::Client,
    url: String,
    models_url: String,
    api_key: Option<String>,
    recorded: Mutex<Vec<Interaction>>,
}

/// A recording proxy in front of a real OpenAI-compatible server; stops when dropped.
pub struct CassetteRecorder {
    addr: SocketAddr,
    upstream: Arc<Upstream>,
    _stop: oneshot::Sender<()>,
}

impl std::fmt::Debug for CassetteRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassetteRecorder")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream.url)
            .finish()
    }
}

impl CassetteRecorder {
    /// Starts a proxy on 127.0.0.1 forwarding to `upstream_base_url` (e.g. `http://host/v1`).
    pub async fn start(upstream_base_url: &str, api_key: Option<String>) -> std::io::Result<Self> {
        let http = crate::tls::client_builder()
            .build()
            .map_err(std::io::Error::other)?;
        let upstream = Arc::new(Upstream {
            http,
            url: format!(
                "{}/chat/completions",
                upstream_base_url.trim_end_matches('/')
            ),
            models_url: format!("{}/models", upstream_base_url.trim_end_matches('/')),
            api_key,
            recorded: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(forward))
            .route("/v1/models", get(models))
            .with_state(Arc::clone(&upstream));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stop = serve_until_dropped(listener, app);
        Ok(CassetteRecorder {
            addr,
            upstream,
            _stop: stop,
        })
    }

    /// `http://127.0.0.1:PORT/v1`, to use as `--openai.base_url` while recording.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Everything recorded so far, in order.
    pub fn cassette(&self) -> Cassette {
        Cassette {
            interactions: self
                .upstream
                .recorded
                .lock()
                .expect("lock poisoned")
                .clone(),
        }
    }
}

/// Passes `GET /v1/models` through unrecorded, so that a run's start-up health check sees the
/// real server.
async fn models(State(upstream): State<Arc<Upstream>>) -> Response {
    let mut request = upstream.http.get(&upstream.models_url);
    if let Some(key) = &upstream.api_key {
        request = request.bearer_auth(key);
    }
    match request.send().await {
        Ok(r) => {
            let code = StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            (code, r.text().await.unwrap_or_default()).into_response()
        }
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            format!("upstream unreachable: {e}"),
        )
            .into_response(),
    }
}

/// Forwards a chat request and records the answer. A streaming request is forwarded without
/// `stream`, so that the cassette holds the plain completion, and answered as a stream.
async fn forward(State(upstream): State<Arc<Upstream>>, Json(body): Json<Value>) -> Response {
    let stream = events::wants_stream(&body);
    let body = events::without_stream(body);
    let mut request = upstream.http.post(&upstream.url).json(&body);
    if let Some(key) = &upstream.api_key {
        request = request.bearer_auth(key);
    }
    let (status, response) = match request.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        }
        Err(e) => (502, Value::String(format!("upstream unreachable: {e}"))),
    };
    upstream
        .recorded
        .lock()
        .expect("lock poisoned")
        .push(Interaction {
            key: BranchKey::of(&body),
            request: body,
            status,
            response: response.clone(),
        });
    if stream && status == 200 && response.get("choices").is_some() {
        return events::streamed(&response, std::time::Duration::ZERO);
    }
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, Json(response)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prompt: &str, assistant: &[Value]) -> Value {
        let mut messages = vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": prompt}),
        ];
        for a in assistant {
            messages.push(a.clone());
            messages.push(json!({"role": "tool", "tool_call_id": "x", "content": "/tmp/varies"}));
        }
        json!({"model": "m", "messages": messages})
    }

    #[test]
    fn branch_keys_ignore_tool_results_but_not_assistant_turns() {
        let call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
            "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}]});
        let mut other_result = request("p", std::slice::from_ref(&call));
        other_result["messages"][3]["content"] = json!("different output");
        assert_eq!(
            BranchKey::of(&request("p", std::slice::from_ref(&call))),
            BranchKey::of(&other_result)
        );
        assert_ne!(
            BranchKey::of(&request("p", &[call])),
            BranchKey::of(&request("p", &[]))
        );
    }

    #[test]
    fn player_replays_by_branch_and_reports_unknown_ones() {
        let answer =
            |text: &str| json!({"choices": [{"message": {"role": "assistant", "content": text}}]});
        let cassette = Cassette {
            interactions: vec![
                Interaction {
                    key: BranchKey::of(&request("p", &[])),
                    request: json!({}),
                    status: 200,
                    response: answer("one"),
                },
                Interaction {
                    key: BranchKey::of(&request("p", &[])),
                    request: json!({}),
                    status: 200,
                    response: answer("two"),
                },
                Interaction {
                    key: BranchKey::of(&request("q", &[])),
                    request: json!({}),
                    status: 503,
                    response: json!("busy"),
                },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        cassette.save(&path).unwrap();
        let player = CassettePlayer::new(Cassette::load(&path).unwrap());
        assert_eq!(player.respond(&request("p", &[])), Reply::text("one"));
        assert_eq!(player.respond(&request("p", &[])), Reply::text("two"));
        assert_eq!(
            player.respond(&request("q", &[])),
            Reply::Status(503, "busy".into())
        );
        assert!(
            matches!(player.respond(&request("r", &[])), Reply::Status(500, m) if m.contains("no answer"))
        );
    }
}
