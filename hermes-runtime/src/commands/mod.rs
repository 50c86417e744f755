//! Utility subcommands of every environment binary, next to the three Atropos modes
//! (`sandbox list|reap`, `parsers check`, `view`, `wandb sync`, `check`, `hack`, …). Each lives in its
//! own module with a `command()` definition and a `run` function; this module lists them.

mod check;
mod hack;
mod mcp;
mod openenv;
mod parsers;
mod sandbox;
mod view;
mod wandb;

use std::ffi::OsString;

use clap::{ArgMatches, Command};

use crate::config::cli::{given_process_flags, with_process_flags};
use crate::config::EnvDescriptor;
use crate::env::{EnvDefinition, Environment};
use crate::shutdown::Shutdown;

/// The clap definitions of every utility subcommand of environment `desc`; those that act on
/// a run's configuration take the `process` mode's flags among their own.
pub fn definitions(desc: &EnvDescriptor) -> Vec<Command> {
    let run_flags = |cmd| with_process_flags(cmd, desc);
    vec![
        run_flags(check::command()),
        run_flags(hack::command()),
        run_flags(mcp::command()),
        run_flags(openenv::command()),
        parsers::command(),
        sandbox::command()
            .mut_subcommand("list", run_flags)
            .mut_subcommand("reap", run_flags),
        view::command(),
        wandb::command(),
    ]
}

/// True for the subcommands that serve until stopped and drain on the first signal (they get
/// the [`Shutdown`] through [`serve`]); the others are cancelled by it.
pub fn serves_until_stopped(name: &str) -> bool {
    name == "openenv" || name == "mcp"
}

/// Runs a subcommand for which [`serves_until_stopped`] holds.
pub async fn serve<E: Environment>(
    name: &str,
    matches: &ArgMatches,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    match name {
        "openenv" => openenv::run::<E>(matches, shutdown).await,
        "mcp" => mcp::run::<E>(matches, shutdown).await,
        _ => anyhow::bail!("'{name}' is not a serving subcommand"),
    }
}

/// Runs the utility subcommand `name` (one of [`definitions`]).
pub async fn run<E: Environment>(name: &str, matches: &ArgMatches) -> anyhow::Result<()> {
    match name {
        "check" => check::run::<E>(matches).await,
        "hack" => hack::run::<E>(matches).await,
        "parsers" => parsers::run(matches),
        "sandbox" => sandbox::run::<E>(matches).await,
        "view" => view::run(matches),
        "wandb" => wandb::run(matches).await,
        _ => anyhow::bail!("unknown subcommand '{name}'"),
    }
}

/// The `process` mode's flags a subcommand was given (see [`definitions`]).
fn process_flags<E: EnvDefinition>(matches: &ArgMatches) -> Vec<OsString> {
    given_process_flags(&E::descriptor(), matches)
}

/// Writes `value` as pretty JSON to `path` (parents created): a command's `--json FILE`.
fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
