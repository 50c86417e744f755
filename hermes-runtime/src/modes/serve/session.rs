//! Serve's session with the trajectory API: registering (waiting for the trainer), the
//! trainer's limits, status polls, registering again after an API restart, disconnecting.

use std::time::Duration;

use anyhow::Context as _;
use tracing::{info, warn};

use crate::atropos::api::{ApiError, ApiInfo, EnvStatus, RegisterEnv, Registration, TrajectoryApi};
use crate::config::HermesEnvConfig;

/// What registering with the trajectory API established, and what the trainer asked for.
pub(super) struct Session {
    /// The trajectory API client.
    api: TrajectoryApi,
    /// The registration request, sent again after an API restart.
    register: RegisterEnv,
    /// The server's answer: env id, wandb name, starting step, checkpoint interval.
    registration: Registration,
    /// Steps to train for: the config's, else the trainer's `num_steps`.
    total_steps: i64,
    /// The trainer's batch size (`/info`), else the configured one.
    batch_size: i64,
    /// The trainer's `max_token_len` (-1 = none).
    length_limit: i64,
}

/// The `/register-env` request of this env: `wandb_name` (else `env_name`) as its name.
pub(super) fn register_request(config: &HermesEnvConfig, env_name: &str) -> RegisterEnv {
    RegisterEnv {
        max_token_length: config.max_token_length,
        desired_name: config
            .wandb_name
            .clone()
            .unwrap_or_else(|| env_name.to_owned()),
        weight: config.inference_weight,
        min_batch_allocation: config.min_batch_allocation,
        group_size: config.group_size,
    }
}

/// The batch size (from `/info` unless -1) and the length limit (-1 = none).
fn apply_info(info: &ApiInfo, configured_batch_size: i64) -> (i64, i64) {
    let batch = if info.batch_size != -1 {
        info.batch_size
    } else {
        configured_batch_size
    };
    (batch, info.max_token_len)
}

impl Session {
    /// Registers (waiting for the trainer) and reads the trainer's limits.
    pub(super) async fn connect(
        api: TrajectoryApi,
        register: RegisterEnv,
        config: &HermesEnvConfig,
    ) -> anyhow::Result<Session> {
        info!(
            "registering '{}' with the trajectory API at {}",
            register.desired_name,
            api.base_url()
        );
        let registration = api
            .register_env(&register)
            .await
            .context("POST /register-env failed")?;
        info!(
            "registered as env_id {} ({}), trainer at step {}",
            registration.env_id, registration.wandb_name, registration.starting_step
        );
        let total_steps = if config.total_steps == -1 {
            anyhow::ensure!(
                registration.num_steps != -1,
                "total steps are set neither in the config (--env.total_steps) nor by the trainer"
            );
            registration.num_steps
        } else {
            config.total_steps
        };
        let info = api.info().await.context("GET /info failed")?;
        let (batch_size, length_limit) = apply_info(&info, config.batch_size);
        anyhow::ensure!(
            batch_size == -1 || config.group_size <= batch_size,
            "group_size ({}) must be less than the trainer's batch_size ({batch_size})",
            config.group_size
        );
        if length_limit <= 0 {
            warn!("the trainer set no token limit (/info max_token_len = -1): long sequences are not filtered");
        }
        Ok(Session {
            api,
            register,
            registration,
            total_steps,
            batch_size,
            length_limit,
        })
    }

    /// The trajectory API client (the outbox sends through it).
    pub(super) fn api(&self) -> &TrajectoryApi {
        &self.api
    }

    /// The env id of the current registration.
    pub(super) fn env_id(&self) -> i64 {
        self.registration.env_id
    }

    /// The current registration.
    pub(super) fn registration(&self) -> &Registration {
        &self.registration
    }

    /// The name this env registered under.
    pub(super) fn desired_name(&self) -> &str {
        &self.register.desired_name
    }

    /// Steps to train for.
    pub(super) fn total_steps(&self) -> i64 {
        self.total_steps
    }

    /// The trainer's batch size.
    pub(super) fn batch_size(&self) -> i64 {
        self.batch_size
    }

    /// The trainer's token limit (-1 = none).
    pub(super) fn length_limit(&self) -> i64 {
        self.length_limit
    }

    /// `GET /status-env` for the current registration.
    pub(super) async fn status(&self) -> Result<EnvStatus, ApiError> {
        self.api.status_env(self.registration.env_id).await
    }

    /// Registers again (after an API restart), retrying until the server answers, and
    /// re-reads the trainer's limits; `undelivered` is only announced.
    pub(super) async fn reregister(
        &mut self,
        config: &HermesEnvConfig,
        retry_cap: Duration,
        undelivered: usize,
    ) {
        // Best effort: if the API only hiccuped, the old id would otherwise stay registered
        // as a ghost (its minimum allocation counted twice).
        if let Ok(Ok(_)) = tokio::time::timeout(
            Duration::from_secs(5),
            self.api.disconnect_env(self.registration.env_id),
        )
        .await
        {
            info!("disconnected the old env_id {}", self.registration.env_id);
        }
        let mut attempt = 1u32;
        let registration = loop {
            match self.api.register_env(&self.register).await {
                Ok(r) => break r,
                Err(e) => {
                    let wait = Duration::from_secs(1 << attempt.min(3)).min(retry_cap);
                    warn!("re-registration failed: {e}; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        };
        info!(
            "re-registered as env_id {} ({}), trainer at step {}; {undelivered} undelivered groups to resend",
            registration.env_id, registration.wandb_name, registration.starting_step,
        );
        if config.total_steps == -1 && registration.num_steps != -1 {
            self.total_steps = registration.num_steps;
        }
        self.registration = registration;
        match self.api.info().await {
            Ok(info) => (self.batch_size, self.length_limit) = apply_info(&info, config.batch_size),
            Err(e) => warn!("GET /info after re-registering failed: {e}"),
        }
    }

    /// `POST /disconnect-env` (waiting at most 10 s), so the server stops counting this
    /// environment's minimum batch allocation after it is gone; upstream never disconnects.
    pub(super) async fn disconnect(&self) {
        let disconnect = self.api.disconnect_env(self.registration.env_id);
        match tokio::time::timeout(Duration::from_secs(10), disconnect).await {
            Ok(Ok(v)) => info!("disconnected from the trajectory API: {v}"),
            Ok(Err(e)) => warn!("POST /disconnect-env failed: {e}"),
            Err(_) => warn!("POST /disconnect-env did not answer within 10 s"),
        }
    }
}
