//! [`SearxngBackend`]: a self-hosted SearXNG instance's JSON API
//! (`GET /search?q=…&format=json`, which the instance must enable under `search.formats`).
//! SearXNG only searches: `web_extract` answers with an error saying so, because fetching
//! model-chosen URLs from this host would give the model this host's network.

use async_trait::async_trait;

use super::web_http::{ProviderClient, SearchResults};
use super::{Page, SearchHit, WebBackend, WebError};

/// Search through a SearXNG instance.
pub struct SearxngBackend {
    client: ProviderClient,
}

impl SearxngBackend {
    /// A backend for the instance at `base_url`, e.g. `http://localhost:8888`.
    pub fn new(base_url: &str) -> Result<Self, WebError> {
        Ok(SearxngBackend {
            client: ProviderClient::new("searxng", base_url, None)?,
        })
    }
}

#[async_trait]
impl WebBackend for SearxngBackend {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, WebError> {
        let response: SearchResults = self
            .client
            .get("/search", &[("q", query), ("format", "json")])
            .await?;
        Ok(response.into_hits(limit))
    }

    async fn extract(&self, url: &str) -> Result<Page, WebError> {
        Err(WebError(format!(
            "web_extract is not available with the searxng backend (it only searches); cannot read {url}. Use the search snippets, or run with --env.web_backend tavily for page extraction"
        )))
    }
}
