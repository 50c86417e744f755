//! Sandboxes: where one rollout's tools and its reward checks run. One sandbox belongs to
//! exactly one rollout (its task id) and is torn down when the rollout ends. The backends
//! behave alike for tools and `ToolContext`: [`docker`] (a hardened container per task, files
//! through the archive API), [`LocalProvider`] (a scratch directory per task) and
//! [`SshProvider`] (a scratch directory on a remote host). They run commands through a
//! persistent shell (one per sandbox), so the working directory persists across commands.
//!
//! # Layout
//!
//! Each layer uses only the layers above it in this list, never one below it, and nothing
//! here uses a higher layer of the crate:
//!
//! 1. The shared vocabulary, in this folder: [`SandboxError`] (`error.rs`), the tripwire scans
//!    the trait passes ([`ChangeScan`], `change_scan.rs`), the [`Sandbox`] and
//!    [`SandboxProvider`] traits with the values they pass (`api.rs`), what may outlive the
//!    agent phase ([`Survivor`], [`OwnProcess`], `survival.rs`), and the rollout's
//!    handle to its sandbox ([`TaskSandbox`], `task.rs`, with its failure record `watched.rs`),
//!    and a group's prepared sandbox its rollouts are copied from ([`GroupFork`], `fork.rs`).
//! 2. `files/`: moving and reading files safely (tar streams, link containment, bounded
//!    reads, lexical paths inside a remote sandbox).
//! 3. `exec/`: running commands (the one-shot wrapper, the persistent shell, commands started
//!    without a shell, process groups, the host's process table, capped output, the
//!    verifier's clean preamble).
//! 4. `integrity/`: the tripwires between the agent phase and the verifier (the file wires,
//!    the local backend's leftover processes); uses `exec/`'s process table.
//! 5. `backends/`: the local, ssh and Docker sandboxes built from the layers above, and
//!    starting a run's backend from its config.

mod api;
mod backends;
mod change_scan;
mod error;
mod exec;
mod files;
mod fork;
mod integrity;
mod queue;
mod survival;
mod task;
mod watched;

pub use api::{
    ContainerOverrides, ExecOutput, ExecRequest, Prepared, ReadyCheck, Sandbox, SandboxProvider,
    SandboxSpec, SetupCommand, Transfer, OUTPUT_LIMIT_CHARS,
};
pub use backends::local::{LocalProvider, LocalSandbox};
pub use backends::ssh::{SshProvider, SshSandbox, SshSettings};
pub use backends::start::{start_backend, Backend, StartedBackend};
pub use change_scan::ChangeScan;
pub use error::SandboxError;
pub use exec::output::CappedOutput;
pub use exec::preamble::CLEAN_PREAMBLE;
pub use files::bounded::READ_LIMIT;
pub use fork::GroupFork;
pub(crate) use survival::shell_functions;
pub use survival::{LeftoverKill, LeftoverRules, OwnProcess, Survivor};
pub use task::TaskSandbox;

// The Docker backend and the tripwires as modules of their own: the rest of the crate reaches
// their items as `sandbox::docker::…` and `sandbox::tripwire::…`.
pub use backends::docker::{self, DockerProvider, DockerSandbox, DockerSettings};
pub use integrity::tripwire;
