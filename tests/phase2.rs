//! Phase 2 token tracking through real HTTP: a managed session over the scripted vLLM-style
//! `/generate` server with the built-in byte-level tokenizer (one token per byte, so every
//! expected sequence below can be checked by hand), multi-turn with a tool result, a truncated
//! completion, and `process` in Phase 2 through the example binary.

mod common;

use std::sync::Arc;

use hermes_env::testing::{Reply, Script, ScriptedServer};
use hermes_runtime::llm::managed::SequenceNode;
use hermes_runtime::llm::{
    ChatBackend, ChatRequest, ChatTokenizer, GenerateClient, ManagedSession, Message, Phase2,
    RetryPolicy, Split, ToolSchema,
};
use serde_json::{json, Value};

async fn phase2(script: Vec<Reply>) -> (ScriptedServer, Phase2) {
    let server = ScriptedServer::start(Script::new(script)).await.unwrap();
    let config = hermes_runtime::config::ApiServerConfig {
        base_url: Some(server.base_url()),
        server_type: hermes_runtime::config::ServerType::Vllm,
        ..Default::default()
    };
    let p = Phase2 {
        client: GenerateClient::new(&[config], RetryPolicy::default()).unwrap(),
        tokenizer: Arc::new(ChatTokenizer::builtin()),
        parser: hermes_runtime::parsers::get("hermes").unwrap(),
        preserve_think_blocks: false,
        mask_truncated_turns: false,
    };
    (server, p)
}

fn request(messages: Vec<Message>, tools: Vec<ToolSchema>, max_tokens: Option<u32>) -> ChatRequest {
    ChatRequest {
        messages,
        tools: tools.into(),
        n: 1,
        temperature: 1.0,
        max_tokens,
        extra_body: Default::default(),
        split: Split::Train,
    }
}

fn bytes(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

const START: u32 = 256;
const END: u32 = 257;

/// `<|im_start|>role\ncontent<|im_end|>\n` as token ids.
fn turn(role: &str, content: &str) -> Vec<u32> {
    let mut v = vec![START];
    v.extend(bytes(&format!("{role}\n{content}")));
    v.push(END);
    v.extend(bytes("\n"));
    v
}

fn masked(n: usize) -> Vec<i64> {
    vec![-100; n]
}

fn trained(ids: &[u32]) -> Vec<i64> {
    ids.iter().map(|&t| i64::from(t)).collect()
}

#[tokio::test]
async fn multi_turn_with_a_tool_result_is_one_sequence_with_exact_masks() {
    let (server, p) = phase2(vec![
        Reply::tool("terminal", json!({"command": "ls"})),
        Reply::text("Done."),
    ])
    .await;
    let session = ManagedSession::new(&p);

    // Turn 1: no tools offered to the template here, so the prompt is just the user turn.
    let user = Message::user("List.");
    let first = session
        .chat(&request(vec![user.clone()], vec![], None))
        .await
        .unwrap();
    let raw_call = r#"<tool_call>{"name": "terminal", "arguments": {"command":"ls"}}</tool_call>"#;
    assert_eq!(
        first.choices[0].message.content, raw_call,
        "no tools: raw text"
    );

    // Turn 2 with tools active would re-render a system prompt; keep the history tool-free and
    // feed the tool result as a tool message: the prompt extends node 1.
    let history = vec![
        user.clone(),
        Message::assistant(first.choices[0].message.content.clone()),
        Message::tool("call_1", "a.py"),
    ];
    let second = session.chat(&request(history, vec![], None)).await.unwrap();
    assert_eq!(second.choices[0].message.content, "Done.");

    let nodes = session.nodes();
    assert_eq!(nodes.nodes.len(), 1, "one growing sequence");
    let SequenceNode {
        tokens,
        masked_tokens,
        logprobs,
        metadata,
        ..
    } = nodes.last().unwrap().clone();

    let prompt1 = [turn("user", "List."), vec![START], bytes("assistant\n")].concat();
    let out1 = [bytes(raw_call), vec![END]].concat();
    let suffix = [
        bytes("\n"),
        turn("tool", "a.py"),
        vec![START],
        bytes("assistant\n"),
    ]
    .concat();
    let out2 = [bytes("Done."), vec![END]].concat();
    assert_eq!(tokens, [&prompt1[..], &out1, &suffix, &out2].concat());
    assert_eq!(
        masked_tokens,
        [
            masked(prompt1.len()),
            trained(&out1),
            masked(suffix.len()),
            trained(&out2)
        ]
        .concat(),
        "prompt and tool-result tokens masked, both completions trained"
    );
    assert_eq!(logprobs.len(), tokens.len());
    for (l, m) in logprobs.iter().zip(&masked_tokens) {
        assert_eq!(*l == 1.0, *m == -100, "1.0 exactly at masked positions");
    }
    assert_eq!(metadata.finish_reason, "stop");
    // The server received the extended ids, not a re-encoded history.
    let second_input = &server.requests()[1]["prompt"]["prompt_token_ids"];
    let expected: Vec<Value> = [&prompt1[..], &out1, &suffix]
        .concat()
        .into_iter()
        .map(Value::from)
        .collect();
    assert_eq!(second_input.as_array().unwrap(), &expected);
}

#[tokio::test]
async fn tool_calls_are_parsed_client_side_and_re_rendered_from_the_raw_text() {
    let (server, p) = phase2(vec![
        Reply::text("Let me look.").and_tool("terminal", json!({"command": "ls"})),
        Reply::text("Done."),
    ])
    .await;
    let session = ManagedSession::new(&p);
    let tools = vec![ToolSchema::function(
        "terminal",
        "run",
        json!({"type": "object"}),
    )];
    let first = session
        .chat(&request(vec![Message::user("List.")], tools.clone(), None))
        .await
        .unwrap();
    let choice = &first.choices[0];
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    let calls = choice.message.tool_calls.clone().unwrap();
    assert_eq!(calls[0].function.name, "terminal");
    assert_eq!(choice.message.content, "Let me look.");
    // The agent loop's history: assistant with tool_calls + the tool result.
    let history = vec![
        Message::user("List."),
        Message {
            tool_calls: Some(calls.clone()),
            ..Message::assistant(choice.message.content.clone())
        },
        Message::tool(calls[0].id.clone(), "a.py"),
    ];
    session.chat(&request(history, tools, None)).await.unwrap();
    let nodes = session.nodes();
    assert_eq!(
        nodes.nodes.len(),
        1,
        "the assistant turn re-rendered from the exact raw text keeps the prefix"
    );
    let node = nodes.last().unwrap();
    let text = p.tokenizer.decode(&node.tokens, false).unwrap();
    assert!(text.contains(
        r#"<|im_start|>assistant
Let me look.<tool_call>{"name": "terminal", "arguments": {"command":"ls"}}</tool_call><|im_end|>
<|im_start|>tool
a.py<|im_end|>"#
    ));
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_truncated_completion_is_kept_and_the_next_turn_still_extends_it() {
    let (_server, p) = phase2(vec![Reply::text("abcdefghij"), Reply::text("ok")]).await;
    let session = ManagedSession::new(&p);
    let first = session
        .chat(&request(vec![Message::user("Q")], vec![], Some(4)))
        .await
        .unwrap();
    assert_eq!(first.choices[0].finish_reason.as_deref(), Some("length"));
    assert_eq!(first.choices[0].message.content, "abcd");
    let history = vec![
        Message::user("Q"),
        Message::assistant("abcd"),
        Message::user("Go on."),
    ];
    session.chat(&request(history, vec![], None)).await.unwrap();
    let node = session.nodes().last().unwrap().clone();
    let prompt1 = [turn("user", "Q"), vec![START], bytes("assistant\n")].concat();
    let out1 = bytes("abcd"); // cut at max_tokens: no end-of-turn token
                              // The template closes the cut turn; that closing text is new prompt, masked.
    let suffix = [
        vec![END],
        bytes("\n"),
        turn("user", "Go on."),
        vec![START],
        bytes("assistant\n"),
    ]
    .concat();
    let out2 = [bytes("ok"), vec![END]].concat();
    assert_eq!(node.tokens, [&prompt1[..], &out1, &suffix, &out2].concat());
    assert_eq!(
        node.masked_tokens,
        [
            masked(prompt1.len()),
            trained(&out1),
            masked(suffix.len()),
            trained(&out2)
        ]
        .concat()
    );
}

#[tokio::test]
async fn process_in_phase_2_writes_exact_tokens_and_inference_logprobs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(common::example_bin("terminal_test"))
        .args([
            "process",
            "--testing",
            "true",
            "--openai.server_type",
            "vllm",
            "--env.use_wandb",
            "false",
            "--env.total_steps",
            "2",
            "--env.group_size",
            "2",
            "--env.tokenizer_name",
            ChatTokenizer::builtin_dir().to_str().unwrap(),
            "--env.data_path_to_save_groups",
            "out.jsonl",
        ])
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for g in &lines {
        assert_eq!(g["group_overrides"], json!({}), "not placeholder tokens");
        let lps = g["inference_logprobs"].as_array().unwrap();
        for (i, t) in g["tokens"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                t.as_array().unwrap().len(),
                lps[i].as_array().unwrap().len()
            );
            assert_eq!(
                t.as_array().unwrap().len(),
                g["masks"][i].as_array().unwrap().len()
            );
        }
    }
}
