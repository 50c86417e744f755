//! The `file` toolset: `read_file` (line-numbered, paged) and `write_file` (atomic).

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;
use crate::sandbox::SandboxError;

const DEFAULT_LIMIT: usize = 500;
const MAX_LIMIT: usize = 2000;
const MAX_LINE_CHARS: usize = 2000;
const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "gif", "webp", "bmp", "ico", "tiff"];

/// Reads a text file as `{line_no:>6}|{text}` lines with offset/limit paging.
pub struct ReadFileTool;

/// Replaces a file's content atomically, creating parent directories.
pub struct WriteFileTool;

fn drop_empty(mut m: Map<String, Value>) -> Value {
    m.retain(|_, v| {
        !(v.is_null() || v.as_str() == Some("") || v.as_array().is_some_and(Vec::is_empty))
    });
    Value::Object(m)
}

fn file_error(path: &str, e: SandboxError) -> Value {
    match e {
        SandboxError::NotFound(_) => json!({"error": format!("File not found: {path}")}),
        SandboxError::IsDirectory(_) => {
            json!({"error": format!("Path is a directory, not a file: {path}")})
        }
        other => json!({"error": format!("Failed to read {path}: {other}")}),
    }
}

/// Formats the selected lines of `text` as the read_file result.
pub fn render_lines(text: &str, offset: usize, limit: usize, file_size: usize) -> Value {
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let start = offset.saturating_sub(1).min(total);
    let end = (start + limit).min(total);
    let mut content = String::new();
    for (i, line) in lines[start..end].iter().enumerate() {
        if !content.is_empty() {
            content.push('\n');
        }
        let shown: String = if line.chars().count() > MAX_LINE_CHARS {
            format!(
                "{}... [truncated]",
                line.chars().take(MAX_LINE_CHARS).collect::<String>()
            )
        } else {
            (*line).to_owned()
        };
        content.push_str(&format!("{:>6}|{}", start + i + 1, shown));
    }
    let truncated = end < total;
    let hint = truncated.then(|| {
        format!(
            "Use offset={} to continue reading (showing {}-{} of {} lines)",
            end + 1,
            start + 1,
            end,
            total
        )
    });
    let mut m = Map::new();
    m.insert("content".into(), content.into());
    m.insert("total_lines".into(), total.into());
    m.insert("file_size".into(), file_size.into());
    m.insert("truncated".into(), truncated.into());
    m.insert("hint".into(), hint.into());
    drop_empty(m)
}

#[async_trait]
impl Tool for ReadFileTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "read_file",
            "Read a text file with line numbers (format: `     1|text`). Use offset and limit to page \
             through large files.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path (absolute, ~/..., or relative to the task directory)."},
                    "offset": {"type": "integer", "minimum": 1, "default": 1, "description": "First line to read (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "Maximum number of lines to read."}
                },
                "required": ["path"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "file"
    }

    fn uses_sandbox(&self) -> bool {
        true
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let Some(path) = args.get("path").and_then(Value::as_str) else {
            return json!({"error": "path must be a string"});
        };
        let offset = args
            .get("offset")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_LIMIT, |l| (l as usize).clamp(1, MAX_LIMIT));
        let bytes = match cx.sandbox.get().await {
            Ok(sandbox) => match sandbox.read_file(path).await {
                Ok(b) => b,
                Err(e) => return file_error(path, e),
            },
            Err(e) => return json!({"error": format!("Failed to read {path}: {e}")}),
        };
        let ext = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
        if path.contains('.') && IMAGE_EXTENSIONS.contains(&ext.as_str()) {
            return json!({"file_size": bytes.len(), "is_binary": true, "is_image": true,
                "hint": "Image file - use a vision tool to view it."});
        }
        let probe = &bytes[..bytes.len().min(8192)];
        match std::str::from_utf8(&bytes) {
            Ok(text) if !probe.contains(&0) => render_lines(text, offset, limit, bytes.len()),
            _ => json!({"file_size": bytes.len(), "is_binary": true,
                "error": "Binary file - cannot display as text. Use the terminal (e.g. `xxd`, `file`) to inspect it."}),
        }
    }
}

#[async_trait]
impl Tool for WriteFileTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "write_file",
            "Write content to a file, replacing it entirely. Parent directories are created.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path (absolute, ~/..., or relative to the task directory)."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["path", "content"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "file"
    }

    fn uses_sandbox(&self) -> bool {
        true
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let (Some(path), Some(content)) = (
            args.get("path").and_then(Value::as_str),
            args.get("content").and_then(Value::as_str),
        ) else {
            return json!({"error": "path and content must be strings"});
        };
        let result = match cx.sandbox.get().await {
            Ok(sandbox) => sandbox.write_file(path, content.as_bytes()).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(dirs_created) => {
                json!({"bytes_written": content.len(), "dirs_created": dirs_created})
            }
            Err(e) => json!({"error": format!("Failed to write {path}: {e}")}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_paged() {
        let text: String = (1..=7).map(|i| format!("line {i}\n")).collect();
        let v = render_lines(&text, 3, 2, text.len());
        assert_eq!(v["content"], "     3|line 3\n     4|line 4");
        assert_eq!(v["total_lines"], 7);
        assert_eq!(v["truncated"], true);
        assert_eq!(
            v["hint"],
            "Use offset=5 to continue reading (showing 3-4 of 7 lines)"
        );
    }

    #[test]
    fn whole_file_has_no_hint() {
        let v = render_lines("a\nb", 1, 500, 3);
        assert_eq!(
            v,
            json!({"content": "     1|a\n     2|b", "total_lines": 2, "file_size": 3, "truncated": false})
        );
    }
}
