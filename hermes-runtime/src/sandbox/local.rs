//! The local backend: each task gets its own scratch directory (also its `$HOME`) and each
//! command its own process group, killed on timeout and at teardown. It is not a security
//! boundary (absolute paths reach the host); use it to develop environments without Docker.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::time::{sleep_until, timeout, Instant};

use super::{CappedOutput, ExecOutput, ExecRequest, Sandbox, SandboxError, SandboxProvider};

/// After the command exits, output is still read until the pipe is quiet for this long (a
/// background process it started may keep the pipe open forever).
const DRAIN_QUIET: Duration = Duration::from_millis(50);

/// Upper bound on reading after exit, for background processes that never stop writing.
const DRAIN_MAX: Duration = Duration::from_millis(500);

/// Creates one scratch directory per task under a per-run root.
#[derive(Debug)]
pub struct LocalProvider {
    root: PathBuf,
}

impl LocalProvider {
    /// A provider rooted in a fresh directory under the system temp dir.
    pub fn new() -> std::io::Result<Self> {
        let root =
            std::env::temp_dir().join(format!("hermes-env-{}-{}", std::process::id(), short_id()));
        std::fs::create_dir_all(&root)?;
        Ok(LocalProvider { root })
    }

    /// The per-run root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for LocalProvider {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

#[async_trait]
impl SandboxProvider for LocalProvider {
    async fn create(&self, task_id: &str) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let safe: String = task_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = self.root.join(format!("task-{safe}"));
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| SandboxError::Create(format!("{}: {e}", dir.display())))?;
        Ok(Arc::new(LocalSandbox::new(task_id, dir)))
    }
}

/// One task's scratch directory and the process groups its commands started.
#[derive(Debug)]
pub struct LocalSandbox {
    task_id: String,
    dir: PathBuf,
    dir_str: String,
    process_groups: Mutex<Vec<i32>>,
}

impl LocalSandbox {
    /// A sandbox over an existing directory.
    pub fn new(task_id: &str, dir: PathBuf) -> Self {
        let dir_str = dir.to_string_lossy().into_owned();
        LocalSandbox {
            task_id: task_id.to_owned(),
            dir,
            dir_str,
            process_groups: Mutex::new(Vec::new()),
        }
    }

    /// Resolves `~`, `~/x` and relative paths against the scratch directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        if path == "~" {
            self.dir.clone()
        } else if let Some(rest) = path.strip_prefix("~/") {
            self.dir.join(rest)
        } else {
            self.dir.join(path)
        }
    }

    fn kill_all(&self) {
        let groups = std::mem::take(&mut *self.process_groups.lock().expect("lock poisoned"));
        for pgid in groups {
            kill_group(pgid);
        }
    }
}

fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

fn io_err(path: &Path, e: std::io::Error) -> SandboxError {
    match e.kind() {
        std::io::ErrorKind::NotFound => SandboxError::NotFound(path.display().to_string()),
        std::io::ErrorKind::IsADirectory => SandboxError::IsDirectory(path.display().to_string()),
        _ => SandboxError::Io(format!("{}: {e}", path.display())),
    }
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn task_id(&self) -> &str {
        &self.task_id
    }

    fn workdir(&self) -> &str {
        &self.dir_str
    }

    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        if !self.dir.is_dir() {
            return Err(SandboxError::Gone(format!(
                "scratch directory {} was removed",
                self.dir.display()
            )));
        }
        let cwd = request
            .workdir
            .as_deref()
            .map_or_else(|| self.dir.clone(), |w| self.resolve(w));
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(format!("exec 2>&1\n{}", request.command))
            .current_dir(&cwd)
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                SandboxError::Io(format!("cannot start bash in {}: {e}", cwd.display()))
            })?;
        let pgid = child.id().map(|p| p as i32);
        if let Some(pgid) = pgid {
            self.process_groups
                .lock()
                .expect("lock poisoned")
                .push(pgid);
        }
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut capture = CappedOutput::new(request.output_limit);
        let deadline = Instant::now() + request.timeout;
        let mut buf = vec![0u8; 16 * 1024];
        let mut status = None;
        let mut eof = false;
        let mut timed_out = false;
        let mut drain_until = None;
        while !(eof && status.is_some()) {
            if status.is_some() {
                // The command exited but something it started still holds the pipe: take
                // what is already there and stop waiting for EOF.
                let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN_MAX);
                if Instant::now() >= until {
                    break;
                }
                match timeout(DRAIN_QUIET, stdout.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => capture.push(&buf[..n]),
                    _ => break,
                }
                continue;
            }
            tokio::select! {
                read = stdout.read(&mut buf), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => capture.push(&buf[..n]),
                },
                exit = child.wait() => status = Some(exit),
                _ = sleep_until(deadline) => {
                    timed_out = true;
                    break;
                }
            }
        }
        if timed_out {
            if let Some(pgid) = pgid {
                kill_group(pgid);
            }
            let _ = child.wait().await;
            let mut output = capture.finish();
            output.push_str(&format!(
                "\n[Command timed out after {}s]",
                request.timeout.as_secs()
            ));
            return Ok(ExecOutput {
                output,
                exit_code: 124,
                timed_out: true,
            });
        }
        let exit_code = match status {
            Some(Ok(s)) => s.code().unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt;
                128 + s.signal().unwrap_or(0)
            }),
            Some(Err(e)) => return Err(SandboxError::Io(format!("waiting for command: {e}"))),
            None => -1,
        };
        Ok(ExecOutput {
            output: capture.finish(),
            exit_code,
            timed_out: false,
        })
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let p = self.resolve(path);
        if p.is_dir() {
            return Err(SandboxError::IsDirectory(path.to_owned()));
        }
        tokio::fs::read(&p)
            .await
            .map_err(|e| io_err(Path::new(path), e))
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        let p = self.resolve(path);
        let parent = p
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.dir.clone());
        let dirs_created = !parent.exists();
        if dirs_created {
            tokio::fs::create_dir_all(&parent)
                .await
                .map_err(|e| io_err(&parent, e))?;
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent.join(format!(".{name}.hermes-tmp-{}", short_id()));
        tokio::fs::write(&tmp, bytes)
            .await
            .map_err(|e| io_err(Path::new(path), e))?;
        if let Ok(meta) = tokio::fs::metadata(&p).await {
            let _ = tokio::fs::set_permissions(&tmp, meta.permissions()).await;
        }
        if let Err(e) = tokio::fs::rename(&tmp, &p).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(io_err(Path::new(path), e));
        }
        Ok(dirs_created)
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        self.kill_all();
        match tokio::fs::remove_dir_all(&self.dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&self.dir, e)),
        }
    }
}

impl Drop for LocalSandbox {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
