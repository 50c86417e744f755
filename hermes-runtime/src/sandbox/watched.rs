//! A sandbox decorator that remembers the first infrastructure failure of a rollout's
//! sandbox, whoever met it (a tool, the reward, the framework), so the rollout ends as a
//! sandbox failure instead of a reward the model did not earn.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use super::api::{ExecOutput, ExecRequest, Sandbox, Transfer};
use super::change_scan::ChangeScan;
use super::error::SandboxError;
use super::survival::{LeftoverKill, LeftoverRules};

/// The first infrastructure failure seen, shared by a [`TaskSandbox`](super::task::TaskSandbox) and its sandbox.
pub(crate) type FailureRecord = Arc<OnceLock<String>>;

/// Passes every call to `inner` and records infrastructure errors in `failure`.
pub(crate) struct Watched {
    pub(crate) inner: Arc<dyn Sandbox>,
    pub(crate) failure: FailureRecord,
}

impl Watched {
    fn seen<T>(&self, result: Result<T, SandboxError>) -> Result<T, SandboxError> {
        if let Err(e) = &result {
            if e.is_infra() {
                let _ = self.failure.set(e.to_string());
            }
        }
        result
    }
}

#[async_trait]
impl Sandbox for Watched {
    fn task_id(&self) -> &str {
        self.inner.task_id()
    }
    fn workdir(&self) -> &str {
        self.inner.workdir()
    }
    fn temp_dir(&self) -> &str {
        self.inner.temp_dir()
    }
    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.seen(self.inner.exec(request).await)
    }
    async fn exec_one_shot(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.seen(self.inner.exec_one_shot(request).await)
    }
    async fn reset_processes(&self) -> Result<(), SandboxError> {
        self.seen(self.inner.reset_processes().await)
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.seen(self.inner.read_file(path).await)
    }
    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        self.seen(self.inner.write_file(path, bytes).await)
    }
    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        self.seen(self.inner.upload_file(local, remote).await)
    }
    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        self.seen(self.inner.upload_dir(local, remote).await)
    }
    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        self.seen(self.inner.download_file(remote, local).await)
    }
    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        self.seen(self.inner.download_dir(remote, local).await)
    }
    async fn kill_leftover_processes(
        &self,
        rules: &LeftoverRules,
    ) -> Result<LeftoverKill, SandboxError> {
        self.seen(self.inner.kill_leftover_processes(rules).await)
    }
    async fn changed_paths(&self, roots: &[String]) -> Result<Option<Vec<String>>, SandboxError> {
        self.seen(self.inner.changed_paths(roots).await)
    }
    async fn scan_changes(
        &self,
        scans: &[ChangeScan],
    ) -> Result<Option<Vec<Vec<String>>>, SandboxError> {
        self.seen(self.inner.scan_changes(scans).await)
    }
    /// Teardown failures happen after the rollout's data is complete: not recorded.
    async fn teardown(&self) -> Result<(), SandboxError> {
        self.inner.teardown().await
    }
}
