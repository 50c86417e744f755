//! Tripwires: what runs between the agent phase and the verifier of every rollout, so that a
//! reward is evidence of the task being solved rather than of the check being gamed. Every
//! process the agent left running but the services the item declares is killed (a background
//! writer cannot race the verifier), and the places a verifier trusts without looking — system binaries and Python's import
//! path, paths the author protects, hook files planted in the agent's home — are checked for
//! changes made since the agent started. Each fired wire is one line; any wire makes the
//! rollout `tampered` (see `modes::rollout`).

use crate::diagnostics::printable;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sandbox::api::{ExecOutput, ExecRequest, Sandbox, SandboxSpec};
use crate::sandbox::change_scan::{ChangeScan, FOUND_MAX};
use crate::sandbox::error::SandboxError;
use crate::sandbox::survival::{LeftoverRules, OwnProcess};

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
    // Python reads `pyvenv.cfg` beside its executable or one level up: `home = DIR` there
    // moves the standard library to DIR's tree, for every interpreter, `-I` included.
    "/usr/pyvenv.cfg",
    "/usr/local/pyvenv.cfg",
    "/pyvenv.cfg",
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

/// Runs one wire's command. One that does not finish in time found nothing it can vouch for
/// (its output may be someone else's: a command the agent queued in its own shell, through the
/// shell's stdin, runs first and can hold the shell past the deadline), so it is an error, never
/// a clean result.
pub(super) async fn wire_exec<S: Sandbox + ?Sized>(
    sandbox: &S,
    command: String,
) -> Result<ExecOutput, SandboxError> {
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

/// When the agent phase of a rollout began; changes after it are the agent's.
#[derive(Debug, Clone, Copy)]
pub struct Armed {
    /// Since the epoch: the whole second the phase began in (every change within it counts).
    since: Duration,
}

impl Armed {
    /// Arms the wires now (call before the agent's first command).
    pub fn now() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Armed {
            since: Duration::from_secs(now.as_secs()),
        }
    }

    /// The same wires, not counting what the framework laid in the sandbox before `laid`
    /// (an item's prepared copy, its setup): `laid` is a moment after the last of it was
    /// written and at least `STAMP_LAG` (20 ms, a file clock's tick) before the agent's first command in it.
    pub fn after(self, laid: Option<SystemTime>) -> Self {
        let laid = laid
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default();
        Armed {
            since: self.since.max(laid),
        }
    }

    fn since(&self) -> Duration {
        self.since
    }
}

/// Runs every wire before verification: kills every process the agent left (the `process`
/// tool's own, `own` as this process recorded them, without a wire; the item's declared
/// survivors are left running), then checks what changed. Returns one line per fired wire
/// (empty: verification may proceed).
pub async fn inspect(
    sandbox: &dyn Sandbox,
    spec: &SandboxSpec,
    armed: &Armed,
    own: &[OwnProcess],
) -> Result<Vec<String>, SandboxError> {
    let mut wires = Vec::new();
    let rules = LeftoverRules {
        own: own.to_vec(),
        survivors: spec.survivors.clone(),
    };
    let killed = sandbox.kill_leftover_processes(&rules).await?;
    if killed.own > 0 || !killed.survivors.is_empty() {
        tracing::debug!(
            "tripwire: stopped {} process(es) of the process tool; {} declared survivor(s) left running: {}",
            killed.own,
            killed.survivors.len(),
            shown(&killed.survivors)
        );
    }
    let leftovers = killed.leftovers;
    if !leftovers.is_empty() {
        wires.push(format!(
            "{} process(es) outlived the agent phase (killed before verification): {}",
            leftovers.len(),
            shown(&leftovers)
        ));
    }
    let engine_changes = sandbox.changed_paths(&watched_roots(spec)).await?;
    // Protected paths are scanned only where the engine cannot report changes itself.
    let protected = match &engine_changes {
        Some(_) => &[][..],
        None => &spec.protected_paths[..],
    };
    let scans = [
        changed_since(protected, armed, false),
        changed_since(&["~".to_owned()], armed, true),
        shadows(armed),
        git_configs(armed),
    ];
    let [protected_changes, mut hooks, shadowing, git] = found(sandbox, scans).await?;
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
    let drivers = git_drivers(sandbox, &git).await?;
    if !drivers.is_empty() {
        wires.push(format!(
            "{} git configuration file(s) changed during the agent phase define programs git runs on its own (filters, diff or merge drivers, includes): {}",
            drivers.len(),
            shown(&drivers)
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

/// The roots whose changes fire the integrity wire: the system roots unless the spec allows
/// system changes, and the spec's protected paths.
pub fn watched_roots(spec: &SandboxSpec) -> Vec<String> {
    let system: &[&str] = if spec.mutable_system {
        &[]
    } else {
        SYSTEM_ROOTS
    };
    system
        .iter()
        .map(|r| (*r).to_owned())
        .chain(spec.protected_paths.iter().cloned())
        .collect()
}

/// The engine-reported changes under the watched roots ([`watched_roots`]); byte-code caches
/// are not evidence. A changed ancestor of a watched root with no change reported below it
/// counts too: that is how a directory replaced by a link (or a file, or deleted) shows in a
/// diff, and what the root's paths resolve to is then the agent's.
pub fn watched_changes(paths: &[String], spec: &SandboxSpec) -> Vec<String> {
    let roots = watched_roots(spec);
    // `…/python3` roots also cover versioned directories (`python3.11`).
    let under = |path: &str, root: &str| {
        let root = root.trim_end_matches('/');
        path.strip_prefix(root).is_some_and(|rest| {
            rest.is_empty() || rest.starts_with('/') || root.ends_with("python3")
        })
    };
    let holds_root = |path: &str| {
        path.len() > 1
            && roots
                .iter()
                .any(|r| r.starts_with(path) && r[path.len()..].starts_with('/'))
    };
    let mut out: Vec<String> = paths
        .iter()
        .filter(|p| !p.contains("/__pycache__") && !p.ends_with(".pyc"))
        .filter(|p| !ENGINE_PATHS.contains(&p.as_str()))
        .filter(|p| roots.iter().any(|r| under(p, r)) || holds_root(p))
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
        since: armed.since(),
    }
}

/// Names of git configuration files (the repository's `.git/config`, the user's `.gitconfig`
/// and `.config/git/config`), scanned in the home for changes during the agent phase.
const GIT_CONFIG_NAMES: &[&str] = &["config", ".gitconfig"];

/// Keys whose value is a program git runs by itself while the verifier only reads a
/// repository (`git status`, `git diff`): a filter's `clean`/`smudge`/`process`, a diff
/// driver's `textconv`/`command`, a merge `driver`, `diff.external`, a signing `program`. The
/// fixed keys that do the same (`core.fsmonitor`, `core.hooksPath`, `core.pager`, …) are
/// overridden in the verifier's own environment ([`crate::sandbox::CLEAN_PREAMBLE`]); these
/// live in sections the model names, so they cannot be.
const GIT_PROGRAM_KEYS: &[&str] = &[
    "clean", "smudge", "process", "textconv", "command", "driver", "external", "program",
];

fn git_configs(armed: &Armed) -> ChangeScan {
    static NAMES: LazyLock<Arc<[String]>> =
        LazyLock::new(|| GIT_CONFIG_NAMES.iter().map(|n| (*n).to_owned()).collect());
    ChangeScan {
        roots: vec!["~".to_owned()],
        names: NAMES.clone(),
        top_level: false,
        since: armed.since(),
    }
}

/// Of the changed files `found`, the git configuration files that define a program git runs
/// by itself or include another file (which could).
async fn git_drivers(sandbox: &dyn Sandbox, found: &[String]) -> Result<Vec<String>, SandboxError> {
    let mut out = Vec::new();
    for path in found.iter().filter(|p| is_git_config(p)).take(FOUND_MAX) {
        // A file deleted or replaced since the scan defines nothing the verifier will read.
        let Ok(bytes) = sandbox.read_file(path).await else {
            continue;
        };
        if defines_programs(&String::from_utf8_lossy(&bytes)) {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn is_git_config(path: &str) -> bool {
    path.ends_with("/.git/config")
        || path.ends_with("/.gitconfig")
        || path.ends_with("/.config/git/config")
}

/// True when git configuration `text` sets one of [`GIT_PROGRAM_KEYS`] or includes a file.
fn defines_programs(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim().to_ascii_lowercase();
        if line.starts_with("[include") {
            return true;
        }
        let key = line.split('=').next().unwrap_or_default().trim();
        // `key = value`, `key=value`, or a bare `key` (a boolean true, which is no program).
        line.contains('=') && GIT_PROGRAM_KEYS.contains(&key)
    })
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
        since: armed.since(),
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

/// Up to `SHOWN` of `items` (process command lines, paths: the model chose them), escaped.
fn shown(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(SHOWN)
        .map(|item| printable(item).into_owned())
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
    fn git_configuration_that_runs_programs_is_recognised() {
        assert!(defines_programs(
            "[core]\n\tbare = false\n[filter \"x\"]\n\tclean = sh -c 'echo 1 > r'\n"
        ));
        assert!(defines_programs("[diff \"d\"]\n    textconv=cat\n"));
        assert!(defines_programs("[include]\n\tpath = ../evil\n"));
        assert!(defines_programs("[includeIf \"gitdir:/\"]\n\tpath = x\n"));
        assert!(!defines_programs(
            "[core]\n\trepositoryformatversion = 0\n[user]\n\tname = A\n[branch \"main\"]\n\tremote = origin\n"
        ));
        assert!(is_git_config("/root/repo/.git/config"));
        assert!(is_git_config("/home/u/.gitconfig"));
        assert!(!is_git_config("/root/.config/app/config"));
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

    #[test]
    fn a_changed_ancestor_of_a_watched_root_with_nothing_below_it_is_a_watched_change() {
        // `/usr/local` replaced by a link: the diff names it alone; `/usr` holds other changes.
        let paths: Vec<String> = [
            "/usr",
            "/usr/local",
            "/usr/sbin",
            "/usr/sbin/docker-init",
            "/root",
            "/root/a",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let spec = SandboxSpec::default();
        assert_eq!(watched_changes(&paths, &spec), ["/usr/local"]);
        // A directory holding only unwatched changes, or holding no root, is not one.
        let paths: Vec<String> = ["/usr", "/usr/local", "/usr/local/share/x", "/opt"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(watched_changes(&paths, &spec).is_empty());
        // A protected path's ancestors count too; with system changes allowed, only those.
        let spec = SandboxSpec {
            mutable_system: true,
            ..SandboxSpec::default()
        }
        .protect("/srv/grader/tests");
        let paths: Vec<String> = ["/usr/local", "/srv/grader"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(watched_changes(&paths, &spec), ["/srv/grader"]);
    }
}
