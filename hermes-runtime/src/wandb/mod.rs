//! Weights & Biases logging in Rust, through W&B's public HTTP API (GraphQL `upsertBucket`,
//! `createRunFiles`, and the `file_stream` endpoint), with Atropos's run naming and metric
//! names.
//!
//! * [`WandbSettings::from_env`] reads `WANDB_API_KEY`, `WANDB_BASE_URL`, `WANDB_ENTITY`,
//!   `WANDB_PROJECT`, `WANDB_DIR` and `WANDB_MODE` (`online`, `offline`, `disabled`).
//! * [`Logger`] owns one run: [`Logger::log`] never blocks; a recorder thread writes the run
//!   directory (see [`run_dir`]) and, online, an uploader task streams it. `wandb sync DIR`
//!   ([`sync_run`]) uploads a run directory later with the same requests.
//! * [`TrainMetrics`] turns rollouts, groups and timings into the [`Record`] of one log.
//!
//! Serve mode (the trajectory-API loop) uses it like `process` does:
//! ```text
//! let logger = Logger::start(&WandbSettings::from_env()?, RunSpec {
//!     display_name: Some(run_name(&wandb_name)),       // {wandb_name}-{date}-{6 letters}
//!     project: Some(info.project), group: info.group,   // from GET /wandb_info
//!     config: redacted_env_config,
//! })?;                                                   // None when WANDB_MODE=disabled
//! let mut metrics = TrainMetrics::new(&config);
//! // per finished worker task:
//! metrics.record_rollouts(rollouts);                     // every scored rollout
//! metrics.record_group(&group);                          // groups that passed the rules
//! metrics.record_perf(Perf::Task, secs);         // + Succeeded/FailedTaskDuration, …
//! // at each step change (Atropos's wandb_log):
//! let record = metrics.take(&env, &LogContext {
//!     prefix: Some(&wandb_prepend),                      // env keys become gsm8k_0_train/…
//!     length_limit,                                      // /info max_token_len
//!     server_metrics: server_metrics(&llm.take_request_stats()),
//! });
//! logger.log(curr_step, record);
//! // at exit:
//! let report = logger.finish(0).await;
//! ```

pub mod api;
mod logger;
pub mod metrics;
pub mod netrc;
pub mod run_dir;
mod settings;
mod sync;

pub(crate) use logger::{Logger, RunSpec};
pub(crate) use metrics::{server_metrics, LogContext, Perf, TrainMetrics};
pub(crate) use settings::{run_name, WandbSettings};
pub(crate) use sync::sync_run;
