//! The Atropos run modes and the rollout machinery they share.

pub mod drops;
pub mod evaluate;
pub mod failures;
pub mod html;
pub mod output;
pub mod process;
pub mod report;
pub mod rollout;
pub mod serve;

pub use evaluate::{run_evaluate, write_evaluate_config, EvalSummary};
pub use process::{run_process, Interruption, ProcessSummary};
pub use rollout::{
    collect_group, run_rollout, run_rollout_with, run_rollout_with_retries, EnvAccess, FailedItem,
    GroupRun, ReferenceSink, Runtime, RuntimeBuilder, SharedEnv, TokenSource,
};
pub use serve::{run_serve, ServeOptions, ServeSummary};
