//! `wandb sync`: uploads a run directory (offline, or online with failed uploads) with the
//! same requests the live logger sends.

use std::path::{Path, PathBuf};

use super::api::Api;
use super::logger::{run_url, Batch, Uploader, LINES_PER_REQUEST};
use super::run_dir::StoredRun;
use super::settings::{WandbError, WandbSettings};

/// What one synced run became.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncReport {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The run's page.
    pub url: String,
    /// History rows uploaded.
    pub rows: usize,
}

/// Uploads the run in `root`: creates (or updates) the run with its id, name, project and
/// config, uploads its tables, history and summary, and marks it complete with the recorded
/// exit code (1 when the run did not finish cleanly).
pub async fn sync_run(settings: &WandbSettings, root: &Path) -> Result<SyncReport, WandbError> {
    let stored = StoredRun::read(root)?;
    let api = Api::new(settings)?;
    let mut meta = stored.meta.clone();
    if meta.entity.is_none() {
        meta.entity = settings.entity.clone();
    }
    let mut up = Uploader::new(api, meta, stored.config.clone(), root.to_owned());
    let run = up.ensure_run().await?;
    let chunks = stored.lines.len().div_ceil(LINES_PER_REQUEST);
    for (i, (lines, files)) in stored
        .lines
        .chunks(LINES_PER_REQUEST)
        .zip(stored.line_files.chunks(LINES_PER_REQUEST))
        .enumerate()
    {
        let batch = Batch {
            lines: lines.to_vec(),
            files: files.iter().flatten().cloned().collect(),
            summary: if i + 1 == chunks {
                stored.summary.clone()
            } else {
                None
            },
        };
        up.send(&batch).await?;
    }
    up.complete(stored.exit_code.unwrap_or(1)).await?;
    Ok(SyncReport {
        run_dir: root.to_owned(),
        url: run_url(&settings.app_url(), &run),
        rows: stored.lines.len(),
    })
}
