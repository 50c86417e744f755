//! Chat-template rendering and encoding of a 20-turn tool-calling conversation (the path Phase 2
//! prompts and Phase 1 trainer tokens share), against a same-run baseline: a bare `tokenizers`
//! encode of the same rendered text. Also `tokenize_for_trainer` with every assistant turn
//! trained (one render per boundary).
//!
//! Run: `cargo bench --bench chat_template` (add `-- --quick` for a short run). Uses the
//! built-in tokenizer and template, or the tokenizer directory in `HERMES_BENCH_TOKENIZER`
//! (for example one of `target/chat-templates/*` made by the conformance tests).

use std::hint::black_box;
use std::time::{Duration, Instant};

use hermes_runtime::atropos::tokenize::tokenize_for_trainer;
use hermes_runtime::llm::{ChatTokenizer, FunctionSchema, Message, ToolCall, ToolSchema};
use serde_json::{json, Value};

fn tools() -> Vec<ToolSchema> {
    ["terminal", "read_file", "write_file"]
        .iter()
        .map(|name| ToolSchema {
            kind: "function".into(),
            function: FunctionSchema {
                name: (*name).into(),
                description: format!("{name}: does what it says; it's <safe> & quick — ünïcode"),
                parameters: json!({"type": "object", "properties": {
                    "command": {"type": "string", "description": "what to run"},
                    "path": {"type": "string"}}, "required": ["command"]}),
            },
        })
        .collect()
}

/// System, user, then 20 turns alternating assistant tool calls with tool results and text.
fn conversation() -> Vec<Message> {
    let mut chat = vec![
        Message::system("You are a careful coding agent."),
        Message::user("Fix the failing test in src/app.py and explain the change."),
    ];
    for turn in 0..20 {
        if turn % 2 == 0 {
            let mut m = Message::assistant("");
            let call = ToolCall::new(
                "terminal",
                json!({"command": format!("pytest -x tests/test_{turn}.py && echo 'ok'")})
                    .to_string(),
            );
            m.tool_calls = Some(vec![call.clone()]);
            chat.push(m);
            chat.push(Message::tool(
                call.id.clone(),
                format!(
                    "collected 3 items\ntests/test_{turn}.py ..F\nE  assert 1 == 2 <diff> & more\n"
                ),
            ));
        } else {
            chat.push(Message::assistant(format!(
                "Turn {turn}: the assertion compares the wrong field; I'll patch it next."
            )));
            chat.push(Message::user("Go on."));
        }
    }
    chat
}

fn per_op(iterations: u32, mut op: impl FnMut()) -> Duration {
    op();
    let start = Instant::now();
    for _ in 0..iterations {
        op();
    }
    start.elapsed() / iterations
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let iterations = if quick { 50 } else { 500 };
    let tok = match std::env::var("HERMES_BENCH_TOKENIZER") {
        Ok(dir) => {
            ChatTokenizer::load(&dir).expect("HERMES_BENCH_TOKENIZER is a tokenizer directory")
        }
        Err(_) => ChatTokenizer::builtin(),
    };
    let chat = conversation();
    let messages: Vec<Value> = chat
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    let schemas: std::sync::Arc<[ToolSchema]> = tools().into();
    let tool_values: Vec<Value> = schemas
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let text = tok.render(&messages, Some(&tool_values), false).unwrap();
    let tokens = tok.encode_rendered(&text).unwrap().len();

    let baseline = per_op(iterations, || {
        black_box(tok.encode(black_box(&text), false).unwrap());
    });
    let render = per_op(iterations, || {
        black_box(
            tok.render(black_box(&messages), Some(&tool_values), false)
                .unwrap(),
        );
    });
    let both = per_op(iterations, || {
        let text = tok
            .render(black_box(&messages), Some(&tool_values), false)
            .unwrap();
        black_box(tok.encode_rendered(&text).unwrap());
    });
    let trainer = per_op(iterations / 10 + 1, || {
        black_box(tokenize_for_trainer(&tok, black_box(&chat), &schemas, true, "stop").unwrap());
    });
    println!(
        "chat template ({}): {} messages, {} bytes, {tokens} tokens",
        if std::env::var("HERMES_BENCH_TOKENIZER").is_ok() {
            "HERMES_BENCH_TOKENIZER"
        } else {
            "builtin"
        },
        chat.len(),
        text.len()
    );
    println!("  baseline: tokenizers encode of the text  {baseline:>10.1?}/op");
    println!("  render (minijinja, transformers semantics) {render:>10.1?}/op");
    println!(
        "  render + encode (one prompt)              {both:>10.1?}/op  ({:.2}x the bare encode)",
        both.as_secs_f64() / baseline.as_secs_f64()
    );
    println!("  tokenize_for_trainer, all assistant turns {trainer:>10.1?}/op");
}
