//! The book's Rust code blocks, compiled as doc tests (`cargo test --doc -p hermes-env`). Each
//! Markdown file with a plain `rust` block is included here as the documentation of one item;
//! `tests/book.rs` checks that no such file is left out.

#![cfg(doctest)]

/// `docs/guide/writing-an-environment.md`
#[doc = include_str!("../docs/guide/writing-an-environment.md")]
pub struct WritingAnEnvironment;

/// `docs/guide/tools-and-parsers.md`
#[doc = include_str!("../docs/guide/tools-and-parsers.md")]
pub struct ToolsAndParsers;
