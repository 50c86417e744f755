//! Tool-call parser throughput: every parser over a 1 MB mixed corpus (prose, code, JSON
//! snippets, unicode, and that family's tool calls — single, multiple, truncated), reported
//! in MB/s of input.
//!
//! Run: `cargo bench --bench parsers` (add `-- --quick` for a short run).

use std::time::{Duration, Instant};

use hermes_env::llm::ToolCall;
use hermes_env::parsers::{get, names};

const CORPUS_BYTES: usize = 1 << 20;

/// Assistant messages of one family, about 1 MB in total.
fn corpus(parser: &str) -> Vec<String> {
    let p = get(parser).expect("registered parser");
    let prose = "I'll look at the repository layout first, then run the tests. \
                 Ünïcode — 日本語 — emoji 🚀 and a JSON aside {\"note\": [1, 2, {\"k\": null}]}.\n";
    let code = "```python\ndef main():\n    return {'a': 1}\n```\n";
    let calls = [
        vec![ToolCall::new(
            "terminal",
            r#"{"command": "ls -la /workspace && cat README.md"}"#,
        )],
        vec![
            ToolCall::new(
                "read_file",
                r#"{"path": "src/app.py", "offset": 1, "limit": 200}"#,
            ),
            ToolCall::new(
                "write_file",
                r#"{"path": "notes/ü.md", "content": "line 1\nline 2\n", "meta": {"tags": ["a", "b"]}}"#,
            ),
        ],
        vec![],
    ];
    let mut docs = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < CORPUS_BYTES {
        let content = format!(
            "{}{}",
            prose.repeat(1 + i % 3),
            if i % 4 == 0 { code } else { "" }
        );
        let mut text = p.render(content.trim(), &calls[i % calls.len()]);
        if i % 10 == 9 {
            // A generation cut short.
            let cut = text
                .char_indices()
                .nth(text.chars().count() * 3 / 4)
                .map_or(0, |(b, _)| b);
            text.truncate(cut);
        }
        total += text.len();
        docs.push(text);
        i += 1;
    }
    docs
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let budget = if quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };
    println!("tool-call parser throughput on a ~1 MB mixed corpus per family");
    println!(
        "{:<16} {:>10} {:>12} {:>10}",
        "parser", "corpus", "calls/pass", "MB/s"
    );
    for name in names() {
        let docs = corpus(name);
        let bytes: usize = docs.iter().map(String::len).sum();
        let parser = get(name).expect("registered parser");
        let calls_per_pass: usize = docs.iter().map(|d| parser.parse(d).calls.len()).sum();
        let start = Instant::now();
        let mut passes = 0u32;
        while start.elapsed() < budget || passes == 0 {
            for d in &docs {
                std::hint::black_box(parser.parse(std::hint::black_box(d)));
            }
            passes += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let mb_s = (bytes as f64 * f64::from(passes)) / secs / 1e6;
        println!(
            "{name:<16} {:>8} kB {calls_per_pass:>12} {mb_s:>10.1}",
            bytes / 1024
        );
    }
}
