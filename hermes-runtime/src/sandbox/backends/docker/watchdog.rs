//! The run's watchdog: a small child process (`<env binary> sandbox watch --run-id R`, in its
//! own process group) that holds the read end of a pipe from its parent. When the parent dies
//! without saying goodbye (SIGKILL, OOM), the pipe reaches EOF and the watchdog removes every
//! container of run R and its groups' snapshot images — also the ones the daemon created for requests that were in flight at
//! the kill, which were never started and so have no idle sleep to end them — in a few passes
//! over the next 30 s. A parent that exits cleanly writes one byte first: it has removed what it
//! knew of, and the watchdog (its output closed, so it holds no pipe of whoever waits for the
//! parent) only catches creations that the parent cancelled in flight, in passes over 10 s.
//!
//! Only a real environment binary can be re-executed as `sandbox watch`: [`enable`] is called
//! by its `main`; providers in other processes (tests, embedders) run without a watchdog.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bollard::query_parameters::{ListContainersOptions, ListImagesOptions};
use bollard::Docker;
use tracing::warn;

use super::lifecycle::{remove_container, Endpoint};
use super::LABEL_RUN;
use crate::sandbox::error::SandboxError;

/// Seconds after the parent's death at which the watchdog removes the run's containers (the
/// later passes catch creations the daemon finished after the client was gone).
const PASSES: [u64; 5] = [0, 1, 3, 10, 30];
/// The same after a clean exit (the parent has just removed everything it knew of).
const PASSES_AFTER_CLEAN_EXIT: [u64; 3] = [1, 3, 10];
/// The byte a parent that cleans up itself sends before it exits.
const GOODBYE: u8 = b'c';

static ENABLED: AtomicBool = AtomicBool::new(false);
static PIPES: Mutex<Vec<ChildStdin>> = Mutex::new(Vec::new());

/// Declares that this process is an environment binary, which has the `sandbox watch`
/// subcommand (called by the generated `main`).
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

fn pipes() -> std::sync::MutexGuard<'static, Vec<ChildStdin>> {
    PIPES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts the watchdog of run `run_id` on `endpoint` (a no-op unless [`enable`]d). A watchdog
/// that cannot start is one warning: the containers' lifetimes and the next reaper remain.
pub(crate) fn spawn(run_id: &str, endpoint: &Endpoint) {
    if !ENABLED.load(Ordering::SeqCst) {
        return;
    }
    let started = std::env::current_exe().and_then(|exe| {
        use std::os::unix::process::CommandExt as _;
        Command::new(exe)
            .args(["sandbox", "watch", "--run-id", run_id, "--docker-host"])
            .arg(&endpoint.host)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
    });
    match started {
        Ok(mut child) => {
            if let Some(stdin) = child.stdin.take() {
                pipes().push(stdin);
            }
            // Collects the exit status so no zombie is left while this process runs.
            let _ = std::thread::Builder::new()
                .name("hermes-sandbox-watchdog".into())
                .spawn(move || child.wait());
        }
        Err(e) => warn!(
            "cannot start the sandbox watchdog ({e}); if this process is killed, its started \
             containers end at their lifetime and the next run's reaper removes the rest"
        ),
    }
}

/// Tells every watchdog of this process that it cleaned up itself (the end of a run).
pub fn release_all() {
    for mut pipe in pipes().drain(..) {
        let _ = pipe.write_all(&[GOODBYE]);
    }
}

/// What the watchdog saw and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    /// The parent said goodbye (it cleaned up itself).
    pub clean: bool,
    /// Containers the watchdog removed.
    pub removed: usize,
}

/// The `sandbox watch` side: waits for the parent's end, then removes run `run_id`'s
/// containers in passes (`PASSES`, or `PASSES_AFTER_CLEAN_EXIT` with stdout and stderr
/// closed after a goodbye).
pub async fn watch(docker: &Docker, run_id: &str) -> Result<Watched, SandboxError> {
    let clean = tokio::task::spawn_blocking(|| {
        let mut byte = [0u8; 1];
        matches!(std::io::stdin().read(&mut byte), Ok(1) if byte[0] == GOODBYE)
    })
    .await
    .unwrap_or(false);
    let passes: &[u64] = if clean {
        detach_output();
        &PASSES_AFTER_CLEAN_EXIT
    } else {
        &PASSES
    };
    let start = tokio::time::Instant::now();
    let mut removed = 0;
    for at in passes {
        tokio::time::sleep_until(start + Duration::from_secs(*at)).await;
        removed += remove_run(docker, run_id).await?;
    }
    Ok(Watched { clean, removed })
}

/// Points stdout and stderr at /dev/null, so whoever reads the parent's output to its end
/// does not wait for the watchdog.
fn detach_output() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd as _;
        // SAFETY: dup2 onto the standard descriptors of this process, from a file we own.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

async fn remove_run(docker: &Docker, run_id: &str) -> Result<usize, SandboxError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_RUN}={run_id}")],
        )])),
        ..Default::default()
    };
    let ids: Vec<String> = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| SandboxError::docker("listing containers", e))?
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    let mut removed = 0;
    for id in ids {
        match remove_container(docker, &id).await {
            Ok(()) => removed += 1,
            Err(e) => warn!("sandbox watch: {e}"),
        }
    }
    // Then the run's group snapshots, which its containers no longer use.
    let options = ListImagesOptions {
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{LABEL_RUN}={run_id}")],
        )])),
        ..Default::default()
    };
    let images = docker
        .list_images(Some(options))
        .await
        .map_err(|e| SandboxError::docker("listing images", e))?;
    for image in images {
        if let Err(e) = super::fork::remove_image(docker, &image.id).await {
            warn!("sandbox watch: {e}");
        }
    }
    Ok(removed)
}
