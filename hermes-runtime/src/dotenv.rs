//! `.env` in the working directory, loaded at start-up as upstream Hermes environments load
//! theirs with python-dotenv (`load_dotenv()` without `override`): a variable already set in the
//! real environment always wins, so a `.env` never changes what the shell exported.

use std::path::{Path, PathBuf};

/// What loading a `.env` file did, for the one start-up log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvReport {
    /// The file read.
    pub path: PathBuf,
    /// Names set from the file (values are never reported).
    pub loaded: Vec<String>,
    /// Names the file defines that were already set, so kept as they were.
    pub kept: Vec<String>,
}

impl DotenvReport {
    /// One line for the log: the file, what it set and what it left alone (names only).
    pub fn describe(&self) -> String {
        let mut line = format!(
            "loaded {} variable(s) from {}",
            self.loaded.len(),
            self.path.display()
        );
        if !self.loaded.is_empty() {
            line.push_str(&format!(" ({})", self.loaded.join(", ")));
        }
        if !self.kept.is_empty() {
            line.push_str(&format!(
                "; already set, kept from the environment: {}",
                self.kept.join(", ")
            ));
        }
        line
    }
}

/// A `.env` file that exists but cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message} (fix or remove the file; variables already exported are not affected)")]
pub struct DotenvError {
    path: String,
    message: String,
}

/// Loads `./.env` when it exists (nothing happens otherwise). Call before any thread starts:
/// it sets process environment variables.
pub fn load_from_cwd() -> Result<Option<DotenvReport>, DotenvError> {
    load(Path::new(".env"))
}

/// Loads `path` into the process environment without overriding variables already set.
pub fn load(path: &Path) -> Result<Option<DotenvReport>, DotenvError> {
    let pairs = match read(path) {
        Ok(Some(pairs)) => pairs,
        Ok(None) => return Ok(None),
        Err(message) => {
            return Err(DotenvError {
                path: path.display().to_string(),
                message,
            })
        }
    };
    let mut report = DotenvReport {
        path: path.to_owned(),
        loaded: Vec::new(),
        kept: Vec::new(),
    };
    for (name, value) in pairs {
        if std::env::var_os(&name).is_some() {
            report.kept.push(name);
        } else {
            std::env::set_var(&name, value);
            report.loaded.push(name);
        }
    }
    Ok(Some(report))
}

/// The file's assignments in order, `None` when there is no file.
fn read(path: &Path) -> Result<Option<Vec<(String, String)>>, String> {
    let iter = match dotenvy::from_path_iter(path) {
        Ok(iter) => iter,
        Err(dotenvy::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    iter.map(|item| item.map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_missing_variables_and_never_overrides_exported_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".env");
        std::fs::write(
            &path,
            "# keys\nHERMES_DOTENV_TEST_NEW=from-file\nexport HERMES_DOTENV_TEST_SET=\"from file\"\n",
        )
        .unwrap();
        std::env::set_var("HERMES_DOTENV_TEST_SET", "from-shell");
        let report = load(&path).unwrap().unwrap();
        assert_eq!(report.loaded, ["HERMES_DOTENV_TEST_NEW"]);
        assert_eq!(report.kept, ["HERMES_DOTENV_TEST_SET"]);
        assert_eq!(
            std::env::var("HERMES_DOTENV_TEST_NEW").unwrap(),
            "from-file"
        );
        assert_eq!(
            std::env::var("HERMES_DOTENV_TEST_SET").unwrap(),
            "from-shell"
        );
        let line = report.describe();
        assert!(
            line.contains("HERMES_DOTENV_TEST_NEW") && !line.contains("from-file"),
            "{line}"
        );
    }

    #[test]
    fn no_file_is_nothing_and_a_broken_file_is_one_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join(".env")).unwrap().is_none());
        let path = dir.path().join(".env");
        std::fs::write(&path, "GOOD=1\nthis is not an assignment\n").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains(".env") && err.contains("fix or remove"),
            "{err}"
        );
    }
}
