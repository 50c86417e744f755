//! A W&B stand-in on 127.0.0.1 that records every request: answers `UpsertBucket` and
//! `CreateRunFiles` GraphQL calls, accepts `file_stream` posts and upload PUTs, and can fail
//! or hang instead (to test that logging never slows rollouts).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use super::local_http::serve_until_dropped;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// How the stand-in answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandInBehavior {
    /// Like W&B.
    Ok,
    /// Every request gets this HTTP status.
    Fail(u16),
    /// Requests are accepted and never answered.
    Hang,
}

/// One recorded request.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path (no query).
    pub path: String,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// The body as JSON (`null` when it is not JSON).
    pub json: Value,
    /// The raw body.
    pub body: Vec<u8>,
}

struct Shared {
    behavior: StandInBehavior,
    addr: SocketAddr,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A running stand-in; stops when dropped.
pub struct WandbStandIn {
    shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

impl WandbStandIn {
    /// Starts a stand-in on a free port.
    pub async fn start(behavior: StandInBehavior) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            behavior,
            addr,
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let stop = serve_until_dropped(listener, app);
        Ok(WandbStandIn {
            shared,
            _stop: stop,
        })
    }

    /// `http://127.0.0.1:PORT`, for `WANDB_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().expect("lock poisoned").clone()
    }

    /// GraphQL requests of `operation` (their `variables`).
    pub fn graphql(&self, operation: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/graphql" && r.json["operationName"] == operation)
            .map(|r| r.json["variables"].clone())
            .collect()
    }

    /// The bodies of every `file_stream` post.
    pub fn file_stream(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/file_stream"))
            .map(|r| r.json)
            .collect()
    }

    /// The history as the server assembled it from `file_stream` offsets; panics on a gap.
    pub fn history(&self) -> Vec<Value> {
        let mut lines: BTreeMap<u64, String> = BTreeMap::new();
        for body in self.file_stream() {
            let part = &body["files"]["wandb-history.jsonl"];
            let offset = part["offset"].as_u64().unwrap_or(0);
            for (i, line) in part["content"].as_array().into_iter().flatten().enumerate() {
                lines.insert(
                    offset + i as u64,
                    line.as_str().unwrap_or_default().to_owned(),
                );
            }
        }
        lines
            .into_iter()
            .enumerate()
            .map(|(i, (offset, line))| {
                assert_eq!(i as u64, offset, "history has a gap before line {offset}");
                serde_json::from_str(&line).expect("history lines are JSON")
            })
            .collect()
    }

    /// The last summary sent.
    pub fn summary(&self) -> Option<Value> {
        self.file_stream()
            .iter()
            .filter_map(|b| b["files"]["wandb-summary.json"]["content"][0].as_str())
            .next_back()
            .map(|s| serde_json::from_str(s).expect("the summary is JSON"))
    }

    /// Uploaded files by run-relative path (the last upload of each).
    pub fn uploads(&self) -> BTreeMap<String, Vec<u8>> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .filter_map(|r| {
                r.path
                    .strip_prefix("/upload/")
                    .map(|p| (p.to_owned(), r.body))
            })
            .collect()
    }

    /// The exit code of the `complete` post, if the run was completed.
    pub fn exit_code(&self) -> Option<i64> {
        self.file_stream()
            .iter()
            .find(|b| b["complete"] == true)
            .and_then(|b| b["exitcode"].as_i64())
    }
}

async fn handle(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let request = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        json: json.clone(),
        body: body.to_vec(),
    };
    shared.requests.lock().expect("lock poisoned").push(request);
    match shared.behavior {
        StandInBehavior::Hang => std::future::pending::<Response>().await,
        StandInBehavior::Fail(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, "stand-in failure").into_response()
        }
        StandInBehavior::Ok => answer(&shared, &method, uri.path(), &json),
    }
}

fn answer(shared: &Shared, method: &Method, path: &str, body: &Value) -> Response {
    if path == "/graphql" {
        let vars = &body["variables"];
        return match body["operationName"].as_str() {
            Some("UpsertBucket") => axum::Json(json!({"data": {"upsertBucket": {
                "bucket": {
                    "id": format!("storage-{}", vars["name"].as_str().unwrap_or("run")),
                    "name": vars["name"],
                    "displayName": vars["displayName"],
                    "project": {"id": "p1", "name": vars["project"].as_str().unwrap_or("uncategorized"),
                                "entity": {"id": "e1", "name": vars["entity"].as_str().unwrap_or("stand-in-entity")}},
                },
                "inserted": true,
            }}}))
            .into_response(),
            Some("CreateRunFiles") => {
                let files: Vec<Value> = vars["files"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|f| json!({"name": f, "uploadUrl": format!("http://{}/upload/{f}", shared.addr)}))
                    .collect();
                axum::Json(json!({"data": {"createRunFiles": {
                    "runID": format!("storage-{}", vars["run"].as_str().unwrap_or("run")),
                    "uploadHeaders": ["Content-Type:application/json"],
                    "files": files,
                }}}))
                .into_response()
            }
            _ => axum::Json(json!({"errors": [{"message": "unknown operation"}]})).into_response(),
        };
    }
    if path.ends_with("/file_stream") && method == Method::POST {
        return axum::Json(json!({"exitcode": null, "limits": {}})).into_response();
    }
    if path.starts_with("/upload/") && method == Method::PUT {
        return StatusCode::OK.into_response();
    }
    StatusCode::NOT_FOUND.into_response()
}
