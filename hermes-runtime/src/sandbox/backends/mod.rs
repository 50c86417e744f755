//! The sandbox backends: each turns the shared [`Sandbox`](super::Sandbox) trait into one
//! place commands and files live (a local scratch directory, a directory on an ssh host, a
//! Docker container), built from the file, exec and integrity layers; and the start of a
//! run's backend from its config.

pub mod docker;
pub(super) mod local;
mod local_confine;
mod local_fork;
mod local_reaper;
mod local_spares;
pub(super) mod ssh;
pub(super) mod start;
