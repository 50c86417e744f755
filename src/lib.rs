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

#![warn(missing_docs)]

pub use hermes_macros::{hermes_env, hooks};
pub use hermes_runtime::agent::{AgentResult, ToolError};
pub use hermes_runtime::context::{TerminalOutput, ToolContext};
pub use hermes_runtime::env::{
    EnvDefinition, Environment, EvalSample, Metrics, ReferenceSolution, ReferenceTurn,
    RewardOutcome, ScoredRollout,
};
pub use hermes_runtime::llm::Message;
pub use hermes_runtime::sandbox::SandboxSpec;
pub use hermes_runtime::schemars;
pub use hermes_runtime::{
    agent, app, atropos, commands, config, context, data, env, hub, llm, modes, parsers, progress,
    sandbox, shutdown, testing, tools, wandb,
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
