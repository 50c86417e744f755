//! Inference: OpenAI-compatible message types and the client.

mod client;
mod types;

pub use client::{LlmClient, LlmError, RetryPolicy};
pub use types::*;
