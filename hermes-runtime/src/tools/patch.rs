//! The `patch` tool: targeted edits. `replace` mode swaps `old_string` for `new_string` (exact
//! match first, then whitespace- and indentation-tolerant matching; unique unless
//! `replace_all`); `patch` mode applies a V4A multi-file patch (`*** Begin Patch` …
//! `*** End Patch` with Update/Add/Delete File sections). Nothing is written unless every
//! change applies.

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;
use crate::sandbox::{ExecRequest, Sandbox, SandboxError};

/// Edits files by string replacement or V4A patches.
pub struct PatchTool;

/// Why an edit could not be applied (shown to the model).
#[derive(Debug, thiserror::Error)]
enum PatchError {
    #[error("File not found: {0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Splits text into lines keeping their terminators.
fn lines_with_ends(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// Byte ranges of the matches of `old` in `text`: exact, then line-window matches ignoring
/// trailing and then all surrounding whitespace, then whitespace-collapsed substrings.
fn find_matches(text: &str, old: &str) -> Vec<(usize, usize)> {
    let exact: Vec<(usize, usize)> = text
        .match_indices(old)
        .map(|(i, m)| (i, i + m.len()))
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    for normalize in [str::trim_end as fn(&str) -> &str, str::trim] {
        let found = line_window_matches(text, old, normalize);
        if !found.is_empty() {
            return found;
        }
    }
    collapsed_matches(text, old)
}

/// Windows of whole lines equal to `old`'s lines under `normalize`.
fn line_window_matches(text: &str, old: &str, normalize: fn(&str) -> &str) -> Vec<(usize, usize)> {
    let want: Vec<&str> = old.trim_matches('\n').lines().map(normalize).collect();
    if want.is_empty() || want.iter().all(|l| l.is_empty()) {
        return Vec::new();
    }
    let lines = lines_with_ends(text);
    let mut starts = Vec::with_capacity(lines.len() + 1);
    let mut pos = 0;
    for l in &lines {
        starts.push(pos);
        pos += l.len();
    }
    starts.push(pos);
    let mut found = Vec::new();
    let mut i = 0;
    while i + want.len() <= lines.len() {
        let window = &lines[i..i + want.len()];
        if window
            .iter()
            .zip(&want)
            .all(|(l, w)| normalize(l.trim_end_matches(['\n', '\r'])) == *w)
        {
            let end = starts[i + want.len()];
            // Keep the final line terminator out of the match when `old` has none.
            let end = if old.ends_with('\n') {
                end
            } else {
                end - window[want.len() - 1].len()
                    + window[want.len() - 1].trim_end_matches(['\n', '\r']).len()
            };
            found.push((starts[i], end));
            i += want.len();
        } else {
            i += 1;
        }
    }
    found
}

/// Matches with every whitespace run treated as one space.
fn collapsed_matches(text: &str, old: &str) -> Vec<(usize, usize)> {
    let needle: String = old.split_whitespace().collect::<Vec<_>>().join(" ");
    if needle.is_empty() {
        return Vec::new();
    }
    let mut collapsed = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len());
    let mut in_space = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if !in_space {
                collapsed.push(' ');
                origin.push((i, i + c.len_utf8()));
            } else if let Some(last) = origin.last_mut() {
                last.1 = i + c.len_utf8();
            }
            in_space = true;
        } else {
            for _ in 0..c.len_utf8() {
                origin.push((i, i + c.len_utf8()));
            }
            collapsed.push(c);
            in_space = false;
        }
    }
    // `origin` is indexed by byte of `collapsed`: spaces are one byte, other chars their width.
    collapsed
        .match_indices(&needle)
        .filter_map(|(i, m)| {
            let start = origin.get(i)?.0;
            let end = origin.get(i + m.len() - 1)?.1;
            Some((start, end))
        })
        .collect()
}

/// Applies a replace-mode edit to `text`.
fn replace_in(
    text: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    path: &str,
) -> Result<String, PatchError> {
    if old.is_empty() {
        return Err(PatchError::Invalid("old_string must not be empty".into()));
    }
    let matches = find_matches(text, old);
    match matches.len() {
        0 => Err(PatchError::Invalid(format!(
            "Could not find old_string in {path} (also tried whitespace-insensitive matching). \
             Read the file again and copy the exact text."
        ))),
        n if n > 1 && !replace_all => Err(PatchError::Invalid(format!(
            "old_string appears {n} times in {path}; include more surrounding context to make it \
             unique, or set replace_all=true"
        ))),
        _ => {
            let mut out = String::with_capacity(text.len() + new.len());
            let mut last = 0;
            for (start, end) in matches {
                out.push_str(&text[last..start]);
                out.push_str(new);
                last = end;
            }
            out.push_str(&text[last..]);
            Ok(out)
        }
    }
}

/// A unified diff with `a/` and `b/` headers.
fn unified_diff(path: &str, before: &str, after: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// One file section of a V4A patch.
#[derive(Debug, PartialEq)]
enum FileOp {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

/// One `@@` hunk: an optional anchor line and the old/new line sequences.
#[derive(Debug, Default, PartialEq)]
struct Hunk {
    anchor: Option<String>,
    old: Vec<String>,
    new: Vec<String>,
}

/// Parses V4A patch text.
fn parse_v4a(patch: &str) -> Result<Vec<FileOp>, PatchError> {
    let lines: Vec<&str> = patch.lines().map(|l| l.trim_end_matches('\r')).collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "*** Begin Patch")
        .map_or(0, |i| i + 1);
    let mut ops: Vec<FileOp> = Vec::new();
    let mut i = start;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim();
        if trimmed == "*** End Patch" {
            break;
        }
        if let Some(path) = trimmed.strip_prefix("*** Add File:") {
            let mut content = String::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("***") {
                let l = lines[i];
                content.push_str(l.strip_prefix('+').unwrap_or(l));
                content.push('\n');
                i += 1;
            }
            ops.push(FileOp::Add {
                path: path.trim().to_owned(),
                content,
            });
            continue;
        }
        if let Some(path) = trimmed.strip_prefix("*** Delete File:") {
            ops.push(FileOp::Delete {
                path: path.trim().to_owned(),
            });
            i += 1;
            continue;
        }
        if let Some(path) = trimmed.strip_prefix("*** Update File:") {
            i += 1;
            let mut move_to = None;
            if let Some(to) = lines
                .get(i)
                .and_then(|l| l.trim().strip_prefix("*** Move to:"))
            {
                move_to = Some(to.trim().to_owned());
                i += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            let mut current = Hunk::default();
            while i < lines.len() {
                let l = lines[i];
                if l.starts_with("*** ") && l.trim() != "*** End of File" {
                    break;
                }
                if l.trim() == "*** End of File" {
                    i += 1;
                    continue;
                }
                if l.starts_with("@@") {
                    if !current.old.is_empty() || !current.new.is_empty() {
                        hunks.push(std::mem::take(&mut current));
                    }
                    let anchor = l.trim_start_matches('@').trim_end_matches('@').trim();
                    current.anchor = (!anchor.is_empty()).then(|| anchor.to_owned());
                } else if let Some(rest) = l.strip_prefix('-') {
                    current.old.push(rest.to_owned());
                } else if let Some(rest) = l.strip_prefix('+') {
                    current.new.push(rest.to_owned());
                } else {
                    let rest = l.strip_prefix(' ').unwrap_or(l);
                    current.old.push(rest.to_owned());
                    current.new.push(rest.to_owned());
                }
                i += 1;
            }
            if !current.old.is_empty() || !current.new.is_empty() {
                hunks.push(current);
            }
            ops.push(FileOp::Update {
                path: path.trim().to_owned(),
                move_to,
                hunks,
            });
            continue;
        }
        if trimmed.is_empty() {
            i += 1;
            continue;
        }
        return Err(PatchError::Invalid(format!(
            "Invalid patch line {}: {line:?} (expected *** Add File:, *** Update File:, *** Delete File: or *** End Patch)",
            i + 1
        )));
    }
    if ops.is_empty() {
        return Err(PatchError::Invalid(
            "Patch contains no file operations (expected *** Begin Patch / *** Update File: …)"
                .into(),
        ));
    }
    Ok(ops)
}

/// Position of `want` in `lines` at or after `from`, comparing exactly, then without
/// trailing whitespace, then trimmed.
fn find_lines(lines: &[String], want: &[String], from: usize) -> Option<usize> {
    let last = lines.len().checked_sub(want.len())?;
    let comparisons: [fn(&str) -> &str; 3] = [|s| s, str::trim_end, str::trim];
    for cmp in comparisons {
        let hit = (from..=last).find(|&i| {
            lines[i..i + want.len()]
                .iter()
                .zip(want)
                .all(|(a, b)| cmp(a) == cmp(b))
        });
        if hit.is_some() {
            return hit;
        }
    }
    None
}

/// Applies update hunks to a file's text.
fn apply_hunks(text: &str, hunks: &[Hunk], path: &str) -> Result<String, PatchError> {
    let trailing_newline = text.ends_with('\n') || text.is_empty();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cursor = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        if let Some(anchor) = &hunk.anchor {
            if let Some(at) = lines[cursor.min(lines.len())..]
                .iter()
                .position(|l| l.contains(anchor.as_str()))
            {
                cursor += at;
            }
        }
        if hunk.old.is_empty() {
            let at = if hunk.anchor.is_some() {
                (cursor + 1).min(lines.len())
            } else {
                lines.len()
            };
            lines.splice(at..at, hunk.new.iter().cloned());
            cursor = at + hunk.new.len();
            continue;
        }
        let at = find_lines(&lines, &hunk.old, cursor)
            .or_else(|| find_lines(&lines, &hunk.old, 0))
            .ok_or_else(|| {
                PatchError::Invalid(format!(
                    "Hunk {} does not apply to {path}: could not find these lines:\n{}",
                    n + 1,
                    hunk.old.join("\n")
                ))
            })?;
        lines.splice(at..at + hunk.old.len(), hunk.new.iter().cloned());
        cursor = at + hunk.new.len();
    }
    let mut out = lines.join("\n");
    if trailing_newline && !out.is_empty() {
        out.push('\n');
    }
    Ok(out)
}

/// Reads a text file from the sandbox.
async fn read_text(sandbox: &dyn Sandbox, path: &str) -> Result<String, PatchError> {
    match sandbox.read_file(path).await {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| PatchError::Invalid(format!("{path} is not a UTF-8 text file"))),
        Err(SandboxError::NotFound(_)) => Err(PatchError::NotFound(path.to_owned())),
        Err(e) => Err(e.into()),
    }
}

async fn delete(sandbox: &dyn Sandbox, path: &str) -> Result<(), PatchError> {
    let quoted = format!("'{}'", path.replace('\'', r"'\''"));
    let command = if let Some(rest) = path.strip_prefix("~/") {
        format!("rm -f -- ~/'{}'", rest.replace('\'', r"'\''"))
    } else {
        format!("rm -f -- {quoted}")
    };
    let out = sandbox
        .exec(ExecRequest::new(
            command,
            std::time::Duration::from_secs(30),
        ))
        .await?;
    if out.exit_code == 0 {
        Ok(())
    } else {
        Err(PatchError::Invalid(format!(
            "Could not delete {path}: {}",
            out.output.trim()
        )))
    }
}

/// Applies a V4A patch; all files are checked before any is written.
async fn apply_v4a(sandbox: &dyn Sandbox, patch: &str) -> Result<Value, PatchError> {
    let ops = parse_v4a(patch)?;
    let mut writes: Vec<(String, String)> = Vec::new();
    let mut deletes: Vec<String> = Vec::new();
    let (mut modified, mut created, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
    let mut diff = String::new();
    for op in &ops {
        match op {
            FileOp::Add { path, content } => {
                diff.push_str(&unified_diff(path, "", content));
                writes.push((path.clone(), content.clone()));
                created.push(path.clone());
            }
            FileOp::Delete { path } => {
                let before = read_text(sandbox, path).await?;
                diff.push_str(&unified_diff(path, &before, ""));
                deletes.push(path.clone());
                deleted.push(path.clone());
            }
            FileOp::Update {
                path,
                move_to,
                hunks,
            } => {
                let before = read_text(sandbox, path).await?;
                let after = apply_hunks(&before, hunks, path)?;
                let target = move_to.clone().unwrap_or_else(|| path.clone());
                diff.push_str(&unified_diff(&target, &before, &after));
                writes.push((target.clone(), after));
                if move_to.is_some() {
                    deletes.push(path.clone());
                    deleted.push(path.clone());
                    created.push(target);
                } else {
                    modified.push(path.clone());
                }
            }
        }
    }
    for (path, content) in &writes {
        sandbox.write_file(path, content.as_bytes()).await?;
    }
    for path in &deletes {
        delete(sandbox, path).await?;
    }
    let mut m = Map::new();
    m.insert("success".into(), true.into());
    m.insert("diff".into(), diff.into());
    for (key, list) in [
        ("files_modified", modified),
        ("files_created", created),
        ("files_deleted", deleted),
    ] {
        if !list.is_empty() {
            m.insert(key.into(), list.into());
        }
    }
    Ok(Value::Object(m))
}

async fn apply_replace(
    sandbox: &dyn Sandbox,
    path: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Value, PatchError> {
    let before = read_text(sandbox, path).await?;
    let after = replace_in(&before, old, new, replace_all, path)?;
    sandbox.write_file(path, after.as_bytes()).await?;
    Ok(
        json!({"success": true, "diff": unified_diff(path, &before, &after), "files_modified": [path]}),
    )
}

#[async_trait]
impl Tool for PatchTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "patch",
            "Edit files. mode=replace: replace old_string with new_string in path (must be unique \
             unless replace_all; whitespace/indentation differences are tolerated). mode=patch: apply \
             a V4A patch (*** Begin Patch / *** Update File: path / @@ context @@ / -old / +new / \
             *** Add File: / *** Delete File: / *** End Patch) touching one or more files.",
            json!({
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "enum": ["replace", "patch"], "default": "replace", "description": "replace (string replacement) or patch (V4A format)."},
                    "path": {"type": "string", "description": "replace: the file to edit."},
                    "old_string": {"type": "string", "description": "replace: the text to find (include context to make it unique)."},
                    "new_string": {"type": "string", "description": "replace: the replacement (empty deletes)."},
                    "replace_all": {"type": "boolean", "default": false, "description": "replace: replace every occurrence."},
                    "patch": {"type": "string", "description": "patch: the V4A patch text."}
                },
                "required": ["mode"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "file"
    }

    fn uses_sandbox(&self) -> bool {
        true
    }

    fn max_result_chars(&self) -> Option<usize> {
        Some(100_000)
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let mode = args
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("replace");
        let text = |k: &str| args.get(k).and_then(Value::as_str);
        let outcome = match mode {
            "replace" => {
                let Some(path) = text("path").filter(|p| !p.is_empty()) else {
                    return json!({"error": "path required"});
                };
                let (Some(old), Some(new)) = (text("old_string"), text("new_string")) else {
                    return json!({"error": "old_string and new_string required"});
                };
                let replace_all = args
                    .get("replace_all")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                match cx.sandbox.get().await {
                    Ok(s) => apply_replace(s.as_ref(), path, old, new, replace_all).await,
                    Err(e) => Err(e.into()),
                }
            }
            "patch" => {
                let Some(patch) = text("patch").filter(|p| !p.trim().is_empty()) else {
                    return json!({"error": "patch content required"});
                };
                match cx.sandbox.get().await {
                    Ok(s) => apply_v4a(s.as_ref(), patch).await,
                    Err(e) => Err(e.into()),
                }
            }
            other => return json!({"error": format!("Unknown mode: {other}")}),
        };
        outcome.unwrap_or_else(|e| json!({"success": false, "error": e.to_string()}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_tolerant_matching() {
        let text = "def f():\n    return 1\n\ndef g():\n    return 1\n";
        assert!(replace_in(text, "return 1", "return 2", false, "a.py").is_err());
        assert_eq!(
            replace_in(text, "return 1", "return 2", true, "a.py").unwrap(),
            "def f():\n    return 2\n\ndef g():\n    return 2\n"
        );
        // Indentation differs: the whole-line window still matches.
        assert_eq!(
            replace_in(
                text,
                "def g():\n  return 1",
                "def g():\n    return 3",
                false,
                "a.py"
            )
            .unwrap(),
            "def f():\n    return 1\n\ndef g():\n    return 3\n"
        );
        // Whitespace runs differ inside a line.
        assert_eq!(
            replace_in("a  =   1\n", "a = 1", "a = 2", false, "x").unwrap(),
            "a = 2\n"
        );
        assert!(replace_in("abc", "zzz", "y", false, "x")
            .unwrap_err()
            .to_string()
            .contains("Could not find"));
    }

    #[test]
    fn v4a_parses_all_sections() {
        let ops = parse_v4a(
            "*** Begin Patch\n*** Update File: src/app.py\n@@ def main @@\n context line\n-old line\n+new line\n*** Add File: n.txt\n+hello\n*** Delete File: gone.txt\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0],
            FileOp::Update {
                path: "src/app.py".into(),
                move_to: None,
                hunks: vec![Hunk {
                    anchor: Some("def main".into()),
                    old: vec!["context line".into(), "old line".into()],
                    new: vec!["context line".into(), "new line".into()],
                }],
            }
        );
        assert_eq!(
            ops[1],
            FileOp::Add {
                path: "n.txt".into(),
                content: "hello\n".into()
            }
        );
        assert!(parse_v4a("garbage").is_err());
    }

    #[test]
    fn hunks_apply_in_order_with_anchor_and_tolerance() {
        let text = "def a():\n    x = 1\n\ndef main():\n    x = 1\n    return x\n";
        let hunks = vec![Hunk {
            anchor: Some("def main".into()),
            old: vec!["    x = 1  ".into()],
            new: vec!["    x = 2".into()],
        }];
        assert_eq!(
            apply_hunks(text, &hunks, "p").unwrap(),
            "def a():\n    x = 1\n\ndef main():\n    x = 2\n    return x\n"
        );
        let bad = vec![Hunk {
            anchor: None,
            old: vec!["nope".into()],
            new: vec![],
        }];
        assert!(apply_hunks(text, &bad, "p").is_err());
    }
}
