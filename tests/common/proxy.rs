//! A fault-injecting HTTP proxy on 127.0.0.1 for the tests: forwards every request to an
//! upstream server unchanged, except the paths it is told to block, which get a 503 without
//! reaching the upstream.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

struct Shared {
    upstream: String,
    http: reqwest::Client,
    blocked: Mutex<Vec<String>>,
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// A pass-through proxy in front of `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> FaultProxy {
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: super::atropos::http(),
            blocked: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FaultProxy { shared, url, task }
    }

    /// Answers requests whose path starts with one of `prefixes` with 503 from now on
    /// (an empty list passes everything again).
    pub fn block(&self, prefixes: &[&str]) {
        *self.shared.blocked.lock().unwrap() = prefixes.iter().map(|p| p.to_string()).collect();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let blocked = shared
        .blocked
        .lock()
        .unwrap()
        .iter()
        .any(|p| path.starts_with(p.as_str()));
    if blocked {
        return (StatusCode::SERVICE_UNAVAILABLE, "blocked by the test proxy").into_response();
    }
    let target = format!(
        "{}{}",
        shared.upstream,
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut request = shared.http.request(method, target).body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            let mut out_headers = HeaderMap::new();
            for (name, value) in response.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    out_headers.insert(name.clone(), value.clone());
                }
            }
            let bytes = response.bytes().await.unwrap_or_default();
            (status, out_headers, bytes).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("upstream: {e}")).into_response(),
    }
}
