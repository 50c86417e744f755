//! Chat completions sent as server-sent events, the way vLLM and SGLang stream them: the
//! response head at once, then a role chunk, reasoning and content in small pieces, each tool
//! call's id and name in one chunk and its arguments in pieces, a finish chunk per choice, a
//! last chunk with `usage` and no choices, and `data: [DONE]`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Bytes of text per content, reasoning or arguments chunk: small enough that every answer
/// longer than a word is split, and splits fall inside words, escapes and characters' runs.
const PIECE: usize = 8;

/// True when a chat request asks for a streamed answer.
pub(crate) fn wants_stream(request: &Value) -> bool {
    request.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The request without `stream` and `stream_options` (what a recorder forwards, so that the
/// recorded answer is the plain completion).
pub(crate) fn without_stream(mut request: Value) -> Value {
    if let Some(map) = request.as_object_mut() {
        map.remove("stream");
        map.remove("stream_options");
    }
    request
}

/// A 200 response streaming `completion` (a non-streamed chat-completion body): the head goes
/// out at once, the events after `delay` (the time a server takes to its first token).
pub(crate) fn streamed(completion: &Value, delay: Duration) -> Response {
    let text = events(completion);
    let body = futures::stream::once(async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok::<_, std::convert::Infallible>(Bytes::from(text))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// The event-stream text of `completion`.
pub(crate) fn events(completion: &Value) -> String {
    let id = completion.get("id").cloned().unwrap_or(json!("chatcmpl-0"));
    let model = completion.get("model").cloned().unwrap_or(Value::Null);
    let mut out = String::new();
    let mut send = |choices: Vec<Value>, usage: Option<&Value>| {
        let mut chunk = json!({"id": id, "object": "chat.completion.chunk", "created": 0,
                               "model": model, "choices": choices});
        if let Some(u) = usage {
            chunk["usage"] = u.clone();
        }
        out.push_str(&format!("data: {chunk}\n\n"));
    };
    let choices = completion
        .get("choices")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (position, choice) in choices.iter().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(position));
        let delta = |d: Value| vec![json!({"index": index, "delta": d, "finish_reason": null})];
        let message = choice.get("message").cloned().unwrap_or(json!({}));
        send(delta(json!({"role": "assistant", "content": ""})), None);
        for field in ["reasoning_content", "content"] {
            if let Some(text) = message.get(field).and_then(Value::as_str) {
                for piece in pieces(text) {
                    send(delta(json!({ field: piece })), None);
                }
            }
        }
        let calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, call) in calls.iter().enumerate() {
            let name = call.pointer("/function/name").cloned().unwrap_or(json!(""));
            let head = json!({"index": i, "id": call.get("id"), "type": "function",
                              "function": {"name": name, "arguments": ""}});
            send(delta(json!({"tool_calls": [head]})), None);
            let args = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or_default();
            for piece in pieces(args) {
                let part = json!({"index": i, "function": {"arguments": piece}});
                send(delta(json!({"tool_calls": [part]})), None);
            }
        }
        let reason = choice
            .get("finish_reason")
            .cloned()
            .unwrap_or(json!("stop"));
        send(
            vec![json!({"index": index, "delta": {}, "finish_reason": reason})],
            None,
        );
    }
    if let Some(usage) = completion.get("usage").filter(|u| !u.is_null()) {
        send(Vec::new(), Some(usage));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// `text` in pieces of about [`PIECE`] bytes, each ending on a character boundary.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = PIECE.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        out.push(piece);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_text_on_character_boundaries() {
        let text = "ééééé abc \"quoted\" ✓✓✓";
        let parts = pieces(text);
        assert!(parts.len() > 3);
        assert_eq!(parts.concat(), text);
        assert!(pieces("").is_empty());
    }

    #[test]
    fn the_events_end_with_usage_and_done_and_split_every_field() {
        let completion = json!({"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "a longer answer", "reasoning_content": "think it over",
                        "tool_calls": [{"id": "call_1", "type": "function",
                                        "function": {"name": "t", "arguments": "{\"command\": \"ls -la\"}"}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}});
        let text = events(&completion);
        assert!(text.ends_with("data: [DONE]\n\n"));
        let chunks: Vec<Value> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let count = |pointer: &str| {
            chunks
                .iter()
                .filter(|c| c.pointer(pointer).is_some())
                .count()
        };
        assert!(count("/choices/0/delta/content") > 2, "{text}");
        assert!(count("/choices/0/delta/reasoning_content") > 1, "{text}");
        assert!(
            count("/choices/0/delta/tool_calls/0/function/arguments") > 2,
            "{text}"
        );
        assert_eq!(chunks.last().unwrap()["usage"]["total_tokens"], 3);
        assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    }

    /// What the client assembles from the events is what it reads from the completion itself.
    #[test]
    fn the_client_assembles_the_events_into_the_completion() {
        let completion = json!({"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "two calls: ✓", "reasoning_content": "plan",
                        "tool_calls": [
                            {"id": "call_1", "type": "function",
                             "function": {"name": "terminal", "arguments": "{\"command\": \"ls -la /tmp\"}"}},
                            {"id": "call_2", "type": "function",
                             "function": {"name": "read_file", "arguments": "{\"path\": \"a.txt\"}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}});
        let direct: crate::llm::ChatResponse = serde_json::from_value(completion.clone()).unwrap();
        let streamed = crate::llm::sse::assemble_text(&events(&completion), 1 << 20).unwrap();
        let view = |r: &crate::llm::ChatResponse| {
            let c = &r.choices[0];
            json!([
                c.message.content,
                c.message.reasoning_content,
                c.message.tool_calls,
                c.finish_reason,
                r.usage
            ])
        };
        assert_eq!(view(&streamed), view(&direct));
    }
}
