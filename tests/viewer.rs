//! The HTML rollout viewer in headless Chromium (Debian's `chromium` package): `view` writes
//! it for a JSONL file; the rendered DOM shows roles, tool calls, tool results and rewards,
//! renders lazily (20 groups at first), filters by score from the URL, and opens a 100 MB file.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::process::Command;

/// The Chromium binary; fails the test with an install hint when there is none.
fn chromium() -> PathBuf {
    if let Ok(p) = std::env::var("HERMES_CHROMIUM") {
        return PathBuf::from(p);
    }
    common::ensure_debian_package("chromium", "chromium");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "the viewer test needs headless Chromium: install it with `apt-get install -y chromium` \
         (or set HERMES_CHROMIUM to a Chrome/Chromium binary)"
    );
}

/// The DOM of `url` after its scripts ran.
async fn dump_dom(url: &str, tmp: &Path) -> String {
    let profile = tempfile::tempdir_in(tmp).unwrap();
    let run = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("chromium finishes within 120 s")
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the DOM is UTF-8")
}

/// `view FILE.jsonl` through the example binary; returns the HTML path.
async fn view(jsonl: &Path) -> PathBuf {
    let out = Command::new(common::example_bin("terminal_test"))
        .arg("view")
        .arg(jsonl)
        .output()
        .await
        .expect("run view");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = jsonl.with_extension("html");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&html.display().to_string()));
    html
}

fn url(path: &Path, fragment: &str) -> String {
    format!("file://{}{fragment}", path.display())
}

/// A group line like `process` writes (Python-style separators).
fn group(scores: &[f64], conversation: &serde_json::Value) -> String {
    let messages: Vec<_> = scores.iter().map(|_| conversation.clone()).collect();
    let g = json!({"tokens": scores.iter().map(|_| [1, 2]).collect::<Vec<_>>(),
                   "masks": scores.iter().map(|_| [-100, 2]).collect::<Vec<_>>(),
                   "scores": scores, "messages": messages,
                   "group_overrides": {"placeholder_tokens": true}});
    hermes_runtime::atropos::json::to_python_string(&g)
}

fn conversation(answer: &str) -> serde_json::Value {
    json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "List the files </script><b>now</b>"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call ls.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "terminal", "arguments": "{\"command\": \"ls -la\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "total 0\nnotes.txt"},
        {"role": "assistant", "content": answer},
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn viewer_renders_conversations_lazily_and_filters_by_score() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("groups.jsonl");
    let mut text = String::new();
    writeln!(
        text,
        "{}",
        group(&[1.0, 0.0], &conversation("Found notes.txt"))
    )
    .unwrap();
    writeln!(text, "{{\"tokens\": [[1]], \"scores\": [1.0]}}").unwrap();
    for _ in 0..43 {
        writeln!(text, "{}", group(&[0.25, 0.25], &conversation("partial"))).unwrap();
    }
    std::fs::write(&jsonl, text).unwrap();
    let html = view(&jsonl).await;

    let dom = dump_dom(&url(&html, ""), tmp.path()).await;
    assert!(
        dom.contains("44 of 44 groups, 88 rollouts match"),
        "{}",
        &dom[..dom.len().min(3000)]
    );
    assert_eq!(
        dom.matches("<section class=\"group\"").count(),
        20,
        "the first page only"
    );
    assert!(
        dom.contains("id=\"group-1\""),
        "groups keep their JSONL line numbers"
    );
    assert!(dom.contains("Group 1 — 2 rollouts, mean reward 0.500"));
    assert!(dom.contains("Rollout 1 — Reward: <span class=\"score good\">1</span>"));
    assert!(dom.contains("Rollout 2 — Reward: <span class=\"score\">0</span>"));
    for role in ["system", "user", "assistant", "tool result · terminal"] {
        assert!(
            dom.contains(&format!("<div class=\"role\">{role}</div>")),
            "{role}"
        );
    }
    assert!(dom.contains("<span class=\"call-name\">→ terminal</span>"));
    assert!(
        dom.contains("\"command\": \"ls -la\""),
        "arguments are pretty-printed"
    );
    assert!(dom.contains("<summary>thinking</summary><pre>I should call ls.</pre>"));
    assert!(
        dom.contains("List the files &lt;/script&gt;&lt;b&gt;now&lt;/b&gt;"),
        "content is text, never markup"
    );
    assert!(!dom.contains("<b>now</b>"));
    assert!(dom.contains("Phase 1 group: tokens are placeholders"));

    // Filter: only rollouts scoring at least 1 (from the URL, as the inputs write it).
    let dom = dump_dom(&url(&html, "#min=1"), tmp.path()).await;
    assert!(dom.contains("1 of 44 groups, 1 rollouts match"), "{dom}");
    assert_eq!(dom.matches("<section class=\"group\"").count(), 1);
    assert_eq!(dom.matches("<div class=\"rollout\"").count(), 1);
    assert!(dom.contains("data-score=\"1\""));
    let dom = dump_dom(&url(&html, "#min=0.2&max=0.3"), tmp.path()).await;
    assert!(dom.contains("43 of 44 groups, 86 rollouts match"));
}

#[tokio::test(flavor = "multi_thread")]
async fn viewer_opens_a_100_mb_file() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("big.jsonl");
    let filler = "x".repeat(20_000);
    let line = group(&[0.5, 1.0], &conversation(&filler));
    let mut file = std::io::BufWriter::new(std::fs::File::create(&jsonl).unwrap());
    let mut size = 0;
    let mut lines = 0;
    while size < 100 << 20 {
        std::io::Write::write_all(&mut file, line.as_bytes()).unwrap();
        std::io::Write::write_all(&mut file, b"\n").unwrap();
        size += line.len() + 1;
        lines += 1;
    }
    drop(file);

    let started = Instant::now();
    let html = view(&jsonl).await;
    let write_time = started.elapsed();
    let started = Instant::now();
    let dom = dump_dom(&url(&html, ""), tmp.path()).await;
    let open_time = started.elapsed();
    eprintln!(
        "100 MB viewer: {lines} groups, written in {:.1}s (debug build), opened and rendered by Chromium in {:.1}s",
        write_time.as_secs_f64(),
        open_time.as_secs_f64()
    );
    assert!(dom.contains(&format!("{lines} of {lines} groups")));
    // Lazy rendering: 20 of the thousands of groups are in the page (how long it took is a
    // figure printed above, not a test; dump_dom bounds a hang at 120 s).
    assert_eq!(dom.matches("<section class=\"group\"").count(), 20);
}

/// Each assistant turn shows how its generation ended and its token counts; a turn cut at
/// `max_tokens` is flagged.
#[tokio::test(flavor = "multi_thread")]
async fn viewer_shows_each_turns_finish_reason_and_token_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("groups.jsonl");
    let mut conv = conversation("The answer is forty-tw");
    conv[2]["finish_reason"] = json!("tool_calls");
    conv[2]["usage"] = json!({"prompt_tokens": 120, "completion_tokens": 18});
    conv[4]["finish_reason"] = json!("length");
    conv[4]["usage"] = json!({"prompt_tokens": 160, "completion_tokens": 22});
    std::fs::write(&jsonl, format!("{}\n", group(&[0.0], &conv))).unwrap();
    let html = view(&jsonl).await;
    let dom = dump_dom(&url(&html, ""), tmp.path()).await;
    assert!(
        dom.contains(
            "<div class=\"gen\">finish_reason tool_calls · 120 prompt tokens · 18 completion tokens</div>"
        ),
        "the viewer must show each turn's finish_reason and token counts: {}",
        &dom[..dom.len().min(4000)]
    );
    assert!(
        dom.contains(
            "<div class=\"gen warn\">cut at max_tokens (finish_reason length) · 160 prompt tokens · 22 completion tokens</div>"
        ),
        "a cut turn is flagged"
    );
    assert_eq!(
        dom.matches("class=\"gen").count(),
        2,
        "only turns that say so"
    );
}
