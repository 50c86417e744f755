//! One HTTP exchange with an inference server, and what can go wrong with it at the transport
//! level ([`HttpFailure`]): the server could not be reached, did not answer in time, or
//! answered with an error status.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use super::retry::parse_retry_after;
use super::sse::{assemble_text, SseAssembler, StreamError};
use super::types::ChatResponse;
use crate::diagnostics::snippet;

/// Why one HTTP exchange failed. Bodies are cut to one line and never contain the API key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpFailure {
    /// The server answered with an error status.
    #[error("HTTP {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// First part of the response body, on one line.
        body: String,
        /// The server's `Retry-After` (on 429 and 503), capped.
        retry_after: Option<Duration>,
    },
    /// No connection (refused, reset, DNS, TLS).
    #[error("{0}")]
    Connect(String),
    /// No complete answer within the per-request timeout.
    #[error("no response within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// A streamed request got no response head in time: the server accepted the request and
    /// did not answer (vLLM, SGLang, llama.cpp's server and OpenAI send the head at once).
    #[error(
        "no response head within {} s (--openai.head_timeout; --openai.stream false for a server that does not stream)",
        .0.as_secs_f64()
    )]
    NoHead(Duration),
    /// A streamed answer stopped between chunks for longer than the idle limit.
    #[error("the streamed answer stopped for {} s (--openai.idle_timeout)", .0.as_secs_f64())]
    Stalled(Duration),
    /// A streamed answer ended before it was complete (the connection broke off).
    #[error("the streamed answer broke off: {0}")]
    Broken(String),
    /// An unstreamed request's server failed its health check while the request waited.
    #[error("the server failed its health check while the request waited ({0}; checked every --openai.head_timeout)")]
    Unhealthy(String),
    /// The response body was larger than a response may be ([`RESPONSE_LIMIT`]); reading
    /// stopped there.
    #[error("the response body exceeds {} MiB, the most a response may hold", .limit / MIB)]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

const MIB: usize = 1 << 20;

/// The most bytes of one response body read from an inference server: a chat completion or
/// a `/generate` answer with logprobs for a whole group stays far below it, and a broken or
/// hostile server cannot make the process hold gigabytes (nor write them to a JSONL row).
pub const RESPONSE_LIMIT: usize = 64 * MIB;

/// The body of `response` as text, refused past `limit` bytes (announced or read).
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<String, ReadError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(ReadError::TooLarge { limit });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Transport)? {
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(match String::from_utf8(body) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Why [`read_capped`] got no body.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The connection failed while the body was read.
    Transport(reqwest::Error),
    /// The body was larger than the limit.
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Transport(e) => write!(f, "{}", crate::diagnostics::error_chain(e)),
            ReadError::TooLarge { limit } => write!(
                f,
                "the response body exceeds {} MiB, the most a response may hold",
                limit / MIB
            ),
        }
    }
}

impl HttpFailure {
    /// True when another attempt may succeed: connection errors, timeouts, 5xx, 408 and 429.
    /// Any other status is the request's fault and fails at once, and so does a request that
    /// did not fit the model's context, whatever its status (the same request never will).
    pub fn retryable(&self) -> bool {
        match self {
            HttpFailure::Status { status, body, .. } => {
                retryable_status(*status) && !super::refusal::is_context_exceeded(body)
            }
            HttpFailure::Connect(_)
            | HttpFailure::Timeout(_)
            | HttpFailure::NoHead(_)
            | HttpFailure::Stalled(_)
            | HttpFailure::Broken(_)
            | HttpFailure::Unhealthy(_)
            | HttpFailure::TooLarge { .. } => true,
        }
    }

    /// True when the failure says the server itself is in trouble (counts towards marking it
    /// down): connection errors, timeouts and 5xx. A 429 is the server pacing us, not a fault.
    pub fn is_server_fault(&self) -> bool {
        match self {
            HttpFailure::Status { status, .. } => *status >= 500,
            HttpFailure::Connect(_)
            | HttpFailure::Timeout(_)
            | HttpFailure::NoHead(_)
            | HttpFailure::Stalled(_)
            | HttpFailure::Broken(_)
            | HttpFailure::Unhealthy(_)
            | HttpFailure::TooLarge { .. } => true,
        }
    }
}

/// Statuses worth another attempt: 5xx, 408 (request timeout) and 429 (too many requests).
pub(crate) fn retryable_status(status: u16) -> bool {
    status >= 500 || status == 429 || status == 408
}

/// Where and how to talk to one server.
pub(crate) struct Target<'a> {
    pub url: RequestUrl<'a>,
    pub api_key: Option<&'a str>,
    pub timeout: Duration,
}

/// A request's URL: parsed once per server (the URLs every turn requests), or text the
/// request parses (and reports when it does not parse).
pub(crate) enum RequestUrl<'a> {
    /// Parsed.
    Parsed(&'a reqwest::Url),
    /// To be parsed.
    Text(Cow<'a, str>),
}

impl RequestUrl<'_> {
    fn request(self, http: &reqwest::Client, method: reqwest::Method) -> reqwest::RequestBuilder {
        match self {
            RequestUrl::Parsed(url) => http.request(method, url.clone()),
            RequestUrl::Text(url) => http.request(method, url.as_ref()),
        }
    }
}

/// The largest request body written so far, up to [`BODY_CAPACITY_MAX`]: the next one's
/// buffer starts that large. `RequestBuilder::json` grows its buffer from empty, and a chat
/// body (the tool schemas' text, then the whole conversation) was copied at each doubling.
static BODY_CAPACITY: AtomicUsize = AtomicUsize::new(0);

/// A rare large body (images, a long document) does not make every later buffer as large.
const BODY_CAPACITY_MAX: usize = 1 << 20;

/// POSTs `body` as JSON and returns the 2xx response text.
pub(crate) async fn post_json(
    http: &reqwest::Client,
    to: Target<'_>,
    body: &impl serde::Serialize,
) -> Result<String, HttpFailure> {
    let json = json_body(body)?;
    let request = to
        .url
        .request(http, reqwest::Method::POST)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(json);
    exchange(request, to.api_key, to.timeout).await
}

fn json_body(body: &impl serde::Serialize) -> Result<Vec<u8>, HttpFailure> {
    let mut json = Vec::with_capacity(BODY_CAPACITY.load(Relaxed));
    serde_json::to_writer(&mut json, body)
        .map_err(|e| HttpFailure::Connect(format!("the request body cannot be written: {e}")))?;
    BODY_CAPACITY.fetch_max(json.len().min(BODY_CAPACITY_MAX), Relaxed);
    Ok(json)
}

/// GETs `url` and returns the 2xx response text.
pub(crate) async fn get(http: &reqwest::Client, to: Target<'_>) -> Result<String, HttpFailure> {
    let request = to.url.request(http, reqwest::Method::GET);
    exchange(request, to.api_key, to.timeout).await
}

/// The time limits of a streamed exchange besides the total per-request timeout: the response
/// head must come within `head`, and once the first event came no gap between chunks may be
/// longer than `idle`. The wait between the head and the first event is queueing and prefill,
/// bounded only by the total.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StreamLimits {
    /// Longest wait for the response head.
    pub head: Duration,
    /// Longest gap between chunks once the first event came.
    pub idle: Duration,
}

/// A streamed exchange's 2xx answer.
#[derive(Debug)]
pub(crate) enum Streamed {
    /// The event stream, assembled as the non-streamed response.
    Response(ChatResponse),
    /// A body that is not an event stream (a server that ignored `stream` and answered as
    /// without it), as text.
    Text(String),
    /// An event stream that is not a chat completion.
    Malformed(String),
}

/// POSTs `body` (a request with `stream: true`) and reads the server-sent events as they come,
/// within `limits` and the total timeout.
pub(crate) async fn post_streaming(
    http: &reqwest::Client,
    to: Target<'_>,
    limits: StreamLimits,
    body: &impl serde::Serialize,
) -> Result<Streamed, HttpFailure> {
    let json = json_body(body)?;
    let total = to.timeout;
    let mut request = to
        .url
        .request(http, reqwest::Method::POST)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .body(json)
        .timeout(total);
    if let Some(key) = to.api_key {
        request = request.bearer_auth(key);
    }
    let head = limits.head.min(total);
    let mut response = match tokio::time::timeout(head, request.send()).await {
        Err(_) => return Err(HttpFailure::NoHead(head)),
        Ok(sent) => sent.map_err(|e| transport_failure(&e, total))?,
    };
    if !response.status().is_success() {
        return Err(status_failure(response, to.api_key, total).await);
    }
    let event_stream = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    if !event_stream {
        let text = match read_capped(response, RESPONSE_LIMIT).await {
            Ok(text) => text,
            Err(ReadError::Transport(e)) => return Err(transport_failure(&e, total)),
            Err(ReadError::TooLarge { limit }) => return Err(HttpFailure::TooLarge { limit }),
        };
        let start = text.trim_start();
        if !(start.starts_with("data:") || start.starts_with(':')) {
            return Ok(Streamed::Text(text));
        }
        // Events under another content type: read as they would have been.
        return match assemble_text(&text, RESPONSE_LIMIT) {
            Ok(assembled) => Ok(Streamed::Response(assembled)),
            Err(e) => stream_failure(e, to.api_key),
        };
    }
    let mut events = SseAssembler::new(RESPONSE_LIMIT);
    while !events.done() {
        let next = if events.started() {
            match tokio::time::timeout(limits.idle, response.chunk()).await {
                Err(_) => return Err(HttpFailure::Stalled(limits.idle)),
                Ok(next) => next,
            }
        } else {
            response.chunk().await
        };
        let Some(bytes) = next.map_err(|e| transport_failure(&e, total))? else {
            break;
        };
        if let Err(e) = events.feed(&bytes) {
            return stream_failure(e, to.api_key);
        }
    }
    match events.finish() {
        Ok(assembled) => Ok(Streamed::Response(assembled)),
        Err(e) => stream_failure(e, to.api_key),
    }
}

/// What a [`StreamError`] means for the attempt: a server's error event is its status, a cut
/// stream a broken answer (both retried as today's 5xx and dropped connections are), a
/// malformed one an answer that is not a chat completion.
fn stream_failure(e: StreamError, api_key: Option<&str>) -> Result<Streamed, HttpFailure> {
    match e {
        StreamError::Malformed(_) => Ok(Streamed::Malformed(e.to_string())),
        StreamError::Server { status, message } => Err(HttpFailure::Status {
            status,
            body: redact(message, api_key),
            retry_after: None,
        }),
        StreamError::Ended => Err(HttpFailure::Broken(
            "the stream ended before its end marker".into(),
        )),
        StreamError::TooLarge { limit } => Err(HttpFailure::TooLarge { limit }),
    }
}

async fn exchange(
    mut request: reqwest::RequestBuilder,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<String, HttpFailure> {
    request = request.timeout(timeout);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .map_err(|e| transport_failure(&e, timeout))?;
    if !response.status().is_success() {
        return Err(status_failure(response, api_key, timeout).await);
    }
    match read_capped(response, RESPONSE_LIMIT).await {
        Ok(text) => Ok(text),
        Err(ReadError::Transport(e)) => Err(transport_failure(&e, timeout)),
        Err(ReadError::TooLarge { limit }) => Err(HttpFailure::TooLarge { limit }),
    }
}

/// The failure a non-2xx response stands for: its status, its body (without the API key) and
/// its `Retry-After` on 429 and 503.
async fn status_failure(
    response: reqwest::Response,
    api_key: Option<&str>,
    timeout: Duration,
) -> HttpFailure {
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let text = match read_capped(response, RESPONSE_LIMIT).await {
        Ok(text) => text,
        Err(ReadError::Transport(e)) => return transport_failure(&e, timeout),
        Err(ReadError::TooLarge { limit }) => return HttpFailure::TooLarge { limit },
    };
    HttpFailure::Status {
        status: status.as_u16(),
        body: snippet(&redact(text, api_key)),
        retry_after: retry_after.filter(|_| matches!(status.as_u16(), 429 | 503)),
    }
}

fn redact(text: String, api_key: Option<&str>) -> String {
    match api_key {
        Some(key) if !key.is_empty() => text.replace(key, "<redacted>"),
        _ => text,
    }
}

fn transport_failure(e: &reqwest::Error, timeout: Duration) -> HttpFailure {
    // reqwest counts a socket's own "timed out" (unanswered TCP keepalive probes) as a timeout
    // too; only its request timer is the per-request timeout.
    if e.is_timeout() && !socket_timed_out(e) {
        HttpFailure::Timeout(timeout)
    } else {
        HttpFailure::Connect(root_cause(e))
    }
}

/// True when a cause of `e` is the socket's own timeout (`ETIMEDOUT`).
fn socket_timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// The innermost cause of a transport error, e.g. "connection refused" rather than reqwest's
/// "error sending request for url (…): client error (Connect): tcp connect error: …".
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut inner = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    let text = inner.to_string();
    let text = match text.find(" (os error") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "connection failed".into(),
    }
}
