//! Serve-loop benchmark: groups per second the `serve` loop sustains in Phase 2 against a
//! zero-latency scripted `/generate` server and an in-process trajectory-API stub, next to a
//! baseline measured in the same run (the same groups collected by a bare worker pool with no
//! serve loop and no API); and the trajectory-API client's cost per group (serialise, gzip,
//! POST, retry bookkeeping) next to a bare reqwest POST of the pre-serialised body.
//!
//! Run: `cargo bench --bench serve` (add `-- --quick` for a short run).

use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use hermes_env::prelude::*;
use hermes_env::testing::{Reply, ScriptedServer};
use hermes_env::tools::ToolRegistry;
use hermes_runtime::atropos::TrajectoryApi;
use hermes_runtime::llm::{ChatTokenizer, GenerateClient, LlmClient, Phase2, RetryPolicy};
use hermes_runtime::modes::{collect_group, run_serve, Runtime, ServeOptions, TokenSource};
use hermes_runtime::sandbox::LocalProvider;
use serde_json::Value;

const GROUP_SIZE: i64 = 4;
const WORKERS: i64 = 64;

#[derive(Debug, Clone, Serialize)]
struct Item {
    id: usize,
}

/// One-turn tasks scored by the item id, so groups never all tie.
#[hermes_env(name = "serve-bench", toolsets = ["file"], max_agent_turns = 2, main = false)]
struct Bench {
    next: usize,
}

#[hermes_env::hooks]
impl Bench {
    async fn get_next_item(&mut self) -> Option<Item> {
        self.next += 1;
        Some(Item { id: self.next })
    }

    fn format_prompt(&self, item: &Item) -> String {
        format!("Task {}: answer with a number.", item.id)
    }

    async fn compute_reward(&self, item: &Item, run: &AgentResult, _: &ToolContext) -> Result<f64> {
        Ok(run.final_response().map_or(0.0, |r| r.len() as f64) + item.id as f64)
    }
}

/// The trajectory-API stub: registration, a queue that never fills, and a sink that counts
/// groups (decompressing gzip bodies and parsing them, as the real server does). Once
/// `target` groups arrived, `/status-env` reports a step past `total_steps`.
struct Stub {
    received: AtomicU64,
    target: AtomicU64,
}

fn body_json(headers: &HeaderMap, body: &Bytes) -> Value {
    let gz = headers
        .get("content-encoding")
        .is_some_and(|v| v.to_str().unwrap_or("").contains("gzip"));
    if gz {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .expect("gzip body");
        serde_json::from_slice(&out).expect("JSON body")
    } else {
        serde_json::from_slice(body).expect("JSON body")
    }
}

async fn start_stub(stub: Arc<Stub>) -> String {
    let app = Router::new()
        .route(
            "/register-env",
            post(|| async {
                Json(json!({"status": "success", "env_id": 0, "wandb_name": "serve-bench_0",
                    "checkpoint_dir": "", "starting_step": 0, "checkpoint_interval": 0, "num_steps": 10}))
            }),
        )
        .route(
            "/disconnect-env",
            post(|| async { Json(json!({"status": "success"})) }),
        )
        .route(
            "/info",
            get(|| async { Json(json!({"batch_size": 1_000_000, "max_token_len": -1})) }),
        )
        .route(
            "/status-env",
            get(|State(s): State<Arc<Stub>>| async move {
                let done =
                    s.received.load(Ordering::Relaxed) >= s.target.load(Ordering::Relaxed);
                Json(json!({"current_step": if done { 100 } else { 0 }, "queue_size": 0,
                    "unallocated_fraction": 1.0, "self_queue_size": 0, "max_group_size": 4,
                    "env_weight": 1.0}))
            }),
        )
        .route(
            "/scored_data",
            post(
                |State(s): State<Arc<Stub>>, headers: HeaderMap, body: Bytes| async move {
                    let v = body_json(&headers, &body);
                    assert!(v.get("tokens").is_some());
                    s.received.fetch_add(1, Ordering::Relaxed);
                    Json(json!({"status": "received"}))
                },
            ),
        )
        .with_state(stub);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn runtime(server: &ScriptedServer, api_url: &str) -> anyhow::Result<Runtime> {
    let servers = vec![hermes_runtime::config::ApiServerConfig {
        base_url: Some(server.base_url()),
        server_type: hermes_runtime::config::ServerType::Vllm,
        ..Default::default()
    }];
    let config = Arc::new(hermes_runtime::config::HermesEnvConfig {
        group_size: GROUP_SIZE,
        max_num_workers: WORKERS,
        max_batches_offpolicy: 1_000_000,
        ensure_scores_are_not_same: false,
        use_wandb: false,
        rollout_server_url: api_url.to_owned(),
        total_steps: 10,
        steps_per_eval: 0,
        worker_timeout: 0.0,
        ..Default::default()
    });
    let tools = ToolRegistry::builtin()
        .resolve(Some(&["file".into()]), None)
        .map_err(anyhow::Error::msg)?
        .0;
    let llm = LlmClient::new(&servers, 8, RetryPolicy::default())?;
    Ok(
        Runtime::builder(config, llm, Arc::new(LocalProvider::new()?), tools)
            .tokens(TokenSource::Managed(Arc::new(Phase2 {
                client: GenerateClient::new(&servers, RetryPolicy::default())?,
                tokenizer: Arc::clone(server.tokenizer()),
                parser: hermes_runtime::parsers::get("hermes")?,
                preserve_think_blocks: false,
                mask_truncated_turns: false,
            })))
            .build(),
    )
}

fn bench_env(rt: &Runtime) -> Bench {
    <Bench as hermes_env::EnvDefinition>::from_config(Arc::clone(rt.config()), Default::default())
}

/// Baseline: the same groups from a bare pool of `WORKERS` concurrent `collect_group` calls.
async fn bare_pool(rt: Arc<Runtime>, groups: u64) -> Duration {
    let env = Arc::new(bench_env(&rt));
    let started = Instant::now();
    let mut joins = tokio::task::JoinSet::new();
    let mut spawned = 0;
    let mut done = 0;
    while done < groups {
        while spawned < groups && joins.len() < WORKERS as usize {
            spawned += 1;
            let (env, rt) = (Arc::clone(&env), Arc::clone(&rt));
            let item = Item {
                id: spawned as usize,
            };
            joins.spawn(async move { collect_group(&*env, &rt, item).await.result });
        }
        if let Err(failed) = joins
            .join_next()
            .await
            .expect("a worker")
            .expect("no panic")
        {
            panic!("a benchmark group failed: {:?}", failed.outcome);
        }
        done += 1;
    }
    started.elapsed()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let groups: u64 = if quick { 200 } else { 1000 };
    let posts: usize = if quick { 300 } else { 2000 };
    let server = ScriptedServer::start_with_tokenizer(
        |_: &Value| Reply::text("The answer is 42."),
        false,
        Arc::new(ChatTokenizer::builtin()),
    )
    .await?;
    let stub = Arc::new(Stub {
        received: AtomicU64::new(0),
        target: AtomicU64::new(groups),
    });
    let api_url = start_stub(Arc::clone(&stub)).await;
    let rt = Arc::new(runtime(&server, &api_url)?);

    println!("serve loop, Phase 2, group_size {GROUP_SIZE}, max_num_workers {WORKERS}, {groups} groups, zero-latency servers");
    let baseline = bare_pool(Arc::clone(&rt), groups).await;
    let base_rate = groups as f64 / baseline.as_secs_f64();
    println!("  baseline (bare worker pool, no loop, no API):  {base_rate:>8.1} groups/s");

    for tick_ms in [100u64, 10] {
        stub.received.store(0, Ordering::Relaxed);
        let rt = Arc::new(runtime(&server, &api_url)?);
        let mut opts = ServeOptions::new("serve-bench", "scripted");
        opts.startup_delay = Duration::ZERO;
        opts.tick = Duration::from_millis(tick_ms);
        let env = bench_env(&rt);
        let started = Instant::now();
        let summary = run_serve(env, rt, opts, &hermes_runtime::shutdown::Shutdown::new()).await?;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "  serve loop, tick {tick_ms:>3} ms (upstream 100 ms): {:>8.1} groups/s ({} sent in {secs:.2} s; {:.0}% of baseline)",
            summary.groups_sent as f64 / secs,
            summary.groups_sent,
            100.0 * summary.groups_sent as f64 / secs / base_rate
        );
    }

    // API client cost per group.
    let env = bench_env(&rt);
    let mut group = collect_group(&env, &rt, Item { id: 7 })
        .await
        .result
        .map_err(|f| anyhow::anyhow!("the group failed: {:?}", f.outcome))?;
    group.fill_absent_nulls();
    group.env_id = hermes_runtime::atropos::Slot::Value(0);
    let json = serde_json::to_vec(&group)?;
    let (wire, gzipped) = hermes_runtime::atropos::api::encode_body(json.clone());
    println!(
        "trajectory-API client, one group of {GROUP_SIZE} × {} tokens: {} bytes of JSON, {} on the wire (gzip {gzipped}), {posts} sequential POSTs",
        group.tokens[0].len(),
        json.len(),
        wire.len()
    );
    let api = TrajectoryApi::new(&api_url, RetryPolicy::default(), Duration::from_secs(1))?;
    let http = reqwest::Client::new();
    let url = format!("{api_url}/scored_data");
    let started = Instant::now();
    for _ in 0..posts {
        let r = http
            .post(&url)
            .header("content-type", "application/json")
            .body(json.clone())
            .send()
            .await?;
        let _: Value = r.json().await?;
    }
    let bare = started.elapsed().as_secs_f64() * 1e6 / posts as f64;
    let started = Instant::now();
    for _ in 0..posts {
        api.send(std::slice::from_ref(&group)).await?;
    }
    let client = started.elapsed().as_secs_f64() * 1e6 / posts as f64;
    let started = Instant::now();
    for _ in 0..posts {
        std::hint::black_box(serde_json::to_vec(&group)?);
    }
    let serialise = started.elapsed().as_secs_f64() * 1e6 / posts as f64;
    let started = Instant::now();
    for _ in 0..posts {
        std::hint::black_box(hermes_runtime::atropos::api::encode_body(json.clone()));
    }
    let gzip = started.elapsed().as_secs_f64() * 1e6 / posts as f64;
    println!("  baseline (bare reqwest POST of the ready JSON): {bare:>8.1} µs/group");
    println!("  of which in the client: serialise {serialise:.1} µs, gzip {gzip:.1} µs per group");
    println!(
        "  TrajectoryApi::send (serialise + gzip + POST):  {client:>8.1} µs/group (client overhead {:+.1} µs)",
        client - bare
    );
    Ok(())
}
