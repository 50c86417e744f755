//! hermes-env: write Atropos RL environments for tool-calling LLM agents as one annotated
//! struct plus hook functions.
//!
//! ```text
//! use hermes_env::prelude::*;
//!
//! /// Files written by the agent, checked with `cat`.
//! #[hermes_env(name = "terminal-test", toolsets = ["terminal", "file"], max_agent_turns = 10)]
//! pub struct TerminalTest {
//!     /// Appended to every prompt.
//!     #[config(default = "")]
//!     prompt_suffix: String,
//!     next: usize,
//! }
//!
//! #[hermes_env::hooks]
//! impl TerminalTest {
//!     async fn get_next_item(&mut self) -> Option<Task> { … }
//!     fn format_prompt(&self, item: &Task) -> String { … }
//!     async fn compute_reward(&self, item: &Task, run: &AgentResult, ctx: &ToolContext) -> Result<f64> { … }
//! }
//! ```
//! The struct attribute generates the config type (`--env.prompt_suffix`), the CLI and
//! `main`; the `hooks` attribute checks hook names and signatures and implements
//! [`Environment`].
//!
//! The author API is the [`prelude`], the types re-exported at the crate root, and the
//! [`testing`], [`tools`] and [`data`] modules; everything else is the runtime's.

#![warn(missing_docs)]

pub use hermes_macros::{hermes_env, hooks};
pub use hermes_runtime::agent::{AgentResult, ToolError};
pub use hermes_runtime::context::{TerminalOutput, ToolContext};
/// Datasets by hub id or path, deserialized into the item type (`hermes_env::data::Dataset`).
pub use hermes_runtime::data;
pub use hermes_runtime::env::{
    EnvDefinition, Environment, EvalSample, Metrics, ReferenceSolution, ReferenceTurn,
    RewardOutcome, ScoredRollout,
};
pub use hermes_runtime::llm::Message;
pub use hermes_runtime::sandbox::SandboxSpec;
pub use hermes_runtime::schemars;
/// The testing kit (`Kit`, `Script`, cassettes, snapshots) and the scripted server.
pub use hermes_runtime::testing;
/// Tools: the `Tool` trait, `typed_tool`, toolsets, the registry an env's `register_tools` fills.
pub use hermes_runtime::tools;

// The runtime's internals, public for the project's own tests and benches (and for the
// generated code); not part of the author API, so hidden from the documentation. Layout:
// config (flags, YAML), app (plan, services, main), modes (process/evaluate/serve and the
// rollout), agent (the loop), llm (pool, clients, tokenizer), parsers, sandbox (local,
// docker), context (ToolContext), atropos (wire format, trajectory API), wandb, hub, shutdown.
#[doc(hidden)]
pub use hermes_runtime::{
    agent, app, atropos, commands, config, context, env, hub, llm, modes, parsers, progress,
    sandbox, shutdown, wandb,
};

/// Everything an environment file needs: `use hermes_env::prelude::*;`.
pub mod prelude {
    pub use crate::{
        hermes_env, AgentResult, Environment, EvalSample, Message, Metrics, ReferenceSolution,
        SandboxSpec, ScoredRollout, TerminalOutput, ToolContext,
    };
    pub use anyhow::{anyhow, bail, Context as _, Result};
    pub use serde::{Deserialize, Serialize};
    pub use serde_json::json;
}

/// jemalloc serves every allocation of a binary built on hermes-env (feature `jemalloc`, on
/// by default). Per LLM turn the framework allocates and frees thousands of small blocks
/// (JSON, chat-template values, token vectors), and glibc's malloc spent a quarter of the
/// framework's user-space instructions on them in the `vs_python` bench. A binary that sets its
/// own `#[global_allocator]` turns the feature off (`default-features = false`).
#[cfg(all(feature = "jemalloc", unix))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Support for generated code; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use anyhow;
    pub use hermes_runtime::app::main;
    pub use hermes_runtime::config::{
        set_default, ConfigSection, EnvDescriptor, FieldSpec, FlagType, HermesEnvConfig,
    };
    pub use serde;
    pub use std::sync::Arc;
}
#[cfg(doctest)]
mod book;
