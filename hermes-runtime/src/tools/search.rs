//! The `search_files` tool: regex search in file contents (ripgrep when the sandbox has it,
//! else grep) or file-name search by glob (find), with globs, paging and output modes.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;
use crate::sandbox::ExecRequest;

/// Bytes of raw search output read back (more is reported as truncated).
const RAW_LIMIT: usize = 1_000_000;
/// Characters of a matching line shown.
const LINE_CHARS: usize = 500;
/// Deadline of one search.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Searches file contents or names in the task's sandbox.
pub struct SearchFilesTool;

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `~` and `~/x` as shell words that expand to the home directory.
fn shell_path(path: &str) -> String {
    if path == "~" {
        "~".to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("~/{}", quote(rest))
    } else {
        quote(path)
    }
}

fn clean_path(p: &str) -> String {
    p.strip_prefix("./").unwrap_or(p).to_owned()
}

/// What to search for and how to report it.
struct Query<'a> {
    pattern: &'a str,
    path: &'a str,
    glob: Option<&'a str>,
    mode: &'a str,
    context: u64,
}

/// The shell command for a content search.
fn content_command(q: &Query<'_>) -> String {
    let path = shell_path(q.path);
    let pattern = quote(q.pattern);
    let (rg_mode, grep_mode) = match q.mode {
        "files_only" => ("-l", "-l"),
        "count" => ("-c", "-c"),
        _ => ("-n", "-n"),
    };
    let context = if q.mode == "content" && q.context > 0 {
        format!(" -C {}", q.context)
    } else {
        String::new()
    };
    let rg_glob = q
        .glob
        .map(|g| format!(" --glob {}", quote(g)))
        .unwrap_or_default();
    let grep_glob = q
        .glob
        .map(|g| format!(" --include={}", quote(g)))
        .unwrap_or_default();
    format!(
        "[ -e {path} ] || {{ echo \"__HERMES_NO_PATH__\"; exit 3; }}\n\
         if command -v rg >/dev/null 2>&1; then\n\
           rg --no-heading --with-filename --null --color never --no-messages {rg_mode}{context}{rg_glob} -e {pattern} -- {path}\n\
         else\n\
           grep -r -I -H -Z -E --exclude-dir=.git --exclude-dir=node_modules {grep_mode}{context}{grep_glob} -e {pattern} -- {path}\n\
         fi 2>&1 | head -c {RAW_LIMIT}"
    )
}

/// The shell command for a file-name search.
fn files_command(q: &Query<'_>) -> String {
    let glob = if q.pattern.contains(['*', '?', '[']) {
        q.pattern.to_owned()
    } else {
        format!("*{}*", q.pattern)
    };
    let path = shell_path(q.path);
    format!(
        "[ -e {path} ] || {{ echo \"__HERMES_NO_PATH__\"; exit 3; }}\n\
         find {path} -type f -name {} -not -path '*/.git/*' -not -path '*/node_modules/*' 2>/dev/null | sort | head -c {RAW_LIMIT}",
        quote(&glob)
    )
}

/// `(path, line, is_match, text)` records of a content search.
fn parse_lines(raw: &str) -> Vec<(String, u64, bool, String)> {
    raw.lines()
        .filter_map(|l| {
            let (path, rest) = l.split_once('\0')?;
            let split = rest.find([':', '-'])?;
            let line: u64 = rest[..split].parse().ok()?;
            let text: String = rest[split + 1..].chars().take(LINE_CHARS).collect();
            Some((clean_path(path), line, rest.as_bytes()[split] == b':', text))
        })
        .collect()
}

/// Runs the query and shapes the result.
async fn search(
    cx: &ToolCallContext<'_>,
    q: Query<'_>,
    target: &str,
    offset: usize,
    limit: usize,
) -> Value {
    let sandbox = match cx.sandbox.get().await {
        Ok(s) => s,
        Err(e) => return json!({"error": format!("Search failed: {e}")}),
    };
    let command = if target == "files" {
        files_command(&q)
    } else {
        content_command(&q)
    };
    let out = match sandbox
        .exec(ExecRequest {
            command,
            timeout: SEARCH_TIMEOUT,
            workdir: None,
            output_limit: RAW_LIMIT + 4096,
            preamble_len: 0,
            user: None,
        })
        .await
    {
        Ok(o) => o,
        Err(e) => return json!({"error": format!("Search failed: {e}")}),
    };
    if out.output.contains("__HERMES_NO_PATH__") {
        return json!({"error": format!("Path not found: {}", q.path)});
    }
    if out.timed_out {
        return json!({"error": format!("Search timed out after {}s; narrow the path or pattern", SEARCH_TIMEOUT.as_secs())});
    }
    let raw_truncated = out.output.len() >= RAW_LIMIT;
    let mut m = Map::new();
    let page = |n: usize| (offset.min(n), offset.saturating_add(limit).min(n));
    if target == "files" {
        let files: Vec<String> = out
            .output
            .lines()
            .filter(|l| !l.is_empty())
            .map(clean_path)
            .collect();
        let (a, b) = page(files.len());
        m.insert("total_count".into(), files.len().into());
        m.insert("files".into(), files[a..b].to_vec().into());
        if b < files.len() || raw_truncated {
            m.insert("truncated".into(), true.into());
        }
        return Value::Object(m);
    }
    let has_records = out.output.contains('\0');
    if !has_records && !out.output.trim().is_empty() {
        return json!({"error": format!("Search failed: {}", out.output.trim())});
    }
    match q.mode {
        "files_only" => {
            let mut files: Vec<String> = out
                .output
                .split(['\0', '\n'])
                .filter(|p| !p.is_empty())
                .map(clean_path)
                .collect();
            files.sort();
            let (a, b) = page(files.len());
            m.insert("total_count".into(), files.len().into());
            m.insert("files".into(), files[a..b].to_vec().into());
            if b < files.len() || raw_truncated {
                m.insert("truncated".into(), true.into());
            }
        }
        "count" => {
            let mut counts: Vec<(String, u64)> = out
                .output
                .lines()
                .filter_map(|l| {
                    let (p, n) = l.split_once('\0')?;
                    Some((clean_path(p), n.trim().parse().ok()?))
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            counts.sort();
            let (a, b) = page(counts.len());
            m.insert(
                "total_count".into(),
                counts.iter().map(|(_, n)| n).sum::<u64>().into(),
            );
            let mut map = Map::new();
            for (p, n) in &counts[a..b] {
                map.insert(p.clone(), (*n).into());
            }
            m.insert("counts".into(), Value::Object(map));
            if b < counts.len() || raw_truncated {
                m.insert("truncated".into(), true.into());
            }
        }
        _ => {
            // Directory order differs between backends and tools: report by path, then line.
            let mut records = parse_lines(&out.output);
            records.sort_by(|x, y| (&x.0, x.1).cmp(&(&y.0, y.1)));
            let hits: Vec<&(String, u64, bool, String)> = records.iter().filter(|r| r.2).collect();
            let (a, b) = page(hits.len());
            let matches: Vec<Value> = if q.context == 0 {
                hits[a..b]
                    .iter()
                    .map(|(p, l, _, t)| json!({"path": p, "line": l, "content": t}))
                    .collect()
            } else {
                // With context: each page match plus the surrounding lines of its file.
                let ctx = q.context;
                hits[a..b]
                    .iter()
                    .map(|(p, l, _, t)| {
                        let around: Vec<String> = records
                            .iter()
                            .filter(|r| &r.0 == p && r.1 + ctx >= *l && r.1 <= l + ctx && r.1 != *l)
                            .map(|r| format!("{}: {}", r.1, r.3))
                            .collect();
                        json!({"path": p, "line": l, "content": t, "context": around})
                    })
                    .collect()
            };
            m.insert("total_count".into(), hits.len().into());
            m.insert("matches".into(), matches.into());
            if b < hits.len() || raw_truncated {
                m.insert("truncated".into(), true.into());
            }
        }
    }
    Value::Object(m)
}

#[async_trait]
impl Tool for SearchFilesTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "search_files",
            "Search file contents with a regular expression (target=content) or find files by name \
             glob (target=files). Results are paged with limit/offset; output_mode selects matching \
             lines, file names only, or per-file counts.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "content: a regular expression; files: a glob such as *.py."},
                    "target": {"type": "string", "enum": ["content", "files"], "default": "content", "description": "content (grep) or files (find by name)."},
                    "path": {"type": "string", "default": ".", "description": "Directory or file to search."},
                    "file_glob": {"type": "string", "description": "content: only search files matching this glob, e.g. *.py."},
                    "limit": {"type": "integer", "minimum": 1, "default": 50, "description": "Maximum results."},
                    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "Results to skip."},
                    "output_mode": {"type": "string", "enum": ["content", "files_only", "count"], "default": "content", "description": "content: matching lines; files_only: file paths; count: matches per file."},
                    "context": {"type": "integer", "minimum": 0, "default": 0, "description": "content: lines of context around each match."}
                },
                "required": ["pattern"]
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
        let text = |k: &str| args.get(k).and_then(Value::as_str);
        let Some(pattern) = text("pattern").filter(|p| !p.is_empty()) else {
            return json!({"error": "pattern required"});
        };
        let target = match text("target").unwrap_or("content") {
            "content" | "grep" => "content",
            "files" | "find" => "files",
            other => {
                return json!({"error": format!("Unknown target: {other}. Use: content, files")})
            }
        };
        let mode = text("output_mode").unwrap_or("content");
        if !matches!(mode, "content" | "files_only" | "count") {
            return json!({"error": format!("Unknown output_mode: {mode}. Use: content, files_only, count")});
        }
        let num = |k: &str, d: u64| args.get(k).and_then(Value::as_u64).unwrap_or(d);
        let query = Query {
            pattern,
            path: text("path").filter(|p| !p.is_empty()).unwrap_or("."),
            glob: text("file_glob").filter(|g| !g.is_empty()),
            mode,
            context: num("context", 0).min(20),
        };
        let limit = num("limit", 50).clamp(1, 10_000) as usize;
        let offset = num("offset", 0) as usize;
        search(cx, query, target, offset, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grep_and_rg_records_parse() {
        let raw = "./a.py\u{0}3:def f():\n./a.py\u{0}4-    pass\nb/c.txt\u{0}10:x:y\n--\n";
        let r = parse_lines(raw);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], ("a.py".into(), 3, true, "def f():".into()));
        assert_eq!(r[1], ("a.py".into(), 4, false, "    pass".into()));
        assert_eq!(r[2], ("b/c.txt".into(), 10, true, "x:y".into()));
    }
}
