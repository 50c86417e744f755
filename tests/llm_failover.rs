//! Retries and failover of both inference clients against real HTTP servers on 127.0.0.1: the
//! scripted server, a closed port, and a fault-injecting proxy written here (500s, stalls with
//! no answer and mid-stream, 429 with Retry-After, 4xx); streamed answers that stop, break off
//! or are malformed; a server host that drops off the network (a test host, needs root); an
//! agent-loop rollout with one dead server; and `process` at the default settings through
//! 30 % 5xx and 10 % stalls.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use common::logs::Logs;
use futures::StreamExt;
use hermes_env::testing::{Reply, Script, ScriptedServer};
use hermes_runtime::config::{ApiServerConfig, ServerType};
use hermes_runtime::llm::generate::GenerateRequest;
use hermes_runtime::llm::{
    ChatRequest, Failover, GenerateClient, LlmClient, LlmError, Message, RetryPolicy, ServerPool,
    Split,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// The fault-injecting proxy

/// What the proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// Pass it to the upstream server.
    Forward,
    /// Answer this status (the body echoes the request's Authorization header).
    Status(u16),
    /// Answer 429 with this Retry-After value.
    TooMany(&'static str),
    /// Accept it and never answer.
    Stall,
    /// Pass it on, send the answer's head and first event (or, not streamed, the first half of
    /// its body), then never send more.
    StallMidStream,
}

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    path: String,
    fault: Fault,
}

type Decide = dyn Fn(u64, &str) -> Fault + Send + Sync;

struct ProxyState {
    upstream: Option<String>,
    decide: Box<Decide>,
    count: AtomicU64,
    seen: Mutex<Vec<Seen>>,
    http: reqwest::Client,
}

/// A proxy on 127.0.0.1 in front of `upstream` (a server root), deciding each request's fate
/// by its number (0-based) and path.
struct Proxy {
    addr: std::net::SocketAddr,
    state: Arc<ProxyState>,
}

impl Proxy {
    async fn start(
        upstream: Option<&ScriptedServer>,
        decide: impl Fn(u64, &str) -> Fault + Send + Sync + 'static,
    ) -> Proxy {
        let state = Arc::new(ProxyState {
            upstream: upstream.map(|s| s.base_url().trim_end_matches("/v1").to_owned()),
            decide: Box::new(decide),
            count: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
            http: plain_http(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Proxy { addr, state }
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn count(&self, fault: Fault) -> usize {
        self.seen().iter().filter(|s| s.fault == fault).count()
    }
}

async fn handle(
    State(state): State<Arc<ProxyState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = state.count.fetch_add(1, Ordering::SeqCst);
    let path = uri.path().to_owned();
    let fault = (state.decide)(n, &path);
    state.seen.lock().unwrap().push(Seen {
        at: Instant::now(),
        path: path.clone(),
        fault,
    });
    match fault {
        Fault::Status(code) => {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let body = json!({"error": {"message": "injected failure", "you_sent": auth}});
            (StatusCode::from_u16(code).unwrap(), body.to_string()).into_response()
        }
        Fault::TooMany(after) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", after)],
            "slow down",
        )
            .into_response(),
        Fault::Stall => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        Fault::Forward | Fault::StallMidStream => {
            let Some(upstream) = &state.upstream else {
                return StatusCode::NOT_FOUND.into_response();
            };
            let url = format!("{upstream}{path}");
            let sent = state
                .http
                .request(method, url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            let mut r = match sent {
                Ok(r) => r,
                Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            };
            let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
            let content_type = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_owned();
            // The body passes through as it comes (a streamed answer stays streamed); a
            // mid-stream stall sends the part up to its first event's end, then nothing more
            // while the connection stays open.
            let stall = fault == Fault::StallMidStream;
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                while let Ok(Some(chunk)) = r.chunk().await {
                    if !stall {
                        if tx.send(chunk).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    seen.extend_from_slice(&chunk);
                    if let Some(end) = seen.windows(2).position(|w| w == b"\n\n") {
                        seen.truncate(end + 2);
                        break;
                    }
                }
                if stall {
                    let half = if seen.ends_with(b"\n\n") {
                        seen.len()
                    } else {
                        seen.len() / 2
                    };
                    seen.truncate(half);
                    let _ = tx.send(Bytes::from(seen)).await;
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
            });
            let body = futures::stream::unfold(rx, |mut rx| async move {
                let chunk = rx.recv().await?;
                Some((Ok::<_, std::convert::Infallible>(chunk), rx))
            });
            (
                status,
                [("content-type", content_type)],
                axum::body::Body::from_stream(body),
            )
                .into_response()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// An HTTP client; building a `ServerPool` first installs the TLS crypto provider that
/// reqwest's `rustls-no-provider` build needs.
fn plain_http() -> reqwest::Client {
    pool(
        &[server("http://127.0.0.1:1/v1", ServerType::Openai, 1)],
        fast_retries(1),
    );
    reqwest::Client::new()
}

/// A URL on 127.0.0.1 where nothing listens (a port bound and released).
async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/v1")
}

fn server(base_url: &str, kind: ServerType, timeout: i64) -> ApiServerConfig {
    ApiServerConfig {
        base_url: Some(base_url.to_owned()),
        server_type: kind,
        timeout,
        health_check: true,
        ..Default::default()
    }
}

fn fast_retries(attempts: u32) -> RetryPolicy {
    RetryPolicy {
        attempts,
        base: Duration::from_millis(10),
        cap: Duration::from_millis(20),
    }
}

fn pool(servers: &[ApiServerConfig], retry: RetryPolicy) -> Arc<ServerPool> {
    let failover = Failover {
        failures_to_mark_down: 3,
        cooldown: Duration::from_secs(60),
    };
    Arc::new(ServerPool::new(servers, retry, failover).unwrap())
}

fn chat_request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hi")],
        tools: Vec::new().into(),
        n: 1,
        temperature: 1.0,
        max_tokens: Some(16),
        extra_body: Default::default(),
        split: Split::Train,
    }
}

fn always_ok() -> impl hermes_env::testing::Policy {
    |_: &Value| Reply::text("ok")
}

/// Runs `count` chat requests, `concurrency` at a time, and returns their results.
async fn chat_many(
    llm: &LlmClient,
    count: usize,
    concurrency: usize,
) -> Vec<Result<String, LlmError>> {
    let request = chat_request();
    futures::stream::iter(0..count)
        .map(|_| async {
            llm.chat(&request)
                .await
                .map(|r| r.choices[0].message.content.clone())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await
}

// ---------------------------------------------------------------------------------------------
// Chat completions (Phase 1)

#[tokio::test]
async fn one_dead_server_of_two_every_request_succeeds_and_it_is_marked_down_once() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let dead = dead_url().await;
    let servers = [
        server(&dead, ServerType::Openai, 5),
        server(&live.base_url(), ServerType::Openai, 5),
    ];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(3)), 8);
    let results = chat_many(&llm, 60, 8).await;
    assert!(
        results.iter().all(|r| r.as_deref() == Ok("ok")),
        "every request succeeds: {:?}",
        results.iter().find(|r| r.is_err())
    );
    assert_eq!(live.request_count(), 60, "each request answered once");
    assert_eq!(llm.pool().down_servers(), [dead.as_str()]);
    let down = logs.lines_with("marked down");
    assert_eq!(down.len(), 1, "one line for the outage: {down:?}");
    assert!(
        down[0].contains("WARN")
            && down[0].contains(&dead)
            && down[0].contains("connection refused"),
        "{}",
        down[0]
    );
    let stats = llm.take_request_stats();
    assert_eq!(
        stats[1].train_attempts.len(),
        60,
        "every request finished on the live server"
    );
}

#[tokio::test]
async fn thirty_percent_500s_and_ten_percent_stalls_every_request_of_200_succeeds() {
    let upstream = ScriptedServer::start(always_ok()).await.unwrap();
    // Random faults, drawn afresh for every attempt: 3 in 10 answered 500, 1 in 10 stalled past
    // the 1 s timeout. (A fixed pattern over the proxy's request counter is not independent
    // per attempt: the last request left in flight meets consecutive counter values, and a run
    // of faults in the pattern then fails it every time.)
    let flaky = || {
        |n: u64, _: &str| {
            use std::hash::{BuildHasher, Hasher};
            let mut draw = std::collections::hash_map::RandomState::new().build_hasher();
            draw.write_u64(n);
            match draw.finish() % 10 {
                0..=2 => Fault::Status(500),
                3 => Fault::Stall,
                _ => Fault::Forward,
            }
        }
    };
    let a = Proxy::start(Some(&upstream), flaky()).await;
    let b = Proxy::start(Some(&upstream), flaky()).await;
    let servers = [
        server(&a.base_url(), ServerType::Openai, 1),
        server(&b.base_url(), ServerType::Openai, 1),
    ];
    // 40% of attempts fail: 24 attempts leave a request a 0.4^24 ≈ 3·10⁻¹⁰ chance to fail, the
    // 200 of them 6·10⁻⁸ (12 attempts were 3·10⁻³: one red run in 300).
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(24)), 8);
    let results = chat_many(&llm, 200, 32).await;
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
    assert!(failed.is_empty(), "{} failed: {:?}", failed.len(), failed);
    assert_eq!(upstream.request_count(), 200, "each request answered once");
    for proxy in [&a, &b] {
        assert!(proxy.count(Fault::Status(500)) > 10, "500s were injected");
        assert!(proxy.count(Fault::Stall) > 3, "stalls were injected");
    }
}

#[tokio::test]
async fn a_stalled_server_is_bounded_by_the_timeout_then_failed_over() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let stalled = Proxy::start(None, |_, _| Fault::Stall).await;
    let servers = [
        server(&stalled.base_url(), ServerType::Openai, 1),
        server(&live.base_url(), ServerType::Openai, 1),
    ];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(2)), 8);
    let results = chat_many(&llm, 10, 10).await;
    assert!(
        results.iter().all(|r| r.as_deref() == Ok("ok")),
        "{results:?}"
    );
    assert!(
        !stalled.seen().is_empty(),
        "some requests went to the stalled server first"
    );
    assert_eq!(live.request_count(), 10);
}

/// A server with the stream limits given (seconds), streaming.
fn streaming_server(base_url: &str, timeout: i64, head: i64, idle: i64) -> ApiServerConfig {
    ApiServerConfig {
        head_timeout: head,
        idle_timeout: idle,
        ..server(base_url, ServerType::Openai, timeout)
    }
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_is_given_up_on_at_the_head_timeout() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let stalled = Proxy::start(None, |_, _| Fault::Stall).await;
    // The total timeout is long: only the head timeout can end the stalled attempts.
    let servers = [
        streaming_server(&stalled.base_url(), 600, 1, 600),
        streaming_server(&live.base_url(), 600, 1, 600),
    ];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(2)), 8);
    let started = Instant::now();
    let results = chat_many(&llm, 10, 10).await;
    assert!(
        results.iter().all(|r| r.as_deref() == Ok("ok")),
        "{results:?}"
    );
    assert!(
        !stalled.seen().is_empty(),
        "some requests went to the stalled server first"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bounded by the 1 s head timeout, not the 600 s total: {:?}",
        started.elapsed()
    );
    let only = [streaming_server(&stalled.base_url(), 600, 1, 600)];
    let llm = LlmClient::with_pool(pool(&only, fast_retries(1)), 8);
    let err = llm.chat(&chat_request()).await.unwrap_err().to_string();
    assert!(
        err.contains(
            "not answering after 1 attempt: no response head within 1 s (--openai.head_timeout; \
             --openai.stream false for a server that does not stream)"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_stream_that_stops_is_given_up_on_at_the_idle_timeout_and_retried_elsewhere() {
    let upstream = ScriptedServer::start(|_: &Value| {
        Reply::text("a reply long enough to come in several chunks")
    })
    .await
    .unwrap();
    let stalling = Proxy::start(Some(&upstream), |_, _| Fault::StallMidStream).await;
    let servers = [
        streaming_server(&stalling.base_url(), 600, 600, 1),
        streaming_server(&upstream.base_url(), 600, 600, 1),
    ];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(2)), 8);
    let started = Instant::now();
    let results = chat_many(&llm, 10, 10).await;
    assert!(
        results
            .iter()
            .all(|r| r.as_deref() == Ok("a reply long enough to come in several chunks")),
        "{results:?}"
    );
    assert!(
        stalling.count(Fault::StallMidStream) > 0,
        "some answers stalled mid-stream"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "bounded by the 1 s idle timeout, not the 600 s total: {:?}",
        started.elapsed()
    );
    let only = [streaming_server(&stalling.base_url(), 600, 600, 1)];
    let llm = LlmClient::with_pool(pool(&only, fast_retries(1)), 8);
    let err = llm.chat(&chat_request()).await.unwrap_err().to_string();
    assert!(
        err.contains("not answering after 1 attempt: the streamed answer stopped for 1 s (--openai.idle_timeout)"),
        "{err}"
    );
}

/// A server on 127.0.0.1 answering every chat request with `body` as an event stream.
async fn event_stream_server(body: &'static str) -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || async move {
            ([("content-type", "text/event-stream")], body).into_response()
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// A malformed chunk is an invalid answer (not retried, as a 2xx that is not a completion);
/// a stream cut before its end marker is a broken answer, retried on another server; an error
/// event is its status.
#[tokio::test]
async fn malformed_cut_and_error_streams_fail_as_their_kind() {
    let malformed = event_stream_server("data: {\"choices\": {}}\n\n").await;
    let llm = LlmClient::with_pool(
        pool(
            &[server(&malformed, ServerType::Openai, 30)],
            fast_retries(3),
        ),
        8,
    );
    let err = llm.chat(&chat_request()).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Decode { reason, .. } if reason.contains("malformed stream chunk: `choices` is not a list")),
        "{err:?}"
    );
    let cut = event_stream_server(
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"half\"}}]}\n\n",
    )
    .await;
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let servers = [
        server(&cut, ServerType::Openai, 30),
        server(&live.base_url(), ServerType::Openai, 30),
    ];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(3)), 8);
    let results = chat_many(&llm, 6, 6).await;
    assert!(
        results.iter().all(|r| r.as_deref() == Ok("ok")),
        "{results:?}"
    );
    assert_eq!(live.request_count(), 6);
    let only = [server(&cut, ServerType::Openai, 30)];
    let err = LlmClient::with_pool(pool(&only, fast_retries(2)), 8)
        .chat(&chat_request())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("failing after 2 attempts: the streamed answer broke off: the stream ended before its end marker"),
        "{err}"
    );
    let overloaded = event_stream_server(
        "data: {\"error\": {\"message\": \"engine overloaded\", \"code\": 503}}\n\ndata: [DONE]\n\n",
    )
    .await;
    let only = [server(&overloaded, ServerType::Openai, 30)];
    let err = LlmClient::with_pool(pool(&only, fast_retries(2)), 8)
        .chat(&chat_request())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("failing after 2 attempts: HTTP 503: ") && err.contains("engine overloaded"),
        "{err}"
    );
}

/// The wait between the head and the first event is the server queueing and prefilling: it is
/// bounded by the total timeout only, never by the idle timeout.
#[tokio::test]
async fn a_slow_first_token_is_queueing_and_not_a_stall() {
    let slow = ScriptedServer::start(always_ok()).await.unwrap();
    slow.set_delay(Duration::from_secs(3));
    let servers = [streaming_server(&slow.base_url(), 600, 1, 1)];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(1)), 8);
    let r = llm.chat(&chat_request()).await.unwrap();
    assert_eq!(r.choices[0].message.content, "ok");
    assert_eq!(slow.request_count(), 1, "answered at the first attempt");
}

/// `--openai.stream false` sends no `stream` and reads the plain answer; streaming sends
/// `stream: true` with usage asked for, and both read the same response.
#[tokio::test]
async fn streamed_and_plain_requests_read_the_same_answer() {
    let live = ScriptedServer::start(|_: &Value| {
        Reply::text("visible")
            .with_reasoning("hidden thoughts")
            .and_tool("terminal", json!({"command": "ls -la"}))
            .and_tool("read_file", json!({"path": "a.txt"}))
    })
    .await
    .unwrap();
    let mut answers = Vec::new();
    for stream in [true, false] {
        let config = ApiServerConfig {
            stream,
            ..server(&live.base_url(), ServerType::Openai, 30)
        };
        let llm = LlmClient::with_pool(pool(&[config], fast_retries(1)), 8);
        let r = llm.chat(&chat_request()).await.unwrap();
        let c = &r.choices[0];
        let calls: Vec<(String, String)> = c
            .message
            .tool_calls
            .iter()
            .flatten()
            .map(|t| (t.function.name.clone(), t.function.arguments.clone()))
            .collect();
        answers.push((
            c.message.content.clone(),
            c.message.reasoning_text(),
            calls,
            c.finish_reason.clone(),
            r.usage,
        ));
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0].2.len(), 2, "both parallel calls");
    let sent = live.requests();
    assert_eq!(sent[0]["stream"], true);
    assert_eq!(sent[0]["stream_options"], json!({"include_usage": true}));
    assert!(sent[1].get("stream").is_none() && sent[1].get("stream_options").is_none());
}

#[tokio::test]
async fn retry_after_on_429_is_waited_out_before_the_retry() {
    let upstream = ScriptedServer::start(always_ok()).await.unwrap();
    let proxy = Proxy::start(Some(&upstream), |n, _| {
        if n == 0 {
            Fault::TooMany("1")
        } else {
            Fault::Forward
        }
    })
    .await;
    let llm = LlmClient::with_pool(
        pool(
            &[server(&proxy.base_url(), ServerType::Openai, 5)],
            fast_retries(3),
        ),
        8,
    );
    let request = chat_request();
    let later = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        llm.chat(&request).await
    };
    let (first, second) = tokio::join!(llm.chat(&request), later);
    assert!(first.is_ok() && second.is_ok());
    let seen = proxy.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].fault, Fault::TooMany("1"));
    for s in &seen[1..] {
        let gap = s.at - seen[0].at;
        assert!(
            gap >= Duration::from_secs(1),
            "the server saw a request {gap:?} after its 429 with Retry-After: 1"
        );
    }
}

#[tokio::test]
async fn retries_never_return_to_the_server_that_just_failed() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let failing = Proxy::start(None, |_, _| Fault::Status(500)).await;
    let servers = [
        server(&failing.base_url(), ServerType::Openai, 5),
        server(&live.base_url(), ServerType::Openai, 5),
    ];
    let never_down = Failover {
        failures_to_mark_down: u32::MAX,
        cooldown: Duration::from_secs(60),
    };
    let p = ServerPool::new(&servers, fast_retries(2), never_down).unwrap();
    let llm = LlmClient::with_pool(Arc::new(p), 8);
    let results = chat_many(&llm, 20, 4).await;
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert!(
        failing.seen().len() >= 5,
        "the failing server got first attempts"
    );
    assert_eq!(live.request_count(), 20);
}

#[tokio::test]
async fn a_408_is_retried() {
    let upstream = ScriptedServer::start(always_ok()).await.unwrap();
    let proxy = Proxy::start(Some(&upstream), |n, _| {
        if n == 0 {
            Fault::Status(408)
        } else {
            Fault::Forward
        }
    })
    .await;
    let llm = LlmClient::with_pool(
        pool(
            &[server(&proxy.base_url(), ServerType::Openai, 5)],
            fast_retries(3),
        ),
        8,
    );
    llm.chat(&chat_request()).await.unwrap();
    assert_eq!(proxy.seen().len(), 2);
}

#[tokio::test]
async fn a_down_server_is_probed_after_its_cooldown_and_comes_back_with_one_line() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let recovering = Proxy::start(Some(&live), |n, _| {
        if n < 3 {
            Fault::Status(502)
        } else {
            Fault::Forward
        }
    })
    .await;
    let servers = [
        server(&recovering.base_url(), ServerType::Openai, 5),
        server(&live.base_url(), ServerType::Openai, 5),
    ];
    let cooldown = Duration::from_millis(400);
    let failover = Failover {
        failures_to_mark_down: 3,
        cooldown,
    };
    let p = ServerPool::new(&servers, fast_retries(3), failover).unwrap();
    let llm = LlmClient::with_pool(Arc::new(p), 8);
    while recovering.seen().len() < 3 {
        llm.chat(&chat_request()).await.unwrap();
    }
    assert_eq!(llm.pool().down_servers(), [recovering.base_url()]);
    for _ in 0..5 {
        llm.chat(&chat_request()).await.unwrap();
    }
    assert_eq!(
        recovering.seen().len(),
        3,
        "no requests during the cool-down"
    );
    tokio::time::sleep(cooldown + Duration::from_millis(50)).await;
    llm.chat(&chat_request()).await.unwrap();
    assert_eq!(
        recovering.seen().len(),
        4,
        "the first request after the cool-down probes it"
    );
    assert!(llm.pool().down_servers().is_empty());
    let down = logs.lines_with("marked down");
    let up = logs.lines_with("is back up");
    assert_eq!((down.len(), up.len()), (1, 1), "{down:?} {up:?}");
    assert!(up[0].contains("INFO") && up[0].contains(&recovering.base_url()));
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured_too() {
    let upstream = ScriptedServer::start(always_ok()).await.unwrap();
    // At least 2 s ahead once truncated to the second, so still ahead when the 429 is read.
    let date: &'static str = Box::leak(
        httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3))
            .into_boxed_str(),
    );
    let retry_at = httpdate::parse_http_date(date).unwrap();
    let proxy = Proxy::start(Some(&upstream), move |n, _| {
        if n == 0 {
            Fault::TooMany(date)
        } else {
            Fault::Forward
        }
    })
    .await;
    let llm = LlmClient::with_pool(
        pool(
            &[server(&proxy.base_url(), ServerType::Openai, 5)],
            fast_retries(3),
        ),
        8,
    );
    llm.chat(&chat_request()).await.unwrap();
    // The answer needed the retry, which was not sent before the date (a client that retried
    // at once would be done about 2 s early); 50 ms for the clocks' rounding.
    let done = std::time::SystemTime::now();
    assert_eq!(proxy.seen().len(), 2, "one 429, one retry");
    assert!(
        done + Duration::from_millis(50) >= retry_at,
        "an HTTP-date Retry-After is waited out: done {:?} before the date",
        retry_at.duration_since(done).unwrap_or_default()
    );
}

#[tokio::test]
async fn client_errors_fail_at_once_with_the_body_and_no_key() {
    for status in [400, 401, 404, 422] {
        let proxy = Proxy::start(None, move |_, _| Fault::Status(status)).await;
        let config = ApiServerConfig {
            api_key: Some("sk-very-secret".into()),
            ..server(&proxy.base_url(), ServerType::Openai, 5)
        };
        let llm = LlmClient::with_pool(pool(&[config], fast_retries(3)), 8);
        let err = llm.chat(&chat_request()).await.unwrap_err();
        assert_eq!(proxy.seen().len(), 1, "HTTP {status} is not retried");
        assert!(
            !err.is_infrastructure(),
            "HTTP {status} is the request's fault"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "LLM server {} rejected the request: HTTP {status}:",
                proxy.base_url()
            )) && text.contains("injected failure"),
            "{text}"
        );
        assert!(
            !text.contains("sk-very-secret") && text.contains("Bearer <redacted>"),
            "the echoed key is redacted: {text}"
        );
    }
}

#[tokio::test]
async fn all_servers_failing_is_one_line_naming_the_cause() {
    let dead = dead_url().await;
    let llm = LlmClient::with_pool(
        pool(&[server(&dead, ServerType::Openai, 5)], fast_retries(3)),
        8,
    );
    let err = llm.chat(&chat_request()).await.unwrap_err();
    assert!(err.is_infrastructure());
    assert_eq!(
        err.to_string(),
        format!("LLM server {dead} unreachable after 3 attempts: connection refused")
    );
    assert_eq!(llm.pool().down_servers(), [dead.as_str()]);
    let again = llm.chat(&chat_request()).await.unwrap_err();
    assert_eq!(
        again.to_string(),
        err.to_string(),
        "with every server down, requests are still tried"
    );

    let failing = Proxy::start(None, |_, _| Fault::Status(503)).await;
    let servers = [
        server(&dead, ServerType::Openai, 5),
        server(&failing.base_url(), ServerType::Openai, 5),
    ];
    let llm = LlmClient::with_pool(pool(&servers, fast_retries(3)), 8);
    let err = llm.chat(&chat_request()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("all 2 LLM servers tried (") && text.contains("3 attempts failed; last: "),
        "{text}"
    );
    assert!(
        text.contains(&dead) && text.contains(&failing.base_url()),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Health checks

#[tokio::test]
async fn health_check_passes_on_v1_models_when_there_is_no_health_endpoint() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let proxy = Proxy::start(Some(&live), |_, _| Fault::Forward).await;
    let p = pool(
        &[server(&proxy.base_url(), ServerType::Vllm, 5)],
        fast_retries(3),
    );
    p.check_health().await.unwrap();
    let paths: Vec<String> = proxy.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(
        paths,
        ["/health", "/v1/models"],
        "vLLM's /health first, then /v1/models on its 404"
    );
    assert!(p.down_servers().is_empty());

    let p = pool(
        &[server(&proxy.base_url(), ServerType::Openai, 5)],
        fast_retries(3),
    );
    p.check_health().await.unwrap();
    assert_eq!(
        proxy.seen().last().unwrap().path,
        "/v1/models",
        "OpenAI servers are checked on /v1/models only"
    );
}

#[tokio::test]
async fn health_check_marks_a_dead_server_down_and_fails_when_none_passes() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let dead = dead_url().await;
    let both = pool(
        &[
            server(&dead, ServerType::Openai, 5),
            server(&live.base_url(), ServerType::Openai, 5),
        ],
        fast_retries(3),
    );
    both.check_health().await.unwrap();
    assert_eq!(both.down_servers(), [dead.as_str()]);
    let lines = logs.lines_with("failed its health check");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("WARN") && lines[0].contains(&dead));
    let llm = LlmClient::with_pool(both, 8);
    assert!(chat_many(&llm, 10, 4).await.iter().all(|r| r.is_ok()));
    assert_eq!(live.request_count(), 10);
    let stats = llm.take_request_stats();
    assert!(
        stats[0].train_attempts.is_empty() && stats[1].train_attempts.iter().all(|&a| a == 1),
        "the down server got no requests: {stats:?}"
    );

    let nothing = Proxy::start(None, |_, _| Fault::Forward).await;
    let none = pool(
        &[
            server(&dead, ServerType::Openai, 5),
            server(&nothing.base_url(), ServerType::Vllm, 5),
        ],
        fast_retries(3),
    );
    let err = none.check_health().await.unwrap_err().to_string();
    assert!(
        err.starts_with("no LLM server passed its health check (")
            && err.contains(&format!("{dead}: GET {dead}/models: connection refused"))
            && err.contains("/v1/models: HTTP 404")
            && err.contains("--openai.health_check false"),
        "{err}"
    );
}

#[tokio::test]
async fn a_cassette_recorder_passes_the_health_check_of_its_upstream() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let recorder = hermes_env::testing::CassetteRecorder::start(&live.base_url(), None)
        .await
        .unwrap();
    let p = pool(
        &[server(&recorder.base_url(), ServerType::Openai, 5)],
        fast_retries(1),
    );
    p.check_health().await.unwrap();
    assert!(
        recorder.cassette().interactions.is_empty(),
        "health checks are not recorded"
    );
}

#[tokio::test]
async fn health_check_false_skips_the_check() {
    let dead = dead_url().await;
    let config = ApiServerConfig {
        health_check: false,
        ..server(&dead, ServerType::Openai, 5)
    };
    let p = pool(&[config], fast_retries(3));
    p.check_health().await.unwrap();
    assert!(p.down_servers().is_empty());
}

// ---------------------------------------------------------------------------------------------
// /generate (Phase 2)

fn generate_request() -> GenerateRequest {
    GenerateRequest {
        input_ids: "hi".bytes().map(u32::from).collect(),
        n: 1,
        max_tokens: Some(8),
        temperature: 1.0,
        split: Split::Train,
    }
}

#[tokio::test]
async fn generate_fails_over_from_a_dead_server_and_marks_it_down() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let dead = dead_url().await;
    let servers = [
        server(&dead, ServerType::Vllm, 5),
        server(&live.base_url(), ServerType::Vllm, 5),
    ];
    let client = GenerateClient::with_pool(pool(&servers, fast_retries(3))).unwrap();
    let request = generate_request();
    let results: Vec<_> = futures::stream::iter(0..30)
        .map(|_| client.generate(&request))
        .buffer_unordered(6)
        .collect()
        .await;
    for r in &results {
        let out = r.as_ref().expect("every generate request succeeds");
        assert!(
            out[0].ids.starts_with(&[u32::from(b'o'), u32::from(b'k')]),
            "{:?}",
            out[0].ids
        );
    }
    assert_eq!(live.request_count(), 30);
}

/// Phase 2's `/generate` is not streamed: while a request waits, the server's `/health` tells a
/// hung server from a busy one. At the defaults, a server whose `/generate` and `/health` both
/// stop answering (a hung engine) is given up on after the 30 s interval and its 30 s check,
/// not the 1200 s timeout, and the request is answered by the other server; the waiting
/// requests of a server share its checks.
#[tokio::test]
async fn a_hung_phase2_server_is_found_by_its_health_check_at_the_defaults() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let hung = Proxy::start(None, |_, _| Fault::Stall).await;
    let phase2 = |base_url: &str| ApiServerConfig {
        base_url: Some(base_url.to_owned()),
        server_type: ServerType::Vllm,
        health_check: false,
        ..Default::default()
    };
    let (head, total) = (
        ApiServerConfig::default().head_timeout,
        ApiServerConfig::default().timeout,
    );
    assert_eq!((head, total), (30, 1200), "the defaults");
    let servers = [phase2(&hung.base_url()), phase2(&live.base_url())];
    let client = GenerateClient::with_pool(pool(&servers, fast_retries(2))).unwrap();
    let request = generate_request();
    let started = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..8)
        .map(|_| client.generate(&request))
        .buffer_unordered(8)
        .collect()
        .await;
    let took = started.elapsed();
    for r in &results {
        assert!(
            r.is_ok(),
            "every request answered by the live server: {r:?}"
        );
    }
    assert_eq!(live.request_count(), 8);
    let seen = hung.seen();
    let generates = seen.iter().filter(|s| s.path == "/generate").count();
    let checks = seen.iter().filter(|s| s.path == "/health").count();
    assert!(
        generates >= 1,
        "some requests went to the hung server first"
    );
    // One check ends every request waiting on the hung server (it never answers, so the
    // requests waiting for its result fail with it).
    assert!(
        checks >= 1 && checks < generates.max(2),
        "{checks} checks for {generates} waiting requests"
    );
    assert!(
        took < Duration::from_secs(120),
        "given up on after about 60 s (the interval and the check), not 1200 s: {took:?}"
    );
}

/// A server host that drops off the network while it works on a `/generate` request (Phase 2
/// is not streamed: nothing comes until the answer) is given up on once the TCP keepalive
/// probes go unanswered, in about half a minute, not at the 1200 s default timeout; while the
/// host is on the network its kernel answers the probes, however long the server takes.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_host_that_drops_off_the_network_mid_request_is_given_up_on_within_a_minute() {
    let net = common::netns::TestNet::create(1);
    let host = &net.hosts[0];
    // A busy server: it takes every connection, reads the request and never answers.
    let script = "import socket, time\n\
                  s = socket.socket()\n\
                  s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                  s.bind(('0.0.0.0', 8000))\n\
                  s.listen(16)\n\
                  held = []\n\
                  while True:\n    c, _ = s.accept()\n    held.append(c)\n";
    let mut busy = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &host.netns,
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .spawn()
        .expect("python3 in the test host");
    let addr = format!("{}:8000", host.addr);
    let listening = Instant::now();
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            listening.elapsed() < Duration::from_secs(30),
            "the busy server in {} never listened",
            host.netns
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let config = ApiServerConfig {
        base_url: Some(format!("http://{addr}/v1")),
        server_type: ServerType::Sglang,
        health_check: false,
        // The health watch of a waiting `/generate` would find the host gone too; checking
        // every 600 s, it leaves the keepalive probes the only thing that can.
        head_timeout: 600,
        ..Default::default()
    };
    assert_eq!(config.timeout, 1200, "the default total timeout");
    let client = GenerateClient::new(&[config], fast_retries(1)).unwrap();
    let started = Instant::now();
    let request = tokio::spawn(async move { client.generate(&generate_request()).await });
    // Longer than the keepalive idle time: the probes are answered while the host is there.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(
        !request.is_finished(),
        "a busy server on the network is waited for"
    );
    net.unplug(0);
    let unplugged = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(300), request)
        .await
        .expect("given up on within 300 s of the host dropping off, not the 1200 s timeout")
        .unwrap();
    let after = unplugged.elapsed();
    let _ = busy.kill();
    let _ = busy.wait();
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("unreachable after 1 attempt: "),
        "a connection failure, not the per-request timeout: {err}"
    );
    // 15 s without traffic, then 3 probes 5 s apart: about 30 s; bounded loosely for a
    // loaded machine, far below the 1200 s the request would have been held.
    assert!(
        after < Duration::from_secs(90),
        "{after:?} after the host dropped off: {err}"
    );
    eprintln!(
        "host dropped off after {:?}; request given up on {after:?} later: {err}",
        unplugged - started
    );
}

#[tokio::test]
async fn generate_does_not_retry_a_400_and_retries_a_503() {
    let upstream = ScriptedServer::start(always_ok()).await.unwrap();
    let rejecting = Proxy::start(Some(&upstream), |_, _| Fault::Status(400)).await;
    let client = GenerateClient::with_pool(pool(
        &[server(&rejecting.base_url(), ServerType::Sglang, 5)],
        fast_retries(3),
    ))
    .unwrap();
    let err = client.generate(&generate_request()).await.unwrap_err();
    assert!(!err.is_infrastructure(), "{err}");
    assert_eq!(rejecting.seen().len(), 1);

    let flaky = Proxy::start(Some(&upstream), |n, _| {
        if n < 2 {
            Fault::Status(503)
        } else {
            Fault::Forward
        }
    })
    .await;
    let client = GenerateClient::with_pool(pool(
        &[server(&flaky.base_url(), ServerType::Vllm, 5)],
        fast_retries(3),
    ))
    .unwrap();
    client.generate(&generate_request()).await.unwrap();
    let paths: Vec<String> = flaky.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/generate", "/generate", "/generate"]);
}

#[tokio::test]
async fn an_env_weight_of_zero_still_lets_requests_through() {
    let live = ScriptedServer::start(always_ok()).await.unwrap();
    let config = ApiServerConfig {
        num_max_requests_at_once: 4,
        ..server(&live.base_url(), ServerType::Vllm, 5)
    };
    let client = GenerateClient::with_pool(pool(&[config], fast_retries(3))).unwrap();
    client.set_weight(0.0);
    let request = generate_request();
    let all = futures::future::join_all((0..5).map(|_| client.generate(&request)));
    let results = tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("weight 0 must not stop requests (one per server at a time)");
    assert!(results.iter().all(|r| r.is_ok()));
}

// ---------------------------------------------------------------------------------------------
// The agent loop

#[tokio::test]
async fn a_multi_turn_rollout_finishes_with_every_tool_result_when_one_server_of_two_is_dead() {
    let mut h = common::Harness::new(Script::new([
        Reply::tool("terminal", json!({"command": "echo one"})),
        Reply::tool("terminal", json!({"command": "echo two"})),
        Reply::tool("terminal", json!({"command": "echo three"})),
        Reply::text("done"),
    ]))
    .await;
    let dead = dead_url().await;
    let servers = [
        server(&dead, ServerType::Openai, 5),
        server(&h.server.base_url(), ServerType::Openai, 5),
    ];
    // The dead server first, so that the round-robin sends the first turn to it.
    h.llm = LlmClient::with_pool(pool(&servers, fast_retries(3)), 8);
    let r = h.run("count to three").await;
    assert_eq!(r.llm_error, None);
    assert_eq!((r.turns_used, r.finished_naturally), (4, true));
    let tool_results: Vec<&str> = r
        .messages
        .iter()
        .filter(|m| m.role == "tool")
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(tool_results.len(), 3);
    for (result, word) in tool_results.iter().zip(["one", "two", "three"]) {
        assert!(result.contains(word), "{result}");
    }
    assert_eq!(r.final_response(), Some("done"));
    assert_eq!(
        h.server.request_count(),
        4,
        "four turns, each answered once"
    );
    let attempts = &h.llm.take_request_stats()[1].train_attempts;
    assert!(
        attempts.iter().any(|&a| a > 1),
        "some turns went to the dead server first and failed over: {attempts:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A whole `process` run

/// `process` of the terminal_test example with two servers in YAML, the first one dead: with
/// the start-up health check it is marked down before the run, without it during the run (one
/// line either way), and every group is written with complete rollouts.
#[tokio::test(flavor = "multi_thread")]
async fn process_with_one_dead_server_of_two_writes_every_group_complete() {
    let live = ScriptedServer::start(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::text("finished")
        } else {
            Reply::tool("terminal", json!({"command": "echo 579 > ~/answer.txt"}))
        }
    })
    .await
    .unwrap();
    let dead = dead_url().await;
    for health_check in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let yaml = format!(
            "openai:\n  - {{base_url: \"{dead}\", model_name: M, health_check: {health_check}}}\n  \
             - {{base_url: \"{}\", model_name: M, health_check: {health_check}}}\n\
             env:\n  total_steps: 10\n  group_size: 2\n  use_wandb: false\n  \
             data_path_to_save_groups: output.jsonl\n  llm_retry_backoff: 0.01\n",
            live.base_url()
        );
        std::fs::write(tmp.path().join("config.yaml"), yaml).unwrap();
        let out = tokio::process::Command::new(common::example_bin("terminal_test"))
            .args(["process", "--config", "config.yaml"])
            .current_dir(tmp.path())
            .env("TMPDIR", tmp.path())
            .env_remove("OPENAI_API_KEY")
            .env_remove("RUST_LOG")
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let text = std::fs::read_to_string(tmp.path().join("output.jsonl")).unwrap();
        let groups: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(groups.len(), 10, "every group written");
        let scores: Vec<f64> = groups
            .iter()
            .map(|g| g["scores"][0].as_f64().unwrap())
            .collect();
        assert_eq!(
            scores,
            [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0],
            "the same scores as with one live server: only the 123+456 task is solved"
        );
        for g in &groups {
            for convo in g["messages"].as_array().unwrap() {
                let convo = convo.as_array().unwrap();
                assert!(convo.iter().any(|m| m["role"] == "tool"), "the tool ran");
                assert_eq!(
                    convo.last().unwrap()["content"],
                    "finished",
                    "rollout complete"
                );
            }
        }
        let (checked, marked) = (
            stderr.matches("failed its health check").count(),
            stderr.matches("marked down after").count(),
        );
        let expected = if health_check { (1, 0) } else { (0, 1) };
        assert_eq!(
            (checked, marked),
            expected,
            "health_check {health_check}: {stderr}"
        );
        assert!(!stderr.contains("LLM call failed"), "{stderr}");
    }
}

/// Acceptance of the fault defaults: `process` of the terminal_test example through two proxies
/// in front of one scripted server, every chat attempt independently answered 500 (30 %),
/// stalled with no answer (5 %) or stalled after its first event (5 %), with no retry or
/// timeout setting given. Every group completes with every rollout whole, and no rollout fails
/// as an LLM failure. (With the old defaults, 3 attempts and a non-streamed request bounded only
/// by the 1200 s timeout, a stalled attempt held its rollout for 20 minutes: the run does not
/// finish within the deadline below.)
#[tokio::test(flavor = "multi_thread")]
async fn process_at_default_settings_completes_every_group_through_30_percent_5xx_and_10_percent_stalls(
) {
    const GROUPS: usize = 8;
    const GROUP_SIZE: usize = 8;
    /// Far above what the defaults need (a stall costs 30 s or 60 s, a rollout meets a few),
    /// far below the 1200 s one stall held a rollout for before.
    const DEADLINE: Duration = Duration::from_secs(600);
    let live = ScriptedServer::start(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::text("finished")
        } else {
            Reply::tool("terminal", json!({"command": "echo 579 > ~/answer.txt"}))
        }
    })
    .await
    .unwrap();
    // Each proxy's first chat request (request 1, after the health check) gets one kind of
    // stall for certain; every later one a random draw.
    let flaky = |first: Fault| {
        move |n: u64, path: &str| {
            if !path.ends_with("/chat/completions") {
                return Fault::Forward;
            }
            if n == 1 {
                return first;
            }
            use std::hash::{BuildHasher, Hasher};
            let mut draw = std::collections::hash_map::RandomState::new().build_hasher();
            draw.write_u64(n);
            match draw.finish() % 100 {
                0..=29 => Fault::Status(500),
                30..=34 => Fault::Stall,
                35..=39 => Fault::StallMidStream,
                _ => Fault::Forward,
            }
        }
    };
    let a = Proxy::start(Some(&live), flaky(Fault::Stall)).await;
    let b = Proxy::start(Some(&live), flaky(Fault::StallMidStream)).await;
    let tmp = tempfile::tempdir().unwrap();
    let yaml = format!(
        "openai:\n  - {{base_url: \"{}\", model_name: M}}\n  - {{base_url: \"{}\", model_name: M}}\n\
         env:\n  total_steps: {GROUPS}\n  group_size: {GROUP_SIZE}\n  use_wandb: false\n  \
         data_path_to_save_groups: output.jsonl\n",
        a.base_url(),
        b.base_url()
    );
    std::fs::write(tmp.path().join("config.yaml"), yaml).unwrap();
    let started = Instant::now();
    let run = tokio::process::Command::new(common::example_bin("terminal_test"))
        .args(["process", "--config", "config.yaml"])
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DEADLINE, run)
        .await
        .unwrap_or_else(|_| {
            let written = std::fs::read_to_string(tmp.path().join("output.jsonl"))
                .map(|t| t.lines().count())
                .unwrap_or(0);
            panic!(
            "the run did not finish within {DEADLINE:?} ({written} of {GROUPS} groups written; \
             stalls seen {} + {}): a stalled request held its rollout",
            a.count(Fault::Stall) + b.count(Fault::Stall),
            a.count(Fault::StallMidStream) + b.count(Fault::StallMidStream)
        )
        })
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(tmp.path().join("output.jsonl")).unwrap();
    let groups: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(groups.len(), GROUPS, "every group written: {stderr}");
    for g in &groups {
        let convos = g["messages"].as_array().unwrap();
        assert_eq!(convos.len(), GROUP_SIZE, "every rollout of the group");
        for convo in convos {
            let convo = convo.as_array().unwrap();
            assert!(convo.iter().any(|m| m["role"] == "tool"), "the tool ran");
            assert_eq!(
                convo.last().unwrap()["content"],
                "finished",
                "rollout complete"
            );
        }
    }
    assert!(
        !stderr.contains("rollout failed"),
        "no rollout failed (as an LLM failure or otherwise): {stderr}"
    );
    let seen: Vec<Seen> = [&a, &b].iter().flat_map(|p| p.seen()).collect();
    let chats = seen
        .iter()
        .filter(|s| s.path.ends_with("/chat/completions"));
    let (mut attempts, mut errors, mut stalls, mut mid) = (0, 0, 0, 0);
    for s in chats {
        attempts += 1;
        match s.fault {
            Fault::Status(500) => errors += 1,
            Fault::Stall => stalls += 1,
            Fault::StallMidStream => mid += 1,
            _ => {}
        }
    }
    // Nothing silent, and no storm of lines: the retry line names the knobs and is written at
    // most once per 10 s (with the count of the retries it held back).
    let retry_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("retrying in"))
        .collect();
    assert!(!retry_lines.is_empty(), "retries are announced: {stderr}");
    assert!(
        retry_lines
            .iter()
            .all(|l| l.contains("(--env.llm_retries)")),
        "{retry_lines:?}"
    );
    assert!(
        retry_lines.len() as u64 <= took.as_secs() / 10 + 1,
        "{} retry lines in {took:?}: {retry_lines:?}",
        retry_lines.len()
    );
    let answered = GROUPS * GROUP_SIZE * 2;
    eprintln!(
        "{answered} turns answered in {took:.1?} over {attempts} attempts: {errors} answered 500, \
         {stalls} stalled before the head, {mid} stalled mid-stream; retry lines: {}",
        stderr.matches("retrying in").count()
    );
    assert_eq!(
        live.request_count() as usize,
        answered + mid,
        "each turn answered once, plus the answers the proxy cut"
    );
    // Bounds, not exact counts: the faults are random draws. Over the 200 or more attempts
    // the 30 % draw gives at least 30 500s and the two 5 % draws at least 3 stalls together,
    // but for a chance below one in a million; one stall of each kind is certain.
    assert!(
        errors >= 30 && stalls >= 1 && mid >= 1 && stalls + mid >= 3,
        "faults injected: {errors} 500s, {stalls} + {mid} stalls"
    );
}

// ---------------------------------------------------------------------------------------------
// The flags

fn resolve_flags(
    args: &[&str],
) -> Result<hermes_runtime::config::ResolvedConfig, hermes_runtime::config::ConfigError> {
    use hermes_runtime::config::cli::{parse, Invocation};
    use hermes_runtime::config::{EnvDescriptor, HermesEnvConfig, NoConfig};
    let desc = EnvDescriptor::new::<NoConfig>("my-env", "A test.", HermesEnvConfig::default());
    let argv = std::iter::once("my-env").chain(args.iter().copied());
    match parse("my-env", &desc, &[], argv)? {
        Invocation::Run(mode, flags) => hermes_runtime::config::resolve(&desc, mode, *flags),
        _ => panic!("expected a run"),
    }
}

#[test]
fn retry_flags_set_the_policy_and_bad_values_are_one_line_errors() {
    let cfg = resolve_flags(&[
        "process",
        "--env.llm_retries",
        "5",
        "--env.llm_retry_backoff",
        "0.25",
        "--env.llm_retry_backoff_cap",
        "2",
        "--env.llm_server_cooldown",
        "7.5",
    ])
    .unwrap();
    assert_eq!(
        RetryPolicy::from_config(&cfg.env),
        RetryPolicy {
            attempts: 6,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(2),
        },
        "llm_retries counts retries after the first attempt"
    );
    assert_eq!(
        Failover::from_config(&cfg.env).cooldown,
        Duration::from_millis(7500)
    );
    for (args, expected) in [
        (
            ["--env.llm_retries", "-1"],
            "env.llm_retries: must be within 0..=100, got -1",
        ),
        (
            ["--env.llm_retry_backoff", "-0.5"],
            "env.llm_retry_backoff: must be within 0..=3600, got -0.5",
        ),
        (
            ["--env.llm_server_cooldown", "0"],
            "env.llm_server_cooldown: must be within 0.001..=86400, got 0",
        ),
    ] {
        let err = resolve_flags(&["process", args[0], args[1]])
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }
}
