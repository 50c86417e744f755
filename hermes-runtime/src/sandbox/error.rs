//! [`SandboxError`]: how a sandbox operation failed, and whether the infrastructure or the
//! requested operation is to blame.
//!
//! A variant that wraps a lower error keeps it as its [`source`](std::error::Error::source)
//! and also shows it in its own message: tools, rewards and logs print one error's message
//! alone, and it must say what went wrong.

use std::io;

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
    /// The sandbox could not be created, for the reason given (a setting, a missing image, a
    /// host that lacks what the backend needs, a provider shutting down).
    #[error("sandbox creation failed: {0}")]
    Create(String),
    /// The sandbox could not be created: an operation on this host failed (`doing` names it
    /// and its path: the scratch directory, starting the ssh client).
    #[error("sandbox creation failed: {doing}: {source}")]
    CreateIo {
        /// The operation and what it acted on.
        doing: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The sandbox could not be created: a step run through its backend failed (checking the
    /// ssh host, making the remote scratch directory).
    #[error("sandbox creation failed: {source}")]
    CreateStep {
        /// The step's own error.
        #[source]
        source: Box<SandboxError>,
    },
    /// Docker refused or failed a step of creating the sandbox's container or the run's lease
    /// (`doing` names the step, the container and the daemon).
    #[error("sandbox creation failed: {doing}: {source}")]
    CreateDocker {
        /// The step and what it acted on.
        doing: String,
        /// The daemon's answer.
        #[source]
        source: bollard::errors::Error,
    },
    /// The sandbox's image is not on the Docker daemon.
    #[error(
        "sandbox creation failed: image '{image}' is not available ({source}); build it with \
         `sandbox-images/build` or pull it, or choose another with --env.docker_image"
    )]
    ImageMissing {
        /// The image asked for.
        image: String,
        /// The daemon's answer.
        #[source]
        source: bollard::errors::Error,
    },
    /// The sandbox was torn down or vanished.
    #[error("sandbox is gone: {0}")]
    Gone(String),
    /// The sandbox's container is gone: the daemon no longer has it, or it stopped.
    #[error("sandbox is gone: container {container} {state} ({source})")]
    ContainerGone {
        /// The container's name.
        container: String,
        /// What became of it ("no longer exists", "is not running").
        state: &'static str,
        /// The daemon's answer.
        #[source]
        source: bollard::errors::Error,
    },
    /// The container engine could not be reached or failed, for the reason given.
    #[error("docker daemon error: {0}")]
    Daemon(String),
    /// A request to the Docker daemon failed (`doing` names it, with its container or host).
    #[error("docker daemon error: {doing}: {source}")]
    Docker {
        /// The request and what it acted on.
        doing: String,
        /// The daemon's answer, or the client's failure to get one.
        #[source]
        source: bollard::errors::Error,
    },
    /// A path was refused: it would escape the target directory, or has the wrong type.
    #[error("path refused: {0}")]
    Path(String),
    /// A reward command could not run at all (its program or interpreter is missing): the
    /// verifier, not the model, failed. Only `ToolContext` reports it.
    #[error("{0}")]
    NotRunnable(String),
    /// Any other failure of the operation, in words.
    #[error("{0}")]
    Io(String),
    /// The backend cannot do what the request asks (e.g. run a command as another user).
    #[error("the {backend} sandbox backend cannot {what}")]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// What it was asked to do.
        what: String,
    },
    /// An I/O operation on this host failed (`doing` names it and its file, pipe or child
    /// process).
    #[error("{doing}: {source}")]
    HostIo {
        /// The operation and what it acted on.
        doing: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A process of the sandbox could not be put in its Landlock domain or cgroup (this
    /// host's resources: open files, memory); it is not started rather than run unconfined.
    #[error("cannot confine the sandbox's process: {source}")]
    Confine {
        /// Why the ruleset or cgroup could not be opened.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A thread or task the operation ran on failed (panicked or was cancelled).
    #[error("{doing} failed: {source}")]
    Worker {
        /// What ran there ("the unpacking thread", …).
        doing: &'static str,
        /// Why it did not finish.
        #[source]
        source: tokio::task::JoinError,
    },
}

impl SandboxError {
    /// True for failures of the infrastructure rather than of the requested operation.
    pub fn is_infra(&self) -> bool {
        match self {
            SandboxError::Create(_)
            | SandboxError::CreateIo { .. }
            | SandboxError::CreateStep { .. }
            | SandboxError::CreateDocker { .. }
            | SandboxError::ImageMissing { .. }
            | SandboxError::Gone(_)
            | SandboxError::ContainerGone { .. }
            | SandboxError::Daemon(_)
            | SandboxError::Confine { .. }
            | SandboxError::Docker { .. } => true,
            // This process (or the host) ran out of open files: a command of the model's is a
            // process of its own, with descriptors of its own, so it is never the model's fault.
            SandboxError::HostIo { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
            }
            _ => false,
        }
    }

    /// An I/O failure of `doing` on this host.
    pub(crate) fn host_io(doing: impl Into<String>, source: io::Error) -> Self {
        SandboxError::HostIo {
            doing: doing.into(),
            source,
        }
    }

    /// A failed request to the Docker daemon.
    pub(crate) fn docker(doing: impl Into<String>, source: bollard::errors::Error) -> Self {
        SandboxError::Docker {
            doing: doing.into(),
            source,
        }
    }

    /// A failed thread or task of the operation.
    pub(crate) fn worker(doing: &'static str, source: tokio::task::JoinError) -> Self {
        SandboxError::Worker { doing, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_out_of_open_files_is_the_infrastructure() {
        let host =
            |errno| SandboxError::host_io("verdict.txt", io::Error::from_raw_os_error(errno));
        for errno in [libc::EMFILE, libc::ENFILE] {
            assert!(host(errno).is_infra(), "errno {errno}");
        }
        // What a command of the model's can cause stays the operation's own failure.
        for errno in [libc::EACCES, libc::ENOSPC, libc::EROFS, libc::ENOTDIR] {
            assert!(!host(errno).is_infra(), "errno {errno}");
        }
        assert!(!SandboxError::NotFound("x".into()).is_infra());
        // A process that cannot be confined is never started, and never the model's fault.
        let confine = SandboxError::Confine {
            source: io::Error::from_raw_os_error(libc::EMFILE).into(),
        };
        assert!(confine.is_infra());
        assert!(
            confine.to_string().contains("Too many open files"),
            "{confine}"
        );
    }
}
