//! Whether a server is still alive while an unstreamed request waits on it. Phase 2's
//! `/generate` sends nothing until the answer is complete, so silence says nothing about the
//! request; the server's `/health` does: vLLM's fails once its engine is dead, SGLang's once no
//! request makes progress, and a server that has stopped answering answers it neither. Every
//! waiting request of a server shares one check at a time and its result for a while, so a
//! thousand waiting requests make one check per interval, not a thousand.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use super::http::{self, HttpFailure, Target};
use super::pool::Endpoint;

/// The last health check of one server and when it was made.
#[derive(Debug, Default)]
pub(crate) struct HealthWatch {
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl HealthWatch {
    /// Completes once the server fails its health check, checked every `every` (each check
    /// bounded by `every` too) from `every` after the call on; never while it passes, or when
    /// it has no `/health` to ask.
    pub(crate) async fn until_unhealthy(
        &self,
        http: &reqwest::Client,
        server: &Endpoint,
        every: Duration,
    ) -> HttpFailure {
        loop {
            tokio::time::sleep(every).await;
            if let Err(why) = self.check(http, server, every).await {
                return HttpFailure::Unhealthy(why);
            }
        }
    }

    /// The server's health: a check younger than `every` is reused, else one is made (the
    /// other waiting requests wait for its result).
    async fn check(
        &self,
        http: &reqwest::Client,
        server: &Endpoint,
        every: Duration,
    ) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = &*last {
            if at.elapsed() < every {
                return result.clone();
            }
        }
        let url = format!("{}/health", server.root());
        let to = Target {
            timeout: every,
            ..server.target(&url)
        };
        let result = match http::get(http, to).await {
            Ok(_) => Ok(()),
            // No health endpoint: nothing to tell by.
            Err(HttpFailure::Status { status: 404, .. }) => Ok(()),
            Err(HttpFailure::Timeout(_)) => Err(format!("GET {url}: no answer within {every:?}")),
            Err(f) => Err(format!("GET {url}: {f}")),
        };
        *last = Some((Instant::now(), result.clone()));
        result
    }
}
