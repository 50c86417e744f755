//! Single-turn environments against real HTTP servers: an environment that declares no
//! toolsets offers no tools (no `tools` / `tool_choice` in the request, which plain vLLM
//! refuses as `tool_choice: auto`), creates no sandbox unless its verifier asks for one, and
//! asks for a group's answers in one request with `n = group_size` (Phase 1 and Phase 2),
//! falling back to one request per rollout when a server refuses `n` or returns fewer choices.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use common::logs::Logs;
use hermes_env::prelude::*;
use hermes_runtime::config::{ApiServerConfig, HermesEnvConfig, ServerType};
use hermes_runtime::env::{FailureKind, RewardOutcome};
use hermes_runtime::llm::{ChatTokenizer, GenerateClient, Phase2, RetryPolicy};
use hermes_runtime::modes::{collect_group, Runtime, TokenSource};
use hermes_runtime::sandbox::{LocalProvider, Sandbox, SandboxError, SandboxProvider, SandboxSpec};
use hermes_runtime::testing::{Policy, Reply, ScriptedServer};
use hermes_runtime::tools::ToolSet;
use serde_json::{json, Value};

/// A GSM8K-shaped single-turn environment: no toolsets declared, the reward read from the
/// answer text alone.
#[hermes_env(name = "single-turn", main = false)]
pub struct SingleTurn {}

#[hermes_env::hooks]
impl SingleTurn {
    async fn get_next_item(&mut self) -> Option<u32> {
        Some(2)
    }

    fn format_prompt(&self, item: &u32) -> String {
        format!("What is {item} + 2? End with #### and the number.")
    }

    async fn compute_reward(
        &self,
        item: &u32,
        run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        let answer = run.final_response().unwrap_or_default();
        Ok(if answer.ends_with(&format!("#### {}", item + 2)) {
            1.0
        } else {
            -1.0
        })
    }
}

/// The same task, verified by a command in the rollout's sandbox (as a code environment runs
/// the answer's tests): its sandbox exists for the verifier alone.
#[hermes_env(name = "sandbox-verifier", main = false)]
pub struct SandboxVerifier {}

#[hermes_env::hooks]
impl SandboxVerifier {
    async fn get_next_item(&mut self) -> Option<u32> {
        Some(2)
    }

    fn format_prompt(&self, item: &u32) -> String {
        format!("What is {item} + 2? End with #### and the number.")
    }

    async fn compute_reward(
        &self,
        _item: &u32,
        run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        let answer = run.final_response().unwrap_or_default();
        let out = ctx
            .terminal(&format!(
                "printf '%s' '{}' | grep -q '#### 4$'",
                answer.trim()
            ))
            .await?;
        Ok(if out.success() { 1.0 } else { -1.0 })
    }
}

/// Answers right and wrong in turn (every choice of an `n` request is one answer), so a
/// group's scores differ.
fn alternating() -> impl Policy {
    let k = AtomicUsize::new(0);
    move |_: &Value| {
        let right = k.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
        Reply::text(if right { "2 + 2 = 4. #### 4" } else { "#### 5" })
    }
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A `process` run of `single-turn` against `base_url` (two groups of four), with `extra`
/// flags; returns the groups written and the log lines.
async fn process(base_url: &str, extra: &[&str]) -> (Vec<Value>, Logs) {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("groups.jsonl");
    let mut flags = vec![
        "--env.total_steps",
        "2",
        "--env.group_size",
        "4",
        "--env.llm_retries",
        "0",
    ];
    flags.extend_from_slice(extra);
    let logs = Logs::default();
    {
        let _capture = logs.capture();
        common::run_process::<SingleTurn>("single-turn", base_url, &jsonl, &flags).await;
    }
    (lines(&jsonl), logs)
}

/// No toolsets declared: no tools offered, so no `tools` and no `tool_choice` in any request
/// (a plain vLLM refuses `tool_choice: auto` without tool support), said once; and each group
/// of four is one request with `n = 4`, whose four choices are four rollouts with their own
/// answers, finish reasons and rewards. `["all"]` offers every tool, as upstream's null did.
#[tokio::test]
async fn no_toolsets_means_no_tools_and_one_request_per_group() {
    let server = ScriptedServer::start_with(alternating(), true)
        .await
        .unwrap();
    let (groups, logs) = process(&server.base_url(), &[]).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one request per group");
    for body in &requests {
        assert!(body.get("tools").is_none(), "{body}");
        assert!(body.get("tool_choice").is_none(), "{body}");
        assert_eq!(body["n"], 4, "{body}");
    }
    assert_eq!(groups.len(), 2);
    for g in &groups {
        let scores: Vec<f64> = serde_json::from_value(g["scores"].clone()).unwrap();
        assert_eq!(scores, [1.0, -1.0, 1.0, -1.0], "{g}");
        assert_eq!(g["tokens"].as_array().unwrap().len(), 4);
    }
    let said = logs.lines_with("no toolsets declared: the model is offered no tools");
    assert_eq!(said.len(), 1, "{said:?}");
    let grouped = logs.lines_with("come from one request with n = 4");
    assert_eq!(grouped.len(), 1, "{grouped:?}");

    let server = ScriptedServer::start_with(alternating(), true)
        .await
        .unwrap();
    let (groups, _) = process(
        &server.base_url(),
        &["--env.enabled_toolsets", r#"["all"]"#],
    )
    .await;
    let requests = server.requests();
    // Tools offered and 30 turns allowed: not single-turn, one request per rollout.
    assert_eq!(requests.len(), 8);
    for body in &requests {
        assert_eq!(body["tool_choice"], "auto", "{body}");
        let names: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"terminal") && names.contains(&"read_file"),
            "{names:?}"
        );
        assert_eq!(body["n"], 1);
    }
    assert_eq!(groups.len(), 2);
}

/// A server that refuses `n` (HTTP 400 naming it, as an OpenAI-compatible server without `n`
/// support answers) does not stop the run: one line names the knob and every rollout then
/// asks on its own, for the rest of the run.
#[tokio::test]
async fn a_server_refusing_n_gets_one_request_per_rollout_said_once() {
    let inner = alternating();
    let policy = move |body: &Value| {
        if body["n"].as_u64().unwrap_or(1) > 1 {
            return Reply::Status(400, "n > 1 is not supported by this model".into());
        }
        inner.respond(body)
    };
    let server = ScriptedServer::start_with(policy, true).await.unwrap();
    let (groups, logs) = process(&server.base_url(), &[]).await;
    let ns: Vec<u64> = server
        .requests()
        .iter()
        .map(|b| b["n"].as_u64().unwrap())
        .collect();
    // The two groups run concurrently, so both may have sent their n request before the
    // first refusal came back; after it, one request per rollout.
    let refused = ns.iter().take_while(|&&n| n == 4).count();
    assert!((1..=2).contains(&refused), "{ns:?}");
    assert_eq!(ns[refused..], [1; 8], "{ns:?}");
    assert_eq!(groups.len(), 2, "the run went on");
    let said = logs.lines_with("every rollout gets its own request from now on");
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("--env.group_requests false"),
        "{}",
        said[0]
    );
    assert!(said[0].contains("n > 1 is not supported"), "{}", said[0]);
}

/// `--env.group_requests false`: one request per rollout, `n = 1`, as before.
#[tokio::test]
async fn group_requests_false_asks_once_per_rollout() {
    let server = ScriptedServer::start_with(alternating(), true)
        .await
        .unwrap();
    let (groups, _) = process(&server.base_url(), &["--env.group_requests", "false"]).await;
    let requests = server.requests();
    assert_eq!(requests.len(), 8);
    assert!(requests.iter().all(|b| b["n"] == 1));
    assert_eq!(groups.len(), 2);
}

/// An OpenAI-compatible server that ignores `n`: one choice per request, and a count of them.
async fn one_choice_server() -> (String, Arc<AtomicUsize>) {
    use axum::routing::post;
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |axum::Json(_body): axum::Json<Value>| {
            let k = seen.fetch_add(1, Ordering::Relaxed);
            async move {
                let content = if k.is_multiple_of(2) {
                    "#### 4"
                } else {
                    "#### 5"
                };
                axum::Json(json!({
                    "id": format!("c{k}"), "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), count)
}

fn config(group_size: i64) -> HermesEnvConfig {
    HermesEnvConfig {
        group_size,
        ..Default::default()
    }
}

fn runtime(
    base_url: &str,
    config: HermesEnvConfig,
    sandboxes: Arc<dyn SandboxProvider>,
) -> Runtime {
    Runtime::builder(
        Arc::new(config),
        common::client(base_url),
        sandboxes,
        ToolSet::default(),
    )
    .build()
}

fn single_turn() -> SingleTurn {
    <SingleTurn as hermes_env::EnvDefinition>::from_config(Default::default(), Default::default())
}

/// A server that returns fewer choices than asked: the choices it gave are rollouts, the rest
/// ask on their own, and later groups ask per rollout (said once).
#[tokio::test]
async fn fewer_choices_than_asked_fall_back_for_the_rest() {
    let (url, count) = one_choice_server().await;
    let rt = runtime(&url, config(4), Arc::new(LocalProvider::new().unwrap()));
    let logs = Logs::default();
    let _capture = logs.capture();
    let first = collect_group(&single_turn(), &rt, 2).await;
    assert!(first.result.is_ok(), "{:?}", first.result.err());
    assert_eq!(first.rollouts.len(), 4);
    assert_eq!(
        count.load(Ordering::Relaxed),
        4,
        "1 choice from the n request + 3 more"
    );
    let second = collect_group(&single_turn(), &rt, 2).await;
    assert!(second.result.is_ok());
    assert_eq!(
        count.load(Ordering::Relaxed),
        8,
        "one request per rollout now"
    );
    let said = logs.lines_with("returned 1 of 4 choices");
    assert_eq!(said.len(), 1, "{said:?}");
    // The server's completion count covers one choice here: kept per rollout.
    let usage = first.rollouts[0].run.turns[0].clone();
    assert_eq!(
        (usage.prompt_tokens, usage.completion_tokens),
        (Some(20), Some(3))
    );
}

/// The group request failing on the infrastructure is an LLM failure of every rollout of the
/// group, each re-run on its own as the rollout retry rules say.
#[tokio::test]
async fn a_failed_group_request_is_every_rollouts_llm_failure_retried() {
    let inner = alternating();
    let policy = move |body: &Value| {
        if body["n"].as_u64().unwrap_or(1) > 1 {
            return Reply::Status(503, "overloaded".into());
        }
        inner.respond(body)
    };
    let server = ScriptedServer::start_with(policy, true).await.unwrap();
    let rt = runtime(
        &server.base_url(),
        config(4),
        Arc::new(LocalProvider::new().unwrap()),
    );
    let run = collect_group(&single_turn(), &rt, 2).await;
    let group = run.result.expect("the re-runs succeed");
    assert_eq!(group.scores.len(), 4);
    assert_eq!(run.failures.get(FailureKind::Llm), 4, "{:?}", run.failures);
    assert_eq!(run.failures.total(), 4);
    let ns: Vec<u64> = server
        .requests()
        .iter()
        .map(|b| b["n"].as_u64().unwrap())
        .collect();
    // Three attempts of the n request (the client's retries), then one request per rollout.
    assert_eq!(ns, [4, 4, 4, 1, 1, 1, 1]);
    assert!(run
        .rollouts
        .iter()
        .all(|r| r.outcome == RewardOutcome::Scored));
}

/// Counts the sandboxes made through a local provider.
struct Counting {
    inner: LocalProvider,
    created: AtomicUsize,
}

#[async_trait]
impl SandboxProvider for Counting {
    async fn create(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.created.fetch_add(1, Ordering::Relaxed);
        self.inner.create(task_id, spec).await
    }
}

/// An environment that offers no tools and whose verifier reads only the text makes no
/// sandbox at all; one whose verifier runs a command gets one per rollout, torn down after.
#[tokio::test]
async fn sandboxes_are_made_only_for_a_verifier_that_uses_one() {
    let server = ScriptedServer::start_with(alternating(), false)
        .await
        .unwrap();
    let counting = Arc::new(Counting {
        inner: LocalProvider::new().unwrap(),
        created: AtomicUsize::new(0),
    });
    let root = counting.inner.root().to_owned();
    let rt = runtime(&server.base_url(), config(4), Arc::clone(&counting) as _);
    for _ in 0..2 {
        let run = collect_group(&single_turn(), &rt, 2).await;
        assert!(run.result.is_ok());
    }
    assert_eq!(
        counting.created.load(Ordering::Relaxed),
        0,
        "no sandbox for 8 rollouts"
    );
    assert_eq!(scratch_dirs(&root), 0, "no scratch directory was made");

    let verifier = <SandboxVerifier as hermes_env::EnvDefinition>::from_config(
        Default::default(),
        Default::default(),
    );
    let run = collect_group(&verifier, &rt, 2).await;
    let scores = run.result.expect("a group").scores;
    assert_eq!(
        scores,
        [1.0, -1.0, 1.0, -1.0],
        "the verifier ran in each rollout's sandbox"
    );
    assert_eq!(
        counting.created.load(Ordering::Relaxed),
        4,
        "one sandbox per rollout"
    );
    assert_eq!(scratch_dirs(&root), 0, "every sandbox torn down");
}

/// The entries of the local backend's root besides its owner file.
fn scratch_dirs(root: &std::path::Path) -> usize {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != ".owner")
        .count()
}

/// Prompt tokens of a chat request as the built-in tokenizer renders and encodes it (one token
/// per byte), what a server prefills for it.
fn chat_prompt_tokens(tok: &ChatTokenizer, body: &Value) -> usize {
    let messages = body["messages"].as_array().unwrap().clone();
    let text = tok
        .render_chat(&messages, &Arc::from(Vec::new()), true)
        .unwrap();
    tok.encode_rendered(&text).unwrap().len()
}

/// Requests and prefill tokens per group, one request per rollout against one `n` request,
/// for groups of 8 and 16, Phase 1 (chat completions, split by `max_n_completions` = 8) and
/// Phase 2 (`/generate`, exact prompt ids): the figures the guide quotes. Each choice is its
/// own rollout: its own tokens and reward.
#[tokio::test]
async fn one_n_request_per_group_saves_requests_and_prefill() {
    let tok = Arc::new(ChatTokenizer::builtin());
    let mut table = Vec::new();
    for size in [8usize, 16] {
        for grouped in [false, true] {
            let config = HermesEnvConfig {
                group_size: size as i64,
                group_requests: grouped,
                ..Default::default()
            };
            // Phase 1.
            let server = ScriptedServer::start_with(alternating(), true)
                .await
                .unwrap();
            let rt = Runtime::builder(
                Arc::new(config.clone()),
                common::client(&server.base_url()),
                Arc::new(LocalProvider::new().unwrap()),
                ToolSet::default(),
            )
            .tokens(TokenSource::Retokenized(Arc::clone(&tok)))
            .build();
            let run = collect_group(&single_turn(), &rt, 2).await;
            let group = run.result.expect("a group");
            assert_eq!(group.scores.len(), size);
            let requests = server.requests();
            let chat_requests = requests.len();
            let chat_prefill: usize = requests.iter().map(|b| chat_prompt_tokens(&tok, b)).sum();
            let expected = if grouped { size.div_ceil(8) } else { size };
            assert_eq!(chat_requests, expected, "Phase 1, group of {size}");

            // Phase 2.
            let server =
                ScriptedServer::start_with_tokenizer(alternating(), true, Arc::clone(&tok))
                    .await
                    .unwrap();
            let server_config = ApiServerConfig {
                base_url: Some(server.base_url()),
                server_type: ServerType::Vllm,
                ..Default::default()
            };
            let phase2 = Phase2 {
                client: GenerateClient::new(&[server_config], RetryPolicy::default()).unwrap(),
                tokenizer: Arc::clone(&tok),
                parser: hermes_runtime::parsers::get("hermes").unwrap(),
                preserve_think_blocks: false,
                mask_truncated_turns: false,
            };
            let rt = Runtime::builder(
                Arc::new(config),
                common::client(&server.base_url()),
                Arc::new(LocalProvider::new().unwrap()),
                ToolSet::default(),
            )
            .tokens(TokenSource::Managed(Arc::new(phase2)))
            .build();
            let run = collect_group(&single_turn(), &rt, 2).await;
            let group = run.result.expect("a group");
            let scores = group.scores.clone();
            assert_eq!(scores.len(), size);
            assert_eq!(scores.iter().filter(|&&s| s == 1.0).count(), size / 2);
            // Each rollout's own tokens: its prompt, then its own completion, trained.
            let (tokens, masks) = (&group.tokens, &group.masks);
            for ((t, m), r) in tokens.iter().zip(masks).zip(&run.rollouts) {
                let answer = r.run.final_response().unwrap();
                let trained = m.iter().filter(|&&x| x != -100).count();
                assert!(
                    trained >= answer.len(),
                    "{answer:?}: {trained} trained tokens"
                );
                assert_eq!(t.len(), m.len());
                assert_eq!(r.run.turns[0].finish_reason.as_deref(), Some("stop"));
                let reward = if answer.ends_with("#### 4") {
                    1.0
                } else {
                    -1.0
                };
                assert_eq!(r.reward, reward);
            }
            let requests = server.requests();
            let generate_requests = requests.len();
            let generate_prefill: usize = requests
                .iter()
                .map(|b| b["prompt"]["prompt_token_ids"].as_array().unwrap().len())
                .sum();
            assert_eq!(generate_requests, if grouped { 1 } else { size }, "Phase 2");
            table.push((
                size,
                grouped,
                chat_requests,
                chat_prefill,
                generate_requests,
                generate_prefill,
            ));
        }
    }
    eprintln!("group | n request | Phase 1 requests | Phase 1 prefill | Phase 2 requests | Phase 2 prefill");
    for (size, grouped, cr, cp, gr, gp) in &table {
        eprintln!("{size} | {grouped} | {cr} | {cp} | {gr} | {gp}");
    }
    // Phase 2 prefills the prompt once per group instead of once per rollout.
    for pair in table.chunks(2) {
        let (per_rollout, grouped) = (&pair[0], &pair[1]);
        assert_eq!(per_rollout.5, grouped.5 * per_rollout.0);
        assert_eq!(per_rollout.3, grouped.3 * per_rollout.0 / grouped.2);
    }
}
