//! Output files: Atropos's `_N` suffixing of existing JSONL files, and line writers.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::atropos::json::{to_python_string, JsonLayout};
use crate::atropos::ScoredDataGroup;

/// The first free path among `path`, `<stem>_1<ext>`, `<stem>_2<ext>`, … (always derived from
/// the original stem), with the parent directory created.
pub(crate) fn free_path(path: &Path) -> std::io::Result<PathBuf> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    if !path.exists() {
        return Ok(path.to_owned());
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let parent = path.parent().unwrap_or(Path::new(""));
    (1..)
        .map(|i| parent.join(format!("{stem}_{i}{ext}")))
        .find(|p| !p.exists())
        .ok_or_else(|| std::io::Error::other("no free file name"))
}

/// Writes one Python-style JSON object per line, flushed per line so a crash loses nothing
/// already finished.
pub(crate) struct JsonlWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonlWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(JsonlWriter {
            path: path.to_owned(),
            out: BufWriter::new(File::create(path)?),
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line, with the run's known secret values scrubbed
    /// ([`crate::config::redact::scrub`]).
    pub fn write<T: Serialize>(&mut self, value: &T) -> std::io::Result<()> {
        self.write_line(&to_python_string(value))
    }

    /// Appends one group ([`ScoredDataGroup::to_json`], Python's layout), scrubbed as
    /// [`Self::write`] scrubs.
    pub fn write_group(&mut self, group: &ScoredDataGroup) -> std::io::Result<()> {
        let line =
            String::from_utf8(group.to_json(JsonLayout::Python)).expect("serde_json writes UTF-8");
        self.write_line(&line)
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        self.out
            .write_all(crate::config::redact::scrub(line).as_bytes())?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_files_get_numbered_from_the_original_stem() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/x.jsonl");
        assert_eq!(free_path(&p).unwrap(), p);
        std::fs::write(&p, "").unwrap();
        let p1 = dir.path().join("sub/x_1.jsonl");
        assert_eq!(free_path(&p).unwrap(), p1);
        std::fs::write(&p1, "").unwrap();
        assert_eq!(free_path(&p).unwrap(), dir.path().join("sub/x_2.jsonl"));
    }
}
