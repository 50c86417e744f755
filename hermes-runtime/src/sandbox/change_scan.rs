//! The tripwires' file scans: the paths under some roots whose inode changed since the agent
//! phase began (ctime, which `touch` cannot set back), all of them or only some names. A
//! backend that sees the sandbox's files from this process walks them here
//! ([`ChangeScan::walk`]: the local backend, no child process per scan); the others run the
//! same scan as a `find` command in the sandbox ([`ChangeScan::find_command`]).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::SandboxError;

/// How far a file's change time may lag the moment of the change: the kernel stamps files
/// from a clock that advances once per tick (at most 10 ms at 100 Hz).
pub const STAMP_LAG: Duration = Duration::from_millis(20);

/// Paths one scan reports at most.
pub const FOUND_MAX: usize = 200;

/// One scan: `roots` (`~` is the sandbox's home), the names wanted (empty: every path), how
/// deep, and when (since the epoch) the agent phase began.
#[derive(Debug, Clone)]
pub struct ChangeScan {
    /// Where to look; a root starting with `~` is under the home.
    pub roots: Vec<String>,
    /// File names wanted (`find -name` patterns: a literal, or `*suffix`); empty for all.
    /// Shared: the wires scan every rollout for the same lists.
    pub names: Arc<[String]>,
    /// Only the roots' direct entries (the roots themselves are not reported); otherwise the
    /// whole trees, on the roots' own filesystems, without `__pycache__` directories.
    pub top_level: bool,
    /// Changes after this time (since the epoch; nanoseconds count) are reported.
    pub since: Duration,
}

impl ChangeScan {
    /// The scan as a `find` command for the sandbox's shell (paths one per line; `$HOME` is
    /// the sandbox's home).
    pub fn find_command(&self) -> String {
        let roots: Vec<String> = self
            .roots
            .iter()
            .map(|r| match r.strip_prefix('~') {
                Some(rest) => format!("\"$HOME\"{}", shell_quote(rest)),
                None => shell_quote(r),
            })
            .collect();
        let names = if self.names.is_empty() {
            String::new()
        } else {
            let tests: Vec<String> = self
                .names
                .iter()
                .map(|n| format!("-name {}", shell_quote(n)))
                .collect();
            format!("\\( {} \\) ", tests.join(" -o "))
        };
        let scope = if self.top_level {
            "-mindepth 1 -maxdepth 1".to_owned()
        } else {
            "-xdev \\( -name __pycache__ -prune \\) -o".to_owned()
        };
        format!(
            "find {} {scope} {names}-newerct @{}.{:09} -print 2>/dev/null",
            roots.join(" "),
            self.since.as_secs(),
            self.since.subsec_nanos()
        )
    }

    /// The scan run in this process over the sandbox's files (`home` is its `~`), as `find`
    /// runs it: links are not followed, unreadable directories are passed over. A walk that
    /// takes longer than `deadline` is an error, as a `find` past its deadline is.
    pub fn walk(&self, home: &Path, deadline: Duration) -> Result<Vec<String>, SandboxError> {
        self.walk_in(Path::new("/"), home, deadline, false)
    }

    /// The scan over a filesystem seen under `base` (`/`: this process's own). With `overlay`,
    /// `base` is an overlay's upper directory, which holds only what changed: its whiteouts
    /// (deletions) and opacity markers are not files of the sandbox and are passed over. The
    /// caller makes sure no ancestor of a root under `base` is a link (it would be followed
    /// here, outside the sandbox).
    pub fn walk_in(
        &self,
        base: &Path,
        home: &Path,
        deadline: Duration,
        overlay: bool,
    ) -> Result<Vec<String>, SandboxError> {
        let until = Instant::now() + deadline;
        let mut found = Vec::new();
        for shown in self.resolved_roots(home) {
            let on_disk = base.join(shown.trim_start_matches('/'));
            let Ok(meta) = std::fs::symlink_metadata(&on_disk) else {
                continue;
            };
            let mut walk = Walk {
                scan: self,
                device: meta.dev(),
                until,
                found: &mut found,
                overlay,
            };
            if self.top_level {
                walk.entries(&on_disk, &shown, 0)?;
            } else {
                let name = Path::new(&shown)
                    .file_name()
                    .map_or_else(|| shown.clone(), |n| n.to_string_lossy().into_owned());
                walk.visit(&on_disk, &shown, &name, &meta, 0)?;
            }
        }
        found.truncate(FOUND_MAX);
        Ok(found)
    }

    /// The roots as absolute paths in the sandbox (`~` is `home`).
    pub fn resolved_roots(&self, home: &Path) -> Vec<String> {
        self.roots
            .iter()
            .map(|root| match root.strip_prefix('~') {
                Some(rest) => format!("{}{rest}", home.display()),
                None => root.clone(),
            })
            .collect()
    }

    fn wanted(&self, name: &str) -> bool {
        self.names.is_empty()
            || self
                .names
                .iter()
                .any(|pattern| match pattern.strip_prefix('*') {
                    Some(suffix) => name.ends_with(suffix),
                    None => name == pattern,
                })
    }

    fn changed(&self, meta: &std::fs::Metadata) -> bool {
        let since = (
            i64::try_from(self.since.as_secs()).unwrap_or(i64::MAX),
            i64::from(self.since.subsec_nanos()),
        );
        (meta.ctime(), meta.ctime_nsec()) > since
    }
}

/// One root's walk.
struct Walk<'a> {
    scan: &'a ChangeScan,
    device: u64,
    until: Instant,
    found: &'a mut Vec<String>,
    /// Over an overlay's upper directory: whiteouts and opacity markers are not files.
    overlay: bool,
}

impl Walk<'_> {
    /// Depth of directories followed at most (a deeper tree is not the agent's to hide in:
    /// `find` itself would stop at the path length limit).
    const DEPTH_MAX: usize = 256;

    /// `path` (shown as `shown`, named `name`) and, for a directory on the root's filesystem,
    /// everything below it.
    fn visit(
        &mut self,
        path: &Path,
        shown: &str,
        name: &str,
        meta: &std::fs::Metadata,
        depth: usize,
    ) -> Result<(), SandboxError> {
        if (name == "__pycache__" && meta.is_dir()) || self.overlay_entry(name, meta) {
            return Ok(());
        }
        self.report(name, shown, meta);
        if meta.is_dir() && meta.dev() == self.device && depth < Self::DEPTH_MAX {
            self.entries(path, shown, depth)?;
        }
        Ok(())
    }

    /// The entries of `dir`: reported (top level only) or visited. The deadline is checked
    /// per entry, so one huge directory cannot hold the walk past it.
    fn entries(&mut self, dir: &Path, shown: &str, depth: usize) -> Result<(), SandboxError> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            if Instant::now() > self.until {
                return Err(SandboxError::Io(format!(
                    "a tripwire scan of {shown} did not finish in time"
                )));
            }
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let child_shown = format!("{shown}/{name}");
            if self.scan.top_level {
                if !self.overlay_entry(&name, &meta) {
                    self.report(&name, &child_shown, &meta);
                }
            } else {
                self.visit(&entry.path(), &child_shown, &name, &meta, depth + 1)?;
            }
        }
        Ok(())
    }

    /// An overlay's own entry (a whiteout device or file, an opacity marker) when walking an
    /// upper directory.
    fn overlay_entry(&self, name: &str, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.overlay
            && (name.starts_with(".wh.") || (meta.file_type().is_char_device() && meta.rdev() == 0))
    }

    /// Records `shown` when its name is wanted and its inode changed since the arming.
    fn report(&mut self, name: &str, shown: &str, meta: &std::fs::Metadata) {
        if self.scan.wanted(name) && self.scan.changed(meta) && self.found.len() < FOUND_MAX {
            self.found.push(shown.to_owned());
        }
    }
}

/// Single-quotes `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The scan both ways over the same tree: the walk and `find` in bash with `HOME` set.
    fn both(scan: &ChangeScan, home: &Path) -> (Vec<String>, Vec<String>) {
        let mut walked = scan.walk(home, Duration::from_secs(30)).unwrap();
        let out = Command::new("bash")
            .arg("-c")
            .arg(scan.find_command())
            .env("HOME", home)
            .current_dir("/")
            .output()
            .expect("bash");
        let mut found: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        walked.sort();
        found.sort();
        (walked, found)
    }

    #[test]
    fn the_walk_finds_what_find_finds() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join("pkg/__pycache__")).unwrap();
        std::fs::create_dir_all(h.join("deep/er/_pytest")).unwrap();
        for f in [
            "conftest.py",
            "pkg/evil.pth",
            "pkg/__pycache__/conftest.py",
            "deep/er/_pytest/x.py",
            "json.py",
            "notes.txt",
            "deep/er/sitecustomize.py",
        ] {
            std::fs::write(h.join(f), "x").unwrap();
        }
        std::fs::create_dir(h.join("os")).unwrap();
        std::os::unix::fs::symlink("/usr/lib", h.join("linked")).unwrap();
        let since = |secs_ago: u64| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                - Duration::from_secs(secs_ago)
        };
        let hooks = ChangeScan {
            roots: vec!["~".into()],
            names: ["conftest.py", "*.pth", "_pytest", "sitecustomize.py"]
                .map(String::from)
                .into(),
            top_level: false,
            since: since(5),
        };
        let (walked, found) = both(&hooks, h);
        assert_eq!(walked, found);
        assert_eq!(walked.len(), 4, "{walked:?}");
        let all = ChangeScan {
            roots: vec!["~/deep".into(), "/nonexistent-root".into()],
            names: Arc::new([]),
            ..hooks.clone()
        };
        let (walked, found) = both(&all, h);
        assert_eq!(walked, found);
        assert_eq!(walked.len(), 5, "{walked:?}");
        // A walk past its deadline is an error, not a clean result.
        let late = all.walk(h, Duration::ZERO).unwrap_err();
        assert!(
            late.to_string().contains("did not finish in time"),
            "{late}"
        );
        let shadows = ChangeScan {
            roots: vec!["~".into()],
            names: ["json.py", "json", "os.py", "os", "deep"]
                .map(String::from)
                .into(),
            top_level: true,
            since: since(5),
        };
        let (walked, found) = both(&shadows, h);
        assert_eq!(walked, found);
        assert_eq!(walked.len(), 3, "{walked:?}");
        // Nothing changed after a second from now.
        let later = ChangeScan {
            since: since(0) + Duration::from_secs(2),
            ..hooks
        };
        assert_eq!(both(&later, h), (Vec::new(), Vec::new()));
    }

    #[test]
    fn over_an_upper_directory_whiteouts_and_markers_are_not_files() {
        let upper = tempfile::tempdir().unwrap();
        let home = upper.path().join("root");
        std::fs::create_dir_all(home.join("pkg")).unwrap();
        for f in [".wh.conftest.py", "pkg/.wh..wh..opq", "pkg/conftest.py"] {
            std::fs::write(home.join(f), "").unwrap();
        }
        let scan = ChangeScan {
            roots: vec!["~".into()],
            names: ["conftest.py", ".wh.conftest.py", ".wh..wh..opq"]
                .map(String::from)
                .into(),
            top_level: false,
            since: Duration::ZERO,
        };
        let found = scan
            .walk_in(
                upper.path(),
                Path::new("/root"),
                Duration::from_secs(5),
                true,
            )
            .unwrap();
        assert_eq!(found, ["/root/pkg/conftest.py"]);
        let top = ChangeScan {
            top_level: true,
            ..scan
        };
        let found = top
            .walk_in(
                upper.path(),
                Path::new("/root"),
                Duration::from_secs(5),
                true,
            )
            .unwrap();
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
