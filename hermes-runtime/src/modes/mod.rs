//! The Atropos run modes and the rollout machinery they share.

pub mod evaluate;
pub mod html;
pub mod output;
pub mod process;
pub mod rollout;

pub use evaluate::{run_evaluate, write_evaluate_config, EvalSummary};
pub use process::{run_process, ProcessSummary};
pub use rollout::{collect_group, run_rollout, Runtime};
