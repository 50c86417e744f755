//! Program lookups on `PATH` remembered until something changes where they looked.
//!
//! A command the local backend starts itself (`direct.rs`) is looked up on `PATH` as bash does,
//! afresh every time: one `stat` per directory before the one holding the program (eight
//! misses for `cat` on a `PATH` with `~/.cargo/bin` and pyenv's shims first), then the execute
//! check and a read of the file's first bytes, for every command, although the answer rarely
//! changes. The answers are kept per `PATH` and name, and an inotify watch on every
//! directory of that `PATH` and on each one's parent forgets all of them as soon as anything is
//! created, removed, renamed, written or has its mode changed there (a program that now
//! shadows the found one, a removed one, a `chmod -x`, a `PATH` directory made or replaced).
//! Each lookup first reads the watch's pending events (one non-blocking `read`), so a change
//! finished before the lookup began is always seen. A directory replaced further up (a
//! grandparent renamed) is not noticed; such a lookup answers what it answered before, and a
//! program that is gone by then fails to start, which sends the command to the shell.
//! Where inotify is not available (or its watch limit is reached), every lookup searches.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::debug;

/// At most this many answers are kept (a model can ask for any number of names).
const KEPT_MAX: usize = 4096;

/// What changes a kept answer: entries made, removed or renamed, a file written or its mode
/// changed, the watched directory itself removed or renamed.
const WATCHED_EVENTS: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// The process's kept lookups.
static MEMO: Mutex<Memo> = Mutex::new(Memo::Untried);

/// Whether lookups can be kept.
enum Memo {
    /// No lookup yet, or the last watch was lost: a fresh one is made at the next lookup.
    Untried,
    /// This process cannot make an inotify watch: every lookup searches.
    Unavailable,
    /// Lookups are kept.
    Kept(PathMemo),
}

/// `search(path, name)`'s answer, kept while nothing changes in `path`'s directories.
pub(crate) fn remembered(
    path: &OsStr,
    name: &OsStr,
    search: impl FnOnce(&OsStr, &OsStr) -> Option<PathBuf>,
) -> Option<PathBuf> {
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Memo::Untried = *memo {
        *memo = PathMemo::new().map_or(Memo::Unavailable, Memo::Kept);
    }
    let Memo::Kept(kept) = &mut *memo else {
        return search(path, name);
    };
    if !kept.forget_changed() {
        *memo = Memo::Untried;
        return search(path, name);
    }
    if let Some(found) = kept.found.get(path).and_then(|names| names.get(name)) {
        return found.clone();
    }
    // Watched before the search: a change during it shows at the next lookup.
    if !kept.watch(path) {
        return search(path, name);
    }
    let found = search(path, name);
    if kept.len >= KEPT_MAX {
        kept.found.clear();
        kept.len = 0;
    }
    kept.len += 1;
    kept.found
        .entry(path.to_owned())
        .or_default()
        .insert(name.to_owned(), found.clone());
    found
}

/// The kept answers and the watch that forgets them.
struct PathMemo {
    inotify: OwnedFd,
    /// Answers by `PATH`, then name.
    found: HashMap<OsString, HashMap<OsString, Option<PathBuf>>>,
    /// How many answers are kept.
    len: usize,
    /// The `PATH`s whose directories are watched.
    watched: Vec<OsString>,
    /// The `PATH`s a directory of which could not be watched (the watch limit, say): their
    /// lookups search every time.
    unwatchable: Vec<OsString>,
}

impl PathMemo {
    fn new() -> Option<Self> {
        // SAFETY: inotify_init1 takes flags only; the descriptor it returns is owned here.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            debug!(
                "no inotify ({}): programs are looked up on PATH at every start",
                std::io::Error::last_os_error()
            );
            return None;
        }
        Some(PathMemo {
            // SAFETY: `fd` was just opened and nothing else owns it.
            inotify: unsafe { OwnedFd::from_raw_fd(fd) },
            found: HashMap::new(),
            len: 0,
            watched: Vec::new(),
            unwatchable: Vec::new(),
        })
    }

    /// Reads the pending events and forgets every answer when there was one. False when the
    /// watch itself can no longer be trusted (a watched directory is gone, events were lost,
    /// the descriptor fails): the memo is then dropped and made anew.
    fn forget_changed(&mut self) -> bool {
        let mut events = [0u8; 4096];
        loop {
            // SAFETY: reads into a buffer of the given length from a descriptor owned here.
            let n = unsafe {
                libc::read(
                    self.inotify.as_raw_fd(),
                    events.as_mut_ptr().cast(),
                    events.len(),
                )
            };
            match n {
                n if n > 0 => {
                    self.found.clear();
                    self.len = 0;
                    if !watches_hold(&events[..n as usize]) {
                        return false;
                    }
                }
                _ => {
                    let error = std::io::Error::last_os_error();
                    return n < 0 && error.kind() == std::io::ErrorKind::WouldBlock;
                }
            }
        }
    }

    /// Watches every directory of `path` and each one's parent (the nearest existing
    /// ancestor of one that does not exist); false when one cannot be watched.
    fn watch(&mut self, path: &OsStr) -> bool {
        if self.watched.iter().any(|p| p == path) {
            return true;
        }
        if self.unwatchable.iter().any(|p| p == path) {
            return false;
        }
        for entry in path.as_bytes().split(|b| *b == b':') {
            let dir = Path::new(OsStr::from_bytes(entry));
            if !dir.is_absolute() {
                // The search stops here: nothing after it is looked at.
                break;
            }
            let parent = dir.parent().unwrap_or(dir);
            if !self.watch_nearest(dir) || !self.watch_nearest(parent) {
                debug!(
                    "cannot watch {} ({}): programs on that PATH are looked up at every start",
                    dir.display(),
                    std::io::Error::last_os_error()
                );
                self.unwatchable.push(path.to_owned());
                return false;
            }
        }
        self.watched.push(path.to_owned());
        true
    }

    /// Watches `dir`, or its nearest existing ancestor when it does not exist.
    fn watch_nearest(&self, dir: &Path) -> bool {
        let mut at = Some(dir);
        while let Some(dir) = at {
            let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
                return false;
            };
            // SAFETY: a valid descriptor and NUL-terminated path; only the kernel's watch
            // list changes.
            let wd = unsafe {
                libc::inotify_add_watch(self.inotify.as_raw_fd(), c.as_ptr(), WATCHED_EVENTS)
            };
            if wd >= 0 {
                return true;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => at = dir.parent(),
                _ => return false,
            }
        }
        false
    }
}

/// False when an event says a watch is gone or events were lost: a watched directory removed
/// or renamed, its file system unmounted, the event queue overflowed.
fn watches_hold(mut events: &[u8]) -> bool {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let lost = libc::IN_IGNORED
        | libc::IN_Q_OVERFLOW
        | libc::IN_DELETE_SELF
        | libc::IN_MOVE_SELF
        | libc::IN_UNMOUNT;
    while events.len() >= HEADER {
        let field = |at: usize| u32::from_ne_bytes(events[at..at + 4].try_into().expect("4 bytes"));
        // `wd`, `mask`, `cookie`, `len`, then `len` bytes of name.
        let (mask, name_len) = (field(4), field(12) as usize);
        if mask & lost != 0 {
            return false;
        }
        events = events.get(HEADER + name_len..).unwrap_or_default();
    }
    true
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    use super::*;
    use crate::sandbox::exec::direct::find_program;

    fn program(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// Every change a fresh search would see is seen by the next lookup: a program made
    /// earlier on `PATH` (shadowing), one made in a `PATH` directory that did not exist, a
    /// `chmod -x`, a removal; without a change the search is not repeated.
    #[test]
    fn a_kept_lookup_is_forgotten_when_its_directories_change() {
        let root = tempfile::tempdir().expect("tempdir");
        let (first, second, later) = (
            root.path().join("first"),
            root.path().join("second"),
            root.path().join("later/bin"),
        );
        std::fs::create_dir(&first).expect("mkdir");
        std::fs::create_dir(&second).expect("mkdir");
        let path = OsString::from(format!(
            "{}:{}:{}",
            later.display(),
            first.display(),
            second.display()
        ));
        let searches = AtomicUsize::new(0);
        let look = |name: &str| {
            remembered(&path, OsStr::new(name), |p, n| {
                searches.fetch_add(1, SeqCst);
                find_program(p, n)
            })
        };
        let in_second = program(&second, "tool");
        assert_eq!(look("tool"), Some(in_second.clone()));
        for _ in 0..10 {
            assert_eq!(look("tool"), Some(in_second.clone()));
        }
        assert_eq!(look("absent"), None);
        assert_eq!(look("absent"), None);
        assert!(
            searches.load(SeqCst) <= 4,
            "unchanged directories are searched again: {} searches for 13 lookups",
            searches.load(SeqCst)
        );
        let in_first = program(&first, "tool");
        assert_eq!(look("tool"), Some(in_first.clone()), "a shadowing program");
        std::fs::set_permissions(&in_first, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // No execute bit at all: not even root may run it.
        assert_eq!(look("tool"), Some(in_second.clone()), "chmod -x");
        std::fs::remove_file(&in_first).expect("rm");
        assert_eq!(look("tool"), Some(in_second.clone()), "a removed program");
        std::fs::create_dir_all(&later).expect("mkdir -p");
        let in_later = program(&later, "tool");
        assert_eq!(look("tool"), Some(in_later), "a PATH directory made later");
        assert_eq!(look("absent"), None);
        let absent = program(&second, "absent");
        assert_eq!(look("absent"), Some(absent));
    }
}
