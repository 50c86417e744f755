//! What the agent loop talks to: a chat-completions source. Phase 1 is the OpenAI-compatible
//! [`LlmClient`]; Phase 2 is a per-rollout [`ManagedSession`](super::ManagedSession) that
//! generates through `/generate` and tracks tokens.

use super::{ChatRequest, ChatResponse, LlmClient, LlmError};

/// A source of chat completions.
#[async_trait::async_trait]
pub trait ChatBackend: Send + Sync {
    /// Answers one chat request.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;
}

#[async_trait::async_trait]
impl ChatBackend for LlmClient {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        LlmClient::chat(self, request).await
    }
}
