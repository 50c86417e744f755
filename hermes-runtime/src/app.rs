//! The generated binary's `main`: parse the command line, resolve the config, build the run's
//! services and dispatch to a mode. Errors are one line on stderr with exit code 2; Ctrl-C
//! cancels the run and every sandbox is torn down (exit code 130).

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::config::cli::{parse, Invocation};
use crate::config::{resolve, Mode, ResolvedConfig, ServerType};
use crate::env::{EnvDefinition, Environment};
use crate::llm::{LlmClient, RetryPolicy};
use crate::modes::{run_evaluate, run_process, write_evaluate_config, Runtime};
use crate::sandbox::{LocalProvider, SandboxProvider};
use crate::testing::{ReferenceBook, ReferencePolicy, ScriptedServer};
use crate::tools::ToolRegistry;

/// Entry point called by the `main` that `#[hermes_env]` generates.
pub fn main<E: Environment>() -> ExitCode {
    init_tracing();
    let args: Vec<OsString> = std::env::args_os().collect();
    let bin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| E::descriptor().name.to_owned());
    let invocation = match parse_invocation::<E>(&bin, args) {
        Ok(Some(invocation)) => invocation,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        let work = async {
            match invocation {
                Resolved::Run(cfg) => execute::<E>(*cfg).await,
                Resolved::Utility(name, matches) => {
                    crate::commands::run::<E>(&name, &matches).await
                }
            }
        };
        tokio::select! {
            result = work => Some(result),
            () = shutdown_signal() => None,
        }
    });
    match outcome {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) => {
            eprintln!("error: {}", one_line(&format!("{e:#}")));
            ExitCode::from(2)
        }
        None => {
            eprintln!("interrupted: rollouts cancelled and sandboxes removed");
            ExitCode::from(130)
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// What to do after parsing: run a mode with a resolved config, or a utility subcommand.
pub enum Resolved {
    /// Run an Atropos mode.
    Run(Box<ResolvedConfig>),
    /// Run a utility subcommand with its arguments.
    Utility(String, Box<clap::ArgMatches>),
}

/// Parses and resolves the command line; `Ok(None)` when help was printed.
pub fn parse_invocation<E: EnvDefinition>(
    bin: &str,
    args: Vec<OsString>,
) -> Result<Option<Resolved>, crate::config::ConfigError> {
    let desc = E::descriptor();
    match parse(bin, &desc, args)? {
        Invocation::Print(text) => {
            print!("{text}");
            Ok(None)
        }
        Invocation::Run(mode, flags) => {
            resolve(&desc, mode, *flags).map(|c| Some(Resolved::Run(Box::new(c))))
        }
        Invocation::Utility(name, matches) => Ok(Some(Resolved::Utility(name, matches))),
    }
}

/// Builds the run's services and runs the selected mode.
pub async fn execute<E: Environment>(mut cfg: ResolvedConfig) -> anyhow::Result<()> {
    for w in &cfg.warnings {
        warn!("{w}");
    }
    let desc = E::descriptor();
    if cfg.mode == Mode::Serve {
        bail!(
            "serve mode is not available yet (the Atropos trajectory-API client lands with issue #4); \
             use `process` or `evaluate`"
        );
    }
    if cfg.env.distribution.is_some() {
        bail!("--env.distribution is not supported yet (toolset distributions land with issue #5); use --env.enabled_toolsets");
    }
    let sandboxes: Arc<dyn SandboxProvider> = match cfg.env.terminal_backend.as_str() {
        "local" => Arc::new(LocalProvider::new().context("cannot create the local sandbox root")?),
        other => bail!("terminal_backend '{other}' is not supported yet (docker lands with issue #3); use --env.terminal_backend local"),
    };
    let (tools, tool_warnings) = ToolRegistry::builtin()
        .resolve(
            cfg.env.enabled_toolsets.as_deref(),
            cfg.env.disabled_toolsets.as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
    if cfg.env.enabled_toolsets.is_none() {
        warn!(
            "no enabled_toolsets configured: offering every available tool ({})",
            tools.names().join(", ")
        );
    }
    for w in tool_warnings {
        warn!("{w}");
    }

    let (references, _server) = if cfg.manager.testing {
        let book = ReferenceBook::default();
        let server = ScriptedServer::start_with(ReferencePolicy::new(book.clone()), false)
            .await
            .context("cannot start the scripted inference server")?;
        info!(
            "--testing: using the embedded scripted server at {}",
            server.base_url()
        );
        for s in &mut cfg.servers {
            s.base_url = Some(server.base_url());
            s.server_type = ServerType::Openai;
        }
        (Some(book), Some(server))
    } else {
        (None, None)
    };
    if cfg
        .servers
        .iter()
        .any(|s| s.server_type != ServerType::Openai)
    {
        warn!("Phase 2 token tracking (vllm/sglang /generate) lands with issue #4; using chat completions with placeholder tokens");
    }
    if cfg.mode == Mode::Process {
        warn!("Phase 1 (chat completions): tokens are placeholders, usable for SFT data and evaluation, not RL training; groups carry group_overrides.placeholder_tokens = true");
    }
    if cfg.env.use_wandb {
        warn!("wandb logging is not available yet (issue #6); continuing without it (set --env.use_wandb false to silence this)");
    }
    let llm = LlmClient::new(
        &cfg.servers,
        cfg.manager.max_n_completions.max(1) as u32,
        RetryPolicy::default(),
    )?;
    if cfg.mode == Mode::Evaluate {
        if let Some(dir) = &cfg.env.data_dir_to_save_evals {
            write_evaluate_config(dir.as_ref(), &cfg)?;
        }
    }

    let shared = Arc::new(cfg.env.clone());
    let mut env = E::from_config(Arc::clone(&shared), cfg.own::<E::Config>()?);
    env.setup().await.context("setup hook failed")?;
    let rt = Runtime {
        config: shared,
        llm,
        sandboxes,
        tools: Arc::new(tools),
        tool_permits: Semaphore::new(cfg.env.tool_pool_size.max(1) as usize),
        references,
    };
    match cfg.mode {
        Mode::Process => {
            let workers = cfg.env.effective_workers(cfg.servers.len());
            let s = run_process(&mut env, &rt, workers).await?;
            println!(
                "process: {} groups written to {} ({} dropped), {} rollouts, mean reward {:.3}, {} tool errors, {} failed rewards",
                s.groups_written,
                s.jsonl.display(),
                s.groups_dropped,
                s.rollouts,
                s.mean_reward,
                s.tool_errors,
                s.failed_rewards
            );
            println!("viewer: {}", s.html.display());
        }
        Mode::Evaluate => {
            let model = cfg
                .servers
                .first()
                .map(|s| s.model_name.clone())
                .unwrap_or_default();
            let s = run_evaluate(&env, &rt, desc.name, &model).await?;
            for (k, v) in &s.metrics {
                println!("{k:<32} {v:.4}");
            }
            if let Some(dir) = s.dir {
                println!("results: {}", dir.display());
            }
        }
        Mode::Serve => unreachable!("serve is rejected above"),
    }
    Ok(())
}
