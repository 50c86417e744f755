//! Token-in/token-out generation over the native `/generate` endpoints of vLLM and SGLang
//! (Phase 2): prompt token ids in, output token ids with their logprobs and the finish reason
//! out. Per-server train/eval limits scaled by the environment's weight, least-loaded server
//! choice, retries with random exponential backoff on 5xx / 429 / connection errors.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::{LlmError, RequestStats, RetryPolicy, Split};
use crate::config::{ApiServerConfig, ServerType};

/// One `/generate` call: `n` samples continuing `input_ids`.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    /// Prompt token ids.
    pub input_ids: Vec<u32>,
    /// Number of samples.
    pub n: u32,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: f64,
    /// Train or eval limits.
    pub split: Split,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Output token ids.
    pub ids: Vec<u32>,
    /// The sampled tokens' logprobs, aligned with `ids`.
    pub logprobs: Vec<f64>,
    /// `stop`, `length`, …
    pub finish_reason: String,
}

/// The vLLM request body (`/generate` of the Atropos reference server).
pub fn vllm_body(req: &GenerateRequest) -> Value {
    let mut body = Map::new();
    body.insert(
        "prompt".into(),
        json!({ "prompt_token_ids": req.input_ids }),
    );
    body.insert("logprobs".into(), 0.into());
    body.insert("n".into(), req.n.into());
    if let Some(m) = req.max_tokens {
        body.insert("max_tokens".into(), m.into());
    }
    body.insert("temperature".into(), req.temperature.into());
    Value::Object(body)
}

/// The SGLang request body.
pub fn sglang_body(req: &GenerateRequest) -> Value {
    let mut params = Map::new();
    params.insert("n".into(), req.n.into());
    if let Some(m) = req.max_tokens {
        params.insert("max_new_tokens".into(), m.into());
    }
    params.insert("temperature".into(), req.temperature.into());
    json!({"input_ids": req.input_ids, "sampling_params": params,
           "return_logprob": true, "return_text_in_logprobs": false})
}

fn bad(reason: impl Into<String>) -> String {
    reason.into()
}

/// Reads a vLLM answer: `logprobs[c][t] = [{"<id>": lp}]` and `finish_reasons[c]`.
pub fn parse_vllm(v: &Value) -> Result<Vec<Generated>, String> {
    let logprobs = v
        .get("logprobs")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `logprobs` list"))?;
    let reasons = v.get("finish_reasons").and_then(Value::as_array);
    logprobs
        .iter()
        .enumerate()
        .map(|(c, sample)| {
            let steps = sample
                .as_array()
                .ok_or_else(|| bad(format!("logprobs[{c}] is not a list")))?;
            let mut ids = Vec::with_capacity(steps.len());
            let mut lps = Vec::with_capacity(steps.len());
            for step in steps {
                let map = match step {
                    Value::Array(a) => a.first().and_then(Value::as_object),
                    Value::Object(o) => Some(o),
                    _ => None,
                }
                .ok_or_else(|| bad(format!("logprobs[{c}] has a malformed step: {step}")))?;
                let (id, lp) = map
                    .iter()
                    .next()
                    .ok_or_else(|| bad(format!("logprobs[{c}] has an empty step")))?;
                ids.push(
                    id.parse::<u32>()
                        .map_err(|_| bad(format!("token id {id:?} is not a number")))?,
                );
                lps.push(lp.as_f64().unwrap_or(0.0));
            }
            let finish_reason = reasons
                .and_then(|r| r.get(c))
                .and_then(Value::as_str)
                .unwrap_or("stop")
                .to_owned();
            Ok(Generated {
                ids,
                logprobs: lps,
                finish_reason,
            })
        })
        .collect()
}

/// Reads an SGLang answer: one object or a list, each with
/// `meta_info.output_token_logprobs = [[lp, id, text], …]` and `meta_info.finish_reason`.
pub fn parse_sglang(v: &Value) -> Result<Vec<Generated>, String> {
    let outputs: Vec<&Value> = match v {
        Value::Array(list) => list.iter().collect(),
        other => vec![other],
    };
    outputs
        .into_iter()
        .map(|o| {
            let meta = o.get("meta_info").ok_or_else(|| bad("no `meta_info`"))?;
            let steps = meta
                .get("output_token_logprobs")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("no `meta_info.output_token_logprobs`"))?;
            let mut ids = Vec::with_capacity(steps.len());
            let mut lps = Vec::with_capacity(steps.len());
            for s in steps {
                let lp = s.get(0).and_then(Value::as_f64).unwrap_or(0.0);
                let id = s
                    .get(1)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| bad(format!("malformed logprob entry {s}")))?;
                ids.push(id as u32);
                lps.push(lp);
            }
            let finish_reason = match meta.get("finish_reason") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Object(o)) => o
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("stop")
                    .to_owned(),
                _ => "stop".into(),
            };
            Ok(Generated {
                ids,
                logprobs: lps,
                finish_reason,
            })
        })
        .collect()
}

struct Server {
    url: String,
    kind: ServerType,
    api_key: Option<String>,
    timeout: Duration,
    train: (Semaphore, usize),
    eval: (Semaphore, usize),
    stats: Mutex<RequestStats>,
}

/// A `/generate` client over one or more vLLM / SGLang servers.
pub struct GenerateClient {
    http: reqwest::Client,
    servers: Vec<Server>,
    retry: RetryPolicy,
    next: AtomicUsize,
    weight: AtomicU64,
}

impl std::fmt::Debug for GenerateClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerateClient")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.url).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl GenerateClient {
    /// A client for `configs`; each must be a `vllm` or `sglang` server with a `base_url`
    /// (`/generate` is served at the root, without `/v1`).
    pub fn new(configs: &[ApiServerConfig], retry: RetryPolicy) -> Result<Self, LlmError> {
        if configs.is_empty() {
            return Err(LlmError::Config("no inference server configured".into()));
        }
        let http = super::client::http_client()?;
        let servers = configs
            .iter()
            .map(|c| {
                if !matches!(c.server_type, ServerType::Vllm | ServerType::Sglang) {
                    return Err(LlmError::Config(format!(
                        "token tracking needs --openai.server_type vllm or sglang, not {:?}",
                        c.server_type
                    )));
                }
                let base = c.base_url().ok_or_else(|| {
                    LlmError::Config(
                        "--openai.base_url is not set (e.g. http://localhost:9001/v1)".into(),
                    )
                })?;
                let root = base.strip_suffix("/v1").unwrap_or(base);
                let train = c.num_max_requests_at_once.max(1) as usize;
                let eval = c.num_requests_for_eval.max(1) as usize;
                Ok(Server {
                    url: format!("{root}/generate"),
                    kind: c.server_type,
                    api_key: c.resolved_api_key(),
                    timeout: Duration::from_secs(c.timeout.max(1) as u64),
                    train: (Semaphore::new(train), train),
                    eval: (Semaphore::new(eval), eval),
                    stats: Mutex::new(RequestStats::default()),
                })
            })
            .collect::<Result<Vec<_>, LlmError>>()?;
        Ok(GenerateClient {
            http,
            servers,
            retry,
            next: AtomicUsize::new(0),
            weight: AtomicU64::new(1f64.to_bits()),
        })
    }

    /// Sets this environment's share of every server (`env_weight` from `/status-env`): a
    /// request waits while a server's free slots are at most `max × (1 − weight)`, so the
    /// effective concurrency is about `max × weight`.
    pub fn set_weight(&self, weight: f64) {
        let w = if weight.is_finite() {
            weight.clamp(0.0, 1.0)
        } else {
            1.0
        };
        self.weight.store(w.to_bits(), Ordering::Relaxed);
    }

    fn weight(&self) -> f64 {
        f64::from_bits(self.weight.load(Ordering::Relaxed))
    }

    /// Request statistics of every server since the last call, which clears them.
    pub fn take_request_stats(&self) -> Vec<RequestStats> {
        self.servers
            .iter()
            .map(|s| std::mem::take(&mut *s.stats.lock().expect("stats lock poisoned")))
            .collect()
    }

    /// Waits for a weighted slot on the least-loaded server.
    async fn acquire(&self, split: Split) -> (&Server, SemaphorePermit<'_>) {
        loop {
            let start = self.next.fetch_add(1, Ordering::Relaxed);
            let n = self.servers.len();
            let limits = |s: &'_ Server| match split {
                Split::Train => (s.train.0.available_permits(), s.train.1),
                Split::Eval => (s.eval.0.available_permits(), s.eval.1),
            };
            let server = (0..n)
                .map(|i| &self.servers[(start + i) % n])
                .max_by_key(|s| limits(s).0)
                .expect("at least one server");
            let (free, max) = limits(server);
            let reserve = max as f64 * (1.0 - self.weight());
            let sem = match split {
                Split::Train => &server.train.0,
                Split::Eval => &server.eval.0,
            };
            if free as f64 > reserve {
                if let Ok(permit) = sem.try_acquire() {
                    return (server, permit);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Generates `request.n` samples.
    pub async fn generate(&self, request: &GenerateRequest) -> Result<Vec<Generated>, LlmError> {
        let (server, _permit) = self.acquire(request.split).await;
        let body = match server.kind {
            ServerType::Sglang => sglang_body(request),
            _ => vllm_body(request),
        };
        let started = Instant::now();
        let mut attempt = 1;
        let outcome = loop {
            match self.send(server, &body).await {
                Err(e) if e.retryable() && attempt < self.retry.attempts => {
                    let wait = self.retry.backoff(attempt);
                    tracing::warn!(
                        attempt,
                        of = self.retry.attempts,
                        "generate request failed: {e}; retrying in {wait:.1?}"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                other => break other,
            }
        };
        server.stats.lock().expect("stats lock poisoned").record(
            request.split == Split::Eval,
            started.elapsed(),
            attempt,
        );
        outcome
    }

    async fn send(&self, server: &Server, body: &Value) -> Result<Vec<Generated>, LlmError> {
        let url = &server.url;
        let mut req = self.http.post(url).json(body).timeout(server.timeout);
        if let Some(key) = &server.api_key {
            req = req.bearer_auth(key);
        }
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                LlmError::Timeout {
                    url: url.clone(),
                    secs: server.timeout.as_secs(),
                }
            } else {
                LlmError::Connect {
                    url: url.clone(),
                    reason: e.to_string(),
                }
            }
        };
        let resp = req.send().await.map_err(failed)?;
        let status = resp.status();
        let text = resp.text().await.map_err(failed)?;
        if !status.is_success() {
            return Err(LlmError::Status {
                url: url.clone(),
                status: status.as_u16(),
                body: text.chars().take(300).collect(),
            });
        }
        let decode = |reason: String| LlmError::Decode {
            url: url.clone(),
            reason,
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| decode(e.to_string()))?;
        match server.kind {
            ServerType::Sglang => parse_sglang(&v),
            _ => parse_vllm(&v),
        }
        .map_err(decode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_shapes_match_the_reference_server() {
        let req = GenerateRequest {
            input_ids: vec![1, 2, 3],
            n: 2,
            max_tokens: Some(64),
            temperature: 1.0,
            split: Split::Train,
        };
        assert_eq!(
            vllm_body(&req),
            json!({"prompt": {"prompt_token_ids": [1, 2, 3]}, "logprobs": 0, "n": 2,
                   "max_tokens": 64, "temperature": 1.0})
        );
        let answer = json!({"text": ["Hello", "Hi"], "finish_reasons": ["stop", "length"],
            "logprobs": [[[{"9906": -0.11}], [{"128009": -0.02}]], [[{"13347": -1.3}]]],
            "token_ids": [[9906, 128009], [13347]]});
        let out = parse_vllm(&answer).unwrap();
        assert_eq!(out[0].ids, vec![9906, 128009]);
        assert_eq!(out[0].logprobs, vec![-0.11, -0.02]);
        assert_eq!(out[1].finish_reason, "length");
    }

    #[test]
    fn sglang_shapes_match_the_reference_server() {
        let req = GenerateRequest {
            input_ids: vec![1, 2, 3],
            n: 2,
            max_tokens: Some(64),
            temperature: 1.0,
            split: Split::Train,
        };
        assert_eq!(
            sglang_body(&req),
            json!({"input_ids": [1, 2, 3], "sampling_params": {"n": 2, "max_new_tokens": 64,
                   "temperature": 1.0}, "return_logprob": true, "return_text_in_logprobs": false})
        );
        let answer = json!([{"text": "Hello", "meta_info": {"output_token_logprobs":
            [[-0.11, 9906, null], [-0.02, 128009, null]], "finish_reason": {"type": "stop"}}}]);
        let out = parse_sglang(&answer).unwrap();
        assert_eq!(
            out,
            vec![Generated {
                ids: vec![9906, 128009],
                logprobs: vec![-0.11, -0.02],
                finish_reason: "stop".into()
            }]
        );
    }
}
