//! Utility subcommands of every environment binary, next to the three Atropos modes
//! (`sandbox list|reap`, `parsers check`, `view`, `wandb sync`, `check`, …). Each lives in its
//! own module with a `command()` definition and a `run` function; this module lists them.

use clap::{ArgMatches, Command};

use crate::env::Environment;

/// The clap definitions of every utility subcommand.
pub fn definitions() -> Vec<Command> {
    Vec::new()
}

/// Runs the utility subcommand `name` (one of [`definitions`]).
pub async fn run<E: Environment>(name: &str, matches: &ArgMatches) -> anyhow::Result<()> {
    let _ = matches;
    anyhow::bail!("unknown subcommand '{name}'")
}
