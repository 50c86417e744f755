//! Link containment for files written onto the host or into a local sandbox: a symbolic link
//! is accepted only when its target, resolved the way the kernel would (through the links
//! already in the tree, not lexically), stays inside the tree; nothing is written, created
//! or chmod-ed through a link. `a/l -> ..` followed by `m -> a/l/..` is refused, although
//! each target looks harmless on its own.

use std::ffi::OsString;
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::sandbox::error::SandboxError;

/// Links followed while resolving one target (the kernel's limit is 40).
const MAX_HOPS: usize = 40;

/// True when a link at `rel` (relative to `root`) pointing at `target` resolves inside
/// `root`, given what is in `root` now. Refused as well: absolute targets, more than 40
/// links, and `..` after a component that is missing or not a directory (its meaning would
/// depend on what is created there later).
pub(crate) fn link_resolves_inside(root: &Path, rel: &Path, target: &Path) -> bool {
    let mut walk = Walk {
        root,
        at: Vec::new(),
        hops: 0,
        unknown: false,
    };
    let parent = rel.parent().unwrap_or(Path::new(""));
    walk.follow(parent) && walk.follow(target)
}

/// A resolution in progress: `at` is the current location below `root`.
struct Walk<'a> {
    root: &'a Path,
    at: Vec<OsString>,
    hops: usize,
    /// A component on the way does not exist (or is not a directory).
    unknown: bool,
}

impl Walk<'_> {
    fn here(&self) -> PathBuf {
        let mut p = self.root.to_path_buf();
        p.extend(&self.at);
        p
    }

    /// Applies `path` to the current location; false once it leaves the root.
    fn follow(&mut self, path: &Path) -> bool {
        if path.is_absolute() {
            return false;
        }
        for c in path.components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir => {
                    if self.unknown || self.at.pop().is_none() {
                        return false;
                    }
                }
                Component::Normal(name) => {
                    self.at.push(name.to_owned());
                    if !self.step_into() {
                        return false;
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// Resolves the component just pushed: follows it when it is a link.
    fn step_into(&mut self) -> bool {
        if self.unknown {
            return true;
        }
        let here = self.here();
        match fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                self.hops += 1;
                let Ok(target) = fs::read_link(&here) else {
                    return false;
                };
                self.at.pop();
                self.hops <= MAX_HOPS && self.follow(&target)
            }
            Ok(m) if m.is_dir() => true,
            _ => {
                self.unknown = true;
                true
            }
        }
    }
}

/// Refuses to write below a symbolic link inside the tree at `root` (a link that was just
/// written could otherwise redirect later entries outside it).
pub(crate) fn check_no_link_ancestors(root: &Path, rel: &Path) -> Result<(), SandboxError> {
    let mut cur = root.to_path_buf();
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            cur.push(c);
            if is_link(&cur) {
                return Err(SandboxError::Path(format!(
                    "{} goes through the symbolic link {}",
                    rel.display(),
                    cur.display()
                )));
            }
        }
    }
    Ok(())
}

/// True when `path` itself is a symbolic link.
pub(crate) fn is_link(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Refuses a directory (created, or chmod-ed) where a symbolic link is.
pub(crate) fn refuse_dir_over_link(dest: &Path) -> Result<(), SandboxError> {
    if is_link(dest) {
        return Err(SandboxError::Path(format!(
            "{} is a symbolic link; a directory is not created or changed through it",
            dest.display()
        )));
    }
    Ok(())
}

/// Writes the link `dest -> target`; an existing link is kept only when it already points
/// there (replacing it could change where earlier, already checked links resolve).
pub(crate) fn write_link(dest: &Path, target: &Path) -> Result<(), SandboxError> {
    if is_link(dest) {
        return match fs::read_link(dest) {
            Ok(old) if old == target => Ok(()),
            _ => Err(SandboxError::Path(format!(
                "{} is already a symbolic link to elsewhere",
                dest.display()
            ))),
        };
    }
    let _ = fs::remove_file(dest);
    std::os::unix::fs::symlink(target, dest)
        .map_err(|e| SandboxError::host_io(dest.display().to_string(), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("root/a/b")).unwrap();
        dir
    }

    #[test]
    fn plain_targets_inside_and_outside() {
        let dir = tree();
        let root = dir.path().join("root");
        assert!(link_resolves_inside(
            &root,
            Path::new("a/l"),
            Path::new("../b")
        ));
        assert!(link_resolves_inside(
            &root,
            Path::new("l"),
            Path::new("a/b/x")
        ));
        assert!(!link_resolves_inside(
            &root,
            Path::new("a/l"),
            Path::new("../../x")
        ));
        assert!(!link_resolves_inside(
            &root,
            Path::new("l"),
            Path::new("/etc/passwd")
        ));
    }

    #[test]
    fn chained_links_are_resolved_not_read_lexically() {
        let dir = tree();
        let root = dir.path().join("root");
        assert!(link_resolves_inside(
            &root,
            Path::new("a/l"),
            Path::new("..")
        ));
        symlink("..", root.join("a/l")).unwrap();
        assert!(!link_resolves_inside(
            &root,
            Path::new("m"),
            Path::new("a/l/..")
        ));
        symlink(".", root.join("d")).unwrap();
        assert!(!link_resolves_inside(
            &root,
            Path::new("e"),
            Path::new("d/..")
        ));
        assert!(link_resolves_inside(
            &root,
            Path::new("f"),
            Path::new("a/l/a/b")
        ));
    }

    #[test]
    fn dot_dot_after_a_missing_component_is_refused() {
        let dir = tree();
        let root = dir.path().join("root");
        assert!(!link_resolves_inside(
            &root,
            Path::new("x"),
            Path::new("later/..")
        ));
        assert!(link_resolves_inside(
            &root,
            Path::new("x"),
            Path::new("later/y")
        ));
    }

    #[test]
    fn link_loops_are_refused() {
        let dir = tree();
        let root = dir.path().join("root");
        symlink("p", root.join("q")).unwrap();
        symlink("q", root.join("p")).unwrap();
        assert!(!link_resolves_inside(
            &root,
            Path::new("x"),
            Path::new("p/y")
        ));
    }

    #[test]
    fn links_are_not_replaced_by_other_links() {
        let dir = tree();
        let l = dir.path().join("root/k");
        write_link(&l, Path::new("a/b")).unwrap();
        write_link(&l, Path::new("a/b")).unwrap();
        assert!(write_link(&l, Path::new(".")).is_err());
        assert!(refuse_dir_over_link(&l).is_err());
    }
}
