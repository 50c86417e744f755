//! Which [`WebBackend`] `--env.web_backend` names: `fake` (canned, for tests), `tavily`
//! (`TAVILY_API_KEY`), `searxng` (`--env.web_base_url` or `SEARXNG_URL`), or `auto`, which
//! picks the first of tavily and searxng that is configured, as upstream offered the web tools
//! only when a provider key was set.

use std::sync::Arc;

use super::searxng::SearxngBackend;
use super::tavily::{TavilyBackend, TAVILY_BASE_URL};
use super::{FakeWebBackend, WebBackend, WebError};

/// The names `--env.web_backend` accepts.
pub const WEB_BACKENDS: &str = "auto, tavily, searxng, fake";

/// What the configured `web_backend` resolved to.
pub enum WebChoice {
    /// Web tools get this backend; the string says which, for the log.
    Backend(Arc<dyn WebBackend>, String),
    /// `auto` found no provider: the web tools are hidden (the string is the warning).
    Hidden(String),
}

/// Resolves `name` with `base_url` (`--env.web_backend`, `--env.web_base_url`), reading keys
/// and URLs through `lookup` (the process environment, `.env` included).
pub fn select(
    name: &str,
    base_url: Option<&str>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<WebChoice, WebError> {
    let get = |var: &str| lookup(var).filter(|v| !v.trim().is_empty());
    let tavily = |key: String| -> Result<WebChoice, WebError> {
        let url = base_url.unwrap_or(TAVILY_BASE_URL);
        let backend = TavilyBackend::new(url, key)?;
        Ok(WebChoice::Backend(
            Arc::new(backend),
            format!("tavily at {url}"),
        ))
    };
    let searxng = |url: String| -> Result<WebChoice, WebError> {
        let backend = SearxngBackend::new(&url)?;
        Ok(WebChoice::Backend(
            Arc::new(backend),
            format!("searxng at {url}"),
        ))
    };
    let searxng_url = || base_url.map(str::to_owned).or_else(|| get("SEARXNG_URL"));
    match name {
        "fake" => Ok(WebChoice::Backend(
            Arc::new(FakeWebBackend::new()),
            "fake (canned results)".into(),
        )),
        "tavily" => match get("TAVILY_API_KEY") {
            Some(key) => tavily(key),
            None => Err(WebError(
                "web_backend tavily needs TAVILY_API_KEY (export it or put it in ./.env)".into(),
            )),
        },
        "searxng" => match searxng_url() {
            Some(url) => searxng(url),
            None => Err(WebError(
                "web_backend searxng needs --env.web_base_url or SEARXNG_URL (the instance's address, e.g. http://localhost:8888)".into(),
            )),
        },
        "auto" => match (get("TAVILY_API_KEY"), searxng_url()) {
            (Some(key), _) => tavily(key),
            (None, Some(url)) => searxng(url),
            (None, None) => Ok(WebChoice::Hidden(
                "web_backend auto: no web backend is configured (no TAVILY_API_KEY, SEARXNG_URL or --env.web_base_url), so web_search and web_extract are hidden as upstream hides them without a provider key; set one, or --env.web_backend fake for canned results".into(),
            )),
        },
        other => Err(WebError(format!(
            "unknown web_backend '{other}'; available: {WEB_BACKENDS} (or register a WebBackend in code with ToolRegistry::with_web)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::extract::{RawQuery, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::{get, post};
    use axum::{Json, Router};
    use serde_json::{json, Value};

    use super::*;

    /// Requests a fake provider saw: (path, authorization header, JSON body or query).
    type Seen = Arc<Mutex<Vec<(String, Option<String>, Value)>>>;

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn auth(headers: &HeaderMap) -> Option<String> {
        headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned())
    }

    /// Speaks Tavily's documented shapes: `POST /search` → `results[{title,url,content,score}]`,
    /// `POST /extract` → `results[{url,raw_content}]` and `failed_results[{url,error}]`.
    async fn tavily(seen: Seen) -> String {
        let app = Router::new()
            .route(
                "/search",
                post(|State(seen): State<Seen>, headers: HeaderMap, Json(body): Json<Value>| async move {
                    seen.lock().unwrap().push(("/search".into(), auth(&headers), body));
                    Json(json!({"query": "q", "response_time": 0.5, "answer": null, "images": [],
                        "results": [
                            {"title": "Frames", "url": "https://a.example/frames", "content": "about frames", "score": 0.9},
                            {"title": "Other", "url": "https://b.example/x", "content": "more", "score": 0.5}
                        ]}))
                }),
            )
            .route(
                "/extract",
                post(|State(seen): State<Seen>, headers: HeaderMap, Json(body): Json<Value>| async move {
                    seen.lock().unwrap().push(("/extract".into(), auth(&headers), body.clone()));
                    let url = body["urls"][0].as_str().unwrap_or_default().to_owned();
                    if url.contains("missing") {
                        Json(json!({"results": [], "failed_results": [{"url": url, "error": "404 page"}], "response_time": 0.1}))
                    } else {
                        Json(json!({"results": [{"url": url, "raw_content": "# Page\nbody text", "images": []}], "failed_results": [], "response_time": 0.1}))
                    }
                }),
            )
            .with_state(seen);
        serve(app).await
    }

    fn backend(choice: WebChoice) -> Arc<dyn WebBackend> {
        match choice {
            WebChoice::Backend(b, _) => b,
            WebChoice::Hidden(why) => panic!("hidden: {why}"),
        }
    }

    #[tokio::test]
    async fn tavily_sends_the_documented_requests_and_maps_the_answers() {
        let seen = Seen::default();
        let url = tavily(seen.clone()).await;
        let env = |var: &str| (var == "TAVILY_API_KEY").then(|| "tvly-secret".to_owned());
        let web = backend(select("auto", Some(&url), &env).unwrap());
        let hits = web.search("frames benchmark", 1).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(
            (
                hits[0].title.as_str(),
                hits[0].url.as_str(),
                hits[0].description.as_str()
            ),
            ("Frames", "https://a.example/frames", "about frames")
        );
        let page = web.extract("https://a.example/frames").await.unwrap();
        assert_eq!(page.content, "# Page\nbody text");
        let err = web
            .extract("https://a.example/missing")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("404 page"), "{err}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0].0, "/search");
        assert_eq!(seen[0].1.as_deref(), Some("Bearer tvly-secret"));
        assert_eq!(seen[0].2["query"], "frames benchmark");
        assert_eq!(seen[0].2["max_results"], 1);
        assert_eq!(seen[1].2, json!({"urls": ["https://a.example/frames"]}));
    }

    #[tokio::test]
    async fn provider_errors_name_the_status_and_never_the_key() {
        let app = Router::new().route(
            "/search",
            post(|| async {
                (
                    StatusCode::UNAUTHORIZED,
                    "{\"detail\":{\"error\":\"Unauthorized: missing or invalid API key.\"}}",
                )
            }),
        );
        let url = serve(app).await;
        let env = |_: &str| Some("tvly-secret".to_owned());
        let web = backend(select("tavily", Some(&url), &env).unwrap());
        let err = web.search("q", 5).await.unwrap_err().to_string();
        assert!(
            err.contains("tavily answered HTTP 401") && !err.contains("tvly-secret"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn searxng_uses_the_json_api_and_refuses_extraction() {
        let seen = Seen::default();
        let app = Router::new()
            .route(
                "/search",
                get(|State(seen): State<Seen>, RawQuery(raw): RawQuery| async move {
                    let url = reqwest::Url::parse(&format!("http://x/?{}", raw.unwrap_or_default())).unwrap();
                    let q: std::collections::BTreeMap<String, String> = url.query_pairs().into_owned().collect();
                    seen.lock().unwrap().push(("/search".into(), None, json!(q)));
                    Json(json!({"query": q.get("q"), "number_of_results": 2, "answers": [], "infoboxes": [],
                        "suggestions": [], "unresponsive_engines": [],
                        "results": [
                            {"url": "https://a.example/1", "title": "One", "content": "first", "engine": "duckduckgo", "score": 1.0},
                            {"url": "https://b.example/2", "title": "Two", "engine": "bing", "score": 0.5}
                        ]}))
                }),
            )
            .with_state(seen.clone());
        let url = serve(app).await;
        let env = |var: &str| (var == "SEARXNG_URL").then(|| url.clone());
        let web = backend(select("auto", None, &env).unwrap());
        let hits = web.search("rust & tokio", 5).await.unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(
            (hits[1].title.as_str(), hits[1].description.as_str()),
            ("Two", "")
        );
        assert_eq!(
            seen.lock().unwrap()[0].2,
            json!({"q": "rust & tokio", "format": "json"})
        );
        let err = web
            .extract("https://a.example/1")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("only searches"), "{err}");
    }

    #[test]
    fn auto_without_a_provider_hides_the_tools_and_names_the_knobs() {
        let none = |_: &str| None;
        match select("auto", None, &none).unwrap() {
            WebChoice::Hidden(why) => {
                assert!(
                    why.contains("TAVILY_API_KEY") && why.contains("--env.web_backend fake"),
                    "{why}"
                )
            }
            WebChoice::Backend(..) => panic!("expected hidden"),
        }
        let missing = |name| select(name, None, &none).err().unwrap().to_string();
        assert!(missing("tavily").contains("needs TAVILY_API_KEY"));
        assert!(missing("searxng").contains("SEARXNG_URL"));
        assert!(missing("bing").contains("available: auto, tavily, searxng, fake"));
    }
}
