//! Runtime of hermes-env: everything a `#[hermes_env]` environment binary runs.
//!
//! Data flows one way: item → prompt → agent loop ⇄ (LLM, tools in the rollout's sandbox) →
//! [`agent::AgentResult`] → reward through [`context::ToolContext`] → [`atropos::ScoredDataGroup`]
//! → JSONL / metrics.

#![warn(missing_docs)]

pub mod agent;
pub mod app;
pub mod atropos;
pub(crate) mod calls;
pub mod commands;
pub mod config;
pub mod context;
pub mod data;
pub(crate) mod diagnostics;
pub(crate) mod dotenv;
pub mod env;
pub mod harbor;
pub mod hub;
pub mod llm;
pub mod math;
pub mod modes;
pub(crate) mod own_secrets;
pub mod parsers;
pub(crate) mod progress;
pub mod pyjson;
pub mod reference;
pub mod sandbox;
pub(crate) mod setup;
pub mod shutdown;
pub mod testing;
mod tls;
pub mod tools;

/// JSON Schema derivation for the argument types of author-defined tools.
pub use schemars;
pub(crate) mod wandb;
