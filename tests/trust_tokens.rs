//! Training data you can trust (issue #34, part II), against Hugging Face transformers from
//! PyPI (in the suite's own venv, `common::template_python`): what transformers cannot render
//! is never sent (the rollout is a `tokenization` failure), a list-form `chat_template` is
//! chosen the way `apply_chat_template` chooses it, and a turn cut at `max_tokens` is trained
//! exactly as generated.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use hermes_env::prelude::*;
use hermes_env::testing::{Reply, Script, ScriptedServer};
use hermes_runtime::config::HermesEnvConfig;
use hermes_runtime::env::{FailureKind, RewardOutcome};
use hermes_runtime::llm::ChatTokenizer;
use hermes_runtime::modes::{collect_group, Runtime, TokenSource};
use hermes_runtime::sandbox::LocalProvider;
use hermes_runtime::tools::ToolRegistry;
use serde_json::{json, Value};

/// An environment whose every rollout scores 1: what matters here is the tokens.
#[hermes_env(name = "trust-tokens", toolsets = ["file"], main = false)]
struct TrustTokens {}

#[hermes_env::hooks]
impl TrustTokens {
    async fn get_next_item(&mut self) -> Option<u32> {
        Some(1)
    }

    fn format_prompt(&self, _item: &u32) -> String {
        "Write two files.".into()
    }

    async fn compute_reward(
        &self,
        _item: &u32,
        _run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        Ok(1.0)
    }
}

/// Llama 3.1's refusal of parallel tool calls (its `raise_exception` line), in front of the
/// built-in ChatML template.
const REFUSE_PARALLEL_CALLS: &str = "{%- for m in messages %}{%- if m.tool_calls is defined and \
    m.tool_calls and m.tool_calls | length != 1 %}{{- raise_exception(\"This model only supports \
    single tool-calls at once!\") }}{%- endif %}{%- endfor %}";

/// The built-in tokenizer's files in `dir`, with `config` merged into its
/// tokenizer_config.json (e.g. another `chat_template`).
fn tokenizer_dir(dir: &Path, config: Value) -> ChatTokenizer {
    let builtin = ChatTokenizer::builtin_dir();
    std::fs::copy(builtin.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let mut base: Value = serde_json::from_str(
        &std::fs::read_to_string(builtin.join("tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    for (k, v) in config.as_object().unwrap() {
        base[k] = v.clone();
    }
    std::fs::write(dir.join("tokenizer_config.json"), base.to_string()).unwrap();
    ChatTokenizer::load(dir.to_str().unwrap()).unwrap()
}

/// The built-in ChatML template text.
fn builtin_template() -> String {
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(ChatTokenizer::builtin_dir().join("tokenizer_config.json"))
            .unwrap(),
    )
    .unwrap();
    config["chat_template"].as_str().unwrap().to_owned()
}

/// transformers' answer to `request` (see `tests/chat_templates/render.py`).
fn transformers(request: Value) -> Value {
    let python = common::template_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_templates/render.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        request.to_string().as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the transformers script failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn runtime(server: &ScriptedServer, tokens: TokenSource, config: HermesEnvConfig) -> Runtime {
    let tools = ToolRegistry::builtin()
        .resolve(Some(&["file".into()]), None)
        .unwrap()
        .0;
    Runtime::builder(
        Arc::new(config),
        common::client(&server.base_url()),
        Arc::new(LocalProvider::new().unwrap()),
        tools,
    )
    .tokens(tokens)
    .build()
}

fn env() -> TrustTokens {
    <TrustTokens as hermes_env::EnvDefinition>::from_config(Default::default(), Default::default())
}

/// A chat template that raises on parallel tool calls (as Llama 3.1/3.2's do) makes the rollout
/// a `tokenization` failure: retried, counted, no group — where placeholder ids used to be
/// sent in a group marked as real tokens. transformers refuses the same chat, and renders the
/// single-call one to the tokens we send.
#[tokio::test(flavor = "multi_thread")]
async fn a_template_that_refuses_the_chat_makes_a_tokenization_failure_not_placeholder_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let template = format!("{REFUSE_PARALLEL_CALLS}{}", builtin_template());
    let tok = tokenizer_dir(tmp.path(), json!({ "chat_template": template }));
    let parallel = || {
        Reply::tool("write_file", json!({"path": "a.txt", "content": "a"}))
            .and_tool("write_file", json!({"path": "b.txt", "content": "b"}))
    };
    // Two attempts (1 + --env.max_rollout_retries 1), each a parallel call and an answer.
    let server = ScriptedServer::start(Script::new([
        parallel(),
        Reply::text("done"),
        parallel(),
        Reply::text("done"),
    ]))
    .await
    .unwrap();
    let config = HermesEnvConfig {
        group_size: 1,
        max_rollout_retries: 1,
        ..Default::default()
    };
    let rt = runtime(&server, TokenSource::Retokenized(Arc::new(tok)), config);
    let run = collect_group(&env(), &rt, 1).await;

    let rollout = &run.rollouts[0];
    assert!(
        rollout.run.llm_error.is_none(),
        "{:?}",
        rollout.run.llm_error
    );
    let Err(failed) = &run.result else {
        panic!(
            "a rollout whose trainer tokens cannot be rendered must not make a group; got {:?}",
            run.result.as_ref().map(|g| &g.tokens)
        )
    };
    let RewardOutcome::TokenizationFailure { message } = &failed.outcome else {
        panic!("expected a tokenization failure, got {:?}", failed.outcome)
    };
    assert!(
        message.contains("only supports single tool-calls"),
        "the template's own reason is kept: {message}"
    );
    assert_eq!(failed.outcome.failure(), Some(FailureKind::Tokenization));
    assert_eq!(FailureKind::Tokenization.as_str(), "tokenization");
    assert_eq!(run.failures.tokenization, 2, "retried like other failures");
    assert_eq!(failed.attempts, 2);
    assert_eq!(rollout.reward, 0.0);
    assert_eq!(server.request_count(), 4, "each attempt ran the agent loop");

    // transformers refuses the same chat; without the second call it renders it, to the
    // tokens a rollout would send.
    let messages: Vec<Value> = rollout
        .run
        .messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    let schemas: Vec<Value> = rt
        .group_tools()
        .schemas()
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
    let mut single = messages.clone();
    single[1]["tool_calls"].as_array_mut().unwrap().truncate(1);
    single.remove(3); // the second call's result
    let answer = transformers(json!({
        "dir": tmp.path(),
        "chats": [
            {"messages": messages, "tools": schemas},
            {"messages": single, "tools": schemas},
        ],
    }));
    let refused = answer["chats"][0]["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains("only supports single tool-calls"),
        "transformers refuses the chat too: {}",
        answer["chats"][0]
    );
    let tok = ChatTokenizer::load(tmp.path().to_str().unwrap()).unwrap();
    let ours = tok
        .render(&single, Some(&schemas), false)
        .and_then(|t| tok.encode_rendered(&t))
        .unwrap();
    let want: Vec<u32> = serde_json::from_value(answer["chats"][1]["ids"].clone()).unwrap();
    assert_eq!(
        ours, want,
        "the single-call chat renders as transformers renders it"
    );
}

/// Our render of `chat` (as the request `transformers()` gets) and its ids.
fn ours(tok: &ChatTokenizer, chat: &Value) -> (String, Vec<u32>) {
    let messages = chat["messages"].as_array().unwrap();
    let tools = chat["tools"].as_array().map(Vec::as_slice);
    let agp = chat["add_generation_prompt"].as_bool().unwrap_or(false);
    let text = tok.render(messages, tools, agp).unwrap();
    let ids = tok.encode_rendered(&text).unwrap();
    (text, ids)
}

/// A list-form `chat_template` (as Hermes 3 repositories ship it) renders a chat offered tools
/// with `tool_use` and one without with `default`, as transformers' `apply_chat_template` does;
/// `--env.chat_template_name` renders every chat with the named one. Phase 1 trainer tokens and
/// Phase 2 prompts make the same choice.
#[tokio::test(flavor = "multi_thread")]
async fn a_list_form_chat_template_is_chosen_as_transformers_chooses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let builtin = builtin_template();
    let templates = json!([
        {"name": "default", "template": format!("{{{{- 'DEFAULT|' }}}}{builtin}")},
        {"name": "tool_use", "template": format!("{{{{- 'TOOL_USE|' }}}}{builtin}")},
    ]);
    let tok = tokenizer_dir(tmp.path(), json!({ "chat_template": templates }));
    let tools: Vec<hermes_runtime::llm::ToolSchema> = ToolRegistry::builtin()
        .resolve(Some(&["file".into()]), None)
        .unwrap()
        .0
        .schemas()
        .to_vec();
    let tool_values: Vec<Value> = tools
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let user = json!({"role": "user", "content": "Write a file."});
    let answer = json!({"role": "assistant", "content": "Done."});
    let chats = json!([
        {"messages": [user], "tools": tool_values, "add_generation_prompt": true},
        {"messages": [user], "tools": null, "add_generation_prompt": true},
        {"messages": [user, answer], "tools": tool_values, "add_generation_prompt": false},
        {"messages": [user], "tools": tool_values, "add_generation_prompt": true,
         "chat_template": "default"},
    ]);
    let reference = transformers(json!({"dir": tmp.path(), "chats": chats}));
    let want = |i: usize| -> (String, Vec<u32>) {
        let c = &reference["chats"][i];
        assert!(
            c.get("error").is_none(),
            "transformers refused chat {i}: {c}"
        );
        (
            c["text"].as_str().unwrap().to_owned(),
            serde_json::from_value(c["ids"].clone()).unwrap(),
        )
    };
    assert!(want(0).0.starts_with("TOOL_USE|") && want(1).0.starts_with("DEFAULT|"));

    let with_tools = ours(&tok, &chats[0]);
    assert!(
        with_tools.0.starts_with("TOOL_USE|"),
        "a chat offered tools must be rendered with the tool_use template, as transformers \
         chooses it; we rendered {:?}",
        with_tools.0.chars().take(40).collect::<String>()
    );
    assert_eq!(
        with_tools,
        want(0),
        "with tools: transformers' text and tokens"
    );
    assert_eq!(
        ours(&tok, &chats[1]),
        want(1),
        "without tools: the default template"
    );

    // Phase 1 trainer tokens of a finished chat with tools.
    let finished: Vec<hermes_runtime::llm::Message> =
        serde_json::from_value(chats[2]["messages"].clone()).unwrap();
    let schemas: Arc<[hermes_runtime::llm::ToolSchema]> = tools.clone().into();
    let t = hermes_runtime::atropos::tokenize::tokenize_for_trainer(
        &tok, &finished, &schemas, true, "stop",
    )
    .unwrap();
    let phase1: Vec<u32> = t.tokens.iter().map(|&t| t as u32).collect();
    assert_eq!(
        phase1,
        want(2).1,
        "Phase 1 trainer tokens use the tool_use template"
    );

    // Phase 2: the prompt sent to /generate.
    let tok = Arc::new(tok);
    let server = ScriptedServer::start(Script::new([Reply::text("Done.")]))
        .await
        .unwrap();
    let phase2 = hermes_runtime::llm::Phase2 {
        client: vllm_client(&server),
        tokenizer: Arc::clone(&tok),
        parser: hermes_runtime::parsers::get("hermes").unwrap(),
        preserve_think_blocks: true,
        mask_truncated_turns: false,
    };
    let session = hermes_runtime::llm::ManagedSession::new(&phase2);
    use hermes_runtime::llm::ChatBackend;
    session
        .chat(&hermes_runtime::llm::ChatRequest {
            messages: vec![hermes_runtime::llm::Message::user("Write a file.")],
            tools: schemas,
            n: 1,
            temperature: 1.0,
            max_tokens: None,
            extra_body: Default::default(),
            split: hermes_runtime::llm::Split::Train,
        })
        .await
        .unwrap();
    let node = session.nodes().last().unwrap().clone();
    let prompt = node
        .masked_tokens
        .iter()
        .take_while(|&&m| m == -100)
        .count();
    assert_eq!(
        node.tokens[..prompt],
        want(0).1[..],
        "the Phase 2 prompt uses the tool_use template"
    );

    // A named template renders every chat.
    let named = ChatTokenizer::load(tmp.path().to_str().unwrap())
        .unwrap()
        .with_template_name("default")
        .unwrap();
    assert_eq!(
        ours(&named, &chats[3]),
        want(3),
        "--env.chat_template_name default"
    );
    let err = named.with_template_name("rag").unwrap_err().to_string();
    assert!(
        err.contains("has no chat template of that name (it has default, tool_use)"),
        "{err}"
    );
}

/// `--env.chat_template_name` reaches the run's tokenizer: a name the tokenizer does not have
/// stops the run with a message naming the flag (the built-in tokenizer has one template).
#[tokio::test]
async fn an_unknown_chat_template_name_stops_the_run_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(common::example_bin("terminal_test"))
        .args(["process", "--testing", "true", "--env.use_wandb", "false"])
        .args(["--env.total_steps", "1", "--env.group_size", "1"])
        .arg("--env.tokenizer_name")
        .arg(ChatTokenizer::builtin_dir())
        .args(["--env.chat_template_name", "tool_use"])
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--env.chat_template_name tool_use") && err.contains("a single chat template"),
        "the run must stop naming --env.chat_template_name: {err}"
    );
}

/// A chat-completion answer cut at `max_tokens`, with the server's `usage`.
fn cut_reply(content: &str, prompt_tokens: u64) -> Reply {
    Reply::Raw(
        json!({
            "id": "chatcmpl-cut", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": content.len(),
                      "total_tokens": prompt_tokens + content.len() as u64},
        })
        .to_string(),
    )
}

/// A turn cut at `max_tokens` is trained exactly as generated: its trained tokens are
/// transformers' tokens of the generated text and the rollout's tokens end there, with no
/// end-of-turn token the model never produced; `--env.mask_truncated_turns` masks it instead.
/// The turn's `finish_reason` and the server's token counts are kept in the result.
#[tokio::test(flavor = "multi_thread")]
async fn a_length_cut_turn_is_trained_as_generated_without_an_invented_end_of_turn() {
    const CUT: &str = "The answer is forty-tw";
    let tmp = tempfile::tempdir().unwrap();
    let tok = Arc::new(tokenizer_dir(tmp.path(), json!({})));
    let eos = i64::from(tok.eos_id().unwrap());
    let mut groups = Vec::new();
    for mask in [false, true] {
        let server = ScriptedServer::start(Script::new([cut_reply(CUT, 123)]))
            .await
            .unwrap();
        let config = HermesEnvConfig {
            group_size: 1,
            mask_truncated_turns: mask,
            ..Default::default()
        };
        let rt = runtime(&server, TokenSource::Retokenized(Arc::clone(&tok)), config);
        let run = collect_group(&env(), &rt, 1).await;
        let rollout = run.rollouts[0].clone();
        let group = run
            .result
            .expect("a cut turn is the model's outcome: a group");
        groups.push((rollout, group, rt.group_tools().schemas()));
    }

    let (rollout, group, schemas) = &groups[0];
    let turns = &rollout.run.turns;
    assert_eq!(turns.len(), 1, "one record per assistant turn: {turns:?}");
    assert_eq!(turns[0].finish_reason.as_deref(), Some("length"));
    assert_eq!(
        turns[0].prompt_tokens,
        Some(123),
        "the server's usage is kept"
    );
    assert_eq!(turns[0].completion_tokens, Some(CUT.len() as u64));
    assert_eq!(turns[0].message, 1, "the turn's assistant message");

    let messages: Vec<Value> = rollout.run.messages[..1]
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    let tools: Vec<Value> = schemas
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
    let reference = transformers(json!({
        "dir": tmp.path(),
        "chats": [{"messages": messages, "tools": tools, "add_generation_prompt": true}],
        "texts": [CUT],
    }));
    let prompt: Vec<i64> = serde_json::from_value(reference["chats"][0]["ids"].clone()).unwrap();
    let generated: Vec<i64> = serde_json::from_value(reference["texts"][0].clone()).unwrap();
    let tokens = &group.tokens[0];
    let masks = &group.masks[0];
    let trained: Vec<i64> = masks.iter().copied().filter(|&m| m != -100).collect();
    assert_eq!(
        trained, generated,
        "the cut turn must be trained exactly as generated (transformers' tokens of its text), \
         without an end-of-turn token after it"
    );
    assert_eq!(trained.len() as u64, turns[0].completion_tokens.unwrap());
    assert_eq!(
        tokens[..],
        [&prompt[..], &generated[..]].concat()[..],
        "the rollout's tokens are the prompt and what was generated, nothing after"
    );
    assert_ne!(tokens.last(), Some(&eos), "no invented end-of-turn token");

    // The groups' JSONL carries each assistant turn's finish_reason and token counts.
    let line: Value = serde_json::from_str(&hermes_runtime::atropos::json::to_python_string(
        &serde_json::to_value(group).unwrap(),
    ))
    .unwrap();
    let cut_message = &line["messages"][0][1];
    assert_eq!(
        cut_message["finish_reason"], "length",
        "the JSONL's assistant message must say it was cut: {cut_message}"
    );
    assert_eq!(
        cut_message["usage"],
        json!({"prompt_tokens": 123, "completion_tokens": CUT.len()})
    );
    assert!(
        line["messages"][0][0].get("finish_reason").is_none(),
        "only assistant turns"
    );

    let (_, masked_group, _) = &groups[1];
    assert_eq!(masked_group.tokens[0], *tokens, "masking keeps the tokens");
    assert!(
        masked_group.masks[0].iter().all(|&m| m == -100),
        "--env.mask_truncated_turns masks the cut turn: {:?}",
        masked_group.masks[0]
    );
}

/// Phase 2 with `--env.mask_truncated_turns`: a completion cut at `max_tokens` stays in the
/// sequence (the next turn still extends it) but is masked, with logprob 1.0.
#[tokio::test]
async fn phase2_masks_a_cut_completion_when_asked() {
    let server = ScriptedServer::start(Script::new([Reply::text("abcdefghij")]))
        .await
        .unwrap();
    let phase2 = hermes_runtime::llm::Phase2 {
        client: vllm_client(&server),
        tokenizer: Arc::new(ChatTokenizer::builtin()),
        parser: hermes_runtime::parsers::get("hermes").unwrap(),
        preserve_think_blocks: false,
        mask_truncated_turns: true,
    };
    let session = hermes_runtime::llm::ManagedSession::new(&phase2);
    use hermes_runtime::llm::ChatBackend;
    let answer = session
        .chat(&hermes_runtime::llm::ChatRequest {
            messages: vec![hermes_runtime::llm::Message::user("Q")],
            tools: Vec::new().into(),
            n: 1,
            temperature: 1.0,
            max_tokens: Some(4),
            extra_body: Default::default(),
            split: hermes_runtime::llm::Split::Train,
        })
        .await
        .unwrap();
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("length"));
    let usage = answer
        .usage
        .expect("Phase 2 reports its exact token counts");
    assert_eq!(usage.completion_tokens, Some(4));
    let node = session.nodes().last().unwrap().clone();
    assert_eq!(
        node.tokens[node.tokens.len() - 4..],
        [u32::from(b'a'), 98, 99, 100],
        "the cut completion's tokens stay"
    );
    assert!(
        node.masked_tokens.iter().all(|&m| m == -100),
        "{:?}",
        node.masked_tokens
    );
    assert!(node.logprobs.iter().all(|&l| l == 1.0));
    assert_eq!(usage.prompt_tokens, Some((node.tokens.len() - 4) as u64));
}

/// A `/generate` client of the scripted server, as a vLLM server.
fn vllm_client(server: &ScriptedServer) -> hermes_runtime::llm::GenerateClient {
    hermes_runtime::llm::GenerateClient::new(
        &[hermes_runtime::config::ApiServerConfig {
            base_url: Some(server.base_url()),
            server_type: hermes_runtime::config::ServerType::Vllm,
            ..Default::default()
        }],
        hermes_runtime::llm::RetryPolicy::default(),
    )
    .unwrap()
}
