//! What a killed run left of its local sandboxes: its per-run roots (`$TMPDIR/hermes-env-PID-ID`
//! and `/dev/shm/hermes-env-PID-ID`) and the processes still running in them. A run removes
//! both when it ends; one killed with SIGKILL cannot, so the next local run on the host does,
//! as the Docker backend reaps the containers of dead runs.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::sandbox::exec::proc_table::{process_row, process_table, read_proc};

/// The file in a run's root naming its owner: `PID START` (the start time in `/proc` ticks),
/// so a later process that reuses the pid is not taken for the owner.
pub(super) const OWNER_FILE: &str = ".owner";

/// What [`reap_dead_runs`] removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reaped {
    /// Runs whose roots were removed.
    pub roots: usize,
    /// Processes killed that were still running in them.
    pub processes: usize,
}

/// Writes this process's owner file into `root`.
pub(super) fn claim(root: &Path) -> std::io::Result<()> {
    let pid = std::process::id();
    let started = process_row(pid).map(|r| r.started).unwrap_or(0);
    std::fs::write(root.join(OWNER_FILE), format!("{pid} {started}\n"))
}

/// Removes the roots under `dirs` whose owning run is gone, after killing every process whose
/// home or working directory is inside one. Only directories this user owns and named as the
/// local backend names them are touched; a live run's are left alone.
pub(super) fn reap_dead_runs(dirs: &[&Path]) -> Reaped {
    let dead: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let pid = run_pid(name.to_str()?)?;
            let path = e.path();
            (is_ours(&path) && !owner_alive(&path, pid)).then_some(path)
        })
        .collect();
    if dead.is_empty() {
        return Reaped::default();
    }
    let processes = kill_inside(&dead);
    // A run's temp root and its `/dev/shm` twin share a name: one run, counted once.
    let roots = dead
        .iter()
        .filter(|root| std::fs::remove_dir_all(root).is_ok())
        .filter_map(|root| root.file_name())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Reaped { roots, processes }
}

/// The pid in a root's name `hermes-env-PID-XXXXXXXX` (8 hex digits), or `None` for any
/// other name.
pub(super) fn run_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("hermes-env-")?;
    let (pid, id) = rest.split_once('-')?;
    (id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(())?;
    pid.parse().ok()
}

/// A real directory (not a link) owned by this user.
fn is_ours(path: &Path) -> bool {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == me)
}

/// True while the run that made `root` is running: its pid exists and, when the root names
/// its owner's start time, with that start time.
fn owner_alive(root: &Path, pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Some(row) = process_row(pid) else {
        return false;
    };
    let recorded = std::fs::read_to_string(root.join(OWNER_FILE))
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<u64>().ok());
    recorded.is_none_or(|started| started == row.started)
}

/// SIGKILLs every process whose `HOME` or working directory is inside one of `roots`; returns
/// how many.
fn kill_inside(roots: &[PathBuf]) -> usize {
    let me = std::process::id();
    let inside = |path: &Path| roots.iter().any(|root| path.starts_with(root));
    let victims: Vec<u32> = process_table(|pid| pid != me)
        .into_iter()
        .filter(|row| !row.zombie)
        .map(|row| row.pid)
        .filter(|pid| {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
            cwd.as_deref().is_some_and(inside) || home(*pid).as_deref().is_some_and(inside)
        })
        .collect();
    for pid in &victims {
        // SAFETY: kill(2) with a pid read from /proc; a gone process is ESRCH, harmless.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    victims.len()
}

/// The `HOME` in `pid`'s environment block.
fn home(pid: u32) -> Option<PathBuf> {
    let env = read_proc(&format!("/proc/{pid}/environ"))?;
    env.split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(b"HOME="))
        .map(|home| PathBuf::from(String::from_utf8_lossy(home).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_backends_own_names_are_roots() {
        assert_eq!(run_pid("hermes-env-4242-0a1b2c3d"), Some(4242));
        assert_eq!(run_pid("hermes-env-4242-0a1b2c3"), None);
        assert_eq!(run_pid("hermes-env-task-0a1b2c3d"), None);
        assert_eq!(run_pid("hermes-env-4242-0a1b2c3g"), None);
        assert_eq!(run_pid("other-4242-0a1b2c3d"), None);
    }

    #[test]
    fn a_live_owner_keeps_its_root_and_a_reused_pid_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp
            .path()
            .join(format!("hermes-env-{}-0a1b2c3d", std::process::id()));
        std::fs::create_dir(&root).unwrap();
        claim(&root).unwrap();
        assert!(owner_alive(&root, std::process::id()));
        // Our parent is alive; a root claiming it with another start time is a dead run's.
        let parent = std::os::unix::process::parent_id();
        let other = tmp.path().join(format!("hermes-env-{parent}-0a1b2c3d"));
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(OWNER_FILE), format!("{parent} 1\n")).unwrap();
        assert!(!owner_alive(&other, parent));
        assert_eq!(
            reap_dead_runs(&[tmp.path()]),
            Reaped {
                roots: 1,
                processes: 0
            }
        );
        assert!(root.exists() && !other.exists());
    }
}
