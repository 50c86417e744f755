//! Opening host paths that must not pass through a link: a confined local sandbox's file
//! tools check a path with its links resolved, then open it with `openat2(RESOLVE_NO_SYMLINKS)`,
//! so a link the agent swaps in between the check and the open (a daemon of its own can) makes
//! the open fail instead of reaching the host.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `openat2(dir, path, flags, mode)` refusing every symbolic and magic link on the way.
fn openat2(
    dir: libc::c_int,
    path: &Path,
    flags: libc::c_int,
    mode: u32,
) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: open_how is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        u64::from(mode)
    } else {
        0
    };
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `c` and `how` outlive the call; the size is `how`'s.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Opens `path` (absolute) for reading, without following any link.
pub(crate) fn open_read(path: &Path) -> std::io::Result<File> {
    openat2(
        libc::AT_FDCWD,
        path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map(File::from)
}

/// The directory of `path` (absolute), opened as a path without following any link, and the
/// file's name in it.
fn parent_of(path: &Path) -> std::io::Result<(OwnedFd, &std::ffi::OsStr)> {
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no file name",
            ))
        }
    };
    let dir = openat2(libc::AT_FDCWD, parent, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    Ok((dir, name))
}

/// Removes `name` from the directory `dir` (a link as a link).
fn unlink_in(dir: &OwnedFd, name: &std::ffi::OsStr) {
    if let Ok(c) = CString::new(name.as_bytes()) {
        // SAFETY: the name outlives the call; the directory descriptor is open.
        unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    }
}

/// Writes `bytes` to `path` (absolute, its parent existing) as a new file, neither the parent
/// nor the file reached through a link; `false`, with nothing written, when `path` exists.
/// For a sandbox no process ever ran in, where no one can see the file half-written: one
/// file made, where [`write_atomic`] makes a temporary one and renames it.
pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let (dir, name) = parent_of(path)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let mut file = match openat2(dir.as_raw_fd(), Path::new(name), flags, 0o644) {
        Ok(fd) => File::from(fd),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(false),
        Err(e) => return Err(e),
    };
    // The mode asked at creation is masked by the umask; a new file gets 0644 either way.
    let result = file
        .write_all(bytes)
        .and_then(|()| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644)));
    if let Err(e) = result {
        unlink_in(&dir, name);
        return Err(e);
    }
    Ok(true)
}

/// Writes `bytes` to `path` (absolute, its parent existing) through a temporary file renamed
/// over it, neither the parent nor the file reached through a link. Keeps the permissions of
/// a file it replaces.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], tmp_name: &str) -> std::io::Result<()> {
    let (dir, name) = parent_of(path)?;
    let mode = openat2(dir.as_raw_fd(), Path::new(name), libc::O_PATH, 0)
        .and_then(|fd| File::from(fd).metadata())
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
        .unwrap_or(0o644);
    let tmp = Path::new(tmp_name);
    let mut file = File::from(openat2(
        dir.as_raw_fd(),
        tmp,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        mode,
    )?);
    let rename = || {
        let (from, to) = (
            CString::new(tmp_name.as_bytes())?,
            CString::new(name.as_bytes())?,
        );
        // SAFETY: both names outlive the call; the directory descriptor is open.
        let done =
            unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    let result = file.write_all(bytes).and_then(|()| {
        // The mode asked at creation is masked by the umask; the replaced file's is kept.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
    });
    let result = result.and_then(|()| rename());
    if result.is_err() {
        unlink_in(&dir, std::ffi::OsStr::new(tmp_name));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_on_the_way_fails_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        assert!(open_read(&real.join("f")).is_ok());
        let err = open_read(&dir.path().join("link/f")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        let err = write_atomic(&dir.path().join("link/g"), b"y", ".g.tmp").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        assert!(!real.join("g").exists());
        write_atomic(&real.join("g"), b"y", ".g.tmp").unwrap();
        assert_eq!(std::fs::read(real.join("g")).unwrap(), b"y");
        assert!(!real.join(".g.tmp").exists());
    }

    #[test]
    fn a_new_file_is_made_once_and_nothing_existing_is_touched() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        assert!(write_new(&real.join("v"), b"1").unwrap());
        assert_eq!(std::fs::read(real.join("v")).unwrap(), b"1");
        let mode = std::fs::metadata(real.join("v"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o644);
        assert!(!write_new(&real.join("v"), b"2").unwrap(), "it exists");
        assert_eq!(std::fs::read(real.join("v")).unwrap(), b"1", "untouched");
        std::os::unix::fs::symlink("/etc/hostname", real.join("l")).unwrap();
        assert!(
            !write_new(&real.join("l"), b"x").unwrap(),
            "a link is not followed"
        );
        let err = write_new(&dir.path().join("link/w"), b"y").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
        assert!(!real.join("w").exists());
        assert_eq!(
            std::fs::read_dir(&real).unwrap().count(),
            2,
            "no temporary file"
        );
    }
}
