//! Running commands in a sandbox: the one-shot `bash -c` wrapper and the persistent shell
//! with their framing and end markers, commands the local backend starts without a shell
//! (and its remembered `PATH` lookups), the process groups it kills, the host's process
//! table they are checked against, the capped capture of command output, and the clean
//! preamble a verifier's commands run after. Backend-neutral: each backend supplies the
//! transport.

pub(super) mod direct;
pub(super) mod output;
pub(super) mod path_memo;
pub(super) mod persistent;
pub(super) mod preamble;
pub(super) mod proc_table;
pub(super) mod process_groups;
pub(super) mod shell;
