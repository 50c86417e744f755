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

use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::env::Environment;
use crate::shutdown::Shutdown;

/// The clap definitions of every utility subcommand.
pub fn definitions() -> Vec<Command> {
    vec![
        check::command(),
        hack::command(),
        mcp::command(),
        openenv::command(),
        parsers::command(),
        sandbox::command(),
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

/// The trailing `process`-mode flags that `check` and `hack` run their kit with.
fn process_flags_arg() -> Arg {
    Arg::new("flags")
        .value_name("PROCESS FLAGS")
        .num_args(0..)
        .trailing_var_arg(true)
        .allow_hyphen_values(true)
        .action(ArgAction::Append)
        .help("Flags of the process mode, e.g. --env.terminal_backend docker")
}

/// The values of [`process_flags_arg`].
fn process_flags(matches: &ArgMatches) -> Vec<String> {
    matches
        .get_many::<String>("flags")
        .into_iter()
        .flatten()
        .cloned()
        .collect()
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
