//! Utility subcommands of every environment binary, next to the three Atropos modes
//! (`sandbox list|reap`, `parsers check`, `view`, `wandb sync`, `check`, `hack`, …). Each lives in its
//! own module with a `command()` definition and a `run` function; this module lists them.

mod check;
mod hack;
mod parsers;
mod sandbox;
mod view;
mod wandb;

use clap::{ArgMatches, Command};

use crate::env::Environment;

/// The clap definitions of every utility subcommand.
pub fn definitions() -> Vec<Command> {
    vec![
        check::command(),
        hack::command(),
        parsers::command(),
        sandbox::command(),
        view::command(),
        wandb::command(),
    ]
}

/// Runs the utility subcommand `name` (one of [`definitions`]).
pub async fn run<E: Environment>(name: &str, matches: &ArgMatches) -> anyhow::Result<()> {
    match name {
        "check" => check::run::<E>(matches).await,
        "hack" => hack::run::<E>(matches).await,
        "parsers" => parsers::run(matches),
        "sandbox" => sandbox::run(matches).await,
        "view" => view::run(matches),
        "wandb" => wandb::run(matches).await,
        _ => anyhow::bail!("unknown subcommand '{name}'"),
    }
}
