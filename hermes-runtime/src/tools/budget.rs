//! The tool-result budget: a result longer than its tool's threshold is saved in the sandbox
//! and replaced by a `<persisted-output>` preview telling the model how to read the rest; if
//! one turn's results together exceed the turn budget, the largest are saved too.

use std::collections::BTreeMap;

use crate::config::HermesEnvConfig;
use crate::sandbox::TaskSandbox;

use super::state_dir;

/// Tools whose results are never persisted (reading a saved result must not save it again).
const PINNED_UNLIMITED: &[&str] = &["read_file"];

/// Thresholds and sizes of the budget, in characters.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultBudget {
    /// Default per-result threshold (`default_result_size_chars`).
    pub default_chars: usize,
    /// Aggregate tool-result characters per assistant turn (`turn_budget_chars`).
    pub turn_chars: usize,
    /// Inline preview size (`preview_size_chars`).
    pub preview_chars: usize,
    /// Per-tool thresholds (`tool_result_overrides`).
    pub overrides: BTreeMap<String, usize>,
}

impl Default for ResultBudget {
    fn default() -> Self {
        ResultBudget {
            default_chars: 100_000,
            turn_chars: 200_000,
            preview_chars: 1500,
            overrides: BTreeMap::new(),
        }
    }
}

fn size(v: i64) -> usize {
    usize::try_from(v).unwrap_or(0)
}

impl ResultBudget {
    /// The budget configured by `default_result_size_chars`, `turn_budget_chars`,
    /// `preview_size_chars` and `tool_result_overrides`.
    pub fn from_config(c: &HermesEnvConfig) -> Self {
        ResultBudget {
            default_chars: size(c.default_result_size_chars),
            turn_chars: size(c.turn_budget_chars),
            preview_chars: size(c.preview_size_chars),
            overrides: c
                .tool_result_overrides
                .iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), size(v.as_i64()?))))
                .collect(),
        }
    }

    /// The threshold of `tool` (`None` = unlimited): pinned, then overrides, then the tool's
    /// registered size capped at the default, then the default.
    pub fn threshold(&self, tool: &str, registered: Option<usize>) -> Option<usize> {
        if PINNED_UNLIMITED.contains(&tool) {
            return None;
        }
        if let Some(n) = self.overrides.get(tool) {
            return Some(*n);
        }
        Some(registered.map_or(self.default_chars, |r| r.min(self.default_chars)))
    }

    /// Whether `tool`'s results may be persisted to meet the turn budget.
    pub fn persistable(tool: &str) -> bool {
        !PINNED_UNLIMITED.contains(&tool)
    }
}

/// The first `max` characters of `text`, cut at the last newline within them.
pub(crate) fn preview(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let end = text.char_indices().nth(max).map_or(text.len(), |(i, _)| i);
    let head = &text[..end];
    match head.rfind('\n') {
        Some(i) if i > 0 => head[..i].to_owned(),
        _ => head.to_owned(),
    }
}

/// Saves `content` as `results/<call_id>.txt` under the task's state directory and returns the
/// text the model sees instead.
pub async fn persist(
    sandbox: &TaskSandbox,
    call_id: &str,
    content: &str,
    budget: &ResultBudget,
) -> String {
    let total = content.chars().count();
    let shown = preview(content, budget.preview_chars);
    let safe: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    sandbox.mark_tool_state();
    let saved = match sandbox.get().await {
        Ok(s) => {
            let path = format!("{}/results/{safe}.txt", state_dir(s.as_ref()));
            s.write_file(&path, content.as_bytes()).await.map(|_| path)
        }
        Err(e) => Err(e),
    };
    match saved {
        Ok(path) => format!(
            "<persisted-output>\nThis tool result was too large ({total} characters) to show in full.\n\
             Full output saved to: {path}\n\
             Use the read_file tool with offset and limit to read it in parts.\n\
             Preview (first {} chars):\n{shown}\n...\n</persisted-output>",
            shown.chars().count()
        ),
        Err(_) => format!(
            "{shown}\n...\n[Truncated: tool response was {total} chars. Full output could not be saved to sandbox.]"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_follow_the_precedence() {
        let mut b = ResultBudget::default();
        b.overrides.insert("terminal".into(), 10);
        assert_eq!(b.threshold("read_file", Some(5)), None);
        assert_eq!(b.threshold("terminal", Some(5)), Some(10));
        assert_eq!(b.threshold("patch", Some(500_000)), Some(100_000));
        assert_eq!(b.threshold("patch", Some(50)), Some(50));
        assert_eq!(b.threshold("x", None), Some(100_000));
    }

    #[test]
    fn previews_cut_at_a_newline() {
        assert_eq!(preview("short", 10), "short");
        assert_eq!(
            preview("line one\nline two\nline three", 20),
            "line one\nline two"
        );
        assert_eq!(preview("ééééé", 3), "ééé");
    }
}
