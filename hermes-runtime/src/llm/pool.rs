//! The inference servers both clients share ([`ServerPool`]): per-server train/eval request
//! limits scaled by the environment's weight, least-loaded choice, health (marked down after
//! consecutive faults, probed back after a cool-down), the server's `Retry-After`, and the one
//! retry loop with failover that every chat and `/generate` request goes through.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::{info, warn};

use super::health::{Failover, Health, Standing};
use super::http::{self, HttpFailure, RequestUrl, StreamLimits, Target};
use super::liveness::{InferenceDown, Liveness};
use super::refusal::{is_context_exceeded, Refusal};
use super::route::{choose, weighted, Candidate, Group};
use super::watch::HealthWatch;
use super::{LlmError, RequestStats, RetryPolicy, Split};
use crate::config::{ApiServerConfig, ServerType};

/// Longest wait for a start-up health check answer.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(10);
/// At most one "retrying" line per this interval (the others are counted in the next one).
const RETRY_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// One configured server, as the clients address it.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// `base_url` without a trailing slash, e.g. `http://host:9001/v1`.
    pub base: String,
    /// Model name sent as `model`.
    pub model: String,
    /// Server protocol.
    pub kind: ServerType,
    api_key: Option<String>,
    timeout: Duration,
    /// The limits of streamed chat requests; `None` when chat answers are not streamed.
    pub stream: Option<StreamLimits>,
    /// `--openai.head_timeout`: also how often an unstreamed request's wait checks the
    /// server's health ([`HealthWatch`]).
    pub head_timeout: Duration,
    /// The server's health as waiting unstreamed requests see it.
    pub watch: HealthWatch,
    health_check: bool,
    limits: [usize; 2],
    /// `{base}/chat/completions` and `{root}/generate`, parsed once (a URL string is parsed
    /// again by every request made with it); `None` when they do not parse, and the request
    /// then reports that as before.
    per_turn: Option<PerTurnUrls>,
}

/// The URLs every turn requests, parsed.
#[derive(Debug)]
struct PerTurnUrls {
    chat: reqwest::Url,
    generate: reqwest::Url,
}

impl Endpoint {
    /// The server root without `/v1`, where vLLM and SGLang serve `/generate` and `/health`.
    pub fn root(&self) -> &str {
        self.base.strip_suffix("/v1").unwrap_or(&self.base)
    }

    /// `url` on this server with its key and per-request timeout.
    pub fn target<'a>(&'a self, url: &'a str) -> Target<'a> {
        Target {
            url: RequestUrl::Text(url.into()),
            api_key: self.api_key.as_deref(),
            timeout: self.timeout,
        }
    }

    /// `{base_url}/chat/completions` on this server ([`Self::target`]).
    pub fn chat_target(&self) -> Target<'_> {
        self.per_turn_target(|u| &u.chat, "/chat/completions", &self.base)
    }

    /// `{root}/generate` on this server ([`Self::target`]).
    pub fn generate_target(&self) -> Target<'_> {
        self.per_turn_target(|u| &u.generate, "/generate", self.root())
    }

    fn per_turn_target(
        &self,
        parsed: fn(&PerTurnUrls) -> &reqwest::Url,
        path: &str,
        base: &str,
    ) -> Target<'_> {
        let url = match &self.per_turn {
            Some(urls) => RequestUrl::Parsed(parsed(urls)),
            None => RequestUrl::Text(format!("{base}{path}").into()),
        };
        Target {
            url,
            api_key: self.api_key.as_deref(),
            timeout: self.timeout,
        }
    }
}

/// Why one attempt failed, as the attempt closure reports it.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// The HTTP exchange failed.
    Http(HttpFailure),
    /// A 2xx answer that is not the expected response.
    Decode(String),
}

impl From<HttpFailure> for AttemptError {
    fn from(f: HttpFailure) -> Self {
        AttemptError::Http(f)
    }
}

#[derive(Debug, Default)]
struct EndpointState {
    in_use: [usize; 2],
    health: Health,
    paced_until: Option<Instant>,
    stats: RequestStats,
}

/// The inference servers of a run, shared by the chat client, the `/generate` client and the
/// LLM judge so that their request limits, health and statistics are one.
pub struct ServerPool {
    http: reqwest::Client,
    endpoints: Vec<Arc<Endpoint>>,
    state: Mutex<Vec<EndpointState>>,
    changed: Notify,
    next: AtomicUsize,
    weight: AtomicU64,
    retry: RetryPolicy,
    failover: Failover,
    retry_log: Throttle,
    /// The first refusal that stops the run (see [`LlmError::is_fatal`]); once set, no request
    /// is sent any more.
    fatal: OnceLock<LlmError>,
    fatal_raised: Notify,
    liveness: Mutex<Liveness>,
}

impl std::fmt::Debug for ServerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPool")
            .field(
                "servers",
                &self.endpoints.iter().map(|e| &e.base).collect::<Vec<_>>(),
            )
            .field("retry", &self.retry)
            .field("failover", &self.failover)
            .finish()
    }
}

fn split_index(split: Split) -> usize {
    match split {
        Split::Train => 0,
        Split::Eval => 1,
    }
}

impl ServerPool {
    /// A pool of `configs`; each needs a `base_url`.
    pub fn new(
        configs: &[ApiServerConfig],
        retry: RetryPolicy,
        failover: Failover,
    ) -> Result<Self, LlmError> {
        if configs.is_empty() {
            return Err(LlmError::Config("no inference server configured".into()));
        }
        let endpoints = configs
            .iter()
            .map(|c| endpoint(c).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        // As many idle connections per host as requests may be in flight to one server: with
        // fewer, every turn of thousands of live rollouts would reconnect most of them.
        let idle = configs
            .iter()
            .map(|c| c.num_max_requests_at_once.max(c.num_requests_for_eval))
            .max()
            .map_or(IDLE_PER_HOST, |n| (n.max(1) as usize).max(IDLE_PER_HOST));
        Ok(ServerPool {
            http: http_client(idle)?,
            state: Mutex::new(endpoints.iter().map(|_| EndpointState::default()).collect()),
            endpoints,
            changed: Notify::new(),
            next: AtomicUsize::new(0),
            weight: AtomicU64::new(1f64.to_bits()),
            retry: RetryPolicy {
                attempts: retry.attempts.max(1),
                ..retry
            },
            failover,
            retry_log: Throttle::default(),
            fatal: OnceLock::new(),
            fatal_raised: Notify::new(),
            liveness: Mutex::default(),
        })
    }

    /// Number of servers.
    pub fn server_count(&self) -> usize {
        self.endpoints.len()
    }

    /// Base URLs of the servers that are currently marked down.
    pub fn down_servers(&self) -> Vec<String> {
        let now = Instant::now();
        let state = self.lock();
        self.endpoints
            .iter()
            .zip(state.iter())
            .filter(|(_, s)| s.health.standing(now) != Standing::Up)
            .map(|(e, _)| e.base.clone())
            .collect()
    }

    /// Sets this environment's share of every server (`env_weight` from `/status-env`): at most
    /// about `limit × weight` requests (at least one) run on a server at once.
    pub fn set_weight(&self, weight: f64) {
        let w = if weight.is_finite() {
            weight.clamp(0.0, 1.0)
        } else {
            1.0
        };
        self.weight.store(w.to_bits(), Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// Request statistics of every server (in configuration order) since the last call, which
    /// clears them.
    pub fn take_request_stats(&self) -> Vec<RequestStats> {
        self.lock()
            .iter_mut()
            .map(|s| std::mem::take(&mut s.stats))
            .collect()
    }

    /// Checks every server configured with `health_check` (`GET /health` on vLLM/SGLang, falling
    /// back to `GET /v1/models` where there is no `/health`; `GET /v1/models` elsewhere). A server
    /// that fails is marked down with one WARN line; when no server is usable the run cannot
    /// start and the error names each server's failure.
    pub async fn check_health(&self) -> Result<(), LlmError> {
        let checked: Vec<&Arc<Endpoint>> =
            self.endpoints.iter().filter(|e| e.health_check).collect();
        let results = futures::future::join_all(checked.iter().map(|e| self.health_of(e))).await;
        let failures: Vec<(usize, String)> = checked
            .iter()
            .zip(results)
            .filter_map(|(e, r)| r.err().map(|why| (self.index_of(e), why)))
            .collect();
        if !failures.is_empty() && failures.len() == self.endpoints.len() {
            let each: Vec<String> = failures
                .iter()
                .map(|(i, why)| format!("{}: {why}", self.endpoints[*i].base))
                .collect();
            return Err(LlmError::Unhealthy(format!(
                "no LLM server passed its health check ({}); check --openai.base_url, or skip the \
                 check with --openai.health_check false",
                each.join("; ")
            )));
        }
        let now = Instant::now();
        let mut state = self.lock();
        for (i, why) in failures {
            state[i].health.mark_down(now, &self.failover);
            warn!(
                "LLM server {} failed its health check ({why}): marked down; one request probes it \
                 again after {:?} (--env.llm_server_cooldown)",
                self.endpoints[i].base, self.failover.cooldown
            );
        }
        Ok(())
    }

    async fn health_of(&self, e: &Endpoint) -> Result<(), String> {
        if matches!(e.kind, ServerType::Vllm | ServerType::Sglang) {
            let url = format!("{}/health", e.root());
            match self.health_get(e, &url).await {
                Ok(()) => return Ok(()),
                Err(HttpFailure::Status { status: 404, .. }) => {}
                Err(f) => return Err(format!("GET {url}: {f}")),
            }
        }
        let url = format!("{}/models", e.base);
        self.health_get(e, &url)
            .await
            .map_err(|f| format!("GET {url}: {f}"))
    }

    async fn health_get(&self, e: &Endpoint, url: &str) -> Result<(), HttpFailure> {
        let to = Target {
            timeout: e.timeout.min(HEALTH_TIMEOUT),
            ..e.target(url)
        };
        http::get(&self.http, to).await.map(drop)
    }

    fn index_of(&self, e: &Arc<Endpoint>) -> usize {
        self.endpoints
            .iter()
            .position(|x| Arc::ptr_eq(x, e))
            .expect("an endpoint of this pool")
    }

    /// The shared HTTP client.
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The configured servers.
    pub(crate) fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.endpoints
    }

    /// The refusal that stopped the run (a wrong key, an unknown model, a request the server
    /// cannot accept), if one came.
    pub fn fatal(&self) -> Option<&LlmError> {
        self.fatal.get()
    }

    /// Inference is down: for `grace` no attempt got an answer while attempts kept failing on
    /// connection errors, timeouts or 5xx.
    pub fn inference_down(&self, grace: Duration) -> Option<InferenceDown> {
        self.liveness().down(Instant::now(), grace)
    }

    fn liveness(&self) -> MutexGuard<'_, Liveness> {
        self.liveness.lock().expect("liveness lock poisoned")
    }

    /// Completes with the refusal that stops the run, once one comes.
    pub async fn fatal_raised(&self) -> LlmError {
        loop {
            let raised = self.fatal_raised.notified();
            tokio::pin!(raised);
            raised.as_mut().enable();
            if let Some(e) = self.fatal.get() {
                return e.clone();
            }
            raised.await;
        }
    }

    /// Records a refusal that stops the run: every later request fails with it unsent, and
    /// the modes end the run with it as their error (the one line the binary prints).
    fn raise_fatal(&self, e: &LlmError) {
        if self.fatal.set(e.clone()).is_ok() {
            self.fatal_raised.notify_waiters();
        }
    }

    /// Runs one request: `attempt` is tried on a server, and after a retryable failure again on
    /// another server when there is one, up to the policy's attempts with its backoff between
    /// them. A 4xx other than 408/429 fails at once; the final error names the cause.
    /// A refusal `spare` accepts does not stop the run: the caller has a plainer request to
    /// fall back to (a group's `n` request).
    pub(crate) async fn call_sparing<T, F, Fut>(
        &self,
        split: Split,
        spare: impl Fn(&LlmError) -> bool,
        mut attempt: F,
    ) -> Result<T, LlmError>
    where
        F: FnMut(Arc<Endpoint>) -> Fut,
        Fut: Future<Output = Result<T, AttemptError>>,
    {
        if let Some(e) = self.fatal.get() {
            return Err(e.clone());
        }
        let mut first_slot_at = None;
        let mut tried: Vec<usize> = Vec::new();
        let mut avoid = None;
        let mut n = 1;
        loop {
            let mut slot = self.acquire(split, avoid).await;
            let started = *first_slot_at.get_or_insert_with(Instant::now);
            let index = slot.index;
            if !tried.contains(&index) {
                tried.push(index);
            }
            let outcome = attempt(Arc::clone(&self.endpoints[index])).await;
            slot.settle(&outcome);
            drop(slot);
            let failure = match outcome {
                Ok(value) => {
                    self.record_stats(index, split, started, n);
                    return Ok(value);
                }
                Err(AttemptError::Decode(reason)) => {
                    self.record_stats(index, split, started, n);
                    return Err(LlmError::Decode {
                        server: self.endpoints[index].base.clone(),
                        reason,
                    });
                }
                Err(AttemptError::Http(f)) => f,
            };
            if !failure.retryable() || n >= self.retry.attempts {
                self.record_stats(index, split, started, n);
                let e = self.final_error(&tried, index, n, failure);
                if e.is_fatal() && !spare(&e) {
                    self.raise_fatal(&e);
                }
                return Err(e);
            }
            let wait = self.retry.backoff(n);
            self.log_retry(index, n, &failure, wait);
            tokio::time::sleep(wait).await;
            avoid = Some(index);
            n += 1;
        }
    }

    fn final_error(&self, tried: &[usize], last: usize, attempts: u32, f: HttpFailure) -> LlmError {
        let server = self.endpoints[last].base.clone();
        match f {
            HttpFailure::Status { status, body, .. } if is_context_exceeded(&body) => {
                LlmError::ContextExceeded {
                    server,
                    status,
                    body,
                }
            }
            HttpFailure::Status { status, body, .. } if !http::retryable_status(status) => {
                LlmError::Rejected {
                    server,
                    status,
                    refusal: Refusal::of(status, &body),
                    body,
                }
            }
            cause => LlmError::Unavailable {
                tried: tried
                    .iter()
                    .map(|&i| self.endpoints[i].base.clone())
                    .collect(),
                servers: self.endpoints.len(),
                attempts,
                last_server: server,
                cause,
            },
        }
    }

    fn log_retry(&self, index: usize, n: u32, failure: &HttpFailure, wait: Duration) {
        if let Some(hidden) = self.retry_log.allow(Instant::now()) {
            let others = if self.endpoints.len() > 1 {
                " (on another server when one is up)"
            } else {
                ""
            };
            let hidden = if hidden > 0 {
                format!("; {hidden} more retries since the last such line")
            } else {
                String::new()
            };
            warn!(
                "LLM request to {} failed (attempt {n} of {}): {failure}; retrying in {wait:.1?}{others} \
                 (--env.llm_retries){hidden}",
                self.endpoints[index].base, self.retry.attempts
            );
        }
    }

    fn announce_down(&self, endpoint: &Endpoint, last: &HttpFailure) {
        let routing = if self.endpoints.len() > 1 {
            format!(
                "requests go to the other servers while one is up, and one probes it again after \
                 {:?} (--env.llm_server_cooldown)",
                self.failover.cooldown
            )
        } else {
            "it is the only server, so requests keep trying it".to_owned()
        };
        warn!(
            "LLM server {} marked down after {} consecutive failures (last: {last}); {routing}",
            endpoint.base, self.failover.failures_to_mark_down
        );
    }

    fn record_stats(&self, index: usize, split: Split, started: Instant, attempts: u32) {
        self.lock()[index]
            .stats
            .record(split == Split::Eval, started.elapsed(), attempts);
    }

    /// Waits (on the pool's change notification or a server's `Retry-After`, never polling) for
    /// a request slot; `avoid` is the server that just failed.
    async fn acquire(&self, split: Split, avoid: Option<usize>) -> Slot<'_> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.try_pick(split, avoid, Instant::now()) {
                Ok(slot) => return slot,
                Err(None) => changed.await,
                Err(Some(until)) => {
                    tokio::select! {
                        _ = changed => {}
                        _ = tokio::time::sleep_until(until.into()) => {}
                    }
                }
            }
        }
    }

    /// A slot on the best server now (see [`choose`]), or how long to wait (`None`: until
    /// something changes).
    fn try_pick(
        &self,
        split: Split,
        avoid: Option<usize>,
        now: Instant,
    ) -> Result<Slot<'_>, Option<Instant>> {
        let mut state = self.lock();
        let count = self.endpoints.len();
        let avoid = avoid.filter(|_| count > 1);
        let weight = f64::from_bits(self.weight.load(Ordering::Relaxed));
        let s = split_index(split);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let candidates: Vec<Candidate> = (0..count)
            .map(|k| (start + k) % count)
            .map(|i| {
                let st = &state[i];
                Candidate {
                    index: i,
                    group: Group::of(st.health.standing(now), Some(i) == avoid),
                    free: weighted(self.endpoints[i].limits[s], weight)
                        .saturating_sub(st.in_use[s]),
                    paced_until: st.paced_until.filter(|&t| t > now),
                }
            })
            .collect();
        let (index, group) = choose(&candidates)?;
        let st = &mut state[index];
        st.in_use[s] += 1;
        let probe = group == Group::ProbeDue;
        if probe {
            st.health.start_probe();
        }
        Ok(Slot {
            pool: self,
            index,
            split,
            probe,
            settled: false,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<EndpointState>> {
        self.state.lock().expect("server pool lock poisoned")
    }
}

fn endpoint(c: &ApiServerConfig) -> Result<Endpoint, LlmError> {
    let base = c.base_url().ok_or_else(|| {
        LlmError::Config(
            "--openai.base_url is not set (e.g. http://localhost:9001/v1); or run with --testing true \
             to use the embedded scripted server"
                .into(),
        )
    })?;
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let per_turn = reqwest::Url::parse(&format!("{base}/chat/completions"))
        .and_then(|chat| {
            Ok(PerTurnUrls {
                chat,
                generate: reqwest::Url::parse(&format!("{root}/generate"))?,
            })
        })
        .ok();
    Ok(Endpoint {
        per_turn,
        base: base.to_owned(),
        model: c.model_name.clone(),
        kind: c.server_type,
        api_key: c.resolved_api_key(),
        timeout: Duration::from_secs(c.timeout.max(1) as u64),
        head_timeout: Duration::from_secs(c.head_timeout.max(1) as u64),
        watch: HealthWatch::default(),
        stream: c.stream.then(|| StreamLimits {
            head: Duration::from_secs(c.head_timeout.max(1) as u64),
            idle: Duration::from_secs(c.idle_timeout.max(1) as u64),
        }),
        health_check: c.health_check,
        limits: [
            c.num_max_requests_at_once.max(1) as usize,
            c.num_requests_for_eval.max(1) as usize,
        ],
    })
}

/// TCP keepalive of the inference connections: probes after this long without traffic, every
/// [`KEEPALIVE_INTERVAL`], [`KEEPALIVE_PROBES`] of them unanswered and the connection fails. A
/// server host that drops off the network mid-request (power loss, a partition: no reset ever
/// comes) is found in about half a minute, also for an unstreamed `/generate`; a busy server's
/// kernel answers the probes, so a long generation is never cut by them.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 3;

/// Idle connections kept per host at least.
const IDLE_PER_HOST: usize = 256;

/// The HTTP client shared by the inference clients: rustls with the ring provider, a 30 s
/// connect timeout, TCP keepalive and an idle pool of `idle` connections per host.
fn http_client(idle: usize) -> Result<reqwest::Client, LlmError> {
    crate::tls::client_builder()
        .connect_timeout(Duration::from_secs(30))
        .tcp_keepalive(KEEPALIVE_IDLE)
        .tcp_keepalive_interval(KEEPALIVE_INTERVAL)
        .tcp_keepalive_retries(KEEPALIVE_PROBES)
        .pool_max_idle_per_host(idle)
        .build()
        .map_err(|e| LlmError::Config(format!("HTTP client: {e}")))
}

/// One request's hold on a server: released (and waiters woken) when dropped.
struct Slot<'p> {
    pool: &'p ServerPool,
    index: usize,
    split: Split,
    probe: bool,
    settled: bool,
}

impl Slot<'_> {
    /// Records what the attempt says about the server's health: any HTTP answer means it is
    /// up; a connection error, timeout or 5xx counts towards marking it down; a `Retry-After`
    /// paces it.
    fn settle<T>(&mut self, outcome: &Result<T, AttemptError>) {
        self.settled = true;
        let pool = self.pool;
        let endpoint = &pool.endpoints[self.index];
        let now = Instant::now();
        let mut state = pool.lock();
        let st = &mut state[self.index];
        let failure = match outcome {
            Err(AttemptError::Http(f)) => Some(f),
            _ => None,
        };
        if let Some(HttpFailure::Status {
            retry_after: Some(wait),
            ..
        }) = failure
        {
            st.paced_until = Some(now + *wait);
        }
        match failure {
            Some(f) if f.is_server_fault() => {
                pool.liveness()
                    .faulted(now, format!("{}: {f}", endpoint.base));
                if st.health.faulted(now, &pool.failover) {
                    pool.announce_down(endpoint, f);
                }
            }
            _ => {
                pool.liveness().answered();
                if let Some(down_for) = st.health.answered(now) {
                    info!(
                        "LLM server {} is back up after {:.0?} down",
                        endpoint.base, down_for
                    );
                }
            }
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        {
            let mut state = self.pool.lock();
            let st = &mut state[self.index];
            st.in_use[split_index(self.split)] -= 1;
            if self.probe && !self.settled {
                st.health.probe_abandoned();
            }
        }
        self.pool.changed.notify_waiters();
    }
}

/// Lets a repeated log line through at most once per [`RETRY_LOG_INTERVAL`], counting the
/// ones held back.
#[derive(Debug, Default)]
struct Throttle {
    last: Mutex<Option<Instant>>,
    held_back: AtomicU64,
}

impl Throttle {
    /// `Some(lines held back since the last one)` when a line may be written now.
    fn allow(&self, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().expect("throttle lock poisoned");
        match *last {
            Some(t) if now.duration_since(t) < RETRY_LOG_INTERVAL => {
                self.held_back.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.held_back.swap(0, Ordering::Relaxed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_of(target: Target<'_>) -> String {
        match target.url {
            RequestUrl::Parsed(url) => format!("parsed {url}"),
            RequestUrl::Text(url) => format!("text {url}"),
        }
    }

    #[test]
    fn the_per_turn_urls_are_parsed_once_and_a_bad_base_is_left_to_the_request() {
        let mut config = ApiServerConfig {
            base_url: Some("http://h:9/v1/".into()),
            ..Default::default()
        };
        let e = endpoint(&config).unwrap();
        assert_eq!(
            url_of(e.chat_target()),
            "parsed http://h:9/v1/chat/completions"
        );
        assert_eq!(url_of(e.generate_target()), "parsed http://h:9/generate");
        config.base_url = Some("not a url".into());
        let e = endpoint(&config).unwrap();
        assert_eq!(url_of(e.chat_target()), "text not a url/chat/completions");
        assert_eq!(url_of(e.generate_target()), "text not a url/generate");
    }

    #[test]
    fn the_retry_line_is_throttled_and_counts_what_it_held_back() {
        let t = Throttle::default();
        let t0 = Instant::now();
        assert_eq!(t.allow(t0), Some(0));
        assert_eq!(t.allow(t0 + Duration::from_secs(1)), None);
        assert_eq!(t.allow(t0 + Duration::from_secs(2)), None);
        assert_eq!(t.allow(t0 + RETRY_LOG_INTERVAL), Some(2));
    }
}
