//! Hugging Face Hub repositories by id, through the cache layout huggingface_hub writes
//! (`models--ORG--NAME/refs/main`, `snapshots/<commit>/<file>` → `blobs/<etag>`), so a
//! tokenizer or dataset fetched by Python tools is found here and the reverse.
//!
//! Lookups are cache-first: a revision the cache knows is used as it is (no freshness check).
//! Otherwise the file is downloaded with the `hf-hub` crate into that same cache, unless
//! `HF_HUB_OFFLINE` is set. hf-hub does not read `HF_HUB_CACHE`, `HF_TOKEN` or
//! `HF_HUB_OFFLINE`, does not know commit-hash revisions in the cache and does not write
//! `.no_exist` markers, so [`HubSettings`] and this module handle those.

mod id;
mod settings;

use std::path::{Path, PathBuf};

use crate::diagnostics::error_chain;

pub use id::{HubId, RepoKind};
pub use settings::HubSettings;

/// Why a hub file could not be had.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// `HF_HUB_OFFLINE` is set and the cache lacks the file.
    #[error(
        "{id}: {file} is not in the hub cache {cache} and HF_HUB_OFFLINE is set; fetch it with `{command}`"
    )]
    NotCached {
        /// The repository.
        id: Box<HubId>,
        /// The missing file (or "the revision" for a listing).
        file: String,
        /// The cache directory searched.
        cache: PathBuf,
        /// The command that fetches it.
        command: String,
    },
    /// The hub answered that the repository has no such file.
    #[error("{id}: the repository has no file {file}")]
    NotFound {
        /// The repository.
        id: Box<HubId>,
        /// The file.
        file: String,
    },
    /// The download failed (network, access, server).
    #[error(
        "{id}: cannot fetch {file} from {endpoint}: {reason}; fetch it with `{command}` where the hub \
         is reachable (HF_ENDPOINT selects a mirror, HF_TOKEN a token), or set HF_HUB_OFFLINE=1 to use the cache only"
    )]
    Download {
        /// The repository.
        id: Box<HubId>,
        /// The file (or "the file list").
        file: String,
        /// The hub endpoint.
        endpoint: String,
        /// What went wrong.
        reason: String,
        /// The command that fetches it.
        command: String,
    },
    /// The cache could not be read or written.
    #[error("hub cache {path}: {reason}")]
    Cache {
        /// The path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// The files of one revision: its commit and the repository-relative paths.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The commit hash the revision resolved to.
    pub commit: String,
    /// Files, as `/`-separated paths relative to the repository root.
    pub files: Vec<String>,
    /// Whether the list is the cached snapshot's (which may hold only some of the files).
    pub from_cache: bool,
}

/// One hub repository at one revision, resolved through the cache and, when allowed, the hub.
#[derive(Debug, Clone)]
pub struct HubRepo {
    id: HubId,
    settings: HubSettings,
    fetch_files: Vec<String>,
}

impl HubRepo {
    /// A handle on `id` with `settings` (normally [`HubSettings::from_env`]).
    pub fn new(id: HubId, settings: HubSettings) -> Self {
        HubRepo {
            id,
            settings,
            fetch_files: Vec::new(),
        }
    }

    /// Names `files` (instead of the one missing file) in the `hf download` command of error
    /// messages, for callers that need a set of files, like a tokenizer's.
    pub fn fetching(mut self, files: &[&str]) -> Self {
        self.fetch_files = files.iter().map(|f| f.to_string()).collect();
        self
    }

    fn command(&self, file: &str) -> String {
        if !self.fetch_files.is_empty() {
            let files: Vec<&str> = self.fetch_files.iter().map(String::as_str).collect();
            return self.id.download_command(&files);
        }
        self.id.download_command(&[file])
    }

    /// The repository id.
    pub fn id(&self) -> &HubId {
        &self.id
    }

    /// The hub cache directory.
    pub fn cache_dir(&self) -> &Path {
        &self.settings.cache_dir
    }

    /// Whether the network may be used.
    pub fn offline(&self) -> bool {
        self.settings.offline
    }

    fn repo_dir(&self) -> PathBuf {
        self.settings.cache_dir.join(self.id.cache_folder())
    }

    /// The commit the cache holds for the revision: the revision itself when it is a commit
    /// hash with a snapshot, else the content of `refs/<revision>`.
    pub fn cached_commit(&self) -> Option<String> {
        let dir = self.repo_dir();
        if self.id.revision_is_commit() {
            return dir
                .join("snapshots")
                .join(&self.id.revision)
                .is_dir()
                .then(|| self.id.revision.clone());
        }
        let commit = std::fs::read_to_string(dir.join("refs").join(&self.id.revision)).ok()?;
        let commit = commit.trim();
        (!commit.is_empty()).then(|| commit.to_owned())
    }

    fn snapshot(&self, commit: &str) -> PathBuf {
        self.repo_dir().join("snapshots").join(commit)
    }

    fn no_exist_marker(&self, commit: &str, file: &str) -> PathBuf {
        self.repo_dir().join(".no_exist").join(commit).join(file)
    }

    /// `file` of the revision: from the cache, else downloaded into it.
    /// [`HubError::NotFound`] when the repository has no such file.
    pub async fn file(&self, file: &str) -> Result<PathBuf, HubError> {
        if let Some(commit) = self.cached_commit() {
            let path = self.snapshot(&commit).join(file);
            if path.is_file() {
                return Ok(path);
            }
            if self.no_exist_marker(&commit, file).exists() {
                return Err(self.not_found(file));
            }
        }
        if self.settings.offline {
            return Err(HubError::NotCached {
                id: Box::new(self.id.clone()),
                file: file.to_owned(),
                cache: self.settings.cache_dir.clone(),
                command: self.command(file),
            });
        }
        self.download(file).await
    }

    fn not_found(&self, file: &str) -> HubError {
        HubError::NotFound {
            id: Box::new(self.id.clone()),
            file: file.to_owned(),
        }
    }

    fn api(&self) -> Result<hf_hub::api::tokio::Api, HubError> {
        hf_hub::api::tokio::ApiBuilder::from_cache(hf_hub::Cache::new(
            self.settings.cache_dir.clone(),
        ))
        .with_endpoint(self.settings.endpoint.clone())
        .with_token(self.settings.token().map(str::to_owned))
        .with_progress(false)
        .build()
        .map_err(|e| self.download_error("the repository", &e))
    }

    fn hf_repo(&self) -> hf_hub::Repo {
        let kind = match self.id.kind {
            RepoKind::Model => hf_hub::RepoType::Model,
            RepoKind::Dataset => hf_hub::RepoType::Dataset,
        };
        hf_hub::Repo::with_revision(self.id.repo.clone(), kind, self.id.revision.clone())
    }

    fn download_error(&self, file: &str, e: &hf_hub::api::tokio::ApiError) -> HubError {
        let reason = match status_of(e) {
            Some(401 | 403) => format!(
                "access denied ({}); a gated or private repository needs HF_TOKEN or `hf auth login`",
                error_chain(e)
            ),
            _ => error_chain(e),
        };
        let command = if file.contains(' ') {
            self.id.download_command(&[])
        } else {
            self.command(file)
        };
        HubError::Download {
            id: Box::new(self.id.clone()),
            file: file.to_owned(),
            endpoint: self.settings.endpoint.clone(),
            reason,
            command,
        }
    }

    async fn download(&self, file: &str) -> Result<PathBuf, HubError> {
        tracing::info!(
            "{}: downloading {file} from {}",
            self.id,
            self.settings.endpoint
        );
        let result = self.api()?.repo(self.hf_repo()).download(file).await;
        match result {
            Ok(path) => {
                remove_blob_lock(&path);
                Ok(path)
            }
            Err(e) if status_of(&e) == Some(404) => {
                self.mark_missing(file);
                Err(self.not_found(file))
            }
            Err(e) => Err(self.download_error(file, &e)),
        }
    }

    /// Records a missing file as huggingface_hub does (`.no_exist/<commit>/<file>`), when the
    /// cache knows the revision's commit; best effort, since it only saves a request.
    fn mark_missing(&self, file: &str) {
        if let Some(commit) = self.cached_commit() {
            let marker = self.no_exist_marker(&commit, file);
            if let Some(parent) = marker.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::File::create(marker);
        }
    }

    /// The revision's files: the cached snapshot's, else (online) the hub's file list.
    pub async fn list(&self) -> Result<Listing, HubError> {
        if let Some(commit) = self.cached_commit() {
            let root = self.snapshot(&commit);
            let mut files = Vec::new();
            walk(&root, &root, &mut files)?;
            files.sort();
            return Ok(Listing {
                commit,
                files,
                from_cache: true,
            });
        }
        if self.settings.offline {
            return Err(HubError::NotCached {
                id: Box::new(self.id.clone()),
                file: "the revision".into(),
                cache: self.settings.cache_dir.clone(),
                command: self.id.download_command(&[]),
            });
        }
        self.list_remote().await
    }

    /// The revision's files as the hub lists them (`/api/{models,datasets}/ID/revision/REV`).
    pub async fn list_remote(&self) -> Result<Listing, HubError> {
        let info =
            self.api()?
                .repo(self.hf_repo())
                .info()
                .await
                .map_err(|e| match status_of(&e) {
                    Some(404) => self.not_found("(the revision)"),
                    _ => self.download_error("the file list", &e),
                })?;
        Ok(Listing {
            commit: info.sha,
            files: info.siblings.into_iter().map(|s| s.rfilename).collect(),
            from_cache: false,
        })
    }
}

fn status_of(e: &hf_hub::api::tokio::ApiError) -> Option<u16> {
    match e {
        hf_hub::api::tokio::ApiError::RequestError(r) => r.status().map(|s| s.as_u16()),
        _ => None,
    }
}

/// hf-hub leaves `blobs/<etag>.lock` next to the blob; huggingface_hub keeps its locks under
/// `.locks/`, so the file is removed to keep the layout the same.
fn remove_blob_lock(pointer: &Path) {
    if let Ok(target) = std::fs::read_link(pointer) {
        let blob = pointer.parent().unwrap_or(Path::new(".")).join(target);
        let _ = std::fs::remove_file(blob.with_extension("lock"));
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), HubError> {
    let entries = std::fs::read_dir(dir).map_err(|e| HubError::Cache {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(())
}
