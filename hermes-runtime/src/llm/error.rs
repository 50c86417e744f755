//! [`LlmError`]: why an inference request failed after its retries and failover, split into
//! the infrastructure's failures (worth re-running the rollout later) and the request's own.

use super::http::HttpFailure;
use super::refusal::Refusal;

/// Why an inference request failed (after retries and failover). Messages name the server by
/// its configured base URL and never contain API keys.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The server refused this request (a 4xx other than 408 and 429): the run's
    /// configuration is wrong, so it is not retried and the run stops.
    #[error("LLM server {server} rejected the request: HTTP {status}: {body} ({})", .refusal.hint())]
    Rejected {
        /// The server's base URL.
        server: String,
        /// HTTP status.
        status: u16,
        /// First part of the response body, on one line.
        body: String,
        /// What the refusal means.
        refusal: Refusal,
    },
    /// The conversation no longer fits the model's context window: the model's own outcome
    /// (its trajectory grew too long), not retried.
    #[error(
        "LLM server {server}: the conversation exceeds the model's context: HTTP {status}: {body}"
    )]
    ContextExceeded {
        /// The server's base URL.
        server: String,
        /// HTTP status.
        status: u16,
        /// First part of the response body, on one line.
        body: String,
    },
    /// Every attempt failed on connection errors, timeouts or 5xx/429 answers.
    #[error("{}", exhausted(.tried, *.servers, *.attempts, .last_server, .cause))]
    Unavailable {
        /// Base URLs of the servers tried, in the order first tried.
        tried: Vec<String>,
        /// Number of configured servers.
        servers: usize,
        /// Attempts made.
        attempts: u32,
        /// The server of the last attempt.
        last_server: String,
        /// Why the last attempt failed.
        cause: HttpFailure,
    },
    /// The server answered 2xx with something that is not the expected response.
    #[error("LLM server {server}: invalid response: {reason}")]
    Decode {
        /// The server's base URL.
        server: String,
        /// What was wrong.
        reason: String,
    },
    /// No configured server passed its start-up health check.
    #[error("{0}")]
    Unhealthy(String),
    /// No usable server configuration.
    #[error("{0}")]
    Config(String),
}

impl LlmError {
    /// True when the failure is the infrastructure's (servers unreachable, timing out,
    /// failing, answering garbage, or not configured), false when the server refused the
    /// request itself (4xx) or the model ran out of context. An infrastructure failure says
    /// nothing about the model.
    pub fn is_infrastructure(&self) -> bool {
        !matches!(
            self,
            LlmError::Rejected { .. } | LlmError::ContextExceeded { .. }
        )
    }

    /// True when the run cannot go on: every later request would be refused the same way
    /// (wrong key, unknown model, a request the server cannot accept).
    pub fn is_fatal(&self) -> bool {
        matches!(self, LlmError::Rejected { .. })
    }

    /// True for a refusal of the request's content (HTTP 400 or 422) that a request asking
    /// for `n` choices may have met because of `n`: the caller falls back to `n = 1`, where
    /// a refusal that was not about `n` comes again and stops the run as usual.
    pub fn may_refuse_n(&self) -> bool {
        matches!(
            self,
            LlmError::Rejected {
                status: 400 | 422,
                ..
            }
        )
    }
}

/// "LLM server X unreachable after 3 attempts: connection refused", or with several servers
/// "all 2 LLM servers tried (X, Y), 3 attempts failed; last: Y unreachable: …".
fn exhausted(
    tried: &[String],
    servers: usize,
    attempts: u32,
    last: &str,
    cause: &HttpFailure,
) -> String {
    let state = match cause {
        HttpFailure::Connect(_) => "unreachable",
        HttpFailure::Timeout(_)
        | HttpFailure::NoHead(_)
        | HttpFailure::Stalled(_)
        | HttpFailure::Unhealthy(_) => "not answering",
        HttpFailure::Status { .. } | HttpFailure::TooLarge { .. } | HttpFailure::Broken(_) => {
            "failing"
        }
    };
    let plural = if attempts == 1 { "" } else { "s" };
    match tried {
        [one] if servers <= 1 => {
            format!("LLM server {one} {state} after {attempts} attempt{plural}: {cause}")
        }
        [one] => format!(
            "LLM server {one} (1 of {servers} servers) {state} after {attempts} attempt{plural}: {cause}"
        ),
        many => {
            let which = if many.len() == servers {
                format!("all {servers} LLM servers")
            } else {
                format!("{} of {servers} LLM servers", many.len())
            };
            format!(
                "{which} tried ({}), {attempts} attempts failed; last: {last} {state}: {cause}",
                many.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn unavailable(tried: &[&str], servers: usize, cause: HttpFailure) -> LlmError {
        LlmError::Unavailable {
            tried: tried.iter().map(|s| s.to_string()).collect(),
            servers,
            attempts: 3,
            last_server: tried.last().unwrap().to_string(),
            cause,
        }
    }

    #[test]
    fn the_final_error_names_the_cause_in_one_line() {
        let refused = HttpFailure::Connect("connection refused".into());
        assert_eq!(
            unavailable(&["http://127.0.0.1:9/v1"], 1, refused.clone()).to_string(),
            "LLM server http://127.0.0.1:9/v1 unreachable after 3 attempts: connection refused"
        );
        assert_eq!(
            unavailable(&["http://a/v1", "http://b/v1"], 2, refused).to_string(),
            "all 2 LLM servers tried (http://a/v1, http://b/v1), 3 attempts failed; \
             last: http://b/v1 unreachable: connection refused"
        );
        assert_eq!(
            unavailable(
                &["http://a/v1"],
                1,
                HttpFailure::Timeout(Duration::from_millis(1500))
            )
            .to_string(),
            "LLM server http://a/v1 not answering after 3 attempts: no response within 1.5 s"
        );
        let rejected = LlmError::Rejected {
            server: "http://a/v1".into(),
            status: 401,
            body: "bad".into(),
            refusal: Refusal::Unauthorized,
        };
        assert_eq!(
            rejected.to_string(),
            "LLM server http://a/v1 rejected the request: HTTP 401: bad \
             (authentication failed: check --openai.api_key)"
        );
        assert!(!rejected.is_infrastructure() && rejected.is_fatal());
        assert!(unavailable(&["x"], 1, HttpFailure::Timeout(Duration::ZERO)).is_infrastructure());
    }
}
