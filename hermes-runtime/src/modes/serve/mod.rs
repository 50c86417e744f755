//! `serve`: online RL against an Atropos trajectory API with the reference environment's loop —
//! register (waiting for the trainer), keep up to the worker cap of groups in flight, pause
//! when the trainer's off-policy queue is full, evaluate every `steps_per_eval` steps, stop at
//! `total_steps`, and survive the API server restarting (re-register, resend what was not
//! delivered). A stop request lets the running groups finish within the grace period, delivers
//! or spools what is undelivered, disconnects and finishes W&B.
//!
//! Layout: [`policy`] holds the pure Atropos arithmetic, `session` the registration with the
//! trajectory API (status polls, re-registering, disconnecting), `workers` the pool of rollout
//! workers, `outbox` the delivery (sends, resends, the spool), `metrics` the step metrics
//! (W&B or the log), and this file the loop that ties them together.

mod checkpoint;
mod metrics;
mod outbox;
mod pause;
pub mod policy;
mod session;
mod workers;

pub use outbox::{Spool, SpoolIdentity, StaleSpool, TrainerRun, STALE_DIR};
pub(crate) use policy::{boundary_crossed, should_pause, should_stop, worker_cap, CapInputs};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tracing::{debug, info, warn};

use super::drops::Drops;
use super::evaluate::run_evaluate;
use super::failures::{failures_path, FailureLog};
use super::output::{free_path, JsonlWriter};
use super::rollout::{FailedItem, Runtime, SharedEnv};
use crate::atropos::api::{EnvStatus, TrajectoryApi};
use crate::atropos::ScoredDataGroup;
use crate::config::{EvalHandling, HermesEnvConfig};
use crate::data::Cursors;
use crate::env::{Environment, FailureCounts};
use crate::llm::RetryPolicy;
use crate::shutdown::{grace, Shutdown};
use checkpoint::CheckpointStore;
use metrics::StepLog;
use outbox::Outbox;
use pause::Pause;
use session::Session;
use workers::{Done, Joined, Workers};

/// Knobs of the serve loop that are not environment config.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `desired_name` when `wandb_name` is unset (the environment's name).
    pub env_name: String,
    /// Model name written in eval results.
    pub model_name: String,
    /// Every inference server's model name (the spool's identity); `[model_name]` by default.
    pub model_names: Vec<String>,
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
    /// The dataset cursors the environment's `setup` made, checkpointed with its state.
    pub cursors: Cursors,
}

impl ServeOptions {
    /// Upstream's timings for environment `env_name` served with model `model_name`.
    pub fn new(env_name: &str, model_name: &str) -> Self {
        ServeOptions {
            env_name: env_name.to_owned(),
            model_name: model_name.to_owned(),
            model_names: vec![model_name.to_owned()],
            startup_delay: Duration::from_secs(5),
            tick: Duration::from_millis(100),
            retry: RetryPolicy::default(),
            register_poll: Duration::from_secs(1),
            wandb_config: None,
            cursors: Cursors::default(),
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
    /// Those drops per reason (`size`, `equal_scores`, `too_long`, `skipped`).
    pub drops_by_reason: BTreeMap<&'static str, usize>,
    /// Rollouts the environment's `score_group` dropped from their groups.
    pub rollouts_dropped: usize,
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

/// The serve loop's state.
struct Loop<E: Environment> {
    /// The environment, shared with the workers and the evaluation task.
    env: Arc<SharedEnv<E>>,
    /// The rollouts' services.
    rt: Arc<Runtime>,
    /// The registration with the trajectory API.
    session: Session,
    /// Knobs that are not environment config.
    opts: ServeOptions,
    /// The last `/status-env` answer (none right after (re-)registering).
    status: Option<EnvStatus>,
    /// The trainer step last seen.
    curr_step: i64,
    /// Where the environment's checkpoints go (none when it keeps no checkpoint data).
    checkpoints: Option<CheckpointStore>,
    /// The rollout workers.
    workers: Workers<E>,
    /// Finished groups on their way to the API.
    outbox: Outbox,
    /// Where undelivered groups go at exit.
    spool: Spool,
    /// Who this run's groups are made by and for; the spool resends only its own.
    identity: SpoolIdentity,
    /// The run's stop request.
    shutdown: Shutdown,
    /// Items that produced no group (`<name>.failures.jsonl`), with the groups file.
    failures: Option<FailureLog>,
    /// Dropped groups per reason, announced at most every 30 s.
    drops: Drops,
    /// The evaluation running, if any.
    eval: Option<tokio::task::JoinHandle<anyhow::Result<crate::modes::EvalSummary>>>,
    /// The step metrics (W&B or the log).
    log: StepLog<E::Item>,
    /// Groups sent since the last metrics log (`min_items_sent_before_logging`).
    items_sent_this_step: i64,
    /// The pause while the trainer's off-policy queue is full.
    paused: Option<Pause>,
    /// `--env.data_path_to_save_groups`: every sent group, also as JSONL.
    sink: Option<JsonlWriter>,
    /// What the run did.
    summary: ServeSummary,
}

/// The `serve` mode of a run: the loop against the trajectory API, then the summary.
pub async fn main<E: Environment>(
    env: E,
    rt: Runtime,
    cfg: &crate::config::ResolvedConfig,
    name: &str,
    cursors: Cursors,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let model = cfg
        .servers
        .first()
        .map(|s| s.model_name.clone())
        .unwrap_or_default();
    let mut opts = ServeOptions::new(name, &model);
    opts.cursors = cursors;
    opts.model_names = cfg.servers.iter().map(|s| s.model_name.clone()).collect();
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
    mut env: E,
    rt: Arc<Runtime>,
    opts: ServeOptions,
    shutdown: &Shutdown,
) -> anyhow::Result<ServeSummary> {
    let config = Arc::clone(rt.config());
    let api = TrajectoryApi::new(&config.rollout_server_url, opts.retry, opts.register_poll)?;
    let register = session::register_request(&config, &opts.env_name);
    let (wandb, session) = shutdown
        .unless_requested(async {
            let wandb = match config.use_wandb {
                true => metrics::start_wandb(&api, &register.desired_name, &opts, &config).await?,
                false => None,
            };
            anyhow::Ok((wandb, Session::connect(api, register, &config).await?))
        })
        .await??;
    let checkpoints = checkpoint_store(&env, &opts.cursors, &config, &session)?;
    if let Some(store) = &checkpoints {
        let starting_step = session.registration().starting_step;
        store.restore(&mut env, &opts.cursors, starting_step)?;
    }
    let sink = open_sink(&config)?;
    let failures = sink
        .as_ref()
        .map(|s| FailureLog::new(failures_path(s.path())));
    let spool = Spool::new(
        config.outbox_spool_dir.as_deref(),
        session.desired_name(),
        config.outbox_spool_max_mb,
    );
    let identity = spool_identity(&session, &opts, &rt).await;
    let mut summary = ServeSummary::default();
    let outbox = resume_spooled(&spool, &identity, &mut summary);
    if shutdown
        .unless_requested(tokio::time::sleep(opts.startup_delay))
        .await
        .is_err()
    {
        info!("stop requested before the first rollout");
    }
    let env = Arc::new(SharedEnv(tokio::sync::RwLock::new(env)));
    let state = Loop {
        workers: Workers::new(Arc::clone(&env), Arc::clone(&rt)),
        env,
        rt,
        curr_step: session.registration().starting_step,
        checkpoints,
        session,
        opts,
        status: None,
        outbox,
        spool,
        identity,
        shutdown: shutdown.clone(),
        failures,
        drops: Drops::default(),
        eval: None,
        log: StepLog::new(wandb),
        items_sent_this_step: 0,
        paused: None,
        sink,
        summary,
    };
    state.run().await
}

/// Where the environment's checkpoints go: `--env.checkpoint_dir`, else the trainer's
/// `checkpoint_dir`; `None` for an environment with no cursors and no `save_checkpoint` state
/// (nothing to keep, as upstream writes nothing without data).
fn checkpoint_store<E: Environment>(
    env: &E,
    cursors: &Cursors,
    config: &HermesEnvConfig,
    session: &Session,
) -> anyhow::Result<Option<CheckpointStore>> {
    let mut probe = crate::env::Checkpoint::default();
    env.save_checkpoint(&mut probe)
        .context("save_checkpoint hook failed")?;
    if cursors.positions().is_empty() && probe.values().is_empty() {
        debug!("the environment keeps no checkpoint data: no checkpoints");
        return Ok(None);
    }
    let base = config
        .checkpoint_dir
        .clone()
        .unwrap_or_else(|| session.registration().checkpoint_dir.clone());
    if base.is_empty() {
        warn!(
            "the trainer named no checkpoint_dir: the environment's checkpoints are not saved; \
             set --env.checkpoint_dir to keep them"
        );
        return Ok(None);
    }
    Ok(Some(CheckpointStore::new(
        std::path::Path::new(&base),
        session.desired_name(),
    )))
}

/// `--env.data_path_to_save_groups`: the JSONL file the sent groups also go to (a free name
/// next to the one given).
fn open_sink(config: &HermesEnvConfig) -> anyhow::Result<Option<JsonlWriter>> {
    let Some(p) = &config.data_path_to_save_groups else {
        return Ok(None);
    };
    let path = free_path(p.as_ref()).with_context(|| format!("cannot create {p}"))?;
    info!("also writing groups to {}", path.display());
    let sink =
        JsonlWriter::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Some(sink))
}

/// This run's spool identity: the registered name, the models, the tokenizer that makes the
/// trainer tokens and the trainer run the API reports (`/wandb_info`, `checkpoint_dir`).
async fn spool_identity(session: &Session, opts: &ServeOptions, rt: &Runtime) -> SpoolIdentity {
    let tokenizer = match rt.token_source() {
        super::rollout::TokenSource::Placeholder => "placeholder".to_owned(),
        super::rollout::TokenSource::Retokenized(t) => t.fingerprint(),
        super::rollout::TokenSource::Managed(p) => p.tokenizer.fingerprint(),
    };
    let (wandb_project, wandb_group) = match session.api().wandb_info().await {
        Ok(w) => (w.project, w.group),
        Err(e) => {
            warn!(
                "GET /wandb_info failed: {e}; the spool identity records no wandb project or group"
            );
            (None, None)
        }
    };
    SpoolIdentity {
        env: session.desired_name().to_owned(),
        models: opts.model_names.clone(),
        tokenizer,
        trainer: TrainerRun {
            wandb_project,
            wandb_group,
            checkpoint_dir: session.registration().checkpoint_dir.clone(),
        },
    }
}

/// An outbox holding the groups an earlier run with identity `me` spooled (sent first).
fn resume_spooled(spool: &Spool, me: &SpoolIdentity, summary: &mut ServeSummary) -> Outbox {
    let name = &me.env;
    let mut outbox = Outbox::default();
    match spool.take(me) {
        Ok(groups) if !groups.is_empty() => {
            info!(
                "resending {} groups an earlier run of '{}' could not deliver (spooled in {})",
                groups.len(),
                name,
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
    outbox
}

impl<E: Environment> Loop<E> {
    /// Until a stop (total steps, a stop request): finished workers, finished sends and the
    /// ticks, then the shutdown.
    async fn run(mut self) -> anyhow::Result<ServeSummary> {
        let mut ticker = tokio::time::interval(self.opts.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = self.shutdown.clone();
        let rt = Arc::clone(&self.rt);
        let mut fatal: Option<anyhow::Error> = None;
        loop {
            tokio::select! {
                Some(done) = self.workers.join_next(), if self.workers.has_tasks() => {
                    self.finished(done);
                }
                // A refusal no retry can fix (wrong key or model): deliver what is done, stop.
                e = rt.llm_fatal_raised() => {
                    fatal = Some(e.into());
                    break;
                }
                true = self.outbox.next_sent(&mut self.summary), if self.outbox.sending() => {}
                () = shutdown.requested() => {
                    self.summary.interrupted = true;
                    break;
                }
                _ = ticker.tick() => {
                    if let Some(down) = self.inference_down() {
                        info!("inference is down: delivering finished groups, then disconnecting");
                        fatal = Some(down.into());
                        break;
                    }
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
        match fatal {
            Some(e) => Err(e),
            None => Ok(self.summary),
        }
    }

    /// Inference has been dead for `--env.inference_down_grace` (when it is positive).
    fn inference_down(&self) -> Option<crate::llm::InferenceDown> {
        let grace = self.rt.config().inference_down_grace;
        (grace > 0.0)
            .then(|| self.rt.inference_down(Duration::from_secs_f64(grace)))
            .flatten()
    }

    /// One main-loop tick; `true` = stop.
    async fn tick(&mut self) -> anyhow::Result<bool> {
        if self.outbox.has_queued() {
            let env_id = self.session.env_id();
            self.outbox
                .flush(self.session.api(), env_id, &mut self.summary)
                .await;
        }
        let status = match self.session.status().await {
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
            self.step_changed(status.current_step).await;
        }
        let config = Arc::clone(self.rt.config());
        let (batch_size, total_steps) = (self.session.batch_size(), self.session.total_steps());
        if should_stop(&status, config.group_size, batch_size, total_steps) {
            info!(
                "trainer at step {} with {} of our groups queued: total_steps {} reached; stopping",
                status.current_step, status.queue_size, total_steps
            );
            self.summary.final_step = status.current_step;
            return Ok(true);
        }
        self.pace(&status).await;
        self.summary.workers_timed_out += self.workers.expire();
        Ok(false)
    }

    /// Pauses every worker while the trainer's off-policy queue is full; otherwise keeps the
    /// workers at the cap.
    async fn pace(&mut self, status: &EnvStatus) {
        let config = Arc::clone(self.rt.config());
        let batch_size = self.session.batch_size();
        if should_pause(
            status,
            config.group_size,
            batch_size,
            config.max_batches_offpolicy,
            config.min_batch_allocation,
        ) {
            match &mut self.paused {
                None => {
                    info!(
                        "off-policy queue full ({} groups queued, {} batches of {}): pausing",
                        status.queue_size, config.max_batches_offpolicy, batch_size
                    );
                    self.paused = Some(Pause::start(Instant::now()));
                    self.summary.pauses += 1;
                }
                Some(pause) => {
                    if let Some(waited) = pause.remind(Instant::now()) {
                        info!(
                            "still paused after {} s: waiting for the trainer (at step {}) to pull a batch; \
                             {} of our groups queued, the limit is {} batches of {}",
                            waited.as_secs(),
                            status.current_step,
                            status.queue_size,
                            config.max_batches_offpolicy,
                            batch_size
                        );
                    }
                }
            }
            self.workers.cancel_all_to_backlog();
        } else {
            if self.paused.take().is_some() {
                info!("queue drained to {} groups: resuming", status.queue_size);
            }
            let cap = worker_cap(&self.cap_inputs()).max(0) as usize;
            self.workers.fill_to(cap).await;
        }
    }

    /// What [`worker_cap`] needs, from the config, the session and the last status.
    fn cap_inputs(&self) -> CapInputs<'_> {
        let c = self.rt.config();
        CapInputs {
            max_num_workers: c.effective_workers(self.rt.llm().server_count()) as i64,
            eval_running: self.eval.is_some(),
            eval_handling: c.eval_handling,
            eval_limit_ratio: c.eval_limit_ratio,
            max_batches_offpolicy: c.max_batches_offpolicy,
            batch_size: self.session.batch_size(),
            group_size: c.group_size,
            min_batch_allocation: c.min_batch_allocation,
            status: self.status.as_ref(),
            undelivered: self.outbox.undelivered() as i64,
        }
    }

    /// A worker's task ended: its group is counted, recorded and sent, or dropped, or its
    /// item failed.
    fn finished(&mut self, done: Joined<E::Item>) {
        let (run, took) = match self.workers.complete(done) {
            Done::Group { run, took } => (*run, took),
            Done::Lost => {
                self.summary.groups_lost += 1;
                return;
            }
            Done::Discarded => return,
        };
        self.summary.rollout_failures.merge(&run.failures);
        let c = Arc::clone(self.rt.config());
        let dropped = match &run.result {
            Ok(group) => run.drop_reason(group, &c, Some(self.session.length_limit())),
            Err(_) => None,
        };
        self.summary.rollouts_dropped += run.rollouts_dropped;
        self.log.record_rollouts_dropped(run.rollouts_dropped);
        let group = match run.result {
            Ok(group) => group,
            Err(failed) => {
                self.item_failed(&failed, took);
                return;
            }
        };
        self.log.record_group(&group, &run.failures, took, dropped);
        self.log.keep_rollouts(run.rollouts);
        if let Some(reason) = dropped {
            debug!("group dropped: {reason}");
            self.drops.record(reason);
            self.summary.groups_dropped += 1;
            return;
        }
        self.send(group);
    }

    /// Writes a kept group to the JSONL sink and hands it to the outbox.
    fn send(&mut self, mut group: ScoredDataGroup) {
        group.fill_absent_nulls();
        if let Some(sink) = &mut self.sink {
            if let Err(e) = sink.write_group(&group) {
                warn!("cannot write {}: {e}", sink.path().display());
            }
        }
        self.items_sent_this_step += 1;
        // Serialising, gzipping and posting run off the loop, concurrently, and are not
        // cancelled by a pause.
        self.outbox
            .submit(self.session.api(), self.session.env_id(), group);
    }

    /// An item whose rollouts kept failing: counted, recorded, never sent.
    fn item_failed(&mut self, failed: &FailedItem<E::Item>, took: Duration) {
        let kind = failed
            .outcome
            .failure()
            .unwrap_or(crate::env::FailureKind::Verifier);
        self.summary.items_failed.add(kind);
        self.log.record_failed_item(took);
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
        let config = Arc::clone(self.rt.config());
        self.session
            .reregister(&config, self.opts.retry.cap, self.outbox.queued())
            .await;
        self.summary.reregistrations += 1;
        self.curr_step = self.session.registration().starting_step;
        self.status = None;
        self.outbox.reset_failure();
        let env_id = self.session.env_id();
        self.outbox
            .flush(self.session.api(), env_id, &mut self.summary)
            .await;
    }

    /// The trainer moved to step `current`: an evaluation when one is due, and the step's
    /// metrics once enough groups were sent.
    async fn step_changed(&mut self, current: i64) {
        let c = Arc::clone(self.rt.config());
        if boundary_crossed(self.curr_step, current, c.steps_per_eval) {
            if self.eval.is_some() {
                warn!("step {current}: evaluation due but the previous one is still running");
            } else {
                self.start_eval(current);
            }
        }
        let checkpoints = self.session.registration().checkpoint_interval;
        if boundary_crossed(self.curr_step, current, checkpoints) {
            let step = current.div_euclid(checkpoints) * checkpoints;
            self.save_checkpoint(step).await;
        }
        self.curr_step = current;
        if self.items_sent_this_step >= c.min_items_sent_before_logging {
            self.items_sent_this_step = 0;
            self.log_metrics();
        }
    }

    /// Saves the environment's checkpoint as of trainer step `step`; a failure is one WARN
    /// line (training goes on, the previous checkpoint stays).
    async fn save_checkpoint(&mut self, step: i64) {
        let Some(store) = &self.checkpoints else {
            return;
        };
        let env = self.env.0.read().await;
        match store.save(&*env, &self.opts.cursors, step) {
            Ok(path) => info!("checkpoint saved: {}", path.display()),
            Err(e) => warn!(
                "checkpoint of step {step} not saved in {}: {e:#}",
                store.dir().display()
            ),
        }
    }

    /// Starts an evaluation in its own task (`stop_train` pauses the workers first).
    fn start_eval(&mut self, step: i64) {
        info!("step {step}: starting evaluation");
        if self.rt.config().eval_handling == EvalHandling::StopTrain {
            self.workers.cancel_all_to_backlog();
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

    /// Collects a finished evaluation's metrics for the next log.
    async fn poll_eval(&mut self) {
        if !self.eval.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        let handle = self.eval.take().expect("checked above");
        self.summary.evals += 1;
        match handle.await {
            Ok(Ok(s)) => {
                info!("evaluation finished: {:?}", s.metrics);
                self.log.add_eval(s.metrics);
            }
            Ok(Err(e)) => warn!("evaluation failed: {e:#}"),
            Err(e) => warn!("evaluation task failed: {e}"),
        }
    }

    /// Logs the step's metrics (W&B, else the log).
    fn log_metrics(&mut self) {
        let sent = self.summary.groups_sent;
        self.log
            .log(&self.env, &self.rt, &self.session, self.curr_step, sent);
    }

    /// Ends the run: on a stop request the running groups first get the grace period to
    /// finish (and are sent); then every undelivered group is delivered or spooled, the env
    /// disconnects and W&B finishes.
    async fn shutdown(&mut self) {
        if self.summary.interrupted {
            self.finish_running().await;
        }
        let unfinished = self.workers.running() + self.workers.backlog_len();
        self.workers.abort_all().await;
        if self.checkpoints.is_some() {
            if unfinished > 0 {
                info!(
                    "{unfinished} items taken but not finished are past the checkpoint's dataset \
                     position: a restart does not run them again"
                );
            }
            self.save_checkpoint(self.curr_step).await;
        }
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
        self.session.disconnect().await;
        self.log.finish(&self.opts.env_name).await;
    }

    /// After a stop request: takes no new items and lets the running groups finish until
    /// the grace period (counted from the request) runs out.
    async fn finish_running(&mut self) {
        let grace = grace(self.rt.config().shutdown_grace);
        if self.workers.running() > 0 {
            info!(
                "waiting up to {grace:?} for {} running groups (--env.shutdown_grace)",
                self.workers.running()
            );
        }
        let shutdown = self.shutdown.clone();
        while self.workers.running() > 0 {
            tokio::select! {
                Some(done) = self.workers.join_next() => self.finished(done),
                () = shutdown.cancelled(grace) => {
                    warn!(
                        "{} groups still running cancelled by {}",
                        self.workers.running(),
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
            let env_id = self.session.env_id();
            if self.outbox.has_queued() {
                self.outbox
                    .flush(self.session.api(), env_id, &mut self.summary)
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
        match self.spool.save(&left, &self.identity) {
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
