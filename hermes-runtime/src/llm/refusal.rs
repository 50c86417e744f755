//! What an inference server's error answer means for the run: the model ran out of context
//! (a model outcome), the run is misconfigured (wrong key, wrong model name, a request the
//! server cannot accept: stop at once), or the server is in trouble (retry). Recognised from
//! the bodies vLLM, SGLang, llama.cpp's server and OpenAI actually send.

/// Phrases of a context-length error, lower case. Sources (status 400 in each):
/// - vLLM: "This model's maximum context length is 4096 tokens. However, you requested 5000
///   tokens …", newer "… maximum context length is 4096 tokens and your request has 3500 input
///   tokens …", and "The decoder prompt (length 5951) is longer than the maximum model length
///   of 4096";
/// - SGLang: "The input (5000 tokens) is longer than the model's context length (4096
///   tokens)." and "Requested token count exceeds the model's maximum context length …";
/// - llama.cpp server: `"type": "exceed_context_size_error"`, "the request exceeds the
///   available context size, try increasing it";
/// - OpenAI: `"code": "context_length_exceeded"` ("This model's maximum context length is …").
const CONTEXT_MARKERS: [&str; 7] = [
    "context_length_exceeded",
    "exceed_context_size_error",
    "exceeds the available context size",
    "maximum context length",
    "longer than the model's context length",
    "longer than the maximum model length",
    "exceeds the model's maximum context length",
];

/// True when an error body says the request did not fit the model's context window.
pub(crate) fn is_context_exceeded(body: &str) -> bool {
    let lower = body.to_lowercase();
    CONTEXT_MARKERS.iter().any(|m| lower.contains(m))
}

/// Why a server refused a request that no retry can fix; each stops the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 401 or 403: the API key is missing or wrong.
    Unauthorized,
    /// 404 naming the model: the server does not serve `--openai.model_name`.
    UnknownModel,
    /// Any other 404: the URL is not an OpenAI-compatible endpoint.
    NotFound,
    /// Any other 4xx (400, 422, …): the server cannot accept what this run sends.
    Malformed,
}

impl Refusal {
    /// The refusal a non-retryable status and its body mean.
    pub(crate) fn of(status: u16, body: &str) -> Refusal {
        match status {
            401 | 403 => Refusal::Unauthorized,
            404 if body.to_lowercase().contains("model") => Refusal::UnknownModel,
            404 => Refusal::NotFound,
            _ => Refusal::Malformed,
        }
    }

    /// What to check, for the one line that stops the run.
    pub fn hint(self) -> &'static str {
        match self {
            Refusal::Unauthorized => "authentication failed: check --openai.api_key",
            Refusal::UnknownModel => {
                "the server does not serve this model: check --openai.model_name"
            }
            Refusal::NotFound => "no such endpoint: check --openai.base_url (it ends in /v1)",
            Refusal::Malformed => {
                "the server cannot accept this run's requests: check --env.extra_body, \
                 --env.max_token_length and the sampling settings"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_errors_of_each_server_are_recognised() {
        for body in [
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"object":"error","message":"The decoder prompt (length 5951) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9412,"n_ctx":8192}}"#,
            r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ] {
            assert!(is_context_exceeded(body), "{body}");
        }
        assert!(!is_context_exceeded(
            r#"{"error":{"message":"temperature must be non-negative","type":"BadRequestError"}}"#
        ));
    }

    #[test]
    fn refusals_follow_the_status_and_a_404_names_the_model_or_the_url() {
        assert_eq!(Refusal::of(401, ""), Refusal::Unauthorized);
        assert_eq!(Refusal::of(403, ""), Refusal::Unauthorized);
        assert_eq!(
            Refusal::of(404, r#"{"message":"The model `qwen` does not exist."}"#),
            Refusal::UnknownModel
        );
        assert_eq!(Refusal::of(404, "Not Found"), Refusal::NotFound);
        assert_eq!(Refusal::of(400, "bad"), Refusal::Malformed);
        assert_eq!(Refusal::of(422, "bad"), Refusal::Malformed);
    }
}
