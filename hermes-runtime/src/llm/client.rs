//! OpenAI-compatible chat-completions client over several servers: per-server concurrency
//! limits (train and eval), least-loaded server choice, per-request timeout, and retries with
//! random exponential backoff on 5xx / 429 / connection errors (never on other 4xx).

use crate::diagnostics::{error_chain, snippet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::Semaphore;

use super::stats::RequestStats;
use super::types::{ChatRequest, ChatResponse, Split};
use crate::config::ApiServerConfig;

/// Why a chat request failed (after retries). Messages never contain API keys.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The server answered with an error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// First part of the response body, on one line.
        body: String,
    },
    /// The server could not be reached.
    #[error("{url}: connection failed: {reason}")]
    Connect {
        /// Request URL.
        url: String,
        /// Underlying error.
        reason: String,
    },
    /// No response within the configured timeout.
    #[error("{url}: no response within {secs}s")]
    Timeout {
        /// Request URL.
        url: String,
        /// The timeout.
        secs: u64,
    },
    /// The response was not a chat completion.
    #[error("{url}: invalid response: {reason}")]
    Decode {
        /// Request URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// No usable server configuration.
    #[error("{0}")]
    Config(String),
}

impl LlmError {
    /// True for failures worth another attempt (5xx, 429, connection errors, timeouts).
    pub fn retryable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => *status >= 500 || *status == 429,
            LlmError::Connect { .. } | LlmError::Timeout { .. } => true,
            LlmError::Decode { .. } | LlmError::Config(_) => false,
        }
    }
}

/// Retry settings: `attempts` tries; before retry n the wait is uniform in
/// `[0, min(cap, base × 2^(n−1))]` (Atropos's "random exponential").
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Total attempts per request.
    pub attempts: u32,
    /// Backoff base.
    pub base: Duration,
    /// Backoff cap.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The random wait before retry number `attempt` (1-based): uniform in
    /// `[0, min(cap, base × 2^(attempt−1))]`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.cap);
        ceiling.mul_f64(rand::rng().random::<f64>())
    }
}

struct Server {
    url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    train: Arc<Semaphore>,
    eval: Arc<Semaphore>,
    stats: Mutex<RequestStats>,
}

/// A client over one or more OpenAI-compatible servers.
pub struct LlmClient {
    http: reqwest::Client,
    servers: Arc<[Server]>,
    retry: RetryPolicy,
    max_n: u32,
    next: AtomicUsize,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.url).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// A clone shares the servers, their request limits and their statistics (for example the
/// LLM judge a reward calls through [`crate::context::ToolContext::judge`]).
impl Clone for LlmClient {
    fn clone(&self) -> Self {
        LlmClient {
            http: self.http.clone(),
            servers: Arc::clone(&self.servers),
            retry: self.retry,
            max_n: self.max_n,
            next: AtomicUsize::new(self.next.load(Ordering::Relaxed)),
        }
    }
}

/// The HTTP client shared by the inference clients: rustls with the ring provider, a 30 s
/// connect timeout and a large idle pool for many concurrent rollouts.
pub(crate) fn http_client() -> Result<reqwest::Client, LlmError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(256)
        .build()
        .map_err(|e| LlmError::Config(format!("HTTP client: {e}")))
}

impl LlmClient {
    /// A client for `configs`; each needs a `base_url`.
    pub fn new(
        configs: &[ApiServerConfig],
        max_n: u32,
        retry: RetryPolicy,
    ) -> Result<Self, LlmError> {
        if configs.is_empty() {
            return Err(LlmError::Config("no inference server configured".into()));
        }
        let http = http_client()?;
        let servers = configs
            .iter()
            .map(|c| {
                let base = c.base_url().ok_or_else(|| {
                    LlmError::Config(
                        "--openai.base_url is not set (e.g. http://localhost:9001/v1); or run with --testing true \
                         to use the embedded scripted server"
                            .into(),
                    )
                })?;
                Ok(Server {
                    url: format!("{base}/chat/completions"),
                    model: c.model_name.clone(),
                    api_key: c.resolved_api_key(),
                    timeout: Duration::from_secs(c.timeout.max(1) as u64),
                    train: Arc::new(Semaphore::new(c.num_max_requests_at_once.max(1) as usize)),
                    eval: Arc::new(Semaphore::new(c.num_requests_for_eval.max(1) as usize)),
                    stats: Mutex::new(RequestStats::default()),
                })
            })
            .collect::<Result<Vec<_>, LlmError>>()?;
        Ok(LlmClient {
            http,
            servers: servers.into(),
            retry,
            max_n: max_n.max(1),
            next: AtomicUsize::new(0),
        })
    }

    /// Number of servers.
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// Request statistics of every server (in configuration order) since the last call,
    /// which clears them.
    pub fn take_request_stats(&self) -> Vec<RequestStats> {
        self.servers
            .iter()
            .map(|s| std::mem::take(&mut *s.stats.lock().expect("stats lock poisoned")))
            .collect()
    }

    fn pick(&self, split: Split) -> &Server {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let n = self.servers.len();
        (0..n)
            .map(|i| &self.servers[(start + i) % n])
            .max_by_key(|s| match split {
                Split::Train => s.train.available_permits(),
                Split::Eval => s.eval.available_permits(),
            })
            .expect("at least one server")
    }

    /// Sends a chat completion; `n` above `max_n_completions` is split into several calls
    /// whose choices are concatenated.
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        if request.n <= self.max_n {
            return self.chat_once(request).await;
        }
        let mut parts = Vec::new();
        let mut left = request.n;
        while left > 0 {
            let mut part = request.clone();
            part.n = left.min(self.max_n);
            left -= part.n;
            parts.push(part);
        }
        let results = futures::future::join_all(parts.iter().map(|p| self.chat_once(p))).await;
        let mut merged = ChatResponse {
            choices: Vec::new(),
        };
        for r in results {
            merged.choices.extend(r?.choices);
        }
        Ok(merged)
    }

    async fn chat_once(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let server = self.pick(request.split);
        let semaphore = match request.split {
            Split::Train => &server.train,
            Split::Eval => &server.eval,
        };
        let _permit = semaphore
            .acquire()
            .await
            .expect("semaphores are never closed");
        let body = request.to_body(&server.model);
        let started = Instant::now();
        let mut attempt = 1;
        let record = |attempts: u32| {
            server.stats.lock().expect("stats lock poisoned").record(
                request.split == Split::Eval,
                started.elapsed(),
                attempts,
            );
        };
        loop {
            match self.send(server, &body).await {
                Ok(r) => {
                    record(attempt);
                    return Ok(r);
                }
                Err(e) if e.retryable() && attempt < self.retry.attempts => {
                    let wait = self.retry.backoff(attempt);
                    tracing::warn!(
                        attempt,
                        of = self.retry.attempts,
                        "chat request failed: {e}; retrying in {wait:.1?}"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(e) => {
                    record(attempt);
                    return Err(e);
                }
            }
        }
    }

    async fn send(
        &self,
        server: &Server,
        body: &serde_json::Value,
    ) -> Result<ChatResponse, LlmError> {
        let url = &server.url;
        let mut req = self.http.post(url).json(body).timeout(server.timeout);
        if let Some(key) = &server.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_timeout() {
                LlmError::Timeout {
                    url: url.clone(),
                    secs: server.timeout.as_secs(),
                }
            } else {
                LlmError::Connect {
                    url: url.clone(),
                    reason: error_chain(&e),
                }
            }
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| {
            if e.is_timeout() {
                LlmError::Timeout {
                    url: url.clone(),
                    secs: server.timeout.as_secs(),
                }
            } else {
                LlmError::Connect {
                    url: url.clone(),
                    reason: error_chain(&e),
                }
            }
        })?;
        if !status.is_success() {
            return Err(LlmError::Status {
                url: url.clone(),
                status: status.as_u16(),
                body: snippet(&text),
            });
        }
        serde_json::from_str(&text).map_err(|e| LlmError::Decode {
            url: url.clone(),
            reason: format!("{e}: {}", snippet(&text)),
        })
    }
}
