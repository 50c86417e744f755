//! Dataset configs (subsets) the way the `datasets` library finds them: the `configs:` list in
//! the YAML front matter of the dataset card (`README.md`), each with a `config_name`, its
//! `data_files` (glob patterns per split) or `data_dir`, and an optional `default: true`; and,
//! in the hub's auto-converted parquet revision, the `CONFIG/SPLIT/0000.parquet` directories.
//! Without either, a dataset has the one config `default` holding every file.

use serde_yaml::Value as Yaml;

use super::splits::{select, Format};

/// The config every dataset without a `configs:` card has, as in `datasets`.
pub const DEFAULT_CONFIG: &str = "default";

/// One config of a dataset card.
#[derive(Debug, Clone, PartialEq)]
pub struct CardConfig {
    /// `config_name` (`default` when the entry has none).
    pub name: String,
    /// `default: true`.
    pub default: bool,
    /// `(split, glob patterns)` from `data_files`, in card order.
    pub data_files: Vec<(String, Vec<String>)>,
    /// `data_dir`: the config's files are those under it, split by file names.
    pub data_dir: Option<String>,
}

impl CardConfig {
    /// The files of `split` among `files` (repository-relative paths).
    pub fn files(&self, files: &[String], split: &str) -> Vec<String> {
        if self.data_files.is_empty() {
            let dir = self.data_dir.as_deref().unwrap_or("").trim_matches('/');
            let inside: Vec<String> = files
                .iter()
                .filter(|f| dir.is_empty() || f.starts_with(&format!("{dir}/")))
                .cloned()
                .collect();
            return select(&inside, split);
        }
        let patterns: Vec<glob::Pattern> = self
            .data_files
            .iter()
            .filter(|(s, _)| s == split)
            .flat_map(|(_, p)| p)
            .filter_map(|p| glob::Pattern::new(&self.under_data_dir(p)).ok())
            .collect();
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let mut out: Vec<String> = files
            .iter()
            .filter(|f| Format::of(f).is_some())
            .filter(|f| patterns.iter().any(|p| p.matches_with(f, options)))
            .cloned()
            .collect();
        out.sort();
        out
    }

    fn under_data_dir(&self, pattern: &str) -> String {
        match self.data_dir.as_deref().map(|d| d.trim_matches('/')) {
            Some(dir) if !dir.is_empty() => format!("{dir}/{pattern}"),
            _ => pattern.to_owned(),
        }
    }

    /// The splits the config names, for error messages.
    pub fn splits(&self, files: &[String]) -> Vec<String> {
        if self.data_files.is_empty() {
            return ["train", "validation", "test"]
                .into_iter()
                .filter(|s| !self.files(files, s).is_empty())
                .map(str::to_owned)
                .collect();
        }
        let mut splits: Vec<String> = Vec::new();
        for (split, _) in &self.data_files {
            if !splits.contains(split) {
                splits.push(split.clone());
            }
        }
        splits
    }
}

/// The `configs:` of a dataset card (`README.md` text); empty when the card has no YAML
/// front matter or no `configs:` in it. An unreadable front matter is an error.
pub fn card_configs(card: &str) -> Result<Vec<CardConfig>, String> {
    let Some(yaml) = front_matter(card) else {
        return Ok(Vec::new());
    };
    let meta: Yaml =
        serde_yaml::from_str(yaml).map_err(|e| format!("the card's YAML front matter: {e}"))?;
    let Some(configs) = meta.get("configs") else {
        return Ok(Vec::new());
    };
    let Some(list) = configs.as_sequence() else {
        return Err("the card's `configs:` is not a list".into());
    };
    list.iter().map(card_config).collect()
}

fn front_matter(card: &str) -> Option<&str> {
    let card = card.strip_prefix('\u{feff}').unwrap_or(card);
    let rest = card
        .strip_prefix("---\n")
        .or_else(|| card.strip_prefix("---\r\n"))?;
    let end = rest
        .match_indices("\n---")
        .map(|(at, _)| at)
        .find(|&at| matches!(rest[at + 4..].chars().next(), None | Some('\n' | '\r')))?;
    Some(&rest[..end])
}

fn strings(value: &Yaml) -> Option<Vec<String>> {
    match value {
        Yaml::String(s) => Some(vec![s.clone()]),
        Yaml::Sequence(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => None,
    }
}

fn card_config(entry: &Yaml) -> Result<CardConfig, String> {
    let name = entry
        .get("config_name")
        .and_then(Yaml::as_str)
        .unwrap_or(DEFAULT_CONFIG)
        .to_owned();
    let bad = |what: &str| format!("config '{name}' of the card: {what}");
    let default = entry
        .get("default")
        .map(|v| v.as_bool().ok_or_else(|| bad("`default` is not a boolean")))
        .transpose()?
        .unwrap_or(false);
    let data_dir = entry
        .get("data_dir")
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| bad("`data_dir` is not a string"))
        })
        .transpose()?;
    let unreadable =
        || bad("`data_files` is neither a path, a list of paths nor a list of {split, path}");
    let data_files = match entry.get("data_files") {
        None => Vec::new(),
        Some(v @ Yaml::String(_)) => vec![("train".to_owned(), strings(v).expect("a string"))],
        Some(Yaml::Sequence(items)) if items.iter().all(Yaml::is_string) => {
            vec![(
                "train".to_owned(),
                strings(&Yaml::Sequence(items.clone())).expect("strings"),
            )]
        }
        Some(Yaml::Sequence(items)) => items
            .iter()
            .map(|item| {
                let split = item.get("split").and_then(Yaml::as_str).unwrap_or("train");
                let paths = item.get("path").and_then(strings).ok_or_else(unreadable)?;
                Ok((split.to_owned(), paths))
            })
            .collect::<Result<_, String>>()?,
        Some(Yaml::Mapping(map)) => map
            .iter()
            .map(|(split, paths)| {
                let split = split.as_str().ok_or_else(unreadable)?;
                Ok((split.to_owned(), strings(paths).ok_or_else(unreadable)?))
            })
            .collect::<Result<_, String>>()?,
        Some(_) => return Err(unreadable()),
    };
    Ok(CardConfig {
        name,
        default,
        data_files,
        data_dir,
    })
}

/// The config names of the auto-converted parquet layout `CONFIG/SPLIT/NNNN.parquet`.
pub fn converted_configs(files: &[String]) -> Vec<String> {
    let mut names: Vec<String> = files
        .iter()
        .filter(|f| Format::of(f) == Some(Format::Parquet))
        .filter_map(|f| {
            let parts: Vec<&str> = f.split('/').collect();
            (parts.len() == 3).then(|| parts[0].to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The files of `split` of `config` in the auto-converted layout.
pub fn converted_files(files: &[String], config: &str, split: &str) -> Vec<String> {
    let prefix = format!("{config}/");
    let inside: Vec<String> = files
        .iter()
        .filter(|f| f.starts_with(&prefix))
        .cloned()
        .collect();
    select(&inside, split)
}

/// How a config was chosen among several, or why none could be.
#[derive(Debug, PartialEq)]
pub enum Choice {
    /// This config.
    Chosen(String),
    /// The asked-for config is not among `available`.
    Unknown,
    /// Several configs and none asked for or marked default.
    Ambiguous,
}

/// Picks a config as `datasets` does: the one asked for; else the one marked default (or named
/// `default`); else the only one.
pub fn choose(asked: Option<&str>, names: &[String], marked_default: Option<&str>) -> Choice {
    if let Some(asked) = asked {
        return if names.iter().any(|n| n == asked) {
            Choice::Chosen(asked.to_owned())
        } else {
            Choice::Unknown
        };
    }
    if let Some(marked) = marked_default {
        return Choice::Chosen(marked.to_owned());
    }
    if let Some(d) = names.iter().find(|n| *n == DEFAULT_CONFIG) {
        return Choice::Chosen(d.clone());
    }
    match names {
        [only] => Choice::Chosen(only.clone()),
        _ => Choice::Ambiguous,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GSM8K_CARD: &str = "---\nannotations_creators:\n- crowdsourced\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n- config_name: socratic\n  data_files:\n  - split: train\n    path: socratic/train-*\n  - split: test\n    path: socratic/test-*\n---\n\n# Dataset Card for GSM8K\n";

    fn files(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_card_lists_its_configs_and_their_split_patterns() {
        let configs = card_configs(GSM8K_CARD).unwrap();
        let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["main", "socratic"]);
        let repo = files(&[
            "README.md",
            "main/train-00000-of-00001.parquet",
            "main/test-00000-of-00001.parquet",
            "socratic/train-00000-of-00001.parquet",
            "socratic/test-00000-of-00001.parquet",
        ]);
        assert_eq!(
            configs[1].files(&repo, "train"),
            ["socratic/train-00000-of-00001.parquet"]
        );
        assert!(configs[0].files(&repo, "validation").is_empty());
        assert_eq!(configs[0].splits(&repo), ["train", "test"]);
        assert_eq!(
            choose(None, &["main".into(), "socratic".into()], None),
            Choice::Ambiguous
        );
    }

    #[test]
    fn data_files_take_every_shape_datasets_accepts() {
        let card = "---\nconfigs:\n- config_name: a\n  data_files: a.csv\n  default: true\n- config_name: b\n  data_files: [b1.csv, b2.csv]\n- config_name: c\n  data_files:\n    train: c/*.jsonl\n    test: [c/t.jsonl]\n- config_name: d\n  data_dir: d\n---\n";
        let configs = card_configs(card).unwrap();
        let repo = files(&[
            "a.csv",
            "b1.csv",
            "b2.csv",
            "c/x.jsonl",
            "c/t.jsonl",
            "c/deep/y.jsonl",
            "d/train.jsonl",
            "d/test.jsonl",
        ]);
        assert!(configs[0].default);
        assert_eq!(configs[0].files(&repo, "train"), ["a.csv"]);
        assert_eq!(configs[1].files(&repo, "train"), ["b1.csv", "b2.csv"]);
        assert_eq!(configs[2].files(&repo, "train"), ["c/t.jsonl", "c/x.jsonl"]);
        assert_eq!(configs[2].files(&repo, "test"), ["c/t.jsonl"]);
        assert_eq!(configs[3].files(&repo, "test"), ["d/test.jsonl"]);
        assert!(card_configs("# no front matter\n").unwrap().is_empty());
        assert!(card_configs("---\nconfigs: 3\n---\n").is_err());
    }

    #[test]
    fn choice_follows_datasets() {
        let names = files(&["main", "socratic"]);
        assert_eq!(
            choose(Some("main"), &names, None),
            Choice::Chosen("main".into())
        );
        assert_eq!(choose(Some("x"), &names, None), Choice::Unknown);
        assert_eq!(
            choose(None, &names, Some("socratic")),
            Choice::Chosen("socratic".into())
        );
        assert_eq!(
            choose(None, &files(&["default", "x"]), None),
            Choice::Chosen("default".into())
        );
        assert_eq!(
            choose(None, &files(&["x"]), None),
            Choice::Chosen("x".into())
        );
        let converted = files(&["main/train/0000.parquet", "socratic/train/0000.parquet"]);
        assert_eq!(converted_configs(&converted), ["main", "socratic"]);
        assert_eq!(
            converted_files(&converted, "socratic", "train"),
            ["socratic/train/0000.parquet"]
        );
    }
}
