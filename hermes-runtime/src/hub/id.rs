//! Hub repository ids (`ORG/NAME[@revision]`) and the names huggingface_hub derives from them.

/// What kind of hub repository an id names; it picks the cache folder prefix and URL shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A model repository (tokenizers live here).
    Model,
    /// A dataset repository.
    Dataset,
}

/// A repository on the Hugging Face Hub at one revision, parsed from `ORG/NAME[@revision]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    /// Model or dataset.
    pub kind: RepoKind,
    /// `ORG/NAME` (or a bare `NAME` for the hub's legacy top-level repositories).
    pub repo: String,
    /// Branch, tag or commit hash; `main` unless the id says `@revision`.
    pub revision: String,
}

fn valid_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 96
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !part.contains("--")
        && !part.contains("..")
        && !part.starts_with(['-', '.'])
        && !part.ends_with(['-', '.'])
}

impl HubId {
    /// Parses `ORG/NAME[@revision]` with huggingface_hub's repo-id rules (letters, digits,
    /// `-_.`, no `--` or `..`); `None` when `text` is not shaped like a hub id.
    pub fn parse(kind: RepoKind, text: &str) -> Option<HubId> {
        let (repo, revision) = match text.split_once('@') {
            Some((repo, rev)) if !rev.is_empty() && !rev.contains(char::is_whitespace) => {
                (repo, rev)
            }
            Some(_) => return None,
            None => (text, "main"),
        };
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() > 2 || !parts.iter().all(|p| valid_part(p)) {
            return None;
        }
        Some(HubId {
            kind,
            repo: repo.to_owned(),
            revision: revision.to_owned(),
        })
    }

    /// The same repository at another revision.
    pub fn at(&self, revision: &str) -> HubId {
        HubId {
            revision: revision.to_owned(),
            ..self.clone()
        }
    }

    /// The repository's folder in the hub cache, e.g. `models--ORG--NAME`.
    pub fn cache_folder(&self) -> String {
        let prefix = match self.kind {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        };
        format!("{prefix}--{}", self.repo.replace('/', "--"))
    }

    /// Whether the revision is a full commit hash (then no `refs/` file names it).
    pub fn revision_is_commit(&self) -> bool {
        self.revision.len() == 40 && self.revision.chars().all(|c| c.is_ascii_hexdigit())
    }

    /// The `hf download` command (huggingface_hub's CLI) that puts `files` of this repository
    /// into the cache; with no files it fetches the whole revision.
    pub fn download_command(&self, files: &[&str]) -> String {
        let mut command = format!("hf download {}", self.repo);
        for file in files {
            command.push(' ');
            command.push_str(file);
        }
        if self.kind == RepoKind::Dataset {
            command.push_str(" --repo-type dataset");
        }
        if self.revision != "main" {
            command.push_str(&format!(" --revision {}", self.revision));
        }
        command
    }
}

impl std::fmt::Display for HubId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.revision == "main" {
            write!(f, "{}", self.repo)
        } else {
            write!(f, "{}@{}", self.repo, self.revision)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_like_huggingface_hub_validates_them() {
        let id = HubId::parse(
            RepoKind::Model,
            "NousResearch/DeepHermes-3-Llama-3-3B-Preview",
        )
        .unwrap();
        assert_eq!(id.revision, "main");
        assert_eq!(
            id.cache_folder(),
            "models--NousResearch--DeepHermes-3-Llama-3-3B-Preview"
        );
        let id = HubId::parse(
            RepoKind::Dataset,
            "google/frames-benchmark@refs/convert/parquet",
        )
        .unwrap();
        assert_eq!(id.revision, "refs/convert/parquet");
        assert_eq!(id.cache_folder(), "datasets--google--frames-benchmark");
        assert_eq!(
            id.download_command(&[]),
            "hf download google/frames-benchmark --repo-type dataset --revision refs/convert/parquet"
        );
        assert!(HubId::parse(RepoKind::Model, "gpt2").is_some());
        for bad in [
            "a/b/c",
            "./tok",
            "/abs/dir",
            "a--b/c",
            "a/b@",
            "",
            "a b/c",
            "org/na..me",
        ] {
            assert!(HubId::parse(RepoKind::Model, bad).is_none(), "{bad}");
        }
    }
}
