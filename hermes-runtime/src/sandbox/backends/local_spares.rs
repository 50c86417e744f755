//! Empty scratch directories kept for the next sandbox. A sandbox that never started a process
//! (a verifier that writes and reads a file, an `openenv` session whose tools run in this
//! process) is emptied at teardown and renamed aside instead of removed, and the next sandbox
//! is renamed into place instead of made. On an ext4 without a journal, each inode deleted in
//! the last minutes makes every new one in its block group slower to allocate: a `mkdir` and
//! its `rmdir` cost several times two renames, more as the deletions pile up.
//!
//! Only this process's file tools ever wrote in such a directory, so nothing of the sandbox
//! outlives the emptying: no process could have set its mode, owner or attributes, and one
//! whose mode is not the run's is removed, not kept.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How many empty directories are kept at most: about as many sandboxes as are torn down
/// before the next ones are made, in the bursts of a few thousand sessions ending at once.
const KEPT: usize = 1024;

/// The most entries a directory may hold for [`Spares::keep_few`] to empty it on the calling
/// thread.
const FEW: usize = 16;

/// The run's spare scratch directories.
#[derive(Debug)]
pub(super) struct Spares {
    /// The mode a scratch directory is made with (the run's root's): a kept one has it.
    mode: u32,
    dirs: Mutex<Vec<PathBuf>>,
    next: AtomicU64,
}

impl Spares {
    /// The spares of the run whose root is `root` (made the way its scratch directories are).
    pub fn new(root: &Path) -> std::io::Result<Self> {
        Ok(Spares {
            mode: std::fs::metadata(root)?.permissions().mode() & 0o7777,
            dirs: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
        })
    }

    /// Renames a spare into place at `dir`; false when there is none (or it could not be
    /// renamed: `dir` exists and is not empty), and `dir` is to be made.
    pub fn take(&self, dir: &Path) -> bool {
        let Some(spare) = self.dirs.lock().expect("lock poisoned").pop() else {
            return false;
        };
        if std::fs::rename(&spare, dir).is_ok() {
            return true;
        }
        self.dirs.lock().expect("lock poisoned").push(spare);
        false
    }

    /// Empties `dir` (a torn-down scratch directory none of whose processes ever ran) and
    /// keeps it; false when it is not kept (full, another mode, not emptied), and it is to be
    /// removed. Blocking: run it on the blocking pool.
    pub fn keep(&self, dir: &Path) -> bool {
        self.may_keep(dir) && empty(dir).is_ok() && self.set_aside(dir)
    }

    /// [`Spares::keep`] on the calling thread, for a directory of at most [`FEW`] entries and
    /// no directory among them, whose files are all small (the caller knows): a few
    /// microseconds of unlinks, where a hand-off to the blocking pool and back costs more.
    /// `None`, with nothing changed, when it holds more: then `keep` it on the blocking pool.
    pub fn keep_few(&self, dir: &Path) -> Option<bool> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).ok()? {
            let Ok(entry) = entry else { return None };
            if files.len() == FEW || entry.file_type().map_or(true, |t| t.is_dir()) {
                return None;
            }
            files.push(entry.path());
        }
        let emptied = || files.iter().all(|f| std::fs::remove_file(f).is_ok());
        Some(self.may_keep(dir) && emptied() && self.set_aside(dir))
    }

    /// Whether `dir` may be kept: there is room, and it is a directory of the run's mode.
    fn may_keep(&self, dir: &Path) -> bool {
        self.dirs.lock().expect("lock poisoned").len() < KEPT
            && std::fs::symlink_metadata(dir)
                .is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o7777 == self.mode)
    }

    /// Renames the emptied `dir` aside and keeps it.
    fn set_aside(&self, dir: &Path) -> bool {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let spare = dir.with_file_name(format!(".spare-{n}"));
        if std::fs::rename(dir, &spare).is_err() {
            return false;
        }
        self.dirs.lock().expect("lock poisoned").push(spare);
        true
    }
}

/// Removes everything in `dir`, links as links.
fn empty(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_directory_is_renamed_into_place_and_nothing_of_it_is_left() {
        let root = tempfile::tempdir().unwrap();
        let spares = Spares::new(root.path()).unwrap();
        let a = root.path().join("task-a");
        assert!(!spares.take(&a), "none kept yet");
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir_all(a.join("sub/deeper")).unwrap();
        std::fs::write(a.join("sub/deeper/f"), "x").unwrap();
        std::fs::write(a.join("verdict.txt"), "1").unwrap();
        std::os::unix::fs::symlink("/etc", a.join("link")).unwrap();
        assert!(spares.keep(&a));
        assert!(!a.exists());
        assert!(
            std::fs::read_dir("/etc").is_ok(),
            "a link is removed, not followed"
        );

        let b = root.path().join("task-b");
        assert!(spares.take(&b));
        assert_eq!(std::fs::read_dir(&b).unwrap().count(), 0, "empty");
        assert!(!spares.take(&root.path().join("task-c")), "each spare once");
    }

    #[test]
    fn a_few_files_are_emptied_on_the_calling_thread_and_more_are_left_to_the_pool() {
        let root = tempfile::tempdir().unwrap();
        let spares = Spares::new(root.path()).unwrap();
        let few = root.path().join("task-few");
        std::fs::create_dir(&few).unwrap();
        std::fs::write(few.join("verdict.txt"), "1").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", few.join("link")).unwrap();
        assert_eq!(spares.keep_few(&few), Some(true));
        assert!(!few.exists());
        assert!(
            Path::new("/etc/hostname").exists(),
            "a link is removed, not followed"
        );

        let many = root.path().join("task-many");
        std::fs::create_dir(&many).unwrap();
        for i in 0..=FEW {
            std::fs::write(many.join(format!("f{i}")), "x").unwrap();
        }
        assert_eq!(spares.keep_few(&many), None, "more than FEW: the pool's");
        assert_eq!(
            std::fs::read_dir(&many).unwrap().count(),
            FEW + 1,
            "untouched"
        );

        let nested = root.path().join("task-nested");
        std::fs::create_dir_all(nested.join("sub")).unwrap();
        std::fs::write(nested.join("a"), "x").unwrap();
        assert_eq!(
            spares.keep_few(&nested),
            None,
            "a directory inside: the pool's"
        );
        assert!(
            nested.join("a").exists() && nested.join("sub").exists(),
            "untouched"
        );
        assert!(spares.keep(&nested), "the pool's keep empties it");

        assert!(spares.take(&root.path().join("task-next-1")));
        assert!(spares.take(&root.path().join("task-next-2")));
        assert!(!spares.take(&root.path().join("task-next-3")), "two kept");
    }

    #[test]
    fn a_directory_of_another_mode_is_not_kept() {
        let root = tempfile::tempdir().unwrap();
        let spares = Spares::new(root.path()).unwrap();
        let a = root.path().join("task-a");
        std::fs::create_dir(&a).unwrap();
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(mode ^ 0o002)).unwrap();
        assert!(!spares.keep(&a));
        std::fs::write(a.join("f"), "x").unwrap();
        assert_eq!(spares.keep_few(&a), Some(false));
        assert!(a.join("f").exists(), "left to the caller to remove");
    }

    #[test]
    fn a_spare_is_not_renamed_over_a_directory_with_files() {
        let root = tempfile::tempdir().unwrap();
        let spares = Spares::new(root.path()).unwrap();
        let a = root.path().join("task-a");
        std::fs::create_dir(&a).unwrap();
        assert!(spares.keep(&a));
        let b = root.path().join("task-b");
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("kept"), "x").unwrap();
        assert!(!spares.take(&b));
        assert!(b.join("kept").exists());
        assert!(spares.take(&root.path().join("task-c")), "still kept");
    }
}
