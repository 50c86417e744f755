//! Bounded reads: what `read_file` loads into memory is capped at [`READ_LIMIT`] on every
//! backend, checked against the real size before reading and enforced while reading (a
//! capped reader, so a size that lies cannot stream without bound); on the host only regular
//! files are opened, without blocking (a FIFO, `/dev/zero` or `/dev/stdin` is refused).

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::sandbox::error::SandboxError;

/// Largest file `read_file` loads into memory (100 MiB).
pub const READ_LIMIT: u64 = 100 * 1024 * 1024;

/// The error for a file over the limit; `size` is what its metadata or archive entry claims.
pub(crate) fn too_large(what: &str, size: u64, limit: u64) -> SandboxError {
    SandboxError::Io(format!(
        "{what} is {size} bytes, over the {limit}-byte limit for reading into memory"
    ))
}

/// Reads at most `limit` bytes of an entry that claims `size` bytes: refuses a claim over
/// the limit before reading, and a stream longer than the limit after `limit + 1` bytes.
pub(crate) fn read_capped(
    source: impl Read,
    size: u64,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>, SandboxError> {
    if size > limit {
        return Err(too_large(what, size, limit));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    source
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SandboxError::host_io(what, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(what, bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// Opens a host file for reading only if it is a regular file: opened with `O_NONBLOCK`
/// (so a FIFO cannot block the open) and checked with `fstat` on the open descriptor (so the
/// file cannot be swapped between check and read).
pub(crate) fn open_regular(path: &Path, shown: &str) -> Result<(File, Metadata), SandboxError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    regular(file, shown)
}

/// Checks that an opened host file is a regular file; its metadata with it.
fn regular(file: std::io::Result<File>, shown: &str) -> Result<(File, Metadata), SandboxError> {
    let file = file.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => SandboxError::NotFound(shown.to_owned()),
        _ => SandboxError::host_io(shown, e),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| SandboxError::host_io(shown, e))?;
    if meta.is_dir() {
        return Err(SandboxError::IsDirectory(shown.to_owned()));
    }
    if !meta.is_file() {
        return Err(SandboxError::Path(format!(
            "{shown} is not a regular file (a device, FIFO or socket is not read)"
        )));
    }
    Ok((file, meta))
}

/// [`open_regular`] for a path that must not pass through a link.
pub(crate) fn open_regular_no_links(
    path: &Path,
    shown: &str,
) -> Result<(File, Metadata), SandboxError> {
    regular(super::no_links::open_read(path), shown)
}

/// [`read_regular`] for a path that must not pass through a link.
pub(crate) fn read_regular_no_links(
    path: &Path,
    shown: &str,
    limit: u64,
) -> Result<Vec<u8>, SandboxError> {
    let (file, meta) = open_regular_no_links(path, shown)?;
    read_capped(file, meta.len(), limit, shown)
}

/// `read_file` on the host: a regular file of at most `limit` bytes.
pub(crate) fn read_regular(path: &Path, shown: &str, limit: u64) -> Result<Vec<u8>, SandboxError> {
    let (file, meta) = open_regular(path, shown)?;
    read_capped(file, meta.len(), limit, shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lying_size_is_caught_while_reading() {
        let endless = std::io::repeat(7);
        let err = read_capped(endless, 0, 1000, "x").unwrap_err();
        assert!(
            err.to_string()
                .contains("1001 bytes, over the 1000-byte limit"),
            "{err}"
        );
        assert!(read_capped(&b"abc"[..], 3, 3, "x").is_ok());
        assert!(read_capped(&b"abc"[..], 4000, 3, "x").is_err());
    }

    #[test]
    fn devices_and_fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        for p in [
            fifo.as_path(),
            Path::new("/dev/zero"),
            Path::new("/dev/null"),
        ] {
            let err = read_regular(p, "p", READ_LIMIT).unwrap_err();
            assert!(
                matches!(err, SandboxError::Path(_)),
                "{}: {err}",
                p.display()
            );
        }
        assert!(matches!(
            read_regular(dir.path(), "d", READ_LIMIT).unwrap_err(),
            SandboxError::IsDirectory(_)
        ));
    }
}
