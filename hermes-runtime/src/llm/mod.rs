//! Inference: OpenAI-compatible message types and the client.

mod backend;
mod client;
pub mod generate;
pub mod managed;
mod stats;
pub mod tokenizer;
mod types;

pub use backend::ChatBackend;
pub use client::{LlmClient, LlmError, RetryPolicy};
pub use generate::GenerateClient;
pub use managed::{ManagedSession, Phase2};
pub use stats::RequestStats;
pub use tokenizer::ChatTokenizer;
pub use types::*;
