//! How often and how patiently a failed inference request is tried again: the attempt count,
//! the random exponential backoff between attempts, and a server's `Retry-After`.

use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::config::HermesEnvConfig;

/// The longest `Retry-After` honoured; a server asking for more is retried after this.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// Retry settings: `attempts` tries in all; before retry n the wait is uniform in
/// `[0, min(cap, base × 2^(n−1))]` (Atropos's "random exponential").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts per request (the first one included).
    pub attempts: u32,
    /// Backoff base.
    pub base: Duration,
    /// Backoff cap.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The policy of `--env.llm_retries`, `--env.llm_retry_backoff` and
    /// `--env.llm_retry_backoff_cap` (already validated as non-negative).
    pub fn from_config(env: &HermesEnvConfig) -> Self {
        RetryPolicy {
            attempts: u32::try_from(env.llm_retries.max(0))
                .unwrap_or(u32::MAX - 1)
                .saturating_add(1),
            base: Duration::from_secs_f64(env.llm_retry_backoff.max(0.0)),
            cap: Duration::from_secs_f64(env.llm_retry_backoff_cap.max(0.0)),
        }
    }

    /// The random wait before retry number `attempt` (1-based): uniform in
    /// `[0, min(cap, base × 2^(attempt−1))]`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.cap);
        ceiling.mul_f64(rand::rng().random::<f64>())
    }
}

/// A `Retry-After` header value (delay seconds or an HTTP date) as a wait from `now`, capped at
/// [`RETRY_AFTER_CAP`]; `None` when it cannot be read.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(RETRY_AFTER_CAP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates_and_is_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("3600", now), Some(RETRY_AFTER_CAP));
        let in_5s = httpdate::fmt_http_date(now + Duration::from_secs(5));
        assert_eq!(parse_retry_after(&in_5s, now), Some(Duration::from_secs(5)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(5));
        assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn backoff_stays_under_the_exponential_ceiling_and_the_cap() {
        let p = RetryPolicy {
            attempts: 5,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(250),
        };
        for _ in 0..200 {
            assert!(p.backoff(1) <= Duration::from_millis(100));
            assert!(p.backoff(2) <= Duration::from_millis(200));
            assert!(p.backoff(9) <= Duration::from_millis(250));
        }
    }

    #[test]
    fn llm_retries_counts_retries_after_the_first_attempt() {
        let env = HermesEnvConfig {
            llm_retries: 2,
            llm_retry_backoff: 0.5,
            llm_retry_backoff_cap: 4.0,
            ..Default::default()
        };
        assert_eq!(
            RetryPolicy::from_config(&env),
            RetryPolicy {
                attempts: 3,
                base: Duration::from_millis(500),
                cap: Duration::from_secs(4),
            }
        );
        let none = HermesEnvConfig {
            llm_retries: 0,
            ..Default::default()
        };
        assert_eq!(RetryPolicy::from_config(&none).attempts, 1);
    }
}
