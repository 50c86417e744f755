//! Tool-call parser throughput: every parser family over a 1 MB mixed corpus (prose, code, JSON
//! snippets, unicode, and that family's tool calls — single, multiple, truncated), reported
//! in MB/s of input; plus `auto` reading unmarked calls (fenced JSON, bare JSON,
//! `functions.NAME:`) with the tools offered.
//!
//! Run: `cargo bench --bench parsers` (add `-- --quick` for a short run).

use std::time::{Duration, Instant};

use hermes_runtime::llm::ToolCall;
use hermes_runtime::parsers::{families, get};

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

/// Local-server answers for `auto` with tools offered: prose and code around fenced JSON, bare
/// JSON and `functions.NAME:` calls, about 1 MB.
fn unmarked_corpus() -> Vec<String> {
    let shapes = [
        "I'll write it.\n```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"a.txt\", \"content\": \"hi\"}}\n```",
        "{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls -la\"}}",
        "functions.read_file:\n{\"path\": \"src/app.py\"}",
        "Here is an example config: {\"name\": \"demo\", \"version\": 2} and some code:\n```python\nprint({'a': 1})\n```",
    ];
    let prose = "Let me look at the files first. Ünïcode — 日本語 — and a list [1, 2, 3].\n";
    let mut docs = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < CORPUS_BYTES {
        let doc = format!("{}{}", prose.repeat(1 + i % 3), shapes[i % shapes.len()]);
        total += doc.len();
        docs.push(doc);
        i += 1;
    }
    docs
}

/// Parses `docs` repeatedly for `budget`; (calls found per pass, MB/s).
fn measure(docs: &[String], budget: Duration, parse: impl Fn(&str) -> usize) -> (usize, f64) {
    let bytes: usize = docs.iter().map(String::len).sum();
    let calls_per_pass: usize = docs.iter().map(|d| parse(d)).sum();
    let start = Instant::now();
    let mut passes = 0u32;
    while start.elapsed() < budget || passes == 0 {
        for d in docs {
            std::hint::black_box(parse(std::hint::black_box(d)));
        }
        passes += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    (
        calls_per_pass,
        (bytes as f64 * f64::from(passes)) / secs / 1e6,
    )
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
    for family in families() {
        let name = family.names[0];
        let docs = corpus(name);
        let kb = docs.iter().map(String::len).sum::<usize>() / 1024;
        let (calls, mb_s) = measure(&docs, budget, |d| family.parser.parse(d).calls.len());
        println!("{name:<16} {kb:>8} kB {calls:>12} {mb_s:>10.1}");
    }
    let auto = get("auto").expect("registered parser");
    let offered = ["terminal", "read_file", "write_file"];
    let docs = unmarked_corpus();
    let kb = docs.iter().map(String::len).sum::<usize>() / 1024;
    let (calls, mb_s) = measure(&docs, budget, |d| {
        auto.parse_offered(d, &offered).calls.len()
    });
    println!(
        "{:<16} {kb:>8} kB {calls:>12} {mb_s:>10.1}",
        "auto (unmarked)"
    );
}
