//! Tar streams for moving files in and out of sandboxes: packing host files into a tar byte
//! stream and unpacking a downloaded tar onto the host with path checks, both on blocking
//! threads connected by bounded channels, so memory stays bounded for any file size. Also the
//! plain directory copy the local backend uses, under the same link policy.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::bounded::{open_regular, read_capped};
use super::links::{
    check_no_link_ancestors, link_resolves_inside, refuse_dir_over_link, write_link,
};
use crate::sandbox::api::Transfer;
use crate::sandbox::error::SandboxError;

/// Longest time one archive download may stream, first byte to last (a stalled daemon or a
/// `tar` that never finishes fails instead of hanging the tool call).
pub(crate) const ARCHIVE_DEADLINE: Duration = Duration::from_secs(600);

/// Size of the chunks sent through the channels.
const CHUNK: usize = 256 * 1024;

/// Chunks in flight between the blocking thread and the async side.
const CHANNEL_DEPTH: usize = 8;

/// What to put in a tar archive. Entry names are relative (no leading `/`).
#[derive(Debug)]
pub(crate) enum PackSource {
    /// One host file, stored as `name`.
    File {
        /// The host file.
        local: PathBuf,
        /// Its entry name.
        name: String,
    },
    /// The contents of a host directory, stored under `prefix/`.
    Dir {
        /// The host directory.
        local: PathBuf,
        /// The entry name of the directory itself.
        prefix: String,
    },
    /// In-memory bytes stored as `name` with permission bits `mode`.
    Bytes {
        /// The content.
        data: Vec<u8>,
        /// The entry name.
        name: String,
        /// Permission bits.
        mode: u32,
    },
}

/// A tar archive being written on a blocking thread: read the chunks from `chunks`; `done`
/// reports what was packed (or why packing failed).
pub(crate) struct TarStream {
    /// The archive's bytes in order; an `Err` item means packing failed.
    pub chunks: mpsc::Receiver<io::Result<Bytes>>,
    /// Completion of the packing thread.
    pub done: JoinHandle<Result<Transfer, SandboxError>>,
}

impl TarStream {
    /// The chunks as a `Stream`.
    pub fn into_parts(
        self,
    ) -> (
        impl Stream<Item = io::Result<Bytes>> + Send + 'static,
        JoinHandle<Result<Transfer, SandboxError>>,
    ) {
        let stream = futures::stream::unfold(self.chunks, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        (stream, self.done)
    }
}

/// Starts packing `source` into a tar stream.
pub(crate) fn pack(source: PackSource) -> TarStream {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let done = tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(CHUNK),
        };
        let mut builder = tar::Builder::new(writer);
        let result = pack_into(&mut builder, source).and_then(|stats| {
            let mut writer = builder.into_inner().map_err(|e| io_error("tar", e))?;
            writer.send_rest().map_err(|e| io_error("tar", e))?;
            Ok(stats)
        });
        if let Err(e) = &result {
            // Make the consumer fail instead of sending a truncated archive.
            let _ = tx.blocking_send(Err(io::Error::other(e.to_string())));
        }
        result
    });
    TarStream { chunks: rx, done }
}

fn io_error(what: impl std::fmt::Display, e: io::Error) -> SandboxError {
    match e.kind() {
        io::ErrorKind::NotFound => SandboxError::NotFound(what.to_string()),
        _ => SandboxError::host_io(what.to_string(), e),
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64, mtime: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode & 0o7777);
    h.set_size(size);
    h.set_mtime(mtime);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn pack_into<W: Write>(
    builder: &mut tar::Builder<W>,
    source: PackSource,
) -> Result<Transfer, SandboxError> {
    let mut stats = Transfer::default();
    match source {
        PackSource::Bytes { data, name, mode } => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut h = header(tar::EntryType::Regular, mode, data.len() as u64, now);
            builder
                .append_data(&mut h, &name, data.as_slice())
                .map_err(|e| io_error(&name, e))?;
            stats.files = 1;
            stats.bytes = data.len() as u64;
        }
        PackSource::File { local, name } => {
            let meta = fs::metadata(&local).map_err(|e| io_error(local.display(), e))?;
            if meta.is_dir() {
                return Err(SandboxError::IsDirectory(local.display().to_string()));
            }
            let file = fs::File::open(&local).map_err(|e| io_error(local.display(), e))?;
            let mut h = header(
                tar::EntryType::Regular,
                meta.mode(),
                meta.len(),
                meta.mtime().max(0) as u64,
            );
            builder
                .append_data(&mut h, &name, file)
                .map_err(|e| io_error(local.display(), e))?;
            stats.files = 1;
            stats.bytes = meta.len();
        }
        PackSource::Dir { local, prefix } => {
            let meta = fs::metadata(&local).map_err(|e| io_error(local.display(), e))?;
            if !meta.is_dir() {
                return Err(SandboxError::Path(format!(
                    "{} is not a directory",
                    local.display()
                )));
            }
            let mut h = header(
                tar::EntryType::Directory,
                meta.mode(),
                0,
                meta.mtime().max(0) as u64,
            );
            builder
                .append_data(&mut h, format!("{prefix}/"), io::empty())
                .map_err(|e| io_error(&prefix, e))?;
            pack_dir(builder, &local, &prefix, &mut stats)?;
        }
    }
    Ok(stats)
}

fn sorted_entries(dir: &Path) -> Result<Vec<fs::DirEntry>, SandboxError> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| io_error(dir.display(), e))?
        .collect::<Result<_, _>>()
        .map_err(|e| io_error(dir.display(), e))?;
    entries.sort_by_key(fs::DirEntry::file_name);
    Ok(entries)
}

fn pack_dir<W: Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    prefix: &str,
    stats: &mut Transfer,
) -> Result<(), SandboxError> {
    for entry in sorted_entries(dir)? {
        let path = entry.path();
        let name = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        let meta = fs::symlink_metadata(&path).map_err(|e| io_error(path.display(), e))?;
        let mtime = meta.mtime().max(0) as u64;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map_err(|e| io_error(path.display(), e))?;
            let mut h = header(tar::EntryType::Symlink, 0o777, 0, mtime);
            builder
                .append_link(&mut h, &name, &target)
                .map_err(|e| io_error(path.display(), e))?;
        } else if meta.is_dir() {
            let mut h = header(tar::EntryType::Directory, meta.mode(), 0, mtime);
            builder
                .append_data(&mut h, format!("{name}/"), io::empty())
                .map_err(|e| io_error(path.display(), e))?;
            pack_dir(builder, &path, &name, stats)?;
        } else if meta.is_file() {
            let file = fs::File::open(&path).map_err(|e| io_error(path.display(), e))?;
            let mut h = header(tar::EntryType::Regular, meta.mode(), meta.len(), mtime);
            builder
                .append_data(&mut h, &name, file)
                .map_err(|e| io_error(path.display(), e))?;
            stats.files += 1;
            stats.bytes += meta.len();
        }
    }
    Ok(())
}

/// A `Write` on a blocking thread that sends fixed-size chunks to the async side.
struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send_chunk(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload was abandoned"))
    }

    fn send_rest(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            self.send_chunk()
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send_chunk()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A `Read` on a blocking thread fed by the async side.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Where a downloaded archive goes.
#[derive(Debug, Clone)]
pub(crate) enum Unpack {
    /// The archive holds one regular file: return its bytes (at most `limit`).
    Memory {
        /// Largest accepted file size in bytes.
        limit: u64,
    },
    /// The archive holds one regular file: write it (atomically) to this host path.
    File(PathBuf),
    /// The archive's root is a directory: extract its contents into this host directory.
    Dir(PathBuf),
}

/// What unpacking produced.
#[derive(Debug)]
pub(crate) enum Unpacked {
    /// The file's bytes ([`Unpack::Memory`]).
    Bytes(Vec<u8>),
    /// Files written ([`Unpack::File`], [`Unpack::Dir`]).
    Written(Transfer),
    /// The requested path is a symbolic link to this target (file targets only).
    Link(String),
}

/// Unpacks a tar byte stream as `target` says; `what` names the remote path in errors.
/// The stream must finish within [`ARCHIVE_DEADLINE`].
pub(crate) async fn unpack<S>(
    stream: S,
    target: Unpack,
    what: String,
) -> Result<Unpacked, SandboxError>
where
    S: Stream<Item = Result<Bytes, SandboxError>> + Send + Unpin,
{
    unpack_within(stream, target, what, ARCHIVE_DEADLINE).await
}

/// Symbolic links followed when downloading a file from a remote sandbox.
const MAX_LINKS: usize = 8;

/// Downloads the remote path `abs` (whose tar stream `get_tar` opens) as `target` says,
/// following symbolic links to files lexically, at most [`MAX_LINKS`] of them.
pub(crate) async fn fetch_following_links<S, F, Fut>(
    mut abs: String,
    target: Unpack,
    mut get_tar: F,
) -> Result<Unpacked, SandboxError>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<S, SandboxError>>,
    S: Stream<Item = Result<Bytes, SandboxError>> + Send + Unpin,
{
    for _ in 0..=MAX_LINKS {
        let stream = get_tar(abs.clone()).await?;
        match unpack(stream, target.clone(), abs.clone()).await? {
            Unpacked::Link(link) => abs = super::remote_path::follow_link(&abs, &link),
            done => return Ok(done),
        }
    }
    Err(SandboxError::Path(format!(
        "too many levels of symbolic links at {abs}"
    )))
}

/// [`unpack`] with the stream's deadline given.
async fn unpack_within<S>(
    mut stream: S,
    target: Unpack,
    what: String,
    deadline: Duration,
) -> Result<Unpacked, SandboxError>
where
    S: Stream<Item = Result<Bytes, SandboxError>> + Send + Unpin,
{
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    let shown = what.clone();
    let worker = tokio::task::spawn_blocking(move || {
        let reader = ChannelReader {
            rx,
            current: Bytes::new(),
        };
        unpack_blocking(reader, &target, &what)
    });
    let feed = async {
        while let Some(item) = stream.next().await {
            let chunk = item?;
            if tx.send(chunk).await.is_err() {
                break; // the worker stopped early (it reports why)
            }
        }
        Ok(())
    };
    let fed = match tokio::time::timeout(deadline, feed).await {
        Ok(fed) => fed,
        Err(_) => Err(SandboxError::Io(format!(
            "{shown}: the archive stream did not finish within {} s",
            deadline.as_secs_f64()
        ))),
    };
    drop(tx);
    let result = worker
        .await
        .map_err(|e| SandboxError::worker("unpacking thread", e))?;
    fed.and(result)
}

/// `root/a/b` → `a/b`; refuses absolute paths and `..`.
fn below_root(path: &Path) -> Result<PathBuf, SandboxError> {
    let mut comps = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir));
    match comps.next() {
        Some(Component::Normal(_)) => {}
        _ => return Err(escape(path)),
    }
    let mut rest = PathBuf::new();
    for c in comps {
        match c {
            Component::Normal(p) => rest.push(p),
            _ => return Err(escape(path)),
        }
    }
    Ok(rest)
}

fn escape(path: &Path) -> SandboxError {
    SandboxError::Path(format!(
        "archive entry {} would land outside the target directory",
        path.display()
    ))
}

fn unpack_blocking(
    reader: ChannelReader,
    target: &Unpack,
    what: &str,
) -> Result<Unpacked, SandboxError> {
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_mtime(true);
    let entries = archive
        .entries()
        .map_err(|e| SandboxError::host_io(format!("{what}: bad archive"), e))?;
    let mut stats = Transfer::default();
    let mut seen_root = false;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| SandboxError::host_io(format!("{what}: bad archive"), e))?;
        let path = entry
            .path()
            .map_err(|e| SandboxError::host_io(format!("{what}: bad entry name"), e))?
            .into_owned();
        let rel = below_root(&path)?;
        let kind = entry.header().entry_type();
        if !seen_root {
            seen_root = true;
            if !rel.as_os_str().is_empty() {
                return Err(SandboxError::Io(format!(
                    "{what}: archive does not start with its root"
                )));
            }
            match (target, kind) {
                (Unpack::Dir(dir), tar::EntryType::Directory) => {
                    fs::create_dir_all(dir).map_err(|e| io_error(dir.display(), e))?;
                    continue;
                }
                (Unpack::Dir(_), _) => {
                    return Err(SandboxError::Path(format!("{what} is not a directory")))
                }
                (_, tar::EntryType::Directory) => {
                    return Err(SandboxError::IsDirectory(what.to_owned()))
                }
                (_, tar::EntryType::Symlink) => {
                    let link = entry
                        .link_name()
                        .ok()
                        .flatten()
                        .map(|l| l.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    return Ok(Unpacked::Link(link));
                }
                (Unpack::Memory { limit }, tar::EntryType::Regular) => {
                    // `size()` is the PAX size when there is one (the header may say 0).
                    let size = entry.size();
                    return read_capped(&mut entry, size, *limit, what).map(Unpacked::Bytes);
                }
                (Unpack::File(dest), tar::EntryType::Regular) => {
                    let size = write_file_atomically(&mut entry, dest, None)?;
                    return Ok(Unpacked::Written(Transfer {
                        files: 1,
                        bytes: size,
                    }));
                }
                _ => return Err(SandboxError::Path(format!("{what} is not a regular file"))),
            }
        }
        let Unpack::Dir(root) = target else {
            break;
        };
        check_no_link_ancestors(root, &rel)?;
        let dest = root.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                refuse_dir_over_link(&dest)?;
                fs::create_dir_all(&dest).map_err(|e| io_error(dest.display(), e))?;
                if let Ok(mode) = entry.header().mode() {
                    refuse_dir_over_link(&dest)?;
                    let _ = fs::set_permissions(&dest, fs::Permissions::from_mode(mode & 0o7777));
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                ensure_parent(&dest)?;
                let size = entry.size();
                entry
                    .unpack(&dest)
                    .map_err(|e| io_error(dest.display(), e))?;
                stats.files += 1;
                stats.bytes += size;
            }
            tar::EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(|e| io_error(dest.display(), e))?
                    .ok_or_else(|| SandboxError::Io(format!("{}: empty link", rel.display())))?
                    .into_owned();
                ensure_parent(&dest)?;
                if !link_resolves_inside(root, &rel, &link) {
                    return Err(SandboxError::Path(format!(
                        "symbolic link {} -> {} points outside the target directory",
                        rel.display(),
                        link.display()
                    )));
                }
                write_link(&dest, &link)?;
            }
            tar::EntryType::Link => {
                let link = entry
                    .link_name()
                    .map_err(|e| io_error(dest.display(), e))?
                    .ok_or_else(|| SandboxError::Io(format!("{}: empty link", rel.display())))?
                    .into_owned();
                let source_rel = below_root(&link)?;
                check_no_link_ancestors(root, &source_rel)?;
                if super::links::is_link(&root.join(&source_rel)) {
                    // A hard link to a symbolic link is a copy of it somewhere else, where
                    // its relative target means something else.
                    return Err(SandboxError::Path(format!(
                        "hard link {} to the symbolic link {} is not extracted",
                        rel.display(),
                        source_rel.display()
                    )));
                }
                ensure_parent(&dest)?;
                let _ = fs::remove_file(&dest);
                fs::hard_link(root.join(&source_rel), &dest)
                    .map_err(|e| io_error(dest.display(), e))?;
                stats.files += 1;
            }
            // Devices, fifos and other special files are not copied.
            _ => {}
        }
    }
    if !seen_root {
        return Err(SandboxError::NotFound(what.to_owned()));
    }
    Ok(Unpacked::Written(stats))
}

fn ensure_parent(dest: &Path) -> Result<(), SandboxError> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| io_error(parent.display(), e))?;
    }
    Ok(())
}

fn write_file_atomically(
    src: &mut impl Read,
    dest: &Path,
    mode: Option<fs::Permissions>,
) -> Result<u64, SandboxError> {
    ensure_parent(dest)?;
    let parent = dest.parent().unwrap_or(Path::new("."));
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.hermes-{}", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        let n = io::copy(src, &mut file)?;
        if let Some(mode) = mode {
            // On the open file, never through a path (which a link could redirect).
            file.set_permissions(mode)?;
        }
        file.sync_all()?;
        fs::rename(&tmp, dest)?;
        Ok(n)
    })();
    result.map_err(|e: io::Error| {
        let _ = fs::remove_file(&tmp);
        io_error(dest.display(), e)
    })
}

/// Copies a file between host paths (the local backend's transfer), creating parents and
/// keeping permission bits.
/// Only regular files are copied (a FIFO or device is refused without blocking).
pub(crate) fn copy_file(src: &Path, dest: &Path) -> Result<Transfer, SandboxError> {
    let (mut file, meta) = open_regular(src, &src.display().to_string())?;
    let bytes = write_file_atomically(&mut file, dest, Some(meta.permissions()))?;
    Ok(Transfer { files: 1, bytes })
}

/// Copies the contents of directory `src` into `dest` (created), under the same link policy
/// as archive extraction: links are copied as links and must resolve inside the tree;
/// nothing is written or chmod-ed through a link already in `dest`.
pub(crate) fn copy_tree(src: &Path, dest: &Path) -> Result<Transfer, SandboxError> {
    let meta = fs::metadata(src).map_err(|e| io_error(src.display(), e))?;
    if !meta.is_dir() {
        return Err(SandboxError::Path(format!(
            "{} is not a directory",
            src.display()
        )));
    }
    refuse_dir_over_link(dest)?;
    fs::create_dir_all(dest).map_err(|e| io_error(dest.display(), e))?;
    let mut stats = Transfer::default();
    copy_tree_rel(src, dest, Path::new(""), &mut stats)?;
    Ok(stats)
}

fn copy_tree_rel(
    src_root: &Path,
    dest_root: &Path,
    rel: &Path,
    stats: &mut Transfer,
) -> Result<(), SandboxError> {
    for entry in sorted_entries(&src_root.join(rel))? {
        let rel = rel.join(entry.file_name());
        let (from, to) = (src_root.join(&rel), dest_root.join(&rel));
        let meta = fs::symlink_metadata(&from).map_err(|e| io_error(from.display(), e))?;
        check_no_link_ancestors(dest_root, &rel)?;
        if meta.file_type().is_symlink() {
            let link = fs::read_link(&from).map_err(|e| io_error(from.display(), e))?;
            if !link_resolves_inside(dest_root, &rel, &link) {
                return Err(SandboxError::Path(format!(
                    "symbolic link {} -> {} points outside the directory",
                    rel.display(),
                    link.display()
                )));
            }
            write_link(&to, &link)?;
        } else if meta.is_dir() {
            refuse_dir_over_link(&to)?;
            fs::create_dir_all(&to).map_err(|e| io_error(to.display(), e))?;
            refuse_dir_over_link(&to)?;
            fs::set_permissions(&to, meta.permissions()).map_err(|e| io_error(to.display(), e))?;
            copy_tree_rel(src_root, dest_root, &rel, stats)?;
        } else if meta.is_file() {
            let copied = copy_file(&from, &to)?;
            stats.files += 1;
            stats.bytes += copied.bytes;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_below_the_root_are_relative() {
        assert_eq!(below_root(Path::new("dir/a/b")).unwrap(), Path::new("a/b"));
        assert_eq!(below_root(Path::new("./dir/")).unwrap(), Path::new(""));
        assert!(below_root(Path::new("dir/../../etc/passwd")).is_err());
        assert!(below_root(Path::new("/etc/passwd")).is_err());
    }

    #[tokio::test]
    async fn a_tar_with_dot_dot_is_refused() {
        let mut raw = tar::Builder::new(Vec::new());
        let mut h = header(tar::EntryType::Directory, 0o755, 0, 0);
        raw.append_data(&mut h, "root/", io::empty()).unwrap();
        let mut h = header(tar::EntryType::Regular, 0o644, 4, 0);
        // `append_data` refuses `..`, so write the name into the header by hand.
        h.as_gnu_mut().unwrap().name[..14].copy_from_slice(b"root/../escape");
        h.set_cksum();
        raw.append(&h, &b"evil"[..]).unwrap();
        let bytes = Bytes::from(raw.into_inner().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let stream = futures::stream::iter(vec![Ok(bytes)]);
        let err = unpack(stream, Unpack::Dir(target), "root".into())
            .await
            .unwrap_err();
        assert!(matches!(err, SandboxError::Path(_)), "{err}");
        assert!(!dir.path().join("escape").exists());
    }

    /// One PAX record `"<len> key=value\n"`, where `<len>` counts the whole record.
    fn pax_record(key: &str, value: &str) -> Vec<u8> {
        let body = format!(" {key}={value}\n");
        let mut len = body.len() + 1;
        while (len.to_string().len() + body.len()) != len {
            len += 1;
        }
        format!("{len}{body}").into_bytes()
    }

    /// A tar whose entry `root` has header size 0 and a PAX size of `pax_size`.
    fn pax_tar_header(pax_size: u64) -> Vec<u8> {
        let mut raw = tar::Builder::new(Vec::new());
        let records = pax_record("size", &pax_size.to_string());
        let mut x = tar::Header::new_ustar();
        x.set_entry_type(tar::EntryType::XHeader);
        x.set_path("PaxHeaders/root").unwrap();
        x.set_size(records.len() as u64);
        x.set_mode(0o644);
        x.set_cksum();
        raw.append(&x, records.as_slice()).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_path("root").unwrap();
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        raw.append(&h, io::empty()).unwrap();
        // `into_inner` would append the end-of-archive blocks; keep only the two headers.
        let mut bytes = raw.into_inner().unwrap();
        bytes.truncate(512 + 512 + 512);
        bytes
    }

    #[tokio::test]
    async fn a_pax_size_over_the_limit_is_refused_before_reading_the_data() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        let sent = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&sent);
        // Header size 0, PAX size 1 TiB, then an endless body.
        let head = futures::stream::iter([Ok(Bytes::from(pax_tar_header(1 << 40)))]);
        let body = futures::stream::repeat_with(|| Ok(Bytes::from(vec![0u8; CHUNK])));
        let stream = head.chain(body).map(move |c: Result<Bytes, SandboxError>| {
            if let Ok(c) = &c {
                counter.fetch_add(c.len() as u64, Ordering::Relaxed);
            }
            c
        });
        let err = unpack(
            Box::pin(stream),
            Unpack::Memory { limit: 100 << 20 },
            "f".into(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("1099511627776 bytes, over the 104857600-byte limit"),
            "{err}"
        );
        let read = sent.load(Ordering::Relaxed);
        eprintln!("crafted PAX tar refused after {read} bytes streamed");
        assert!(read < 16 << 20, "stopped early: {read} bytes");
    }

    #[tokio::test]
    async fn a_pax_size_within_the_limit_reads_the_data() {
        let mut bytes = pax_tar_header(5);
        bytes.extend_from_slice(b"hello");
        bytes.resize(bytes.len() + 512 - 5 + 1024, 0);
        let stream = futures::stream::iter([Ok(Bytes::from(bytes))]);
        match unpack(stream, Unpack::Memory { limit: 100 }, "f".into()).await {
            Ok(Unpacked::Bytes(b)) => assert_eq!(b, b"hello"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stalled_archive_stream_fails_at_its_deadline() {
        let head = futures::stream::iter([Ok(Bytes::from(vec![0u8; 100]))]);
        let stalled = head.chain(futures::stream::pending());
        let started = std::time::Instant::now();
        let err = unpack_within(
            Box::pin(stalled),
            Unpack::Memory { limit: 100 },
            "f".into(),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("did not finish within 0.2 s"),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// A hand-made archive (what an agent-replaced `tar` could send): entries in order.
    fn crafted(entries: &[(&str, tar::EntryType, &str, u32)]) -> Bytes {
        let mut raw = tar::Builder::new(Vec::new());
        for (name, kind, link, mode) in entries {
            let mut h = header(*kind, *mode, 0, 0);
            if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
                raw.append_link(&mut h, name, link).unwrap();
            } else {
                raw.append_data(&mut h, name, io::empty()).unwrap();
            }
        }
        Bytes::from(raw.into_inner().unwrap())
    }

    async fn unpack_crafted(bytes: Bytes, target: &Path) -> Result<Unpacked, SandboxError> {
        let stream = futures::stream::iter(vec![Ok(bytes)]);
        unpack(stream, Unpack::Dir(target.to_path_buf()), "root".into()).await
    }

    #[tokio::test]
    async fn a_directory_entry_over_a_link_is_not_created_or_chmodded() {
        use tar::EntryType::{Directory, Symlink};
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let bytes = crafted(&[
            ("root/", Directory, "", 0o755),
            ("root/sub/", Directory, "", 0o700),
            ("root/l", Symlink, "sub", 0o777),
            ("root/l/", Directory, "", 0o777),
        ]);
        let err = unpack_crafted(bytes, &target).await.unwrap_err();
        assert!(matches!(err, SandboxError::Path(_)), "{err}");
        let mode = fs::metadata(target.join("sub"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "no chmod through the link");
    }

    #[tokio::test]
    async fn links_are_not_retargeted_and_hard_links_to_links_are_refused() {
        use tar::EntryType::{Directory, Link, Symlink};
        let dir = tempfile::tempdir().unwrap();
        // `m` resolves inside while `k -> a/b`; retargeting `k` to `.` would move it out.
        let bytes = crafted(&[
            ("root/", Directory, "", 0o755),
            ("root/a/b/", Directory, "", 0o755),
            ("root/k", Symlink, "a/b", 0o777),
            ("root/m", Symlink, "k/../..", 0o777),
            ("root/k", Symlink, ".", 0o777),
        ]);
        let err = unpack_crafted(bytes, &dir.path().join("one"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already a symbolic link"), "{err}");
        // A hard link to `a/b/l -> ../../x` placed at the root would point outside.
        let bytes = crafted(&[
            ("root/", Directory, "", 0o755),
            ("root/a/b/", Directory, "", 0o755),
            ("root/a/b/l", Symlink, "../../x", 0o777),
            ("root/h", Link, "root/a/b/l", 0o644),
        ]);
        let err = unpack_crafted(bytes, &dir.path().join("two"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("hard link"), "{err}");
        assert!(!dir.path().join("two/h").exists());
    }
}
