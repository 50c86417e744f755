//! `mcp`: serves the environment as an MCP server over Streamable HTTP (`/mcp`) until
//! stopped, so an outside agent harness is the agent: one MCP session = one item, its own
//! sandbox and tools, the prompt in the `initialize` instructions, and a `submit` tool that runs
//! the verifier. The flags are `openenv`'s.

use clap::{ArgMatches, Command};

use crate::env::Environment;
use crate::modes::mcp::{serve, MCP_PATH};
use crate::modes::openenv::start;
use crate::shutdown::Shutdown;

/// The clap definition of `mcp`.
pub fn command() -> Command {
    super::openenv::serving_args(
        Command::new("mcp").about(
            "Serve the environment as an MCP server (Streamable HTTP on /mcp) for an outside agent harness",
        ),
        "MCP sessions",
    )
}

/// Runs `mcp` for environment `E` until `shutdown` is requested.
pub async fn run<E: Environment>(matches: &ArgMatches, shutdown: &Shutdown) -> anyhow::Result<()> {
    let (cfg, options) = super::openenv::serving_options::<E>(matches)?;
    let (env, rt) = shutdown.unless_requested(start::<E>(&cfg)).await??;
    serve(env, rt, options, shutdown.clone(), |addr| {
        // One line on stdout for scripts and tests: where to connect.
        println!("mcp listening on http://{addr}{MCP_PATH}");
    })
    .await
}
