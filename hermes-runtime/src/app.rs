//! The generated binary's `main`: parse the command line, resolve the config, build the run's
//! services and dispatch to a mode. Errors are one line on stderr with exit code 2. The first
//! SIGINT/SIGTERM stops a run gracefully (exit 0, see [`crate::shutdown`]); a second cancels
//! it (exit 130). Every sandbox is torn down either way.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context as _};
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::config::cli::{parse, Invocation};
use crate::config::HermesEnvConfig;
use crate::config::{resolve, Mode, ResolvedConfig, ServerType};
use crate::env::{EnvDefinition, Environment};
use crate::llm::{
    ChatTokenizer, Failover, GenerateClient, LlmClient, Phase2, RetryPolicy, ServerPool,
};
use crate::modes::{
    run_evaluate, run_process, run_serve, write_evaluate_config, Runtime, ServeOptions, TokenSource,
};
use crate::sandbox::{LocalProvider, SandboxProvider};
use crate::shutdown::{Interrupted, Shutdown};
use crate::testing::{RawTextPolicy, ReferenceBook, ReferencePolicy, ScriptedServer};
use crate::tools::{DistributionSampler, FakeWebBackend, GroupTools, ToolRegistry, ToolSet};

/// Entry point called by the `main` that `#[hermes_env]` generates.
pub fn main<E: Environment>() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    crate::own_secrets::protect(&args);
    init_tracing();
    crate::sandbox::docker::watchdog::enable();
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
        let shutdown = Shutdown::on_signals();
        let outcome = match invocation {
            // Runs stop gracefully on the first signal; only a second one cancels them.
            Resolved::Run(cfg) => tokio::select! {
                result = execute::<E>(*cfg, &shutdown) => Some(result),
                () = shutdown.forced() => None,
            },
            Resolved::Utility(name, matches) => tokio::select! {
                result = crate::commands::run::<E>(&name, &matches) => Some(result),
                () = shutdown.requested() => None,
            },
        };
        // The cancelled rollouts' guards are removing their containers; wait for them and
        // remove whatever is left (a second Ctrl-C does not cut this short).
        cleanup_sandboxes().await;
        outcome
    });
    match outcome {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) if e.is::<Interrupted>() => {
            eprintln!("interrupted before the run started; sandboxes removed");
            ExitCode::from(130)
        }
        Some(Err(e)) => {
            let message = one_line(&format!("{e:#}"));
            eprintln!("error: {}", crate::config::redact::redact_text(&message));
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
        .with_writer(crate::progress::LogWriter)
        .try_init();
}

/// Removes every sandbox container this process still owns, then reaps what runs that are gone
/// left on the same daemons, telling an impatient user that a repeated Ctrl-C is ignored until
/// it is done.
async fn cleanup_sandboxes() {
    let cleanup = async {
        let left = crate::sandbox::docker::remove_all_live().await;
        crate::sandbox::docker::reaper::reap_after_run().await;
        crate::sandbox::docker::watchdog::release_all();
        left
    };
    tokio::pin!(cleanup);
    loop {
        tokio::select! {
            left = &mut cleanup => {
                if left > 0 {
                    eprintln!("warning: {left} sandbox container(s) could not be removed; `sandbox reap` removes them");
                }
                return;
            }
            _ = tokio::signal::ctrl_c() => {
                eprintln!("still removing sandbox containers; please wait");
            }
        }
    }
}

/// Connects the Docker backend (one daemon, or every host of `--env.docker_hosts`) and removes
/// orphans that earlier runs left behind on each.
pub(crate) async fn docker_backend(
    env: &crate::config::HermesEnvConfig,
    name: &str,
) -> anyhow::Result<Arc<dyn crate::sandbox::SandboxProvider>> {
    let settings = crate::sandbox::DockerSettings::from_config(env, name);
    if !settings.hosts.is_empty() {
        let hosts = crate::sandbox::docker::DockerHosts::connect(settings).await?;
        for docker in hosts.dockers() {
            crate::sandbox::docker::reaper::reap(docker, false)
                .await
                .context("start-up reaper")?;
        }
        return Ok(Arc::new(hosts));
    }
    let provider = crate::sandbox::DockerProvider::connect(settings).await?;
    crate::sandbox::docker::reaper::reap(provider.docker(), false)
        .await
        .context("start-up reaper")?;
    Ok(Arc::new(provider))
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

/// The run's tools: `registry` (plus the configured web backend), the tools of
/// `enabled_toolsets` minus `disabled_toolsets`, and — with `distribution` — the per-group
/// sampler that replaces them for training groups and rollouts.
pub fn resolve_tools(
    env: &HermesEnvConfig,
    mut registry: ToolRegistry,
) -> anyhow::Result<(ToolSet, Option<GroupTools>)> {
    match env.web_backend.as_deref() {
        None => {}
        Some("fake") => registry = registry.with_web(Arc::new(FakeWebBackend::new())),
        Some(other) => bail!(
            "unknown web_backend '{other}'; available: fake (or register a WebBackend in code with ToolRegistry::with_web)"
        ),
    }
    let (tools, warnings) = registry.resolve(
        env.enabled_toolsets.as_deref(),
        env.disabled_toolsets.as_deref(),
    )?;
    for w in warnings {
        warn!("{w}");
    }
    let distribution = match &env.distribution {
        Some(name) => {
            let sampler = DistributionSampler::new(name, env.distribution_seed.map(|s| s as u64))?;
            info!("toolsets are drawn per group from distribution '{name}'");
            Some(GroupTools::new(
                sampler,
                registry,
                env.disabled_toolsets.clone(),
            ))
        }
        None => {
            if env.enabled_toolsets.is_none() {
                warn!(
                    "no enabled_toolsets configured: offering every available tool ({})",
                    tools.names().join(", ")
                );
            }
            None
        }
    };
    Ok((tools, distribution))
}

/// Constructs the environment from the merged config, runs its `setup` hook and resolves the
/// tools it offers (built-ins plus its `register_tools`).
pub(crate) async fn build_env<E: Environment>(
    cfg: &ResolvedConfig,
) -> anyhow::Result<(E, Arc<HermesEnvConfig>, ToolSet, Option<GroupTools>)> {
    let shared = Arc::new(cfg.env.clone());
    let mut env = E::from_config(Arc::clone(&shared), cfg.own::<E::Config>()?);
    env.setup().await.context("setup hook failed")?;
    let mut registry = ToolRegistry::builtin();
    env.register_tools(&mut registry);
    let (tools, distribution) = resolve_tools(&cfg.env, registry)?;
    Ok((env, shared, tools, distribution))
}

/// Builds the run's services and runs the selected mode; `shutdown` stops it gracefully.
pub async fn execute<E: Environment>(
    mut cfg: ResolvedConfig,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    for w in &cfg.warnings {
        warn!("{w}");
    }
    for server in &cfg.servers {
        crate::config::redact::remember_secret(server.api_key.as_deref().unwrap_or(""));
    }
    let desc = E::descriptor();
    if cfg.mode == Mode::Serve && cfg.env.terminal_backend == "local" {
        warn!("the local sandbox backend runs the model's commands as this user on this host and network (not isolated); use --env.terminal_backend docker for training");
    }
    let sandboxes: Arc<dyn SandboxProvider> = match cfg.env.terminal_backend.as_str() {
        "local" => Arc::new(
            LocalProvider::new()
                .context("cannot create the local sandbox root")?
                .with_env(cfg.env.container_env.clone().unwrap_or_default()),
        ),
        "docker" => docker_backend(&cfg.env, desc.name).await?,
        other => bail!("terminal_backend '{other}' is not supported (modal, ssh, singularity and daytona have no backend here); use --env.terminal_backend local or docker"),
    };
    let raw_parser = crate::parsers::get(&cfg.env.tool_call_parser)?;

    let phase2 = cfg
        .servers
        .first()
        .is_some_and(|s| matches!(s.server_type, ServerType::Vllm | ServerType::Sglang));
    let tokenizer =
        load_tokenizer(&tokenizer_name(&cfg, phase2)?, phase2, cfg.manager.testing).await?;
    let (references, _server) = if cfg.manager.testing {
        let book = ReferenceBook::default();
        let policy = ReferencePolicy::new(book.clone());
        let server = match &tokenizer {
            Some(tok) if phase2 => {
                ScriptedServer::start_with_tokenizer(policy, false, Arc::clone(tok)).await
            }
            _ if cfg.env.testing_raw_tool_calls => {
                ScriptedServer::start_with(RawTextPolicy::new(policy, raw_parser), false).await
            }
            _ => ScriptedServer::start_with(policy, false).await,
        }
        .context("cannot start the scripted inference server")?;
        info!(
            "--testing: using the embedded scripted server at {}",
            server.base_url()
        );
        for s in &mut cfg.servers {
            s.base_url = Some(server.base_url());
            if !phase2 {
                s.server_type = ServerType::Openai;
            }
        }
        (Some(book), Some(server))
    } else {
        (None, None)
    };
    let pool = Arc::new(ServerPool::new(
        &cfg.servers,
        RetryPolicy::from_config(&cfg.env),
        Failover::from_config(&cfg.env),
    )?);
    let tokens = match tokenizer {
        Some(tok) if phase2 => {
            info!(
                "Phase 2: /generate with token tracking, tokenizer {tok:?}, tool-call parser {}",
                cfg.env.tool_call_parser
            );
            TokenSource::Managed(Arc::new(Phase2 {
                client: GenerateClient::with_pool(Arc::clone(&pool))?,
                tokenizer: tok,
                parser: raw_parser,
                preserve_think_blocks: cfg.env.thinking_mode,
            }))
        }
        Some(tok) => {
            info!("Phase 1 (chat completions): rollouts re-tokenized for the trainer with {tok:?}");
            TokenSource::Retokenized(tok)
        }
        None => TokenSource::Placeholder,
    };
    if cfg.servers.iter().any(|s| s.server_type == ServerType::Trl) {
        warn!("trl servers are driven through chat completions (Phase 1); token tracking needs vllm or sglang");
    }
    if tokens.is_placeholder() {
        if cfg.mode == Mode::Serve && !cfg.env.allow_placeholder_tokens {
            bail!(
                "serve needs trainable tokens: use --openai.server_type vllm|sglang (Phase 2), or give a \
                 tokenizer that can be loaded (--env.tokenizer_name DIR or a cached hub id) to re-tokenize Phase 1 chats; \
                 --env.allow_placeholder_tokens true sends Phase 1 placeholder tokens anyway"
            );
        }
        if cfg.mode != Mode::Evaluate {
            warn!("Phase 1 (chat completions) without a tokenizer: tokens are placeholders, usable for SFT data and evaluation, not RL training; groups carry group_overrides.placeholder_tokens = true");
        }
    }
    pool.check_health().await?;
    let llm = LlmClient::with_pool(pool, cfg.manager.max_n_completions.max(1) as u32);
    if cfg.mode == Mode::Evaluate {
        if let Some(dir) = &cfg.env.data_dir_to_save_evals {
            write_evaluate_config(dir.as_ref(), &cfg)?;
        }
    }

    let (mut env, shared, tools, distribution) =
        shutdown.unless_requested(build_env::<E>(&cfg)).await??;
    let rt = Runtime {
        config: shared,
        llm,
        sandboxes,
        tools: Arc::new(tools),
        distribution,
        tool_permits: Semaphore::new(cfg.env.tool_pool_size.max(1) as usize),
        references,
        tokens,
    };
    match cfg.mode {
        Mode::Process => {
            let workers = cfg.env.effective_workers(cfg.servers.len());
            let wandb = if cfg.env.use_wandb {
                start_wandb(&cfg, desc.name)
            } else {
                None
            };
            let result = run_process(&mut env, &rt, workers, wandb.as_ref(), shutdown).await;
            let report = match wandb {
                Some(logger) => Some(logger.finish(i32::from(result.is_err())).await),
                None => None,
            };
            let s = result?;
            let bin = std::env::args()
                .next()
                .and_then(|a| {
                    std::path::Path::new(&a)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| desc.name.to_owned());
            print!(
                "{}",
                crate::modes::report::process_summary(
                    &s,
                    report.map(|r| r.describe(&bin)).as_deref()
                )
            );
        }
        Mode::Evaluate => {
            let model = cfg
                .servers
                .first()
                .map(|s| s.model_name.clone())
                .unwrap_or_default();
            let s = run_evaluate(&env, &rt, desc.name, &model, shutdown).await?;
            print!("{}", crate::modes::report::evaluate_summary(&s));
        }
        Mode::Serve => {
            let model = cfg
                .servers
                .first()
                .map(|s| s.model_name.clone())
                .unwrap_or_default();
            let mut opts = ServeOptions::new(desc.name, &model);
            if cfg.env.use_wandb {
                opts.wandb_config = Some(redacted_env_config(&cfg));
            }
            let s = run_serve(env, Arc::new(rt), opts, shutdown).await?;
            print!("{}", crate::modes::report::serve_summary(&s));
        }
    }
    Ok(())
}

/// The tokenizer of the run: in Phase 2 the servers' `--openai.tokenizer_name` when they set
/// one (as upstream's vLLM/SGLang servers read it; every server must name the same one, since
/// one run's tokens come from one tokenizer), else `--env.tokenizer_name`.
fn tokenizer_name(cfg: &ResolvedConfig, phase2: bool) -> anyhow::Result<String> {
    let mut named = cfg
        .servers
        .iter()
        .map(|s| s.tokenizer_name.as_str())
        .filter(|n| phase2 && !n.is_empty() && *n != "none");
    let Some(first) = named.next() else {
        return Ok(cfg.env.tokenizer_name.clone());
    };
    if let Some(other) = named.find(|n| n != &first) {
        bail!("the servers name different tokenizers ('{first}' and '{other}'); Phase 2 needs one tokenizer for the whole run: set the same --openai.tokenizer_name on every server");
    }
    Ok(first.to_owned())
}

/// The run's tokenizer: `name` as a local path or a hub id (through the Hugging Face cache,
/// downloading into it when online; see [`crate::hub`]). When it cannot be had: a Phase 2
/// `--testing` run uses the built-in tiny tokenizer, Phase 2 stops with the error (which names
/// the download command), Phase 1 continues with placeholder tokens after one warning naming it.
async fn load_tokenizer(
    name: &str,
    phase2: bool,
    testing: bool,
) -> anyhow::Result<Option<Arc<ChatTokenizer>>> {
    use crate::llm::tokenizer::TokenizerError;
    let hub = crate::hub::HubSettings::from_env();
    match ChatTokenizer::resolve(name, &hub).await {
        Ok(tok) => Ok(Some(Arc::new(tok))),
        Err(e @ (TokenizerError::Hub(_) | TokenizerError::NotFound(_))) => {
            if phase2 && testing {
                info!("--testing: {e}; using the built-in tiny tokenizer");
                Ok(Some(Arc::new(ChatTokenizer::builtin())))
            } else if phase2 {
                Err(e.into())
            } else {
                warn!("{e}; Phase 1 continues without a tokenizer");
                Ok(None)
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Starts the wandb run of a `process` run (named `{env name}-{date}-{6 letters}`, no project
/// or group, the env config with secrets redacted), or `None` when W&B is disabled or cannot
/// start — logging problems never stop rollouts.
fn start_wandb(cfg: &ResolvedConfig, env_name: &str) -> Option<crate::wandb::Logger> {
    use crate::wandb::{run_name, Logger, RunSpec, WandbSettings};
    let spec = RunSpec {
        display_name: Some(run_name(env_name)),
        project: None,
        group: None,
        config: redacted_env_config(cfg),
    };
    match WandbSettings::from_env().and_then(|settings| Logger::start(&settings, spec)) {
        Ok(logger) => logger,
        Err(e) => {
            warn!("wandb: {e}; continuing without wandb logging");
            None
        }
    }
}

/// The full env config with secret-looking values redacted, for a wandb run's config.
fn redacted_env_config(cfg: &ResolvedConfig) -> serde_json::Map<String, serde_json::Value> {
    let mut config = serde_json::Value::Object(cfg.env_map.clone());
    crate::config::redact::redact(&mut config);
    match config {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}
