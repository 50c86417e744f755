//! The local backend's boundary, where the kernel allows one. Every process a local sandbox
//! starts (its shell, one-shot commands, programs started without a shell) enters, before it
//! `exec`s:
//! - a **Landlock domain**: it reads and runs the system (`/usr`, `/etc`, the directories on
//!   its `PATH`, …), writes only its own scratch and temp directories and a few devices, cannot
//!   read a sibling's directory or the user's files, and cannot signal or `ptrace` a process
//!   outside its domain — which also keeps `/proc/<pid>/environ` of this process out of its
//!   reach;
//! - a **cgroup** of its own under this run's: the leftover scan lists its members whatever
//!   their environment, session or name, and teardown kills them all at once (`cgroup.kill`).
//!
//! What the kernel cannot give is said once at start, as a warning naming the knob
//! (`--env.local_confinement`). Named UNIX sockets are outside Landlock's file rules: a
//! sandbox running as a user who may use the Docker socket can still reach the daemon.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use tokio::process::Command;

use tracing::{debug, info, warn};

use super::local_reaper;
use crate::sandbox::SandboxError;

/// The Landlock ABI whose rights the rulesets handle (best effort below it).
const ABI_USED: ABI = ABI::V6;

/// `CAP_SYS_PTRACE` (linux/capability.h).
const CAP_SYS_PTRACE: libc::c_ulong = 19;

/// System trees a confined sandbox reads and runs programs from.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys",
];

/// Devices a confined sandbox reads and writes (besides its own terminal).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// What the kernel allows this run, probed once per provider.
#[derive(Debug)]
pub(crate) struct Confiner {
    /// Landlock's ABI version, when confinement is on and the kernel has Landlock.
    landlock: Option<i32>,
    /// Directories read (and run from) besides [`SYSTEM_READ`]: the `PATH`'s.
    path_dirs: Vec<PathBuf>,
    /// The rules every sandbox shares (the system trees, the `PATH`'s directories, the
    /// devices), their paths opened once for the run: a process's ruleset is built from them
    /// when it starts, so a live sandbox holds no descriptor of its own.
    shared_rules: Vec<(PathFd, BitFlags<AccessFs>)>,
    /// This run's cgroup, when one could be made.
    cgroups: Option<PathBuf>,
}

impl Confiner {
    /// No confinement: the sandbox's processes are the user's.
    pub fn off() -> Self {
        Confiner {
            landlock: None,
            path_dirs: Vec::new(),
            shared_rules: Vec::new(),
            cgroups: None,
        }
    }

    /// Probes Landlock and cgroup v2 for a run named `run`, commands having `path` as `PATH`;
    /// says in one line what each sandbox gets (a warning for what it cannot get).
    pub fn probe(run: &str, path: &OsStr) -> Self {
        let path_dirs = readable_path_dirs(path);
        let landlock = landlock_abi().and_then(|abi| {
            let rules = shared_rules(&path_dirs)
                .map_err(|e| format!("cannot open the paths its rules name ({e})"))?;
            Ok((abi, rules))
        });
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let cgroups = run_cgroup(run, &mounts);
        match (&landlock, &cgroups) {
            (Ok((abi, _)), Ok(cg)) => info!(
                "local sandboxes: confined (Landlock ABI {abi}: each reads the system and its \
                 PATH, writes only its own directory, signals nothing outside it; cgroup {} \
                 kills each sandbox's processes as one); --env.local_confinement false turns it off",
                cg.display()
            ),
            _ => warn!(
                "local sandboxes are NOT fully confined: {}{}; a rollout's commands can {}. Use \
                 --env.terminal_backend docker for isolation (--env.local_confinement false \
                 silences this)",
                landlock
                    .as_ref()
                    .err()
                    .map(|e| format!("no Landlock ({e})"))
                    .unwrap_or_default(),
                cgroups
                    .as_ref()
                    .err()
                    .map(|e| {
                        let sep = if landlock.is_err() { "; " } else { "" };
                        format!("{sep}no cgroup per sandbox ({e})")
                    })
                    .unwrap_or_default(),
                match (&landlock, &cgroups) {
                    (Err(_), Err(_)) => "read and write the user's and other rollouts' files, \
                                         and a process that leaves its session can outlive it",
                    (Err(_), _) => "read and write the user's and other rollouts' files",
                    _ => "leave a process that left its session running until teardown",
                }
            ),
        }
        if cgroups.is_ok() {
            let features =
                std::fs::read_to_string("/sys/kernel/cgroup/features").unwrap_or_default();
            if let Some(hint) = join_wait_hint(&mounts, &features) {
                info!("{hint}");
            }
        }
        if landlock.is_ok() {
            // Its `/proc/<pid>/…` (environment, memory, descriptors: the user's secrets, the
            // other sandboxes' pipes) then needs CAP_SYS_PTRACE, which confined commands drop.
            // SAFETY: prctl(2) with integer arguments.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        }
        let (landlock, shared_rules) = match landlock {
            Ok((abi, rules)) => (Some(abi), rules),
            Err(_) => (None, Vec::new()),
        };
        Confiner {
            landlock,
            path_dirs,
            shared_rules,
            cgroups: cgroups.ok(),
        }
    }

    /// Whether sandboxes are confined by Landlock.
    pub fn confines_files(&self) -> bool {
        self.landlock.is_some()
    }

    /// Whether a confined sandbox's file tools may read `real` (a path without links) outside
    /// its own directories: in the system trees and `PATH` directories its commands read,
    /// except `/proc` and `/sys` (this process's own files are there).
    pub fn file_tools_read(&self, real: &Path) -> bool {
        let system = SYSTEM_READ
            .iter()
            .filter(|d| !matches!(**d, "/proc" | "/sys"))
            .map(Path::new);
        let path_dirs = self.path_dirs.iter().map(PathBuf::as_path);
        system.chain(path_dirs).any(|d| real.starts_with(d))
    }

    /// The domain of one sandbox writing `writable` (directories) and the files `files` (its
    /// shell's state files). Nothing is made here: they and the sandbox's cgroup are made when
    /// its first process starts ([`Domain::ready`]), and a sandbox whose processes never start
    /// (a verifier that reads and writes files only) costs no directory, file or cgroup more
    /// than its own scratch directory.
    pub fn domain(self: &Arc<Self>, name: &str, writable: &[&Path], files: &[&Path]) -> Domain {
        Domain {
            landlock: self.landlock.map(|_| Landlock {
                shared: Arc::clone(self),
                writable: writable.iter().map(|p| p.to_path_buf()).collect(),
                files: files.iter().map(|p| p.to_path_buf()).collect(),
            }),
            cgroup_at: self.cgroups.as_ref().map(|run| run.join(cgroup_name(name))),
            cgroup: OnceLock::new(),
        }
    }
}

/// The rules every confined sandbox shares, their paths opened: the system trees and `PATH`
/// directories to read and run, the devices to read and write.
fn shared_rules(path_dirs: &[PathBuf]) -> Result<Vec<(PathFd, BitFlags<AccessFs>)>, String> {
    let read = AccessFs::from_read(ABI_USED);
    let device: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let reads = SYSTEM_READ
        .iter()
        .map(PathBuf::from)
        .chain(path_dirs.iter().cloned())
        .map(|p| (p, read));
    let devices = DEVICES.iter().map(|d| (PathBuf::from(d), device));
    let pts =
        Some((PathBuf::from("/dev/pts"), device | AccessFs::ReadDir)).filter(|(p, _)| p.is_dir());
    reads
        .chain(devices)
        .chain(pts)
        .filter(|(p, _)| p.exists())
        .map(|(p, access)| {
            PathFd::new(&p)
                .map(|fd| (fd, access))
                .map_err(|e| e.to_string())
        })
        .collect()
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A confined sandbox's Landlock rules: the run's shared ones and its own directories and
/// files, opened each time a process starts.
#[derive(Debug)]
struct Landlock {
    shared: Arc<Confiner>,
    writable: Vec<PathBuf>,
    files: Vec<PathBuf>,
}

impl Landlock {
    /// The ruleset a starting process restricts itself to; `None` where the kernel has no
    /// Landlock after all.
    fn ruleset(&self) -> Result<Option<OwnedFd>, BoxError> {
        let all = AccessFs::from_all(ABI_USED);
        let state: BitFlags<AccessFs> =
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)?
            .scope(Scope::from_all(ABI_USED))?
            .create()?;
        for (fd, access) in &self.shared.shared_rules {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, *access))?;
        }
        for p in &self.writable {
            ruleset = ruleset.add_rule(PathBeneath::new(PathFd::new(p)?, all))?;
        }
        for p in &self.files {
            ruleset = ruleset.add_rule(PathBeneath::new(PathFd::new(p)?, state))?;
        }
        Ok(ruleset.into())
    }
}

/// One sandbox's Landlock rules and cgroup; dropping it kills what is left in the cgroup and
/// removes it. It holds no descriptor: each process it starts opens what it needs
/// ([`Domain::enter`]), so thousands of live sandboxes cost no open files.
#[derive(Debug, Default)]
pub(crate) struct Domain {
    landlock: Option<Landlock>,
    /// Where its cgroup is made, when the run has cgroups.
    cgroup_at: Option<PathBuf>,
    /// Set once the domain is [`Domain::ready`]: its cgroup, when it could be made.
    cgroup: OnceLock<Option<Arc<SandboxCgroup>>>,
}

/// The descriptors a process entering a [`Domain`] uses until it `exec`s: keep it until the
/// command has been spawned.
#[must_use = "the spawned process reads these descriptors: keep them until it has started"]
#[derive(Debug)]
pub(crate) struct Entered {
    _ruleset: Option<OwnedFd>,
    _procs: Option<OwnedFd>,
}

impl Domain {
    /// Makes `command`'s process enter the domain before it `exec`s. Without rules or a
    /// cgroup the command is left as it is (started without a fork). A ruleset or cgroup
    /// that cannot be opened (this process out of open files) is an error: a command never
    /// runs less confined than its sandbox.
    ///
    /// The spawn that follows waits for the child's join of its cgroup: a kernel RCU grace
    /// period (24–27 ms of the async thread, `overhead -- --confinement`) when no process
    /// joined a cgroup just before, none under load or on a hierarchy mounted `favordynmods`
    /// ([`join_wait_hint`] says so at start). It stays on the calling thread: spawned from
    /// the blocking pool, the forks contend with this thread for the process's memory map,
    /// which cost more CPU per turn at 4,096 live rollouts than the waits.
    pub fn enter(&self, command: &mut Command) -> Result<Entered, SandboxError> {
        self.ready()?;
        let confine = |e: BoxError| SandboxError::Confine { source: e };
        let ruleset = match &self.landlock {
            Some(rules) => rules.ruleset().map_err(confine)?,
            None => None,
        };
        let procs = match self.made_cgroup() {
            Some(cgroup) => Some(cgroup.open_procs().map_err(|e| confine(e.into()))?),
            None => None,
        };
        let entered = Entered {
            _ruleset: ruleset,
            _procs: procs,
        };
        let ruleset = entered._ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let procs = entered._procs.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        if ruleset < 0 && procs < 0 {
            return Ok(entered);
        }
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe system calls (write, prctl, landlock_restrict_self) on descriptors
        // the caller keeps open (`Entered`) while it spawns; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                if procs >= 0 && libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                if ruleset >= 0 {
                    // Without CAP_SYS_PTRACE, root's commands are held to this process being
                    // non-dumpable: its `/proc/<pid>/{environ,mem,fd}` are out of reach. A
                    // user without the capability cannot drop it (EPERM), and has none to lose.
                    libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0);
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(entered)
    }

    /// Makes what the sandbox's processes write (its directories, its shell's state files)
    /// and its cgroup, once: before its first process starts, or its temp directory is first
    /// used by a file tool. A cgroup that cannot be made is said (once a run) and done without.
    pub fn ready(&self) -> Result<(), SandboxError> {
        if self.cgroup.get().is_some() {
            return Ok(());
        }
        if let Some(rules) = &self.landlock {
            for dir in &rules.writable {
                std::fs::create_dir_all(dir).map_err(|e| SandboxError::CreateIo {
                    doing: format!("creating {}", dir.display()),
                    source: e,
                })?;
            }
            for file in &rules.files {
                // Never truncated: a concurrent first start may have a shell writing it.
                let made = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file);
                made.map_err(|e| SandboxError::CreateIo {
                    doing: format!("creating {}", file.display()),
                    source: e,
                })?;
            }
        }
        self.cgroup.get_or_init(|| {
            let dir = self.cgroup_at.clone()?;
            match std::fs::create_dir(&dir) {
                Ok(()) => Some(Arc::new(SandboxCgroup {
                    dir,
                    removed: AtomicBool::new(false),
                })),
                Err(e) => {
                    static SAID: AtomicBool = AtomicBool::new(false);
                    say_once(&SAID, format!("local sandbox cgroup {}: cannot make it ({e}); its processes are found by their environment only", dir.display()));
                    None
                }
            }
        });
        Ok(())
    }

    /// Whether the domain was made ready: only then can the sandbox have a process, a temp
    /// directory or a state file to remove.
    pub fn is_ready(&self) -> bool {
        self.cgroup.get().is_some()
    }

    fn made_cgroup(&self) -> Option<&Arc<SandboxCgroup>> {
        self.cgroup.get().and_then(Option::as_ref)
    }

    /// Whether the sandbox's processes are confined by Landlock.
    pub fn confines_files(&self) -> bool {
        self.landlock.is_some()
    }

    /// The `cgroup.procs` file listing the sandbox's processes, when it has a cgroup.
    pub fn members_file(&self) -> Option<PathBuf> {
        self.made_cgroup().map(|c| c.dir.join("cgroup.procs"))
    }

    /// Kills every process in the sandbox's cgroup.
    pub fn kill_all(&self) {
        if let Some(cgroup) = self.made_cgroup() {
            cgroup.kill();
        }
    }

    /// The sandbox's cgroup, for [`SandboxCgroup::remove`] off the async thread.
    pub fn cgroup(&self) -> Option<Arc<SandboxCgroup>> {
        self.made_cgroup().cloned()
    }
}

/// Kills what is left in the sandbox cgroup `dir`, waits for it to empty, and removes it
/// (blocking).
fn remove_cgroup(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    wait_empty(dir);
    let _ = std::fs::remove_dir(dir);
}

/// A warning the first time in a run, then at debug: a failure that repeats for every sandbox
/// is one line, not a storm.
fn say_once(said: &AtomicBool, message: String) {
    if said.swap(true, Ordering::Relaxed) {
        debug!("{message}");
    } else {
        warn!("{message} (later sandboxes: RUST_LOG=hermes_runtime=debug)");
    }
}

/// The ABI version of the kernel's Landlock, or why there is none.
fn landlock_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: the version query reads no memory (NULL attribute, size 0).
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel has no Landlock".into(),
            Some(libc::EOPNOTSUPP) => "Landlock is disabled at boot (lsm=)".into(),
            _ => e.to_string(),
        });
    }
    Ok(abi as i32)
}

/// The `PATH`'s directories; for a virtual environment's `bin` its root (its `lib` holds what
/// its interpreter imports), for a version manager's `shims` (pyenv, rbenv, asdf) its root
/// (the shims run the manager, which runs the versions kept there). Never the user's home
/// or `/` as a whole.
fn readable_path_dirs(path: &OsStr) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut dirs = Vec::new();
    for dir in std::env::split_paths(path).filter(|d| d.is_absolute() && d.is_dir()) {
        let root = dir.parent().filter(|p| {
            let venv = p.join("pyvenv.cfg").is_file();
            let shims = dir.file_name().is_some_and(|n| n == "shims");
            (venv || shims) && p.parent().is_some() && home.as_deref() != Some(p)
        });
        dirs.push(root.map(Path::to_path_buf).unwrap_or(dir));
    }
    dirs
}

fn cgroup_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Makes this run's cgroup `run` below this process's own in the cgroup v2 hierarchy (found in
/// `mountinfo`, the text of `/proc/self/mountinfo`).
fn run_cgroup(run: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let (mount, _) = cgroup2_in(mountinfo).ok_or("no cgroup v2 hierarchy is mounted")?;
    let mount = Path::new(mount);
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 cgroup")?;
    let parent = mount.join(own.trim_start_matches('/'));
    reap_dead_cgroups(&parent);
    let dir = parent.join(run);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if !dir.join("cgroup.kill").exists() {
        let _ = std::fs::remove_dir(&dir);
        return Err("the kernel's cgroups have no cgroup.kill (Linux ≥ 5.14)".into());
    }
    Ok(dir)
}

/// Kills what is left in the cgroups of dead runs under `parent` (a run killed with SIGKILL
/// cannot remove its own) and removes them, saying so in one line.
fn reap_dead_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let (mut runs, mut processes) = (0, 0);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(local_reaper::run_pid) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        processes += count_procs(&entry.path());
        kill_tree(&entry.path());
        if std::fs::remove_dir(entry.path()).is_ok() {
            runs += 1;
        }
    }
    if runs > 0 {
        info!(
            "local sandboxes: removed the cgroups of {runs} run(s) that ended without cleaning up, \
             killing {processes} process(es) left in them"
        );
    }
}

/// The processes in the cgroup `dir` and below it.
fn count_procs(dir: &Path) -> usize {
    let here = std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let below: usize = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| count_procs(&e.path()))
        .sum();
    here + below
}

/// Where the cgroup v2 hierarchy is mounted in a `/proc/self/mountinfo` text (`/sys/fs/cgroup`,
/// or `…/unified` on a hybrid host), and its superblock options.
fn cgroup2_in(mountinfo: &str) -> Option<(&str, &str)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        let mut fs = right.split(' ');
        (fs.next()? == "cgroup2").then(|| (mount_point, fs.nth(1).unwrap_or_default()))
    })
}

/// The line saying how to take away the wait as each sandbox's first process joins its cgroup:
/// the kernel makes a migration wait for an RCU grace period (10–20 ms here; the thread starting
/// the process waits with it) unless the hierarchy is mounted `favordynmods`, which Linux ≥ 6.0
/// offers (`features`: `/sys/kernel/cgroup/features`) at some cost to every fork and exit on
/// the host. `None` when it is mounted so, or the kernel cannot.
fn join_wait_hint(mountinfo: &str, features: &str) -> Option<String> {
    let (mount, options) = cgroup2_in(mountinfo)?;
    let has = |list: &str, word: &str| list.split([',', '\n']).any(|w| w.trim() == word);
    (has(features, "favordynmods") && !has(options, "favordynmods")).then(|| {
        format!(
            "local sandboxes: each sandbox's first process waits 10-20 ms for the kernel to let \
             it join its cgroup, and the thread starting it waits too; as root, `mount -o \
             remount,favordynmods {mount}` takes the wait away (at some cost to every fork and \
             exit on this host)"
        )
    })
}

/// Removes this run's cgroup (its sandboxes' are gone by then).
pub(crate) fn remove_run_cgroup(confiner: &Confiner) {
    if let Some(dir) = &confiner.cgroups {
        kill_tree(dir);
        let _ = std::fs::remove_dir(dir);
    }
}

/// Kills everything in the cgroup `dir` and its children, then removes the children.
pub(crate) fn kill_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for child in entries.flatten().filter(|e| e.path().is_dir()) {
            kill_tree(&child.path());
            let _ = std::fs::remove_dir(child.path());
        }
    }
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    wait_empty(dir);
}

/// Waits (briefly) until the cgroup `dir` has no process: a killed process leaves its cgroup
/// when it is reaped.
fn wait_empty(dir: &Path) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        match std::fs::read_to_string(dir.join("cgroup.events")) {
            Ok(events) if events.lines().any(|l| l == "populated 1") => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => return,
        }
    }
}

/// One sandbox's cgroup.
#[derive(Debug)]
pub(crate) struct SandboxCgroup {
    dir: PathBuf,
    /// Set once removed (at teardown): the drop then has nothing left to do.
    removed: AtomicBool,
}

impl SandboxCgroup {
    /// Its `cgroup.procs`, open for a starting process to join.
    fn open_procs(&self) -> std::io::Result<OwnedFd> {
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))?;
        Ok(procs.into())
    }

    fn kill(&self) {
        if !self.removed.load(Ordering::Relaxed) {
            let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        }
    }

    /// Kills what is left in it, waits for it to empty (milliseconds: blocking, run it on the
    /// blocking pool) and removes it.
    pub fn remove(&self) {
        if !self.removed.swap(true, Ordering::Relaxed) {
            remove_cgroup(&self.dir);
        }
    }
}

impl Drop for SandboxCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 1 0:27 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
    const FEATURES: &str = "nsdelegate\nfavordynmods\nmemory_localevents\n";

    #[test]
    fn the_cgroup_join_wait_is_said_with_its_knob_unless_mounted_away_or_unsupported() {
        let hint = join_wait_hint(HYBRID, FEATURES).expect("said on a plain mount");
        assert!(
            hint.contains("mount -o remount,favordynmods /sys/fs/cgroup/unified"),
            "{hint}"
        );
        let favoured = HYBRID.replace("cgroup2 rw\n", "cgroup2 rw,favordynmods\n");
        assert_eq!(
            join_wait_hint(&favoured, FEATURES),
            None,
            "already mounted so"
        );
        assert_eq!(
            join_wait_hint(HYBRID, "nsdelegate\nmemory_localevents\n"),
            None,
            "a kernel without the option is not told to use it"
        );
        assert_eq!(join_wait_hint("", FEATURES), None, "no cgroup v2 mount");
    }
}
