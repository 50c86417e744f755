//! The runtime is a stack: a module may use the modules below it, never one above. This test
//! reads `hermes-runtime/src` and fails on any `crate::<module>` path (outside comments and
//! `#[cfg(test)]` modules) that runs back up the stack, naming the file and line.

use std::path::{Path, PathBuf};

/// The runtime's top-level modules, top of the stack first.
const STACK: &[&str] = &[
    "app",
    "commands",
    "testing",
    "modes",
    "wandb",
    "setup",
    "env",
    "context",
    "agent",
    "tools",
    "atropos",
    "llm",
    "parsers",
    "calls",
    "pyjson",
    "data",
    "hub",
    "sandbox",
    "progress",
    "own_secrets",
    "shutdown",
    "dotenv",
    "diagnostics",
    "tls",
    "config",
];

fn runtime_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hermes-runtime/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the runtime's source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file's lines that are code: comments dropped, and everything from a
/// `#[cfg(test)]` module on (test modules sit at the end of a file and may use anything).
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut previous_was_cfg_test = false;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if previous_was_cfg_test && trimmed.starts_with("mod ") {
            break;
        }
        previous_was_cfg_test = trimmed == "#[cfg(test)]";
        let code = match trimmed.find("//") {
            Some(at) => &trimmed[..at],
            None => trimmed,
        };
        if !code.trim().is_empty() {
            lines.push((n + 1, code));
        }
    }
    lines
}

/// The top-level module a file belongs to (`llm/client.rs` → `llm`, `env.rs` → `env`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("a file under src");
    let first = rel.components().next().expect("a path component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_owned()
}

/// The first path segment after `crate::`, or each one of a `crate::{a::x, b}` group.
fn first_segments(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    match rest.strip_prefix('{') {
        Some(group) => {
            let group = group.split('}').next().unwrap_or(group);
            let mut depth = 0;
            let mut segments = vec![ident(group)];
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => segments.push(ident(&group[i + 1..])),
                    _ => {}
                }
            }
            segments
        }
        None => vec![ident(rest)],
    }
}

fn level(module: &str) -> Option<usize> {
    STACK.iter().position(|m| *m == module)
}

#[test]
fn every_runtime_module_has_a_place_in_the_stack() {
    let src = runtime_src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut missing: Vec<String> = files
        .iter()
        .map(|f| module_of(&src, f))
        .filter(|m| m != "lib" && level(m).is_none())
        .collect();
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "modules missing from STACK in tests/layering.rs (add each where it belongs): {missing:?}"
    );
}

#[test]
fn no_module_uses_one_above_it() {
    let src = runtime_src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut upward = Vec::new();
    for file in &files {
        let from = module_of(&src, file);
        let Some(from_level) = level(&from) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (line, code) in code_lines(&text) {
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                for target in first_segments(rest) {
                    if level(&target).is_some_and(|to_level| to_level < from_level) {
                        upward.push(format!(
                            "{}:{line}: `{from}` uses `{target}`, which is above it",
                            file.strip_prefix(&src).unwrap_or(file).display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports running back up the stack (app → commands → … → sandbox → config):\n{}",
        upward.join("\n")
    );
}
