//! The local run directory, written in every mode and uploaded by `wandb sync`:
//!
//! ```text
//! {WANDB_DIR}/wandb/{offline-}run-YYYYMMDD_HHMMSS-{id}/
//!   run.json                      id, display name, project, entity, group, mode
//!   exit.json                     {"exit_code": N}, once the run finished
//!   files/config.json             the run config in W&B's {"key": {"value": …}} shape
//!   files/wandb-history.jsonl     one history row per log (with _step, _runtime, _timestamp)
//!   files/wandb-summary.json      the latest value of every key
//!   files/media/table/…table.json rollout tables referenced from history rows
//! ```

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::metrics::{LogValue, Record, Table};
use super::settings::{local_time, WandbError};

/// History file name, as the SDKs name it.
pub const HISTORY_FILE: &str = "wandb-history.jsonl";
/// Summary file name, as the SDKs name it.
pub const SUMMARY_FILE: &str = "wandb-summary.json";
/// Written when the run finishes: `{"exit_code": N}`.
pub const EXIT_FILE: &str = "exit.json";

/// `run.json`: what is needed to create the run on the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The run id (the `name` of the W&B bucket).
    pub id: String,
    /// The display name (`{stem}-{date}-{letters}`), if any.
    pub display_name: Option<String>,
    /// The project.
    pub project: String,
    /// The entity, when configured (else the API key's default entity).
    pub entity: Option<String>,
    /// The run group.
    pub group: Option<String>,
    /// `online` or `offline`.
    pub mode: String,
}

/// One row as written: the history line, the media files it references and the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct WrittenRow {
    /// The JSON history line.
    pub line: String,
    /// Run-relative paths (`media/table/…`) of the files this row references.
    pub files: Vec<String>,
    /// The summary after this row, as JSON.
    pub summary: String,
}

/// An open run directory.
pub struct RunDir {
    root: PathBuf,
    history: BufWriter<File>,
    summary: Map<String, Value>,
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), WandbError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| WandbError::io(parent, e))?;
    }
    std::fs::write(path, bytes).map_err(|e| WandbError::io(path, e))
}

fn number(v: f64) -> Value {
    serde_json::Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// W&B's config shape: `{"key": {"desc": null, "value": v}}`.
pub fn wandb_config(config: &Map<String, Value>) -> Map<String, Value> {
    config
        .iter()
        .map(|(k, v)| (k.clone(), json!({"desc": null, "value": v})))
        .collect()
}

impl RunDir {
    /// Creates `{dir}/wandb/{offline-}run-{time}-{id}` with `run.json` and the config.
    pub fn create(
        dir: &Path,
        meta: &RunMeta,
        config: &Map<String, Value>,
    ) -> Result<Self, WandbError> {
        let (y, mo, d, h, mi, s) = local_time();
        let prefix = if meta.mode == "offline" {
            "offline-run"
        } else {
            "run"
        };
        let root = dir.join("wandb").join(format!(
            "{prefix}-{y:04}{mo:02}{d:02}_{h:02}{mi:02}{s:02}-{}",
            meta.id
        ));
        let files = root.join("files");
        std::fs::create_dir_all(&files).map_err(|e| WandbError::io(&files, e))?;
        let meta_text = serde_json::to_string_pretty(meta).expect("run metadata serializes");
        write_file(&root.join("run.json"), meta_text.as_bytes())?;
        let config_text = serde_json::to_string_pretty(&Value::Object(wandb_config(config)))
            .expect("config serializes");
        write_file(&files.join("config.json"), config_text.as_bytes())?;
        let history_path = files.join(HISTORY_FILE);
        let history = File::create(&history_path).map_err(|e| WandbError::io(&history_path, e))?;
        Ok(RunDir {
            root,
            history: BufWriter::new(history),
            summary: Map::new(),
        })
    }

    /// The run directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn write_table(
        &self,
        key: &str,
        step: i64,
        table: &Table,
    ) -> Result<(String, Value), WandbError> {
        let body = json!({"columns": table.columns, "data": table.rows}).to_string();
        let digest = Sha256::digest(body.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let safe: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "/_.-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let rel = format!("media/table/{safe}_{step}_{}.table.json", &hex[..20]);
        write_file(&self.root.join("files").join(&rel), body.as_bytes())?;
        let reference = json!({
            "_type": "table-file",
            "sha256": hex,
            "size": body.len(),
            "path": rel,
            "ncols": table.columns.len(),
            "nrows": table.rows.len(),
        });
        Ok((rel, reference))
    }

    /// Appends one history row (tables go to media files) and rewrites the summary.
    pub fn write_row(
        &mut self,
        step: i64,
        runtime: f64,
        timestamp: f64,
        record: &Record,
    ) -> Result<WrittenRow, WandbError> {
        let mut row = Map::new();
        let mut files = Vec::new();
        for (key, value) in record {
            let v = match value {
                LogValue::Number(n) => number(*n),
                LogValue::Text(s) => Value::String(s.clone()),
                LogValue::Table(t) => {
                    let (rel, reference) = self.write_table(key, step, t)?;
                    files.push(rel);
                    reference
                }
            };
            row.insert(key.clone(), v);
        }
        row.insert("_step".into(), step.into());
        row.insert("_runtime".into(), number(runtime));
        row.insert("_timestamp".into(), number(timestamp));
        let line = Value::Object(row.clone()).to_string();
        let history_path = self.root.join("files").join(HISTORY_FILE);
        self.history
            .write_all(line.as_bytes())
            .and_then(|()| self.history.write_all(b"\n"))
            .and_then(|()| self.history.flush())
            .map_err(|e| WandbError::io(&history_path, e))?;
        for (k, v) in row {
            self.summary.insert(k, v);
        }
        let summary = Value::Object(self.summary.clone()).to_string();
        write_file(
            &self.root.join("files").join(SUMMARY_FILE),
            summary.as_bytes(),
        )?;
        Ok(WrittenRow {
            line,
            files,
            summary,
        })
    }
}

/// A run directory read back for `sync`.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// `run.json`.
    pub meta: RunMeta,
    /// The config (plain values, W&B's wrapping removed).
    pub config: Map<String, Value>,
    /// History lines in order.
    pub lines: Vec<String>,
    /// The summary, if any row was logged.
    pub summary: Option<String>,
    /// Run-relative media paths referenced by each history line.
    pub line_files: Vec<Vec<String>>,
    /// The exit code recorded when the run finished (`None`: it did not finish cleanly).
    pub exit_code: Option<i32>,
}

impl StoredRun {
    /// Reads a run directory written by [`RunDir`].
    pub fn read(root: &Path) -> Result<Self, WandbError> {
        let bad = |path: &Path, message: String| WandbError::RunDir {
            path: path.to_owned(),
            message,
        };
        let meta_path = root.join("run.json");
        let text =
            std::fs::read_to_string(&meta_path).map_err(|e| WandbError::io(&meta_path, e))?;
        let meta: RunMeta =
            serde_json::from_str(&text).map_err(|e| bad(&meta_path, e.to_string()))?;
        let files_dir = root.join("files");
        let config_path = files_dir.join("config.json");
        let config = match std::fs::read_to_string(&config_path) {
            Ok(text) => {
                let wrapped: Map<String, Value> =
                    serde_json::from_str(&text).map_err(|e| bad(&config_path, e.to_string()))?;
                wrapped
                    .into_iter()
                    .map(|(k, v)| {
                        let value = v.get("value").cloned().unwrap_or(Value::Null);
                        (k, value)
                    })
                    .collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => return Err(WandbError::io(&config_path, e)),
        };
        let history_path = files_dir.join(HISTORY_FILE);
        let mut lines = Vec::new();
        let mut line_files = Vec::new();
        match File::open(&history_path) {
            Ok(f) => {
                for line in std::io::BufReader::new(f).lines() {
                    let line = line.map_err(|e| WandbError::io(&history_path, e))?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    let row: Map<String, Value> = serde_json::from_str(&line).map_err(|e| {
                        bad(&history_path, format!("line {}: {e}", lines.len() + 1))
                    })?;
                    let files = row
                        .values()
                        .filter(|v| v.get("_type").and_then(Value::as_str) == Some("table-file"))
                        .filter_map(|v| v.get("path").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    line_files.push(files);
                    lines.push(line);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(WandbError::io(&history_path, e)),
        }
        let summary_path = files_dir.join(SUMMARY_FILE);
        let summary = match std::fs::read_to_string(&summary_path) {
            Ok(s) => Some(s.trim().to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(WandbError::io(&summary_path, e)),
        };
        let exit_code = std::fs::read_to_string(root.join(EXIT_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v.get("exit_code").and_then(Value::as_i64))
            .map(|c| c as i32);
        Ok(StoredRun {
            meta,
            config,
            lines,
            summary,
            line_files,
            exit_code,
        })
    }
}

/// Run directories under `path`: `path` itself when it holds `run.json`, else its
/// subdirectories (and `path/wandb/*`) that do, sorted.
pub fn find_runs(path: &Path) -> Vec<PathBuf> {
    if path.join("run.json").is_file() {
        return vec![path.to_owned()];
    }
    let mut runs: Vec<PathBuf> = [path.to_owned(), path.join("wandb")]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("run.json").is_file())
        .collect();
    runs.sort();
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_tables_and_summary_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = RunMeta {
            id: "abcd1234".into(),
            display_name: Some("env-2026-01-01-abcdef".into()),
            project: "p".into(),
            entity: None,
            group: None,
            mode: "offline".into(),
        };
        let mut config = Map::new();
        config.insert("group_size".into(), 4.into());
        let mut dir = RunDir::create(tmp.path(), &meta, &config).unwrap();
        assert!(dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("offline-run-"));
        let mut rec = Record::new();
        rec.insert("train/mean_reward".into(), LogValue::Number(0.5));
        rec.insert("train/nan".into(), LogValue::Number(f64::NAN));
        rec.insert(
            "train/rollouts".into(),
            LogValue::Table(Table {
                columns: vec!["text".into(), "score".into()],
                rows: vec![vec!["hi".into(), 1.0.into()]],
            }),
        );
        let w = dir.write_row(3, 1.5, 1000.0, &rec).unwrap();
        assert_eq!(w.files.len(), 1);
        assert!(w.files[0].starts_with("media/table/train/rollouts_3_"));
        let row: Value = serde_json::from_str(&w.line).unwrap();
        assert_eq!(row["_step"], 3);
        assert_eq!(row["train/nan"], Value::Null);
        assert_eq!(row["train/rollouts"]["nrows"], 1);
        let stored = StoredRun::read(dir.path()).unwrap();
        assert_eq!(stored.meta, meta);
        assert_eq!(stored.config, config);
        assert_eq!(stored.lines, vec![w.line.clone()]);
        assert_eq!(stored.summary.as_deref(), Some(w.summary.as_str()));
        assert_eq!(stored.line_files, vec![w.files.clone()]);
        assert_eq!(stored.exit_code, None);
        let table: Value = serde_json::from_slice(
            &std::fs::read(dir.path().join("files").join(&w.files[0])).unwrap(),
        )
        .unwrap();
        assert_eq!(table["data"][0][0], "hi");
        assert_eq!(find_runs(tmp.path()), vec![dir.path().to_owned()]);
    }
}
