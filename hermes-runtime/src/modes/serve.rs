//! `serve`: online RL against an Atropos trajectory API with the reference environment's loop —
//! register (waiting for the trainer), keep up to the worker cap of groups in flight, pause
//! when the trainer's off-policy queue is full, evaluate every `steps_per_eval` steps, stop at
//! `total_steps`, and survive the API server restarting (re-register, resend what was not
//! delivered).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{debug, info, warn};

use super::evaluate::run_evaluate;
use super::output::{free_path, JsonlWriter};
use super::rollout::{collect_group, Runtime, SharedEnv, TokenSource};
use crate::atropos::api::{
    ApiInfo, EnvStatus, RegisterEnv, Registration, SendOutcome, TrajectoryApi,
};
use crate::atropos::{ScoredDataGroup, Slot};
use crate::config::EvalHandling;
use crate::env::{Environment, Metrics, ScoredRollout};
use crate::llm::RetryPolicy;
use crate::wandb::{
    run_name, server_metrics, LogContext, Logger, Perf, RunSpec, TrainMetrics, WandbSettings,
};

/// Groups kept for resending while the trajectory API is unreachable; older ones beyond this
/// are counted as lost (with a log line).
pub const OUTBOX_CAPACITY: usize = 4096;

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

/// `int(batch_size × (unallocated_fraction + min_batch_allocation))`; `batch_size` before the
/// first status or when it is unknown (-1).
pub fn derived_batch_size(
    batch_size: i64,
    status: Option<&EnvStatus>,
    min_batch_allocation: Option<f64>,
) -> i64 {
    match status {
        Some(s) if batch_size != -1 => {
            (batch_size as f64 * (s.unallocated_fraction + min_batch_allocation.unwrap_or(0.0)))
                as i64
        }
        _ => batch_size,
    }
}

/// Stop when `current_step + (queue_size × group_size) // batch_size > total_steps`.
pub fn should_stop(status: &EnvStatus, group_size: i64, batch_size: i64, total_steps: i64) -> bool {
    let queued_steps = if batch_size > 0 {
        (status.queue_size * group_size).div_euclid(batch_size)
    } else {
        0
    };
    status.current_step + queued_steps > total_steps
}

/// The off-policy back-pressure rule: the queue holds `max_batches_offpolicy` batches (and,
/// with a minimum allocation, this environment's share is already queued), or the batch size
/// is unknown.
pub fn should_pause(
    status: &EnvStatus,
    group_size: i64,
    batch_size: i64,
    max_batches_offpolicy: i64,
    min_batch_allocation: Option<f64>,
) -> bool {
    if derived_batch_size(batch_size, Some(status), min_batch_allocation) == -1 {
        return true;
    }
    let full = status.queue_size * group_size >= max_batches_offpolicy * batch_size
        && max_batches_offpolicy > 0;
    let share_met = match min_batch_allocation {
        None => true,
        Some(a) => {
            let g_max = status.max_group_size.max(1);
            let needed =
                (a * batch_size as f64 * max_batches_offpolicy as f64 / g_max as f64).ceil() as i64;
            needed * (g_max / group_size.max(1)) - status.self_queue_size <= 0
        }
    };
    full && share_met
}

/// Inputs of the worker cap.
#[derive(Debug, Clone, Copy)]
pub struct CapInputs<'a> {
    /// `max_num_workers` (already resolved from per-node × servers when -1).
    pub max_num_workers: i64,
    /// Whether an evaluation is running, and how training behaves meanwhile.
    pub eval_running: bool,
    /// `eval_handling`.
    pub eval_handling: EvalHandling,
    /// `eval_limit_ratio`.
    pub eval_limit_ratio: f64,
    /// `max_batches_offpolicy`.
    pub max_batches_offpolicy: i64,
    /// Batch size from `/info`.
    pub batch_size: i64,
    /// `group_size`.
    pub group_size: i64,
    /// `min_batch_allocation`.
    pub min_batch_allocation: Option<f64>,
    /// The latest `/status-env`.
    pub status: Option<&'a EnvStatus>,
}

/// How many workers may run now (upstream `add_train_workers` arithmetic).
pub fn worker_cap(c: &CapInputs<'_>) -> i64 {
    let mut cap = c.max_num_workers;
    if c.eval_running {
        match c.eval_handling {
            EvalHandling::StopTrain => return 0,
            EvalHandling::LimitTrain => cap = (cap as f64 * c.eval_limit_ratio) as i64,
            EvalHandling::None => {}
        }
    }
    let g = c.group_size.max(1);
    let queue = c.status.map_or(0, |s| s.queue_size);
    let derived = derived_batch_size(c.batch_size, c.status, c.min_batch_allocation);
    cap = cap.min((c.max_batches_offpolicy * derived).div_euclid(g) - queue);
    if let (Some(a), Some(s)) = (c.min_batch_allocation, c.status) {
        let big = s.max_group_size.max(1) as f64;
        let gf = g as f64;
        let needed = (a * c.batch_size as f64 * c.max_batches_offpolicy as f64 / big).ceil();
        let have = ((big * s.self_queue_size as f64) / (big / gf)).floor();
        let floor = (((needed + (big / gf).floor()) * big - have) / gf)
            .ceil()
            .max(0.0) as i64;
        cap = cap.max(floor);
    }
    cap
}

/// True when the step moved across a multiple of `period` (the fixed form of upstream's
/// `prev % period > cur % period`, which misses jumps landing on a larger residue).
pub fn boundary_crossed(prev: i64, cur: i64, period: i64) -> bool {
    period > 0 && cur.div_euclid(period) > prev.div_euclid(period)
}

/// Why a finished group is not sent.
pub fn drop_reason(
    group: &ScoredDataGroup,
    group_size: usize,
    ensure_scores_are_not_same: bool,
    length_limit: i64,
) -> Option<String> {
    let expected = group.expected_size(group_size);
    if group.tokens.len() != expected {
        return Some(format!(
            "has {} rollouts, expected {expected}",
            group.tokens.len()
        ));
    }
    if ensure_scores_are_not_same && group.scores_all_equal() {
        return Some("all scores are equal (ensure_scores_are_not_same)".into());
    }
    if length_limit > 0 {
        if let Some(len) = group
            .tokens
            .iter()
            .map(Vec::len)
            .find(|&l| l as i64 >= length_limit)
        {
            return Some(format!(
                "a sequence has {len} tokens, at or above the trainer's limit {length_limit}"
            ));
        }
    }
    None
}

/// Writes one step's metrics to the log when no wandb run is active.
fn log_step_metrics(metrics: &Metrics, step: i64) {
    let line: Vec<String> = metrics.iter().map(|(k, v)| format!("{k}={v:.4}")).collect();
    info!("step {step}: {}", line.join(" "));
}

type GroupOutput<I> = (ScoredDataGroup, Vec<ScoredRollout<I>>);
type SendResult = (
    ScoredDataGroup,
    Result<SendOutcome, crate::atropos::ApiError>,
);

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
    joins: JoinSet<(u64, GroupOutput<E::Item>)>,
    running: Vec<Worker<E::Item>>,
    backlog: Vec<E::Item>,
    next_id: u64,
    outbox: VecDeque<ScoredDataGroup>,
    sends: JoinSet<SendResult>,
    failed_since: Option<Instant>,
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

/// Runs `serve` until the trainer reaches `total_steps` (or the server's `num_steps`).
pub async fn run_serve<E: Environment>(
    env: E,
    rt: Arc<Runtime>,
    opts: ServeOptions,
) -> anyhow::Result<ServeSummary> {
    let config = Arc::clone(&rt.config);
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
    let mut wandb = None;
    if config.use_wandb {
        // Serve runs log into the trainer's wandb project: wait until it has registered.
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
            display_name: Some(run_name(&register.desired_name)),
            project: info.project,
            group: info.group,
            config: opts.wandb_config.clone().unwrap_or_default(),
        };
        match WandbSettings::from_env().and_then(|settings| Logger::start(&settings, spec)) {
            Ok(Some(logger)) => wandb = Some((logger, TrainMetrics::new(&config))),
            Ok(None) => {}
            Err(e) => warn!("wandb: {e}; continuing without wandb logging"),
        }
    }
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
    tokio::time::sleep(opts.startup_delay).await;
    let state = Loop {
        env: Arc::new(SharedEnv(tokio::sync::RwLock::new(env))),
        rt,
        api,
        opts,
        register,
        curr_step: registration.starting_step,
        registration,
        total_steps,
        batch_size,
        length_limit,
        status: None,
        joins: JoinSet::new(),
        running: Vec::new(),
        backlog: Vec::new(),
        next_id: 0,
        outbox: VecDeque::new(),
        sends: JoinSet::new(),
        failed_since: None,
        eval: None,
        pending_eval_metrics: Metrics::new(),
        rollouts_since_log: VecDeque::new(),
        rewards_since_log: (0.0, 0),
        items_sent_this_step: 0,
        paused: false,
        sink,
        wandb,
        summary: ServeSummary::default(),
    };
    state.run().await
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
        loop {
            tokio::select! {
                Some(done) = self.joins.join_next(), if !self.joins.is_empty() => {
                    self.finished(done);
                }
                Some(sent) = self.sends.join_next(), if !self.sends.is_empty() => {
                    self.sent(sent);
                }
                _ = ticker.tick() => {
                    if self.tick().await? {
                        break;
                    }
                }
            }
        }
        self.shutdown().await;
        Ok(self.summary)
    }

    /// One main-loop tick; `true` = stop.
    async fn tick(&mut self) -> anyhow::Result<bool> {
        if !self.outbox.is_empty() {
            self.flush_outbox().await;
        }
        let status = match self.api.status_env(self.registration.env_id).await {
            Ok(s) => s,
            Err(e) => {
                warn!("GET /status-env failed: {e}; re-registering with the trajectory API");
                self.reregister().await;
                return Ok(false);
            }
        };
        if let TokenSource::Managed(p2) = &self.rt.tokens {
            p2.client.set_weight(status.env_weight);
        }
        self.status = Some(status);
        self.poll_eval().await;
        if self.curr_step != status.current_step {
            self.step_changed(status.current_step);
        }
        let config = Arc::clone(&self.rt.config);
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
        let c = &self.rt.config;
        CapInputs {
            max_num_workers: c.effective_workers(self.rt.llm.server_count()) as i64,
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
        let limit = self.rt.config.worker_timeout;
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

    fn finished(&mut self, done: Result<(u64, GroupOutput<E::Item>), tokio::task::JoinError>) {
        let (id, (mut group, rollouts)) = match done {
            Ok(v) => v,
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                let id = e.id();
                warn!("a worker failed: {e}");
                self.running.retain(|w| w.abort.id() != id);
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
        let c = Arc::clone(&self.rt.config);
        let dropped = drop_reason(
            &group,
            c.group_size.max(1) as usize,
            c.ensure_scores_are_not_same,
            self.length_limit,
        );
        if let Some((_, metrics)) = &mut self.wandb {
            let secs = took.as_secs_f64();
            metrics.record_perf(Perf::TaskDuration, secs);
            if dropped.is_none() {
                metrics.record_perf(Perf::SucceededTaskDuration, secs);
                metrics.record_group(&group);
            } else {
                metrics.record_perf(Perf::FailedTaskDuration, secs);
            }
        }
        for mut r in rollouts {
            self.rewards_since_log.0 += r.reward;
            self.rewards_since_log.1 += 1;
            r.run.managed_state = None;
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
            self.summary.groups_dropped += 1;
            return;
        }
        group.fill_absent_nulls();
        if let Some(sink) = &mut self.sink {
            if let Err(e) = sink.write(&group) {
                warn!("cannot write {}: {e}", sink.path().display());
            }
        }
        self.items_sent_this_step += 1;
        if self.failed_since.is_some() || !self.outbox.is_empty() {
            self.outbox.push_back(group);
            return;
        }
        // Serialising, gzipping and posting run off the loop, concurrently, and are not
        // cancelled by a pause.
        group.env_id = Slot::Value(self.registration.env_id);
        let api = self.api.clone();
        self.sends.spawn(async move {
            let outcome = api.send(std::slice::from_ref(&group)).await;
            (group, outcome)
        });
    }

    fn sent(&mut self, done: Result<SendResult, tokio::task::JoinError>) {
        match done {
            Ok((_, Ok(SendOutcome::Accepted(_)))) => self.summary.groups_sent += 1,
            Ok((_, Ok(SendOutcome::Rejected(e)))) => {
                warn!("the trajectory API refused a group (dropped): {e}");
                self.summary.groups_rejected += 1;
            }
            Ok((group, Err(e))) => {
                if self.failed_since.is_none() {
                    warn!("cannot send a group: {e}; keeping it to resend");
                    self.failed_since = Some(Instant::now());
                }
                self.outbox.push_back(group);
            }
            Err(e) => {
                warn!("a send task failed: {e}; its group is lost");
                self.summary.groups_lost += 1;
            }
        }
    }

    /// Sends queued groups in order; stops at the first transport failure (kept for later).
    async fn flush_outbox(&mut self) {
        while let Some(mut group) = self.outbox.pop_front() {
            group.env_id = Slot::Value(self.registration.env_id);
            match self.api.send(std::slice::from_ref(&group)).await {
                Ok(SendOutcome::Accepted(_)) => {
                    self.summary.groups_sent += 1;
                    self.summary.groups_resent += 1;
                    if self.failed_since.take().is_some() {
                        info!("trajectory API reachable again");
                    }
                }
                Ok(SendOutcome::Rejected(e)) => {
                    warn!("the trajectory API refused a group (dropped): {e}");
                    self.summary.groups_rejected += 1;
                }
                Err(e) => {
                    if self.failed_since.is_none() {
                        warn!("cannot send a group: {e}; keeping it to resend");
                        self.failed_since = Some(Instant::now());
                    }
                    self.outbox.push_front(group);
                    break;
                }
            }
        }
        while self.outbox.len() > OUTBOX_CAPACITY {
            self.outbox.pop_front();
            self.summary.groups_lost += 1;
            warn!(
                "outbox over {OUTBOX_CAPACITY} groups while the trajectory API is unreachable: \
                 dropped the oldest ({} lost so far)",
                self.summary.groups_lost
            );
        }
    }

    /// Registers again (after an API restart), retrying until the server answers; then
    /// resends the groups that could not be delivered.
    async fn reregister(&mut self) {
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
            self.outbox.len()
        );
        self.summary.reregistrations += 1;
        if self.rt.config.total_steps == -1 && registration.num_steps != -1 {
            self.total_steps = registration.num_steps;
        }
        self.curr_step = registration.starting_step;
        self.registration = registration;
        self.status = None;
        match self.api.info().await {
            Ok(info) => {
                (self.batch_size, self.length_limit) = apply_info(&info, self.rt.config.batch_size)
            }
            Err(e) => warn!("GET /info after re-registering failed: {e}"),
        }
        self.failed_since = None;
        self.flush_outbox().await;
    }

    fn step_changed(&mut self, current: i64) {
        let c = Arc::clone(&self.rt.config);
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
        if self.rt.config.eval_handling == EvalHandling::StopTrain {
            self.cancel_all_to_backlog();
        }
        let env = Arc::clone(&self.env);
        let rt = Arc::clone(&self.rt);
        let name = self.opts.env_name.clone();
        let model = self.opts.model_name.clone();
        self.eval = Some(tokio::spawn(async move {
            run_evaluate(&*env, &rt, &name, &model).await
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

    async fn shutdown(&mut self) {
        for w in self.running.drain(..) {
            w.abort.abort();
        }
        self.joins.abort_all();
        while self.joins.join_next().await.is_some() {}
        if let Some(eval) = self.eval.take() {
            eval.abort();
            let _ = eval.await;
        }
        while let Some(done) = self.sends.join_next().await {
            self.sent(done);
        }
        if !self.outbox.is_empty() {
            self.flush_outbox().await;
        }
        if !self.outbox.is_empty() {
            warn!(
                "{} finished groups could not be delivered before exit",
                self.outbox.len()
            );
            self.summary.groups_lost += self.outbox.len();
        }
        if self.summary.final_step == 0 {
            self.summary.final_step = self.curr_step;
        }
        // Upstream never disconnects; doing so stops the server from counting this
        // environment's minimum batch allocation after it is gone.
        match self.api.disconnect_env(self.registration.env_id).await {
            Ok(v) => info!("disconnected from the trajectory API: {v}"),
            Err(e) => warn!("POST /disconnect-env failed: {e}"),
        }
        if let Some((logger, _)) = self.wandb.take() {
            let report = logger.finish(0).await;
            info!("wandb: {}", report.describe(&self.opts.env_name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(current_step: i64, queue_size: i64) -> EnvStatus {
        EnvStatus {
            current_step,
            queue_size,
            unallocated_fraction: 1.0,
            self_queue_size: queue_size,
            max_group_size: 2,
            env_weight: 1.0,
        }
    }

    #[test]
    fn the_spec_end_to_end_example() {
        // Batch 4, group 2, max_batches_offpolicy 3, total_steps 3.
        assert!(!should_pause(&status(0, 5), 2, 4, 3, None));
        assert!(
            should_pause(&status(0, 6), 2, 4, 3, None),
            "6 groups = 3 batches"
        );
        assert!(
            !should_stop(&status(0, 6), 2, 4, 3),
            "0 + 12 // 4 = 3 is not > 3"
        );
        assert!(should_stop(&status(3, 2), 2, 4, 3), "3 + 4 // 4 = 4 > 3");
        // The 0→3 jump with a period of 2 crosses step 2: the fix runs the eval upstream skips.
        assert!(boundary_crossed(0, 3, 2));
        assert!(boundary_crossed(50, 250, 100));
        assert!(!boundary_crossed(100, 150, 100));
        assert!(!boundary_crossed(3, 4, 0));
    }

    #[test]
    fn worker_cap_arithmetic() {
        let s = status(0, 2);
        let base = CapInputs {
            max_num_workers: 16,
            eval_running: false,
            eval_handling: EvalHandling::StopTrain,
            eval_limit_ratio: 0.5,
            max_batches_offpolicy: 3,
            batch_size: 4,
            group_size: 2,
            min_batch_allocation: None,
            status: Some(&s),
        };
        assert_eq!(worker_cap(&base), 3 * 4 / 2 - 2);
        assert_eq!(
            worker_cap(&CapInputs {
                status: None,
                ..base
            }),
            6
        );
        assert_eq!(
            worker_cap(&CapInputs {
                eval_running: true,
                ..base
            }),
            0
        );
        let limit = CapInputs {
            eval_running: true,
            eval_handling: EvalHandling::LimitTrain,
            max_num_workers: 3,
            ..base
        };
        assert_eq!(worker_cap(&limit), 1);
        // Unknown batch size: derived batch -1 pauses.
        assert!(should_pause(&s, 2, -1, 3, None));
        // A minimum allocation raises the cap: a=0.5, B=4, O=3, G=2, g=2, s=2:
        // ceil(((ceil(3) + 1) × 2 − 4) / 2) = 2.
        let alloc = CapInputs {
            max_num_workers: 1,
            min_batch_allocation: Some(0.5),
            ..base
        };
        assert_eq!(worker_cap(&alloc), 2);
        assert_eq!(derived_batch_size(4, Some(&s), Some(0.5)), 6);
    }

    #[test]
    fn drop_rules_include_the_length_limit() {
        let g = ScoredDataGroup {
            tokens: vec![vec![1, 2, 3], vec![1]],
            scores: vec![1.0, 0.0],
            ..Default::default()
        };
        assert!(drop_reason(&g, 2, true, 4).is_none());
        assert!(drop_reason(&g, 2, true, 3).unwrap().contains("limit 3"));
        assert!(drop_reason(&g, 2, true, -1).is_none());
        assert!(drop_reason(&g, 3, true, -1).unwrap().contains("expected 3"));
    }
}
