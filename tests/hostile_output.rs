//! What the other side sends is bounded and never drives the user's terminal: an inference
//! server's error body and a process name chosen by the model reach the `terminal_test`
//! example's log lines and its error line with their control characters escaped (`\x1b`,
//! `\r`, `\u{9b}`), never raw; a response body larger than its limit (inference or the
//! trajectory API) is refused with the limit named, not read into memory.

mod common;

use std::path::Path;
use std::process::Output;

use hermes_env::testing::{Reply, ScriptedServer};
use serde_json::{json, Value};
use tokio::process::Command;

/// An OSC title change, a clear-screen, a carriage return and a C1 CSI.
const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J\r\u{9b}31m";

/// Runs the example's `process` for one group of one rollout against the inference server at
/// `url`, with `extra` flags, in `tmp`.
async fn process(url: &str, extra: &[&str], tmp: &Path) -> Output {
    Command::new(common::example_bin("terminal_test"))
        .args(["process", "--env.total_steps", "1", "--env.group_size", "1"])
        .args(["--env.use_wandb", "false"])
        .args(["--openai.base_url", url, "--openai.model_name", "M"])
        .args([
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
        ])
        .args(extra)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env("NO_COLOR", "1")
        .output()
        .await
        .expect("run the example")
}

/// What a raw test server answers to every request.
#[derive(Clone)]
enum Answer {
    /// HTTP 400 with this body as it is (not JSON-encoded, as a hostile or broken server may).
    Error(String),
    /// HTTP 200 whose body is `bytes` spaces, sent chunked (no length announced).
    Endless(usize),
    /// HTTP 200 announcing a body of this many bytes, then sending none.
    Announced(u64),
}

/// A server on 127.0.0.1 answering every request with `answer`; returns its `/v1` base URL.
async fn raw_server(answer: Answer) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // Read the head and the body its Content-Length announces.
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let _ = match answer {
                    Answer::Error(body) => {
                        let head = format!(
                            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            body.len()
                        );
                        stream.write_all(format!("{head}{body}").as_bytes()).await
                    }
                    Answer::Endless(bytes) => {
                        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                        if stream.write_all(head.as_bytes()).await.is_err() {
                            return;
                        }
                        let chunk = vec![b' '; 1 << 16];
                        let mut sent = 0;
                        while sent < bytes {
                            let frame = [
                                format!("{:x}\r\n", chunk.len()).into_bytes(),
                                chunk.clone(),
                                b"\r\n".to_vec(),
                            ]
                            .concat();
                            if stream.write_all(&frame).await.is_err() {
                                return; // the client stopped reading: the point
                            }
                            sent += chunk.len();
                        }
                        stream.write_all(b"0\r\n\r\n").await
                    }
                    Answer::Announced(length) => {
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n");
                        stream.write_all(head.as_bytes()).await
                    }
                };
            });
        }
    });
    format!("http://{addr}/v1")
}

/// Fails when `text` holds any control character other than a line's own `\n` or a tab (or
/// the formatter's own colour escapes, `ESC [ … m`, which `NO_COLOR` turns off).
fn assert_no_raw_controls(what: &str, text: &str) {
    let raw: Vec<(usize, char)> = text
        .char_indices()
        .filter(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')
        .collect();
    assert!(
        raw.is_empty(),
        "{what} holds raw control characters {:?}:\n{}",
        raw.iter().take(5).collect::<Vec<_>>(),
        text.escape_debug()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_servers_error_body_is_escaped_in_every_line_printed() {
    let url = raw_server(Answer::Error(format!("bad {HOSTILE}"))).await;
    let tmp = tempfile::tempdir().unwrap();
    let out = process(&url, &[], tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stderr.contains("\\x1b]0;pwned"),
        "the body was shown (escaped): {}",
        stderr.escape_debug()
    );
    assert_no_raw_controls("stderr", &stderr);
    assert_no_raw_controls("stdout", &stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_name_chosen_by_the_model_is_escaped_in_the_tripwire_line() {
    // The agent leaves a process behind under a hostile name; the leftover wire names it.
    let name = "evil\\033[2J\\r\\033]0;pwned\\007";
    let command = format!("(exec -a \"$(printf '{name}')\" sleep 300) > /dev/null 2>&1 &");
    let server = ScriptedServer::start(move |request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        if messages.iter().any(|m| m["role"] == "assistant") {
            Reply::text("done")
        } else {
            Reply::tool("terminal", json!({"command": command}))
        }
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = process(&server.base_url(), &[], tmp.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains("outlived the agent phase") && stderr.contains("evil\\x1b[2J"),
        "the leftover wire named the process (escaped): {}",
        stderr.escape_debug()
    );
    assert_no_raw_controls("stderr", &stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inference_response_past_its_limit_is_refused_with_the_limit_named() {
    for answer in [Answer::Endless(200 << 20), Answer::Announced(600 << 20)] {
        let url = raw_server(answer).await;
        let tmp = tempfile::tempdir().unwrap();
        let no_retries = ["--env.max_rollout_retries", "0", "--env.llm_retries", "0"];
        let out = process(&url, &no_retries, tmp.path()).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "no group can be made: {stderr}");
        assert!(
            stderr.contains("the response body exceeds 64 MiB, the most a response may hold"),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trajectory_api_answer_past_its_limit_is_refused_with_the_limit_named() {
    let url = raw_server(Answer::Endless(100 << 20)).await;
    let api = hermes_runtime::atropos::TrajectoryApi::new(
        url.trim_end_matches("/v1"),
        hermes_runtime::llm::RetryPolicy::default(),
        std::time::Duration::from_secs(1),
    )
    .unwrap();
    let err = api.info().await.expect_err("a 100 MiB answer").to_string();
    assert!(
        err.contains("the response body exceeds 16 MiB, the most a response may hold"),
        "{err}"
    );
}
