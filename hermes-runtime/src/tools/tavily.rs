//! [`TavilyBackend`]: Tavily's search (`POST /search`) and extract (`POST /extract`) APIs, one
//! of the providers upstream Hermes web tools used; the key is `TAVILY_API_KEY`, sent as a
//! bearer token.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::web_http::{ProviderClient, SearchResults};
use super::{Page, SearchHit, WebBackend, WebError};

/// Tavily's public API.
pub const TAVILY_BASE_URL: &str = "https://api.tavily.com";

/// Web search and page extraction through Tavily.
pub struct TavilyBackend {
    client: ProviderClient,
}

impl TavilyBackend {
    /// A backend at `base_url` (Tavily's, or a compatible proxy) with `api_key`.
    pub fn new(base_url: &str, api_key: String) -> Result<Self, WebError> {
        Ok(TavilyBackend {
            client: ProviderClient::new("tavily", base_url, Some(api_key))?,
        })
    }
}

#[derive(Deserialize)]
struct ExtractResponse {
    #[serde(default)]
    results: Vec<ExtractResult>,
    #[serde(default)]
    failed_results: Vec<FailedResult>,
}

#[derive(Deserialize)]
struct ExtractResult {
    url: String,
    #[serde(default)]
    raw_content: Option<String>,
}

#[derive(Deserialize)]
struct FailedResult {
    #[serde(default)]
    error: Option<String>,
}

#[async_trait]
impl WebBackend for TavilyBackend {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, WebError> {
        let body = json!({"query": query, "max_results": limit, "search_depth": "basic"});
        let response: SearchResults = self.client.post("/search", &body).await?;
        Ok(response.into_hits(limit))
    }

    async fn extract(&self, url: &str) -> Result<Page, WebError> {
        let response: ExtractResponse = self
            .client
            .post("/extract", &json!({"urls": [url]}))
            .await?;
        if let Some(page) = response.results.into_iter().next() {
            // Tavily's extract results carry no title; the URL stands in for it.
            return Ok(Page {
                title: page.url,
                content: page.raw_content.unwrap_or_default(),
            });
        }
        let reason = response
            .failed_results
            .into_iter()
            .find_map(|f| f.error)
            .unwrap_or_else(|| "no content returned".into());
        Err(WebError(format!(
            "tavily could not extract {url}: {reason}"
        )))
    }
}
