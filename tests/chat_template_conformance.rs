//! Our chat-template rendering against Hugging Face transformers' `apply_chat_template`, token
//! for token, on ten real chat templates (the copies llama.cpp keeps under `models/templates/`,
//! taken from the llama-cpp-python source distribution on PyPI at test time) × the
//! conversations in `tests/chat_templates/conversations.json`. Both sides use one tiny BPE
//! tokenizer trained by the reference script with every control token of those templates as a
//! special token: the real vocabularies are not on PyPI, and the template text is what differs.
//! Also: Phase 1 trainer tokens and Phase 2 prompts are the same tokens for the same chat.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use hermes_runtime::atropos::tokenize::tokenize_for_trainer;
use hermes_runtime::llm::{ChatTokenizer, Message, ToolSchema};
use serde_json::{Map, Value};

const TEMPLATES: [&str; 10] = [
    "qwen2.5",
    "qwen3",
    "llama3.1",
    "llama3.2",
    "hermes3",
    "mistral-nemo",
    "deepseek-v3.1",
    "glm-4.6",
    "kimi-k2",
    "gpt-oss",
];

/// Why a template refuses a conversation, as transformers raises it (and we must too).
const REFUSALS: [(&str, &str, &str); 6] = [
    (
        "llama3.1",
        "tool_calls_and_results",
        "only supports single tool-calls",
    ),
    (
        "llama3.2",
        "tool_calls_and_results",
        "only supports single tool-calls",
    ),
    (
        "llama3.1",
        "reasoning_and_parallel_calls",
        "only supports single tool-calls",
    ),
    (
        "llama3.2",
        "reasoning_and_parallel_calls",
        "only supports single tool-calls",
    ),
    ("mistral-nemo", "one_call_per_turn", "roles must alternate"),
    (
        "mistral-nemo",
        "tool_calls_and_results",
        "roles must alternate",
    ),
];

/// Where we render and transformers refuses, with the reason: Jinja2 raises on `for x in
/// none`, minijinja iterates nothing. The Hermes 3 tool-use template loops over `tools` without
/// checking it, so a chat without tools is refused by transformers and renders an empty
/// `<tools>  </tools>` block here. Each entry's text is checked for that block.
const DIVERGENCES: [(&str, &str, &str); 2] = [
    ("hermes3", "reasoning_thinking_on", "<tools>  </tools>"),
    ("hermes3", "multi_turn_no_tools", "<tools>  </tools>"),
];

/// One conversation of the fixture file, after a round trip through our message types.
struct Conversation {
    messages: Vec<Message>,
    tools: std::sync::Arc<[ToolSchema]>,
    add_generation_prompt: bool,
    kwargs: Map<String, Value>,
}

fn conversations() -> Vec<(String, Conversation)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_templates/conversations.json");
    let all: Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    all.into_iter()
        .map(|(name, c)| {
            let conv = Conversation {
                messages: serde_json::from_value(c["messages"].clone()).unwrap(),
                tools: serde_json::from_value::<Vec<ToolSchema>>(c["tools"].clone())
                    .unwrap()
                    .into(),
                add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap(),
                kwargs: c
                    .get("kwargs")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
            };
            (name, conv)
        })
        .collect()
}

fn values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect()
}

/// The templates' directories and transformers' renderings, made once per test binary.
struct Reference {
    work: PathBuf,
    expected: Value,
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let python = common::template_python();
        let sdist = common::llama_cpp_sdist();
        let work = sdist.parent().unwrap().to_owned();
        // Python gets exactly what our types serialise to.
        let inputs: Map<String, Value> = conversations()
            .into_iter()
            .map(|(name, c)| {
                let v = serde_json::json!({
                    "messages": values(&c.messages),
                    "tools": values(&c.tools),
                    "add_generation_prompt": c.add_generation_prompt,
                    "kwargs": c.kwargs,
                });
                (name, v)
            })
            .collect();
        let inputs_path = work.join("inputs.json");
        std::fs::write(&inputs_path, Value::Object(inputs).to_string()).unwrap();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_templates/reference.py");
        let output = work.join("expected.json");
        let out = Command::new(&python)
            .arg(script)
            .args([&sdist, &work, &inputs_path, &output])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the transformers reference script failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = serde_json::from_str(&std::fs::read_to_string(output).unwrap()).unwrap();
        Reference { work, expected }
    })
}

fn tokenizer(template: &str, kwargs: &Map<String, Value>) -> ChatTokenizer {
    let dir = reference().work.join(template);
    ChatTokenizer::load(dir.to_str().unwrap())
        .unwrap_or_else(|e| panic!("{template}: {e}"))
        .with_template_kwargs(kwargs.clone())
}

/// Renders and encodes one conversation the way both phases do.
fn ours(tok: &ChatTokenizer, c: &Conversation) -> Result<(String, Vec<u32>), String> {
    let tools = values(&c.tools);
    let tools = (!tools.is_empty()).then_some(tools.as_slice());
    let text = tok
        .render(&values(&c.messages), tools, c.add_generation_prompt)
        .map_err(|e| e.to_string())?;
    let ids = tok.encode_rendered(&text).map_err(|e| e.to_string())?;
    Ok((text, ids))
}

fn check_template(template: &str) {
    let expected = &reference().expected[template];
    for (name, conv) in conversations() {
        let want = &expected[&name];
        let got = ours(&tokenizer(template, &conv.kwargs), &conv);
        if let Some(error) = want.get("error").and_then(Value::as_str) {
            if let Some((.., shows)) = DIVERGENCES
                .iter()
                .find(|(t, c, _)| *t == template && *c == name)
            {
                let (text, _) = got.unwrap_or_else(|e| panic!("{template}/{name}: {e}"));
                assert!(text.contains(shows), "{template}/{name}: {text}");
                continue;
            }
            let reason = REFUSALS
                .iter()
                .find(|(t, c, _)| *t == template && *c == name)
                .unwrap_or_else(|| {
                    panic!("{template}/{name}: undocumented refusal by transformers: {error}")
                });
            let ours = got.expect_err(&format!(
                "{template}/{name}: transformers refuses ({error}), we rendered"
            ));
            assert!(ours.contains(reason.2), "{template}/{name}: {ours}");
            continue;
        }
        let (text, ids) = got.unwrap_or_else(|e| panic!("{template}/{name}: {e}"));
        assert_eq!(
            text,
            want["text"].as_str().unwrap(),
            "{template}/{name}: text"
        );
        let want_ids: Vec<u32> = serde_json::from_value(want["ids"].clone()).unwrap();
        assert_eq!(ids, want_ids, "{template}/{name}: token ids");
    }
}

macro_rules! conformance {
    ($($test:ident => $template:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            check_template($template);
        }
    )*};
}

conformance! {
    qwen2_5_matches_transformers => "qwen2.5",
    qwen3_with_thinking_matches_transformers => "qwen3",
    llama3_1_tool_calling_matches_transformers => "llama3.1",
    llama3_2_tool_calling_matches_transformers => "llama3.2",
    hermes3_tool_use_matches_transformers => "hermes3",
    mistral_nemo_matches_transformers => "mistral-nemo",
    deepseek_v3_1_matches_transformers => "deepseek-v3.1",
    glm_4_6_matches_transformers => "glm-4.6",
    kimi_k2_matches_transformers => "kimi-k2",
    gpt_oss_matches_transformers => "gpt-oss",
}

#[test]
fn every_template_is_checked() {
    let expected = reference().expected.as_object().unwrap();
    let mut names: Vec<&str> = expected.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut want = TEMPLATES.to_vec();
    want.sort_unstable();
    assert_eq!(names, want);
}

fn conversation(name: &str) -> Conversation {
    conversations()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, c)| c)
        .unwrap()
}

/// Phase 1 trainer tokens of a finished chat equal transformers' tokens of it, and their
/// trained spans are exactly the assistant turns.
#[test]
fn phase1_trainer_tokens_are_transformers_tokens_with_assistant_masks() {
    let conv = conversation("tool_calls_and_results");
    let tok = tokenizer("qwen2.5", &Map::new());
    let t = tokenize_for_trainer(&tok, &conv.messages, &conv.tools, true, "stop").unwrap();
    let want: Vec<i64> = serde_json::from_value(
        reference().expected["qwen2.5"]["tool_calls_and_results"]["ids"].clone(),
    )
    .unwrap();
    assert_eq!(t.tokens, want, "the full chat with its tools");
    let spans = trained_spans(&tok, &t.tokens, &t.masks);
    assert_eq!(spans.len(), 2, "{spans:?}");
    assert!(
        spans[0].starts_with("<tool_call>\n{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls -la <dir> && echo 'done'"),
        "{spans:?}"
    );
    assert!(spans[0].ends_with("</tool_call><|im_end|>\n"), "{spans:?}");
    assert_eq!(spans[1], "The config sets key to 'value'.<|im_end|>\n");
}

fn trained_spans(tok: &ChatTokenizer, tokens: &[i64], masks: &[i64]) -> Vec<String> {
    let mut spans = Vec::new();
    let mut cur = Vec::new();
    for (&id, &m) in tokens.iter().zip(masks).chain([(&-1, &-100)]) {
        if m == -100 {
            if !cur.is_empty() {
                spans.push(tok.decode(&cur, false).unwrap());
                cur.clear();
            }
        } else {
            assert_eq!(m, id);
            cur.push(u32::try_from(id).unwrap());
        }
    }
    spans
}

/// The prompt Phase 2 sends to `/generate` is the prefix of the Phase 1 trainer tokens of the
/// finished chat up to the trained reply, for a first turn with tools and for a multi-turn chat.
#[tokio::test]
async fn phase1_and_phase2_produce_identical_prompt_tokens() {
    for (template, name) in [
        ("qwen2.5", "first_turn_with_tools"),
        ("hermes3", "first_turn_with_tools"),
        ("llama3.1", "multi_turn_no_tools"),
        ("gpt-oss", "multi_turn_no_tools"),
    ] {
        let conv = conversation(name);
        let tok = Arc::new(tokenizer(template, &Map::new()));
        let phase2_prompt: Vec<i64> =
            common::phase2_prompt(Arc::clone(&tok), conv.messages.clone(), conv.tools.clone())
                .await
                .unwrap()
                .into_iter()
                .map(i64::from)
                .collect();

        let mut chat = conv.messages.clone();
        chat.push(Message::assistant("Done."));
        let t = tokenize_for_trainer(&tok, &chat, &conv.tools, false, "stop").unwrap();
        let phase1_prompt_len = t.masks.iter().take_while(|&&m| m == -100).count();
        assert_eq!(
            t.tokens[..phase1_prompt_len],
            phase2_prompt[..],
            "{template}/{name}: Phase 1 and Phase 2 prompt tokens"
        );
        let want: Vec<i64> =
            serde_json::from_value(reference().expected[template][name]["ids"].clone()).unwrap();
        assert_eq!(
            phase2_prompt, want,
            "{template}/{name}: the prompt is transformers' prompt"
        );
    }
}

/// `chat_template_kwargs` in `--env.extra_body` reach our own renders: a Phase 2 run with the
/// Qwen3 template and `enable_thinking: false` sends prompts with the template's empty think
/// block (as vLLM renders them for such a request), and a run without it does not.
#[test]
fn a_runs_chat_template_kwargs_reach_its_prompts_and_trainer_tokens() {
    let dir = reference().work.join("qwen3");
    let tok = ChatTokenizer::load(dir.to_str().unwrap()).unwrap();
    let run = |extra: &[&str]| {
        let tmp = tempfile::tempdir().unwrap();
        let out = Command::new(common::example_bin("terminal_test"))
            .args(["process", "--testing", "true", "--env.use_wandb", "false"])
            .args(["--env.total_steps", "1", "--env.group_size", "2"])
            .args(["--openai.server_type", "vllm", "--env.tokenizer_name"])
            .arg(&dir)
            .args(["--env.data_path_to_save_groups", "out.jsonl"])
            .args(extra)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let jsonl = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
        let texts: Vec<String> = jsonl
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .flat_map(|g| g["tokens"].as_array().unwrap().clone())
            .map(|t| {
                let ids: Vec<u32> = serde_json::from_value(t).unwrap();
                tok.decode(&ids, false).unwrap()
            })
            .collect();
        assert!(!texts.is_empty(), "{stderr}");
        (stderr, texts)
    };
    let empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    let (stderr, texts) = run(&[
        "--env.extra_body",
        r#"{"chat_template_kwargs": {"enable_thinking": false}}"#,
    ]);
    assert!(
        stderr
            .contains("rendering with chat_template_kwargs enable_thinking from --env.extra_body"),
        "{stderr}"
    );
    for text in &texts {
        assert!(text.contains(empty_think), "enable_thinking false: {text}");
    }
    let (_, texts) = run(&[]);
    for text in &texts {
        assert!(
            !text.contains(empty_think),
            "thinking on by default: {text}"
        );
    }
}
