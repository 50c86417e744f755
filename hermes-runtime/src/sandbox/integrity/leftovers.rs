//! The local backend's leftover processes: what its sandbox's commands left running when the
//! agent phase ends, found on the host's process table (the sandbox's process groups, or
//! its `HOME` in the environment) and killed, the framework's own shells passed over, the
//! declared survivors left running. The container backends run `inside::LEFTOVER_SCRIPT`
//! instead.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::coalesced::Coalesced;
use crate::sandbox::exec::proc_table::{
    boot_ticks, process_row, process_table, read_proc, ProcessRow,
};
use crate::sandbox::survival::{LeftoverKill, LeftoverRules, OwnProcess, Survivor};

/// The local backend's leftovers: processes (other than this one) in one of the sandbox's
/// process groups or carrying its `HOME` (so `setsid`/`nohup` escapes are found too). Each is
/// stopped (a stopped process cannot fork, so every one's ancestry holds until all are found),
/// in rounds until a round finds nothing new, then killed; a last sweep kills what still
/// escaped. The `process` tool's own processes (`rules.own`: pid and start time both equal) and
/// those below them are counted, every other killed process is reported as `pid command`, and
/// the declared survivors (`rules.survivors`, by the kernel's view of their executable and
/// command line) are left running and returned.
/// Only processes started since `birth` can be the sandbox's: only the pids the host handed
/// out since are read (one `stat` read each), and of those only the ones started after it
/// have their environment read. The framework's own shells ([`FrameworkShell`], this
/// sandbox's and every other's) are passed over unread.
pub(crate) fn kill_local_leftovers(
    home: &Path,
    groups: &[i32],
    cgroup_procs: Option<&Path>,
    rules: &LeftoverRules,
    birth: &Birth,
) -> (LeftoverKill, Vec<KeptSurvivor>) {
    let marker = format!("HOME={}", home.display());
    let me = std::process::id();
    let survivors = Survivors::new(&rules.survivors);
    let mut kill = LeftoverKill::default();
    let mut kept = Vec::new();
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    let mut held: Vec<u32> = Vec::new();
    let carries_home = |pid: u32| {
        environment(pid).is_some_and(|env| env.split(|&b| b == 0).any(|e| e == marker.as_bytes()))
    };
    // The sandbox's cgroup lists its processes whatever their environment or session.
    let members = || -> BTreeSet<u32> {
        cgroup_procs
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    };
    let ours = |p: &ProcessRow, members: &BTreeSet<u32>| {
        // Kernel threads (children of kthreadd, pid 2) have no environment to read.
        let kernel = p.pid == 2 || p.ppid == 2;
        p.pid != me
            && !p.zombie
            && !kernel
            && (groups.contains(&p.pgrp)
                || members.contains(&p.pid)
                || (p.started >= birth.ticks && carries_home(p.pid)))
    };
    for _round in 0..STOP_ROUNDS {
        let table = birth.processes_since();
        let members = members();
        let mut found = false;
        for p in &table {
            if seen.contains(&p.pid) || !ours(p, &members) {
                continue;
            }
            if survivors.admit(p.pid) {
                seen.insert(p.pid);
                kill.survivors
                    .push(format!("{} {}", p.pid, command_line(p.pid)));
                kept.push(KeptSurvivor {
                    pid: p.pid,
                    started: p.started,
                    pgrp: p.pgrp,
                });
                continue;
            }
            // SAFETY: kill(2) on a pid; no memory is touched.
            if unsafe { libc::kill(p.pid as i32, libc::SIGSTOP) } != 0 {
                continue;
            }
            seen.insert(p.pid);
            held.push(p.pid);
            found = true;
            if owned(p, &table, &rules.own) {
                kill.own += 1;
            } else {
                kill.leftovers
                    .push(format!("{} {}", p.pid, command_line(p.pid)));
            }
        }
        if !found {
            break;
        }
    }
    for &pid in &held {
        // SAFETY: kill(2) on a pid this scan stopped (it cannot have exited since).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    for _round in 0..3 {
        let mut found = false;
        let members = members();
        for p in &birth.processes_since() {
            if seen.contains(&p.pid) || !ours(p, &members) {
                continue;
            }
            let command = command_line(p.pid);
            // SAFETY: kill(2) on a pid; no memory is touched.
            if unsafe { libc::kill(p.pid as i32, libc::SIGKILL) } == 0 {
                kill.leftovers.push(format!("{} {command}", p.pid));
                seen.insert(p.pid);
                found = true;
            }
        }
        if !found {
            break;
        }
    }
    (kill, kept)
}

/// Most rounds of stopping: each finds what the processes of the last forked before they
/// were stopped, so only a fork storm needs more, and the last sweep kills what is left.
const STOP_ROUNDS: usize = 16;

/// True when `p` is one of `own` (pid and start time both equal) or below one, by the
/// parents in `table`.
fn owned(p: &ProcessRow, table: &[ProcessRow], own: &[OwnProcess]) -> bool {
    let mut row = *p;
    for _ in 0..64 {
        if own.contains(&OwnProcess {
            pid: row.pid,
            started: row.started,
        }) {
            return true;
        }
        match table.iter().find(|r| r.pid == row.ppid) {
            Some(parent) if parent.pid > 1 => row = *parent,
            _ => return false,
        }
    }
    false
}

/// A declared survivor a leftover scan left running: what the sandbox's later process resets
/// pass over, and its teardown kills (while the pid still names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeptSurvivor {
    pub pid: u32,
    /// Its start time (boot-clock ticks).
    pub started: u64,
    pub pgrp: i32,
}

impl KeptSurvivor {
    /// SIGKILLs it when its pid still names it.
    pub fn kill(&self) {
        if process_row(self.pid).is_some_and(|row| row.started == self.started) {
            // SAFETY: kill(2) on a pid just checked to be this process.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
    }
}

/// The declared survivors with their executables identified (device and inode, links
/// followed), so a process is admitted by the file the kernel says it runs.
struct Survivors<'a> {
    files: Vec<(Option<(u64, u64)>, &'a Survivor)>,
}

impl<'a> Survivors<'a> {
    fn new(survivors: &'a [Survivor]) -> Self {
        Survivors {
            files: survivors
                .iter()
                .map(|s| (file_id(Path::new(&s.exe)), s))
                .collect(),
        }
    }

    /// True when `pid` executes one of the survivors' files with a matching command line.
    fn admit(&self, pid: u32) -> bool {
        if self.files.is_empty() {
            return false;
        }
        let Some(exe) = file_id(Path::new(&format!("/proc/{pid}/exe"))) else {
            return false;
        };
        let cmdline = read_proc(&format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args = cmdline.strip_suffix(b"\0").unwrap_or(&cmdline);
        let joined = String::from_utf8_lossy(args).replace('\0', " ");
        self.files.iter().any(|(file, s)| {
            let runs = if s.any_listener() {
                listens(pid)
            } else {
                *file == Some(exe)
            };
            runs && s.command_matches(&joined)
        })
    }
}

/// True when one of `pid`'s descriptors is a listening socket (TCP/TCP6 state LISTEN, or a
/// listening Unix socket), as [`Survivor::LISTENING`] asks.
fn listens(pid: u32) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut listening = std::collections::HashSet::new();
    for (table, state_col, inode_col, listen) in [
        ("/proc/net/tcp", 3, 9, "0A"),
        ("/proc/net/tcp6", 3, 9, "0A"),
        ("/proc/net/unix", 3, 6, "00010000"),
    ] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(state_col) == Some(&listen) {
                if let Some(inode) = cols.get(inode_col).and_then(|i| i.parse::<u64>().ok()) {
                    listening.insert(inode);
                }
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok).any(|fd| {
        std::fs::metadata(fd.path())
            .is_ok_and(|m| m.file_type().is_socket() && listening.contains(&m.ino()))
    })
}

/// A file's device and inode, links followed (`/proc/PID/exe` included).
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The pids of the persistent shells of this process's local sandboxes. A leftover scan
/// reads nothing of them: the framework started them (each with its sandbox's `HOME`), and
/// with many groups in flight their `stat` and environment reads would be most of each scan.
/// A pid here is
/// always the shell's own: it is registered while the shell is this process's unreaped child
/// and unregistered before the shell is reaped (until then the kernel hands the pid to no one
/// else).
static FRAMEWORK_SHELLS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// A local sandbox's shell while it is registered in [`FRAMEWORK_SHELLS`] (until dropped,
/// which must come before the shell is reaped).
#[derive(Debug)]
pub(crate) struct FrameworkShell(u32);

impl FrameworkShell {
    /// Registers `pid`, a child of this process not yet reaped.
    pub fn register(pid: u32) -> Self {
        framework_shells().insert(pid);
        FrameworkShell(pid)
    }
}

impl Drop for FrameworkShell {
    fn drop(&mut self) {
        framework_shells().remove(&self.0);
    }
}

fn framework_shells() -> std::sync::MutexGuard<'static, BTreeSet<u32>> {
    FRAMEWORK_SHELLS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The environment block of `pid` (`None` when it is gone or not ours to read). A process in
/// the middle of `execve` shows an empty one for a moment (a `nohup setsid bash …` chain often
/// does), so an empty block is read again, for up to 100 ms, before it is believed.
fn environment(pid: u32) -> Option<Vec<u8>> {
    for _ in 0..20 {
        let env = read_proc(&format!("/proc/{pid}/environ"))?;
        if !env.is_empty() {
            return Some(env);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Some(Vec::new())
}

/// When a local sandbox was made, as its leftover scan needs it: no process started earlier
/// can be the sandbox's, and none whose pid the host handed out earlier either.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Birth {
    /// The boot clock ([`boot_ticks`]).
    ticks: u64,
    /// The host's pid counter (`None` where `/proc` does not show it: every pid is read).
    pids: Option<PidCounter>,
}

/// How long a reading of [`Birth::now`] serves sandboxes made after it.
const BIRTH_SHARED_FOR: Duration = Duration::from_millis(50);

impl Birth {
    /// Now, or a reading taken at most [`BIRTH_SHARED_FOR`] ago: a group's sandboxes are made
    /// together, and the pid counter costs two `/proc` reads. An earlier birth is
    /// always safe: the scans read more pids and processes, never fewer.
    pub fn now() -> Self {
        static LAST: Mutex<Option<(std::time::Instant, Birth)>> = Mutex::new(None);
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, birth)) = *last {
            if at.elapsed() <= BIRTH_SHARED_FOR {
                return birth;
            }
        }
        let birth = Birth::read();
        *last = Some((std::time::Instant::now(), birth));
        birth
    }

    /// Now, read afresh.
    fn read() -> Self {
        Birth {
            ticks: boot_ticks(),
            pids: PidCounter::read(),
        }
    }

    /// The rows of the processes whose pid was handed out since the birth (all of `/proc`
    /// when the counter cannot tell: it may have gone round since, or is not shown), the
    /// framework's shells passed over. From a reading of `/proc` begun after this call, shared
    /// with the scans that ask at the same time ([`ProcReading`]).
    fn processes_since(&self) -> Vec<ProcessRow> {
        let reading = PROC_READINGS.get(*self, ProcReading::take);
        let fresh = self.handed_out_by(reading.counter);
        reading
            .rows
            .iter()
            .filter(|p| fresh.is_none_or(|(after, upto)| in_cycle(p.pid, after, upto)))
            .copied()
            .collect()
    }

    /// The cyclic range of pids handed out between the birth and `now`, when the counter
    /// can tell.
    fn handed_out_by(&self, now: Option<PidCounter>) -> Option<(u32, u32)> {
        self.pids
            .zip(now)
            .and_then(|(then, now)| then.handed_out_until(&now, pid_max()))
    }
}

/// The `/proc` readings the leftover scans share. A scan that is to take one waits
/// [`PROC_READING_GATHER`] first for others to join: rollouts end spread over milliseconds,
/// and each reading (the `/proc` listing, the pid counter, a `stat` read per live process
/// started since) is worth sharing.
static PROC_READINGS: Coalesced<Birth, ProcReading> = Coalesced::gathering_for(PROC_READING_GATHER);

/// How long a leftover scan waits for others to share its `/proc` reading: a rollout's
/// verification starts that much later at most, against seconds of LLM turns, and the
/// rollouts of a group that end together share one reading.
const PROC_READING_GATHER: Duration = Duration::from_millis(10);

/// One reading of `/proc` for the leftover scans waiting for it ([`Coalesced`]): a group's
/// rollouts end together, and each scan listing `/proc` and reading the `stat` of every
/// process started since its sandbox was made would repeat the same work. A scan is given
/// only a reading begun after it asked, as its own
/// would have been.
struct ProcReading {
    /// The pid counter, read first.
    counter: Option<PidCounter>,
    /// The rows of the pids handed out since any of the births asked about (every pid when
    /// one of them cannot tell), the framework's shells passed over.
    rows: Vec<ProcessRow>,
}

impl ProcReading {
    fn take(births: &[Birth]) -> Self {
        let counter = PidCounter::read();
        let ranges: Option<Vec<(u32, u32)>> =
            births.iter().map(|b| b.handed_out_by(counter)).collect();
        let shells = framework_shells().clone();
        let rows = process_table(|pid| {
            !shells.contains(&pid)
                && ranges.as_ref().is_none_or(|ranges| {
                    ranges
                        .iter()
                        .any(|&(after, upto)| in_cycle(pid, after, upto))
                })
        });
        ProcReading { counter, rows }
    }
}

/// True when `pid` lies in the cyclic range of pids handed out after `after` up to `upto`.
fn in_cycle(pid: u32, after: u32, upto: u32) -> bool {
    if after <= upto {
        pid > after && pid <= upto
    } else {
        pid > after || pid <= upto
    }
}

/// Where the host's pid allocation stands: the last pid handed out (`/proc/loadavg`) and the
/// tasks created since boot (`/proc/stat`'s `processes`, threads included: each takes a pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PidCounter {
    last: u32,
    forks: u64,
}

impl PidCounter {
    fn read() -> Option<Self> {
        let loadavg = String::from_utf8(read_proc("/proc/loadavg")?).ok()?;
        let last = loadavg.split_whitespace().nth(4)?.parse().ok()?;
        let stat = String::from_utf8(read_proc("/proc/stat")?).ok()?;
        let forks = stat
            .lines()
            .find_map(|l| l.strip_prefix("processes "))?
            .trim()
            .parse()
            .ok()?;
        Some(PidCounter { last, forks })
    }

    /// The cyclic range `(after, upto]` of the pids handed out between `self` and `now`, or
    /// `None` when so many tasks were created that the counter may have gone all the way
    /// round (pids restart at 300 after `pid_max`; a margin covers the reads not being atomic).
    fn handed_out_until(&self, now: &PidCounter, pid_max: u32) -> Option<(u32, u32)> {
        let created = now.forks.checked_sub(self.forks)?;
        let lap = u64::from(pid_max).saturating_sub(300 + 1000);
        (created < lap).then_some((self.last, now.last))
    }
}

/// `/proc/sys/kernel/pid_max` (the kernel's default when unreadable).
fn pid_max() -> u32 {
    static PID_MAX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID_MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(32_768)
    })
}

/// A process's command line (first 120 characters), for the tripwire's message.
fn command_line(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let line: String = String::from_utf8_lossy(&cmdline)
        .replace('\0', " ")
        .trim()
        .chars()
        .take(120)
        .collect();
    if !line.is_empty() {
        return line;
    }
    // Caught inside an `execve` (its new arguments not set up yet) or exiting: its name.
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("[{}]", name.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_a_command_line_is_named_by_its_comm() {
        let mut child = std::process::Command::new("sleep")
            .arg("0")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Its exit, without reaping it: a zombie has no command line.
        // SAFETY: `info` is a valid out-parameter; WNOWAIT leaves the child to `wait` below.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let waited =
            unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        assert_eq!(waited, 0);
        assert_eq!(command_line(pid), "[sleep]");
        child.wait().unwrap();
    }
    #[test]
    fn the_pids_handed_out_since_a_birth_are_a_cyclic_range() {
        assert!(in_cycle(101, 100, 200) && in_cycle(200, 100, 200));
        assert!(!in_cycle(100, 100, 200) && !in_cycle(201, 100, 200) && !in_cycle(5, 100, 200));
        // Wrapped past pid_max: what follows the start and what restarted from 300.
        assert!(in_cycle(32_000, 31_000, 400) && in_cycle(350, 31_000, 400));
        assert!(!in_cycle(20_000, 31_000, 400) && !in_cycle(401, 31_000, 400));
        assert!(!in_cycle(7, 7, 7), "nothing handed out: nothing is new");
        let then = PidCounter {
            last: 31_000,
            forks: 1_000,
        };
        let soon = PidCounter {
            last: 400,
            forks: 3_000,
        };
        assert_eq!(then.handed_out_until(&soon, 32_768), Some((31_000, 400)));
        // Near a whole lap of the counter every pid may be new: the full table is read.
        let lap = PidCounter {
            last: 400,
            forks: 1_000 + 31_500,
        };
        assert_eq!(then.handed_out_until(&lap, 32_768), None);
    }

    #[test]
    fn a_process_started_after_a_birth_is_in_its_scan_and_an_older_one_is_not() {
        let older = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        // Afresh: a shared reading (`now`) may be older than `older`.
        let birth = Birth::read();
        let mut newer = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pids: Vec<u32> = birth.processes_since().iter().map(|p| p.pid).collect();
        assert!(pids.contains(&newer.id()), "{pids:?}");
        assert!(!pids.contains(&older.id()), "{pids:?}");
        let mut older = older;
        for child in [&mut older, &mut newer] {
            child.kill().expect("kill");
            child.wait().expect("wait");
        }
    }

    /// Sandboxes made together share one reading of the pid counter, which is never later
    /// than a fresh one (an earlier birth only widens a scan).
    #[test]
    fn a_shared_birth_is_never_later_than_a_fresh_one() {
        let shared = Birth::now();
        let fresh = Birth::read();
        let again = Birth::now();
        assert!(shared.ticks <= fresh.ticks && again.ticks <= fresh.ticks);
        let (Some(shared), Some(fresh)) = (shared.pids, fresh.pids) else {
            panic!("this host shows its pid counter in /proc");
        };
        assert!(shared.forks <= fresh.forks);
    }

    #[test]
    fn a_leftover_whose_name_is_not_utf8_is_found_and_killed() {
        use std::os::unix::ffi::OsStrExt;
        let home = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"\xff\xfe");
        let program = home.path().join(name);
        std::fs::copy("/bin/sleep", &program).unwrap();
        let birth = Birth::now();
        let mut child = std::process::Command::new(&program)
            .arg("30")
            .env("HOME", home.path())
            .spawn()
            .expect("the copied sleep");
        let pid = child.id();
        // Until the exec is done the name is still ours; wait for the agent's.
        for _ in 0..200 {
            let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with(b"\xff") {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(process_row(pid).is_some(), "its /proc row is read");
        let killed =
            kill_local_leftovers(home.path(), &[], None, &LeftoverRules::default(), &birth)
                .0
                .leftovers;
        let status = child.wait().unwrap();
        assert!(
            killed.iter().any(|k| k.starts_with(&format!("{pid} "))),
            "{killed:?}"
        );
        assert!(!status.success(), "killed, not finished: {status}");
    }

    /// A registered framework shell is passed over by every sandbox's scan, even one whose
    /// `HOME` it carries; once its registration is dropped it is a leftover like any other.
    #[test]
    fn a_registered_framework_shell_is_passed_over_until_it_is_unregistered() {
        let home = tempfile::tempdir().unwrap();
        let birth = Birth::now();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("HOME", home.path())
            .spawn()
            .expect("sleep");
        let pid = child.id();
        // Wait for the exec: before it the environment is this process's.
        let marker = format!("HOME={}", home.path().display());
        for _ in 0..200 {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if env.split(|&b| b == 0).any(|e| e == marker.as_bytes()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let registered = FrameworkShell::register(pid);
        let killed =
            kill_local_leftovers(home.path(), &[], None, &LeftoverRules::default(), &birth)
                .0
                .leftovers;
        assert!(killed.is_empty(), "{killed:?}");
        drop(registered);
        let killed =
            kill_local_leftovers(home.path(), &[], None, &LeftoverRules::default(), &birth)
                .0
                .leftovers;
        let status = child.wait().unwrap();
        assert!(
            killed.iter().any(|k| k.starts_with(&format!("{pid} "))),
            "{killed:?}"
        );
        assert!(!status.success(), "killed, not finished: {status}");
    }

    /// Scans that run together share their `/proc` readings, and each still finds exactly its
    /// own sandbox's leftover. Each leftover starts after its sandbox's birth and before the
    /// later sandboxes' (a shared reading must cover every waiting scan's range), and each is
    /// killed by its own scan only.
    #[test]
    fn scans_running_together_each_kill_only_their_own_leftover() {
        let homes: Vec<_> = (0..6).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut children = Vec::new();
        let mut births = Vec::new();
        for home in &homes {
            // Afresh: each sandbox its own birth, so the ranges differ.
            births.push(Birth::read());
            let child = std::process::Command::new("sleep")
                .arg("30")
                .env("HOME", home.path())
                .spawn()
                .expect("sleep");
            let (pid, marker) = (child.id(), format!("HOME={}", home.path().display()));
            for _ in 0..200 {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                if env.split(|&b| b == 0).any(|e| e == marker.as_bytes()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            children.push(child);
        }
        let start = std::sync::Barrier::new(homes.len());
        let killed: Vec<Vec<String>> = std::thread::scope(|s| {
            let scans: Vec<_> = homes
                .iter()
                .zip(&births)
                .map(|(home, birth)| {
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        kill_local_leftovers(
                            home.path(),
                            &[],
                            None,
                            &LeftoverRules::default(),
                            birth,
                        )
                        .0
                        .leftovers
                    })
                })
                .collect();
            scans.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, (killed, child)) in killed.iter().zip(&mut children).enumerate() {
            let pid = child.id();
            let status = child.wait().unwrap();
            assert_eq!(killed.len(), 1, "sandbox {i} killed {killed:?}");
            assert!(killed[0].starts_with(&format!("{pid} ")), "{i}: {killed:?}");
            assert!(!status.success(), "killed, not finished: {status}");
        }
    }
}
