//! The book checks itself: over `README.md`, `CONTRIBUTING.md`, `benches/README.md` and every
//! `docs/**/*.md`, every relative link reaches an existing file (and an `#anchor` a heading of
//! it, by GitHub's slug rules), every fenced code block names its language, every plain `rust`
//! block is compiled as a doc test (its file is included in `src/book.rs`), the README stays
//! short and keeps the test command CI runs, and no commit id appears anywhere.

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The README's length limit: what it is, one example, two commands, links.
const README_MAX_LINES: usize = 250;

/// The attributes a `rust` block may carry; a plain `rust` block is compiled.
const RUST_ATTRIBUTES: &[&str] = &["ignore", "no_run", "compile_fail", "should_panic"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every checked Markdown file, as a path relative to the repository root.
fn book_files() -> Vec<PathBuf> {
    let mut files = vec![
        PathBuf::from("README.md"),
        PathBuf::from("CONTRIBUTING.md"),
        PathBuf::from("benches/README.md"),
    ];
    let mut docs = Vec::new();
    collect_markdown(&root(), Path::new("docs"), &mut docs);
    docs.sort();
    files.extend(docs);
    files
}

fn collect_markdown(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let rel = dir.join(entry.file_name());
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect_markdown(root, &rel, out);
        } else if rel.extension().is_some_and(|e| e == "md") {
            out.push(rel);
        }
    }
}

fn read(rel: &Path) -> String {
    fs::read_to_string(root().join(rel))
        .unwrap_or_else(|e| panic!("{}: cannot be read: {e}", rel.display()))
}

/// One line of a Markdown file, with whether it lies inside a fenced code block (fence lines
/// included).
struct Line<'a> {
    number: usize,
    text: &'a str,
    in_code: bool,
}

/// A fenced code block's opening: its line number and info string.
struct Fence {
    line: usize,
    info: String,
}

/// A line that opens or closes a fence: the fence character, its length and the info string.
fn fence_of(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_start();
    let c = trimmed.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let len = trimmed.chars().take_while(|&x| x == c).count();
    if len < 3 {
        return None;
    }
    let info = trimmed[len..].trim();
    // CommonMark: a backtick fence's info string cannot contain a backtick (that line is
    // inline code, e.g. "```` ```json ```` fence").
    if c == '`' && info.contains('`') {
        return None;
    }
    Some((c, len, info))
}

/// The file's lines marked as code or not, and its fenced blocks' openings.
fn scan(text: &str) -> (Vec<Line<'_>>, Vec<Fence>) {
    let mut lines = Vec::new();
    let mut fences = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for (i, text) in text.lines().enumerate() {
        let number = i + 1;
        match (open, fence_of(text)) {
            (None, Some((c, len, info))) => {
                open = Some((c, len));
                fences.push(Fence {
                    line: number,
                    info: info.to_owned(),
                });
                lines.push(Line {
                    number,
                    text,
                    in_code: true,
                });
            }
            (Some((c, len)), Some((c2, len2, info)))
                if c == c2 && len2 >= len && info.is_empty() =>
            {
                open = None;
                lines.push(Line {
                    number,
                    text,
                    in_code: true,
                });
            }
            (state, _) => lines.push(Line {
                number,
                text,
                in_code: state.is_some(),
            }),
        }
    }
    (lines, fences)
}

/// The line with its inline code spans removed.
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        // Find the closing run of exactly the same length.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = chars[j..].iter().take_while(|&&c| c == '`').count();
                if r == run {
                    close = Some(j + r);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => i = end,
            None => {
                out.extend(&chars[i..i + run]);
                i += run;
            }
        }
    }
    out
}

/// The link targets of a line outside code: inline links and images `[..](target)` and
/// reference definitions `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(pos) = trimmed.find("]:") {
            if let Some(target) = trimmed[pos + 2..].split_whitespace().next() {
                targets.push(target.trim_matches(['<', '>']).to_owned());
            }
        }
    }
    let mut rest = line.as_str();
    while let Some(pos) = rest.find("](") {
        let after = &rest[pos + 2..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = k;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inner = after[..end].trim();
        if let Some(target) = inner.split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_owned());
        }
        rest = &after[end.min(after.len())..];
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` removed,
/// spaces turned into `-`.
fn slug(heading: &str) -> String {
    let text = without_code_spans_keep_text(heading);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c == ' ' {
                Some('-')
            } else if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else {
                None
            }
        })
        .collect()
}

/// The heading's text as GitHub renders it: code spans keep their content, links their text.
fn without_code_spans_keep_text(heading: &str) -> String {
    let no_ticks: String = heading.chars().filter(|&c| c != '`').collect();
    // `[text](target)` renders as `text`.
    let mut out = String::new();
    let mut rest = no_ticks.as_str();
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Every anchor of a Markdown file's headings, with GitHub's `-1`, `-2` suffixes for repeats.
fn anchors(text: &str) -> Vec<String> {
    let (lines, _) = scan(text);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for line in lines.iter().filter(|l| !l.in_code) {
        let t = line.text.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !t[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(t[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `dir/../x` resolved lexically, relative to the repository root.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn relative_links_reach_files_and_headings() {
    let mut failures = Vec::new();
    for file in book_files() {
        let text = read(&file);
        let (lines, _) = scan(&text);
        let dir = file.parent().unwrap_or(Path::new(""));
        for line in lines.iter().filter(|l| !l.in_code) {
            for target in link_targets(line.text) {
                if target.is_empty()
                    || target.contains("://")
                    || target.starts_with("mailto:")
                    || target.starts_with("tel:")
                {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    normalize(&dir.join(path))
                };
                let full = root().join(&resolved);
                if !full.exists() {
                    failures.push(format!(
                        "{}:{}: link target `{target}` does not exist ({})",
                        file.display(),
                        line.number,
                        resolved.display()
                    ));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if full.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let target_text = fs::read_to_string(&full).unwrap_or_default();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    failures.push(format!(
                        "{}:{}: link `{target}`: no heading in {} has the anchor `#{anchor}`",
                        file.display(),
                        line.number,
                        resolved.display()
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "broken links:\n{}",
        failures.join("\n")
    );
}

#[test]
fn code_blocks_name_their_language_and_rust_blocks_compile() {
    let book_rs = fs::read_to_string(root().join("src/book.rs")).unwrap_or_default();
    let mut failures = Vec::new();
    for file in book_files() {
        let text = read(&file);
        let (_, fences) = scan(&text);
        let included = book_rs.contains(&format!("include_str!(\"../{}\")", file.display()));
        for fence in fences {
            let info = fence.info.as_str();
            if info.is_empty() {
                failures.push(format!(
                    "{}:{}: fenced code block without a language tag (use rust, sh, text, …)",
                    file.display(),
                    fence.line
                ));
                continue;
            }
            let tag = info.split_whitespace().next().unwrap_or("");
            let mut parts = tag.split(',');
            if parts.next() != Some("rust") {
                continue;
            }
            let attributes: Vec<&str> = parts.collect();
            if let Some(bad) = attributes.iter().find(|a| !RUST_ATTRIBUTES.contains(a)) {
                failures.push(format!(
                    "{}:{}: `{tag}`: unknown attribute `{bad}` (allowed: {})",
                    file.display(),
                    fence.line,
                    RUST_ATTRIBUTES.join(", ")
                ));
            }
            let compiled = !attributes.contains(&"ignore");
            if compiled && !included {
                failures.push(format!(
                    "{}:{}: a `{tag}` block is compiled only if src/book.rs includes the file \
                     (`#[doc = include_str!(\"../{}\")]`), or mark it `rust,ignore`",
                    file.display(),
                    fence.line,
                    file.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "code blocks:\n{}", failures.join("\n"));
}

#[test]
fn src_book_includes_only_book_files() {
    let book_rs = fs::read_to_string(root().join("src/book.rs")).unwrap_or_default();
    let files: Vec<String> = book_files()
        .iter()
        .map(|f| format!("../{}", f.display()))
        .collect();
    let mut failures = Vec::new();
    for (i, line) in book_rs.lines().enumerate() {
        let Some(start) = line.find("include_str!(\"") else {
            continue;
        };
        let rest = &line[start + "include_str!(\"".len()..];
        let path = rest.split('"').next().unwrap_or("");
        if !files.iter().any(|f| f == path) {
            failures.push(format!(
                "src/book.rs:{}: includes `{path}`, which is not one of the book's files",
                i + 1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn readme_is_short() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md:{lines}: the README has {lines} lines, more than {README_MAX_LINES}; \
         move the detail into docs/"
    );
}

#[test]
fn readme_keeps_the_test_command() {
    let text = read(Path::new("README.md"));
    assert!(
        text.lines().any(|l| l.trim() == "cargo test --workspace"),
        "README.md: no line `cargo test --workspace` (CI runs the README's test command)"
    );
}

/// A word that looks like a commit id: 7 to 40 lowercase hex digits with at least one digit
/// and one letter (a 64-digit sha256 digest is longer and so not one).
fn commit_ids(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            (7..=40).contains(&w.len())
                && w.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
                && w.chars().any(|c| c.is_ascii_digit())
                && w.chars().any(|c| c.is_ascii_lowercase())
        })
        .collect()
}

#[test]
fn no_commit_ids() {
    let mut failures = Vec::new();
    for file in book_files() {
        let text = read(&file);
        for (i, line) in text.lines().enumerate() {
            for id in commit_ids(line) {
                failures.push(format!(
                    "{}:{}: `{id}` looks like a commit id; docs say what holds now, history \
                     lives in git",
                    file.display(),
                    i + 1
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_checker_reads_markdown_as_github_does() {
    assert_eq!(
        slug("Red-teaming verifiers: `hack` and the tripwires"),
        "red-teaming-verifiers-hack-and-the-tripwires"
    );
    assert_eq!(
        slug("Phase 2: exact tokens and logprobs (`--openai.server_type vllm|sglang`)"),
        "phase-2-exact-tokens-and-logprobs---openaiserver_type-vllmsglang"
    );
    assert_eq!(
        anchors("# A\n## A\n```text\n# not a heading\n```\n"),
        ["a", "a-1"]
    );
    assert_eq!(
        link_targets("see [x](a.md#b) and `[y](nope.md)` ![i](img.png \"t\")"),
        ["a.md#b", "img.png"]
    );
    assert!(fence_of("```` ```json ```` fenced").is_none());
    assert_eq!(
        commit_ids("at e436bc3, id_ed25519, 2026-12-05, deadbeef"),
        ["e436bc3"]
    );
    assert!(commit_ids(&"ab12".repeat(16)).is_empty());
}
