//! Inference: OpenAI-compatible message types, the server pool with its retry and failover
//! loop, and the two clients over it (chat completions and `/generate`).

mod backend;
pub mod chat_template;
mod client;
mod error;
pub mod generate;
mod health;
pub(crate) mod http;
mod liveness;
pub mod managed;
mod pieces;
mod pool;
mod refusal;
mod retry;
mod route;
pub(crate) mod sse;
mod stats;
mod template_choice;
pub mod tokenizer;
mod types;
mod watch;

pub use backend::ChatBackend;
pub use client::LlmClient;
pub use error::LlmError;
pub use generate::GenerateClient;
pub use health::Failover;
pub use liveness::InferenceDown;
pub use managed::{ManagedSession, Phase2};
pub use pool::ServerPool;
pub use refusal::Refusal;
pub use retry::RetryPolicy;
pub(crate) use stats::RequestStats;
pub use tokenizer::ChatTokenizer;
pub use types::*;
