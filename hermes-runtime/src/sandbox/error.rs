//! [`SandboxError`]: how a sandbox operation failed, and whether the infrastructure or the
//! requested operation is to blame.

/// Failures of sandbox operations. [`SandboxError::is_infra`] separates infrastructure
/// failures (not the model's fault) from failures of the requested operation.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The file does not exist.
    #[error("file not found: {0}")]
    NotFound(String),
    /// The path exists but is a directory.
    #[error("is a directory: {0}")]
    IsDirectory(String),
    /// The sandbox could not be created.
    #[error("sandbox creation failed: {0}")]
    Create(String),
    /// The sandbox was torn down or vanished.
    #[error("sandbox is gone: {0}")]
    Gone(String),
    /// The container engine could not be reached or failed.
    #[error("docker daemon error: {0}")]
    Daemon(String),
    /// A path was refused: it would escape the target directory, or has the wrong type.
    #[error("path refused: {0}")]
    Path(String),
    /// A reward command could not run at all (its program or interpreter is missing): the
    /// verifier, not the model, failed. Only [`crate::context::ToolContext`] reports it.
    #[error("{0}")]
    NotRunnable(String),
    /// Any other I/O failure.
    #[error("{0}")]
    Io(String),
}

impl SandboxError {
    /// True for failures of the infrastructure rather than of the requested operation.
    pub fn is_infra(&self) -> bool {
        matches!(
            self,
            SandboxError::Create(_) | SandboxError::Gone(_) | SandboxError::Daemon(_)
        )
    }
}
