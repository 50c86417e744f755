//! Token-in/token-out generation over the native `/generate` endpoints of vLLM and SGLang
//! (Phase 2): prompt token ids in, output token ids with their logprobs and the finish reason
//! out. Server choice, request limits, retries and failover are the [`ServerPool`]'s.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::health::Failover;
use super::http::post_json;
use super::pool::{AttemptError, ServerPool};
use super::{LlmError, RequestStats, RetryPolicy, Split};
use crate::config::{ApiServerConfig, ServerType};
use crate::diagnostics::snippet;

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
pub(crate) fn vllm_body(req: &GenerateRequest) -> Value {
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
pub(crate) fn sglang_body(req: &GenerateRequest) -> Value {
    let mut params = Map::new();
    params.insert("n".into(), req.n.into());
    if let Some(m) = req.max_tokens {
        params.insert("max_new_tokens".into(), m.into());
    }
    params.insert("temperature".into(), req.temperature.into());
    json!({"input_ids": req.input_ids, "sampling_params": params,
           "return_logprob": true, "return_text_in_logprobs": false})
}

/// Reads a vLLM answer: `logprobs[c][t] = [{"<id>": lp}]` and `finish_reasons[c]`.
pub(crate) fn parse_vllm(v: &Value) -> Result<Vec<Generated>, String> {
    let logprobs = v
        .get("logprobs")
        .and_then(Value::as_array)
        .ok_or_else(|| "no `logprobs` list".to_string())?;
    let reasons = v.get("finish_reasons").and_then(Value::as_array);
    logprobs
        .iter()
        .enumerate()
        .map(|(c, sample)| {
            let steps = sample
                .as_array()
                .ok_or_else(|| format!("logprobs[{c}] is not a list"))?;
            let mut ids = Vec::with_capacity(steps.len());
            let mut lps = Vec::with_capacity(steps.len());
            for step in steps {
                let map = match step {
                    Value::Array(a) => a.first().and_then(Value::as_object),
                    Value::Object(o) => Some(o),
                    _ => None,
                }
                .ok_or_else(|| format!("logprobs[{c}] has a malformed step: {step}"))?;
                let (id, lp) = map
                    .iter()
                    .next()
                    .ok_or_else(|| format!("logprobs[{c}] has an empty step"))?;
                ids.push(
                    id.parse::<u32>()
                        .map_err(|_| format!("token id {id:?} is not a number"))?,
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
pub(crate) fn parse_sglang(v: &Value) -> Result<Vec<Generated>, String> {
    let outputs: Vec<&Value> = match v {
        Value::Array(list) => list.iter().collect(),
        other => vec![other],
    };
    outputs
        .into_iter()
        .map(|o| {
            let meta = o
                .get("meta_info")
                .ok_or_else(|| "no `meta_info`".to_string())?;
            let steps = meta
                .get("output_token_logprobs")
                .and_then(Value::as_array)
                .ok_or_else(|| "no `meta_info.output_token_logprobs`".to_string())?;
            let mut ids = Vec::with_capacity(steps.len());
            let mut lps = Vec::with_capacity(steps.len());
            for s in steps {
                let lp = s.get(0).and_then(Value::as_f64).unwrap_or(0.0);
                let id = s
                    .get(1)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| format!("malformed logprob entry {s}"))?;
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

/// A `/generate` client over one or more vLLM / SGLang servers (a [`ServerPool`], usually the
/// one the run's chat client shares).
#[derive(Debug, Clone)]
pub struct GenerateClient {
    pool: Arc<ServerPool>,
}

impl GenerateClient {
    /// A client with its own pool of `configs` and the default failover settings; each must be
    /// a `vllm` or `sglang` server with a `base_url` (`/generate` is served at the root,
    /// without `/v1`).
    pub fn new(configs: &[ApiServerConfig], retry: RetryPolicy) -> Result<Self, LlmError> {
        let pool = ServerPool::new(configs, retry, Failover::default())?;
        Self::with_pool(Arc::new(pool))
    }

    /// A client over a shared pool, whose servers must all be `vllm` or `sglang`.
    pub fn with_pool(pool: Arc<ServerPool>) -> Result<Self, LlmError> {
        if let Some(other) = pool
            .endpoints()
            .iter()
            .find(|e| !matches!(e.kind, ServerType::Vllm | ServerType::Sglang))
        {
            return Err(LlmError::Config(format!(
                "token tracking needs --openai.server_type vllm or sglang, not {:?} ({})",
                other.kind, other.base
            )));
        }
        Ok(GenerateClient { pool })
    }

    /// Sets this environment's share of every server (`env_weight` from `/status-env`); see
    /// [`ServerPool::set_weight`].
    pub fn set_weight(&self, weight: f64) {
        self.pool.set_weight(weight);
    }

    /// Request statistics of every server since the last call, which clears them.
    pub fn take_request_stats(&self) -> Vec<RequestStats> {
        self.pool.take_request_stats()
    }

    /// The servers this client sends to.
    pub fn pool(&self) -> &Arc<ServerPool> {
        &self.pool
    }

    /// Generates `request.n` samples.
    pub async fn generate(&self, request: &GenerateRequest) -> Result<Vec<Generated>, LlmError> {
        self.generate_sparing(request, false).await
    }

    /// [`Self::generate`] for one group's `n` samples: a refusal that may be about `n`
    /// ([`LlmError::may_refuse_n`]) is returned without stopping the run, so the caller can
    /// fall back to one request per rollout.
    pub async fn generate_group(
        &self,
        request: &GenerateRequest,
    ) -> Result<Vec<Generated>, LlmError> {
        self.generate_sparing(request, true).await
    }

    async fn generate_sparing(
        &self,
        request: &GenerateRequest,
        n_may_be_refused: bool,
    ) -> Result<Vec<Generated>, LlmError> {
        let http = self.pool.http();
        let spare = |e: &LlmError| n_may_be_refused && e.may_refuse_n();
        self.pool
            .call_sparing(request.split, spare, |server| async move {
                let sglang = server.kind == ServerType::Sglang;
                let body = if sglang {
                    sglang_body(request)
                } else {
                    vllm_body(request)
                };
                // Nothing comes until the answer: the server's health tells a stalled server
                // from a busy one meanwhile.
                let every = server.head_timeout;
                let text = tokio::select! {
                    text = post_json(http, server.generate_target(), &body) => text?,
                    failed = server.watch.until_unhealthy(http, &server, every) => {
                        return Err(failed.into());
                    }
                };
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| AttemptError::Decode(format!("{e}: {}", snippet(&text))))?;
                if sglang {
                    parse_sglang(&v)
                } else {
                    parse_vllm(&v)
                }
                .map_err(AttemptError::Decode)
            })
            .await
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
