//! The failures file (`<name>.failures.jsonl` next to the groups JSONL): one line per item
//! that produced no training data because a rollout kept failing for a reason that is not
//! the model's (LLM, sandbox, verifier, trainer-token rendering), with the error chain — counted, never trained on.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::output::JsonlWriter;
use super::rollout::FailedItem;
use crate::env::{FailureCounts, FailureKind};

/// `dir/x.jsonl` → `dir/x.failures.jsonl`.
pub(crate) fn failures_path(jsonl: &Path) -> PathBuf {
    let stem = jsonl
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    jsonl.with_file_name(format!("{stem}.failures.jsonl"))
}

/// One line of the failures file.
#[derive(Serialize)]
struct FailureLine<'a, I: Serialize> {
    item: &'a I,
    outcome: &'a str,
    error: &'a str,
    attempts: usize,
}

/// Appends failed items to a failures file, created on the first one (a run without
/// failures leaves no file), and counts them per kind.
pub(crate) struct FailureLog {
    path: PathBuf,
    writer: Option<JsonlWriter>,
    items: FailureCounts,
}

impl FailureLog {
    /// A log that writes to `path` once there is something to write.
    pub fn new(path: PathBuf) -> Self {
        FailureLog {
            path,
            writer: None,
            items: FailureCounts::default(),
        }
    }

    /// Records one failed item.
    pub fn record<I: Serialize>(&mut self, failed: &FailedItem<I>) -> std::io::Result<()> {
        let kind = failed.outcome.failure().unwrap_or(FailureKind::Verifier);
        self.items.add(kind);
        if self.writer.is_none() {
            self.writer = Some(JsonlWriter::create(&self.path)?);
        }
        let line = FailureLine {
            item: &*failed.item,
            outcome: kind.as_str(),
            error: failed.outcome.failure_message().unwrap_or_default(),
            attempts: failed.attempts,
        };
        self.writer.as_mut().expect("created above").write(&line)
    }

    /// Failed items per kind so far.
    pub fn items(&self) -> FailureCounts {
        self.items
    }

    /// The file, when at least one item was recorded.
    pub fn written(&self) -> Option<&Path> {
        self.writer.as_ref().map(|_| self.path.as_path())
    }
}

/// Failed items per kind in an existing failures file (for the viewer); `None` when there is
/// no such file.
pub(crate) fn count_failures(path: &Path) -> Option<FailureCounts> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut counts = FailureCounts::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let outcome = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v.get("outcome").and_then(Value::as_str).map(str::to_owned));
        let kind = outcome
            .as_deref()
            .and_then(FailureKind::named)
            .unwrap_or(FailureKind::Verifier);
        counts.add(kind);
    }
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::RewardOutcome;
    use std::sync::Arc;

    #[test]
    fn failed_items_are_written_next_to_the_jsonl_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("run.jsonl");
        let path = failures_path(&jsonl);
        assert_eq!(path, dir.path().join("run.failures.jsonl"));
        let mut log = FailureLog::new(path.clone());
        assert!(log.written().is_none());
        assert!(!path.exists(), "no file before the first failure");
        let failed = FailedItem {
            item: Arc::new(serde_json::json!({"q": "2+2"})),
            outcome: RewardOutcome::LlmFailure {
                message: "LLM server http://127.0.0.1:9/v1 unreachable".into(),
            },
            attempts: 3,
        };
        log.record(&failed).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["item"]["q"], "2+2");
        assert_eq!(line["outcome"], "llm");
        assert_eq!(line["attempts"], 3);
        assert!(line["error"].as_str().unwrap().contains("unreachable"));
        assert_eq!(count_failures(&path).unwrap().llm, 1);
        assert_eq!(log.items().total(), 1);
    }
}
