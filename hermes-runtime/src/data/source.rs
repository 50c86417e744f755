//! Finding the files of one split of one config: a local file, a local directory, or a hub
//! dataset (its revision first, then the hub's auto-converted parquet revision
//! `refs/convert/parquet`). Configs come from the dataset card's `configs:` (see
//! [`super::configs`]) or the auto-converted `CONFIG/SPLIT/` directories.

use std::path::{Path, PathBuf};

use super::configs::{self, card_configs, choose, Choice, DEFAULT_CONFIG};
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
    /// The config the files belong to, when the dataset has named configs.
    pub config: Option<String>,
}

/// Splits `NAME:CONFIG` into the name and the config (`None` without a `:`); an explicit
/// `config` must agree with one in the name.
pub fn split_config<'a>(
    name: &'a str,
    config: Option<&'a str>,
) -> Result<(&'a str, Option<&'a str>), DataError> {
    let config = config.filter(|c| !c.is_empty());
    let Some((base, in_name)) = name
        .rsplit_once(':')
        .filter(|(b, c)| !b.is_empty() && !c.is_empty() && !c.contains('/'))
    else {
        return Ok((name, config));
    };
    match config {
        Some(c) if c != in_name => Err(DataError::ConfigConflict {
            dataset: base.to_owned(),
            in_name: in_name.to_owned(),
            config: c.to_owned(),
        }),
        _ => Ok((base, Some(in_name))),
    }
}

/// Finds `split` of `config` of `name`: an existing file (split ignored, a config ignored with
/// one WARN), an existing directory (its `README.md` card's configs, else split by file names),
/// else a hub dataset id (`NAME:CONFIG` names the config too).
pub async fn locate(
    name: &str,
    config: Option<&str>,
    split: &str,
    hub: &HubSettings,
) -> Result<Located, DataError> {
    let path = Path::new(name);
    if path.is_file() {
        let format = Format::of(name).ok_or_else(|| DataError::Format(path.to_owned()))?;
        if let Some(asked) = config.filter(|c| !c.is_empty()) {
            tracing::warn!(
                "dataset {name}: config '{asked}' ignored: a single file has no configs \
                 (--env.dataset_config names a config of a hub dataset or a card's directory)"
            );
        }
        return Ok(Located {
            files: vec![(path.to_owned(), format)],
            source: name.to_owned(),
            config: None,
        });
    }
    if path.is_dir() {
        return locate_in_dir(path, config.filter(|c| !c.is_empty()), split);
    }
    let (name, config) = split_config(name, config)?;
    let path = Path::new(name);
    if path.is_dir() {
        return locate_in_dir(path, config, split);
    }
    let id = HubId::parse(RepoKind::Dataset, name)
        .ok_or_else(|| DataError::NotFound(name.to_owned()))?;
    locate_on_hub(id, config, split, hub).await
}

/// The files of `split` among `files` for the config asked for (or chosen as `datasets`
/// chooses it) by the card's `configs:`; without configs in the card, the split's files by
/// name in the one config `default`.
/// The files chosen for a split, the config they belong to (when named) and the splits the
/// config has, for the error when there are no files.
struct Selection {
    files: Vec<String>,
    /// Whether the card's config names the split (so missing files are missing from the cache).
    declared: bool,
    config: Option<String>,
    available: Vec<String>,
}

fn choose_files(
    dataset: &str,
    files: &[String],
    card: Option<&str>,
    config: Option<&str>,
    split: &str,
) -> Result<Selection, DataError> {
    let card_configs = match card {
        Some(text) => card_configs(text).map_err(|reason| DataError::Card {
            dataset: dataset.to_owned(),
            reason,
        })?,
        None => Vec::new(),
    };
    if card_configs.is_empty() {
        if let Some(asked) = config.filter(|c| *c != DEFAULT_CONFIG) {
            return Err(unknown_config(dataset, asked, &[DEFAULT_CONFIG.to_owned()]));
        }
        return Ok(Selection {
            declared: false,
            files: select(files, split),
            config: None,
            available: known_splits(files).iter().map(|s| s.to_string()).collect(),
        });
    }
    let names: Vec<String> = card_configs.iter().map(|c| c.name.clone()).collect();
    let marked = card_configs
        .iter()
        .find(|c| c.default)
        .map(|c| c.name.as_str());
    let chosen = match choose(config, &names, marked) {
        Choice::Chosen(name) => name,
        Choice::Unknown => return Err(unknown_config(dataset, config.unwrap_or(""), &names)),
        Choice::Ambiguous => return Err(ambiguous(dataset, split, &names)),
    };
    let card_config = card_configs
        .iter()
        .find(|c| c.name == chosen)
        .expect("the chosen config is the card's");
    Ok(Selection {
        declared: card_config.data_files.iter().any(|(s, _)| s == split),
        files: card_config.files(files, split),
        available: card_config.splits(files),
        config: (names.len() > 1 || config.is_some()).then_some(chosen),
    })
}

fn unknown_config(dataset: &str, asked: &str, names: &[String]) -> DataError {
    DataError::UnknownConfig {
        dataset: dataset.to_owned(),
        config: asked.to_owned(),
        configs: names.join(", "),
    }
}

fn ambiguous(dataset: &str, split: &str, names: &[String]) -> DataError {
    DataError::AmbiguousConfig {
        dataset: dataset.to_owned(),
        split: split.to_owned(),
        configs: names.join(", "),
    }
}

fn locate_in_dir(dir: &Path, config: Option<&str>, split: &str) -> Result<Located, DataError> {
    let mut files = Vec::new();
    list_dir(dir, dir, &mut files).map_err(|e| DataError::Read {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    let card = std::fs::read_to_string(dir.join("README.md")).ok();
    let label = dir.display().to_string();
    let chosen = choose_files(&label, &files, card.as_deref(), config, split)?;
    if chosen.files.is_empty() {
        return Err(no_split(label, split, &chosen.available));
    }
    Ok(Located {
        config: chosen.config,
        files: chosen
            .files
            .iter()
            .map(|f| {
                (
                    dir.join(f),
                    Format::of(f).expect("selected files have a format"),
                )
            })
            .collect(),
        source: label,
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

fn no_split(source: String, split: &str, available: &[String]) -> DataError {
    DataError::NoSplit {
        dataset: source,
        split: split.to_owned(),
        available: available.join(", "),
    }
}

/// The split's files of `id`'s revision; for `main` with no readable files for the split,
/// the auto-converted parquet revision. The first error is the one reported; a config that
/// cannot be chosen is reported at once.
async fn locate_on_hub(
    id: HubId,
    config: Option<&str>,
    split: &str,
    hub: &HubSettings,
) -> Result<Located, DataError> {
    let first = locate_at(HubRepo::new(id.clone(), hub.clone()), config, split).await;
    let decisive = matches!(
        first,
        Ok(_)
            | Err(DataError::AmbiguousConfig { .. }
                | DataError::UnknownConfig { .. }
                | DataError::Card { .. })
    );
    if id.revision != "main" || decisive {
        return first.map_err(|e| legacy_hint(&id, hub, e));
    }
    match locate_at(
        HubRepo::new(id.at(PARQUET_REVISION), hub.clone()),
        config,
        split,
    )
    .await
    {
        Ok(found) => Ok(found),
        Err(_) => first.map_err(|e| legacy_hint(&id, hub, e)),
    }
}

/// A legacy id (`gsm8k`, no organisation) is looked up in the cache as huggingface_hub looks
/// it up, under `datasets--gsm8k`; the hub now serves such datasets under an organisation
/// (`openai/gsm8k`), so when the legacy folder is missing but the cache holds `ORG/NAME`
/// folders of that name, the error names them.
fn legacy_hint(id: &HubId, hub: &HubSettings, error: DataError) -> DataError {
    let DataError::Hub(hub_error @ HubError::NotCached { .. }) = error else {
        return error;
    };
    if id.repo.contains('/') {
        return DataError::Hub(hub_error);
    }
    let suffix = format!("--{}", id.repo);
    let mut cached: Vec<String> = std::fs::read_dir(&hub.cache_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|f| {
            let rest = f.strip_prefix("datasets--")?;
            let (org, name) = rest.split_once("--")?;
            (format!("--{name}") == suffix).then(|| format!("{org}/{name}"))
        })
        .collect();
    cached.sort();
    if cached.is_empty() {
        return DataError::Hub(hub_error);
    }
    DataError::LegacyId {
        hub: Box::new(hub_error),
        cached: cached.join(", "),
    }
}

/// The dataset card of the revision, when it has one: the cached `README.md`, else (online)
/// downloaded; `None` when the repository has none or the cache lacks it offline.
async fn card(repo: &HubRepo, listing: &Listing) -> Result<Option<String>, DataError> {
    if !listing.files.iter().any(|f| f == "README.md") && (repo.offline() || !listing.from_cache) {
        return Ok(None);
    }
    match repo.file("README.md").await {
        Ok(path) => std::fs::read_to_string(&path)
            .map(Some)
            .map_err(|e| DataError::Read {
                path,
                reason: e.to_string(),
            }),
        Err(HubError::NotFound { .. } | HubError::NotCached { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The files of `split` (of `config`) in `listing`: in the auto-converted parquet revision by
/// its `CONFIG/SPLIT/` directories, elsewhere by the card's configs or the file names.
async fn choose_on_hub(
    repo: &HubRepo,
    listing: &Listing,
    config: Option<&str>,
    split: &str,
) -> Result<Selection, DataError> {
    let dataset = repo.id().repo.clone();
    if repo.id().revision == PARQUET_REVISION {
        let names = configs::converted_configs(&listing.files);
        if !names.is_empty() {
            let chosen = match choose(config, &names, None) {
                Choice::Chosen(name) => name,
                Choice::Unknown => {
                    return Err(unknown_config(&dataset, config.unwrap_or(""), &names))
                }
                Choice::Ambiguous => return Err(ambiguous(&dataset, split, &names)),
            };
            let prefix = format!("{chosen}/");
            let inside: Vec<String> = listing
                .files
                .iter()
                .filter(|f| f.starts_with(&prefix))
                .cloned()
                .collect();
            return Ok(Selection {
                declared: false,
                files: configs::converted_files(&listing.files, &chosen, split),
                available: known_splits(&inside)
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                config: (names.len() > 1 || config.is_some()).then_some(chosen),
            });
        }
    }
    let card = card(repo, listing).await?;
    choose_files(&dataset, &listing.files, card.as_deref(), config, split)
}

async fn locate_at(repo: HubRepo, config: Option<&str>, split: &str) -> Result<Located, DataError> {
    let mut listing = repo.list().await?;
    let mut chosen = choose_on_hub(&repo, &listing, config, split).await?;
    if chosen.files.is_empty() && listing.from_cache && !repo.offline() {
        // The cache may hold only part of the revision (e.g. the README).
        listing = repo.list_remote().await?;
        chosen = choose_on_hub(&repo, &listing, config, split).await?;
    }
    if chosen.files.is_empty() && chosen.declared && listing.from_cache {
        let config = chosen
            .config
            .as_deref()
            .map(|c| format!(" of config '{c}'"))
            .unwrap_or_default();
        return Err(HubError::NotCached {
            id: Box::new(repo.id().clone()),
            file: format!("split '{split}'{config}"),
            cache: repo.cache_dir().to_owned(),
            command: repo.id().download_command(&[]),
        }
        .into());
    }
    if chosen.files.is_empty() {
        return Err(no_split(repo.id().to_string(), split, &chosen.available));
    }
    let mut files = Vec::with_capacity(chosen.files.len());
    for file in &chosen.files {
        let path = repo.file(file).await.map_err(|e| match e {
            HubError::NotFound { .. } => no_split(repo.id().to_string(), split, &chosen.available),
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
        config: chosen.config,
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
