//! The self-contained HTML viewer written next to a groups JSONL file: one section per group,
//! each rollout's conversation (roles, tool calls, tool results) and its reward, with a
//! score filter. No network access needed to open it.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;background:#fafafa;color:#222}\
h1{font-size:1.3rem}.group{background:#fff;border:1px solid #ddd;border-radius:6px;margin:1rem 0;padding:.5rem 1rem}\
.rollout{border-top:1px solid #eee;padding:.5rem 0}.reward{font-weight:bold}\
.msg{margin:.3rem 0;padding:.3rem .6rem;border-radius:4px;white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.85rem}\
.system{background:#eef}.user{background:#efe}.assistant{background:#ffe}.tool{background:#f4f4f4}\
.role{font-weight:bold;font-family:system-ui,sans-serif}.call{color:#a40}.warn{color:#a00}";

const SCRIPT: &str = "function applyFilter(){var v=document.getElementById('minscore').value;\
var min=v===''?-Infinity:parseFloat(v);document.querySelectorAll('.rollout').forEach(function(r){\
r.style.display=parseFloat(r.dataset.score)>=min?'':'none';});}";

/// Renders the viewer for the JSONL text (one group per line). Lines without `messages` and
/// `scores` are skipped, as upstream does.
pub fn render(title: &str, jsonl: &str) -> String {
    let mut body = String::new();
    let mut shown = 0;
    for (i, line) in jsonl.lines().enumerate() {
        let Ok(group) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(messages), Some(scores)) = (
            group.get("messages").and_then(Value::as_array),
            group.get("scores").and_then(Value::as_array),
        ) else {
            continue;
        };
        shown += 1;
        let _ = write!(body, "<section class=\"group\"><h2>Group {}</h2>", i + 1);
        if group.pointer("/group_overrides/placeholder_tokens") == Some(&Value::Bool(true)) {
            body.push_str(
                "<p class=\"warn\">Phase 1 group: tokens are placeholders, not trainable.</p>",
            );
        }
        for (j, (conversation, score)) in messages.iter().zip(scores).enumerate() {
            let score = score.as_f64().unwrap_or(f64::NAN);
            let _ = write!(
                body,
                "<div class=\"rollout\" data-score=\"{score}\"><div class=\"reward\">Rollout {} — Reward: {score}</div>",
                j + 1
            );
            for m in conversation.as_array().into_iter().flatten() {
                render_message(&mut body, m);
            }
            body.push_str("</div>");
        }
        body.push_str("</section>");
    }
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style>\
         <script>{SCRIPT}</script></head><body><h1>{t}</h1><p>{shown} groups. Minimum reward: \
         <input id=\"minscore\" type=\"number\" step=\"any\" oninput=\"applyFilter()\"></p>{body}</body></html>\n",
        t = escape(title)
    )
}

fn render_message(out: &mut String, m: &Value) {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("?");
    let class = match role {
        "system" | "user" | "assistant" | "tool" => role,
        _ => "tool",
    };
    let content = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let _ = write!(
        out,
        "<div class=\"msg {class}\"><span class=\"role\">{}</span>",
        escape(role)
    );
    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
        let _ = write!(out, "\n<i>thinking: {}</i>", escape(r));
    }
    if !content.is_empty() {
        let _ = write!(out, "\n{}", escape(&content));
    }
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let args = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        let _ = write!(
            out,
            "\n<span class=\"call\">→ {}({})</span>",
            escape(name),
            escape(args)
        );
    }
    out.push_str("</div>");
}

/// Writes `<jsonl stem>.html` next to `jsonl_path`; returns the HTML path.
pub fn write_viewer(jsonl_path: &Path) -> std::io::Result<std::path::PathBuf> {
    let text = std::fs::read_to_string(jsonl_path)?;
    let html_path = jsonl_path.with_extension("html");
    let title = jsonl_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::write(&html_path, render(&title, &text))?;
    Ok(html_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_roles_calls_rewards_and_escapes() {
        let line = r#"{"tokens": [[1]], "masks": [[1]], "scores": [0.5], "messages": [[{"role": "user", "content": "<b>hi</b>"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}}]}]]}"#;
        let html = render("t", &format!("{line}\n{{\"tokens\": []}}\n"));
        assert!(html.contains("1 groups"));
        assert!(html.contains("&lt;b&gt;hi&lt;/b&gt;"));
        assert!(html.contains("Reward: 0.5"));
        assert!(html.contains("→ terminal({&quot;command&quot;: &quot;ls&quot;})"));
    }
}
