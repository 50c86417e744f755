//! A container's changes read from the daemon's own storage, when it is on this host: an
//! overlay driver (`overlay2`, `fuse-overlayfs`) keeps everything a container changed, and
//! nothing else, in the container's upper directory. Reading only the watched roots there
//! takes milliseconds, where the daemon's diff on `fuse-overlayfs` walks the whole image
//! (about 2 s a container). Nothing inside the container can write the upper directory except
//! by changing its files, which is exactly what the tripwires look for; the upper directory is
//! never followed through links, so a link the agent planted cannot lead the walk elsewhere.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use bollard::models::DriverData;
use tracing::warn;

use crate::sandbox::change_scan::ChangeScan;
use crate::sandbox::error::SandboxError;

/// Storage drivers whose containers' changes are an overlay upper directory.
const OVERLAY_DRIVERS: &[&str] = &["overlay2", "fuse-overlayfs", "overlay"];
/// Extended attributes that mark an overlay directory opaque (it hides the layers below it:
/// the directory was removed and made again). `trusted.*` is the kernel's and rootful
/// fuse-overlayfs's, `user.*` the unprivileged ones'.
const OPAQUE_XATTRS: &[&str] = &[
    "trusted.overlay.opaque",
    "user.overlay.opaque",
    "user.fuseoverlayfs.opaque",
];
/// Entries fuse-overlayfs puts in an opaque directory to mark it (not changes themselves).
const OPAQUE_MARKERS: &[&str] = &[".wh..wh..opq", ".wh..opq"];
/// The prefix of a whiteout file (`.wh.NAME`: NAME was deleted), where no device can be made.
const WHITEOUT_PREFIX: &str = ".wh.";
/// Entries one walk reports at most: past this, what was found already fires the wire, and the
/// walk stops.
const FOUND_MAX: usize = 10_000;
/// Depth of directories followed at most.
const DEPTH_MAX: usize = 256;

/// A container's upper directory, readable here, and the home of its command user.
#[derive(Debug, Clone)]
pub(crate) struct UpperDir {
    upper: PathBuf,
    home: PathBuf,
}

impl UpperDir {
    /// The upper directory the daemon names for a container (its inspect's `GraphDriver`), or
    /// why the changes cannot be read from it here. `user` is the command user (the settings'
    /// or the image's), `env` the container's environment: the home is what a command would
    /// get as `$HOME`, from `env` or else the image's own `/etc/passwd` (read from the
    /// read-only lower layers, so the agent cannot move it).
    pub(crate) fn from_driver(
        driver: Option<&DriverData>,
        user: &str,
        env: &[String],
    ) -> Result<UpperDir, String> {
        let Some(driver) = driver else {
            return Err("the daemon names no storage driver".into());
        };
        if !OVERLAY_DRIVERS.contains(&driver.name.as_str()) {
            return Err(format!(
                "its storage driver `{}` keeps no upper directory",
                driver.name
            ));
        }
        let Some(upper) = driver.data.get("UpperDir").filter(|u| u.starts_with('/')) else {
            return Err("the daemon names no upper directory".into());
        };
        if let Err(e) = std::fs::read_dir(upper) {
            return Err(format!(
                "its upper directory {upper} cannot be read from this process ({e}): a daemon on \
                 another host, in another mount namespace, or this process not root"
            ));
        }
        // The kernel's overlay marks a replaced directory only in a `trusted.*` attribute,
        // which only a privileged process can read: without it a replacement would be missed.
        if driver.name != "fuse-overlayfs" && unsafe { libc::geteuid() } != 0 {
            return Err(format!(
                "`{}` marks replaced directories in trusted.* attributes, which only root can read",
                driver.name
            ));
        }
        let lowers: Vec<PathBuf> = driver
            .data
            .get("LowerDir")
            .map(|l| l.split(':').map(PathBuf::from).collect())
            .unwrap_or_default();
        Ok(UpperDir {
            upper: PathBuf::from(upper),
            home: PathBuf::from(home_of(user, env, &lowers)),
        })
    }

    /// The command user's home in the container.
    pub(crate) fn home(&self) -> &Path {
        &self.home
    }

    /// The container's changes at or under `roots` (absolute paths; a root ending in
    /// `python3` also covers its versioned siblings, `python3.11`), in the daemon's diff's
    /// form: every changed, added or deleted path, directories holding changes included. A
    /// root's ancestor that the container replaced — by a link, a file, or a directory made
    /// anew — or deleted is reported too (and the root with it when a new directory hides
    /// it): what the root's paths resolve to is then the container's doing, which the daemon's
    /// diff reports only as one changed directory. A walk past `deadline` is an error.
    pub(crate) fn changes(
        &self,
        roots: &[String],
        deadline: Duration,
    ) -> Result<Vec<String>, SandboxError> {
        let mut walk = Walk {
            until: Instant::now() + deadline,
            found: Vec::new(),
            seen: HashSet::new(),
        };
        for root in roots {
            walk.root(&self.upper, root)?;
        }
        Ok(walk.found)
    }
}

impl UpperDir {
    /// The tripwires' file scans over the upper directory (`~` is the command user's home): what
    /// changed since the arming is there, with the inode change times the container's own
    /// `find` would read. `None` when a root's ancestor there is a link: the scans then run in
    /// the container, which resolves it there.
    pub(crate) fn scan(
        &self,
        scans: &[ChangeScan],
        deadline: Duration,
    ) -> Result<Option<Vec<Vec<String>>>, SandboxError> {
        let home = &self.home;
        for root in scans.iter().flat_map(|s| s.resolved_roots(home)) {
            let mut at = self.upper.clone();
            let parts: Vec<&str> = root.split('/').filter(|p| !p.is_empty()).collect();
            for part in parts.iter().take(parts.len().saturating_sub(1)) {
                at.push(part);
                if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                    return Ok(None);
                }
            }
        }
        scans
            .iter()
            .map(|scan| scan.walk_in(&self.upper, home, deadline, true))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// `$HOME` of `user` (`name` or `uid`, with an optional `:group`; empty is root) in a container
/// with environment `env`, whose image's layers are `lowers` (top first): `HOME` from the
/// environment, else the user's entry in the image's `/etc/passwd`, else `/` (as Docker does).
fn home_of(user: &str, env: &[String], lowers: &[PathBuf]) -> String {
    if let Some(home) = env.iter().rev().find_map(|e| e.strip_prefix("HOME=")) {
        return home.to_owned();
    }
    let user = user.split(':').next().unwrap_or("");
    let user = if user.is_empty() { "root" } else { user };
    let passwd = lowers
        .iter()
        .find_map(|layer| std::fs::read_to_string(layer.join("etc/passwd")).ok())
        .unwrap_or_default();
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && (f[0] == user || f[2] == user))
        .map(|f| f[5].to_owned())
        .filter(|h| h.starts_with('/'))
        .unwrap_or_else(|| {
            if user == "root" || user == "0" {
                "/root".into()
            } else {
                "/".into()
            }
        })
}

/// What the upper directory holds for one name.
enum Entry {
    /// Nothing: the container left it (and everything below it) as the image had it.
    Unchanged,
    /// A whiteout: the container deleted it.
    Deleted,
    /// A directory; `opaque` when made anew (it hides what the image had there).
    Dir { opaque: bool },
    /// A link, file or device standing where the image's entry was.
    Other,
}

struct Walk {
    until: Instant,
    found: Vec<String>,
    seen: HashSet<String>,
}

impl Walk {
    fn push(&mut self, path: String) {
        if self.found.len() < FOUND_MAX && self.seen.insert(path.clone()) {
            self.found.push(path);
        }
    }

    fn check_deadline(&self, shown: &str) -> Result<(), SandboxError> {
        if Instant::now() > self.until {
            return Err(SandboxError::Io(format!(
                "the tripwire's read of the container's changes under {shown} did not finish in time"
            )));
        }
        Ok(())
    }

    /// One watched root: its ancestors, then the root (or, for a `python3` root, each sibling
    /// it covers) and everything below it.
    fn root(&mut self, upper: &Path, root: &str) -> Result<(), SandboxError> {
        let parts: Vec<&str> = root
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        if parts.contains(&"..") {
            return Ok(());
        }
        let Some((last, ancestors)) = parts.split_last() else {
            // `/` itself: the whole upper directory.
            return self.below(upper, "", 0);
        };
        let (mut dir, mut shown) = (upper.to_path_buf(), String::new());
        for part in ancestors {
            let path = format!("{shown}/{part}");
            match entry(&dir, part) {
                Entry::Unchanged => return Ok(()),
                Entry::Deleted | Entry::Other => {
                    self.push(path);
                    return Ok(());
                }
                Entry::Dir { opaque } => {
                    if opaque {
                        // Made anew: the root below it is the container's, whatever is there.
                        self.push(path.clone());
                        self.push(format!("/{}", parts.join("/")));
                    }
                }
            }
            dir.push(part);
            shown = path;
        }
        if !root.ends_with("python3") {
            return self.one(&dir, &shown, last, 0);
        }
        // Every entry (and whiteout) of the parent whose name starts with the root's.
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let named = name.strip_prefix(WHITEOUT_PREFIX).unwrap_or(&name);
            if named.starts_with(last) {
                self.one(&dir, &shown, &name, 0)?;
            }
        }
        Ok(())
    }

    /// The entry `name` of the upper directory `dir` (shown as `shown`) and what is below it.
    fn one(
        &mut self,
        dir: &Path,
        shown: &str,
        name: &str,
        depth: usize,
    ) -> Result<(), SandboxError> {
        if OPAQUE_MARKERS.contains(&name) {
            return Ok(());
        }
        if let Some(deleted) = name.strip_prefix(WHITEOUT_PREFIX) {
            self.push(format!("{shown}/{deleted}"));
            return Ok(());
        }
        let path = format!("{shown}/{name}");
        match entry(dir, name) {
            Entry::Unchanged => {}
            Entry::Deleted | Entry::Other => self.push(path),
            Entry::Dir { .. } => {
                self.push(path.clone());
                if depth < DEPTH_MAX {
                    self.below(&dir.join(name), &path, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    /// Everything in the upper directory `dir` (shown as `shown`).
    fn below(&mut self, dir: &Path, shown: &str, depth: usize) -> Result<(), SandboxError> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            if self.found.len() >= FOUND_MAX {
                return Ok(());
            }
            self.check_deadline(shown)?;
            let name = entry.file_name();
            self.one(dir, shown, &name.to_string_lossy(), depth)?;
        }
        Ok(())
    }
}

/// What the upper directory `dir` holds for `name` (links are never followed).
fn entry(dir: &Path, name: &str) -> Entry {
    if std::fs::symlink_metadata(dir.join(format!("{WHITEOUT_PREFIX}{name}"))).is_ok() {
        return Entry::Deleted;
    }
    let path = dir.join(name);
    let Ok(meta) = std::fs::symlink_metadata(&path) else {
        return Entry::Unchanged;
    };
    let kind = meta.file_type();
    if kind.is_char_device() && meta.rdev() == 0 {
        return Entry::Deleted;
    }
    if !kind.is_dir() {
        return Entry::Other;
    }
    let opaque = OPAQUE_MARKERS
        .iter()
        .any(|m| std::fs::symlink_metadata(path.join(m)).is_ok())
        || OPAQUE_XATTRS.iter().any(|x| xattr_is_y(&path, x));
    Entry::Dir { opaque }
}

/// Whether the extended attribute `name` of `path` (not followed) is `y`.
fn xattr_is_y(path: &Path, name: &str) -> bool {
    let (Ok(path), Ok(name)) = (
        CString::new(path.as_os_str().as_bytes()),
        CString::new(name),
    ) else {
        return false;
    };
    let mut value = [0u8; 4];
    // SAFETY: both strings are NUL-terminated and the buffer's length is passed.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n == 1 && value[0] == b'y'
}

/// Daemons whose storage this process cannot read, each said once.
static SAID: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Says once per daemon why its containers' changes come from its diff.
pub(crate) fn say_falling_back(host: &str, why: &str) {
    let first = SAID
        .lock()
        .map(|mut said| said.insert(host.to_owned()))
        .unwrap_or(false);
    if first {
        warn!(
            "tripwire: the changes of containers on the Docker daemon at {host} come from the \
             daemon's diff (slower: seconds a rollout on some storage drivers), since {why}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper_with(build: impl FnOnce(&Path)) -> (tempfile::TempDir, UpperDir) {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path());
        let upper = UpperDir {
            upper: dir.path().to_path_buf(),
            home: PathBuf::from("/root"),
        };
        (dir, upper)
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    const ROOTS: &[&str] = &["/usr/local/bin", "/usr/lib/python3", "/etc/profile"];

    fn roots() -> Vec<String> {
        ROOTS.iter().map(|r| (*r).to_owned()).collect()
    }

    #[test]
    fn changes_under_roots_are_read_and_others_ignored() {
        let (_d, upper) = upper_with(|u| {
            std::fs::create_dir_all(u.join("usr/local/bin")).unwrap();
            std::fs::write(u.join("usr/local/bin/grep"), "x").unwrap();
            std::fs::write(u.join("usr/local/bin/.wh.pip"), "").unwrap();
            std::fs::create_dir_all(u.join("usr/lib/python3.11/site-packages")).unwrap();
            std::fs::write(u.join("usr/lib/python3.11/site-packages/a.pth"), "x").unwrap();
            std::fs::write(u.join("usr/lib/.wh.python3.12"), "").unwrap();
            std::fs::create_dir_all(u.join("usr/lib/other")).unwrap();
            std::fs::write(u.join("usr/lib/other/x"), "x").unwrap();
            std::fs::create_dir_all(u.join("root")).unwrap();
            std::fs::write(u.join("root/answer.txt"), "x").unwrap();
        });
        let found = upper.changes(&roots(), Duration::from_secs(5)).unwrap();
        assert_eq!(
            sorted(found),
            [
                "/usr/lib/python3.11",
                "/usr/lib/python3.11/site-packages",
                "/usr/lib/python3.11/site-packages/a.pth",
                "/usr/lib/python3.12",
                "/usr/local/bin",
                "/usr/local/bin/grep",
                "/usr/local/bin/pip",
            ]
        );
    }

    #[test]
    fn an_ancestor_replaced_by_a_link_or_made_anew_is_reported() {
        let (_d, upper) = upper_with(|u| {
            std::fs::create_dir_all(u.join("usr")).unwrap();
            std::os::unix::fs::symlink("/tmp/ul", u.join("usr/local")).unwrap();
            std::fs::create_dir_all(u.join("etc")).unwrap();
            std::fs::write(u.join("etc/.wh..wh..opq"), "").unwrap();
        });
        let found = upper.changes(&roots(), Duration::from_secs(5)).unwrap();
        assert_eq!(sorted(found), ["/etc", "/etc/profile", "/usr/local"]);
        // Nothing changed: nothing found.
        let (_d, empty) = upper_with(|_| {});
        assert!(empty
            .changes(&roots(), Duration::from_secs(5))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_home_comes_from_the_environment_or_the_images_passwd() {
        let image = tempfile::tempdir().unwrap();
        let (top, base) = (image.path().join("top"), image.path().join("base"));
        std::fs::create_dir_all(base.join("etc")).unwrap();
        std::fs::create_dir_all(&top).unwrap();
        std::fs::write(
            base.join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nagent:x:1000:1000::/home/agent:/bin/sh\n",
        )
        .unwrap();
        let lowers = [top, base];
        assert_eq!(home_of("", &[], &lowers), "/root");
        assert_eq!(home_of("agent", &[], &lowers), "/home/agent");
        assert_eq!(home_of("1000:1000", &[], &lowers), "/home/agent");
        assert_eq!(home_of("4242", &[], &lowers), "/");
        let env = ["PATH=/bin".to_owned(), "HOME=/work".to_owned()];
        assert_eq!(home_of("agent", &env, &lowers), "/work");
    }

    #[test]
    fn storage_that_cannot_be_read_here_says_why() {
        let driver = |name: &str, upper: &str| DriverData {
            name: name.into(),
            data: [("UpperDir".to_owned(), upper.to_owned())].into(),
        };
        let why = UpperDir::from_driver(Some(&driver("vfs", "/x")), "", &[]).unwrap_err();
        assert!(why.contains("`vfs` keeps no upper directory"), "{why}");
        let why = UpperDir::from_driver(
            Some(&driver("fuse-overlayfs", "/nonexistent/upper/diff")),
            "",
            &[],
        )
        .unwrap_err();
        assert!(why.contains("cannot be read from this process"), "{why}");
        let why = UpperDir::from_driver(None, "", &[]).unwrap_err();
        assert!(why.contains("no storage driver"), "{why}");
        let here = tempfile::tempdir().unwrap();
        let upper = here.path().display().to_string();
        let found = UpperDir::from_driver(Some(&driver("fuse-overlayfs", &upper)), "", &[]);
        assert_eq!(found.unwrap().home(), Path::new("/root"));
    }

    #[test]
    fn a_walk_past_its_deadline_is_an_error() {
        let (_d, upper) = upper_with(|u| {
            std::fs::create_dir_all(u.join("usr/local/bin/d")).unwrap();
        });
        let late = upper.changes(&roots(), Duration::ZERO).unwrap_err();
        assert!(
            late.to_string().contains("did not finish in time"),
            "{late}"
        );
    }
}
