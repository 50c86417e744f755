//! A group's prepared scratch directory and its copies: the item's `prepare` runs once in a
//! sandbox of its own, whose processes are then stopped; each rollout's directory starts as a
//! copy of it (`cp --reflink=auto`: copy-on-write where the filesystem allows, a plain copy
//! otherwise). A confined copy cannot write outside its own directory, so neither the
//! prepared one nor its siblings.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::local::{LocalSandbox, Maker};
use crate::sandbox::api::{prepare_in, Prepared, Sandbox, SandboxSpec};
use crate::sandbox::error::SandboxError;

/// The prepared directory of one group, removed with it.
pub(crate) struct LocalPrepared {
    maker: Maker,
    /// The prepared sandbox, kept (idle) until the group is done: its directory is the
    /// source of the copies, and dropping it removes the directory.
    template: std::sync::Mutex<Option<Arc<LocalSandbox>>>,
    dir: PathBuf,
}

impl LocalPrepared {
    /// Makes the group's sandbox and prepares it (torn down again when that fails).
    pub(super) async fn prepare(
        maker: Maker,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Self, SandboxError> {
        let id = format!("prepared-{group}");
        let template = Arc::new(maker.open(&id, None)?);
        if let Err(e) = prepare_in(template.as_ref(), spec).await {
            let _ = template.teardown().await;
            return Err(e);
        }
        Ok(LocalPrepared {
            dir: maker.dir(&id),
            maker,
            template: std::sync::Mutex::new(Some(template)),
        })
    }
}

#[async_trait]
impl Prepared for LocalPrepared {
    async fn fork(
        &self,
        task_id: &str,
        _spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let (maker, from, id) = (self.maker.clone(), self.dir.clone(), task_id.to_owned());
        let sandbox = tokio::task::spawn_blocking(move || maker.open(&id, Some(&from)))
            .await
            .map_err(|e| SandboxError::worker("copying a prepared directory", e))??;
        Ok(Arc::new(sandbox))
    }

    async fn remove(&self) -> Result<(), SandboxError> {
        let template = self
            .template
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match template {
            Some(t) => t.teardown().await,
            None => Ok(()),
        }
    }
}

/// Copies the directory `from` to the new directory `to` with its modes, times and links
/// (`cp -a --reflink=auto`); `to` must not exist.
pub(super) fn copy_dir(from: &Path, to: &Path) -> Result<(), SandboxError> {
    let out = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--no-target-directory"])
        .arg(from)
        .arg(to)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| SandboxError::CreateIo {
            doing: format!("running cp to copy {}", from.display()),
            source: e,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(to);
    Err(SandboxError::Create(format!(
        "copying the prepared directory {} to {} failed: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}
