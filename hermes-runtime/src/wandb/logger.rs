//! The run logger: [`Logger::log`] never waits. Rows go through a bounded queue to a recorder
//! thread that writes the run directory (every mode), and — online — to an uploader task that
//! creates the run and streams history, summary and tables with backoff. A dead or slow
//! endpoint only delays the uploader: failures are logged once and counted, pending rows are
//! bounded, and whatever was not uploaded can be sent later with `wandb sync`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tokio::sync::Notify;
use tracing::warn;

use super::api::{complete_body, stream_body, Api, RunRef};
use super::metrics::Record;
use super::run_dir::{RunDir, RunMeta, EXIT_FILE};
use super::settings::{new_run_id, WandbError, WandbMode, WandbSettings};

/// Rows waiting for the recorder thread; beyond this `log` drops rows (counted).
pub const QUEUE_CAPACITY: usize = 1024;
/// History lines waiting for upload; beyond this the oldest are dropped from the upload
/// (they stay in the run directory).
pub const MAX_PENDING_LINES: usize = 10_000;
/// History lines per `file_stream` request.
pub const LINES_PER_REQUEST: usize = 1000;

/// What a run is created with.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// Display name, usually [`run_name`](super::run_name)`(stem)`; `None` lets W&B pick one.
    pub display_name: Option<String>,
    /// Project (else `WANDB_PROJECT`, else `uncategorized`).
    pub project: Option<String>,
    /// Run group.
    pub group: Option<String>,
    /// The run config (secrets already redacted).
    pub config: Map<String, Value>,
}

/// Counters and outcome of a logger, for the end-of-run summary.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggerReport {
    /// Online or offline.
    pub mode: WandbMode,
    /// The local run directory.
    pub run_dir: PathBuf,
    /// The run's page, once the server created it.
    pub url: Option<String>,
    /// Rows passed to [`Logger::log`].
    pub rows_logged: u64,
    /// Rows written to the run directory.
    pub rows_saved: u64,
    /// Rows the server acknowledged (online).
    pub rows_uploaded: u64,
    /// Rows dropped because a queue was full.
    pub rows_dropped: u64,
    /// Failed W&B requests.
    pub failed_requests: u64,
    /// Whether the run was marked complete on the server.
    pub completed: bool,
}

impl LoggerReport {
    /// One line for the end-of-run summary; `bin` names the binary in the sync hint.
    pub fn describe(&self, bin: &str) -> String {
        let dir = self.run_dir.display();
        let sync = format!("`{bin} wandb sync {dir}`");
        let dropped = if self.rows_dropped > 0 {
            format!(", {} dropped (queue full)", self.rows_dropped)
        } else {
            String::new()
        };
        match self.mode {
            WandbMode::Offline => format!(
                "offline run saved to {dir} ({} rows{dropped}); upload it with {sync}",
                self.rows_saved
            ),
            _ if self.completed && self.rows_uploaded == self.rows_saved => format!(
                "{} ({} rows uploaded{dropped})",
                self.url.as_deref().unwrap_or("run created"),
                self.rows_uploaded
            ),
            _ => format!(
                "{} of {} rows not uploaded ({} failed requests{dropped}); saved to {dir}, upload later with {sync}",
                self.rows_saved.saturating_sub(self.rows_uploaded),
                self.rows_saved,
                self.failed_requests
            ),
        }
    }
}

struct Row {
    step: i64,
    runtime: f64,
    timestamp: f64,
    record: Record,
}

#[derive(Default)]
struct Pending {
    lines: VecDeque<String>,
    files: Vec<String>,
    summary: Option<String>,
    closed: bool,
    exit_code: i32,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    notify: Notify,
    closing: Notify,
    rows_logged: AtomicU64,
    rows_saved: AtomicU64,
    rows_uploaded: AtomicU64,
    rows_dropped: AtomicU64,
    failed_requests: AtomicU64,
    completed: AtomicBool,
    warned_queue: AtomicBool,
    warned_upload: AtomicBool,
    warned_local: AtomicBool,
    url: Mutex<Option<String>>,
}

impl Shared {
    fn once(flag: &AtomicBool) -> bool {
        !flag.swap(true, Ordering::Relaxed)
    }
}

/// A W&B run being logged to. See the [module docs](super) for the serve-mode recipe.
pub struct Logger {
    tx: Option<SyncSender<Row>>,
    recorder: Option<std::thread::JoinHandle<()>>,
    uploader: Option<tokio::task::JoinHandle<()>>,
    shared: Arc<Shared>,
    started: Instant,
    start_unix: f64,
    run_dir: PathBuf,
    mode: WandbMode,
    finish_timeout: Duration,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Logger {
    /// Starts a run: `Ok(None)` when `WANDB_MODE=disabled`. Online without `WANDB_API_KEY`
    /// falls back to offline with a warning. Must be called inside a tokio runtime.
    pub fn start(settings: &WandbSettings, spec: RunSpec) -> Result<Option<Logger>, WandbError> {
        let mut mode = settings.mode;
        if mode == WandbMode::Disabled {
            return Ok(None);
        }
        if mode == WandbMode::Online && settings.api_key.is_none() {
            warn!("wandb: WANDB_API_KEY is not set; logging offline (set WANDB_MODE=offline to silence this, or WANDB_MODE=disabled)");
            mode = WandbMode::Offline;
        }
        let meta = RunMeta {
            id: new_run_id(),
            display_name: spec.display_name,
            project: spec
                .project
                .or_else(|| settings.project.clone())
                .unwrap_or_else(|| "uncategorized".into()),
            entity: settings.entity.clone(),
            group: spec.group,
            mode: if mode == WandbMode::Online {
                "online"
            } else {
                "offline"
            }
            .into(),
        };
        let mut dir = RunDir::create(&settings.dir, &meta, &spec.config)?;
        let run_dir = dir.path().to_owned();
        let shared = Arc::new(Shared::default());
        let uploader = if mode == WandbMode::Online {
            let api = Api::new(settings)?;
            let app_url = settings.app_url();
            let mut up = Uploader::new(api, meta, spec.config, run_dir.clone());
            let shared = Arc::clone(&shared);
            Some(tokio::spawn(async move {
                upload_loop(&mut up, &shared, &app_url).await;
            }))
        } else {
            None
        };
        let (tx, rx) = sync_channel::<Row>(QUEUE_CAPACITY);
        let recorder_shared = Arc::clone(&shared);
        let online = mode == WandbMode::Online;
        let recorder = std::thread::Builder::new()
            .name("wandb-recorder".into())
            .spawn(move || record_loop(&mut dir, rx, &recorder_shared, online))
            .map_err(|e| WandbError::io(&run_dir, e))?;
        tracing::info!(
            "wandb: {} run {}{}",
            meta_mode(mode),
            run_dir.display(),
            if online {
                ""
            } else {
                " (upload later with `wandb sync`)"
            }
        );
        Ok(Some(Logger {
            tx: Some(tx),
            recorder: Some(recorder),
            uploader,
            shared,
            started: Instant::now(),
            start_unix: unix_now(),
            run_dir,
            mode,
            finish_timeout: settings.finish_timeout,
        }))
    }

    /// Logs `record` at `step` (the trainer step in serve, groups done in process). Never
    /// blocks: when the queue is full the row is dropped and counted.
    pub fn log(&self, step: i64, record: Record) {
        self.shared.rows_logged.fetch_add(1, Ordering::Relaxed);
        let row = Row {
            step,
            runtime: self.started.elapsed().as_secs_f64(),
            timestamp: self.start_unix + self.started.elapsed().as_secs_f64(),
            record,
        };
        let Some(tx) = &self.tx else { return };
        match tx.try_send(row) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.rows_dropped.fetch_add(1, Ordering::Relaxed);
                if Shared::once(&self.shared.warned_queue) {
                    warn!("wandb: logging queue is full; dropping rows (counted in the summary)");
                }
            }
        }
    }

    /// Flushes the run directory and, online, waits up to the finish timeout for the last
    /// uploads and the completion mark.
    pub async fn finish(mut self, exit_code: i32) -> LoggerReport {
        drop(self.tx.take());
        if let Some(recorder) = self.recorder.take() {
            let _ = tokio::task::spawn_blocking(move || recorder.join()).await;
        }
        let exit_path = self.run_dir.join(EXIT_FILE);
        if let Err(e) =
            tokio::fs::write(&exit_path, format!("{{\"exit_code\": {exit_code}}}\n")).await
        {
            warn!("wandb: cannot write {}: {e}", exit_path.display());
        }
        {
            let mut p = self.shared.pending.lock().expect("pending lock poisoned");
            p.closed = true;
            p.exit_code = exit_code;
        }
        self.shared.notify.notify_one();
        self.shared.closing.notify_one();
        if let Some(mut uploader) = self.uploader.take() {
            if tokio::time::timeout(self.finish_timeout, &mut uploader)
                .await
                .is_err()
            {
                uploader.abort();
                warn!(
                    "wandb: uploads did not finish within {:.0?}; the run directory has everything",
                    self.finish_timeout
                );
            }
        }
        let s = &self.shared;
        LoggerReport {
            mode: self.mode,
            run_dir: self.run_dir.clone(),
            url: s.url.lock().expect("url lock poisoned").clone(),
            rows_logged: s.rows_logged.load(Ordering::Relaxed),
            rows_saved: s.rows_saved.load(Ordering::Relaxed),
            rows_uploaded: s.rows_uploaded.load(Ordering::Relaxed),
            rows_dropped: s.rows_dropped.load(Ordering::Relaxed),
            failed_requests: s.failed_requests.load(Ordering::Relaxed),
            completed: s.completed.load(Ordering::Relaxed),
        }
    }
}

fn meta_mode(mode: WandbMode) -> &'static str {
    match mode {
        WandbMode::Online => "online",
        _ => "offline",
    }
}

fn record_loop(dir: &mut RunDir, rx: Receiver<Row>, shared: &Shared, online: bool) {
    for row in rx {
        match dir.write_row(row.step, row.runtime, row.timestamp, &row.record) {
            Ok(written) => {
                shared.rows_saved.fetch_add(1, Ordering::Relaxed);
                if online {
                    let mut p = shared.pending.lock().expect("pending lock poisoned");
                    p.lines.push_back(written.line);
                    p.files.extend(written.files);
                    p.summary = Some(written.summary);
                    if p.lines.len() > MAX_PENDING_LINES {
                        p.lines.pop_front();
                        shared.rows_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(p);
                    shared.notify.notify_one();
                }
            }
            Err(e) => {
                shared.rows_dropped.fetch_add(1, Ordering::Relaxed);
                if Shared::once(&shared.warned_local) {
                    warn!("wandb: cannot write the run directory: {e}");
                }
            }
        }
    }
}

/// One batch for [`Uploader::send`].
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// History lines, appended after those already sent.
    pub lines: Vec<String>,
    /// Run-relative media files to upload first.
    pub files: Vec<String>,
    /// The latest summary.
    pub summary: Option<String>,
}

/// Creates the run on first use and sends batches in order (shared by the live logger and
/// `wandb sync`, so both produce the same requests).
pub struct Uploader {
    api: Api,
    meta: RunMeta,
    config: Map<String, Value>,
    root: PathBuf,
    run: Option<RunRef>,
    sent_lines: usize,
}

impl Uploader {
    /// An uploader for the run in `root` (its `files/` hold the media).
    pub fn new(api: Api, meta: RunMeta, config: Map<String, Value>, root: PathBuf) -> Self {
        Uploader {
            api,
            meta,
            config,
            root,
            run: None,
            sent_lines: 0,
        }
    }

    /// Creates the run if needed; returns where it lives.
    pub async fn ensure_run(&mut self) -> Result<RunRef, WandbError> {
        if let Some(run) = &self.run {
            return Ok(run.clone());
        }
        let run = self.api.upsert_run(&self.meta, &self.config).await?;
        self.run = Some(run.clone());
        Ok(run)
    }

    /// Uploads the batch's files, then appends its lines and sets the summary.
    pub async fn send(&mut self, batch: &Batch) -> Result<(), WandbError> {
        let run = self.ensure_run().await?;
        for rel in &batch.files {
            let path = self.root.join("files").join(rel);
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|e| WandbError::io(&path, e))?;
            self.api.upload_file(&run, rel, bytes).await?;
        }
        let body = stream_body(
            self.sent_lines,
            &batch.lines,
            batch.summary.as_deref(),
            &batch.files,
        );
        self.api.stream(&run, &body).await?;
        self.sent_lines += batch.lines.len();
        Ok(())
    }

    /// Marks the run finished.
    pub async fn complete(&mut self, exit_code: i32) -> Result<(), WandbError> {
        let run = self.ensure_run().await?;
        self.api.stream(&run, &complete_body(exit_code)).await
    }
}

/// The run's page.
pub fn run_url(app_url: &str, run: &RunRef) -> String {
    format!("{app_url}/{}/{}/runs/{}", run.entity, run.project, run.name)
}

fn take_batch(shared: &Shared) -> (Batch, bool, i32) {
    let p = shared.pending.lock().expect("pending lock poisoned");
    let n = p.lines.len().min(LINES_PER_REQUEST);
    let batch = Batch {
        lines: p.lines.iter().take(n).cloned().collect(),
        files: p.files.clone(),
        summary: p.summary.clone(),
    };
    (batch, p.closed, p.exit_code)
}

fn acknowledge(shared: &Shared, batch: &Batch) {
    let mut p = shared.pending.lock().expect("pending lock poisoned");
    let n = batch.lines.len().min(p.lines.len());
    p.lines.drain(..n);
    let files = batch.files.len().min(p.files.len());
    p.files.drain(..files);
    if p.summary == batch.summary {
        p.summary = None;
    }
    shared
        .rows_uploaded
        .fetch_add(batch.lines.len() as u64, Ordering::Relaxed);
}

async fn upload_loop(up: &mut Uploader, shared: &Shared, app_url: &str) {
    let mut backoff = Duration::ZERO;
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        let (batch, closed, exit_code) = take_batch(shared);
        let has_work =
            !batch.lines.is_empty() || !batch.files.is_empty() || batch.summary.is_some();
        if !has_work && !closed {
            shared.notify.notified().await;
            continue;
        }
        if let Some(at) = retry_at.filter(|at| !closed && tokio::time::Instant::now() < *at) {
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = shared.closing.notified() => {}
            }
            continue;
        }
        let result = if has_work {
            up.send(&batch).await
        } else {
            up.complete(exit_code).await.map(|()| {
                shared.completed.store(true, Ordering::Relaxed);
            })
        };
        if let Some(run) = &up.run {
            let mut url = shared.url.lock().expect("url lock poisoned");
            if url.is_none() {
                *url = Some(run_url(app_url, run));
            }
        }
        match result {
            Ok(()) => {
                backoff = Duration::ZERO;
                retry_at = None;
                if has_work {
                    acknowledge(shared, &batch);
                } else {
                    return;
                }
            }
            Err(e) => {
                shared.failed_requests.fetch_add(1, Ordering::Relaxed);
                if Shared::once(&shared.warned_upload) {
                    warn!("wandb: upload failed: {e}; retrying in the background (further failures are only counted)");
                }
                if closed {
                    return;
                }
                backoff = (backoff * 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
                retry_at = Some(tokio::time::Instant::now() + backoff);
            }
        }
    }
}
