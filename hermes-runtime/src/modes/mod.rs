//! The Atropos run modes and the rollout machinery they share.

mod agent_clock;
pub mod drops;
pub mod evaluate;
pub mod failures;
mod group_hook;
pub mod html;
pub mod mcp;
pub mod openenv;
pub mod output;
pub mod process;
pub mod report;
pub mod rollout;
pub mod serve;
pub(crate) mod trainer_tokens;

pub(crate) use evaluate::{write_evaluate_config, EvalSummary};
pub use rollout::{collect_group, run_rollout, Runtime, TokenSource};
pub(crate) use rollout::{run_rollout_with, ReferenceSink};
pub use serve::{run_serve, ServeOptions, ServeSummary};
