//! `view FILE.jsonl`: writes the self-contained HTML rollout viewer for any Atropos groups
//! JSONL (next to it, or to `--output`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Arg, ArgMatches, Command};

use crate::modes::html::write_viewer_to;

/// The clap definition of `view`.
pub fn command() -> Command {
    Command::new("view")
        .about("Write the HTML rollout viewer for an Atropos groups JSONL file")
        .arg(
            Arg::new("file")
                .value_name("FILE.jsonl")
                .required(true)
                .value_parser(clap::value_parser!(PathBuf))
                .help("Groups JSONL written by `process` (or any Atropos JSONL)"),
        )
        .arg(
            Arg::new("output")
                .long("output")
                .short('o')
                .value_name("FILE.html")
                .value_parser(clap::value_parser!(PathBuf))
                .help("Where to write the viewer (default: FILE.html next to the input)"),
        )
}

/// Runs `view`.
pub fn run(matches: &ArgMatches) -> anyhow::Result<()> {
    let input = matches
        .get_one::<PathBuf>("file")
        .expect("FILE is required");
    let output = matches
        .get_one::<PathBuf>("output")
        .cloned()
        .unwrap_or_else(|| input.with_extension("html"));
    anyhow::ensure!(
        output != *input,
        "the output would overwrite the input; pass --output FILE.html"
    );
    let stats = write_viewer_to(input, &output)
        .with_context(|| format!("cannot write the viewer of {}", input.display()))?;
    println!(
        "{}: {} groups, {} rollouts{}",
        output.display(),
        stats.groups,
        stats.rollouts,
        if stats.skipped > 0 {
            format!(
                " ({} lines without messages and scores skipped)",
                stats.skipped
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
