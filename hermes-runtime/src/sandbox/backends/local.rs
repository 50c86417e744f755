//! The local backend: each task gets its own scratch directory (also its `$HOME`, and the
//! start of its persistent working directory), one persistent shell (started by the second
//! command: the first runs in a one-shot wrapper, which `exec`s one plain program), a command
//! of literal words only started without a shell (`direct.rs`), and each command its own
//! process group, killed on timeout and at teardown (and, when this process
//! has a controlling terminal, a session without it). Commands start from a cleared
//! environment plus an allowlist (`CommandEnv`), so the host process's secrets are not
//! inherited. It is not a security
//! boundary (same user, same network, absolute paths reach the host); use it to develop
//! environments without Docker. File transfers are plain copies.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::time::{sleep_until, Instant};
use tracing::{debug, info, warn};

use super::local_confine::{self, Confiner, Domain};
use super::local_fork::{self, LocalPrepared};
use super::local_reaper;
use super::local_spares::Spares;
use crate::sandbox::api::{
    refuse_user, ExecOutput, ExecRequest, Prepared, Sandbox, SandboxProvider, SandboxSpec, Transfer,
};
use crate::sandbox::change_scan::ChangeScan;
use crate::sandbox::error::SandboxError;
use crate::sandbox::exec::direct::{launch, InPlaceOf, Launch};
use crate::sandbox::exec::output::CappedOutput;
use crate::sandbox::exec::persistent::{
    exec_word, frameable, run_in_shell, shell_argv, PersistentShell, Piece, ShellHost, ShellLink,
};
use crate::sandbox::exec::proc_table::ticks_now;
use crate::sandbox::exec::process_groups::{kill_group, ProcessGroups};
use crate::sandbox::exec::shell::{
    exec_wrapper_argv, nonce, wrapper_argv, OutputSync, ReportReader,
};
use crate::sandbox::files::archive::{copy_file, copy_tree};
use crate::sandbox::files::bounded::{
    open_regular_no_links, read_capped, read_regular, read_regular_no_links, READ_LIMIT,
};
use crate::sandbox::files::links::check_no_link_ancestors;
use crate::sandbox::files::no_links;
use crate::sandbox::integrity::leftovers::{
    kill_local_leftovers, Birth, FrameworkShell, KeptSurvivor,
};
use crate::sandbox::integrity::tripwire::WIRE_TIMEOUT;
use crate::sandbox::queue::Queue;
use crate::sandbox::survival::{LeftoverKill, LeftoverRules};

/// Upper bound on reading after the shell's exit when its end marker is missing (a command
/// that closed the stream, or a daemon that keeps writing).
const DRAIN_MAX: Duration = Duration::from_millis(500);

/// Host variables a local command keeps (besides `HOME`, which is its scratch directory):
/// what programs need to find binaries, print text and know the time zone. Variables
/// starting with `LC_` are kept too.
const INHERITED: &[&str] = &["PATH", "LANG", "TERM", "TZ", "USER", "SHELL"];

/// `PATH` when the host process has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Whether this process has a controlling terminal (run from a shell, not from a service or
/// CI), checked once.
static HAS_TERMINAL: LazyLock<bool> = LazyLock::new(|| std::fs::File::open("/dev/tty").is_ok());

/// util-linux's `setsid`, when this host has it.
static SETSID: LazyLock<Option<PathBuf>> = LazyLock::new(|| {
    ["/usr/bin/setsid", "/bin/setsid"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
});

/// A command starting `bash` in a process group of its own (the group a timeout and the
/// teardown kill) and, when this process has a controlling terminal, in a session of its own:
/// otherwise a command could open `/dev/tty` and print on the user's screen or, where the
/// kernel allows `TIOCSTI`, type into the user's shell. Without a terminal a new group is
/// enough. With one, bash starts through `setsid(1)` (one more exec; std's `setsid` is not
/// stable, and a `pre_exec` would make std fork this process, whose copy-on-write faults
/// cost far more than the exec); without `setsid(1)`, through that
/// fork, with one warning.
fn bash_command(bash: &Path) -> Command {
    if !*HAS_TERMINAL {
        let mut command = Command::new(bash);
        command.process_group(0);
        return command;
    }
    if let Some(setsid) = SETSID.as_deref() {
        // Not a group leader (no process_group), so setsid(1) calls setsid(2) and execs bash
        // in place: the child's pid stays bash's.
        let mut command = Command::new(setsid);
        command.arg("--").arg(bash);
        return command;
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        warn!(
            "run from a terminal and setsid(1) is missing: the local backend forks this process \
             to detach each shell from the terminal (slower); install util-linux"
        )
    });
    let mut command = Command::new(bash);
    // SAFETY: the closure runs in the forked child before exec and only calls setsid(2),
    // which is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

/// The command starting a [`Launch`] detached as [`bash_command`] starts bash: without a
/// terminal in a process group of its own (`argv[0]` is the name as typed, as bash passes it),
/// with one through `setsid(1)`, which finds the program on the same `PATH`. The caller has
/// checked that `setsid(1)` is there when it is needed.
fn launch_command(launch: &Launch) -> Command {
    let mut command = match SETSID.as_deref().filter(|_| *HAS_TERMINAL) {
        None => {
            let mut command = Command::new(&launch.program);
            command.arg0(&launch.argv[0]).process_group(0);
            command
        }
        Some(setsid) => {
            let mut command = Command::new(setsid);
            command.arg("--").arg(&launch.argv[0]);
            command
        }
    };
    command
        .args(&launch.argv[1..])
        .current_dir(&launch.cwd)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)));
    command
}

/// Says (once per run at the default level, then at debug) that a program the local backend
/// would have started itself went to the shell instead, which reports what bash reports.
fn direct_start_failed(launch: &Launch, error: &std::io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let program = launch.program.display();
    if !WARNED.swap(true, Relaxed) {
        warn!(
            "could not start {program} without a shell ({error}); the command ran through bash \
             instead (later cases are logged at debug: RUST_LOG=hermes_runtime=debug)"
        );
    } else {
        debug!("could not start {program} without a shell ({error}); ran it through bash");
    }
}

/// A process's exit code as a shell reports it: 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// What every command of a provider's sandboxes inherits besides its `HOME`: the allowlisted
/// host variables ([`INHERITED`], `LC_*`) and the author's `container_env`, read once per
/// provider rather than once per sandbox (the host environment is walked and copied for it),
/// and `bash` as found on that `PATH`.
#[derive(Debug, Clone)]
struct CommandEnv {
    /// The allowlisted host variables (`PATH` defaulted when the host has none).
    inherited: Vec<(OsString, OsString)>,
    /// `container_env` entries (`KEY=VALUE`), in order.
    extra: Vec<(OsString, OsString)>,
    /// `bash` on the commands' `PATH`.
    bash: PathBuf,
}

impl CommandEnv {
    /// Reads the host variables now and adds `extra` (`KEY=VALUE` entries).
    fn read(extra: &[String]) -> Self {
        let mut inherited: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| {
                let k = k.to_string_lossy();
                INHERITED.contains(&k.as_ref()) || k.starts_with("LC_")
            })
            .collect();
        if !inherited.iter().any(|(k, _)| k == "PATH") {
            inherited.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        let extra = extra
            .iter()
            .map(|entry| {
                let (k, v) = entry.split_once('=').unwrap_or((entry, ""));
                (k.into(), v.into())
            })
            .collect();
        let mut env = CommandEnv {
            inherited,
            extra,
            bash: PathBuf::new(),
        };
        env.bash = program_in_path(&env.with_home(Path::new("/")), "bash");
        env
    }

    /// The commands' `PATH`.
    fn path(&self) -> OsString {
        self.inherited
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// The whole environment of a command in the sandbox at `home`: the inherited variables,
    /// `HOME` = the scratch directory, then the `container_env` entries (later entries win).
    /// Nothing else of the host is inherited.
    fn with_home(&self, home: &Path) -> Vec<(OsString, OsString)> {
        let mut env = self.inherited.clone();
        env.push(("HOME".into(), home.into()));
        for (k, v) in &self.extra {
            env.retain(|(old, _)| old != k);
            env.push((k.clone(), v.clone()));
        }
        env
    }
}

/// `program` looked up in the `PATH` of `env`, as the child's own lookup would find it;
/// `program` itself when no directory has it (the spawn then fails as before). An absolute
/// program lets std start children with `posix_spawn` (no copy of this multi-threaded
/// process's page tables per shell): with a changed `PATH` it must fork to search it. Every
/// sandbox of a run has the same `PATH`, so a lookup is made once per `PATH` and program, not
/// once per sandbox (a dozen `stat`s of missing files each, on a long `PATH`).
fn program_in_path(env: &[(OsString, OsString)], program: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    type Found = Vec<(OsString, String, PathBuf)>;
    static FOUND: Mutex<Found> = Mutex::new(Vec::new());
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut found = FOUND.lock().expect("program lookups poisoned");
    if let Some((_, _, at)) = found.iter().find(|(p, n, _)| *p == path && n == program) {
        return at.clone();
    }
    let at = std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    let Some(at) = at else {
        return PathBuf::from(program);
    };
    if found.len() >= 16 {
        found.clear();
    }
    found.push((path, program.to_owned(), at.clone()));
    at
}

/// Creates one scratch directory per task under a per-run root.
#[derive(Debug)]
pub struct LocalProvider {
    root: PathBuf,
    /// `root` with its links resolved, once: each scratch directory is a plain directory in it.
    physical_root: PathBuf,
    /// A per-run directory in `/dev/shm` for the shells' working-directory state files, when
    /// it can be made (else they go beside the scratch directories, under `root`).
    state_root: Option<PathBuf>,
    env: CommandEnv,
    /// What confines each sandbox's processes (nothing unless [`LocalProvider::confined`]).
    confiner: Arc<Confiner>,
    /// The commands running in the sandboxes at once, on this machine's cores.
    commands: Arc<Queue>,
    /// Emptied scratch directories, renamed into place for the next sandboxes.
    spares: Arc<Spares>,
}

/// Where the shells keep their working directory first: a file made, rewritten three times per
/// command and removed per sandbox costs less in memory than on disk, and on an ext4 without a
/// journal every inode deleted in the last minute makes each new one in its block group
/// slower to allocate (the scratch directories' included).
const STATE_DIR: &str = "/dev/shm";

impl LocalProvider {
    /// A provider rooted in a fresh directory under the system temp dir.
    pub fn new() -> std::io::Result<Self> {
        let temp = std::env::temp_dir();
        let reaped = local_reaper::reap_dead_runs(&[&temp, Path::new(STATE_DIR)]);
        if reaped.roots > 0 || reaped.processes > 0 {
            info!(
                "local sandboxes: removed the scratch roots of {} run(s) that ended without \
                 cleaning up (killed with SIGKILL or crashed) and killed {} process(es) left in them",
                reaped.roots, reaped.processes
            );
        }
        let name = format!("hermes-env-{}-{}", std::process::id(), short_id());
        let root = temp.join(&name);
        std::fs::create_dir_all(&root)?;
        local_reaper::claim(&root)?;
        let spares = Arc::new(Spares::new(&root)?);
        let state_root = Path::new(STATE_DIR).join(&name);
        let state_root = match std::fs::create_dir(&state_root) {
            Ok(()) => Some(state_root),
            Err(e) => {
                info!(
                    "local sandboxes: cannot use {STATE_DIR} for the shells' working-directory \
                     files ({e}); they go beside the scratch directories under {} (slower on \
                     disk; mount a tmpfs at {STATE_DIR} to change it)",
                    root.display()
                );
                None
            }
        };
        Ok(LocalProvider {
            physical_root: std::fs::canonicalize(&root)?,
            root,
            state_root,
            env: CommandEnv::read(&[]),
            confiner: Arc::new(Confiner::off()),
            commands: Arc::new(commands_queue(0)),
            spares,
        })
    }

    /// Bounds the commands running in the sandboxes at once (0 =
    /// [`RUN_PER_CPU`](crate::sandbox::queue::RUN_PER_CPU) per CPU of this machine).
    pub fn with_command_concurrency(mut self, at_once: usize) -> Self {
        self.commands = Arc::new(commands_queue(at_once));
        self
    }

    /// Confines each sandbox where the kernel allows (`on`), saying at start what it gets;
    /// `off` says once that the sandboxes are the user's shell.
    pub fn confined(mut self, on: bool) -> Self {
        if !on {
            info!(
                "local sandboxes: not confined (--env.local_confinement false): the model's \
                 commands read and write whatever this user can"
            );
            return self;
        }
        let run = self.root.file_name().unwrap_or_default().to_string_lossy();
        let path = self.env.path();
        self.confiner = Arc::new(Confiner::probe(&run, &path));
        self
    }

    /// Adds the author's `container_env` (`KEY=VALUE` entries) to every command's
    /// environment, as the Docker backend does.
    pub fn with_env(mut self, env: Vec<String>) -> Self {
        self.env = CommandEnv::read(&env);
        self
    }

    /// The per-run root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for LocalProvider {
    fn drop(&mut self) {
        local_confine::remove_run_cgroup(&self.confiner);
        let _ = std::fs::remove_dir_all(&self.root);
        if let Some(state_root) = &self.state_root {
            let _ = std::fs::remove_dir_all(state_root);
        }
    }
}

/// The queue of the commands running in this machine's sandboxes.
fn commands_queue(at_once: usize) -> Queue {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    Queue::commands("local sandboxes".into(), at_once, cpus)
}

/// A fresh name beside `path` for the temporary file an atomic write renames over it.
fn tmp_name(path: &Path) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    format!(".{name}.hermes-tmp-{}", short_id())
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

#[async_trait]
impl SandboxProvider for LocalProvider {
    async fn create(
        &self,
        task_id: &str,
        _spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        // One `mkdir`: cheaper here than a hand-off to the blocking pool and back. A confined
        // sandbox's temp directory, shell state file and cgroup are made with its first
        // process, its Landlock ruleset as each of them starts (`Domain`).
        Ok(Arc::new(self.maker().open(task_id, None)?))
    }

    async fn prepare(
        &self,
        group: &str,
        spec: &SandboxSpec,
    ) -> Result<Option<Arc<dyn Prepared>>, SandboxError> {
        let prepared = LocalPrepared::prepare(self.maker(), group, spec).await?;
        Ok(Some(Arc::new(prepared)))
    }
}

impl LocalProvider {
    fn maker(&self) -> Maker {
        Maker {
            root: self.root.clone(),
            physical_root: self.physical_root.clone(),
            state_root: self.state_root.clone(),
            env: self.env.clone(),
            confiner: Arc::clone(&self.confiner),
            commands: Arc::clone(&self.commands),
            spares: Arc::clone(&self.spares),
        }
    }
}

/// What makes a scratch sandbox: the run's root, the shells' state root, the commands'
/// environment and the confinement.
#[derive(Debug, Clone)]
pub(super) struct Maker {
    root: PathBuf,
    physical_root: PathBuf,
    state_root: Option<PathBuf>,
    env: CommandEnv,
    confiner: Arc<Confiner>,
    commands: Arc<Queue>,
    spares: Arc<Spares>,
}

impl Maker {
    /// The scratch directory of `task_id` under the run's root.
    pub(super) fn dir(&self, task_id: &str) -> PathBuf {
        let safe: String = task_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.root.join(format!("task-{safe}"))
    }

    /// A new sandbox for `task_id`: its directory made (empty, or holding a copy of `from`:
    /// reflinked where the filesystem allows, else copied), then confined.
    pub(super) fn open(
        &self,
        task_id: &str,
        from: Option<&Path>,
    ) -> Result<LocalSandbox, SandboxError> {
        let dir = self.dir(task_id);
        match from {
            None if self.spares.take(&dir) => {}
            None => std::fs::create_dir_all(&dir).map_err(|e| SandboxError::CreateIo {
                doing: format!("creating {}", dir.display()),
                source: e,
            })?,
            Some(from) => local_fork::copy_dir(from, &dir)?,
        }
        // Made here as a directory, not a link: its physical path needs no lookups.
        let start_dir = self.physical_root.join(dir.file_name().unwrap_or_default());
        let mut sandbox = LocalSandbox::in_env(
            task_id,
            dir,
            start_dir,
            &self.env,
            self.state_root.as_deref(),
        );
        // Made empty here (or a spare emptied by `Spares`).
        *sandbox.small_writes_only.get_mut() = from.is_none();
        sandbox.confine(&self.confiner);
        sandbox.commands = Some(Arc::clone(&self.commands));
        sandbox.spares = Some(Arc::clone(&self.spares));
        Ok(sandbox)
    }
}

/// One task's scratch directory, its shell's working directory (persisting across commands)
/// and the process groups its commands started.
#[derive(Debug)]
pub struct LocalSandbox {
    task_id: String,
    dir: PathBuf,
    dir_str: String,
    cwd: Mutex<PathBuf>,
    process_groups: ProcessGroups,
    env: Vec<(OsString, OsString)>,
    /// `bash` as found in `env`'s `PATH`.
    bash: PathBuf,
    /// The scratch directory as bash's `PWD` names it when a shell starts there (physical):
    /// the `OLDPWD` of a command started without a shell.
    start_dir: PathBuf,
    /// When the sandbox was made: no older process can be its.
    birth: Birth,
    /// The declared survivors the leftover scan left running: process resets pass over their
    /// groups until teardown, which kills them.
    survivors: Mutex<Vec<KeptSurvivor>>,
    /// The persistent shell, started by the second command (and again after it died).
    shell: tokio::sync::Mutex<Option<PersistentShell<LocalLink>>>,
    /// Set when a fresh shell could not start: commands then run one-shot.
    shell_unavailable: AtomicBool,
    /// Set while no command has needed a shell since the sandbox was made or its processes
    /// were reset (one this process starts itself needs none): the first that does then runs
    /// one-shot (one plain program `exec`ed by its wrapper) instead of starting a shell for
    /// it, and the next one starts the shell. A shell
    /// started for one command (a verifier's lone `cat` or `pytest` after the agent's shell is
    /// gone, a task of one write) costs more than a `bash -c`: its pipes, its frames, its
    /// state file and the fork of a subshell, where the wrapper runs a builtin in place; a
    /// shell that serves several commands pays for one `bash -c` more. Only the working
    /// directory persists between commands on either path.
    shell_deferred: AtomicBool,
    /// Set before the first process of this sandbox is started: until then nothing of it can
    /// outlive the agent phase, and the leftover scan of the host's processes is skipped.
    spawned: AtomicBool,
    /// Set while everything in its directory was written by its file tools on the calling
    /// thread (small files, [`INLINE_BYTES`]), none by a copy, an upload or the blocking pool:
    /// a quiet one's teardown then empties it on the calling thread too, and its file tools
    /// take plain names in it as real paths ([`LocalSandbox::plain_own_path`]). Cleared
    /// before any other write starts.
    small_writes_only: AtomicBool,
    /// Set once torn down: a second teardown (an episode's end, then its close) and the drop
    /// have nothing left to remove.
    torn_down: AtomicBool,
    /// Where the shell keeps the working directory between commands, the first it can write:
    /// in the provider's [`STATE_DIR`] directory, else beside the scratch directory (never in
    /// it).
    state_files: Vec<PathBuf>,
    /// The Landlock domain and cgroup its processes enter (none for an unconfined sandbox).
    domain: Domain,
    /// Its own temp directory (`TMPDIR`), beside the scratch directory, when confined.
    tmp: Option<PathBuf>,
    /// `tmp` as text, else `/tmp`.
    tmp_str: String,
    /// The trees its file tools may read besides its own (confined sandboxes only).
    readable: Arc<Confiner>,
    /// The provider's queue of running commands (none for a sandbox made on its own).
    commands: Option<Arc<Queue>>,
    /// Where its directory is kept at teardown when none of its processes ever ran (none for
    /// a sandbox made on its own).
    spares: Option<Arc<Spares>>,
}

impl LocalSandbox {
    /// A sandbox over an existing directory.
    pub fn new(task_id: &str, dir: PathBuf) -> Self {
        let start_dir = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        Self::in_env(task_id, dir, start_dir, &CommandEnv::read(&[]), None)
    }

    /// A sandbox over an existing directory (`start_dir`: its physical path) whose commands
    /// get `command_env`, its shell's state file in `state_root` when given.
    fn in_env(
        task_id: &str,
        dir: PathBuf,
        start_dir: PathBuf,
        command_env: &CommandEnv,
        state_root: Option<&Path>,
    ) -> Self {
        let dir_str = dir.to_string_lossy().into_owned();
        let env = command_env.with_home(&dir);
        let bash = command_env.bash.clone();
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        let state_name = format!(".{name}.hermes-cwd-{}", short_id());
        let state_files = state_root
            .map(|root| root.join(&state_name))
            .into_iter()
            .chain([dir.with_file_name(&state_name)])
            .collect();
        LocalSandbox {
            shell: tokio::sync::Mutex::new(None),
            shell_unavailable: AtomicBool::new(false),
            shell_deferred: AtomicBool::new(true),
            spawned: AtomicBool::new(false),
            // A directory of the caller's may hold anything.
            small_writes_only: AtomicBool::new(false),
            torn_down: AtomicBool::new(false),
            state_files,
            task_id: task_id.to_owned(),
            cwd: Mutex::new(dir.clone()),
            dir,
            dir_str,
            process_groups: ProcessGroups::default(),
            env,
            bash,
            start_dir,
            birth: Birth::now(),
            survivors: Mutex::new(Vec::new()),
            domain: Domain::default(),
            tmp: None,
            tmp_str: "/tmp".into(),
            readable: Arc::new(Confiner::off()),
            commands: None,
            spares: None,
        }
    }

    /// Puts the sandbox's processes in a Landlock domain and cgroup of their own, as far as
    /// `confiner` can: they write only the scratch directory, a temp directory beside it
    /// (their `TMPDIR`) and the shell's state file, all made with the cgroup when the first
    /// process starts ([`Domain::ready`]).
    fn confine(&mut self, confiner: &Arc<Confiner>) {
        let name = self
            .dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if confiner.confines_files() {
            let tmp = self.dir.with_file_name(format!("tmp-{name}"));
            self.env.retain(|(k, _)| k != "TMPDIR");
            self.env.push(("TMPDIR".into(), tmp.clone().into()));
            self.tmp_str = tmp.to_string_lossy().into_owned();
            self.tmp = Some(tmp);
        }
        let writable: Vec<&Path> = std::iter::once(self.dir.as_path())
            .chain(self.tmp.as_deref())
            .collect();
        let files: Vec<&Path> = self
            .state_files
            .iter()
            .take(1)
            .map(PathBuf::as_path)
            .collect();
        self.domain = confiner.domain(&name, &writable, &files);
        if self.domain.confines_files() {
            self.readable = Arc::clone(confiner);
        }
    }

    /// Whether no process of this sandbox ever ran: then only this process's file tools wrote
    /// in it, nothing there can make a read or write block (a FIFO, a device), and a small one
    /// is done on the calling thread ([`INLINE_BYTES`]).
    fn quiet(&self) -> bool {
        !self.spawned.load(SeqCst)
    }

    /// Makes the sandbox's temp directory (with the rest of its domain) when `path` is in it
    /// and it is not made yet: a file tool or a copy reaching it before any process.
    fn ready_for(&self, path: &Path) -> Result<(), SandboxError> {
        match &self.tmp {
            Some(tmp) if path.starts_with(tmp) => self.domain.ready(),
            _ => Ok(()),
        }
    }

    /// `p`'s real path without a lookup, when `p` names a path in the sandbox's directory by
    /// plain names and nothing there can be a link: nothing but its file tools' small writes
    /// on the calling thread ever wrote in it (regular files; no link, no directory).
    fn plain_own_path(&self, p: &Path) -> Option<PathBuf> {
        if !self.quiet() || !self.small_writes_only.load(SeqCst) {
            return None;
        }
        let rel = p.strip_prefix(&self.dir).ok()?;
        rel.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
            .then(|| self.start_dir.join(rel))
    }

    /// The host path a file tool's `path` names, when a confined sandbox may reach it: inside
    /// its own directories, or (to read) in the system trees its commands read — never
    /// `/proc` (this process's own files are there) or `/sys`. The checks are made on the
    /// path with its links resolved, which the open then requires to have no link.
    fn file_tool_path(&self, path: &str, write: bool) -> Result<PathBuf, SandboxError> {
        let p = self.resolve(path);
        if !self.domain.confines_files() {
            return Ok(p);
        }
        self.ready_for(&p)?;
        let refused = || {
            SandboxError::Path(format!(
                "{path} is outside this sandbox (its file tools {} only its own directory{})",
                if write { "write" } else { "read" },
                if write { "" } else { " and the system's files" }
            ))
        };
        let real = match self.plain_own_path(&p) {
            Some(real) => real,
            None => real_path(&p).ok_or_else(refused)?,
        };
        // Its directories' real paths, as they were made: their parent, the run's root, is
        // out of its processes' reach, so none of them can have become a link since.
        let own = std::iter::once(self.start_dir.clone())
            .chain(
                self.tmp
                    .as_ref()
                    .and_then(|t| Some(self.start_dir.with_file_name(t.file_name()?))),
            )
            .any(|d| real.starts_with(&d));
        if own || (!write && self.readable.file_tools_read(&real)) {
            return Ok(real);
        }
        Err(refused())
    }

    /// Adds `KEY=VALUE` entries to every command's environment.
    pub fn with_env(mut self, extra: &[String]) -> Self {
        let command_env = CommandEnv::read(extra);
        self.env = command_env.with_home(&self.dir);
        self.bash = command_env.bash;
        self
    }

    /// Resolves `~`, `~/x` and relative paths against the scratch directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        if path == "~" {
            self.dir.clone()
        } else if let Some(rest) = path.strip_prefix("~/") {
            self.dir.join(rest)
        } else {
            self.dir.join(path)
        }
    }

    /// Refuses an upload whose destination inside the scratch directory lies below a
    /// symbolic link (one the agent planted could send it anywhere on the host; the
    /// destination itself is checked by the copy).
    fn refuse_planted_links(&self, dest: &Path) -> Result<(), SandboxError> {
        match dest.strip_prefix(&self.dir) {
            Ok(rel) => check_no_link_ancestors(&self.dir, rel),
            Err(_) => Ok(()),
        }
    }

    /// The program a request runs when it can be `exec`ed by its wrapper: one plain program
    /// after the preamble ([`exec_word`]), and no shell function imported from the
    /// environment (`BASH_FUNC_*`) that could shadow it.
    fn execable<'r>(&self, request: &'r ExecRequest) -> Option<&'r str> {
        let functions = self
            .env
            .iter()
            .any(|(k, _)| k.to_string_lossy().starts_with("BASH_FUNC_"));
        exec_word(request.parts().1).filter(|_| !functions)
    }

    /// Runs one command in its own `bash -c` wrapper (the one-shot path); one plain program
    /// is `exec`ed by it.
    async fn exec_one_shot_in(
        &self,
        cwd: PathBuf,
        request: ExecRequest,
    ) -> Result<ExecOutput, SandboxError> {
        let nonce = nonce();
        let cwd_text = cwd.to_string_lossy();
        let argv = match self.execable(&request) {
            Some(program) => {
                let (preamble, command) = request.parts();
                exec_wrapper_argv(&cwd_text, preamble, command, program, &nonce)
            }
            None => wrapper_argv(&cwd_text, &request.command, &nonce),
        };
        self.spawned.store(true, SeqCst);
        let before = ticks_now();
        let mut command = bash_command(&self.bash);
        let entered = self.domain.enter(&mut command)?;
        let mut child = command
            .args(&argv[1..])
            .current_dir(&self.dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::host_io("cannot start bash", e))?;
        drop(entered);
        let pgid = child.id().map(|p| p as i32);
        if let Some(pgid) = pgid {
            self.process_groups.add(pgid, before);
        }
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let mut capture = CappedOutput::new(request.output_limit);
        let mut sync = OutputSync::new(&nonce);
        let mut report = ReportReader::default();
        let deadline = Instant::now() + request.timeout;
        // Read into capacity (`read_buf`), not a zeroed buffer: zeroing 16 KiB per command was
        // more instructions than the reads.
        let (mut out_buf, mut rep_buf) = (Vec::with_capacity(16 * 1024), Vec::with_capacity(1024));
        let (mut out_eof, mut rep_eof) = (false, false);
        let mut status = None;
        let mut timed_out = false;
        let mut drain_until = None;
        loop {
            let out_done = out_eof || sync.seen();
            let rep_done = rep_eof || report.finished();
            if out_done && rep_done && status.is_some() {
                break;
            }
            // Once the shell has exited, its output is already in the pipes (a daemon it
            // started may keep them open, so stop after a bound).
            let until = match status {
                Some(_) => *drain_until.get_or_insert_with(|| Instant::now() + DRAIN_MAX),
                None => deadline,
            };
            tokio::select! {
                read = stdout.read_buf(&mut out_buf), if !out_done => match read {
                    Ok(0) | Err(_) => out_eof = true,
                    Ok(_) => {
                        sync.push(&out_buf, |b| capture.push(b));
                        out_buf.clear();
                    }
                },
                read = stderr.read_buf(&mut rep_buf), if !rep_done => match read {
                    Ok(0) | Err(_) => rep_eof = true,
                    Ok(_) => {
                        report.push(&rep_buf);
                        rep_buf.clear();
                    }
                },
                exit = child.wait(), if status.is_none() => status = Some(exit),
                _ = sleep_until(until) => {
                    timed_out = status.is_none();
                    break;
                }
            }
        }
        if !sync.seen() {
            sync.flush(|b| capture.push(b));
        }
        if timed_out {
            if let Some(pgid) = pgid {
                kill_group(pgid);
            }
            let _ = child.wait().await;
            return Ok(ExecOutput::killed_by_deadline(capture, request.timeout));
        }
        let report = report.report();
        let final_cwd = report.exit.map(|(_, cwd)| cwd).or(report.execed_in);
        if let (Some(final_cwd), None) = (final_cwd, &request.workdir) {
            *self.cwd.lock().expect("lock poisoned") = PathBuf::from(final_cwd);
        }
        let exit_code = match status {
            Some(Ok(s)) => exit_code(s),
            Some(Err(e)) => return Err(SandboxError::host_io("waiting for command", e)),
            None => -1,
        };
        Ok(ExecOutput::finished(capture, exit_code))
    }

    /// Runs a request without a shell when it is one program bash would only start (see
    /// `direct.rs`) and this process can start it detached without forking itself; `None`
    /// leaves it to the shell.
    async fn exec_direct(
        &self,
        cwd: &Path,
        request: &ExecRequest,
        in_place_of: InPlaceOf,
    ) -> Result<Option<ExecOutput>, SandboxError> {
        if *HAS_TERMINAL && SETSID.is_none() {
            return Ok(None);
        }
        // `command_cwd` has just seen the scratch directory exist; another is looked at here.
        if cwd != self.dir && !cwd.is_dir() {
            return Ok(None);
        }
        let (preamble, command) = request.parts();
        let at = (cwd, self.start_dir.as_path());
        match launch(preamble, command, at, in_place_of, &self.env) {
            Some(launch) => self.run_launch(&launch, request).await,
            None => Ok(None),
        }
    }

    /// Runs a [`Launch`] without a shell: its stdout and stderr share one pipe (the shell's
    /// `2>&1`), read to its end, or for [`DRAIN_MAX`] after the exit when something the
    /// program started holds the pipe; a timeout kills its process group. `None` when it
    /// cannot start (the shell path then runs the command and reports what bash reports).
    async fn run_launch(
        &self,
        launch: &Launch,
        request: &ExecRequest,
    ) -> Result<Option<ExecOutput>, SandboxError> {
        let io = |e: std::io::Error| SandboxError::host_io("output pipe", e);
        let (writer, mut reader) = tokio::net::unix::pipe::pipe().map_err(io)?;
        let stdout = writer.into_blocking_fd().map_err(io)?;
        let stderr = stdout.try_clone().map_err(io)?;
        let mut command = launch_command(launch);
        let entered = self.domain.enter(&mut command)?;
        command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        let before = ticks_now();
        let spawned = command.spawn();
        // The command holds this process's copies of the pipe's write end.
        drop((command, entered));
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                direct_start_failed(launch, &e);
                return Ok(None);
            }
        };
        self.spawned.store(true, SeqCst);
        let pgid = child.id().map(|p| p as i32);
        if let Some(pgid) = pgid {
            self.process_groups.add(pgid, before);
        }
        let mut capture = CappedOutput::new(request.output_limit);
        let deadline = Instant::now() + request.timeout;
        // Read into capacity (`read_buf`), not a zeroed buffer: zeroing 16 KiB per command was
        // more instructions than the reads.
        let mut buf = Vec::with_capacity(16 * 1024);
        let (mut eof, mut status, mut drain_until) = (false, None, None);
        let status = loop {
            if eof {
                if let Some(exit) = status.take() {
                    break exit;
                }
            }
            let until = match status {
                Some(_) => *drain_until.get_or_insert_with(|| Instant::now() + DRAIN_MAX),
                None => deadline,
            };
            tokio::select! {
                read = reader.read_buf(&mut buf), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(_) => {
                        capture.push(&buf);
                        buf.clear();
                    }
                },
                exit = child.wait(), if status.is_none() => status = Some(exit),
                _ = sleep_until(until) => {
                    if let Some(exit) = status.take() {
                        break exit;
                    }
                    if let Some(pgid) = pgid {
                        kill_group(pgid);
                    }
                    let _ = child.wait().await;
                    return Ok(Some(ExecOutput::killed_by_deadline(capture, request.timeout)));
                }
            }
        };
        match status {
            Ok(s) => Ok(Some(ExecOutput::finished(capture, exit_code(s)))),
            Err(e) => Err(SandboxError::host_io("waiting for command", e)),
        }
    }

    /// Runs one command in the persistent shell (one-shot when the shell is busy or cannot
    /// start).
    async fn exec_in_shell(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        let cwd = self.command_cwd(&request)?;
        if let Some(out) = self
            .exec_direct(&cwd, &request, InPlaceOf::PersistentShell)
            .await?
        {
            return Ok(out);
        }
        let Ok(mut slot) = self.shell.try_lock() else {
            // Another command of this sandbox is running in the shell: run this one beside it.
            return self.exec_one_shot_in(cwd, request).await;
        };
        let cwd_text = cwd.to_string_lossy().into_owned();
        if !frameable(&cwd_text, &request.command) || self.shell_unavailable.load(Relaxed) {
            return self.exec_one_shot_in(cwd, request).await;
        }
        if slot.is_none() && self.shell_deferred.load(SeqCst) {
            self.shell_deferred.store(false, SeqCst);
            drop(slot);
            return self.exec_one_shot_in(cwd, request).await;
        }
        self.shell_deferred.store(false, SeqCst);
        if let Some(out) = run_in_shell(self, &mut slot, &cwd_text, &request).await? {
            return Ok(out);
        }
        drop(slot);
        self.exec_one_shot_in(cwd, request).await
    }

    /// Runs `command` in its turn among the provider's running commands (at once for a
    /// sandbox made on its own).
    async fn in_turn<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, SandboxError>>,
    ) -> Result<T, SandboxError> {
        match &self.commands {
            Some(queue) => queue.running(command).await,
            None => command.await,
        }
    }

    /// The working directory a request runs in; the sandbox must still exist.
    fn command_cwd(&self, request: &ExecRequest) -> Result<PathBuf, SandboxError> {
        if !self.dir.is_dir() {
            return Err(SandboxError::Gone(format!(
                "scratch directory {} was removed",
                self.dir.display()
            )));
        }
        Ok(match request.workdir.as_deref() {
            Some(w) => self.resolve(w),
            None => self.cwd.lock().expect("lock poisoned").clone(),
        })
    }

    /// Starts the task's persistent shell (its own process group, the sandbox environment).
    fn spawn_shell(&self) -> Result<PersistentShell<LocalLink>, SandboxError> {
        let state_files: Vec<String> = self
            .state_files
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        let argv = shell_argv(&state_files);
        self.spawned.store(true, SeqCst);
        let mut command = bash_command(&self.bash);
        let entered = self.domain.enter(&mut command)?;
        let mut child = command
            .args(&argv[1..])
            .current_dir(&self.dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::host_io("cannot start bash", e))?;
        drop(entered);
        let link = LocalLink {
            registered: child.id().map(FrameworkShell::register),
            pgid: child.id().map(|p| p as i32),
            stdin: child.stdin.take().expect("stdin is piped"),
            report: child.stdout.take().expect("stdout is piped"),
            output: child.stderr.take().expect("stderr is piped"),
            child,
            report_buf: vec![0; 1024],
            output_buf: vec![0; 16 * 1024],
            output_eof: false,
            report_eof: false,
        };
        Ok(PersistentShell::new(link))
    }

    /// Kills every process group of the sandbox's commands, and the survivors left running.
    fn kill_all(&self) {
        let survivors = std::mem::take(&mut *self.survivors.lock().expect("lock poisoned"));
        for survivor in &survivors {
            survivor.kill();
        }
        self.process_groups.kill_all();
        self.domain.kill_all();
    }
}

#[async_trait]
impl ShellHost for LocalSandbox {
    type Link = LocalLink;

    async fn fresh_shell(&self) -> Result<PersistentShell<LocalLink>, SandboxError> {
        self.spawn_shell()
    }

    fn note_group(&self, pgid: i32, started_after: u64) {
        self.process_groups.add(pgid, started_after);
    }

    async fn kill_command_group(&self, pgid: i32) {
        kill_group(pgid);
    }

    fn keep_cwd(&self, cwd: String) {
        *self.cwd.lock().expect("lock poisoned") = PathBuf::from(cwd);
    }

    fn shell_cannot_start(&self, code: Option<i32>) {
        warn!(
            "the persistent shell of {} cannot start (exit {code:?}); running its commands one-shot",
            self.task_id
        );
        self.shell_unavailable.store(true, Relaxed);
    }
}

/// The pipes of a local persistent shell; dropping it kills the shell's process group.
#[derive(Debug)]
pub(crate) struct LocalLink {
    child: Child,
    pgid: Option<i32>,
    stdin: ChildStdin,
    report: ChildStdout,
    output: ChildStderr,
    report_buf: Vec<u8>,
    output_buf: Vec<u8>,
    output_eof: bool,
    /// The report channel ended: the shell is gone; what is left of its output is drained.
    report_eof: bool,
    /// Its entry among the framework's shells (leftover scans pass it over); dropped before
    /// the shell is reaped, while its pid is still its own.
    registered: Option<FrameworkShell>,
}

#[async_trait]
impl ShellLink for LocalLink {
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stdin.write_all(bytes).await
    }

    async fn recv(&mut self) -> Piece {
        loop {
            if self.report_eof {
                // The shell died; what it and its command wrote before is still in the pipe
                // (a daemon may hold the pipe open, hence the bound).
                if self.output_eof {
                    return Piece::Closed;
                }
                let read = tokio::time::timeout(
                    Duration::from_millis(200),
                    self.output.read(&mut self.output_buf),
                )
                .await;
                match read {
                    Ok(Ok(n)) if n > 0 => return Piece::Output(self.output_buf[..n].to_vec()),
                    _ => {
                        self.output_eof = true;
                        return Piece::Closed;
                    }
                }
            }
            tokio::select! {
                read = self.output.read(&mut self.output_buf), if !self.output_eof => match read {
                    Ok(0) | Err(_) => self.output_eof = true,
                    Ok(n) => return Piece::Output(self.output_buf[..n].to_vec()),
                },
                read = self.report.read(&mut self.report_buf) => match read {
                    Ok(0) | Err(_) => self.report_eof = true,
                    Ok(n) => return Piece::Report(self.report_buf[..n].to_vec()),
                },
            }
        }
    }

    async fn exit_code(&mut self) -> Option<i32> {
        // Reaping frees the pid for the kernel to hand out again.
        self.registered = None;
        let status = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
        Some(exit_code(status.ok()?.ok()?))
    }

    async fn close(&mut self) {
        // The shell was sent the quit frame: reap it now (no zombie, and its CPU time is
        // accounted to this process), then there is no group left to kill.
        if self.exit_code().await.is_some() {
            self.pgid = None;
        }
    }
}

impl Drop for LocalLink {
    fn drop(&mut self) {
        // `try_wait` may reap the shell (see `exit_code`).
        self.registered = None;
        // Only while the shell is not reaped is its pid (and so its group's id) still its own.
        if let (Some(pgid), Ok(None)) = (self.pgid, self.child.try_wait()) {
            kill_group(pgid);
        }
    }
}

fn io_err(path: &Path, e: std::io::Error) -> SandboxError {
    match e.kind() {
        std::io::ErrorKind::NotFound => SandboxError::NotFound(path.display().to_string()),
        std::io::ErrorKind::IsADirectory => SandboxError::IsDirectory(path.display().to_string()),
        _ => SandboxError::host_io(path.display().to_string(), e),
    }
}

/// The largest file a confined sandbox none of whose processes ever ran reads or writes on the
/// calling thread: a few microseconds of copying, where a hand-off to the blocking pool and back
/// costs more than the write.
const INLINE_BYTES: usize = 64 * 1024;

/// Runs file-system work (copies, scans, removals) on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SandboxError::worker("file-system thread", e))?
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn task_id(&self) -> &str {
        &self.task_id
    }

    fn workdir(&self) -> &str {
        &self.dir_str
    }

    fn temp_dir(&self) -> &str {
        &self.tmp_str
    }

    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        refuse_user(&request, "local")?;
        let out = self.in_turn(self.exec_in_shell(request)).await;
        self.process_groups.prune();
        out
    }

    async fn exec_one_shot(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        refuse_user(&request, "local")?;
        let run = async {
            let cwd = self.command_cwd(&request)?;
            match self.exec_direct(&cwd, &request, InPlaceOf::OneShot).await? {
                Some(out) => Ok(out),
                None => self.exec_one_shot_in(cwd, request).await,
            }
        };
        let out = self.in_turn(run).await;
        self.process_groups.prune();
        out
    }

    async fn reset_processes(&self) -> Result<(), SandboxError> {
        let mut shell = self.shell.lock().await;
        // The survivors' groups hold nothing else since the leftover scan: they are left, and
        // teardown (`kill_all`) ends them.
        let spared: Vec<i32> = (self.survivors.lock().expect("lock poisoned"))
            .iter()
            .map(|s| s.pgrp)
            .collect();
        self.process_groups.kill_all_except(&spared);
        if let Some(shell) = shell.take() {
            shell.close().await;
        }
        self.shell_deferred.store(true, SeqCst);
        Ok(())
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let (p, shown) = (self.file_tool_path(path, false)?, path.to_owned());
        if !self.domain.confines_files() {
            // Any host path, `/proc`'s too, whose sizes say 0 whatever they hold.
            return blocking(move || read_regular(&p, &shown, READ_LIMIT)).await;
        }
        if !self.quiet() {
            return blocking(move || read_regular_no_links(&p, &shown, READ_LIMIT)).await;
        }
        // Its own files or the system's, never `/proc` or `/sys`: their size is what they hold.
        let (file, meta) = open_regular_no_links(&p, &shown)?;
        match meta.len() <= INLINE_BYTES as u64 {
            true => read_capped(file, meta.len(), READ_LIMIT, &shown),
            false => blocking(move || read_capped(file, meta.len(), READ_LIMIT, &shown)).await,
        }
    }

    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        let p = self.file_tool_path(path, true)?;
        let parent = p
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.dir.clone());
        // A sandbox no process ran in, holding only its file tools' small files, has no
        // directory but its own, and nothing could have removed that.
        let own_dir =
            self.quiet() && self.small_writes_only.load(SeqCst) && parent == self.start_dir;
        let dirs_created = !own_dir && !parent.exists();
        if dirs_created {
            self.small_writes_only.store(false, SeqCst);
            tokio::fs::create_dir_all(&parent)
                .await
                .map_err(|e| io_err(&parent, e))?;
        }
        if self.domain.confines_files() {
            let (bytes, shown) = (bytes.to_vec(), path.to_owned());
            let inline = self.quiet() && bytes.len() <= INLINE_BYTES;
            let write = move || {
                let failed = |e: std::io::Error| match e.raw_os_error() {
                    Some(libc::ELOOP) => SandboxError::Path(format!(
                        "{shown}: a link appeared on the way; nothing was written"
                    )),
                    _ => io_err(Path::new(&shown), e),
                };
                // No process ever ran here to see a file half-written: a new one is made in
                // place.
                if inline && no_links::write_new(&p, &bytes).map_err(failed)? {
                    return Ok(());
                }
                no_links::write_atomic(&p, &bytes, &tmp_name(&p)).map_err(failed)
            };
            match inline {
                true => write()?,
                false => {
                    self.small_writes_only.store(false, SeqCst);
                    blocking(write).await?
                }
            }
            return Ok(dirs_created);
        }
        self.small_writes_only.store(false, SeqCst);
        let tmp = parent.join(tmp_name(&p));
        tokio::fs::write(&tmp, bytes)
            .await
            .map_err(|e| io_err(Path::new(path), e))?;
        if let Ok(meta) = tokio::fs::metadata(&p).await {
            let _ = tokio::fs::set_permissions(&tmp, meta.permissions()).await;
        }
        if let Err(e) = tokio::fs::rename(&tmp, &p).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(io_err(Path::new(path), e));
        }
        Ok(dirs_created)
    }

    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        let (src, dest) = (local.to_path_buf(), self.resolve(remote));
        self.refuse_planted_links(&dest)?;
        self.ready_for(&dest)?;
        self.small_writes_only.store(false, SeqCst);
        blocking(move || copy_file(&src, &dest)).await
    }

    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        let (src, dest) = (local.to_path_buf(), self.resolve(remote));
        self.refuse_planted_links(&dest)?;
        self.ready_for(&dest)?;
        self.small_writes_only.store(false, SeqCst);
        blocking(move || copy_tree(&src, &dest)).await
    }

    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        let (src, dest) = (self.resolve(remote), local.to_path_buf());
        blocking(move || copy_file(&src, &dest)).await
    }

    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        let (src, dest) = (self.resolve(remote), local.to_path_buf());
        blocking(move || copy_tree(&src, &dest)).await
    }

    async fn kill_leftover_processes(
        &self,
        rules: &LeftoverRules,
    ) -> Result<LeftoverKill, SandboxError> {
        if !self.spawned.load(SeqCst) {
            // No process of this sandbox was ever started (file tools only): none can be left.
            return Ok(LeftoverKill::default());
        }
        // The persistent shell is the framework's own process, not a leftover of the agent's:
        // it is registered as a `FrameworkShell`, which every scan passes over.
        let groups = self.process_groups.current();
        let (home, rules, birth) = (self.dir.clone(), rules.clone(), self.birth);
        let members = self.domain.members_file();
        let (kill, kept) = blocking(move || {
            Ok(kill_local_leftovers(
                &home,
                &groups,
                members.as_deref(),
                &rules,
                &birth,
            ))
        })
        .await?;
        self.survivors.lock().expect("lock poisoned").extend(kept);
        Ok(kill)
    }

    async fn scan_changes(
        &self,
        scans: &[ChangeScan],
    ) -> Result<Option<Vec<Vec<String>>>, SandboxError> {
        let (scans, home) = (scans.to_vec(), self.dir.clone());
        blocking(move || {
            scans
                .iter()
                .map(|scan| scan.walk(&home, WIRE_TIMEOUT))
                .collect::<Result<_, _>>()
                .map(Some)
        })
        .await
    }

    async fn teardown(&self) -> Result<(), SandboxError> {
        if self.torn_down.load(SeqCst) {
            return Ok(());
        }
        self.reset_processes().await?;
        // What the reset passed over: the survivors and their groups.
        self.kill_all();
        // Only a sandbox that started a process or used its temp directory has a temp
        // directory, a cgroup or a state file (`Domain::ready`; an unconfined shell writes
        // its state file itself).
        let made = self.spawned.load(SeqCst) || self.domain.is_ready();
        let state_files = if made {
            self.state_files.clone()
        } else {
            Vec::new()
        };
        let tmp = self.tmp.clone().filter(|_| made);
        let mut spares = self.spares.clone().filter(|_| !made);
        if let Some(few) = spares
            .as_ref()
            .filter(|_| self.small_writes_only.load(SeqCst))
        {
            match few.keep_few(&self.dir) {
                Some(true) => {
                    self.torn_down.store(true, SeqCst);
                    return Ok(());
                }
                Some(false) => spares = None,
                None => {}
            }
        }
        let (cgroup, dir) = (self.domain.cgroup(), self.dir.clone());
        blocking(move || {
            if spares.is_some_and(|spares| spares.keep(&dir)) {
                return Ok(());
            }
            if let Some(tmp) = tmp {
                let _ = std::fs::remove_dir_all(tmp);
            }
            // Waiting for the killed cgroup to empty takes milliseconds.
            if let Some(cgroup) = cgroup {
                cgroup.remove();
            }
            for file in &state_files {
                let _ = std::fs::remove_file(file);
            }
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_err(&dir, e)),
            }
        })
        .await?;
        self.torn_down.store(true, SeqCst);
        Ok(())
    }
}

impl Drop for LocalSandbox {
    fn drop(&mut self) {
        *self.shell.get_mut() = None;
        self.kill_all();
        if *self.torn_down.get_mut() {
            return;
        }
        for file in &self.state_files {
            let _ = std::fs::remove_file(file);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
    }
}

/// `path` with its links resolved; for a path that does not exist yet, its deepest existing
/// ancestor's real path with the rest appended (none of which exists, so none is a link).
/// `None` when the missing rest climbs (`..`).
fn real_path(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return Some(rest.iter().rev().fold(real, |p, c| p.join(c)));
        }
        let last = at.components().next_back()?;
        if !matches!(last, Component::Normal(_)) {
            return None;
        }
        rest.push(at.file_name()?.to_owned());
        at = at.parent()?;
    }
}
