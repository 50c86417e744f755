//! The serve loop keeps groups it could not deliver and resends them once the trajectory API
//! answers again: an in-process API stub fails every `/scored_data` with 503 for a while; no
//! finished group is lost, the late ones are counted as resent, and the loop stops when the
//! stub reports the trainer past `total_steps`. A group still on its way to the API counts
//! against the off-policy cap, like a running worker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use hermes_env::prelude::*;
use hermes_env::testing::{Reply, ScriptedServer};
use hermes_env::tools::ToolRegistry;
use hermes_runtime::llm::{ChatTokenizer, GenerateClient, LlmClient, Phase2, RetryPolicy};
use hermes_runtime::modes::{run_serve, Runtime, ServeOptions, TokenSource};
use hermes_runtime::sandbox::LocalProvider;
use serde_json::Value;

#[derive(Debug, Clone, Serialize)]
struct Item {
    id: usize,
}

/// One-turn tasks rewarded by item id.
#[hermes_env(name = "resend-test", toolsets = ["file"], max_agent_turns = 2, main = false)]
struct Resend {
    next: usize,
}

#[hermes_env::hooks]
impl Resend {
    async fn get_next_item(&mut self) -> Option<Item> {
        self.next += 1;
        Some(Item { id: self.next })
    }

    fn format_prompt(&self, item: &Item) -> String {
        format!("Task {}", item.id)
    }

    async fn compute_reward(&self, item: &Item, _: &AgentResult, _: &ToolContext) -> Result<f64> {
        Ok(item.id as f64)
    }
}

/// `/scored_data` requests the stub refuses before it accepts: three attempts for each of
/// eight sends.
const OUTAGE: u64 = 24;

struct Stub {
    failures_left: AtomicU64,
    refused: AtomicU64,
    accepted: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelivered_groups_are_resent_when_the_api_answers_again() {
    // Enough refusals that the first send fails all three of its attempts however many other
    // sends' attempts arrive between them (with 6 a loaded machine had three sends in flight,
    // each refused twice and accepted on its third attempt: nothing to resend).
    let stub = Arc::new(Stub {
        failures_left: AtomicU64::new(OUTAGE),
        refused: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
    });
    let app = Router::new()
        .route(
            "/register-env",
            post(|| async {
                Json(json!({"status": "success", "env_id": 0, "wandb_name": "resend-test_0",
                    "checkpoint_dir": "", "starting_step": 0, "checkpoint_interval": 0, "num_steps": 5}))
            }),
        )
        .route(
            "/info",
            get(|| async { Json(json!({"batch_size": 8, "max_token_len": -1})) }),
        )
        .route(
            "/disconnect-env",
            post(|| async { Json(json!({"status": "success"})) }),
        )
        .route(
            "/status-env",
            get(
                |axum::extract::State(s): axum::extract::State<Arc<Stub>>| async move {
                    let step = if s.accepted.load(Ordering::SeqCst) >= 6 { 9 } else { 0 };
                    Json(json!({"current_step": step, "queue_size": 0,
                        "unallocated_fraction": 1.0, "self_queue_size": 0, "max_group_size": 2,
                        "env_weight": 1.0}))
                },
            ),
        )
        .route(
            "/scored_data",
            post(
                |axum::extract::State(s): axum::extract::State<Arc<Stub>>| async move {
                    let left = s.failures_left.load(Ordering::SeqCst);
                    if left > 0 {
                        s.failures_left.store(left - 1, Ordering::SeqCst);
                        s.refused.fetch_add(1, Ordering::SeqCst);
                        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({})));
                    }
                    s.accepted.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::OK, Json(json!({"status": "received"})))
                },
            ),
        )
        .with_state(Arc::clone(&stub));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let api_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let summary = serve(hermes_runtime::config::HermesEnvConfig {
        group_size: 2,
        max_num_workers: 2,
        use_wandb: false,
        rollout_server_url: api_url,
        total_steps: 5,
        steps_per_eval: 0,
        ensure_scores_are_not_same: false,
        ..Default::default()
    })
    .await;
    assert!(
        stub.refused.load(Ordering::SeqCst) >= OUTAGE,
        "the outage was hit"
    );
    assert_eq!(summary.groups_lost, 0, "{summary:?}");
    assert!(summary.groups_resent >= 1, "{summary:?}");
    assert_eq!(
        summary.groups_sent as u64,
        stub.accepted.load(Ordering::SeqCst),
        "every accepted group is counted once: {summary:?}"
    );
    assert_eq!(summary.final_step, 9);
}

/// A trajectory API that takes a second to answer each `/scored_data`: the loop ticks ten
/// times meanwhile, with every finished group still in flight.
struct SlowStub {
    received: AtomicU64,
    accepted: AtomicU64,
    polls_after_full: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_in_flight_count_against_the_off_policy_cap() {
    let stub = Arc::new(SlowStub {
        received: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
        polls_after_full: AtomicU64::new(0),
    });
    let app = Router::new()
        .route(
            "/register-env",
            post(|| async {
                Json(json!({"status": "success", "env_id": 0, "wandb_name": "resend-test_0",
                    "checkpoint_dir": "", "starting_step": 0, "checkpoint_interval": 0, "num_steps": 3}))
            }),
        )
        .route(
            "/info",
            get(|| async { Json(json!({"batch_size": 4, "max_token_len": -1})) }),
        )
        .route(
            "/disconnect-env",
            post(|| async { Json(json!({"status": "success"})) }),
        )
        .route(
            "/status-env",
            get(
                |axum::extract::State(s): axum::extract::State<Arc<SlowStub>>| async move {
                    let queued = s.accepted.load(Ordering::SeqCst);
                    // Paused on a full queue for a while, then the trainer is past total_steps.
                    let step = if queued >= 6 && s.polls_after_full.fetch_add(1, Ordering::SeqCst) >= 10 {
                        9
                    } else {
                        0
                    };
                    Json(json!({"current_step": step, "queue_size": queued,
                        "unallocated_fraction": 1.0, "self_queue_size": queued,
                        "max_group_size": 2, "env_weight": 1.0}))
                },
            ),
        )
        .route(
            "/scored_data",
            post(
                |axum::extract::State(s): axum::extract::State<Arc<SlowStub>>| async move {
                    s.received.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    s.accepted.fetch_add(1, Ordering::SeqCst);
                    Json(json!({"status": "received"}))
                },
            ),
        )
        .with_state(Arc::clone(&stub));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let api_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    // Batch 4, groups of 2, 3 batches off-policy: at most 6 groups queued or on their way.
    let summary = serve(hermes_runtime::config::HermesEnvConfig {
        group_size: 2,
        max_num_workers: 16,
        max_batches_offpolicy: 3,
        use_wandb: false,
        rollout_server_url: api_url,
        total_steps: 3,
        steps_per_eval: 0,
        ensure_scores_are_not_same: false,
        ..Default::default()
    })
    .await;
    assert_eq!(
        stub.received.load(Ordering::SeqCst),
        6,
        "no worker started while sent groups filled the cap: {summary:?}"
    );
    assert_eq!(summary.groups_sent, 6, "{summary:?}");
    assert_eq!(summary.final_step, 9);
}

/// Runs `Resend` under serve with `config` (its `rollout_server_url` the test's API stub)
/// against a scripted LLM server, until it stops (60 s at most).
async fn serve(
    config: hermes_runtime::config::HermesEnvConfig,
) -> hermes_runtime::modes::ServeSummary {
    let server = ScriptedServer::start_with_tokenizer(
        |_: &Value| Reply::text("ok"),
        false,
        Arc::new(ChatTokenizer::builtin()),
    )
    .await
    .unwrap();
    let servers = vec![hermes_runtime::config::ApiServerConfig {
        base_url: Some(server.base_url()),
        server_type: hermes_runtime::config::ServerType::Vllm,
        ..Default::default()
    }];
    let config = Arc::new(config);
    let fast = RetryPolicy {
        attempts: 3,
        base: Duration::from_millis(5),
        cap: Duration::from_millis(20),
    };
    let tools = ToolRegistry::builtin()
        .resolve(Some(&["file".into()]), None)
        .unwrap()
        .0;
    let rt = Runtime::builder(
        Arc::clone(&config),
        LlmClient::new(&servers, 8, fast).unwrap(),
        Arc::new(LocalProvider::new().unwrap()),
        tools,
    )
    .tokens(TokenSource::Managed(Arc::new(Phase2 {
        client: GenerateClient::new(&servers, fast).unwrap(),
        tokenizer: Arc::clone(server.tokenizer()),
        parser: hermes_runtime::parsers::get("hermes").unwrap(),
        preserve_think_blocks: false,
        mask_truncated_turns: false,
    })))
    .build();
    let env = <Resend as hermes_env::EnvDefinition>::from_config(config, Default::default());
    let mut opts = ServeOptions::new("resend-test", "scripted");
    opts.startup_delay = Duration::ZERO;
    opts.retry = fast;
    tokio::time::timeout(
        Duration::from_secs(60),
        run_serve(
            env,
            Arc::new(rt),
            opts,
            &hermes_runtime::shutdown::Shutdown::new(),
        ),
    )
    .await
    .expect("serve stops at total_steps")
    .unwrap()
}
