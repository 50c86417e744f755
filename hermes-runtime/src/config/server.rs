//! `ApiServerConfig`: one inference server (`--openai.<field>`, YAML `openai:`).

use serde::{Deserialize, Serialize};

use super::env::SECONDS_MAX;
use super::flags::{FlagShape, FlagType, ScalarKind};
use super::section::config_section;

/// The inference server protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerType {
    /// Any OpenAI-compatible chat-completions server (Phase 1).
    Openai,
    /// TRL generation server.
    Trl,
    /// SGLang (native /generate with logprobs, Phase 2).
    Sglang,
    /// vLLM (native /generate with logprobs, Phase 2).
    Vllm,
}

impl FlagType for ServerType {
    const SHAPE: FlagShape = FlagShape {
        kind: ScalarKind::Choice(&["openai", "trl", "sglang", "vllm"]),
        nullable: false,
    };
}

config_section! {
    /// One inference server. A single config is one server at its `base_url` (the upstream
    /// expansion to localhost:9004-9007 is not reproduced).
    pub struct ApiServerConfig {
        /// Per-request timeout in seconds: the whole answer, queueing and generation included.
        #[range(1, SECONDS_MAX)]
        timeout: i64 = 1200,
        /// Chat completions are requested as a stream of server-sent events (vLLM, SGLang, llama.cpp's server and OpenAI send the response head at once, then one chunk per step), so a server that stalls is told from one still generating (--openai.head_timeout, --openai.idle_timeout); false for a server that cannot stream, which is then bounded by --openai.timeout alone.
        stream: bool = true,
        /// Seconds a streamed chat request waits for the response head (status and headers, which servers send before they generate): a server that accepts a request and does not answer is given up on after this and the request retried. Phase 2's unstreamed /generate checks the server's /health this often (each check bounded by it too) while it waits, and is given up on when the check fails.
        #[range(1, SECONDS_MAX)]
        head_timeout: i64 = 30,
        /// Seconds a streamed answer may go without a chunk once its first chunk came (the wait for the first one is queueing and prefill, bounded by --openai.timeout alone): longer, and the answer is given up on as stalled and the request retried.
        #[range(1, SECONDS_MAX)]
        idle_timeout: i64 = 60,
        /// Concurrent training requests to this server.
        #[range(1, 1_000_000)]
        num_max_requests_at_once: i64 = 512,
        /// Concurrent evaluation requests to this server.
        #[range(1, 1_000_000)]
        num_requests_for_eval: i64 = 64,
        /// Model name sent as `model`.
        model_name: String = "default".into(),
        /// Length of the request-time buffers kept for server metrics.
        #[range(1, 10_000_000)]
        rolling_buffer_length: i64 = 1000,
        /// Server protocol: openai, trl, sglang or vllm.
        server_type: ServerType = ServerType::Openai,
        /// Phase 2 (vllm/sglang): the tokenizer of the model this server serves, a directory or hub id; it wins over --env.tokenizer_name and every server must name the same one ("none" = use --env.tokenizer_name).
        tokenizer_name: String = "none".into(),
        /// API key (empty = the OPENAI_API_KEY environment variable). Never logged or saved.
        api_key: Option<String> = Some(String::new()),
        /// Base URL of the OpenAI-compatible API, e.g. http://localhost:9001/v1.
        base_url: Option<String> = Some(String::new()),
        /// Marks servers that ignore `n` (accepted for compatibility; rollouts use n = 1).
        n_kwarg_is_ignored: bool = false,
        /// Check the server before the run (GET /health on vllm/sglang, else or without it GET /v1/models): a failing server is marked down, none passing stops the run.
        health_check: bool = true,
        /// Environment variable holding the API key when api_key is empty, e.g. OPENROUTER_API_KEY (also read from ./.env); null = OPENAI_API_KEY.
        api_key_env: Option<String> = None,
        /// Share of this server in upstream's weighted server selection (accepted for compatibility, as upstream Atropos ignores it too; requests are spread over the servers by load).
        #[range(0, 1_000_000)]
        weight: f64 = 1.0,
    }
}

impl std::fmt::Debug for ApiServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerConfig")
            .field("base_url", &self.base_url)
            .field("model_name", &self.model_name)
            .field("server_type", &self.server_type)
            .field(
                "api_key",
                &self
                    .api_key
                    .as_ref()
                    .map(|k| if k.is_empty() { "" } else { "<redacted>" }),
            )
            .finish_non_exhaustive()
    }
}

impl ApiServerConfig {
    /// The key to send: `api_key`, else the `api_key_env` variable (only that one, so another
    /// provider's key is never sent), else `OPENAI_API_KEY`, else none.
    pub fn resolved_api_key(&self) -> Option<String> {
        let variable = self.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
        self.api_key
            .clone()
            .filter(|k| !k.is_empty())
            .or_else(|| std::env::var(variable).ok().filter(|k| !k.is_empty()))
    }

    /// The one-line start-up error when the server names a key variable that is not set.
    pub fn missing_key_variable(&self) -> Option<String> {
        let variable = self.api_key_env.as_deref()?;
        self.resolved_api_key().is_none().then(|| {
            format!(
                "{variable} is not set: the server {} takes its API key from it; export it or put                  {variable}=... in ./.env (or set --openai.api_key_env / --openai.base_url for another server)",
                self.base_url().unwrap_or("(no base_url)")
            )
        })
    }

    /// `base_url` without a trailing slash, if set.
    pub fn base_url(&self) -> Option<&str> {
        self.base_url
            .as_deref()
            .map(|u| u.trim_end_matches('/'))
            .filter(|u| !u.is_empty())
    }
}

/// Un-namespaced server-manager flags (`--slurm`, `--testing`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManagerConfig {
    /// Spread servers over SLURM nodes (accepted; hermes-env uses the configured servers).
    pub slurm: bool,
    /// Replace the inference servers by the embedded scripted server.
    pub testing: bool,
    /// Largest `n` per request; bigger requests are split.
    pub max_n_completions: i64,
    /// OpenAI-compatible proxy URL (accepted for compatibility; not used).
    pub proxy_url: Option<String>,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            slurm: false,
            testing: false,
            max_n_completions: 8,
            proxy_url: None,
        }
    }
}
