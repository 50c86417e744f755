//! Constructing a run's environment: the struct from the merged config, its `setup` hook,
//! and the tools it offers (built-ins plus `register_tools`, then toolsets or distribution).

use std::sync::Arc;

use anyhow::Context as _;
use tracing::{info, warn};

use crate::config::{HermesEnvConfig, ResolvedConfig};
use crate::data::Cursors;
use crate::env::Environment;
use crate::tools::mcp::McpServers;
use crate::tools::{DistributionSampler, GroupTools, ToolRegistry, ToolSet, WebChoice};

/// Constructs the environment from the merged config, runs its `setup` hook and resolves the
/// tools it offers (built-ins plus its `register_tools`).
pub async fn build_env<E: Environment>(
    cfg: &ResolvedConfig,
) -> anyhow::Result<(E, Arc<HermesEnvConfig>, ToolSet, Option<GroupTools>)> {
    build_env_in(cfg, &Cursors::default()).await
}

/// [`build_env`], registering the `data::Cursor`s that `setup` makes in `cursors` (what
/// `serve` checkpoints).
pub async fn build_env_in<E: Environment>(
    cfg: &ResolvedConfig,
    cursors: &Cursors,
) -> anyhow::Result<(E, Arc<HermesEnvConfig>, ToolSet, Option<GroupTools>)> {
    let shared = Arc::new(cfg.env.clone());
    let mut env = E::from_config(Arc::clone(&shared), cfg.own::<E::Config>()?);
    cursors
        .scope(env.setup())
        .await
        .context("setup hook failed")?;
    let mut registry = ToolRegistry::builtin();
    env.register_tools(&mut registry);
    let mut shared_cfg = cfg.env.clone();
    if let Some(specs) = cfg.env.mcp_servers.as_deref().filter(|s| !s.is_empty()) {
        let servers = McpServers::start(specs).await?;
        servers.register(&mut registry);
        offer_mcp_toolsets(&mut shared_cfg, &servers.names());
    }
    let (tools, distribution) = resolve_tools(&shared_cfg, registry)?;
    Ok((env, shared, tools, distribution))
}

/// Declaring an MCP server is asking for its tools: with an explicit `enabled_toolsets`, the
/// servers' toolsets join it (said once); `disabled_toolsets` can still remove them.
fn offer_mcp_toolsets(env: &mut HermesEnvConfig, servers: &[&str]) {
    if let Some(enabled) = env.enabled_toolsets.as_mut() {
        let added: Vec<&str> = servers
            .iter()
            .copied()
            .filter(|s| !enabled.iter().any(|e| e == s || e == "mcp"))
            .collect();
        if !added.is_empty() {
            info!(
                "enabled_toolsets: the MCP servers' toolsets {} are offered too (declared in \
                 mcp_servers; name them in disabled_toolsets to hide them)",
                added.join(", ")
            );
            enabled.extend(added.iter().map(|s| (*s).to_owned()));
        }
    }
}

/// The run's tools: `registry` (plus the configured web backend), the tools of
/// `enabled_toolsets` minus `disabled_toolsets`, and — with `distribution` — the per-group
/// sampler that replaces them for training groups and rollouts.
pub fn resolve_tools(
    env: &HermesEnvConfig,
    mut registry: ToolRegistry,
) -> anyhow::Result<(ToolSet, Option<GroupTools>)> {
    if let Some(name) = env.web_backend.as_deref() {
        let lookup = |var: &str| std::env::var(var).ok();
        match crate::tools::select_web_backend(name, env.web_base_url.as_deref(), &lookup)? {
            WebChoice::Backend(backend, which) => {
                info!("web tools search through {which}");
                registry = registry.with_web(backend);
            }
            WebChoice::Hidden(why) => warn!("{why}"),
        }
    }
    let enabled = enabled_toolsets(env);
    let (tools, warnings) =
        registry.resolve(enabled.as_deref(), env.disabled_toolsets.as_deref())?;
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
                info!(
                    "no toolsets declared: the model is offered no tools (requests carry no \
                     tools or tool_choice); set --env.enabled_toolsets '[\"all\"]' to offer every \
                     available tool, as upstream's null did"
                );
            }
            None
        }
    };
    Ok((tools, distribution))
}

/// The toolsets to resolve: none when none are declared (a single-turn environment offers
/// no tools, and a server without tool support refuses `tool_choice`), every one (`None`)
/// for `["all"]`.
fn enabled_toolsets(env: &HermesEnvConfig) -> Option<Vec<String>> {
    match &env.enabled_toolsets {
        None => Some(Vec::new()),
        Some(sets) if sets.iter().any(|s| s == ALL_TOOLSETS) => None,
        Some(sets) => Some(sets.clone()),
    }
}

/// The toolset name that offers every available tool.
pub const ALL_TOOLSETS: &str = "all";

/// True when the config offers the model tools: toolsets are declared (other than an empty
/// list) or drawn from a distribution. The plan reads it before any tool is registered.
pub fn offers_tools(env: &HermesEnvConfig) -> bool {
    env.distribution.is_some() || env.enabled_toolsets.as_ref().is_some_and(|t| !t.is_empty())
}
