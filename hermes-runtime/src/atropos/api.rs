//! Client of the Atropos trajectory API (`run-api`), with the reference environment's rules:
//! `/register-env` polled while the trainer has not started, `GET /status-env` with a JSON
//! body, scored data gzipped when that helps, 5xx and connection errors retried with random
//! exponential backoff, 4xx on scored data logged and dropped.

use crate::diagnostics::{error_chain, snippet};
use crate::llm::http::{read_capped, ReadError};
use std::io::Write as _;
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::{info, warn};

use super::ScoredDataGroup;
use crate::llm::RetryPolicy;
use crate::pyjson::JsonLayout;

/// The most bytes of one trajectory-API answer read: the env's calls get small JSON answers,
/// and a broken or hostile server cannot make the process hold more.
pub const API_RESPONSE_LIMIT: usize = 16 << 20;

/// Request bodies at least this large are gzipped when that makes them smaller.
pub(crate) const GZIP_THRESHOLD: usize = 1024;

/// Why a trajectory-API call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The server answered with an error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// First part of the body, on one line.
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
    /// The response was not the expected JSON.
    #[error("{url}: invalid response: {reason}")]
    Decode {
        /// Request URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// The client could not be built.
    #[error("trajectory API client: {0}")]
    Config(String),
}

impl ApiError {
    /// True for 4xx answers: the request itself is wrong and retrying cannot help.
    pub fn is_client_error(&self) -> bool {
        matches!(self, ApiError::Status { status, .. } if (400..500).contains(status))
    }
}

/// The `/register-env` request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegisterEnv {
    /// The environment's `max_token_length`.
    pub max_token_length: i64,
    /// `wandb_name` (defaults to the environment's name).
    pub desired_name: String,
    /// `inference_weight`.
    pub weight: f64,
    /// `min_batch_allocation`.
    pub min_batch_allocation: Option<f64>,
    /// `group_size`.
    pub group_size: i64,
}

/// A successful `/register-env` answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Registration {
    /// The id to put on every group.
    pub env_id: i64,
    /// `{desired_name}_{k}`: the prefix of this environment's wandb keys.
    pub wandb_name: String,
    /// The trainer's checkpoint directory.
    #[serde(default)]
    pub checkpoint_dir: String,
    /// The server's current step.
    pub starting_step: i64,
    /// The trainer's checkpoint interval.
    #[serde(default)]
    pub checkpoint_interval: i64,
    /// The trainer's total steps (-1 when unknown).
    pub num_steps: i64,
}

/// `/info`: the trainer's batch size and token limit (-1 before the trainer registers).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct ApiInfo {
    /// Sequences per trainer batch.
    pub batch_size: i64,
    /// Length limit for sequences.
    pub max_token_len: i64,
}

/// `/wandb_info`: where the trainer logs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WandbInfo {
    /// wandb group.
    pub group: Option<String>,
    /// wandb project (null until the trainer registers).
    pub project: Option<String>,
}

/// `/status-env`: the queue as seen by this environment.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct EnvStatus {
    /// The trainer's step.
    pub current_step: i64,
    /// Queue depth in units of this environment's groups.
    pub queue_size: i64,
    /// 1 − Σ min_batch_allocation of connected environments.
    #[serde(default = "one")]
    pub unallocated_fraction: f64,
    /// This environment's queued groups.
    #[serde(default)]
    pub self_queue_size: i64,
    /// Largest queued group (at least 1).
    #[serde(default = "one_i")]
    pub max_group_size: i64,
    /// This environment's share of the inference fleet.
    #[serde(default = "one")]
    pub env_weight: f64,
}

fn one() -> f64 {
    1.0
}

fn one_i() -> i64 {
    1
}

/// What happened to posted groups.
#[derive(Debug, Clone, PartialEq)]
pub enum SendOutcome {
    /// The server took them (its JSON answer).
    Accepted(Value),
    /// The server refused them with a 4xx; they are dropped, as upstream does.
    Rejected(ApiError),
}

/// A trajectory-API client for one server.
#[derive(Debug, Clone)]
pub struct TrajectoryApi {
    http: reqwest::Client,
    base: String,
    retry: RetryPolicy,
    poll: Duration,
}

/// The body of a POST: JSON, gzipped when at least `GZIP_THRESHOLD` bytes and smaller so.
pub fn encode_body(json: Vec<u8>) -> (Vec<u8>, bool) {
    if json.len() < GZIP_THRESHOLD {
        return (json, false);
    }
    let mut enc = GzEncoder::new(Vec::with_capacity(json.len() / 4), Compression::fast());
    let zipped = enc
        .write_all(&json)
        .and_then(|()| enc.finish())
        .unwrap_or_default();
    if !zipped.is_empty() && zipped.len() < json.len() {
        (zipped, true)
    } else {
        (json, false)
    }
}

impl TrajectoryApi {
    /// A client for `base_url` (e.g. `http://localhost:8000`); `poll` is the wait between
    /// `/register-env` attempts while the trainer has not started (upstream: 1 s).
    pub fn new(base_url: &str, retry: RetryPolicy, poll: Duration) -> Result<Self, ApiError> {
        let http = crate::tls::client_builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| ApiError::Config(e.to_string()))?;
        Ok(TrajectoryApi {
            http,
            base: base_url.trim_end_matches('/').to_owned(),
            retry,
            poll,
        })
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn backoff(&self, attempt: u32) {
        tokio::time::sleep(self.retry.backoff(attempt)).await;
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Value, ApiError> {
        let url = self.url(path);
        let mut req = self.http.request(method, &url);
        if let Some(json) = body {
            let (bytes, gzipped) = encode_body(json);
            req = req.header(CONTENT_TYPE, "application/json");
            if gzipped {
                req = req.header(CONTENT_ENCODING, "gzip");
            }
            req = req.body(bytes);
        }
        let resp = req.send().await.map_err(|e| ApiError::Connect {
            url: url.clone(),
            reason: error_chain(&e),
        })?;
        let status = resp.status();
        let text = match read_capped(resp, API_RESPONSE_LIMIT).await {
            Ok(text) => text,
            Err(ReadError::Transport(e)) => {
                return Err(ApiError::Connect {
                    url,
                    reason: error_chain(&e),
                })
            }
            Err(too_large) => {
                return Err(ApiError::Decode {
                    url,
                    reason: too_large.to_string(),
                })
            }
        };
        if !status.is_success() {
            return Err(ApiError::Status {
                url,
                status: status.as_u16(),
                body: snippet(&text),
            });
        }
        serde_json::from_str(&text).map_err(|e| ApiError::Decode {
            url,
            reason: format!("{e}: {}", snippet(&text)),
        })
    }

    /// `call` with up to `retry.attempts` attempts; `retry_client_errors` decides whether 4xx
    /// answers are retried too (upstream retries everything except on scored data).
    async fn call_retrying(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        retry_client_errors: bool,
    ) -> Result<Value, ApiError> {
        let mut attempt = 1;
        loop {
            match self.call(method.clone(), path, body.clone()).await {
                Ok(v) => return Ok(v),
                Err(e)
                    if attempt < self.retry.attempts
                        && (retry_client_errors || !e.is_client_error()) =>
                {
                    warn!(
                        attempt,
                        of = self.retry.attempts,
                        "{path} failed: {e}; retrying"
                    );
                    self.backoff(attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, path: &str, v: Value) -> Result<T, ApiError> {
        serde_json::from_value(v.clone()).map_err(|e| ApiError::Decode {
            url: self.url(path),
            reason: format!("{e}: {}", snippet(&v.to_string())),
        })
    }

    /// `POST /register-env`: 3 attempts per call on errors, and polled every `poll` while the
    /// server answers "wait for trainer to start".
    pub async fn register_env(&self, request: &RegisterEnv) -> Result<Registration, ApiError> {
        let body = serde_json::to_vec(request).expect("registration serialises");
        let mut waited = false;
        loop {
            let v = self
                .call_retrying(
                    reqwest::Method::POST,
                    "/register-env",
                    Some(body.clone()),
                    true,
                )
                .await?;
            if v.get("status").and_then(Value::as_str) == Some("success") {
                return self.decode("/register-env", v);
            }
            if !waited {
                let status = v.get("status").cloned().unwrap_or_default();
                info!(
                    "trajectory API at {} answers {status}; waiting for the trainer to start",
                    self.base
                );
                waited = true;
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// `GET /info` (no retries, as upstream).
    pub async fn info(&self) -> Result<ApiInfo, ApiError> {
        let v = self.call(reqwest::Method::GET, "/info", None).await?;
        self.decode("/info", v)
    }

    /// `GET /wandb_info` (no retries).
    pub async fn wandb_info(&self) -> Result<WandbInfo, ApiError> {
        let v = self.call(reqwest::Method::GET, "/wandb_info", None).await?;
        self.decode("/wandb_info", v)
    }

    /// `GET /status-env` with the JSON body `{"env_id": N}`, 3 attempts.
    pub async fn status_env(&self, env_id: i64) -> Result<EnvStatus, ApiError> {
        let body = serde_json::to_vec(&serde_json::json!({ "env_id": env_id }))
            .expect("status body serialises");
        let v = self
            .call_retrying(reqwest::Method::GET, "/status-env", Some(body), true)
            .await?;
        self.decode("/status-env", v)
    }

    /// Posts groups: one group to `/scored_data`, several to `/scored_data_list`. 5xx and
    /// connection errors get 3 attempts and are then returned; a 4xx is `Rejected`.
    pub async fn send(&self, groups: &[ScoredDataGroup]) -> Result<SendOutcome, ApiError> {
        let (path, body) = match groups {
            [one] => ("/scored_data", one.to_json(JsonLayout::Compact)),
            many => ("/scored_data_list", json_list(many)),
        };
        match self
            .call_retrying(reqwest::Method::POST, path, Some(body), false)
            .await
        {
            Ok(v) => Ok(SendOutcome::Accepted(v)),
            Err(e) if e.is_client_error() => Ok(SendOutcome::Rejected(e)),
            Err(e) => Err(e),
        }
    }

    /// `POST /disconnect-env`.
    pub async fn disconnect_env(&self, env_id: i64) -> Result<Value, ApiError> {
        let body = serde_json::to_vec(&serde_json::json!({ "env_id": env_id }))
            .expect("disconnect body serialises");
        self.call(reqwest::Method::POST, "/disconnect-env", Some(body))
            .await
    }
}

/// `groups` as one compact JSON array (the `/scored_data_list` body), each written by
/// [`ScoredDataGroup::to_json`].
fn json_list(groups: &[ScoredDataGroup]) -> Vec<u8> {
    let mut body = vec![b'['];
    for (i, group) in groups.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&group.to_json(JsonLayout::Compact));
    }
    body.push(b']');
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn a_list_body_is_what_serde_json_writes_for_the_groups() {
        let group = |score: f64| ScoredDataGroup {
            tokens: vec![vec![1, 2, 151_643]],
            masks: vec![vec![-100, 2, 151_643]],
            scores: vec![score],
            ..Default::default()
        };
        let groups = [group(1.0), group(0.0)];
        assert_eq!(json_list(&groups), serde_json::to_vec(&groups).unwrap());
        assert_eq!(json_list(&[]), b"[]");
    }

    #[test]
    fn small_bodies_stay_plain_and_big_ones_are_gzipped_when_smaller() {
        let small = vec![b'a'; GZIP_THRESHOLD - 1];
        assert_eq!(encode_body(small.clone()), (small, false));
        let big = vec![b'a'; GZIP_THRESHOLD];
        let (bytes, gz) = encode_body(big.clone());
        assert!(gz && bytes.len() < big.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, big);
        // Incompressible data at the threshold is sent as is.
        let mut noise = vec![0u8; 2048];
        rand::Rng::fill(&mut rand::rng(), &mut noise[..]);
        assert!(!encode_body(noise).1);
    }

    /// A server answering `/scored_data` with `status` and counting the attempts, and
    /// `/register-env` with "wait" twice before succeeding.
    async fn stub(status: u16) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use axum::routing::{get, post};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let (h1, h2) = (hits.clone(), hits.clone());
        let app = axum::Router::new()
            .route(
                "/scored_data",
                post(
                    move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                        let hits = h1.clone();
                        async move {
                            hits.fetch_add(1, Ordering::SeqCst);
                            let gz = headers.get("content-encoding").is_some();
                            let code = axum::http::StatusCode::from_u16(status).unwrap();
                            (code, format!("{{\"gzip\": {gz}, \"len\": {}}}", body.len()))
                        }
                    },
                ),
            )
            .route(
                "/register-env",
                post(move || {
                    let hits = h2.clone();
                    async move {
                        if hits.fetch_add(1, Ordering::SeqCst) < 2 {
                            axum::Json(serde_json::json!({"status": "wait for trainer to start"}))
                        } else {
                            axum::Json(serde_json::json!({"status": "success", "env_id": 3,
                                "wandb_name": "x_0", "checkpoint_dir": "c", "starting_step": 5,
                                "checkpoint_interval": 2, "num_steps": 9}))
                        }
                    }
                }),
            )
            .route(
                "/status-env",
                get(|body: axum::Json<Value>| async move {
                    axum::Json(serde_json::json!({"current_step": body["env_id"], "queue_size": 0}))
                }),
            );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, hits)
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(5),
        }
    }

    fn big_group() -> ScoredDataGroup {
        ScoredDataGroup {
            tokens: vec![vec![7; 600]],
            masks: vec![vec![-100; 600]],
            scores: vec![1.0],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn client_errors_are_dropped_without_retry_and_server_errors_retried() {
        use std::sync::atomic::Ordering;
        let (url, hits) = stub(422).await;
        let api = TrajectoryApi::new(&url, fast(), Duration::from_millis(1)).unwrap();
        assert!(matches!(
            api.send(&[big_group()]).await,
            Ok(SendOutcome::Rejected(ApiError::Status { status: 422, .. }))
        ));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        let (url, hits) = stub(503).await;
        let api = TrajectoryApi::new(&url, fast(), Duration::from_millis(1)).unwrap();
        assert!(api.send(&[big_group()]).await.is_err());
        assert_eq!(hits.load(Ordering::SeqCst), 3);
        let (url, _) = stub(200).await;
        let api = TrajectoryApi::new(&url, fast(), Duration::from_millis(1)).unwrap();
        match api.send(&[big_group()]).await.unwrap() {
            SendOutcome::Accepted(v) => assert_eq!(v["gzip"], true, "a big body is gzipped"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn register_polls_while_waiting_and_status_sends_a_json_body_on_get() {
        let (url, _) = stub(200).await;
        let api = TrajectoryApi::new(&url, fast(), Duration::from_millis(1)).unwrap();
        let reg = api
            .register_env(&RegisterEnv {
                max_token_length: 8,
                desired_name: "x".into(),
                weight: 1.0,
                min_batch_allocation: None,
                group_size: 2,
            })
            .await
            .unwrap();
        assert_eq!((reg.env_id, reg.starting_step, reg.num_steps), (3, 5, 9));
        assert_eq!(api.status_env(41).await.unwrap().current_step, 41);
    }

    #[test]
    fn status_defaults_and_client_errors() {
        let s: EnvStatus = serde_json::from_str(r#"{"current_step": 2, "queue_size": 3}"#).unwrap();
        assert_eq!((s.max_group_size, s.env_weight), (1, 1.0));
        let e = ApiError::Status {
            url: "u".into(),
            status: 422,
            body: String::new(),
        };
        assert!(e.is_client_error());
    }
}
