//! The `openenv` command: the environment served over the OpenEnv wire (`openenv-core`'s
//! HTTP and WebSocket protocol), so a trainer's own agent loop drives its episodes. The
//! episode layer ([`episode`]) knows no transport; [`server`] speaks the wire.

pub mod episode;
mod server;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::config::ResolvedConfig;
use crate::env::Environment;
use crate::modes::rollout::{Runtime, SharedEnv};
use crate::shutdown::Shutdown;
pub use server::SessionLimits;

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct OpenEnvOptions {
    /// Address to bind (`--host`, `--port`; port 0 picks a free one).
    pub addr: SocketAddr,
    /// Session limits.
    pub limits: SessionLimits,
    /// How long in-flight sessions may take to end after a stop request (`shutdown_grace`).
    pub grace: std::time::Duration,
}

/// The environment (after `setup`) and the runtime its episodes run with: the sandbox
/// backend, no tokenizer and no health-checked inference pool (the client is the model). The
/// inference client is still built from the configured servers for verifiers that call an LLM
/// judge; its key is only needed when one does.
pub async fn start<E: Environment>(cfg: &ResolvedConfig) -> anyhow::Result<(E, Runtime)> {
    for server in &cfg.servers {
        crate::config::redact::remember_secret(server.api_key.as_deref().unwrap_or(""));
    }
    // The author's container_env reaches the sandbox, where the model can print it.
    for entry in cfg.env.container_env.iter().flatten() {
        if let Some((_, value)) = entry.split_once('=') {
            crate::config::redact::remember_secret(value);
        }
    }
    let backend = crate::sandbox::Backend::from_config(&cfg.env)?;
    let sandboxes = crate::sandbox::start_backend(&cfg.env, backend, E::descriptor().name)
        .await?
        .provider;
    let llm = judge_client(cfg)?;
    let (env, shared, tools, distribution) = crate::setup::build_env::<E>(cfg).await?;
    let rt = Runtime::builder(shared, llm, sandboxes, tools)
        .distribution(distribution)
        .build();
    Ok((env, rt))
}

/// The inference client of verifiers that call an LLM judge: the configured servers, or,
/// when none is configured, a placeholder that refuses every call (said once: such a judge's
/// episodes then end as verifier failures, never as a reward).
fn judge_client(cfg: &ResolvedConfig) -> anyhow::Result<crate::llm::LlmClient> {
    let max_n = cfg.manager.max_n_completions.max(1) as u32;
    let retry = crate::llm::RetryPolicy::from_config(&cfg.env);
    if cfg.servers.iter().all(|s| s.base_url().is_some()) && !cfg.servers.is_empty() {
        return Ok(crate::llm::LlmClient::new(&cfg.servers, max_n, retry)?);
    }
    info!(
        "openenv: no inference server configured (--openai.base_url); the client is the model, \
         and a verifier that calls an LLM judge fails (a verifier failure, no reward)"
    );
    let nowhere = crate::config::ApiServerConfig {
        base_url: Some(UNCONFIGURED_JUDGE.into()),
        ..Default::default()
    };
    Ok(crate::llm::LlmClient::new(&[nowhere], max_n, retry)?)
}

/// The judge URL when none is configured: the discard port, where nothing answers.
const UNCONFIGURED_JUDGE: &str = "http://127.0.0.1:9/v1";

/// Serves `env` until `shutdown` is requested, then drains: every session ends its current
/// step, is told the server is shutting down and loses its sandbox (within `grace`).
/// `on_listening` gets the bound address.
pub async fn serve<E: Environment>(
    env: E,
    rt: Runtime,
    options: OpenEnvOptions,
    shutdown: Shutdown,
    on_listening: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    if rt.group_tools().contains(episode::SUBMIT_TOOL) {
        anyhow::bail!(
            "the environment offers a tool named '{}', the name the openenv mode gives the final answer; rename that tool",
            episode::SUBMIT_TOOL
        );
    }
    let max = options.limits.max_sessions.max(1);
    let server = Arc::new(server::Server {
        env: SharedEnv(tokio::sync::RwLock::new(env)),
        rt,
        name: E::descriptor().name,
        about: E::descriptor().about.trim().to_owned(),
        limits: SessionLimits {
            max_sessions: max,
            ..options.limits
        },
        slots: Arc::new(Semaphore::new(max)),
        shutdown: shutdown.clone(),
    });
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("cannot listen on {} (--host, --port)", options.addr))?;
    let addr = listener.local_addr()?;
    info!(
        "openenv: serving {} on http://{addr} (WebSocket sessions on /ws, at most {max}; idle timeout {} s, lifetime {} s)",
        server.name,
        server.limits.idle_timeout.as_secs(),
        server.limits.lifetime.as_secs()
    );
    on_listening(addr);
    let stop = shutdown.clone();
    axum::serve(listener, server::router(Arc::clone(&server)))
        .with_graceful_shutdown(async move { stop.requested().await })
        .await
        .context("the openenv server failed")?;
    // The sessions see the same request and end after their current step.
    let drained = shutdown
        .finish_within(options.grace, async {
            let _all = server.slots.acquire_many(max as u32).await;
        })
        .await;
    match drained {
        Some(()) => info!("openenv: every session ended; sandboxes removed"),
        None => warn!(
            "openenv: {} session(s) still busy after --env.shutdown_grace = {} s; stopping them (their sandboxes are removed)",
            server.active(),
            options.grace.as_secs()
        ),
    }
    Ok(())
}
