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
//! This crate is the author API: the [`prelude`], the types at the crate root, and the
//! [`data`], [`sandbox`], [`testing`] and [`tools`] modules. Everything else is the runtime's
//! business (`hermes-runtime`), free to change between releases.

#![warn(missing_docs)]

pub use hermes_macros::{hermes_env, hooks};
pub use hermes_runtime::agent::{AgentResult, ToolError};
pub use hermes_runtime::config::{
    DefaultServer, EvalHandling, HermesEnvConfig, McpServer, ServerType,
};
pub use hermes_runtime::context::{Companion, TerminalOutput, ToolContext};
pub use hermes_runtime::env::{
    Checkpoint, EnvDefinition, Environment, EvalSample, GroupRollout, Metrics, ReferenceSolution,
    ReferenceTurn, RewardOutcome, ScoredGroup, ScoredRollout,
};
pub use hermes_runtime::llm::{Message, ToolSchema};
pub use hermes_runtime::sandbox::SandboxSpec;
pub use hermes_runtime::schemars;

/// Datasets by hub id or path, deserialized into the item type.
pub mod data {
    pub use hermes_runtime::data::{
        eval_size, open_config_or_fallback, open_env_or_fallback, open_or_fallback, shuffle,
        split_eval, text, Cursor, DataError, Dataset, Format, Row, PARQUET_REVISION,
    };
}

/// The rollout's sandbox as a tool sees it (`sandbox_tool`, [`tools::ToolCallContext`]).
pub mod sandbox {
    pub use hermes_runtime::sandbox::{
        ContainerOverrides, ExecOutput, ExecRequest, LeftoverKill, LeftoverRules, OwnProcess,
        ReadyCheck, Sandbox, SandboxError, SandboxSpec, SetupCommand, Survivor, TaskSandbox,
        Transfer,
    };
}

/// Harbor task directories (`task.toml`, `instruction.md`, `environment/`, `solution/`,
/// `tests/`) as items: loading, images, the sandbox spec, verification.
pub mod harbor {
    pub use hermes_runtime::harbor::{
        aggregate, dir_archive_base64, image::base_images, load_task, load_tasks, plan_verifier,
        prepare_step, resolve_env, reward, sandbox_spec, step_script, task, task_workdir, tb2,
        verify, HarborError, HarborTask, ImageBuilder, Network, Rewards, SeparateVerifier,
        TaskConfig, TaskImage, TaskStep, VerifierPlan, TESTS_DIR, VERIFIER_DIR,
    };
}

/// Checking math answers as Hugging Face's `math-verify` does: `verify(gold, reply)` in a
/// `compute_reward`, `extract_answer` to see what was read.
pub mod math {
    pub use hermes_runtime::math::{extract_answer, verify};
}

/// Testing an environment: the kit, scripted and recorded inference, snapshot redaction.
pub mod testing {
    pub use hermes_runtime::testing::{
        exploit_library, Cassette, CassettePlayer, CassetteRecorder, CheckOptions, CheckReport,
        CheckedItem, Exploit, ItemReport, Kit, KitBuilder, ParsedToolCall, Policy, RawTextPolicy,
        Redactor, Reply, Script, ScriptedServer,
    };
}

/// Tools: the `Tool` trait, typed tools from functions, the registry `register_tools` fills.
pub mod tools {
    pub use hermes_runtime::tools::{
        sandbox_tool, typed_tool, Tool, ToolCallContext, ToolRegistry, TypedTool,
    };
}

/// Everything an environment file needs: `use hermes_env::prelude::*;`.
pub mod prelude {
    pub use crate::{
        hermes_env, AgentResult, Checkpoint, DefaultServer, Environment, EvalSample, McpServer,
        Message, Metrics, ReferenceSolution, SandboxSpec, ScoredGroup, ScoredRollout,
        TerminalOutput, ToolContext,
    };
    pub use anyhow::{anyhow, bail, Context as _, Result};
    // The traits from serde, the derives from hermes-macros (serde's own derives need the
    // caller's crate to depend on serde).
    pub use hermes_macros::{Deserialize, Serialize};
    pub use serde::de::Deserialize;
    pub use serde::ser::Serialize;
    pub use serde_json::json;
}

/// jemalloc serves every allocation of a binary built on hermes-env (feature `jemalloc`, on
/// by default): the framework allocates and frees thousands of small blocks per LLM turn,
/// which glibc's malloc serves markedly slower. A binary that sets its own
/// `#[global_allocator]` turns the feature off (`default-features = false`).
#[cfg(all(feature = "jemalloc", unix))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Support for generated code; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use anyhow;
    pub use hermes_runtime::app::main;
    pub use hermes_runtime::config::{
        set_default, ConfigSection, EnvDescriptor, FieldSpec, FlagType, HermesEnvConfig, NoConfig,
    };
    pub use serde;
    pub use std::sync::Arc;
}
#[cfg(doctest)]
mod book;
