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
