//! Datasets for environments, the Rust counterpart of `datasets.load_dataset` in upstream
//! `setup` hooks: open a hub dataset id (`ORG/NAME[@revision]`, from the Hugging Face cache
//! first, then downloaded into it), a local file or a local directory; pick a split by the
//! hub's file-naming conventions; read JSONL, JSON, CSV/TSV or parquet; deserialize rows into
//! the environment's item type with serde (`#[serde(alias = "Prompt")]` instead of glue code);
//! shuffle with a seed and hold out an eval split.
//!
//! ```text
//! #[derive(Deserialize)]
//! struct Question {
//!     #[serde(alias = "Prompt")]
//!     question: String,
//!     #[serde(alias = "Answer", deserialize_with = "hermes_env::data::text")]
//!     answer: String,
//! }
//!
//! let cfg = self.env_config();
//! let mut items: Vec<Question> =
//!     data::open_or_fallback(cfg.dataset_name.as_deref(), &cfg.dataset_split, "the built-in questions")
//!         .await
//!         .unwrap_or_else(builtin_questions);
//! data::shuffle(&mut items, 42);
//! let n_eval = data::eval_size(items.len(), 20, 0.1);
//! let (train, eval) = data::split_eval(items, n_eval);
//! ```

mod configs;
mod cursor;
mod formats;
mod sample;
mod source;
mod splits;

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::hub::{HubError, HubSettings};

pub use cursor::{Cursor, Cursors};
pub use sample::{eval_size, shuffle, split_eval};
pub use source::PARQUET_REVISION;
pub use splits::Format;

/// One dataset row: column name → value.
pub type Row = Map<String, Value>;

/// Why a dataset could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The name is neither an existing path nor shaped like a hub id.
    #[error("dataset '{0}' is neither a local file or directory nor a hub id ORG/NAME[@revision]")]
    NotFound(String),
    /// The hub dataset could not be had (not cached offline, download failed, …). Transparent:
    /// the hub error names the dataset already, and a wrapper that repeated it as its source
    /// would print the text twice in an error chain.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// A legacy id (`gsm8k`) is not in the cache, but the dataset is under its current
    /// `ORG/NAME` id.
    #[error("{hub}; the cache holds it under its current id {cached}: use that id")]
    LegacyId {
        /// The hub error for the legacy id.
        hub: Box<HubError>,
        /// The cached `ORG/NAME` ids of the same name.
        cached: String,
    },
    /// The dataset has several configs and none was asked for or marked `default: true`.
    #[error(
        "dataset {dataset}: split '{split}' exists in several configs ({configs}) and none was chosen; \
         name one as {dataset}:CONFIG or with --env.dataset_config"
    )]
    AmbiguousConfig {
        /// The dataset.
        dataset: String,
        /// The split asked for.
        split: String,
        /// The dataset's configs.
        configs: String,
    },
    /// The config asked for is not one of the dataset's.
    #[error("dataset {dataset}: no config '{config}' (configs: {configs})")]
    UnknownConfig {
        /// The dataset.
        dataset: String,
        /// The config asked for.
        config: String,
        /// The dataset's configs.
        configs: String,
    },
    /// `NAME:CONFIG` and an explicit config disagree.
    #[error(
        "dataset {dataset}: the name says config '{in_name}' but config '{config}' is asked for"
    )]
    ConfigConflict {
        /// The dataset.
        dataset: String,
        /// The config after `:` in the name.
        in_name: String,
        /// The config passed separately (`--env.dataset_config`).
        config: String,
    },
    /// The dataset card's `configs:` cannot be read.
    #[error("dataset {dataset}: {reason}")]
    Card {
        /// The dataset.
        dataset: String,
        /// What is wrong with the card.
        reason: String,
    },
    /// No data file of the dataset belongs to the split.
    #[error("dataset {dataset}: no data files for split '{split}' (splits found: {available})")]
    NoSplit {
        /// The dataset.
        dataset: String,
        /// The split asked for.
        split: String,
        /// The splits its file names do name.
        available: String,
    },
    /// A local file has an extension the layer does not read.
    #[error(
        "{0}: not a data file this layer reads (.jsonl, .ndjson, .json, .csv, .tsv, .parquet)"
    )]
    Format(PathBuf),
    /// A file could not be read or parsed.
    #[error("{path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A row does not fit the item type.
    #[error("dataset {dataset}, row {row}: {reason}")]
    Row {
        /// The dataset.
        dataset: String,
        /// 1-based row number in the split.
        row: usize,
        /// The deserialization error.
        reason: String,
    },
}

/// The rows of one split of a dataset, in file order.
#[derive(Debug, Clone)]
pub struct Dataset {
    rows: Vec<Row>,
    source: String,
    config: Option<String>,
    split: String,
}

impl Dataset {
    /// Opens `split` of `name` (`ORG/NAME[@revision][:config]`, a file or a directory) with
    /// the hub settings of the environment ([`HubSettings::from_env`]); logs one line saying
    /// where the rows came from.
    pub async fn open(name: &str, split: &str) -> Result<Dataset, DataError> {
        Self::open_config_with(name, None, split, &HubSettings::from_env()).await
    }

    /// Opens `split` of config `config` of `name`, like `load_dataset(name, config)`; `None`
    /// chooses as `datasets` does (the card's `default: true` config, or the only one).
    pub async fn open_config(
        name: &str,
        config: Option<&str>,
        split: &str,
    ) -> Result<Dataset, DataError> {
        Self::open_config_with(name, config, split, &HubSettings::from_env()).await
    }

    /// [`Dataset::open`] with explicit hub settings.
    pub async fn open_with(
        name: &str,
        split: &str,
        hub: &HubSettings,
    ) -> Result<Dataset, DataError> {
        Self::open_config_with(name, None, split, hub).await
    }

    /// Opens `split` of `config` of `name`: an existing local file (read whatever the split),
    /// an existing local directory (its card's configs, else files chosen by split name), or a
    /// hub dataset id (the revision's files for the config and split, else those of the
    /// auto-converted parquet revision). A dataset with several configs and none chosen (by
    /// `config`, `NAME:CONFIG` or the card's `default: true`) is an error naming them.
    pub async fn open_config_with(
        name: &str,
        config: Option<&str>,
        split: &str,
        hub: &HubSettings,
    ) -> Result<Dataset, DataError> {
        let located = source::locate(name, config, split, hub).await?;
        let mut rows = Vec::new();
        for (path, format) in &located.files {
            rows.extend(formats::read(path, *format)?);
        }
        let config_part = located
            .config
            .as_deref()
            .map(|c| format!("config '{c}', "))
            .unwrap_or_default();
        tracing::info!(
            "dataset {}: {config_part}split '{split}', {} rows from {} file(s)",
            located.source,
            rows.len(),
            located.files.len()
        );
        Ok(Dataset {
            rows,
            source: located.source,
            config: located.config,
            split: split.to_owned(),
        })
    }

    /// A dataset made from rows already in memory (tests, generated data).
    pub fn from_rows(rows: Vec<Row>, source: &str) -> Dataset {
        Dataset {
            rows,
            source: source.to_owned(),
            config: None,
            split: String::new(),
        }
    }

    /// The config the rows belong to, when the dataset has named configs.
    pub fn config(&self) -> Option<&str> {
        self.config.as_deref()
    }

    /// Where the rows came from, for log lines.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The split that was opened.
    pub fn split(&self) -> &str {
        &self.split
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the split has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows as read.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Renames column `from` to `to` in every row that has it, e.g. the configured
    /// `prompt_field` to the item type's field name.
    pub fn rename_column(&mut self, from: &str, to: &str) {
        if from == to {
            return;
        }
        for row in &mut self.rows {
            if let Some(value) = row.remove(from) {
                row.insert(to.to_owned(), value);
            }
        }
    }

    /// Every row deserialized into `T`; the first row that does not fit is an error naming it.
    pub fn items<T: DeserializeOwned>(&self) -> Result<Vec<T>, DataError> {
        self.rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                serde_json::from_value(Value::Object(row.clone())).map_err(|e| DataError::Row {
                    dataset: self.source.clone(),
                    row: i + 1,
                    reason: e.to_string(),
                })
            })
            .collect()
    }
}

/// Opens `split` of `name` for an environment that has built-in items to fall back on: the
/// dataset's rows as `T`, or `None` after one line saying that `fallback` is used and why (at
/// INFO when no dataset is configured, at WARN when it could not be had or read).
pub async fn open_or_fallback<T: DeserializeOwned>(
    name: Option<&str>,
    split: &str,
    fallback: &str,
) -> Option<Vec<T>> {
    open_config_or_fallback(name, None, split, fallback).await
}

/// [`open_or_fallback`] for the environment's `dataset_name`, `dataset_config` and
/// `dataset_split`.
pub async fn open_env_or_fallback<T: DeserializeOwned>(
    cfg: &crate::config::HermesEnvConfig,
    fallback: &str,
) -> Option<Vec<T>> {
    open_config_or_fallback(
        cfg.dataset_name.as_deref(),
        cfg.dataset_config.as_deref(),
        &cfg.dataset_split,
        fallback,
    )
    .await
}

/// [`open_or_fallback`] with a config (`None` chooses as `datasets` does).
pub async fn open_config_or_fallback<T: DeserializeOwned>(
    name: Option<&str>,
    config: Option<&str>,
    split: &str,
    fallback: &str,
) -> Option<Vec<T>> {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        tracing::info!("no dataset_name configured: using {fallback}");
        return None;
    };
    let loaded = match Dataset::open_config(name, config, split).await {
        Ok(dataset) if dataset.is_empty() => Err(format!("split '{split}' of {name} has no rows")),
        Ok(dataset) => dataset.items().map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match loaded {
        Ok(items) => Some(items),
        Err(reason) => {
            tracing::warn!("{reason}; using {fallback} instead");
            None
        }
    }
}

/// A serde `deserialize_with` helper for text columns that some datasets store as numbers or
/// booleans (an answer `21` instead of `"21"`): any scalar becomes its text, null becomes "".
pub fn text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    use serde::Deserialize;
    Ok(match Value::deserialize(deserializer)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Item {
        #[serde(alias = "Prompt")]
        prompt: String,
        #[serde(alias = "Answer", deserialize_with = "text")]
        answer: String,
    }

    fn rows(values: &[Value]) -> Vec<Row> {
        values
            .iter()
            .map(|v| v.as_object().unwrap().clone())
            .collect()
    }

    #[test]
    fn rows_deserialize_through_aliases_and_text_columns() {
        let ds = Dataset::from_rows(
            rows(&[json!({"Prompt": "p", "Answer": 21, "extra": true})]),
            "t",
        );
        let items: Vec<Item> = ds.items().unwrap();
        assert_eq!(
            items,
            [Item {
                prompt: "p".into(),
                answer: "21".into()
            }]
        );
        let bad = Dataset::from_rows(
            rows(&[
                json!({"Prompt": "p", "Answer": "a"}),
                json!({"Answer": "a"}),
            ]),
            "t",
        );
        let e = bad.items::<Item>().unwrap_err().to_string();
        assert!(e.contains("row 2") && e.contains("prompt"), "{e}");
    }

    #[test]
    fn rename_column_maps_a_prompt_field() {
        let mut ds = Dataset::from_rows(rows(&[json!({"instruction": "p", "answer": "a"})]), "t");
        ds.rename_column("instruction", "prompt");
        assert_eq!(ds.items::<Item>().unwrap()[0].prompt, "p");
    }

    #[tokio::test]
    async fn local_directories_are_split_by_file_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("train.jsonl"),
            "{\"prompt\":\"a\",\"answer\":\"1\"}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("test.csv"), "prompt,answer\nb,2\nc,3\n").unwrap();
        let hub = HubSettings::from_env();
        let name = dir.path().to_str().unwrap();
        let test = Dataset::open_with(name, "test", &hub).await.unwrap();
        assert_eq!(test.items::<Item>().unwrap().len(), 2);
        let e = Dataset::open_with(name, "validation", &hub)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("splits found: train, test"), "{e}");
        let file = dir.path().join("train.jsonl");
        let train = Dataset::open_with(file.to_str().unwrap(), "ignored", &hub)
            .await
            .unwrap();
        assert_eq!(train.len(), 1);
    }
}
