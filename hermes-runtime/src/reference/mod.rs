//! The reference pages of `docs/reference/` (flags, hooks, tool-call parsers, subcommands),
//! rendered from the definitions the code runs on, so that they cannot drift from it: the
//! hermes-env package's `reference` test fails while a committed page differs from
//! [`pages`], and rewrites the pages when run with [`REGENERATE`].

mod cli;
mod flags;
mod hooks;
mod markdown;
mod parsers;

/// The command that rewrites the committed pages.
pub const REGENERATE: &str = "UPDATE_REFERENCE=1 cargo test --test reference";

/// Every page: its file name in `docs/reference/` and its Markdown.
pub fn pages() -> Vec<(&'static str, String)> {
    vec![
        ("flags.md", flags::page()),
        ("hooks.md", hooks::page()),
        ("parsers.md", parsers::page()),
        ("cli.md", cli::page()),
    ]
}
