//! OpenAI-compatible chat-completions client (Phase 1) over the run's [`ServerPool`]: requests
//! with `n` above `max_n_completions` are split, each part goes through the pool's retry loop
//! with failover.

use std::sync::Arc;

use super::health::Failover;
use super::http::{post_json, post_streaming, Streamed};
use super::pool::{AttemptError, ServerPool};
use super::types::{ChatRequest, ChatResponse};
use super::{LlmError, RequestStats, RetryPolicy};
use crate::config::ApiServerConfig;
use crate::diagnostics::snippet;

/// A chat-completions client over one or more OpenAI-compatible servers. A clone shares the
/// servers, their request limits, health and statistics (for example the LLM judge a reward
/// calls through [`crate::context::ToolContext::judge`]).
#[derive(Clone)]
pub struct LlmClient {
    pool: Arc<ServerPool>,
    max_n: u32,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("pool", &self.pool)
            .field("max_n", &self.max_n)
            .finish()
    }
}

impl LlmClient {
    /// A client with its own pool of `configs` (each needs a `base_url`) and the default
    /// failover settings.
    pub fn new(
        configs: &[ApiServerConfig],
        max_n: u32,
        retry: RetryPolicy,
    ) -> Result<Self, LlmError> {
        let pool = ServerPool::new(configs, retry, Failover::default())?;
        Ok(Self::with_pool(Arc::new(pool), max_n))
    }

    /// A client over a pool shared with other clients (the run's `/generate` client).
    pub fn with_pool(pool: Arc<ServerPool>, max_n: u32) -> Self {
        LlmClient {
            pool,
            max_n: max_n.max(1),
        }
    }

    /// The servers this client sends to.
    pub fn pool(&self) -> &Arc<ServerPool> {
        &self.pool
    }

    /// Number of servers.
    pub fn server_count(&self) -> usize {
        self.pool.server_count()
    }

    /// Request statistics of every server (in configuration order) since the last call,
    /// which clears them.
    pub fn take_request_stats(&self) -> Vec<RequestStats> {
        self.pool.take_request_stats()
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
        let mut merged = ChatResponse::default();
        for r in results {
            merged.choices.extend(r?.choices);
        }
        Ok(merged)
    }

    /// [`Self::chat`] for one group's `n` choices: a refusal that may be about `n`
    /// ([`LlmError::may_refuse_n`]) is returned without stopping the run, so the caller can
    /// fall back to one request per rollout.
    pub async fn chat_group(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let parts = request.n.div_ceil(self.max_n);
        let mut calls = Vec::with_capacity(parts as usize);
        let mut left = request.n;
        while left > 0 {
            let mut part = request.clone();
            part.n = left.min(self.max_n);
            left -= part.n;
            calls.push(part);
        }
        let results =
            futures::future::join_all(calls.iter().map(|p| self.chat_sparing(p, true))).await;
        let mut merged = ChatResponse::default();
        for r in results {
            let r = r?;
            merged.usage = merged.usage.or(r.usage);
            merged.choices.extend(r.choices);
        }
        Ok(merged)
    }

    async fn chat_once(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.chat_sparing(request, false).await
    }

    async fn chat_sparing(
        &self,
        request: &ChatRequest,
        n_may_be_refused: bool,
    ) -> Result<ChatResponse, LlmError> {
        let http = self.pool.http();
        let spare = |e: &LlmError| n_may_be_refused && e.may_refuse_n();
        self.pool
            .call_sparing(request.split, spare, |server| async move {
                let Some(limits) = server.stream else {
                    let body = request.body(&server.model);
                    let text = post_json(http, server.chat_target(), &body).await?;
                    return parse(&text);
                };
                let body = request.streaming_body(&server.model);
                match post_streaming(http, server.chat_target(), limits, &body).await? {
                    Streamed::Response(response) => Ok(response),
                    Streamed::Malformed(reason) => Err(AttemptError::Decode(reason)),
                    // A server that ignored `stream` answers as without it.
                    Streamed::Text(text) => parse(&text),
                }
            })
            .await
    }
}

/// A non-streamed chat-completion body.
fn parse(text: &str) -> Result<ChatResponse, AttemptError> {
    serde_json::from_str(text).map_err(|e| AttemptError::Decode(format!("{e}: {}", snippet(text))))
}
