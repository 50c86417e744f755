//! Tripwires: what runs between the agent phase and the verifier of every rollout, so that a
//! reward is evidence of the task being solved rather than of the check being gamed. Every
//! process the agent left running is killed (a background writer cannot race the verifier),
//! and the places a verifier trusts without looking — system binaries and Python's import
//! path, paths the author protects, hook files planted in the agent's home — are checked for
//! changes made since the agent started. Each fired wire is one line; any wire makes the
//! rollout `tampered` (see `modes::rollout`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::change_scan::{ChangeScan, FOUND_MAX};
use super::coalesced::Coalesced;
use super::{ExecRequest, Sandbox, SandboxError, SandboxSpec};

/// Deadline of each tripwire command or scan.
pub(crate) const WIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most paths or processes named in one wire's message.
const SHOWN: usize = 8;

/// Directories whose contents a verifier runs without checking them: the standard `PATH`
/// and Python's standard library and site packages, plus the shell and loader start-up files.
pub const SYSTEM_ROOTS: &[&str] = &[
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/bin",
    "/sbin",
    "/usr/lib/python3",
    "/usr/local/lib/python3",
    "/etc/profile",
    "/etc/bash.bashrc",
    "/etc/environment",
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/python3",
];

/// Paths the container engine itself adds (the `--init` binary), never the agent's.
const ENGINE_PATHS: &[&str] = &["/usr/sbin/docker-init"];

/// File names that change what Python or pytest does wherever they are found (start-up
/// hooks, import-path files, plugin and config files, shadows of the test runner).
pub const HOOK_NAMES: &[&str] = &[
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
    "conftest.py",
    "pytest.py",
    "pytest.ini",
    "_pytest",
    "pluggy",
    "unittest",
];

/// Standard-library modules a verifier's Python imports most; a file or package of that name
/// in the home (the verifier's working directory, first on `sys.path`) shadows it.
pub const SHADOWED_MODULES: &[&str] = &[
    "json",
    "os",
    "sys",
    "re",
    "subprocess",
    "shutil",
    "pathlib",
    "io",
    "math",
    "random",
    "string",
    "time",
    "datetime",
    "collections",
    "functools",
    "itertools",
    "typing",
    "types",
    "unittest",
    "doctest",
    "argparse",
    "logging",
    "tempfile",
    "glob",
    "difflib",
    "hashlib",
    "inspect",
    "importlib",
    "traceback",
    "ast",
    "csv",
    "decimal",
    "fractions",
    "statistics",
    "operator",
    "copy",
    "pickle",
    "struct",
    "textwrap",
    "contextlib",
    "dataclasses",
    "enum",
    "abc",
    "signal",
    "socket",
    "threading",
    "multiprocessing",
    "warnings",
    "site",
    "encodings",
];

/// The in-sandbox leftover killer (container backends), run by the exec's own shell after
/// `keep=" PIDS "` (the trees kept).
/// Everything else except init (pid 1), the container's entrypoint (the first child of init)
/// and this script with its own children is killed with SIGKILL, in up to three passes so
/// respawning parents do not escape; each killed process is printed as `pid name`. Only
/// shell builtins are used: the agent may have replaced any program on `PATH`.
pub const LEFTOVER_SCRIPT: &str = r#"me=$$; entry=
field() { hv=; while read -r k v _; do [ "$k" = "$2:" ] && hv=$v; done 2>/dev/null < "/proc/$1/status"; }
for d in /proc/[0-9]*; do p=${d#/proc/}; field "$p" PPid; [ "$hv" = 1 ] && { [ -z "$entry" ] || [ "$p" -lt "$entry" ]; } && entry=$p; done
spared() { q=$1; while [ -n "$q" ] && [ "$q" -gt 1 ]; do [ "$q" = "$me" ] && return 0; case "$keep" in *" $q "*) return 0;; esac; field "$q" PPid; q=$hv; done; return 1; }
for round in 1 2 3; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case " 1 $entry $me " in *" $p "*) continue;; esac
    [ -r "$d/status" ] || continue
    field "$p" State
    [ "$hv" = Z ] && continue
    spared "$p" && continue
    cmd=; read -r cmd 2>/dev/null < "$d/comm"
    kill -KILL "$p" 2>/dev/null && { echo "$p $cmd"; found=1; }
  done
  [ -z "$found" ] && break
done
exit 0"#;

/// Runs [`LEFTOVER_SCRIPT`] in `sandbox`.
pub async fn kill_leftovers_inside<S: Sandbox + ?Sized>(
    sandbox: &S,
    keep: &[u32],
) -> Result<Vec<String>, SandboxError> {
    let keep: Vec<String> = keep.iter().map(u32::to_string).collect();
    let command = format!("keep=' {} '\n{LEFTOVER_SCRIPT}", keep.join(" "));
    let out = wire_exec(sandbox, command).await?;
    Ok(lines(&out.output))
}

/// Runs one wire's command. One that does not finish in time found nothing it can vouch for
/// (its output may be someone else's: a command the agent queued in its own shell, through the
/// shell's stdin, runs first and can hold the shell past the deadline), so it is an error, never
/// a clean result.
async fn wire_exec<S: Sandbox + ?Sized>(
    sandbox: &S,
    command: String,
) -> Result<super::ExecOutput, SandboxError> {
    let out = sandbox
        .exec(ExecRequest::new(command, WIRE_TIMEOUT).with_workdir("/"))
        .await?;
    if out.timed_out {
        return Err(SandboxError::Io(format!(
            "a tripwire check did not finish within {} s in the sandbox",
            WIRE_TIMEOUT.as_secs()
        )));
    }
    Ok(out)
}

/// The local backend's leftovers: processes (other than this one) in one of the sandbox's
/// process groups or carrying its `HOME` (so `setsid`/`nohup` escapes are found too), outside
/// the trees rooted at `keep`. Each is killed; returns `(pid, command)` per killed process.
/// Only processes started since `birth` can be the sandbox's: only the pids the host handed
/// out since are read (one `stat` read each), and of those only the ones started after it
/// have their environment read. The framework's own shells ([`FrameworkShell`], this
/// sandbox's and every other's) are passed over unread.
pub(crate) fn kill_local_leftovers(
    home: &Path,
    groups: &[i32],
    keep: &[u32],
    birth: &Birth,
) -> Vec<String> {
    let marker = format!("HOME={}", home.display());
    let me = std::process::id();
    let (mut killed, mut killed_pids) = (Vec::new(), Vec::new());
    for _round in 0..3 {
        let table = birth.processes_since();
        let kept = |pid: u32| {
            let mut q = pid;
            for _ in 0..64 {
                if keep.contains(&q) {
                    return true;
                }
                match table.iter().find(|p| p.pid == q) {
                    Some(p) if p.ppid > 1 => q = p.ppid,
                    _ => return false,
                }
            }
            false
        };
        let carries_home = |pid: u32| {
            environment(pid)
                .is_some_and(|env| env.split(|&b| b == 0).any(|e| e == marker.as_bytes()))
        };
        let mut found = false;
        for p in &table {
            // Kernel threads (children of kthreadd, pid 2) have no environment to read.
            let kernel = p.pid == 2 || p.ppid == 2;
            if p.pid == me || p.zombie || kernel {
                continue;
            }
            if killed_pids.contains(&p.pid) {
                // Killed in an earlier round and not reaped yet.
                continue;
            }
            let ours =
                groups.contains(&p.pgrp) || (p.started >= birth.ticks && carries_home(p.pid));
            if !ours || kept(p.pid) {
                continue;
            }
            let command = command_line(p.pid);
            // SAFETY: kill(2) on a pid; no memory is touched.
            if unsafe { libc::kill(p.pid as i32, libc::SIGKILL) } == 0 {
                killed.push(format!("{} {command}", p.pid));
                killed_pids.push(p.pid);
                found = true;
            }
        }
        if !found {
            break;
        }
    }
    killed
}

/// The pids of the persistent shells of this process's local sandboxes. A leftover scan
/// reads nothing of them: the framework started them (each with its sandbox's `HOME`), and at
/// 8 groups in flight their `stat` and environment reads were most of each scan. A pid here is
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
/// the middle of `execve` shows an empty one for a moment (a `nohup setsid bash …` chain did in
/// 4 % of reads here), so an empty block is read again, for up to 100 ms, before it is believed.
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

/// A `/proc` file in one `read(2)` where it fits 4 KiB. `fs::read` and `read_to_end` cost three
/// system calls more per file (a `statx` and an `lseek` for a size hint `/proc` does not give,
/// and a last read to see the end), and the leftover scan reads dozens of these per rollout.
/// A `/proc` file returns all it has up to the buffer's size in one read, so a short read is
/// its end; a full one is followed by more reads.
fn read_proc(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut bytes = vec![0; 4096];
    let mut len = 0;
    loop {
        let n = file.read(&mut bytes[len..]).ok()?;
        len += n;
        if len < bytes.len() {
            bytes.truncate(len);
            return Some(bytes);
        }
        bytes.resize(bytes.len() * 2, 0);
    }
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
    /// together, and the pid counter costs two `/proc` reads (15 µs here). An earlier birth is
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
/// started since) cost about 0.4 ms here.
static PROC_READINGS: Coalesced<Birth, ProcReading> = Coalesced::gathering_for(PROC_READING_GATHER);

/// How long a leftover scan waits for others to share its `/proc` reading: a rollout's
/// verification starts that much later at most, against seconds of LLM turns; in the
/// `vs_python` bench it took the framework's own CPU per turn from 0.386 to 0.350 ms (six
/// alternating runs each, rollouts/s unchanged; 20 ms gained nothing more).
const PROC_READING_GATHER: Duration = Duration::from_millis(10);

/// One reading of `/proc` for the leftover scans waiting for it ([`Coalesced`]): a group's
/// rollouts end together, and each scan listing `/proc` and reading the `stat` of every
/// process started since its sandbox was made was a fifth of the framework's CPU per turn
/// in the `vs_python` bench. A scan is given only a reading begun after it asked, as its own
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

/// The boot clock in `/proc/PID/stat` start-time ticks, exactly as the kernel counts a
/// process's start (its boot-clock nanoseconds divided down to `USER_HZ`): a process started
/// after one reading and before another shows a start time between the two.
pub(crate) fn ticks_now() -> u64 {
    // SAFETY: clock_gettime only writes into the timespec we pass.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts);
        ts
    };
    let nanos = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    nanos / (1_000_000_000 / ticks_per_second()).max(1)
}

/// The boot clock in `/proc/PID/stat` start-time ticks, one second early (so a process
/// started in the same tick is never missed).
pub fn boot_ticks() -> u64 {
    ticks_now().saturating_sub(ticks_per_second())
}

/// `USER_HZ`, the unit of `/proc/PID/stat` start times.
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64 }
}

/// One row of `/proc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessRow {
    pub pid: u32,
    pub ppid: u32,
    pub pgrp: i32,
    pub zombie: bool,
    /// Start time, boot-clock ticks.
    pub started: u64,
}

/// The rows of the processes whose pid passes `wanted`.
fn process_table(wanted: impl Fn(u32) -> bool) -> Vec<ProcessRow> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| wanted(*pid))
        .filter_map(process_row)
        .collect()
}

/// The `/proc/PID/stat` row of `pid`, when that process exists.
pub(crate) fn process_row(pid: u32) -> Option<ProcessRow> {
    // Lossy: a command name is any bytes the agent chose (`./$'\xff' &` must not hide).
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    let stat = String::from_utf8_lossy(&stat);
    // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
    let mut fields = stat[stat.rfind(')')? + 2..].split_whitespace();
    let zombie = fields.next()? == "Z";
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 22 of the stat line (the iterator is at field 6).
    let started = fields.nth(16)?.parse().ok()?;
    Some(ProcessRow {
        pid,
        ppid,
        pgrp,
        zombie,
        started,
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

/// When the agent phase of a rollout began; changes after it are the agent's.
#[derive(Debug, Clone, Copy)]
pub struct Armed {
    since: SystemTime,
}

impl Armed {
    /// Arms the wires now (call before the agent's first command).
    pub fn now() -> Self {
        Armed {
            since: SystemTime::now(),
        }
    }

    fn epoch_seconds(&self) -> u64 {
        self.since
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}

/// Runs every wire before verification: kills the agent's leftover processes (the `process`
/// tool's own are stopped by the caller), then checks what changed. Returns one line per
/// fired wire (empty: verification may proceed).
pub async fn inspect(
    sandbox: &dyn Sandbox,
    spec: &SandboxSpec,
    armed: &Armed,
    keep: &[u32],
) -> Result<Vec<String>, SandboxError> {
    let mut wires = Vec::new();
    let leftovers = sandbox.kill_leftover_processes(keep).await?;
    if !leftovers.is_empty() {
        wires.push(format!(
            "{} process(es) outlived the agent phase (killed before verification): {}",
            leftovers.len(),
            shown(&leftovers)
        ));
    }
    let engine_changes = sandbox.changed_paths().await?;
    // Protected paths are scanned only where the engine cannot report changes itself.
    let protected = match &engine_changes {
        Some(_) => &[][..],
        None => &spec.protected_paths[..],
    };
    let scans = [
        changed_since(protected, armed, false),
        changed_since(&["~".to_owned()], armed, true),
        shadows(armed),
    ];
    let [protected_changes, mut hooks, shadowing] = found(sandbox, scans).await?;
    let changed = match engine_changes {
        Some(paths) => watched_changes(&paths, spec),
        None => protected_changes,
    };
    if !changed.is_empty() {
        wires.push(format!(
            "{} path(s) the verifier relies on changed during the agent phase: {}",
            changed.len(),
            shown(&changed)
        ));
    }
    hooks.extend(shadowing);
    if !hooks.is_empty() {
        wires.push(format!(
            "{} Python/pytest hook or module shadow(s) planted in the agent's home: {}",
            hooks.len(),
            shown(&hooks)
        ));
    }
    Ok(wires)
}

/// The engine-reported changes under the watched roots (system roots unless the spec allows
/// system changes, and the spec's protected paths); byte-code caches are not evidence.
pub fn watched_changes(paths: &[String], spec: &SandboxSpec) -> Vec<String> {
    let system: &[&str] = if spec.mutable_system {
        &[]
    } else {
        SYSTEM_ROOTS
    };
    // `…/python3` roots also cover versioned directories (`python3.11`).
    let under = |path: &str, root: &str| {
        let root = root.trim_end_matches('/');
        path.strip_prefix(root).is_some_and(|rest| {
            rest.is_empty() || rest.starts_with('/') || root.ends_with("python3")
        })
    };
    let mut out: Vec<String> = paths
        .iter()
        .filter(|p| !p.contains("/__pycache__") && !p.ends_with(".pyc"))
        .filter(|p| !ENGINE_PATHS.contains(&p.as_str()))
        .filter(|p| {
            system.iter().any(|r| under(p, r)) || spec.protected_paths.iter().any(|r| under(p, r))
        })
        .cloned()
        .collect();
    // A changed file also reports its changed parent directories; keep the deepest paths.
    out.retain(|p| {
        !paths
            .iter()
            .any(|q| q.len() > p.len() && q.starts_with(&format!("{p}/")))
    });
    out
}

/// The scan for standard-library shadows the agent created directly in its home.
fn shadows(armed: &Armed) -> ChangeScan {
    static NAMES: LazyLock<Arc<[String]>> = LazyLock::new(|| {
        SHADOWED_MODULES
            .iter()
            .flat_map(|m| [format!("{m}.py"), (*m).to_owned()])
            .collect()
    });
    ChangeScan {
        roots: vec!["~".to_owned()],
        names: NAMES.clone(),
        top_level: true,
        since: armed.epoch_seconds(),
    }
}

/// Runs the scans of the wires (a scan without roots finds nothing): in this process where
/// the backend can ([`Sandbox::scan_changes`], all in one call), else each as `find` in the
/// sandbox. A sandbox without `find` cannot be scanned: one WARN line says so and its scans
/// find nothing (on Docker the engine's change list still covers the system directories, and
/// deleting `find` is a change).
async fn found<const N: usize>(
    sandbox: &dyn Sandbox,
    scans: [ChangeScan; N],
) -> Result<[Vec<String>; N], SandboxError> {
    let rootless = scans.each_ref().map(|s| s.roots.is_empty());
    let wanted: Vec<ChangeScan> = scans.into_iter().filter(|s| !s.roots.is_empty()).collect();
    let mut results = match sandbox.scan_changes(&wanted).await? {
        Some(results) if results.len() == wanted.len() => results,
        Some(results) => {
            return Err(SandboxError::Io(format!(
                "the backend answered {} of {} tripwire scans",
                results.len(),
                wanted.len()
            )))
        }
        None => find_in_sandbox(sandbox, &wanted).await?,
    }
    .into_iter();
    // As many results as scans with roots (checked above), in their order.
    Ok(rootless.map(|rootless| {
        if rootless {
            Vec::new()
        } else {
            results.next().unwrap_or_default()
        }
    }))
}

/// The scans as `find` commands in the sandbox, one after the other; all find nothing when
/// the sandbox has no `find`.
async fn find_in_sandbox(
    sandbox: &dyn Sandbox,
    scans: &[ChangeScan],
) -> Result<Vec<Vec<String>>, SandboxError> {
    let mut results = Vec::with_capacity(scans.len());
    for scan in scans {
        let command = format!(
            "command -v find >/dev/null 2>&1 || {{ echo 'no find'; exit 127; }}; {}; exit 0",
            scan.find_command()
        );
        let out = wire_exec(sandbox, command).await?;
        if out.exit_code != 0 {
            tracing::warn!(
                "tripwire: the sandbox has no usable `find` (exit {}); the paths it protects and its home were not scanned for changes or planted hooks",
                out.exit_code
            );
            return Ok(vec![Vec::new(); scans.len()]);
        }
        let mut paths = lines(&out.output);
        paths.truncate(FOUND_MAX);
        results.push(paths);
    }
    Ok(results)
}

/// The scan for files under `roots` whose inode changed since `armed` (ctime: not forgeable
/// with `touch`), all of them or only [`HOOK_NAMES`].
fn changed_since(roots: &[String], armed: &Armed, hooks_only: bool) -> ChangeScan {
    static HOOKS: LazyLock<Arc<[String]>> =
        LazyLock::new(|| HOOK_NAMES.iter().map(|n| (*n).to_owned()).collect());
    static ALL: LazyLock<Arc<[String]>> = LazyLock::new(|| Arc::new([]));
    ChangeScan {
        roots: roots.to_vec(),
        names: Arc::clone(if hooks_only { &HOOKS } else { &ALL }),
        top_level: false,
        since: armed.epoch_seconds(),
    }
}

fn lines(output: &str) -> Vec<String> {
    output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn shown(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > SHOWN {
        text.push_str(&format!("; … {} more", items.len() - SHOWN));
    }
    text
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
        let killed = kill_local_leftovers(home.path(), &[], &[], &birth);
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
        let killed = kill_local_leftovers(home.path(), &[], &[], &birth);
        assert!(killed.is_empty(), "{killed:?}");
        drop(registered);
        let killed = kill_local_leftovers(home.path(), &[], &[], &birth);
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
                        kill_local_leftovers(home.path(), &[], &[], birth)
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

    #[test]
    fn engine_changes_are_filtered_to_watched_roots() {
        let spec = SandboxSpec::default().protect("/oracle");
        let paths: Vec<String> = [
            "/usr",
            "/usr/local",
            "/usr/local/bin",
            "/usr/local/bin/pytest",
            "/usr/lib/python3.11/__pycache__/x.cpython-311.pyc",
            "/usr/lib/python3.11/site-packages/evil.pth",
            "/root/workspace/solution.py",
            "/tmp/hermes-1/bg",
            "/oracle/answer.txt",
            "/etc/hosts",
            "/usr/sbin/docker-init",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            watched_changes(&paths, &spec),
            [
                "/usr/local/bin/pytest",
                "/usr/lib/python3.11/site-packages/evil.pth",
                "/oracle/answer.txt"
            ]
        );
        let open = SandboxSpec {
            mutable_system: true,
            ..SandboxSpec::default()
        };
        assert!(watched_changes(&paths, &open).is_empty());
    }
}
