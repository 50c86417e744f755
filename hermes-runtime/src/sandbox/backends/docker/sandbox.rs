//! One task's container: commands through its persistent shell, one attached exec session
//! kept for the rollout (streamed, capped, under a deadline that kills the command's process
//! group inside the container; one exec per command when asked or when no shell can start), files through the archive
//! endpoints (through `tar` in an exec for paths on tmpfs mounts, which those endpoints cannot
//! see), removal through the container's guard.

use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::ExecConfig;
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, OnceCell};
use tokio::time::{sleep_until, Instant};
use tracing::{debug, warn};

use super::budget::Lane;
use super::storage::{say_falling_back, UpperDir};
use super::{ChangeSource, Container, Shared};
use crate::sandbox::api::{ExecOutput, ExecRequest, Sandbox, Transfer};
use crate::sandbox::change_scan::ChangeScan;
use crate::sandbox::error::SandboxError;
use crate::sandbox::exec::output::CappedOutput;
use crate::sandbox::exec::persistent::{
    frameable, run_in_shell, shell_argv, Outcome, PersistentShell, Piece, ShellHost, ShellLink,
};
use crate::sandbox::exec::shell::{nonce, wrapper_argv, OutputSync, ReportReader};
use crate::sandbox::files::archive::{
    fetch_following_links, pack, unpack, PackSource, TarStream, Unpack, Unpacked,
};
use crate::sandbox::files::bounded::READ_LIMIT;
use crate::sandbox::files::remote_path::{normalize, parent_of};
use crate::sandbox::integrity::inside::kill_leftovers_inside;
use crate::sandbox::integrity::tripwire::WIRE_TIMEOUT;
use crate::sandbox::queue::Slot;
use crate::sandbox::survival::{LeftoverKill, LeftoverRules};

/// When the shell reported its exit but its end marker is missing (the command closed the
/// stream), output is still read until the stream is quiet this long …
const DRAIN_QUIET: Duration = Duration::from_millis(200);
/// … or at most this long.
const DRAIN_MAX: Duration = Duration::from_millis(1000);
/// How long the agent's shell may take to kill its commands' groups at reset before an exec of
/// its own does it instead (a builtin `kill`: milliseconds unless the shell is held).
const KILL_IN_SHELL: Duration = Duration::from_secs(2);
/// Deadline of internal helper commands (kill, tar, stat).
const HELPER_TIMEOUT: Duration = Duration::from_secs(600);

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, SandboxError>> + Send>>;

/// What a helper command reads on stdin.
enum Feed {
    /// A tar stream, sent as the command starts.
    Tar(TarStream),
    /// A tar stream made from the first line the command prints, sent once it is printed.
    AfterLine(Box<dyn FnOnce(&str) -> TarStream + Send>),
}

/// What a helper command produced.
struct Collected {
    stdout: Vec<u8>,
    stderr: String,
    code: i32,
    /// What was sent on stdin.
    packed: Transfer,
}

/// A task's container.
pub struct DockerSandbox {
    task_id: String,
    container: Container,
    shared: Arc<Shared>,
    /// The working directory: the item's own, else the settings'.
    workdir: String,
    cwd: Mutex<String>,
    home: OnceCell<String>,
    /// The container's upper directory, when its changes can be read there.
    upper: OnceCell<Option<UpperDir>>,
    tmpfs: Vec<String>,
    /// The persistent shell, started by the first command (and again after it died).
    shell: tokio::sync::Mutex<Option<PersistentShell<DockerLink>>>,
    /// Set when a fresh shell could not start: commands then run one exec each.
    shell_unavailable: AtomicBool,
    /// Process groups of the commands the shell ran (killed by `reset_processes`).
    process_groups: Mutex<Vec<i32>>,
    /// Process groups of the declared survivors the leftover kill left running (everything
    /// else in them was killed with it): `reset_processes` passes over them.
    survivor_groups: Mutex<Vec<i32>>,
}

/// The attached exec session of a container's persistent shell.
pub(crate) struct DockerLink {
    docker: Docker,
    exec_id: String,
    input: Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    output: Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
}

impl std::fmt::Debug for DockerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerLink")
            .field("exec_id", &self.exec_id)
            .finish()
    }
}

#[async_trait]
impl ShellLink for DockerLink {
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.input.write_all(bytes).await?;
        self.input.flush().await
    }

    async fn recv(&mut self) -> Piece {
        loop {
            return match self.output.next().await {
                Some(Ok(LogOutput::StdOut { message })) => Piece::Report(message.to_vec()),
                Some(Ok(LogOutput::StdErr { message })) => Piece::Output(message.to_vec()),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => Piece::Closed,
            };
        }
    }

    async fn exit_code(&mut self) -> Option<i32> {
        for _ in 0..50 {
            let info = self.docker.inspect_exec(&self.exec_id).await.ok()?;
            if info.running != Some(true) {
                return info.exit_code.map(|c| c as i32);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    async fn close(&mut self) {
        let _ = self.input.shutdown().await;
    }
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("task_id", &self.task_id)
            .field("container", &self.container.guard.name())
            .field("image", &self.container.image)
            .finish()
    }
}

/// Maps an API error on the container itself.
fn container_error(name: &str, e: bollard::errors::Error) -> SandboxError {
    use bollard::errors::Error as E;
    let state = match &e {
        E::DockerResponseServerError {
            status_code: 404, ..
        } => "no longer exists",
        E::DockerResponseServerError {
            status_code: 409, ..
        } => "is not running",
        _ => return SandboxError::docker(format!("container {name}"), e),
    };
    SandboxError::ContainerGone {
        container: name.to_owned(),
        state,
        source: e,
    }
}

/// Maps an archive-endpoint error for `path`: a missing file is `NotFound`, a missing
/// container `Gone`.
fn archive_error(name: &str, path: &str, e: bollard::errors::Error) -> SandboxError {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ref message,
        } if !message.contains("No such container") => SandboxError::NotFound(path.to_owned()),
        other => container_error(name, other),
    }
}

impl DockerSandbox {
    pub(crate) fn new(task_id: &str, container: Container, shared: Arc<Shared>) -> Self {
        let workdir = container
            .workdir
            .clone()
            .unwrap_or_else(|| shared.settings.workdir.clone());
        DockerSandbox {
            task_id: task_id.to_owned(),
            cwd: Mutex::new(workdir.clone()),
            workdir,
            tmpfs: shared.settings.tmpfs_paths(),
            home: OnceCell::new(),
            upper: OnceCell::new(),
            shell: tokio::sync::Mutex::new(None),
            shell_unavailable: AtomicBool::new(false),
            process_groups: Mutex::new(Vec::new()),
            survivor_groups: Mutex::new(Vec::new()),
            container,
            shared,
        }
    }

    /// Asks, in the background, where the daemon keeps the container's changes, so the answer
    /// is ready by the tripwires' check instead of costing it a round trip. A failure here is
    /// met again, and reported, when the answer is needed.
    pub(crate) fn prepare(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            if let Some(me) = me.upgrade() {
                let _ = me.upper_dir().await;
            }
        });
    }

    /// The container's name (`hermes-<task>-<random>`, or `hermes-pool-…` when pre-started).
    pub fn container_name(&self) -> &str {
        self.container.guard.name()
    }

    /// The image the container runs.
    pub fn image(&self) -> &str {
        &self.container.image
    }

    fn docker(&self) -> &Docker {
        &self.shared.docker
    }

    fn name(&self) -> &str {
        self.container.guard.name()
    }

    /// The home directory of the command user (asked once; `/root` for root). Where the
    /// daemon's storage is readable here, the image's own `/etc/passwd` answers it (as for
    /// the tripwires' home scans) and no command runs.
    async fn home(&self) -> Result<&str, SandboxError> {
        self.home
            .get_or_try_init(|| async {
                if matches!(self.container.user.as_deref(), Some("root" | "0")) {
                    return Ok("/root".to_owned());
                }
                if let Some(upper) = self.upper_dir().await? {
                    return Ok(upper.home().to_string_lossy().into_owned());
                }
                let argv = vec!["sh".into(), "-c".into(), "printf %s \"$HOME\"".into()];
                let done = self.exec_collect(argv, None).await?;
                let home = String::from_utf8_lossy(&done.stdout).trim().to_owned();
                Ok(if done.code == 0 && home.starts_with('/') {
                    home
                } else {
                    "/".to_owned()
                })
            })
            .await
            .map(String::as_str)
    }

    /// The container's upper directory in the daemon's storage, when this process can read the
    /// container's changes there (else the first sandbox of the daemon says why). Asked once,
    /// from the sandbox's start on (see [`DockerSandbox::prepare`]).
    async fn upper_dir(&self) -> Result<Option<&UpperDir>, SandboxError> {
        if self.shared.settings.change_source == ChangeSource::Daemon {
            return Ok(None);
        }
        self.upper
            .get_or_try_init(|| probe_upper(self.docker(), self.name(), &self.shared))
            .await
            .map(Option::as_ref)
    }

    /// Resolves `~`, `~/x` and relative paths (against the working directory) to a normalised
    /// absolute path.
    async fn abs(&self, path: &str) -> Result<String, SandboxError> {
        let joined = if path == "~" {
            self.home().await?.to_owned()
        } else if let Some(rest) = path.strip_prefix("~/") {
            format!("{}/{rest}", self.home().await?)
        } else if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", self.workdir)
        };
        Ok(normalize(&joined))
    }

    /// Where the container has mounts of its own: the tmpfs and bind mounts and volumes of the
    /// settings, and the engine's (`/proc`, `/sys`, `/dev`, the files of `/etc` it writes).
    fn mount_points(&self) -> Vec<String> {
        let settings = &self.shared.settings;
        let binds = settings.mounts.iter().filter_map(|m| {
            let mut parts = m.split(':');
            let first = parts.next()?;
            Some(
                parts
                    .next()
                    .unwrap_or(first)
                    .trim_end_matches('/')
                    .to_owned(),
            )
        });
        [
            "/proc",
            "/sys",
            "/dev",
            "/etc/hosts",
            "/etc/hostname",
            "/etc/resolv.conf",
        ]
        .map(String::from)
        .into_iter()
        .chain(self.tmpfs.iter().cloned())
        .chain(binds)
        .collect()
    }

    fn on_tmpfs(&self, abs: &str) -> bool {
        self.tmpfs
            .iter()
            .any(|m| abs == m || abs.starts_with(&format!("{m}/")))
    }

    /// A slot in one of the daemon's request lanes (waits while the lane is full; nothing
    /// times out meanwhile).
    async fn slot(&self, lane: Lane) -> Result<Slot, SandboxError> {
        self.shared.lanes.slot(lane).await
    }

    /// Creates and starts an attached exec; the caller's `slot` in the exec lane covers both
    /// requests and is given back once the exec runs.
    async fn launch(
        &self,
        slot: Slot,
        argv: Vec<String>,
        stdin: bool,
        user: Option<&str>,
    ) -> Result<(String, StartExecResults), SandboxError> {
        let exec_id = self.create_exec_as(argv, stdin, user).await?;
        let started = self
            .docker()
            .start_exec(&exec_id, None)
            .await
            .map_err(|e| container_error(self.name(), e))?;
        drop(slot);
        Ok((exec_id, started))
    }

    /// Creates an exec as `user` (`None` = the settings' user); the caller holds a slot in
    /// the exec lane.
    async fn create_exec_as(
        &self,
        argv: Vec<String>,
        stdin: bool,
        user: Option<&str>,
    ) -> Result<String, SandboxError> {
        let config = ExecConfig {
            attach_stdin: Some(stdin),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv),
            user: user
                .map(str::to_owned)
                .or_else(|| self.container.user.clone()),
            ..Default::default()
        };
        let created = self
            .docker()
            .create_exec(self.name(), config)
            .await
            .map_err(|e| container_error(self.name(), e))?;
        Ok(created.id)
    }

    /// The exit code of a finished exec (waits briefly for the daemon to notice the exit).
    async fn exec_exit_code(&self, exec_id: &str) -> Result<i32, SandboxError> {
        for _ in 0..200 {
            let info = self
                .docker()
                .inspect_exec(exec_id)
                .await
                .map_err(|e| container_error(self.name(), e))?;
            if info.running != Some(true) {
                return Ok(info.exit_code.unwrap_or(-1) as i32);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(SandboxError::Io(
            "the command's exit code did not arrive".into(),
        ))
    }

    /// Runs a helper command, optionally feeding it a tar stream on stdin.
    async fn exec_collect(
        &self,
        argv: Vec<String>,
        stdin: Option<Feed>,
    ) -> Result<Collected, SandboxError> {
        self.exec_collect_as(argv, stdin, None).await
    }

    /// [`Self::exec_collect`] as `user` (`None` = the settings' user).
    async fn exec_collect_as(
        &self,
        argv: Vec<String>,
        stdin: Option<Feed>,
        user: Option<&str>,
    ) -> Result<Collected, SandboxError> {
        let slot = self.slot(Lane::Exec).await?;
        self.exec_collect_in(slot, argv, stdin, user).await
    }

    /// [`DockerSandbox::exec_collect_as`] with its slot in the exec lane already held.
    async fn exec_collect_in(
        &self,
        slot: Slot,
        argv: Vec<String>,
        stdin: Option<Feed>,
        user: Option<&str>,
    ) -> Result<Collected, SandboxError> {
        let (exec_id, started) = self.launch(slot, argv, stdin.is_some(), user).await?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(SandboxError::Io("exec did not attach".into()));
        };
        let (line_tx, line_rx) = oneshot::channel::<String>();
        let feed = async {
            let tar = match stdin {
                None => return Ok(None),
                Some(Feed::Tar(tar)) => tar,
                Some(Feed::AfterLine(make)) => match line_rx.await {
                    Ok(line) => make(&line),
                    // The command ended before its line: nothing to send.
                    Err(_) => {
                        let _ = input.shutdown().await;
                        return Ok(None);
                    }
                },
            };
            let (stream, done) = tar.into_parts();
            futures::pin_mut!(stream);
            let mut write_error = None;
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(chunk) => {
                        if let Err(e) = input.write_all(&chunk).await {
                            write_error = Some(e);
                            break;
                        }
                    }
                    Err(e) => {
                        write_error = Some(e);
                        break;
                    }
                }
            }
            let _ = input.shutdown().await;
            let packed = done
                .await
                .map_err(|e| SandboxError::worker("packing thread", e))??;
            match write_error {
                Some(e) => Err(SandboxError::host_io("sending the archive", e)),
                None => Ok(Some(packed)),
            }
        };
        let collect = async {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let mut line_tx = Some(line_tx);
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) => {
                        out.extend_from_slice(&message);
                        if line_tx.is_some() {
                            if let Some(end) = out.iter().position(|&b| b == b'\n') {
                                let line = String::from_utf8_lossy(&out[..end]).into_owned();
                                let _ = line_tx.take().map(|tx| tx.send(line));
                            }
                        }
                    }
                    Ok(LogOutput::StdErr { message }) => err.extend_from_slice(&message),
                    Ok(_) => {}
                    Err(e) => return Err(container_error(self.name(), e)),
                }
            }
            Ok((out, err))
        };
        let both = async { tokio::join!(feed, collect) };
        let (fed, collected) = tokio::time::timeout(HELPER_TIMEOUT, both)
            .await
            .map_err(|_| SandboxError::Io("helper command timed out".into()))?;
        let packed = fed?.unwrap_or_default();
        let (stdout, err) = collected?;
        let code = self.exec_exit_code(&exec_id).await?;
        Ok(Collected {
            stdout,
            stderr: String::from_utf8_lossy(&err).trim().to_owned(),
            code,
            packed,
        })
    }

    /// A tar stream of `abs` (its root entry named after the last path component).
    async fn get_tar(&self, abs: &str) -> Result<ByteStream, SandboxError> {
        if !self.on_tmpfs(abs) {
            // The slot is held by the stream: the download is in flight until it is read or
            // dropped.
            let slot = self.slot(Lane::Archive).await?;
            let options = DownloadFromContainerOptions {
                path: abs.to_owned(),
            };
            let (name, path) = (self.name().to_owned(), abs.to_owned());
            let stream = self
                .docker()
                .download_from_container(self.name(), Some(options))
                .map(move |item| {
                    let _in_flight = &slot;
                    item.map_err(|e| archive_error(&name, &path, e))
                });
            return Ok(Box::pin(stream));
        }
        let base = abs.rsplit('/').next().unwrap_or("").to_owned();
        // The shell reports its pid (then becomes tar), so an abandoned tar can be killed.
        let argv = vec![
            "sh".into(),
            "-c".into(),
            "echo \"$$\" >&2; exec tar -c -f - -C \"$1\" -- \"$2\"".into(),
            "hermes".into(),
            parent_of(abs),
            base,
        ];
        let slot = self.slot(Lane::Exec).await?;
        let (exec_id, started) = self.launch(slot, argv, false, None).await?;
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(SandboxError::Io("exec did not attach".into()));
        };
        let (tx, rx) = mpsc::channel::<Result<Bytes, SandboxError>>(8);
        let docker = self.docker().clone();
        let shared = Arc::clone(&self.shared);
        let (name, path) = (self.name().to_owned(), abs.to_owned());
        let user = self.container.user.clone();
        tokio::spawn(async move {
            let mut err = Vec::new();
            loop {
                // Once the reader gave up (an entry over the limit, its deadline, or it has
                // the one file it wanted), the tar is killed unless its stream ends on its
                // own: the daemon would otherwise keep draining its output.
                let item = tokio::select! {
                    item = output.next() => item,
                    () = tx.closed() => {
                        if !ends_soon(&mut output, &mut err).await {
                            kill_abandoned(&shared, &name, user, &err).await;
                        }
                        return;
                    }
                };
                let Some(item) = item else { break };
                match item {
                    Ok(LogOutput::StdOut { message }) => {
                        if tx.send(Ok(message)).await.is_err() {
                            if !ends_soon(&mut output, &mut err).await {
                                kill_abandoned(&shared, &name, user, &err).await;
                            }
                            return;
                        }
                    }
                    Ok(LogOutput::StdErr { message }) => err.extend_from_slice(&message),
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(container_error(&name, e))).await;
                        return;
                    }
                }
            }
            let code = match docker.inspect_exec(&exec_id).await {
                Ok(info) => info.exit_code.unwrap_or(0),
                Err(e) => {
                    let _ = tx.send(Err(container_error(&name, e))).await;
                    return;
                }
            };
            if code != 0 {
                let text = String::from_utf8_lossy(&err);
                // The first line is the pid the shell reported.
                let message = text
                    .split_once('\n')
                    .map_or("", |(_, m)| m)
                    .trim()
                    .to_owned();
                let error = if message.contains("No such file") {
                    SandboxError::NotFound(path)
                } else {
                    SandboxError::Io(format!("tar of {path} failed: {message}"))
                };
                let _ = tx.send(Err(error)).await;
            }
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })))
    }

    /// Extracts a tar stream (entry names relative to `/`) into the container; `abs` is the
    /// target path, which decides the route.
    async fn put_tar(&self, abs: &str, tar: TarStream) -> Result<Transfer, SandboxError> {
        if self.on_tmpfs(abs) {
            let argv = ["tar", "-x", "-f", "-", "-C", "/", "--no-overwrite-dir"]
                .map(String::from)
                .to_vec();
            let done = self.exec_collect(argv, Some(Feed::Tar(tar))).await?;
            if done.code != 0 {
                return Err(SandboxError::Io(format!(
                    "extracting into {abs} failed: {}",
                    done.stderr
                )));
            }
            return Ok(done.packed);
        }
        let slot = self.slot(Lane::Archive).await?;
        let (stream, done) = tar.into_parts();
        let options = UploadToContainerOptions {
            path: "/".into(),
            ..Default::default()
        };
        let uploaded = self
            .docker()
            .upload_to_container(self.name(), Some(options), bollard::body_try_stream(stream))
            .await;
        drop(slot);
        let packed = done
            .await
            .map_err(|e| SandboxError::worker("packing thread", e))?;
        let stats = packed?;
        uploaded.map_err(|e| archive_error(self.name(), abs, e))?;
        Ok(stats)
    }

    /// Writes `bytes` to `abs` on a tmpfs (out of the archive endpoint's sight) in one exec:
    /// the shell prints the file's mode (kept when it exists) and whether its directory is
    /// missing, then becomes the `tar` that extracts the entry packed with that mode.
    async fn write_on_tmpfs(&self, abs: String, bytes: &[u8]) -> Result<bool, SandboxError> {
        let script = "m=$(stat -c %a -- \"$1\" 2>/dev/null) || m=644; \
                      [ -d \"$(dirname -- \"$1\")\" ] && c=0 || c=1; \
                      printf '%s %s\\n' \"$m\" \"$c\"; \
                      exec tar -x -f - -C / --no-overwrite-dir";
        let argv = vec![
            "sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            abs.clone(),
        ];
        let (data, name) = (bytes.to_vec(), abs[1..].to_owned());
        let make = move |line: &str| {
            let (mode, _) = tmpfs_probe(line);
            pack(PackSource::Bytes { data, name, mode })
        };
        let done = self
            .exec_collect(argv, Some(Feed::AfterLine(Box::new(make))))
            .await?;
        if done.code != 0 {
            return Err(SandboxError::Io(format!(
                "extracting into {abs} failed: {}",
                done.stderr
            )));
        }
        let line = String::from_utf8_lossy(&done.stdout);
        Ok(tmpfs_probe(line.lines().next().unwrap_or_default()).1)
    }

    /// Downloads `abs` into `target`, following symbolic links for file targets.
    async fn fetch(&self, abs: String, target: Unpack) -> Result<Unpacked, SandboxError> {
        fetch_following_links(abs, target, |abs| async move { self.get_tar(&abs).await }).await
    }

    /// Mode bits of `abs` and whether it is a directory, via the archive endpoint (`None` when
    /// it does not exist).
    async fn stat(&self, abs: &str) -> Result<Option<(u32, bool)>, SandboxError> {
        let options = ContainerArchiveInfoOptions {
            path: abs.to_owned(),
        };
        let slot = self.slot(Lane::Archive).await?;
        let stat = self
            .docker()
            .get_container_archive_info(self.name(), Some(options))
            .await;
        drop(slot);
        match stat {
            Ok(stat) => Ok(Some((
                stat.file_mode & 0o7777,
                stat.file_mode & (1 << 31) != 0,
            ))),
            Err(e) => match archive_error(self.name(), abs, e) {
                SandboxError::NotFound(_) => Ok(None),
                other => Err(other),
            },
        }
    }

    /// Runs one command in an exec of its own (the one-shot path).
    async fn exec_one_shot_in(
        &self,
        cwd: String,
        request: ExecRequest,
    ) -> Result<ExecOutput, SandboxError> {
        // The command's timeout starts once its requests are sent: a wait for a slot in the
        // exec lane (a busy daemon) counts toward nothing.
        let slot = self.slot(Lane::Exec).await?;
        let deadline = Instant::now() + request.timeout;
        let nonce = nonce();
        let exec_id = self
            .create_exec_as(
                wrapper_argv(&cwd, &request.command, &nonce),
                false,
                request.user.as_deref(),
            )
            .await?;
        let started = tokio::time::timeout_at(deadline, self.docker().start_exec(&exec_id, None))
            .await
            .map_err(|_| SandboxError::Daemon("starting the command timed out".into()))?
            .map_err(|e| container_error(self.name(), e))?;
        drop(slot);
        let StartExecResults::Attached { mut output, .. } = started else {
            return Err(SandboxError::Io("exec did not attach".into()));
        };
        let mut capture = CappedOutput::new(request.output_limit);
        let mut sync = OutputSync::new(&nonce);
        let mut report = ReportReader::default();
        let mut drain_until: Option<Instant> = None;
        let mut timed_out = false;
        // Done at end of stream, or once the shell reported its exit and its end marker
        // arrived on the output stream (a daemon it started may hold the stream open).
        loop {
            if report.finished() {
                if sync.seen() {
                    break;
                }
                drain_until.get_or_insert_with(|| Instant::now() + DRAIN_MAX);
            }
            let wait_until = match drain_until {
                Some(until) => until.min(Instant::now() + DRAIN_QUIET),
                None => deadline,
            };
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(LogOutput::StdOut { message })) => {
                        sync.push(&message, |b| capture.push(b));
                    }
                    Some(Ok(LogOutput::StdErr { message })) => report.push(&message),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(container_error(self.name(), e)),
                    None => break,
                },
                _ = sleep_until(wait_until) => {
                    timed_out = drain_until.is_none();
                    break;
                }
            }
        }
        if !sync.seen() {
            sync.flush(|b| capture.push(b));
        }
        drop(output);
        if timed_out {
            if let Some(pgid) = report.report().pid {
                self.kill_group_as(pgid, request.user.as_deref()).await;
            }
            return Ok(ExecOutput::killed_by_deadline(capture, request.timeout));
        }
        let exit_code = match report.report().exit {
            Some((code, final_cwd)) => {
                if request.workdir.is_none() {
                    *self.cwd.lock().expect("lock poisoned") = final_cwd;
                }
                code
            }
            None => {
                // The shell did not exit through its trap (killed, or bash is missing).
                let code = self.exec_exit_code(&exec_id).await?;
                let stray = report.stray_text();
                if !stray.is_empty() {
                    capture.push(stray.as_bytes());
                }
                code
            }
        };
        Ok(ExecOutput::finished(capture, exit_code))
    }

    /// Runs one command in the persistent shell, or in an exec of its own where the shell
    /// cannot take it.
    async fn exec_in_shell(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        let cwd = self.command_cwd(&request).await?;
        let Ok(mut slot) = self.shell.try_lock() else {
            // Another command of this sandbox is running in the shell: run this one beside it.
            return self.exec_one_shot_in(cwd, request).await;
        };
        if !frameable(&cwd, &request.command) || self.shell_unavailable.load(Relaxed) {
            return self.exec_one_shot_in(cwd, request).await;
        }
        if let Some(out) = run_in_shell(self, &mut slot, &cwd, &request).await? {
            return Ok(out);
        }
        drop(slot);
        self.exec_one_shot_in(cwd, request).await
    }

    /// The working directory a request runs in.
    async fn command_cwd(&self, request: &ExecRequest) -> Result<String, SandboxError> {
        Ok(match request.workdir.as_deref() {
            Some(w) => self.abs(w).await?,
            None => self.cwd.lock().expect("lock poisoned").clone(),
        })
    }

    /// Starts the container's persistent shell: one exec with stdin attached, kept for the
    /// rollout.
    async fn start_shell(&self) -> Result<PersistentShell<DockerLink>, SandboxError> {
        let id = nonce();
        // Written three times per command: a tmpfs first (a write to `/tmp` on a
        // fuse-overlayfs image layer is several times slower), `/tmp` where it is not writable.
        let state = [
            format!("/dev/shm/.hermes-cwd-{id}"),
            format!("/tmp/.hermes-cwd-{id}"),
        ];
        let slot = self.slot(Lane::Exec).await?;
        let (exec_id, started) = self.launch(slot, shell_argv(&state), true, None).await?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(SandboxError::Io("exec did not attach".into()));
        };
        Ok(PersistentShell::new(DockerLink {
            docker: self.docker().clone(),
            exec_id,
            input,
            output,
        }))
    }

    async fn kill_group(&self, pgid: i32) {
        self.kill_group_as(pgid, None).await;
    }

    /// Kills process group `pgid` as `user` (the user it runs as: without `CAP_KILL` no other
    /// user may signal it).
    async fn kill_group_as(&self, pgid: i32, user: Option<&str>) {
        let argv = vec![
            "bash".into(),
            "-c".into(),
            "kill -KILL -- \"-$1\" 2>/dev/null; true".into(),
            "hermes".into(),
            pgid.to_string(),
        ];
        // The 10 s start once the kill is sent, not while it waits for a slot.
        let slot = match self.slot(Lane::Exec).await {
            Ok(slot) => slot,
            Err(e) => return warn!("cannot kill the timed-out command: {e}"),
        };
        let killed = tokio::time::timeout(
            Duration::from_secs(10),
            self.exec_collect_in(slot, argv, None, user),
        );
        match killed.await {
            Ok(Ok(_)) => debug!(pgid, "timed-out command's process group killed"),
            Ok(Err(e)) => warn!("cannot kill the timed-out command: {e}"),
            Err(_) => warn!("killing the timed-out command did not finish within 10 s"),
        }
    }
}

#[async_trait]
impl ShellHost for DockerSandbox {
    type Link = DockerLink;

    async fn fresh_shell(&self) -> Result<PersistentShell<DockerLink>, SandboxError> {
        self.start_shell().await
    }

    fn note_group(&self, pgid: i32, _started_after: u64) {
        self.process_groups
            .lock()
            .expect("lock poisoned")
            .push(pgid);
    }

    async fn kill_command_group(&self, pgid: i32) {
        self.kill_group(pgid).await;
    }

    fn keep_cwd(&self, cwd: String) {
        *self.cwd.lock().expect("lock poisoned") = cwd;
    }

    fn shell_cannot_start(&self, code: Option<i32>) {
        warn!(
            "the persistent shell in {} cannot start (exit {code:?}); running its commands one exec each",
            self.name()
        );
        self.shell_unavailable.store(true, Relaxed);
    }
}

/// Where the daemon keeps the container's changes, when this process can read them there.
async fn probe_upper(
    docker: &Docker,
    name: &str,
    shared: &Shared,
) -> Result<Option<UpperDir>, SandboxError> {
    let slot = shared.lanes.slot(Lane::Create).await?;
    let info = docker
        .inspect_container(name, None)
        .await
        .map_err(|e| container_error(name, e))?;
    drop(slot);
    let config = info.config.unwrap_or_default();
    // The container's own user (the item's, the run's or the image's).
    let user = config
        .user
        .filter(|u| !u.is_empty())
        .or_else(|| shared.settings.user.clone())
        .unwrap_or_default();
    let env = config.env.unwrap_or_default();
    Ok(
        match UpperDir::from_driver(info.graph_driver.as_ref(), &user, &env) {
            Ok(upper) => Some(upper),
            Err(why) => {
                say_falling_back(&shared.endpoint.host, &why);
                None
            }
        },
    )
}

/// The file's mode (644 when it is new) and whether its directory is missing, from the line
/// `write_on_tmpfs`'s shell prints.
fn tmpfs_probe(line: &str) -> (u32, bool) {
    let mut fields = line.split_whitespace();
    let mode = fields
        .next()
        .and_then(|m| u32::from_str_radix(m, 8).ok())
        .unwrap_or(0o644);
    (mode, fields.next() == Some("1"))
}

/// Whether an archive stream its reader left ends on its own within a few blocks and a
/// moment: the tar of a single file has written its entry and end blocks by the time the
/// reader has the file, and needs no exec to kill it.
async fn ends_soon<S>(output: &mut S, stderr: &mut Vec<u8>) -> bool
where
    S: Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
{
    /// A tar's end: two zero blocks, padded to its 10 KiB record, and a little more.
    const TAIL_BYTES: usize = 64 << 10;
    let mut left = TAIL_BYTES;
    let drained = async {
        while let Some(item) = output.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) => {
                    left = left.saturating_sub(message.len());
                    if left == 0 {
                        return false;
                    }
                }
                Ok(LogOutput::StdErr { message }) => stderr.extend_from_slice(&message),
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_MAX, drained)
        .await
        .unwrap_or(false)
}

/// Kills the `tar` of an abandoned archive stream, whose pid is the first line of its
/// stderr (best effort, bounded by 10 s).
async fn kill_abandoned(shared: &Shared, container: &str, user: Option<String>, stderr: &[u8]) {
    let docker = &shared.docker;
    let text = String::from_utf8_lossy(stderr);
    let Some(pid) = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
    else {
        return;
    };
    let config = ExecConfig {
        cmd: Some(vec!["kill".into(), "-KILL".into(), pid.to_string()]),
        user,
        ..Default::default()
    };
    let Ok(_slot) = shared.lanes.slot(Lane::Exec).await else {
        return;
    };
    let kill = async {
        let created = docker.create_exec(container, config).await?;
        let options = bollard::exec::StartExecOptions {
            detach: true,
            ..Default::default()
        };
        docker
            .start_exec(&created.id, Some(options))
            .await
            .map(|_| ())
    };
    match tokio::time::timeout(Duration::from_secs(10), kill).await {
        Ok(Ok(())) => debug!(pid, "abandoned tar killed"),
        Ok(Err(e)) => warn!("cannot kill the abandoned tar (pid {pid}) in {container}: {e}"),
        Err(_) => {
            warn!("killing the abandoned tar (pid {pid}) in {container} did not finish within 10 s")
        }
    }
}

#[async_trait]
impl Sandbox for DockerSandbox {
    fn task_id(&self) -> &str {
        &self.task_id
    }

    fn workdir(&self) -> &str {
        &self.workdir
    }

    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.shared.lanes.running(self.exec_in_shell(request)).await
    }

    async fn exec_one_shot(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        let run = async {
            let cwd = self.command_cwd(&request).await?;
            self.exec_one_shot_in(cwd, request).await
        };
        self.shared.lanes.running(run).await
    }

    async fn reset_processes(&self) -> Result<(), SandboxError> {
        let mut shell = self.shell.lock().await;
        let mut groups = std::mem::take(&mut *self.process_groups.lock().expect("lock poisoned"));
        let survivors = self.survivor_groups.lock().expect("lock poisoned").clone();
        groups.retain(|g| !survivors.contains(g));
        if !groups.is_empty() {
            // Process groups the shell reported; killing them ends the shell's `wait`, and the
            // shell exits at the end of its stdin, closed below. Through the shell itself when
            // it can take a command (milliseconds, where an exec of its own costs a create and
            // a start on the daemon); in an exec of its own when it cannot, or did not answer.
            let mut targets: Vec<String> = groups.iter().map(|g| format!("-{g}")).collect();
            // Groups the shell started meanwhile (something else queued in its stdin, say)
            // are killed by the exec too.
            let mut started = Vec::new();
            let in_shell = match shell.as_mut() {
                Some(live) if live.in_sync() => {
                    let command = format!("kill -KILL -- {} 2>/dev/null; true", targets.join(" "));
                    let request = ExecRequest::new(command, KILL_IN_SHELL).with_workdir("/");
                    let deadline = Instant::now() + KILL_IN_SHELL;
                    let outcome = live
                        .run("/", &request, deadline, |pgid, _| started.push(pgid))
                        .await;
                    matches!(outcome, Outcome::Done { code: 0, .. })
                }
                _ => false,
            };
            targets.extend(started.iter().map(|g| format!("-{g}")));
            if !in_shell {
                let mut argv: Vec<String> = [
                    "bash",
                    "-c",
                    "kill -KILL -- \"$@\" 2>/dev/null; true",
                    "hermes",
                ]
                .map(String::from)
                .to_vec();
                argv.extend(targets);
                self.exec_collect(argv, None).await?;
            }
        }
        if let Some(shell) = shell.take() {
            shell.close().await;
        }
        Ok(())
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let abs = self.abs(path).await?;
        match self
            .fetch(abs, Unpack::Memory { limit: READ_LIMIT })
            .await?
        {
            Unpacked::Bytes(bytes) => Ok(bytes),
            _ => Err(SandboxError::Io(format!("{path}: unexpected archive"))),
        }
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        let abs = self.abs(path).await?;
        if abs == "/" {
            return Err(SandboxError::IsDirectory(path.to_owned()));
        }
        if self.on_tmpfs(&abs) {
            return self.write_on_tmpfs(abs, bytes).await;
        }
        let (mode, dirs_created) = match self.stat(&abs).await? {
            Some((_, true)) => return Err(SandboxError::IsDirectory(path.to_owned())),
            Some((mode, false)) => (mode, false),
            None => (0o644, self.stat(&parent_of(&abs)).await?.is_none()),
        };
        let tar = pack(PackSource::Bytes {
            data: bytes.to_vec(),
            name: abs[1..].to_owned(),
            mode,
        });
        self.put_tar(&abs, tar).await?;
        Ok(dirs_created)
    }

    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote).await?;
        let tar = pack(PackSource::File {
            local: local.to_path_buf(),
            name: abs[1..].to_owned(),
        });
        self.put_tar(&abs, tar).await
    }

    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote).await?;
        if abs == "/" {
            return Err(SandboxError::Path(
                "cannot upload a directory onto /".into(),
            ));
        }
        let tar = pack(PackSource::Dir {
            local: local.to_path_buf(),
            prefix: abs[1..].to_owned(),
        });
        self.put_tar(&abs, tar).await
    }

    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote).await?;
        match self.fetch(abs, Unpack::File(local.to_path_buf())).await? {
            Unpacked::Written(stats) => Ok(stats),
            _ => Err(SandboxError::Io(format!("{remote}: unexpected archive"))),
        }
    }

    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote).await?;
        let stream = self.get_tar(&abs).await?;
        match unpack(stream, Unpack::Dir(local.to_path_buf()), abs).await? {
            Unpacked::Written(stats) => Ok(stats),
            _ => Err(SandboxError::Path(format!("{remote} is not a directory"))),
        }
    }

    async fn kill_leftover_processes(
        &self,
        rules: &LeftoverRules,
    ) -> Result<LeftoverKill, SandboxError> {
        // Inside a container everything but init and the entrypoint is the agent's.
        let (kill, groups) = kill_leftovers_inside(self, rules).await?;
        *self.survivor_groups.lock().expect("lock poisoned") = groups;
        Ok(kill)
    }

    async fn changed_paths(&self, roots: &[String]) -> Result<Option<Vec<String>>, SandboxError> {
        if let Some(upper) = self.upper_dir().await? {
            let (upper, roots) = (upper.clone(), roots.to_vec());
            let read = tokio::task::spawn_blocking(move || upper.changes(&roots, WIRE_TIMEOUT));
            return match read.await {
                Ok(found) => found.map(Some),
                Err(e) => Err(SandboxError::worker(
                    "the read of the container's changes",
                    e,
                )),
            };
        }
        let slot = self.slot(Lane::Changes).await?;
        let changes = self
            .docker()
            .container_changes(self.name())
            .await
            .map_err(|e| container_error(self.name(), e))?;
        drop(slot);
        Ok(Some(
            changes
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.path)
                .collect(),
        ))
    }

    async fn scan_changes(
        &self,
        scans: &[ChangeScan],
    ) -> Result<Option<Vec<Vec<String>>>, SandboxError> {
        let Some(upper) = self.upper_dir().await? else {
            return Ok(None);
        };
        let home = upper.home().to_path_buf();
        // A root on another mount (tmpfs, bind, volume) is not in the upper directory; `find
        // -xdev` in the container does not enter mounts below a root, nor does this walk.
        let mounts = self.mount_points();
        let elsewhere = scans
            .iter()
            .flat_map(|s| s.resolved_roots(&home))
            .any(|root| {
                mounts
                    .iter()
                    .any(|m| root == *m || root.starts_with(&format!("{m}/")))
            });
        if elsewhere {
            return Ok(None);
        }
        let (upper, scans) = (upper.clone(), scans.to_vec());
        let read = tokio::task::spawn_blocking(move || upper.scan(&scans, WIRE_TIMEOUT));
        match read.await {
            Ok(found) => found,
            Err(e) => Err(SandboxError::worker("the tripwire scans", e)),
        }
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        *self.shell.lock().await = None;
        // In the lifecycle lane: a burst of teardowns waits here, not in the daemon, and the
        // removal's timeout starts once it is sent (a dropped guard still removes it).
        let _slot = self.slot(Lane::Create).await?;
        self.container.guard.remove(self.docker()).await
    }
}
