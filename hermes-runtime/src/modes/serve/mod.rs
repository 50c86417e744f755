//! `serve`: online RL against an Atropos trajectory API with the reference environment's loop —
//! register (waiting for the trainer), keep up to the worker cap of groups in flight, pause
//! when the trainer's off-policy queue is full, evaluate every `steps_per_eval` steps, stop at
//! `total_steps`, and survive the API server restarting (re-register, resend what was not
//! delivered). A stop request lets the running groups finish within the grace period, delivers
//! or spools what is undelivered, disconnects and finishes W&B.
//!
//! Layout: [`policy`] holds the pure Atropos arithmetic, [`outbox`] the delivery (sends,
//! resends, the spool), this file the loop that ties them to the workers and the trainer.

mod outbox;
pub mod policy;

pub use outbox::{Spool, OUTBOX_CAPACITY};
pub use policy::{
    boundary_crossed, derived_batch_size, should_pause, should_stop, worker_cap, CapInputs,
};

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{debug, info, warn};

use super::drops::Drops;
use super::evaluate::run_evaluate;
use super::failures::{failures_path, FailureLog};
use super::output::{free_path, JsonlWriter};
use super::rollout::{collect_group, GroupRun, Runtime, SharedEnv};
use crate::atropos::api::{ApiInfo, EnvStatus, RegisterEnv, Registration, TrajectoryApi};
use crate::config::EvalHandling;
use crate::env::{Environment, FailureCounts, Metrics, ScoredRollout};
use crate::llm::RetryPolicy;
use crate::shutdown::{grace, Shutdown};
use crate::wandb::{
    run_name, server_metrics, LogContext, Logger, Perf, RunSpec, TrainMetrics, WandbSettings,
};
use outbox::Outbox;

/// Rollouts kept for the next `wandb_log` hook call (the newest; token state stripped).
pub const LOG_ROLLOUTS_CAPACITY: usize = 1024;

/// Knobs of the serve loop that are not environment config.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `desired_name` when `wandb_name` is unset (the environment's name).
    pub env_name: String,
    /// Model name written in eval results.
    pub model_name: String,
    /// Pause between registration and the main loop (upstream: 5 s).
    pub startup_delay: Duration,
    /// Main-loop period (upstream: 0.1 s).
    pub tick: Duration,
    /// Attempts and backoff of trajectory-API calls.
    pub retry: RetryPolicy,
    /// Wait between `/register-env` polls while the trainer has not started (upstream: 1 s).
    pub register_poll: Duration,
    /// The env config (secrets redacted) for the wandb run, when `use_wandb` is on.
    pub wandb_config: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ServeOptions {
    /// Upstream's timings for environment `env_name` served with model `model_name`.
    pub fn new(env_name: &str, model_name: &str) -> Self {
        ServeOptions {
            env_name: env_name.to_owned(),
            model_name: model_name.to_owned(),
            startup_delay: Duration::from_secs(5),
            tick: Duration::from_millis(100),
            retry: RetryPolicy::default(),
            register_poll: Duration::from_secs(1),
            wandb_config: None,
        }
    }
}

/// What a serve run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServeSummary {
    /// Groups the API accepted.
    pub groups_sent: usize,
    /// Groups dropped by the group rules (size, equal scores, length).
    pub groups_dropped: usize,
    /// Those drops per reason (`size`, `equal_scores`, `too_long`).
    pub drops_by_reason: BTreeMap<&'static str, usize>,
    /// Failed rollout attempts per kind (each retried, or its item failed).
    pub rollout_failures: FailureCounts,
    /// Items that produced no group because a rollout kept failing, per kind.
    pub items_failed: FailureCounts,
    /// Undelivered groups spooled to disk at exit (resent by the next start).
    pub groups_spooled: usize,
    /// Groups from an earlier run's spool queued for delivery at start.
    pub groups_unspooled: usize,
    /// True when a stop request (signal) ended the run.
    pub interrupted: bool,
    /// Groups the API refused with a 4xx (dropped, as upstream).
    pub groups_rejected: usize,
    /// Groups delivered late, after the trajectory API had been unreachable.
    pub groups_resent: usize,
    /// Finished groups that could not be delivered (outbox overflow or still unsent at exit).
    pub groups_lost: usize,
    /// Workers cancelled by `worker_timeout` (their items dropped).
    pub workers_timed_out: usize,
    /// Registrations after the first (API restarts).
    pub reregistrations: usize,
    /// Evaluations run.
    pub evals: usize,
    /// Times the loop paused because the off-policy queue was full.
    pub pauses: usize,
    /// The trainer step at exit.
    pub final_step: i64,
}

/// Writes one step's metrics to the log when no wandb run is active.
fn log_step_metrics(metrics: &Metrics, step: i64) {
    let line: Vec<String> = metrics.iter().map(|(k, v)| format!("{k}={v:.4}")).collect();
    info!("step {step}: {}", line.join(" "));
}

struct Worker<I> {
    id: u64,
    item: I,
    started: Instant,
    abort: AbortHandle,
}

struct Loop<E: Environment> {
    env: Arc<SharedEnv<E>>,
    rt: Arc<Runtime>,
    api: TrajectoryApi,
    opts: ServeOptions,
    register: RegisterEnv,
    registration: Registration,
    total_steps: i64,
    batch_size: i64,
    length_limit: i64,
    status: Option<EnvStatus>,
    curr_step: i64,
    joins: JoinSet<(u64, GroupRun<E::Item>)>,
    running: Vec<Worker<E::Item>>,
    backlog: Vec<E::Item>,
    next_id: u64,
    outbox: Outbox,
    spool: Spool,
    shutdown: Shutdown,
    failures: Option<FailureLog>,
    drops: Drops,
    eval: Option<tokio::task::JoinHandle<anyhow::Result<crate::modes::EvalSummary>>>,
    pending_eval_metrics: Metrics,
    rollouts_since_log: VecDeque<ScoredRollout<E::Item>>,
    rewards_since_log: (f64, usize),
    items_sent_this_step: i64,
    paused: bool,
    sink: Option<JsonlWriter>,
    wandb: Option<(Logger, TrainMetrics<E::Item>)>,
    summary: ServeSummary,
}

/// What registering with the trajectory API established.
struct Session {
    api: TrajectoryApi,
    register: RegisterEnv,
    registration: Registration,
    total_steps: i64,
    batch_size: i64,
    length_limit: i64,
}

/// The `serve` mode of a run: the loop against the trajectory API, then the summary.
pub async fn main<E: Environment>(
    env: E,
    rt: Runtime,
    cfg: &crate::config::ResolvedConfig,
    name: &str,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let model = cfg
        .servers
        .first()
        .map(|s| s.model_name.clone())
        .unwrap_or_default();
    let mut opts = ServeOptions::new(name, &model);
    if cfg.env.use_wandb {
        opts.wandb_config = Some(crate::config::redact::redacted_env_map(cfg));
    }
    let summary = run_serve(env, Arc::new(rt), opts, shutdown).await?;
    print!("{}", super::report::serve_summary(&summary));
    Ok(())
}

/// Runs `serve` until the trainer reaches `total_steps` (or the server's `num_steps`), or a
/// stop request ends it gracefully.
pub async fn run_serve<E: Environment>(
    env: E,
    rt: Arc<Runtime>,
    opts: ServeOptions,
    shutdown: &Shutdown,
) -> anyhow::Result<ServeSummary> {
    let config = Arc::clone(rt.config());
    let api = TrajectoryApi::new(&config.rollout_server_url, opts.retry, opts.register_poll)?;
    let register = RegisterEnv {
        max_token_length: config.max_token_length,
        desired_name: config
            .wandb_name
            .clone()
            .unwrap_or_else(|| opts.env_name.clone()),
        weight: config.inference_weight,
        min_batch_allocation: config.min_batch_allocation,
        group_size: config.group_size,
    };
    let (wandb, session) = shutdown
        .unless_requested(async {
            let wandb = match config.use_wandb {
                true => start_wandb(&api, &register.desired_name, &opts, &config).await?,
                false => None,
            };
            anyhow::Ok((wandb, connect(api, register, &config).await?))
        })
        .await??;
    let sink = match &config.data_path_to_save_groups {
        Some(p) => {
            let path = free_path(p.as_ref()).with_context(|| format!("cannot create {p}"))?;
            info!("also writing groups to {}", path.display());
            Some(
                JsonlWriter::create(&path)
                    .with_context(|| format!("cannot write {}", path.display()))?,
            )
        }
        None => None,
    };
    let failures = sink
        .as_ref()
        .map(|s| FailureLog::new(failures_path(s.path())));
    let spool = Spool::new(
        config.outbox_spool_dir.as_deref(),
        &session.register.desired_name,
        config.outbox_spool_max_mb,
    );
    let mut outbox = Outbox::default();
    let mut summary = ServeSummary::default();
    match spool.take() {
        Ok(groups) if !groups.is_empty() => {
            info!(
                "resending {} groups an earlier run of '{}' could not deliver (spooled in {})",
                groups.len(),
                session.register.desired_name,
                spool.dir().display()
            );
            summary.groups_unspooled = groups.len();
            outbox.requeue_front(groups);
        }
        Ok(_) => {}
        Err(e) => warn!(
            "cannot read the outbox spool {}: {e}",
            spool.dir().display()
        ),
    }
    if shutdown
        .unless_requested(tokio::time::sleep(opts.startup_delay))
        .await
        .is_err()
    {
        info!("stop requested before the first rollout");
    }
    let state = Loop {
        env: Arc::new(SharedEnv(tokio::sync::RwLock::new(env))),
        rt,
        api: session.api,
        opts,
        register: session.register,
        curr_step: session.registration.starting_step,
        registration: session.registration,
        total_steps: session.total_steps,
        batch_size: session.batch_size,
        length_limit: session.length_limit,
        status: None,
        joins: JoinSet::new(),
        running: Vec::new(),
        backlog: Vec::new(),
        next_id: 0,
        outbox,
        spool,
        shutdown: shutdown.clone(),
        failures,
        drops: Drops::default(),
        eval: None,
        pending_eval_metrics: Metrics::new(),
        rollouts_since_log: VecDeque::new(),
        rewards_since_log: (0.0, 0),
        items_sent_this_step: 0,
        paused: false,
        sink,
        wandb,
        summary,
    };
    state.run().await
}

/// Starts the W&B run in the trainer's project, waiting until the trainer has registered
/// (it names the project); `None` when W&B cannot start (logging never stops rollouts).
async fn start_wandb<I>(
    api: &TrajectoryApi,
    desired_name: &str,
    opts: &ServeOptions,
    config: &crate::config::HermesEnvConfig,
) -> anyhow::Result<Option<(Logger, TrainMetrics<I>)>> {
    let mut announced = false;
    let info = loop {
        let info = api.wandb_info().await.context("GET /wandb_info failed")?;
        if info.project.is_some() {
            break info;
        }
        if !announced {
            info!("waiting for the trainer to register (it names the wandb project)");
            announced = true;
        }
        tokio::time::sleep(opts.register_poll).await;
    };
    info!(
        "trainer logs to wandb project {} (group {})",
        info.project.as_deref().unwrap_or_default(),
        info.group.as_deref().unwrap_or("-")
    );
    let spec = RunSpec {
        display_name: Some(run_name(desired_name)),
        project: info.project,
        group: info.group,
        config: opts.wandb_config.clone().unwrap_or_default(),
    };
    match WandbSettings::from_env().and_then(|settings| Logger::start(&settings, spec)) {
        Ok(Some(logger)) => Ok(Some((logger, TrainMetrics::new(config)))),
        Ok(None) => Ok(None),
        Err(e) => {
            warn!("wandb: {e}; continuing without wandb logging");
            Ok(None)
        }
    }
}

/// Registers (waiting for the trainer) and reads the trainer's limits.
async fn connect(
    api: TrajectoryApi,
    register: RegisterEnv,
    config: &crate::config::HermesEnvConfig,
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

/// The batch size (from `/info` unless -1) and the length limit (-1 = none).
fn apply_info(info: &ApiInfo, configured_batch_size: i64) -> (i64, i64) {
    let batch = if info.batch_size != -1 {
        info.batch_size
    } else {
        configured_batch_size
    };
    (batch, info.max_token_len)
}

impl<E: Environment> Loop<E> {
    async fn run(mut self) -> anyhow::Result<ServeSummary> {
        let mut ticker = tokio::time::interval(self.opts.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                Some(done) = self.joins.join_next(), if !self.joins.is_empty() => {
                    self.finished(done);
                }
                true = self.outbox.next_sent(&mut self.summary), if self.outbox.sending() => {}
                () = shutdown.requested() => {
                    self.summary.interrupted = true;
                    break;
                }
                _ = ticker.tick() => {
                    // Everything a tick awaits is cancel-safe, so a stop request may cut it short.
                    match shutdown.unless_requested(self.tick()).await {
                        Ok(stop) => if stop? { break },
                        Err(_) => {
                            self.summary.interrupted = true;
                            break;
                        }
                    }
                }
            }
        }
        self.shutdown().await;
        Ok(self.summary)
    }

    /// One main-loop tick; `true` = stop.
    async fn tick(&mut self) -> anyhow::Result<bool> {
        if self.outbox.has_queued() {
            let env_id = self.registration.env_id;
            self.outbox
                .flush(&self.api, env_id, &mut self.summary)
                .await;
        }
        let status = match self.api.status_env(self.registration.env_id).await {
            Ok(s) => s,
            Err(e) => {
                warn!("GET /status-env failed: {e}; re-registering with the trajectory API");
                self.reregister().await;
                return Ok(false);
            }
        };
        // The server's share of the inference fleet scales this env's request limits; the
        // chat client, /generate and the judge share one pool, so one call covers all three.
        self.rt.llm().pool().set_weight(status.env_weight);
        self.status = Some(status);
        self.poll_eval().await;
        if self.curr_step != status.current_step {
            self.step_changed(status.current_step);
        }
        let config = Arc::clone(self.rt.config());
        if should_stop(
            &status,
            config.group_size,
            self.batch_size,
            self.total_steps,
        ) {
            info!(
                "trainer at step {} with {} of our groups queued: total_steps {} reached; stopping",
                status.current_step, status.queue_size, self.total_steps
            );
            self.summary.final_step = status.current_step;
            return Ok(true);
        }
        if should_pause(
            &status,
            config.group_size,
            self.batch_size,
            config.max_batches_offpolicy,
            config.min_batch_allocation,
        ) {
            if !self.paused {
                info!(
                    "off-policy queue full ({} groups queued, {} batches of {}): pausing",
                    status.queue_size, config.max_batches_offpolicy, self.batch_size
                );
                self.paused = true;
                self.summary.pauses += 1;
            }
            self.cancel_all_to_backlog();
        } else {
            if self.paused {
                info!("queue drained to {} groups: resuming", status.queue_size);
                self.paused = false;
            }
            self.adjust_workers().await;
        }
        self.enforce_timeout();
        Ok(false)
    }

    fn cap_inputs(&self) -> CapInputs<'_> {
        let c = self.rt.config();
        CapInputs {
            max_num_workers: c.effective_workers(self.rt.llm().server_count()) as i64,
            eval_running: self.eval.is_some(),
            eval_handling: c.eval_handling,
            eval_limit_ratio: c.eval_limit_ratio,
            max_batches_offpolicy: c.max_batches_offpolicy,
            batch_size: self.batch_size,
            group_size: c.group_size,
            min_batch_allocation: c.min_batch_allocation,
            status: self.status.as_ref(),
        }
    }

    async fn adjust_workers(&mut self) {
        let cap = worker_cap(&self.cap_inputs()).max(0) as usize;
        while self.running.len() > cap {
            let w = self.running.remove(0);
            w.abort.abort();
            self.backlog.push(w.item);
        }
        while self.running.len() < cap {
            let item = match self.backlog.pop() {
                Some(i) => i,
                None => match self.env.0.write().await.get_next_item().await {
                    Some(i) => i,
                    None => break,
                },
            };
            self.spawn(item);
        }
    }

    fn spawn(&mut self, item: E::Item) {
        let id = self.next_id;
        self.next_id += 1;
        let env = Arc::clone(&self.env);
        let rt = Arc::clone(&self.rt);
        let task_item = item.clone();
        let abort = self.joins.spawn(async move {
            let out = collect_group(&*env, &rt, task_item).await;
            (id, out)
        });
        self.running.push(Worker {
            id,
            item,
            started: Instant::now(),
            abort,
        });
    }

    fn cancel_all_to_backlog(&mut self) {
        for w in self.running.drain(..) {
            w.abort.abort();
            self.backlog.push(w.item);
        }
    }

    fn enforce_timeout(&mut self) {
        let limit = self.rt.config().worker_timeout;
        if limit <= 0.0 {
            return;
        }
        let limit = Duration::from_secs_f64(limit);
        let (expired, kept): (Vec<_>, Vec<_>) = self
            .running
            .drain(..)
            .partition(|w| w.started.elapsed() > limit);
        self.running = kept;
        for w in expired {
            warn!(
                "worker {} exceeded worker_timeout ({limit:?}); its item is dropped",
                w.id
            );
            w.abort.abort();
            self.summary.workers_timed_out += 1;
        }
    }

    fn finished(&mut self, done: Result<(u64, GroupRun<E::Item>), tokio::task::JoinError>) {
        let (id, run) = match done {
            Ok(v) => v,
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                let id = e.id();
                warn!("a worker failed: {e}; its item is lost");
                self.running.retain(|w| w.abort.id() != id);
                self.summary.groups_lost += 1;
                return;
            }
        };
        let Some(took) = self
            .running
            .iter()
            .find(|w| w.id == id)
            .map(|w| w.started.elapsed())
        else {
            // Cancelled (paused, timed out) after it had already finished: discard.
            return;
        };
        self.running.retain(|w| w.id != id);
        self.summary.rollout_failures.merge(&run.failures);
        let group = match run.result {
            Ok(group) => group,
            Err(failed) => {
                self.item_failed(&failed, took);
                return;
            }
        };
        let c = Arc::clone(self.rt.config());
        let dropped = group.drop_reason(
            c.group_size.max(1) as usize,
            c.ensure_scores_are_not_same,
            Some(self.length_limit),
        );
        if let Some((_, metrics)) = &mut self.wandb {
            let secs = took.as_secs_f64();
            metrics.record_perf(Perf::TaskDuration, secs);
            metrics.record_failures(&run.failures);
            match dropped {
                None => {
                    metrics.record_perf(Perf::SucceededTaskDuration, secs);
                    metrics.record_group(&group);
                }
                Some(reason) => {
                    metrics.record_perf(Perf::FailedTaskDuration, secs);
                    metrics.record_drop(reason);
                }
            }
        }
        for r in run.rollouts {
            self.rewards_since_log.0 += r.reward;
            self.rewards_since_log.1 += 1;
            if let Some((_, metrics)) = &mut self.wandb {
                metrics.record_rollouts(vec![r]);
                continue;
            }
            if self.rollouts_since_log.len() == LOG_ROLLOUTS_CAPACITY {
                self.rollouts_since_log.pop_front();
            }
            self.rollouts_since_log.push_back(r);
        }
        if let Some(reason) = dropped {
            debug!("group dropped: {reason}");
            self.drops.record(reason);
            self.summary.groups_dropped += 1;
            return;
        }
        let mut group = group;
        group.fill_absent_nulls();
        if let Some(sink) = &mut self.sink {
            if let Err(e) = sink.write(&group) {
                warn!("cannot write {}: {e}", sink.path().display());
            }
        }
        self.items_sent_this_step += 1;
        // Serialising, gzipping and posting run off the loop, concurrently, and are not
        // cancelled by a pause.
        self.outbox
            .submit(&self.api, self.registration.env_id, group);
    }

    /// An item whose rollouts kept failing: counted, recorded, never sent.
    fn item_failed(&mut self, failed: &super::rollout::FailedItem<E::Item>, took: Duration) {
        let kind = failed
            .outcome
            .failure()
            .unwrap_or(crate::env::FailureKind::Verifier);
        self.summary.items_failed.add(kind);
        if let Some((_, metrics)) = &mut self.wandb {
            metrics.record_perf(Perf::FailedTaskDuration, took.as_secs_f64());
        }
        let message = failed.outcome.failure_message().unwrap_or_default();
        match &mut self.failures {
            Some(log) => {
                if let Err(e) = log.record(failed) {
                    warn!("cannot write the failures file: {e}");
                }
                warn!(
                    "item not trained on after {} attempt(s) ({} failure): {message}",
                    failed.attempts,
                    kind.as_str()
                );
            }
            None => warn!(
                "item not trained on after {} attempt(s) ({} failure): {message}; \
                 set --env.data_path_to_save_groups to keep failed items in a file",
                failed.attempts,
                kind.as_str()
            ),
        }
    }

    /// Registers again (after an API restart), retrying until the server answers; then
    /// resends the groups that could not be delivered.
    async fn reregister(&mut self) {
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
                    let wait = Duration::from_secs(1 << attempt.min(3)).min(self.opts.retry.cap);
                    warn!("re-registration failed: {e}; retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        };
        info!(
            "re-registered as env_id {} ({}), trainer at step {}; {} undelivered groups to resend",
            registration.env_id,
            registration.wandb_name,
            registration.starting_step,
            self.outbox.queued()
        );
        self.summary.reregistrations += 1;
        if self.rt.config().total_steps == -1 && registration.num_steps != -1 {
            self.total_steps = registration.num_steps;
        }
        self.curr_step = registration.starting_step;
        self.registration = registration;
        self.status = None;
        match self.api.info().await {
            Ok(info) => {
                (self.batch_size, self.length_limit) =
                    apply_info(&info, self.rt.config().batch_size)
            }
            Err(e) => warn!("GET /info after re-registering failed: {e}"),
        }
        self.outbox.reset_failure();
        let env_id = self.registration.env_id;
        self.outbox
            .flush(&self.api, env_id, &mut self.summary)
            .await;
    }

    fn step_changed(&mut self, current: i64) {
        let c = Arc::clone(self.rt.config());
        if boundary_crossed(self.curr_step, current, c.steps_per_eval) {
            if self.eval.is_some() {
                warn!("step {current}: evaluation due but the previous one is still running");
            } else {
                self.start_eval(current);
            }
        }
        if boundary_crossed(
            self.curr_step,
            current,
            self.registration.checkpoint_interval,
        ) {
            let step = current.div_euclid(self.registration.checkpoint_interval)
                * self.registration.checkpoint_interval;
            debug!("checkpoint step {step}: the environment keeps no checkpoint data");
        }
        self.curr_step = current;
        if self.items_sent_this_step >= c.min_items_sent_before_logging {
            self.items_sent_this_step = 0;
            self.log_metrics();
        }
    }

    fn start_eval(&mut self, step: i64) {
        info!("step {step}: starting evaluation");
        if self.rt.config().eval_handling == EvalHandling::StopTrain {
            self.cancel_all_to_backlog();
        }
        let env = Arc::clone(&self.env);
        let rt = Arc::clone(&self.rt);
        let name = self.opts.env_name.clone();
        let model = self.opts.model_name.clone();
        let shutdown = self.shutdown.clone();
        self.eval = Some(tokio::spawn(async move {
            run_evaluate(&*env, &rt, &name, &model, &shutdown).await
        }));
    }

    async fn poll_eval(&mut self) {
        if !self.eval.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        let handle = self.eval.take().expect("checked above");
        self.summary.evals += 1;
        match handle.await {
            Ok(Ok(s)) => {
                info!("evaluation finished: {:?}", s.metrics);
                self.pending_eval_metrics.extend(s.metrics);
            }
            Ok(Err(e)) => warn!("evaluation failed: {e:#}"),
            Err(e) => warn!("evaluation task failed: {e}"),
        }
    }

    fn log_metrics(&mut self) {
        if let Some((logger, metrics)) = &mut self.wandb {
            metrics.stash(&std::mem::take(&mut self.pending_eval_metrics));
            let Ok(env) = self.env.0.try_read() else {
                return;
            };
            let context = LogContext {
                prefix: Some(&self.registration.wandb_name),
                length_limit: self.length_limit,
                server_metrics: server_metrics(&self.rt.take_request_stats()),
            };
            logger.log(self.curr_step, metrics.take(&*env, &context));
            return;
        }
        let mut metrics = std::mem::take(&mut self.pending_eval_metrics);
        let rollouts: Vec<_> = std::mem::take(&mut self.rollouts_since_log).into();
        let (sum, count) = std::mem::take(&mut self.rewards_since_log);
        if count > 0 {
            metrics.insert("train/mean_reward".into(), sum / count as f64);
        }
        metrics.insert(
            "train/items_sent_to_api".into(),
            self.summary.groups_sent as f64,
        );
        if let Ok(env) = self.env.0.try_read() {
            env.wandb_log(&rollouts, &mut metrics);
        }
        let prefix = &self.registration.wandb_name;
        let prefixed: Metrics = metrics
            .into_iter()
            .map(|(k, v)| (format!("{prefix}_{k}"), v))
            .collect();
        log_step_metrics(&prefixed, self.curr_step);
    }

    /// Ends the run: on a stop request the running groups first get the grace period to
    /// finish (and are sent); then every undelivered group is delivered or spooled, the env
    /// disconnects and W&B finishes.
    async fn shutdown(&mut self) {
        if self.summary.interrupted {
            self.finish_running().await;
        }
        for w in self.running.drain(..) {
            w.abort.abort();
        }
        self.joins.abort_all();
        while self.joins.join_next().await.is_some() {}
        if let Some(eval) = self.eval.take() {
            eval.abort();
            let _ = eval.await;
        }
        self.drops.announce();
        self.summary.drops_by_reason = self.drops.by_reason().clone();
        self.deliver_or_spool().await;
        if self.summary.final_step == 0 {
            self.summary.final_step = self.curr_step;
        }
        // Upstream never disconnects; doing so stops the server from counting this
        // environment's minimum batch allocation after it is gone.
        let disconnect = self.api.disconnect_env(self.registration.env_id);
        match tokio::time::timeout(Duration::from_secs(10), disconnect).await {
            Ok(Ok(v)) => info!("disconnected from the trajectory API: {v}"),
            Ok(Err(e)) => warn!("POST /disconnect-env failed: {e}"),
            Err(_) => warn!("POST /disconnect-env did not answer within 10 s"),
        }
        if let Some((logger, _)) = self.wandb.take() {
            let report = logger.finish(0).await;
            info!("wandb: {}", report.describe(&self.opts.env_name));
        }
    }

    /// After a stop request: takes no new items and lets the running groups finish until
    /// the grace period (counted from the request) runs out.
    async fn finish_running(&mut self) {
        let grace = grace(self.rt.config().shutdown_grace);
        if !self.running.is_empty() {
            info!(
                "waiting up to {grace:?} for {} running groups (--env.shutdown_grace)",
                self.running.len()
            );
        }
        let shutdown = self.shutdown.clone();
        while !self.running.is_empty() {
            tokio::select! {
                Some(done) = self.joins.join_next() => self.finished(done),
                () = shutdown.cancelled(grace) => {
                    warn!(
                        "{} groups still running cancelled by {}",
                        self.running.len(),
                        shutdown.cancel_reason(grace)
                    );
                    break;
                }
            }
        }
    }

    /// Waits for the sends in flight and resends the outbox, for at most the rest of the
    /// grace period (at least 5 s, none after a second stop request); spools what is left.
    async fn deliver_or_spool(&mut self) {
        let grace = grace(self.rt.config().shutdown_grace);
        let shutdown = self.shutdown.clone();
        let deadline = tokio::time::sleep(Duration::from_secs(5));
        let interrupted = self.summary.interrupted;
        let delivery = async {
            while self.outbox.next_sent(&mut self.summary).await {}
            let env_id = self.registration.env_id;
            if self.outbox.has_queued() {
                self.outbox
                    .flush(&self.api, env_id, &mut self.summary)
                    .await;
            }
        };
        tokio::select! {
            () = delivery => {}
            () = async {
                if interrupted {
                    // The grace period from the request, but at least the 5 s started now.
                    tokio::join!(shutdown.cancelled(grace), deadline);
                } else {
                    std::future::pending::<()>().await;
                }
            } => warn!("delivery cut short by the grace period"),
            () = shutdown.forced() => warn!("delivery cancelled by a second stop request"),
        }
        let left = self.outbox.abandon();
        if left.is_empty() {
            return;
        }
        match self.spool.save(&left) {
            Ok((kept, dropped, path)) => {
                self.summary.groups_spooled += kept;
                self.summary.groups_lost += dropped;
                warn!(
                    "{kept} undelivered groups spooled to {} (the next start of this env resends them){}",
                    path.display(),
                    if dropped > 0 {
                        format!("; {dropped} older ones over --env.outbox_spool_max_mb were dropped")
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => {
                self.summary.groups_lost += left.len();
                warn!(
                    "{} undelivered groups are lost: cannot spool them to {}: {e}",
                    left.len(),
                    self.spool.dir().display()
                );
            }
        }
    }
}
