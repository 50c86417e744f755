//! `DefaultServer`: an inference server an environment declares as its default, the
//! equivalent of the server list an upstream `config_init` returns (for example OpenRouter with
//! the key from `OPENROUTER_API_KEY`). YAML `openai:` entries and `--openai.*` flags are merged
//! over it field by field.

use serde_json::{Map, Value};

use super::ServerType;

/// OpenRouter's OpenAI-compatible endpoint, the server upstream Hermes environments default to.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";

/// One default inference server, declared with `#[hermes_env(servers = [...])]`. Only the
/// fields it sets differ from [`super::ApiServerConfig`]'s defaults. It holds the *name* of
/// the variable with the key, never a key.
#[derive(Debug, Clone, PartialEq)]
pub struct DefaultServer {
    fields: Map<String, Value>,
}

impl DefaultServer {
    /// A chat-completions (`server_type: openai`) server at `base_url` serving `model_name`.
    pub fn openai(base_url: &str, model_name: &str) -> Self {
        let mut fields = Map::new();
        fields.insert("base_url".into(), base_url.into());
        fields.insert("model_name".into(), model_name.into());
        fields.insert("server_type".into(), "openai".into());
        DefaultServer { fields }
    }

    /// OpenRouter serving `model_name`, keyed by `OPENROUTER_API_KEY`, no health check: what
    /// upstream Hermes `config_init`s return.
    pub fn openrouter(model_name: &str) -> Self {
        Self::openai(OPENROUTER_BASE_URL, model_name)
            .api_key_env("OPENROUTER_API_KEY")
            .health_check(false)
    }

    /// The environment variable holding the API key (read at start-up, also from `.env`).
    pub fn api_key_env(self, variable: &str) -> Self {
        self.set("api_key_env", variable.into())
    }

    /// The server protocol (vllm/sglang select Phase 2).
    pub fn server_type(self, server_type: ServerType) -> Self {
        let name = serde_json::to_value(server_type).unwrap_or(Value::Null);
        self.set("server_type", name)
    }

    /// Whether the server's health is polled (accepted for compatibility).
    pub fn health_check(self, on: bool) -> Self {
        self.set("health_check", on.into())
    }

    /// Per-request timeout in seconds.
    pub fn timeout(self, seconds: i64) -> Self {
        self.set("timeout", seconds.into())
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.fields.insert(key.into(), value);
        self
    }

    /// The fields this default sets, merged over the server defaults by the resolver.
    pub(crate) fn fields(&self) -> &Map<String, Value> {
        &self.fields
    }
}
