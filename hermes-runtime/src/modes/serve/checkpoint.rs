//! Serve's checkpoints of the environment: its own state (`save_checkpoint`) and the positions
//! of its dataset cursors, as `<dir>/env_checkpoints/<name>/step-<N>.json` (upstream's layout),
//! written every `checkpoint_interval` trainer steps and at exit, and the newest one restored
//! when `serve` starts again. A checkpoint that cannot be read or does not belong to this
//! environment stops the run with one line and is left where it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tracing::{info, warn};

use crate::data::Cursors;
use crate::env::{Checkpoint, Environment};

/// The file's `format`; another value is a checkpoint this version does not read.
const FORMAT: &str = "hermes-env checkpoint 1";

/// Why no checkpoint could be restored (each stops the run; no file is touched).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    /// The checkpoint directory cannot be listed.
    #[error("cannot read the checkpoint directory {dir}: {reason}")]
    List {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The newest checkpoint is not a checkpoint this version reads.
    #[error(
        "checkpoint {path} is corrupt ({reason}); it was left as it is: move it away to resume \
         from the one before, or set --env.checkpoint_dir to start afresh"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The newest checkpoint was saved by another environment, or the environment refused it.
    #[error(
        "checkpoint {path} does not fit this environment ({reason}); it was left as it is: \
         set --env.checkpoint_dir to start afresh"
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },
}

/// One checkpoint file.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    format: String,
    /// The environment's name (the file's directory names it too).
    env: String,
    /// The trainer step it was saved at.
    step: i64,
    /// The dataset cursors' positions, by name.
    cursors: BTreeMap<String, u64>,
    /// What `save_checkpoint` saved.
    state: Map<String, Value>,
}

/// Where one environment's checkpoints live.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointStore {
    dir: PathBuf,
    env: String,
}

impl CheckpointStore {
    /// `<base>/env_checkpoints/<env>`.
    pub(crate) fn new(base: &Path, env: &str) -> CheckpointStore {
        CheckpointStore {
            dir: base.join("env_checkpoints").join(env),
            env: env.to_owned(),
        }
    }

    /// The directory of the files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Saves `env`'s state and the cursors' positions as of trainer step `step` (written to a
    /// temporary file, then renamed, so a crash never leaves half a checkpoint).
    pub(crate) fn save<E: Environment>(
        &self,
        env: &E,
        cursors: &Cursors,
        step: i64,
    ) -> anyhow::Result<PathBuf> {
        let mut state = Checkpoint::default();
        env.save_checkpoint(&mut state)?;
        let saved = Saved {
            format: FORMAT.to_owned(),
            env: self.env.clone(),
            step,
            cursors: cursors.positions(),
            state: state.values().clone(),
        };
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(format!("step-{step}.json"));
        let tmp = self.dir.join(format!(".step-{step}.json.tmp"));
        std::fs::write(&tmp, serde_json::to_vec_pretty(&saved)?)?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }

    /// The checkpoint to resume from: with a trainer that resumed at `starting_step` > 0, the
    /// newest saved at or before it (upstream loads `step-<starting_step>.json`); otherwise the
    /// newest.
    fn choose(&self, starting_step: i64) -> Result<Option<(i64, PathBuf)>, CheckpointError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(CheckpointError::List {
                    dir: self.dir.clone(),
                    reason: e.to_string(),
                })
            }
        };
        let step_of = |name: &str| {
            name.strip_prefix("step-")?
                .strip_suffix(".json")?
                .parse::<i64>()
                .ok()
        };
        Ok(entries
            .flatten()
            .filter_map(|e| Some((step_of(e.file_name().to_str()?)?, e.path())))
            .filter(|(step, _)| starting_step <= 0 || *step <= starting_step)
            .max_by_key(|(step, _)| *step))
    }

    /// Restores the newest checkpoint (see [`CheckpointStore::choose`]) into `env` and the
    /// cursors, logging one line either way; `Ok(None)` when there is none.
    pub(crate) fn restore<E: Environment>(
        &self,
        env: &mut E,
        cursors: &Cursors,
        starting_step: i64,
    ) -> Result<Option<i64>, CheckpointError> {
        let Some((_, path)) = self.choose(starting_step)? else {
            info!(
                "no checkpoint in {}: starting from the beginning of the data",
                self.dir.display()
            );
            return Ok(None);
        };
        let corrupt = |reason: String| CheckpointError::Corrupt {
            path: path.clone(),
            reason,
        };
        let text = std::fs::read(&path).map_err(|e| corrupt(e.to_string()))?;
        let saved: Saved = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
        if saved.format != FORMAT {
            return Err(corrupt(format!(
                "format '{}', expected '{FORMAT}'",
                saved.format
            )));
        }
        let mismatch = |reason: String| CheckpointError::Mismatch {
            path: path.clone(),
            reason,
        };
        if saved.env != self.env {
            return Err(mismatch(format!(
                "saved by environment '{}', this is '{}'",
                saved.env, self.env
            )));
        }
        let unknown: Vec<&String> = saved
            .cursors
            .keys()
            .filter(|name| !cursors.positions().contains_key(*name))
            .collect();
        if !unknown.is_empty() {
            let names: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
            return Err(mismatch(format!(
                "dataset cursor(s) {} are not made by this environment's setup",
                names.join(", ")
            )));
        }
        env.load_checkpoint(&Checkpoint::from_values(saved.state.clone()))
            .map_err(|e| mismatch(format!("load_checkpoint: {e:#}")))?;
        cursors.restore(&saved.cursors);
        let positions: Vec<String> = saved
            .cursors
            .iter()
            .map(|(name, at)| format!("{name} at item {at}"))
            .collect();
        let keys: Vec<&str> = saved.state.keys().map(String::as_str).collect();
        info!(
            "resuming from checkpoint {} (trainer step {}): dataset {}; environment state {}",
            path.display(),
            saved.step,
            if positions.is_empty() {
                "cursors: none".to_owned()
            } else {
                positions.join(", ")
            },
            if keys.is_empty() {
                "empty".to_owned()
            } else {
                format!("with {}", keys.join(", "))
            }
        );
        let fresh: Vec<String> = cursors
            .positions()
            .into_keys()
            .filter(|name| !saved.cursors.contains_key(name))
            .collect();
        if !fresh.is_empty() {
            warn!(
                "dataset cursor(s) {} are not in the checkpoint: they start at the beginning",
                fresh.join(", ")
            );
        }
        Ok(Some(saved.step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_checkpoint_at_or_before_the_trainers_step_is_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path(), "env");
        assert_eq!(store.choose(0).unwrap(), None, "no directory yet");
        std::fs::create_dir_all(store.dir()).unwrap();
        for name in [
            "step-2.json",
            "step-10.json",
            "step-4.json",
            ".step-12.json.tmp",
        ] {
            std::fs::write(store.dir().join(name), "{}").unwrap();
        }
        let step = |starting| store.choose(starting).unwrap().map(|(s, _)| s);
        assert_eq!(step(0), Some(10), "a restarted env: the newest");
        assert_eq!(
            step(5),
            Some(4),
            "a trainer resumed at step 5: the one it trained on"
        );
        assert_eq!(step(1), None);
    }

    #[test]
    fn corrupt_and_foreign_checkpoints_are_one_line_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path(), "env");
        std::fs::create_dir_all(store.dir()).unwrap();
        let path = store.dir().join("step-3.json");
        let read = |text: &str| -> Result<Saved, String> {
            std::fs::write(&path, text).unwrap();
            let (_, p) = store.choose(0).unwrap().unwrap();
            serde_json::from_slice(&std::fs::read(p).unwrap()).map_err(|e| e.to_string())
        };
        assert!(read("{\"format\":").is_err());
        let foreign = json_saved("other");
        assert_eq!(read(&foreign).unwrap().env, "other");
        let e = CheckpointError::Mismatch {
            path: path.clone(),
            reason: "saved by environment 'other', this is 'env'".into(),
        }
        .to_string();
        assert!(!e.contains('\n') && e.contains("step-3.json"), "{e}");
    }

    fn json_saved(env: &str) -> String {
        serde_json::to_string(&Saved {
            format: FORMAT.into(),
            env: env.into(),
            step: 3,
            cursors: BTreeMap::from([("train".into(), 5)]),
            state: Map::new(),
        })
        .unwrap()
    }
}
