//! The `mcp` command: the environment served as an MCP server over Streamable HTTP, so an
//! outside agent harness is the agent. One MCP session is one episode (the OpenEnv mode's
//! [`episode`](crate::modes::openenv::episode) layer): the prompt in the `initialize`
//! instructions and the `task` prompt, the environment's tools plus `submit`, one sandbox.
//!
//! Sessions need the handshake-era protocol (up to 2025-11-25): the 2026-07-28 revision has
//! no sessions, and an episode is state (its item, sandbox and transcript). Clients that
//! probe `server/discover` fall back to `initialize`.

mod session;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::env::Environment;
use crate::modes::openenv::episode::SUBMIT_TOOL;
use crate::modes::openenv::{OpenEnvOptions, SessionLimits};
use crate::modes::rollout::{Runtime, SharedEnv};
use crate::shutdown::Shutdown;
use session::{McpSession, Shared};

/// The path the MCP endpoint is served on.
pub const MCP_PATH: &str = "/mcp";

/// Serves `env` over MCP until `shutdown` is requested, then drains: every session is ended
/// and its sandbox removed (within `grace`). `on_listening` gets the bound address.
pub async fn serve<E: Environment>(
    env: E,
    rt: Runtime,
    options: OpenEnvOptions,
    shutdown: Shutdown,
    on_listening: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    if rt.group_tools().contains(SUBMIT_TOOL) {
        anyhow::bail!(
            "the environment offers a tool named '{SUBMIT_TOOL}', the name the mcp mode gives the final answer; rename that tool"
        );
    }
    let max = options.limits.max_sessions.max(1);
    let shared = Arc::new(Shared {
        env: SharedEnv(tokio::sync::RwLock::new(env)),
        rt,
        name: E::descriptor().name,
        about: E::descriptor().about.trim().to_owned(),
        limits: SessionLimits {
            max_sessions: max,
            ..options.limits
        },
        slots: Arc::new(Semaphore::new(max)),
    });
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("cannot listen on {} (--host, --port)", options.addr))?;
    let addr = listener.local_addr()?;

    let mut sessions = SessionConfig::default();
    // A client that vanishes without DELETE is noticed only by its silence.
    sessions.keep_alive = Some(shared.limits.idle_timeout);
    let mut manager = LocalSessionManager::default();
    manager.session_config = sessions;
    // Host validation (DNS-rebinding protection) admits the loopback names and the bound address.
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    hosts.push(addr.ip().to_string());
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
    let stop_sessions = config.cancellation_token.clone();
    let factory_shared = Arc::clone(&shared);
    let service = StreamableHttpService::new(
        move || Ok(McpSession::new(Arc::clone(&factory_shared))),
        Arc::new(manager),
        config,
    );
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn(deleted_is_no_content));
    info!(
        "mcp: serving {} on http://{addr}{MCP_PATH} (Streamable HTTP, at most {max} sessions; idle timeout {} s, lifetime {} s)",
        shared.name,
        shared.limits.idle_timeout.as_secs(),
        shared.limits.lifetime.as_secs()
    );
    on_listening(addr);
    let stop = shutdown.clone();
    let end_sessions = stop_sessions.clone();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            stop.requested().await;
            // Ends every session (their streams close, so the server can stop).
            end_sessions.cancel();
        })
        .await
        .context("the mcp server failed")?;
    stop_sessions.cancel();
    let drained = shutdown
        .finish_within(options.grace, async {
            let _all = shared.slots.acquire_many(max as u32).await;
        })
        .await;
    match drained {
        Some(()) => info!("mcp: every session ended; sandboxes removed"),
        None => warn!(
            "mcp: {} session(s) still busy after --env.shutdown_grace = {} s; stopping them (their sandboxes are removed)",
            shared.active(),
            options.grace.as_secs()
        ),
    }
    Ok(())
}

/// rmcp answers a session's DELETE with 202; the official clients count only 200 and 204 as
/// a terminated session (and warn otherwise), and the session is gone when the answer leaves.
async fn deleted_is_no_content(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
    }
    response
}
