//! A local HTTP server speaking the parts of the Hugging Face Hub API that huggingface_hub
//! and the hf-hub crate use to fetch files: `HEAD`/`GET /[datasets/]REPO/resolve/REV/FILE`
//! with `X-Repo-Commit`, a quoted `ETag`, `Content-Length`, byte ranges (`206` with
//! `Content-Range`), `404` with `X-Error-Code: EntryNotFound`, and
//! `GET /api/{models,datasets}/REPO/revision/REV` with `sha` and `siblings`. An optional
//! token is required as `Authorization: Bearer …` (`401` otherwise). It runs on its own thread
//! and runtime, so blocking callers (Python subprocesses) can use it from any test.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::Response;

/// One revision of a repository: its commit and files.
#[derive(Clone, Debug)]
pub struct Revision {
    /// 40-hex commit hash.
    pub commit: String,
    /// Path → content.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// (`""` for models or `"datasets/"`, repo id, revision) → revision.
pub type Repos = BTreeMap<(String, String, String), Revision>;

/// One request the server saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

#[derive(Clone)]
struct Hub {
    repos: Arc<Repos>,
    token: Option<String>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// The running server; stopped on drop.
pub struct FakeHub {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeHub {
    /// Serves `repos`, requiring `token` when given.
    pub fn start(repos: Repos, token: Option<&str>) -> FakeHub {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hub = Hub {
            repos: Arc::new(repos),
            token: token.map(str::to_owned),
            seen: Arc::clone(&seen),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, addr) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                ready
                    .send(listener.local_addr().expect("addr"))
                    .expect("ready");
                let app = axum::Router::new().fallback(handle).with_state(hub);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("serve");
            });
        });
        let addr = addr.recv().expect("fake hub address");
        FakeHub {
            url: format!("http://{addr}"),
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A stable 40-hex stand-in for the git/LFS hash the hub uses as ETag.
pub fn etag(content: &[u8]) -> String {
    (0..3u8)
        .map(|seed| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            seed.hash(&mut h);
            content.hash(&mut h);
            format!("{:016x}", h.finish())
        })
        .collect::<String>()[..40]
        .to_owned()
}

fn reply(status: StatusCode, code: Option<&str>, body: &str) -> Response {
    let mut r = Response::builder().status(status);
    if let Some(code) = code {
        r = r.header("X-Error-Code", code);
    }
    r.body(Body::from(body.to_owned())).expect("response")
}

fn decode(segment: &str) -> String {
    segment.replace("%2F", "/").replace("%2f", "/")
}

async fn handle(State(hub): State<Hub>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    hub.seen.lock().unwrap().push(Seen {
        method: req.method().to_string(),
        path: path.clone(),
        authorization: authorization.clone(),
    });
    if let Some(token) = &hub.token {
        if authorization.as_deref() != Some(&format!("Bearer {token}")) {
            return reply(StatusCode::UNAUTHORIZED, Some("GatedRepo"), "unauthorized");
        }
    }
    if let Some(rest) = path.strip_prefix("/api/") {
        return info(&hub, rest);
    }
    resolve(&hub, req.method(), req.headers(), &path[1..])
}

fn info(hub: &Hub, rest: &str) -> Response {
    let Some((kind, rest)) = rest.split_once('/') else {
        return reply(StatusCode::NOT_FOUND, None, "no such api");
    };
    let prefix = if kind == "datasets" { "datasets/" } else { "" };
    let Some((repo, rev)) = rest.split_once("/revision/") else {
        return reply(StatusCode::NOT_FOUND, None, "no such api");
    };
    let key = (prefix.to_owned(), repo.to_owned(), decode(rev));
    let Some(revision) = hub.repos.get(&key) else {
        return reply(
            StatusCode::NOT_FOUND,
            Some("RevisionNotFound"),
            "no such revision",
        );
    };
    let siblings: Vec<_> = revision
        .files
        .keys()
        .map(|f| serde_json::json!({"rfilename": f}))
        .collect();
    let body = serde_json::json!({"id": repo, "sha": revision.commit, "siblings": siblings});
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("response")
}

fn resolve(hub: &Hub, method: &Method, headers: &HeaderMap, path: &str) -> Response {
    let (prefix, path) = match path.strip_prefix("datasets/") {
        Some(rest) => ("datasets/", rest),
        None => ("", path),
    };
    let Some((repo, rest)) = path.split_once("/resolve/") else {
        return reply(StatusCode::NOT_FOUND, None, "not a resolve url");
    };
    let Some((rev, file)) = rest.split_once('/') else {
        return reply(StatusCode::NOT_FOUND, None, "no file");
    };
    let key = (prefix.to_owned(), repo.to_owned(), decode(rev));
    let Some(revision) = hub.repos.get(&key) else {
        return reply(
            StatusCode::NOT_FOUND,
            Some("RevisionNotFound"),
            "no such revision",
        );
    };
    let Some(content) = revision.files.get(file) else {
        return reply(StatusCode::NOT_FOUND, Some("EntryNotFound"), "no such file");
    };
    let total = content.len();
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.split_once('-'))
        .map(|(a, b)| {
            let start: usize = a.parse().unwrap_or(0);
            let end: usize = b.parse().unwrap_or(total.saturating_sub(1));
            (start.min(total), end.min(total.saturating_sub(1)))
        });
    let builder = Response::builder()
        .header("X-Repo-Commit", &revision.commit)
        .header(header::ETAG, format!("\"{}\"", etag(content)))
        .header(header::ACCEPT_RANGES, "bytes");
    let (status, body, builder) = match range {
        Some((start, end)) if method == Method::GET && total > 0 => (
            StatusCode::PARTIAL_CONTENT,
            content[start..=end].to_vec(),
            builder.header(
                header::CONTENT_RANGE,
                format!("bytes {start}-{end}/{total}"),
            ),
        ),
        _ => (StatusCode::OK, content.clone(), builder),
    };
    builder
        .status(status)
        .header(header::CONTENT_LENGTH, body.len())
        .body(Body::from(body))
        .expect("response")
}
