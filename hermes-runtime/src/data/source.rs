//! Finding the files of one split: a local file, a local directory, or a hub dataset (its
//! revision first, then the hub's auto-converted parquet revision `refs/convert/parquet`).

use std::path::{Path, PathBuf};

use super::splits::{known_splits, select, Format};
use super::DataError;
use crate::hub::{HubError, HubId, HubRepo, HubSettings, Listing, RepoKind};

/// The revision the hub's dataset viewer writes parquet conversions to.
pub const PARQUET_REVISION: &str = "refs/convert/parquet";

/// The split's files with their format, and a description of where they came from.
pub struct Located {
    /// Files to read, in order.
    pub files: Vec<(PathBuf, Format)>,
    /// e.g. `google/frames-benchmark (hub cache, revision main)`.
    pub source: String,
}

/// Finds `split` of `name`: an existing file (the split is ignored), an existing directory
/// (split by file names), else a hub dataset id.
pub async fn locate(name: &str, split: &str, hub: &HubSettings) -> Result<Located, DataError> {
    let path = Path::new(name);
    if path.is_file() {
        let format = Format::of(name).ok_or_else(|| DataError::Format(path.to_owned()))?;
        return Ok(Located {
            files: vec![(path.to_owned(), format)],
            source: name.to_owned(),
        });
    }
    if path.is_dir() {
        return locate_in_dir(path, split);
    }
    let id = HubId::parse(RepoKind::Dataset, name)
        .ok_or_else(|| DataError::NotFound(name.to_owned()))?;
    locate_on_hub(id, split, hub).await
}

fn locate_in_dir(dir: &Path, split: &str) -> Result<Located, DataError> {
    let mut files = Vec::new();
    list_dir(dir, dir, &mut files).map_err(|e| DataError::Read {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    let chosen = select(&files, split);
    if chosen.is_empty() {
        return Err(no_split(dir.display().to_string(), split, &files));
    }
    Ok(Located {
        files: chosen
            .iter()
            .map(|f| {
                (
                    dir.join(f),
                    Format::of(f).expect("selected files have a format"),
                )
            })
            .collect(),
        source: dir.display().to_string(),
    })
}

fn list_dir(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            list_dir(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

fn no_split(source: String, split: &str, files: &[String]) -> DataError {
    DataError::NoSplit {
        dataset: source,
        split: split.to_owned(),
        available: known_splits(files).join(", "),
    }
}

/// The split's files of `id`'s revision; for `main` with no readable files for the split,
/// the auto-converted parquet revision. The first error is the one reported.
async fn locate_on_hub(id: HubId, split: &str, hub: &HubSettings) -> Result<Located, DataError> {
    let first = locate_at(HubRepo::new(id.clone(), hub.clone()), split).await;
    if id.revision != "main" || first.is_ok() {
        return first;
    }
    match locate_at(HubRepo::new(id.at(PARQUET_REVISION), hub.clone()), split).await {
        Ok(found) => Ok(found),
        Err(_) => first,
    }
}

async fn locate_at(repo: HubRepo, split: &str) -> Result<Located, DataError> {
    let mut listing = repo.list().await?;
    let mut chosen = select(&listing.files, split);
    if chosen.is_empty() && listing.from_cache && !repo.offline() {
        // The cache may hold only part of the revision (e.g. the README).
        listing = repo.list_remote().await?;
        chosen = select(&listing.files, split);
    }
    if chosen.is_empty() {
        return Err(no_split(repo.id().to_string(), split, &listing.files));
    }
    let mut files = Vec::with_capacity(chosen.len());
    for file in &chosen {
        let path = repo.file(file).await.map_err(|e| match e {
            HubError::NotFound { .. } => no_split(repo.id().to_string(), split, &listing.files),
            other => other.into(),
        })?;
        files.push((
            path,
            Format::of(file).expect("selected files have a format"),
        ));
    }
    Ok(Located {
        files,
        source: describe(&repo, &listing),
    })
}

fn describe(repo: &HubRepo, listing: &Listing) -> String {
    let from = if listing.from_cache {
        "hub cache"
    } else {
        "hub"
    };
    format!(
        "{} ({from}, revision {}, commit {})",
        repo.id().repo,
        repo.id().revision,
        &listing.commit[..listing.commit.len().min(12)]
    )
}
