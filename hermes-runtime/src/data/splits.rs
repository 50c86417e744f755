//! Which files of a dataset hold a split, by the file-naming conventions of the hub and the
//! `datasets` library: `test.jsonl`, `data/test-00000-of-00001.parquet`, `test/…`,
//! `default/test/0000.parquet` (the auto-converted parquet revision), with `datasets`'
//! split synonyms (`validation` = `valid`/`dev`/`val`, …).

use std::path::Path;

/// A file format the dataset layer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Format {
    /// Apache Parquet.
    Parquet,
    /// JSON Lines (`.jsonl`, `.ndjson`).
    Jsonl,
    /// One JSON document: an array of rows, or an object with one array of rows.
    Json,
    /// Comma-separated values with a header row.
    Csv,
    /// Tab-separated values with a header row.
    Tsv,
}

impl Format {
    /// The format of `path` by its extension, if it is one the layer reads.
    pub fn of(path: &str) -> Option<Format> {
        let ext = Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "parquet" => Format::Parquet,
            "jsonl" | "ndjson" => Format::Jsonl,
            "json" => Format::Json,
            "csv" => Format::Csv,
            "tsv" => Format::Tsv,
            _ => return None,
        })
    }
}

/// The names `datasets` accepts for a split in file and directory names.
fn keywords(split: &str) -> Vec<String> {
    let synonyms: &[&str] = match split {
        "train" => &["train", "training"],
        "validation" => &["validation", "valid", "dev", "val"],
        "test" => &["test", "testing", "eval", "evaluation"],
        _ => &[],
    };
    let mut all = vec![split.to_lowercase()];
    all.extend(synonyms.iter().map(|s| s.to_string()));
    all.dedup();
    all
}

fn is_delimiter(c: char) -> bool {
    "-._ /".contains(c) || c.is_ascii_digit()
}

/// Whether `keyword` appears in `path` as a name of its own: bounded by the start, the end or
/// one of `-._ /` and digits on both sides.
fn mentions(path: &str, keyword: &str) -> bool {
    let path = path.to_lowercase();
    path.match_indices(keyword).any(|(at, _)| {
        let before = path[..at].chars().next_back();
        let after = path[at + keyword.len()..].chars().next();
        before.is_none_or(is_delimiter) && after.is_none_or(is_delimiter)
    })
}

fn data_files(files: &[String]) -> impl Iterator<Item = (&String, Format)> {
    files
        .iter()
        .filter(|f| !f.split('/').any(|part| part.starts_with('.')))
        .filter_map(|f| Format::of(f).map(|format| (f, format)))
}

/// The files of `split` among `files` (repository-relative paths), all of one format
/// (parquet first, then JSONL, JSON, CSV, TSV). A dataset whose file names name no split at
/// all is one `train` split, as in `datasets`. Within the auto-converted layout
/// (`CONFIG/SPLIT/…`) the `default` config is taken when there are several.
pub fn select(files: &[String], split: &str) -> Vec<String> {
    let wanted = keywords(split);
    let mut matched: Vec<(&String, Format)> = data_files(files)
        .filter(|(f, _)| wanted.iter().any(|k| mentions(f, k)))
        .collect();
    if matched.is_empty() && split == "train" {
        let any_split = ["train", "validation", "test"]
            .iter()
            .flat_map(|s| keywords(s))
            .collect::<Vec<_>>();
        let unnamed = data_files(files).all(|(f, _)| !any_split.iter().any(|k| mentions(f, k)));
        if unnamed {
            matched = data_files(files).collect();
        }
    }
    let Some(format) = matched.iter().map(|(_, format)| *format).min() else {
        return Vec::new();
    };
    matched.retain(|(_, f)| *f == format);
    if matched.iter().any(|(f, _)| f.starts_with("default/")) {
        matched.retain(|(f, _)| f.starts_with("default/"));
    }
    let mut out: Vec<String> = matched.into_iter().map(|(f, _)| f.clone()).collect();
    out.sort();
    out
}

/// The split names the data files of `files` mention, for error messages.
pub fn known_splits(files: &[String]) -> Vec<&'static str> {
    ["train", "validation", "test"]
        .into_iter()
        .filter(|s| !select(files, s).is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hub_naming_conventions_select_the_split() {
        let repo = files(&[
            ".gitattributes",
            "README.md",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
            "data/test-00000-of-00001.parquet",
            "data/validation-00000-of-00001.parquet",
        ]);
        assert_eq!(
            select(&repo, "train"),
            [
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet"
            ]
        );
        assert_eq!(select(&repo, "test"), ["data/test-00000-of-00001.parquet"]);
        assert_eq!(
            select(&repo, "validation"),
            ["data/validation-00000-of-00001.parquet"]
        );
        assert!(select(&repo, "extra").is_empty());
        assert_eq!(known_splits(&repo), ["train", "validation", "test"]);
    }

    #[test]
    fn plain_names_directories_and_synonyms() {
        assert_eq!(
            select(&files(&["test.jsonl", "train.jsonl"]), "test"),
            ["test.jsonl"]
        );
        assert_eq!(
            select(&files(&["test/a.csv", "train/a.csv"]), "test"),
            ["test/a.csv"]
        );
        assert_eq!(
            select(&files(&["dev.tsv", "train.tsv"]), "validation"),
            ["dev.tsv"]
        );
        assert_eq!(
            select(&files(&["frames_test_set.tsv"]), "test"),
            ["frames_test_set.tsv"]
        );
        assert!(select(&files(&["contest.jsonl", "latest.json"]), "test").is_empty());
    }

    #[test]
    fn auto_converted_parquet_takes_the_default_config() {
        let repo = files(&[
            "default/test/0000.parquet",
            "default/test/0001.parquet",
            "other/test/0000.parquet",
        ]);
        assert_eq!(
            select(&repo, "test"),
            ["default/test/0000.parquet", "default/test/0001.parquet"]
        );
    }

    #[test]
    fn unnamed_files_are_the_train_split_and_parquet_wins() {
        let repo = files(&["questions.jsonl", "more.jsonl", "notes.txt"]);
        assert_eq!(select(&repo, "train"), ["more.jsonl", "questions.jsonl"]);
        assert!(select(&repo, "test").is_empty());
        let mixed = files(&["test.csv", "test.parquet"]);
        assert_eq!(select(&mixed, "test"), ["test.parquet"]);
    }
}
