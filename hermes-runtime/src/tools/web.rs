//! `web_search` and `web_extract` behind a pluggable [`WebBackend`]. The tools exist only when
//! a backend is configured (`ToolRegistry::with_web`, or `--env.web_backend fake`);
//! [`FakeWebBackend`] is deterministic, for tests and dry runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;

/// URLs read per `web_extract` call (extra ones are dropped).
const MAX_URLS: usize = 5;
/// Pages longer than this are refused.
const MAX_PAGE_CHARS: usize = 2_000_000;

/// One search hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// Page title.
    pub title: String,
    /// Page URL.
    pub url: String,
    /// Snippet.
    pub description: String,
}

/// One fetched page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    /// Page title.
    pub title: String,
    /// Page text (markdown or plain).
    pub content: String,
}

/// A failure of the web backend (shown to the model as an error result).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct WebError(pub String);

/// Where web searches and page fetches go (a search API, a crawler, a fake).
#[async_trait]
pub trait WebBackend: Send + Sync {
    /// Up to `limit` results for `query`.
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, WebError>;
    /// The page at `url`.
    async fn extract(&self, url: &str) -> Result<Page, WebError>;
}

/// A deterministic backend: registered pages are returned as given; other URLs and every
/// search get content derived from their text.
#[derive(Debug, Clone, Default)]
pub struct FakeWebBackend {
    pages: BTreeMap<String, Page>,
}

impl FakeWebBackend {
    /// A fake with no registered pages.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the page returned for `url`.
    pub fn with_page(mut self, url: &str, title: &str, content: &str) -> Self {
        self.pages.insert(
            url.to_owned(),
            Page {
                title: title.to_owned(),
                content: content.to_owned(),
            },
        );
        self
    }
}

#[async_trait]
impl WebBackend for FakeWebBackend {
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<SearchHit>, WebError> {
        let slug: String = query
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let mut hits: Vec<SearchHit> = self
            .pages
            .iter()
            .filter(|(_, p)| {
                query
                    .split_whitespace()
                    .any(|w| p.content.to_lowercase().contains(&w.to_lowercase()))
            })
            .map(|(url, p)| SearchHit {
                title: p.title.clone(),
                url: url.clone(),
                description: p.content.chars().take(160).collect(),
            })
            .collect();
        let mut i = 0;
        while hits.len() < limit {
            i += 1;
            hits.push(SearchHit {
                title: format!("Result {i} for {query}"),
                url: format!("https://example.com/{slug}/{i}"),
                description: format!("A page about {query} (fake result {i})."),
            });
        }
        hits.truncate(limit);
        Ok(hits)
    }

    async fn extract(&self, url: &str) -> Result<Page, WebError> {
        if let Some(page) = self.pages.get(url) {
            return Ok(page.clone());
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(WebError(format!("invalid URL: {url}")));
        }
        Ok(Page {
            title: format!("Page at {url}"),
            content: format!("# Page at {url}\n\nDeterministic fake content for {url}."),
        })
    }
}

/// `web_search` over a backend.
pub struct WebSearchTool(pub Arc<dyn WebBackend>);

/// `web_extract` over a backend.
pub struct WebExtractTool(pub Arc<dyn WebBackend>);

#[async_trait]
impl Tool for WebSearchTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "web_search",
            "Search the web; returns titles, URLs and descriptions of the top results.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The search query."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5, "description": "Number of results."}
                },
                "required": ["query"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "web"
    }

    fn also_in(&self) -> &'static [&'static str] {
        &["search", "browser"]
    }

    async fn call(&self, args: Map<String, Value>, _cx: &ToolCallContext<'_>) -> Value {
        let Some(query) = args
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
        else {
            return json!({"error": "Error searching web: query required"});
        };
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .unwrap_or(5)
            .clamp(1, 100) as usize;
        match self.0.search(query, limit).await {
            Ok(hits) => {
                let web: Vec<Value> = hits
                    .into_iter()
                    .enumerate()
                    .map(|(i, h)| json!({"title": h.title, "url": h.url, "description": h.description, "position": i + 1}))
                    .collect();
                json!({"success": true, "data": {"web": web}})
            }
            Err(e) => json!({"error": format!("Error searching web: {e}")}),
        }
    }
}

/// Replaces inline `data:…;base64,…` images with a marker.
fn strip_base64_images(content: &str) -> String {
    let mut out = String::with_capacity(content.len());
    let mut rest = content;
    while let Some(start) = rest.find("data:image/") {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let end = after
            .find(|c: char| c == ')' || c == '"' || c == '\'' || c.is_whitespace())
            .unwrap_or(after.len());
        if after[..end].contains(";base64,") {
            out.push_str("[BASE64_IMAGE_REMOVED]");
        } else {
            out.push_str(&after[..end]);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[async_trait]
impl Tool for WebExtractTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(
            "web_extract",
            "Fetch web pages (at most 5 URLs) and return their text content.",
            json!({
                "type": "object",
                "properties": {
                    "urls": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_URLS, "description": "URLs to read."},
                    "char_limit": {"type": "integer", "minimum": 2000, "default": 15000, "description": "Maximum characters per page."}
                },
                "required": ["urls"]
            }),
        )
    }

    fn toolset(&self) -> &'static str {
        "web"
    }

    async fn call(&self, args: Map<String, Value>, _cx: &ToolCallContext<'_>) -> Value {
        let urls: Vec<&str> = match args.get("urls") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).take(MAX_URLS).collect(),
            Some(Value::String(s)) => vec![s.as_str()],
            _ => Vec::new(),
        };
        if urls.is_empty() {
            return json!({"error": "Content was inaccessible or not found"});
        }
        let limit = args
            .get("char_limit")
            .and_then(Value::as_u64)
            .unwrap_or(15_000)
            .max(2000) as usize;
        let mut results = Vec::new();
        for url in urls {
            let entry = match self.0.extract(url).await {
                Ok(page) if page.content.chars().count() > MAX_PAGE_CHARS => json!({"url": url,
                    "title": page.title, "content": "", "error": format!("Page is too large (over {MAX_PAGE_CHARS} characters)")}),
                Ok(page) => {
                    let content: String = strip_base64_images(&page.content)
                        .chars()
                        .take(limit)
                        .collect();
                    json!({"url": url, "title": page.title, "content": content, "error": null})
                }
                Err(e) => json!({"url": url, "title": "", "content": "", "error": e.to_string()}),
            };
            results.push(entry);
        }
        if results.iter().all(|r| r["error"].is_string()) {
            return json!({"error": "Content was inaccessible or not found", "results": results});
        }
        json!({"results": results})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_images_are_removed() {
        assert_eq!(
            strip_base64_images("a ![x](data:image/png;base64,AAAA) b data:image/svg c"),
            "a ![x]([BASE64_IMAGE_REMOVED]) b data:image/svg c"
        );
    }

    #[tokio::test]
    async fn fake_backend_is_deterministic() {
        let fake = FakeWebBackend::new().with_page("https://a.test/", "A", "Rust is fast");
        let hits = fake.search("rust", 3).await.unwrap();
        assert_eq!(hits.len(), 3);
        assert_eq!(hits[0].url, "https://a.test/");
        assert_eq!(hits[1].url, "https://example.com/rust/1");
        assert_eq!(fake.search("rust", 3).await.unwrap(), hits);
        assert!(fake.extract("ftp://x").await.is_err());
    }
}
