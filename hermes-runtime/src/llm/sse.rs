//! A streamed chat completion (`stream: true`, server-sent events) put back together as the
//! response the same request without streaming gets. Streaming is what lets a client tell a
//! server that stalls from one that is still generating: vLLM, SGLang, llama.cpp's server and
//! OpenAI send the response head at once and then one `data:` chunk per step, so a missing
//! head or a long gap between chunks is a fault, where a non-streamed answer is silent until
//! generation ends.
//!
//! The chunks are folded into the JSON of a non-streamed response (`choices[i].message` with
//! `content`, `reasoning_content`/`reasoning`, `tool_calls` by index, `finish_reason`, and the
//! last `usage`) and that JSON is read exactly as a non-streamed body is, so both paths give the
//! same [`ChatResponse`]. Phase 1 reads no logprobs (Phase 2 has them from `/generate`), so a
//! chunk's `logprobs` are accepted and left out, as the non-streamed reader leaves them out.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::types::ChatResponse;
use crate::diagnostics::snippet;

/// Why a stream could not be read as a chat completion.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StreamError {
    /// A chunk that is not a chat-completion chunk (not JSON, not an object, wrong shapes).
    #[error("malformed stream chunk: {0}")]
    Malformed(String),
    /// The server reported an error inside the stream (vLLM sends `{"error": …}` chunks).
    #[error("HTTP {status} in the stream: {message}")]
    Server {
        /// The error's `code` when it is an HTTP status, else 500.
        status: u16,
        /// The error as the server sent it, on one line.
        message: String,
    },
    /// The stream ended before `[DONE]` with a choice still unfinished: the connection broke.
    #[error("the stream ended before its end marker")]
    Ended,
    /// The stream was larger than a response may be.
    #[error("the response body exceeds {} MiB, the most a response may hold", .limit >> 20)]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// Splits bytes into server-sent events and folds their data into a response.
#[derive(Debug)]
pub(crate) struct SseAssembler {
    limit: usize,
    read: usize,
    line: Vec<u8>,
    data: Option<String>,
    started: bool,
    done: bool,
    choices: BTreeMap<u64, ChoiceParts>,
    usage: Option<Value>,
    /// `id`, `model`, `created` of the first chunk, kept as a non-streamed body has them.
    head: Map<String, Value>,
}

#[derive(Debug, Default)]
struct ChoiceParts {
    role: Option<String>,
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: BTreeMap<u64, CallParts>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default)]
struct CallParts {
    id: Option<String>,
    kind: Option<String>,
    name: String,
    arguments: String,
}

impl SseAssembler {
    /// An assembler that refuses a stream of more than `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        SseAssembler {
            limit,
            read: 0,
            line: Vec::new(),
            data: None,
            started: false,
            done: false,
            choices: BTreeMap::new(),
            usage: None,
            head: Map::new(),
        }
    }

    /// True once an event came (from then on the server is generating: the time before it is
    /// queueing and prefill, the gaps after it are steps).
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// True once `[DONE]` came; later bytes are ignored.
    pub(crate) fn done(&self) -> bool {
        self.done
    }

    /// Feeds the next bytes of the body (split anywhere, even inside a UTF-8 character).
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        self.read += bytes.len();
        if self.read > self.limit {
            return Err(StreamError::TooLarge { limit: self.limit });
        }
        for &b in bytes {
            if self.done {
                return Ok(());
            }
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.line(&line)?;
            } else {
                self.line.push(b);
            }
        }
        Ok(())
    }

    /// One line of the event stream: `data:` lines gather, a blank line ends the event,
    /// comments (`:` keep-alives) and other fields are skipped.
    fn line(&mut self, line: &[u8]) -> Result<(), StreamError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return match self.data.take() {
                Some(data) => self.event(&data),
                None => Ok(()),
            };
        }
        let Some(value) = line.strip_prefix(b"data:") else {
            return Ok(());
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let value = std::str::from_utf8(value)
            .map_err(|_| StreamError::Malformed("a data line is not UTF-8".into()))?;
        match &mut self.data {
            Some(data) => {
                data.push('\n');
                data.push_str(value);
            }
            None => self.data = Some(value.to_owned()),
        }
        Ok(())
    }

    fn event(&mut self, data: &str) -> Result<(), StreamError> {
        self.started = true;
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| StreamError::Malformed(format!("{e}: {}", snippet(data))))?;
        let Value::Object(mut chunk) = chunk else {
            return Err(StreamError::Malformed(format!(
                "not an object: {}",
                snippet(data)
            )));
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(server_error(error));
        }
        if self.head.is_empty() {
            for key in ["id", "object", "created", "model"] {
                if let Some(v) = chunk.get(key) {
                    self.head.insert(key.to_owned(), v.clone());
                }
            }
        }
        if let Some(usage) = chunk.remove("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage);
        }
        let choices = match chunk.remove("choices") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(c)) => c,
            Some(other) => {
                return Err(StreamError::Malformed(format!(
                    "`choices` is not a list: {}",
                    snippet(&other.to_string())
                )))
            }
        };
        for (position, choice) in choices.into_iter().enumerate() {
            self.choice(position as u64, choice)?;
        }
        Ok(())
    }

    fn choice(&mut self, position: u64, choice: Value) -> Result<(), StreamError> {
        let Value::Object(choice) = choice else {
            return Err(StreamError::Malformed("a choice is not an object".into()));
        };
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position);
        let parts = self.choices.entry(index).or_default();
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            parts.finish_reason = Some(reason.to_owned());
        }
        let delta = match choice.get("delta") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Object(d)) => d,
            Some(_) => return Err(StreamError::Malformed("a delta is not an object".into())),
        };
        if let Some(role) = delta.get("role").and_then(Value::as_str) {
            parts.role = Some(role.to_owned());
        }
        append(&mut parts.content, delta.get("content"), "content")?;
        append(
            &mut parts.reasoning_content,
            delta.get("reasoning_content"),
            "reasoning_content",
        )?;
        append(&mut parts.reasoning, delta.get("reasoning"), "reasoning")?;
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for call in calls {
                    tool_call_delta(&mut parts.tool_calls, call)?;
                }
            }
            Some(_) => {
                return Err(StreamError::Malformed(
                    "`tool_calls` in a delta is not a list".into(),
                ))
            }
        }
        Ok(())
    }

    /// The response the chunks add up to, once the body has ended. A stream that ended
    /// without `[DONE]` is accepted only when every choice has its finish reason.
    pub(crate) fn finish(mut self) -> Result<ChatResponse, StreamError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line(&line)?;
        }
        if let Some(data) = self.data.take() {
            self.event(&data)?;
        }
        let finished = self.choices.values().all(|c| c.finish_reason.is_some());
        if !self.done && (self.choices.is_empty() || !finished) {
            return Err(StreamError::Ended);
        }
        let body = self.into_json();
        serde_json::from_value(body)
            .map_err(|e| StreamError::Malformed(format!("the assembled response: {e}")))
    }

    /// The non-streamed body the chunks add up to.
    fn into_json(self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .map(|(index, c)| {
                let mut message = Map::new();
                message.insert(
                    "role".into(),
                    c.role.unwrap_or_else(|| "assistant".into()).into(),
                );
                message.insert("content".into(), c.content.map_or(Value::Null, Value::from));
                if let Some(r) = c.reasoning_content {
                    message.insert("reasoning_content".into(), r.into());
                }
                if let Some(r) = c.reasoning {
                    message.insert("reasoning".into(), r.into());
                }
                if !c.tool_calls.is_empty() {
                    let calls: Vec<Value> = c
                        .tool_calls
                        .into_values()
                        .map(|call| {
                            let mut v = json!({
                                "type": call.kind.unwrap_or_else(|| "function".into()),
                                "function": {"name": call.name, "arguments": call.arguments},
                            });
                            if let Some(id) = call.id {
                                v["id"] = id.into();
                            }
                            v
                        })
                        .collect();
                    message.insert("tool_calls".into(), calls.into());
                }
                json!({"index": index, "message": message, "finish_reason": c.finish_reason})
            })
            .collect();
        let mut body = self.head;
        body.insert("choices".into(), choices.into());
        if let Some(usage) = self.usage {
            body.insert("usage".into(), usage);
        }
        Value::Object(body)
    }
}

/// Appends a text delta (`null` adds nothing).
fn append(to: &mut Option<String>, delta: Option<&Value>, what: &str) -> Result<(), StreamError> {
    match delta {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => {
            to.get_or_insert_with(String::new).push_str(s);
            Ok(())
        }
        Some(_) => Err(StreamError::Malformed(format!(
            "`{what}` in a delta is not text"
        ))),
    }
}

/// Folds one entry of a delta's `tool_calls`: the call is known by its `index` (parallel calls
/// arrive interleaved); its id, type and name come once, its arguments in pieces. An entry
/// without `index` continues the last call unless it carries a new id.
fn tool_call_delta(calls: &mut BTreeMap<u64, CallParts>, delta: &Value) -> Result<(), StreamError> {
    let Value::Object(delta) = delta else {
        return Err(StreamError::Malformed(
            "a tool-call delta is not an object".into(),
        ));
    };
    let id = delta
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let index = match delta.get("index").and_then(Value::as_u64) {
        Some(i) => i,
        None => match calls.last_key_value() {
            Some((&last, call)) if id.is_none() || call.id.as_deref() == id => last,
            Some((&last, _)) => last + 1,
            None => 0,
        },
    };
    let call = calls.entry(index).or_default();
    if let Some(id) = id {
        call.id.get_or_insert_with(|| id.to_owned());
    }
    if let Some(kind) = delta.get("type").and_then(Value::as_str) {
        call.kind.get_or_insert_with(|| kind.to_owned());
    }
    let function = match delta.get("function") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(f)) => f,
        Some(_) => {
            return Err(StreamError::Malformed(
                "a tool-call delta's `function` is not an object".into(),
            ))
        }
    };
    if let Some(name) = function.get("name").and_then(Value::as_str) {
        // Servers send the name once; one that repeats it in every delta sends it whole.
        if call.name != name {
            call.name.push_str(name);
        }
    }
    match function.get("arguments") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => call.arguments.push_str(s),
        // An object (a non-standard server) is its JSON text, as the non-streamed reader has it.
        Some(other) => call.arguments.push_str(&other.to_string()),
    }
    Ok(())
}

/// A `{"error": …}` chunk as a status and one-line message.
fn server_error(error: &Value) -> StreamError {
    let status = error
        .get("code")
        .and_then(|c| {
            c.as_u64()
                .or_else(|| c.as_str().and_then(|s| s.parse().ok()))
        })
        .filter(|c| (400..600).contains(c))
        .map_or(500, |c| c as u16);
    StreamError::Server {
        status,
        message: snippet(&json!({ "error": error }).to_string()),
    }
}

/// Reads a streamed chat completion from its whole text (a server that answered a streaming
/// request with `data:` lines under another content type).
pub(crate) fn assemble_text(text: &str, limit: usize) -> Result<ChatResponse, StreamError> {
    let mut a = SseAssembler::new(limit);
    a.feed(text.as_bytes())?;
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(choice: Value) -> String {
        let c = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                       "model": "m", "choices": [choice]});
        format!("data: {c}\n\n")
    }

    fn delta(index: u64, delta: Value) -> String {
        chunk(json!({"index": index, "delta": delta, "finish_reason": null}))
    }

    fn finish(index: u64, reason: &str) -> String {
        chunk(json!({"index": index, "delta": {}, "finish_reason": reason}))
    }

    /// Feeds `stream` split into pieces of `size` bytes (a split may fall inside a character).
    fn assemble(stream: &str, size: usize) -> Result<ChatResponse, StreamError> {
        let mut a = SseAssembler::new(1 << 20);
        for piece in stream.as_bytes().chunks(size) {
            a.feed(piece)?;
        }
        a.finish()
    }

    fn non_streamed(body: Value) -> ChatResponse {
        serde_json::from_value(body).unwrap()
    }

    /// The assembled response as comparable JSON (the types have no `PartialEq`).
    fn as_json(r: &ChatResponse) -> Value {
        let choices: Vec<Value> = r
            .choices
            .iter()
            .map(|c| {
                let m = &c.message;
                json!({"content": m.content, "reasoning": m.reasoning_text(),
                       "tool_calls": m.tool_calls, "finish_reason": c.finish_reason})
            })
            .collect();
        json!({"choices": choices, "usage": r.usage})
    }

    #[test]
    fn tool_call_arguments_split_across_chunks_are_joined_and_parallel_calls_kept_apart() {
        let stream = [
            delta(0, json!({"role": "assistant", "content": ""})),
            delta(0, json!({"content": "Let me "})),
            delta(0, json!({"content": "check é."})),
            delta(
                0,
                json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                       "function": {"name": "terminal", "arguments": ""}}]}),
            ),
            delta(
                0,
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                       "function": {"name": "read_file", "arguments": "{\"pa"}}]}),
            ),
            delta(
                0,
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\": "}}]}),
            ),
            delta(
                0,
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "th\": \"a\"}"}}]}),
            ),
            delta(
                0,
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]}),
            ),
            finish(0, "tool_calls"),
            "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\
             \"completion_tokens\":30,\"total_tokens\":42}}\n\n"
                .into(),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let expected = non_streamed(
            json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "Let me check é.", "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "terminal", "arguments": "{\"command\": \"ls\"}"}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 30}}),
        );
        for size in [1, 3, 7, 64, stream.len()] {
            let got = assemble(&stream, size).unwrap();
            assert_eq!(as_json(&got), as_json(&expected), "pieces of {size} bytes");
        }
    }

    #[test]
    fn reasoning_content_and_reasoning_deltas_are_kept_as_the_non_streamed_fields() {
        let stream = [
            delta(
                0,
                json!({"role": "assistant", "reasoning_content": "think"}),
            ),
            delta(0, json!({"reasoning_content": "ing"})),
            delta(0, json!({"content": "42"})),
            finish(0, "stop"),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let got = assemble(&stream, 5).unwrap();
        let m = &got.choices[0].message;
        assert_eq!(m.reasoning_content.as_deref(), Some("thinking"));
        assert_eq!((m.content.as_str(), m.reasoning.as_deref()), ("42", None));
        let newer = [
            delta(0, json!({"reasoning": "hm"})),
            delta(0, json!({"content": "ok"})),
            finish(0, "stop"),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let got = assemble(&newer, 4).unwrap();
        assert_eq!(
            got.choices[0].message.reasoning_text().as_deref(),
            Some("hm")
        );
        assert_eq!(got.choices[0].message.reasoning_content, None);
    }

    #[test]
    fn logprobs_and_keep_alive_comments_and_crlf_are_accepted_and_choices_kept_by_index() {
        let lp = json!({"content": [{"token": "a", "logprob": -0.5, "top_logprobs": []}]});
        let stream = [
            ": keep-alive\r\n\r\n".to_owned(),
            chunk(json!({"index": 1, "delta": {"content": "b"}, "logprobs": lp}))
                .replace("\n\n", "\r\n\r\n"),
            chunk(json!({"index": 0, "delta": {"content": "a"}, "logprobs": lp})),
            chunk(json!({"index": 1, "delta": {}, "finish_reason": "length"})),
            chunk(json!({"index": 0, "delta": {}, "finish_reason": "stop"})),
            "event: message\nid: 7\ndata: [DONE]\n\n".into(),
        ]
        .concat();
        let got = assemble(&stream, 2).unwrap();
        let texts: Vec<(&str, Option<&str>)> = got
            .choices
            .iter()
            .map(|c| (c.message.content.as_str(), c.finish_reason.as_deref()))
            .collect();
        assert_eq!(texts, [("a", Some("stop")), ("b", Some("length"))]);
        assert_eq!(got.usage, None, "no usage chunk, none as without streaming");
    }

    #[test]
    fn a_tool_call_without_an_id_gets_one_as_the_non_streamed_reader_gives_it() {
        let stream = [
            delta(
                0,
                json!({"tool_calls": [{"function": {"name": "t", "arguments": "{}"}}]}),
            ),
            finish(0, "tool_calls"),
            "data: [DONE]\n\n".into(),
        ]
        .concat();
        let got = assemble(&stream, 9).unwrap();
        let call = &got.choices[0].message.tool_calls.as_ref().unwrap()[0];
        assert!(call.id.starts_with("call_"), "{call:?}");
        assert_eq!(
            (call.kind.as_str(), call.function.name.as_str()),
            ("function", "t")
        );
    }

    #[test]
    fn malformed_chunks_are_typed_errors() {
        let bad = [
            ("data: {not json\n\n", "malformed stream chunk: "),
            ("data: [1, 2]\n\n", "malformed stream chunk: not an object"),
            (
                "data: {\"choices\": {}}\n\n",
                "malformed stream chunk: `choices` is not a list",
            ),
            (
                "data: {\"choices\": [{\"delta\": {\"content\": 5}}]}\n\n",
                "malformed stream chunk: `content` in a delta is not text",
            ),
            (
                "data: {\"choices\": [{\"delta\": {\"tool_calls\": {}}}]}\n\n",
                "malformed stream chunk: `tool_calls` in a delta is not a list",
            ),
        ];
        for (stream, expected) in bad {
            let err = assemble(stream, 4).unwrap_err();
            assert!(
                matches!(err, StreamError::Malformed(_)),
                "{stream}: {err:?}"
            );
            assert!(err.to_string().starts_with(expected), "{stream}: {err}");
        }
    }

    #[test]
    fn an_error_chunk_keeps_its_status_and_a_cut_stream_is_ended() {
        let vllm = "data: {\"error\": {\"object\": \"error\", \"message\": \"engine dead\", \
                    \"type\": \"InternalServerError\", \"code\": 503}}\n\ndata: [DONE]\n\n";
        match assemble(vllm, 8).unwrap_err() {
            StreamError::Server { status, message } => {
                assert_eq!(status, 503);
                assert!(message.contains("engine dead"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let no_code = "data: {\"error\": {\"message\": \"boom\"}}\n\n";
        assert!(matches!(
            assemble(no_code, 8).unwrap_err(),
            StreamError::Server { status: 500, .. }
        ));
        let cut = [delta(0, json!({"content": "half"}))].concat();
        assert_eq!(assemble(&cut, 3).unwrap_err(), StreamError::Ended);
        assert_eq!(assemble("", 3).unwrap_err(), StreamError::Ended);
        // Finished choices and no [DONE]: complete (a server that leaves the marker out).
        let unmarked = [delta(0, json!({"content": "all"})), finish(0, "stop")].concat();
        assert_eq!(
            assemble(&unmarked, 3).unwrap().choices[0].message.content,
            "all"
        );
        // Bytes after [DONE] are not read.
        let trailing = "data: [DONE]\n\ndata: {oops\n\n";
        assert!(assemble(trailing, 2).unwrap().choices.is_empty());
    }

    #[test]
    fn the_size_cap_holds_for_a_stream() {
        let piece = delta(0, json!({"content": "x".repeat(100)}));
        let mut a = SseAssembler::new(1000);
        let mut result = Ok(());
        for _ in 0..20 {
            result = a.feed(piece.as_bytes());
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(StreamError::TooLarge { limit: 1000 }));
        assert_eq!(
            StreamError::TooLarge { limit: 64 << 20 }.to_string(),
            "the response body exceeds 64 MiB, the most a response may hold"
        );
    }

    #[test]
    fn a_whole_text_in_sse_form_is_read_too() {
        let text = [delta(0, json!({"content": "hi"})), finish(0, "stop")].concat();
        assert_eq!(
            assemble_text(&text, 1 << 20).unwrap().choices[0]
                .message
                .content,
            "hi"
        );
    }
}
