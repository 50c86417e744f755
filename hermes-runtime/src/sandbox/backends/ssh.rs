//! The ssh backend (upstream's `terminal_backend: ssh`): every rollout gets a scratch
//! directory on a remote host (its `$HOME` and start directory), and its commands run there
//! through the system `ssh` client, multiplexed over one ControlMaster connection per run.
//! Commands start from a cleared environment in their own session (`setsid`), so a timeout
//! kills the remote process group; files move as tar streams over ssh; teardown kills what the
//! rollout started and removes its directory. Settings come from upstream's variables
//! `TERMINAL_SSH_HOST`, `TERMINAL_SSH_USER`, `TERMINAL_SSH_PORT` and `TERMINAL_SSH_KEY`
//! (plus `TERMINAL_SSH_CONFIG`, an ssh config file passed as `-F`). The remote account is the
//! isolation boundary: use a dedicated one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::{sleep_until, Instant};
use tracing::warn;

use crate::sandbox::api::{
    prepare_in, ExecOutput, ExecRequest, Prepared, Sandbox, SandboxProvider, SandboxSpec, Transfer,
};
use crate::sandbox::error::SandboxError;
use crate::sandbox::exec::output::CappedOutput;
use crate::sandbox::exec::shell::{nonce, wrapper_argv, OutputSync, ReportReader};
use crate::sandbox::files::archive::{
    fetch_following_links, pack, unpack, PackSource, Unpack, Unpacked, ARCHIVE_DEADLINE,
};
use crate::sandbox::files::bounded::READ_LIMIT;
use crate::sandbox::files::remote_path::{normalize, parent_of};
use crate::sandbox::queue::{Queue, RUN_KNOB};

/// `PATH` of remote commands.
const REMOTE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Upper bound on reading after the command's exit when its end marker is missing.
const DRAIN_MAX: Duration = Duration::from_millis(500);

/// How long a command that timed out before its wrapper reported its process group (a slow
/// connection: the deadline came first) is given to report it, so that the group is killed.
const PID_GRACE: Duration = Duration::from_secs(10);

/// Limit of the short helper calls (mkdir, kill, rm, stat).
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

/// Kills the process groups given after the directory and removes the directory (only a
/// scratch directory this backend made). A group id is a pid number the host hands out again
/// once the group is empty: a group whose leader pid now belongs to a process without the
/// sandbox's `HOME` (which every command's wrapper is started with) is a stranger's and is
/// left alone; a group whose leader is gone is still held by its members.
const TEARDOWN: &str = "d=$1; shift
for g; do
  l=${g#-}
  if [ -e /proc/$l ]; then
    tr '\\0' '\\n' </proc/$l/environ 2>/dev/null | grep -qxF \"HOME=$d\" || continue
  fi
  kill -9 \"$g\" 2>/dev/null
done
case \"$d\" in */hermes-env-task-*) rm -rf -- \"$d\" ;; esac";

/// Where and as whom the ssh backend runs commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshSettings {
    /// `TERMINAL_SSH_HOST`: host name or address.
    pub host: String,
    /// `TERMINAL_SSH_USER`: remote user (`None` = ssh's default).
    pub user: Option<String>,
    /// `TERMINAL_SSH_PORT`: port (default 22).
    pub port: u16,
    /// `TERMINAL_SSH_KEY`: identity file (`None` = ssh's defaults and agent).
    pub key: Option<PathBuf>,
    /// `TERMINAL_SSH_CONFIG`: an ssh config file (`-F`), e.g. for `UserKnownHostsFile`.
    pub config: Option<PathBuf>,
}

impl SshSettings {
    /// Reads the settings through `lookup` (an environment-variable getter).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SandboxError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let host = get("TERMINAL_SSH_HOST").ok_or_else(|| {
            SandboxError::Create(
                "terminal_backend ssh needs TERMINAL_SSH_HOST (and usually TERMINAL_SSH_USER, TERMINAL_SSH_KEY, TERMINAL_SSH_PORT)".into(),
            )
        })?;
        let port = match get("TERMINAL_SSH_PORT") {
            None => 22,
            Some(p) => p.trim().parse().map_err(|_| {
                SandboxError::Create(format!("TERMINAL_SSH_PORT '{p}' is not a port number"))
            })?,
        };
        Ok(SshSettings {
            host,
            user: get("TERMINAL_SSH_USER"),
            port,
            key: get("TERMINAL_SSH_KEY").map(PathBuf::from),
            config: get("TERMINAL_SSH_CONFIG").map(PathBuf::from),
        })
    }

    /// `user@host:port`, for messages.
    fn describe(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}:{}", self.host, self.port),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Quotes `s` as one word for the remote POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The ssh client of one run: its settings and the ControlMaster socket directory.
#[derive(Debug)]
struct Client {
    settings: SshSettings,
    control_dir: PathBuf,
}

impl Client {
    /// An ssh command running `words` (quoted for the remote shell) on the host.
    fn command(&self, words: &[&str]) -> Command {
        let mut command = Command::new("ssh");
        command
            .args(self.options())
            .arg("--")
            .arg(Self::remote_line(words));
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// The remote command line of `words`, each quoted for the remote shell.
    fn remote_line(words: &[&str]) -> String {
        words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
    }

    fn options(&self) -> Vec<String> {
        let s = &self.settings;
        let mut args: Vec<String> = Vec::new();
        if let Some(config) = &s.config {
            args.extend(["-F".into(), config.display().to_string()]);
        }
        for option in [
            "BatchMode=yes",
            "StrictHostKeyChecking=accept-new",
            "ControlMaster=auto",
            "ControlPersist=300",
            "ServerAliveInterval=15",
            "ConnectTimeout=20",
            "LogLevel=ERROR",
        ] {
            args.extend(["-o".into(), option.into()]);
        }
        args.extend([
            "-o".into(),
            format!("ControlPath={}/%C", self.control_dir.display()),
            "-p".into(),
            s.port.to_string(),
        ]);
        if let Some(key) = &s.key {
            args.extend([
                "-i".into(),
                key.display().to_string(),
                "-o".into(),
                "IdentitiesOnly=yes".into(),
            ]);
        }
        if let Some(user) = &s.user {
            args.extend(["-l".into(), user.clone()]);
        }
        args.push(s.host.clone());
        args
    }

    /// Runs a short `sh -c script` with `args`, feeding `stdin`; returns (code, stdout, stderr).
    async fn helper(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<(i32, Vec<u8>, String), SandboxError> {
        let mut words = vec!["sh", "-c", script, "hermes"];
        words.extend_from_slice(args);
        let mut command = self.command(&words);
        if stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = self.spawn(command)?;
        if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(data)
                .await
                .map_err(|e| SandboxError::host_io("ssh stdin", e))?;
        }
        let out = tokio::time::timeout(HELPER_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| self.gone(format!("no answer within {} s", HELPER_TIMEOUT.as_secs())))?
            .map_err(|e| SandboxError::host_io("ssh", e))?;
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if code == 255 {
            return Err(self.gone(stderr));
        }
        Ok((code, out.stdout, stderr))
    }

    fn spawn(&self, mut command: Command) -> Result<Child, SandboxError> {
        command.spawn().map_err(|e| SandboxError::CreateIo {
            doing: "cannot run the ssh client".to_owned(),
            source: e,
        })
    }

    /// The error for a connection failure (ssh's exit code 255).
    fn gone(&self, why: String) -> SandboxError {
        SandboxError::Gone(format!("ssh to {}: {why}", self.settings.describe()))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Stop the ControlMaster (best effort), then remove its socket directory.
        let mut args = self.options();
        let host = args.pop().unwrap_or_default();
        let _ = std::process::Command::new("ssh")
            .args(args)
            .args(["-O", "exit", &host])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.control_dir);
    }
}

/// Creates one remote scratch directory per task.
#[derive(Debug, Clone)]
pub struct SshProvider {
    client: Arc<Client>,
    env: Vec<String>,
    /// The host's CPUs (`nproc` there).
    cpus: usize,
    /// The commands running in the host's sandboxes at once.
    commands: Arc<Queue>,
}

impl SshProvider {
    /// Opens the run's master connection (checking that the host answers) and keeps
    /// `container_env` (`KEY=VALUE`) for every command.
    pub async fn connect(settings: SshSettings, env: Vec<String>) -> Result<Self, SandboxError> {
        let control_dir = std::env::temp_dir().join(format!("hermes-ssh-{}", short_id()));
        std::fs::create_dir_all(&control_dir).map_err(|e| SandboxError::CreateIo {
            doing: format!("creating {}", control_dir.display()),
            source: e,
        })?;
        let client = Arc::new(Client {
            settings,
            control_dir,
        });
        let (code, out, stderr) = client
            .helper("command -v bash >/dev/null && command -v tar >/dev/null && command -v setsid >/dev/null && { nproc 2>/dev/null || true; }", &[], None)
            .await
            .map_err(|e| SandboxError::CreateStep {
                source: Box::new(e),
            })?;
        if code != 0 {
            return Err(SandboxError::Create(format!(
                "ssh host {} lacks bash, tar or setsid {stderr}",
                client.settings.describe()
            )));
        }
        let cpus = match String::from_utf8_lossy(&out).trim().parse::<usize>() {
            Ok(n) => n.max(1),
            Err(_) => {
                warn!(
                    "ssh host {} did not say how many CPUs it has (nproc); its commands are \
                     counted as on one CPU ({RUN_KNOB} sets how many run at once)",
                    client.settings.describe()
                );
                1
            }
        };
        let commands = Arc::new(commands_queue(&client, cpus, 0));
        Ok(SshProvider {
            client,
            env,
            cpus,
            commands,
        })
    }

    /// Bounds the commands running in the host's sandboxes at once (0 =
    /// [`RUN_PER_CPU`](crate::sandbox::queue::RUN_PER_CPU) per CPU of the host).
    pub fn with_command_concurrency(mut self, at_once: usize) -> Self {
        self.commands = Arc::new(commands_queue(&self.client, self.cpus, at_once));
        self
    }
}

/// The queue of the commands running in the host's sandboxes.
fn commands_queue(client: &Client, cpus: usize, at_once: usize) -> Queue {
    let place = format!("ssh host {}", client.settings.describe());
    Queue::commands(place, at_once, cpus)
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

#[async_trait]
impl SandboxProvider for SshProvider {
    async fn create(
        &self,
        task_id: &str,
        _spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        Ok(Arc::new(self.open(task_id, None).await?))
    }

    async fn prepare(
        &self,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Prepared>>, SandboxError> {
        let template = self.open(&format!("prepared-{group}"), None).await?;
        if let Err(e) = prepare_in(&template, spec).await {
            let _ = template.teardown().await;
            return Err(e);
        }
        Ok(Some(Arc::new(SshPrepared {
            provider: self.clone(),
            template,
        })))
    }
}

/// Makes a scratch directory on the host: empty, or a copy of `from` (`cp -a`, on the host).
const NEW_DIR: &str = r#"d=$(mktemp -d "${TMPDIR:-/tmp}/hermes-env-task-XXXXXXXX") || exit 1
if [ -n "$1" ]; then cp -a "$1/." "$d/" || { rm -rf "$d"; exit 1; }; fi
echo "$d""#;

impl SshProvider {
    /// A sandbox for `task_id` in a new scratch directory on the host (a copy of the
    /// directory `from`, when given).
    async fn open(&self, task_id: &str, from: Option<&str>) -> Result<SshSandbox, SandboxError> {
        let (code, out, stderr) = self
            .client
            .helper(NEW_DIR, &[from.unwrap_or_default()], None)
            .await
            .map_err(|e| SandboxError::CreateStep {
                source: Box::new(e),
            })?;
        let dir = String::from_utf8_lossy(&out).trim().to_owned();
        if code != 0 || !dir.starts_with('/') {
            return Err(SandboxError::Create(format!(
                "cannot create a scratch directory on {}: {stderr}",
                self.client.settings.describe()
            )));
        }
        Ok(SshSandbox {
            task_id: task_id.to_owned(),
            cwd: Mutex::new(dir.clone()),
            dir,
            process_groups: Mutex::new(Vec::new()),
            env: self.env.clone(),
            client: Arc::clone(&self.client),
            commands: Arc::clone(&self.commands),
            torn_down: AtomicBool::new(false),
        })
    }
}

/// A group's prepared directory on the host; each rollout's is a copy of it made there. Its
/// processes run until the group is done (the host is shared: only the groups its commands
/// started are killed, at removal).
struct SshPrepared {
    provider: SshProvider,
    template: SshSandbox,
}

#[async_trait]
impl Prepared for SshPrepared {
    async fn fork(
        &self,
        task_id: &str,
        _spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let copy = self
            .provider
            .open(task_id, Some(&self.template.dir))
            .await?;
        Ok(Arc::new(copy))
    }

    async fn remove(&self) -> Result<(), SandboxError> {
        if self.template.torn_down.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.template.teardown().await
    }
}

/// One task's remote scratch directory, its shell's working directory and the remote process
/// groups its commands started.
#[derive(Debug)]
pub struct SshSandbox {
    task_id: String,
    dir: String,
    cwd: Mutex<String>,
    process_groups: Mutex<Vec<i32>>,
    env: Vec<String>,
    client: Arc<Client>,
    /// The provider's queue of running commands.
    commands: Arc<Queue>,
    torn_down: AtomicBool,
}

impl SshSandbox {
    /// Resolves `~`, `~/x` and relative paths against the scratch directory.
    fn abs(&self, path: &str) -> String {
        let joined = if path == "~" {
            self.dir.clone()
        } else if let Some(rest) = path.strip_prefix("~/") {
            format!("{}/{rest}", self.dir)
        } else if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", self.dir)
        };
        normalize(&joined)
    }

    /// The remote argv of a command: a cleared environment, a new session, the wrapper.
    fn exec_words(&self, cwd: &str, command: &str, nonce: &str) -> Vec<String> {
        let mut words: Vec<String> = vec![
            "env".into(),
            "-i".into(),
            format!("PATH={REMOTE_PATH}"),
            format!("HOME={}", self.dir),
            "LANG=C.UTF-8".into(),
        ];
        words.extend(self.env.iter().cloned());
        words.extend(["setsid".into(), "-w".into()]);
        words.extend(wrapper_argv(cwd, command, nonce));
        words
    }

    async fn kill_group(&self, pgid: i32) {
        let _ = self
            .client
            .helper(
                "kill -9 \"-$1\" 2>/dev/null; true",
                &[&pgid.to_string()],
                None,
            )
            .await;
    }

    /// Runs `tar -x` at `/` on the host with `tar` on its stdin.
    async fn put_tar(&self, abs: &str, source: PackSource) -> Result<Transfer, SandboxError> {
        let mut command = self.client.command(&[
            "tar",
            "-x",
            "-p",
            "--no-same-owner",
            "--no-overwrite-dir",
            "-f",
            "-",
            "-C",
            "/",
        ]);
        command.stdin(Stdio::piped());
        let mut child = self.client.spawn(command)?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let (chunks, done) = pack(source).into_parts();
        let mut chunks = std::pin::pin!(chunks);
        let mut write_error = None;
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(bytes) => {
                    if let Err(e) = stdin.write_all(&bytes).await {
                        write_error = Some(e);
                        break;
                    }
                }
                Err(_) => break, // packing failed; `done` says why
            }
        }
        drop(stdin);
        let packed = done
            .await
            .map_err(|e| SandboxError::worker("packing thread", e))??;
        let out = tokio::time::timeout(ARCHIVE_DEADLINE, child.wait_with_output())
            .await
            .map_err(|_| SandboxError::Io(format!("{abs}: the upload did not finish in time")))?
            .map_err(|e| SandboxError::host_io("ssh", e))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        match out.status.code() {
            Some(0) if write_error.is_none() => Ok(packed),
            Some(255) => Err(self.client.gone(stderr)),
            _ => Err(SandboxError::Io(format!(
                "extracting into {abs} failed: {stderr}"
            ))),
        }
    }

    /// The tar stream of `abs` (the entry named after its last component).
    fn get_tar(
        &self,
        abs: &str,
    ) -> Result<impl futures::Stream<Item = Result<Bytes, SandboxError>> + Send + Unpin, SandboxError>
    {
        let base = abs.rsplit('/').next().unwrap_or("").to_owned();
        let parent = parent_of(abs);
        let script = "if [ ! -e \"$1/$2\" ] && [ ! -L \"$1/$2\" ]; then echo 'hermes: not found' >&2; exit 44; fi; exec tar -c -f - -C \"$1\" -- \"$2\"";
        let command = self
            .client
            .command(&["sh", "-c", script, "hermes", &parent, &base]);
        let mut child = self.client.spawn(command)?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let shown = abs.to_owned();
        let state = (Some(stdout), child, stderr, shown);
        Ok(Box::pin(futures::stream::unfold(
            state,
            |(out, mut child, mut err, shown)| async move {
                let mut out = out?;
                let mut buf = vec![0u8; 256 * 1024];
                match out.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        let status = child.wait().await.ok().and_then(|s| s.code());
                        let mut text = String::new();
                        let _ = err.read_to_string(&mut text).await;
                        let failure = match status {
                            Some(0) => None,
                            Some(44) => Some(SandboxError::NotFound(shown.clone())),
                            Some(255) => Some(SandboxError::Gone(format!("ssh: {}", text.trim()))),
                            _ => Some(SandboxError::Io(format!("{shown}: {}", text.trim()))),
                        };
                        failure.map(|e| (Err(e), (None, child, err, shown)))
                    }
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(Bytes::from(buf)), (Some(out), child, err, shown)))
                    }
                }
            },
        )))
    }

    /// Downloads `abs` as `target` says, following symbolic links to files.
    async fn fetch(&self, abs: String, target: Unpack) -> Result<Unpacked, SandboxError> {
        fetch_following_links(abs, target, |abs| std::future::ready(self.get_tar(&abs))).await
    }

    /// Runs the command's ssh session to completion or its deadline.
    async fn run(&self, request: &ExecRequest, cwd: &str) -> Result<ExecOutput, SandboxError> {
        let nonce = nonce();
        let words = self.exec_words(cwd, &request.command, &nonce);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut child = self.client.spawn(self.client.command(&words))?;
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let mut capture = CappedOutput::new(request.output_limit);
        let mut sync = OutputSync::new(&nonce);
        let mut report = ReportReader::default();
        let deadline = Instant::now() + request.timeout;
        let (mut out_buf, mut rep_buf) = (vec![0u8; 16 * 1024], vec![0u8; 1024]);
        let (mut out_eof, mut rep_eof) = (false, false);
        let (mut status, mut drain_until, mut recorded) = (None, None, false);
        let timed_out = loop {
            if !recorded {
                if let Some(pid) = report.report().pid {
                    self.process_groups.lock().expect("lock poisoned").push(pid);
                    recorded = true;
                }
            }
            let out_done = out_eof || sync.seen();
            let rep_done = rep_eof || report.finished();
            // The wrapper's exit record is as good as ssh's exit: a daemon the command left
            // holding the session's streams keeps ssh itself running until teardown.
            let exited = status.is_some() || report.report().exit.is_some();
            if out_done && rep_done && exited {
                break false;
            }
            let until = if exited {
                *drain_until.get_or_insert_with(|| Instant::now() + DRAIN_MAX)
            } else {
                deadline
            };
            tokio::select! {
                read = stdout.read(&mut out_buf), if !out_done => match read {
                    Ok(0) | Err(_) => out_eof = true,
                    Ok(n) => sync.push(&out_buf[..n], |b| capture.push(b)),
                },
                read = stderr.read(&mut rep_buf), if !rep_done => match read {
                    Ok(0) | Err(_) => rep_eof = true,
                    Ok(n) => report.push(&rep_buf[..n]),
                },
                exit = child.wait(), if status.is_none() => status = Some(exit),
                _ = sleep_until(until) => break status.is_none(),
            }
        };
        if !sync.seen() {
            sync.flush(|b| capture.push(b));
        }
        if timed_out {
            if !rep_eof && report.report().pid.is_none() {
                await_pid(&mut stderr, &mut report).await;
            }
            match report.report().pid {
                Some(pid) => self.kill_group(pid).await,
                None => warn!(
                    "ssh sandbox: a command timed out before its remote wrapper reported its \
                     process group within {PID_GRACE:?}; it may still run on the host until \
                     teardown"
                ),
            }
            let _ = child.kill().await;
            return Ok(ExecOutput::killed_by_deadline(capture, request.timeout));
        }
        if status.is_none() {
            // The session stays open for a daemon; this end of it is not needed any more (the
            // daemon's process group is killed at teardown).
            let _ = child.kill().await;
        }
        let outcome = report.report();
        let code = match status {
            Some(Ok(s)) => s.code().unwrap_or(-1),
            Some(Err(e)) => return Err(SandboxError::host_io("waiting for ssh", e)),
            None => -1,
        };
        let Some((exit_code, final_cwd)) = outcome.exit else {
            // No report: ssh itself failed (255) or the remote side could not start the wrapper.
            let why = report.stray_text();
            return Err(if code == 255 {
                self.client.gone(why)
            } else {
                SandboxError::Io(format!("remote command did not start (exit {code}): {why}"))
            });
        };
        if request.workdir.is_none() {
            *self.cwd.lock().expect("lock poisoned") = final_cwd;
        }
        Ok(ExecOutput::finished(capture, exit_code))
    }
}

/// Reads the report channel until it names the command's process group, ends, or
/// [`PID_GRACE`] passes.
async fn await_pid(stderr: &mut tokio::process::ChildStderr, report: &mut ReportReader) {
    let mut buf = vec![0u8; 1024];
    let read_until_pid = async {
        while report.report().pid.is_none() {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => report.push(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(PID_GRACE, read_until_pid).await;
}

#[async_trait]
impl Sandbox for SshSandbox {
    fn task_id(&self) -> &str {
        &self.task_id
    }

    fn workdir(&self) -> &str {
        &self.dir
    }

    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        crate::sandbox::api::refuse_user(&request, "ssh")?;
        let cwd = match request.workdir.as_deref() {
            Some(w) => self.abs(w),
            None => self.cwd.lock().expect("lock poisoned").clone(),
        };
        self.commands.running(self.run(&request, &cwd)).await
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        match self
            .fetch(self.abs(path), Unpack::Memory { limit: READ_LIMIT })
            .await?
        {
            Unpacked::Bytes(bytes) => Ok(bytes),
            _ => Err(SandboxError::Io(format!("{path}: unexpected archive"))),
        }
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        let abs = self.abs(path);
        // Exit 30/31: written, parents existed / were created.
        let script = "p=$1; d=$(dirname -- \"$p\"); c=0
[ -d \"$p\" ] && { echo \"is a directory: $p\" >&2; exit 21; }
[ -d \"$d\" ] || { mkdir -p -- \"$d\" || exit 1; c=1; }
t=\"$d/.hermes-tmp-$$\"; cat > \"$t\" || { rm -f -- \"$t\"; exit 1; }
[ -e \"$p\" ] && chmod --reference=\"$p\" \"$t\" 2>/dev/null
mv -f -- \"$t\" \"$p\" || { rm -f -- \"$t\"; exit 1; }
exit $((30 + c))";
        let (code, _, stderr) = self.client.helper(script, &[&abs], Some(bytes)).await?;
        match code {
            30 => Ok(false),
            31 => Ok(true),
            21 => Err(SandboxError::IsDirectory(path.to_owned())),
            _ => Err(SandboxError::Io(format!("{path}: {stderr}"))),
        }
    }

    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote);
        let source = PackSource::File {
            local: local.to_path_buf(),
            name: abs[1..].to_owned(),
        };
        self.put_tar(&abs, source).await
    }

    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote);
        if abs == "/" {
            return Err(SandboxError::Path("cannot upload into /".into()));
        }
        let source = PackSource::Dir {
            local: local.to_path_buf(),
            prefix: abs[1..].to_owned(),
        };
        self.put_tar(&abs, source).await
    }

    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        match self
            .fetch(self.abs(remote), Unpack::File(local.to_path_buf()))
            .await?
        {
            Unpacked::Written(stats) => Ok(stats),
            _ => Err(SandboxError::Io(format!("{remote}: unexpected archive"))),
        }
    }

    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        let abs = self.abs(remote);
        let stream = self.get_tar(&abs)?;
        match unpack(stream, Unpack::Dir(local.to_path_buf()), abs).await? {
            Unpacked::Written(stats) => Ok(stats),
            _ => Err(SandboxError::Path(format!("{remote} is not a directory"))),
        }
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        let args = self.teardown_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, _, stderr) = self.client.helper(TEARDOWN, &args, None).await?;
        if code != 0 {
            return Err(SandboxError::Io(format!("removing {}: {stderr}", self.dir)));
        }
        self.torn_down.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl SshSandbox {
    /// The scratch directory and the negated process groups started so far (taken).
    fn teardown_args(&self) -> Vec<String> {
        let groups = std::mem::take(&mut *self.process_groups.lock().expect("lock poisoned"));
        std::iter::once(self.dir.clone())
            .chain(groups.iter().map(|p| format!("-{p}")))
            .collect()
    }
}

impl Drop for SshSandbox {
    /// A rollout cancelled before its teardown (a second Ctrl-C) still cleans the host: one
    /// blocking round trip over the master connection.
    fn drop(&mut self) {
        if self.torn_down.load(Ordering::SeqCst) {
            return;
        }
        let args = self.teardown_args();
        let mut words = vec!["sh", "-c", TEARDOWN, "hermes"];
        words.extend(args.iter().map(String::as_str));
        let _ = std::process::Command::new("ssh")
            .args(self.client.options())
            .arg("--")
            .arg(Client::remote_line(&words))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sleep 30` leading its own process group, started with `env`.
    fn group_leader(env: &[(&str, &str)]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("30")
            .env_clear()
            .envs(env.iter().copied())
            .process_group(0)
            .spawn()
            .expect("sleep")
    }

    #[test]
    fn teardown_kills_its_groups_and_leaves_a_group_that_reused_an_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let scratch = dir.path().join("hermes-env-task-1");
        std::fs::create_dir(&scratch).expect("mkdir");
        let home = scratch.to_string_lossy().into_owned();
        let mut ours = group_leader(&[("HOME", &home)]);
        // What a recycled id looks like on the host: a live group leader without our HOME.
        let mut stranger = group_leader(&[("HOME", "/root")]);
        let status = std::process::Command::new("sh")
            .args(["-c", TEARDOWN, "hermes", &home])
            .arg(format!("-{}", ours.id()))
            .arg(format!("-{}", stranger.id()))
            .status()
            .expect("sh");
        assert!(status.success());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(ours.wait().expect("wait").signal(), Some(libc::SIGKILL));
        assert!(!scratch.exists(), "the scratch directory was kept");
        assert!(
            stranger.try_wait().expect("try_wait").is_none(),
            "a stranger's group was killed"
        );
        stranger.kill().expect("kill");
        stranger.wait().expect("wait");
    }

    #[test]
    fn settings_come_from_upstream_variables() {
        let vars = [
            ("TERMINAL_SSH_HOST", "10.0.0.5"),
            ("TERMINAL_SSH_USER", "agent"),
            ("TERMINAL_SSH_PORT", "2222"),
            ("TERMINAL_SSH_KEY", "/keys/id"),
        ];
        let lookup = |n: &str| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        };
        let s = SshSettings::from_lookup(lookup).unwrap();
        assert_eq!(s.describe(), "agent@10.0.0.5:2222");
        assert_eq!(s.key.as_deref(), Some(Path::new("/keys/id")));
        let none = SshSettings::from_lookup(|_| None).unwrap_err().to_string();
        assert!(none.contains("TERMINAL_SSH_HOST"), "{none}");
        let bad = SshSettings::from_lookup(|n| {
            Some(if n == "TERMINAL_SSH_PORT" { "ssh" } else { "h" }.to_owned())
        });
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("TERMINAL_SSH_PORT 'ssh'"));
    }

    #[test]
    fn remote_words_are_quoted_for_the_shell() {
        assert_eq!(quote("it's $HOME"), "'it'\\''s $HOME'");
    }
}
