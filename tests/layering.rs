//! The runtime is a stack: a module may use the modules below it, never one above; the sandbox
//! folder is a stack of its own. These tests read `hermes-runtime/src` and fail on any
//! `crate::<module>` path (outside comments and `#[cfg(test)]` modules) that runs back up,
//! naming the file and line.

use std::path::{Path, PathBuf};

/// The runtime's top-level modules, top of the stack first.
const STACK: &[&str] = &[
    "app",
    "reference",
    "commands",
    "testing",
    "modes",
    "wandb",
    "setup",
    "env",
    "harbor",
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
    "math",
    "config",
];

/// The sandbox's sub-folders, top of its stack first; the files directly in `sandbox/` (the
/// traits, errors and the task handle) are the bottom, used by all and using none.
const SANDBOX_STACK: &[&str] = &["backends", "integrity", "exec", "files"];

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

#[test]
fn no_sandbox_layer_uses_one_above_it() {
    let sandbox = runtime_src().join("sandbox");
    let mut files = Vec::new();
    rust_files(&sandbox, &mut files);
    files.sort();
    let rank = |folder: &str| SANDBOX_STACK.iter().position(|f| *f == folder);
    let mut upward = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&sandbox).expect("a file under sandbox/");
        if rel == Path::new("mod.rs") {
            continue; // the folder's root declares and re-exports every layer
        }
        let from = module_of(&sandbox, file);
        // A file directly in `sandbox/` is the bottom layer: it may use no sub-folder.
        let from_rank = rank(&from).unwrap_or(SANDBOX_STACK.len());
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (line, code) in code_lines(&text) {
            for (at, _) in code.match_indices("crate::sandbox::") {
                for target in first_segments(&code[at + "crate::sandbox::".len()..]) {
                    if rank(&target).is_some_and(|to| to < from_rank) {
                        upward.push(format!(
                            "sandbox/{}:{line}: `{from}` uses `{target}`, which is above it",
                            rel.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "sandbox imports running back up (backends → integrity → exec → files → shared types):\n{}",
        upward.join("\n")
    );
}
