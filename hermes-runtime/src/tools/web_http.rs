//! The HTTP plumbing the real web backends share: one client with a timeout, JSON requests,
//! and errors that name the provider and status but never a key.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{SearchHit, WebError};

/// Per-request limit of a web-backend call.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A provider's HTTP client: its name for errors, its base URL and its key.
pub(crate) struct ProviderClient {
    pub(crate) name: &'static str,
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    http: reqwest::Client,
}

impl ProviderClient {
    /// A client for `name` at `base_url` (trailing `/` removed).
    pub(crate) fn new(
        name: &'static str,
        base_url: &str,
        api_key: Option<String>,
    ) -> Result<Self, WebError> {
        let http = crate::tls::client_builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| WebError(format!("{name}: cannot build the HTTP client: {e}")))?;
        Ok(ProviderClient {
            name,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            http,
        })
    }

    /// `POST {base_url}{path}` with a JSON body and the key as a bearer token.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, WebError> {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base_url))
            .json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        self.send(request).await
    }

    /// `GET {base_url}{path}` with query parameters.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, WebError> {
        let name = self.name;
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", self.base_url), query)
            .map_err(|e| WebError(format!("{name}: bad base URL '{}': {e}", self.base_url)))?;
        self.send(self.http.get(url)).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, WebError> {
        let name = self.name;
        let response = request
            .send()
            .await
            .map_err(|e| WebError(format!("{name} request failed: {}", e.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let excerpt: String = body.chars().take(200).collect();
            return Err(WebError(format!(
                "{name} answered HTTP {status}: {excerpt}"
            )));
        }
        response.json::<T>().await.map_err(|e| {
            WebError(format!(
                "{name} sent an unexpected response: {}",
                e.without_url()
            ))
        })
    }
}

/// A search answer in the shape SearXNG and Tavily share: `results` of title, URL and snippet.
#[derive(Deserialize)]
pub(crate) struct SearchResults {
    #[serde(default)]
    results: Vec<SearchResult>,
}

#[derive(Deserialize)]
struct SearchResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    content: String,
}

impl SearchResults {
    /// The first `limit` results as search hits (the snippet as the description).
    pub(crate) fn into_hits(self, limit: usize) -> Vec<SearchHit> {
        self.results
            .into_iter()
            .take(limit)
            .map(|r| SearchHit {
                title: r.title,
                url: r.url,
                description: r.content,
            })
            .collect()
    }
}
