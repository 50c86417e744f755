//! OpenAI chat-completion message shapes, exactly as Hermes transcripts store them.

use serde::{Deserialize, Deserializer, Serialize};

pub use crate::calls::{new_call_id, FunctionCall, ToolCall};
use std::sync::{Arc, Mutex, Weak};

use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One chat message. `content` is always a string (`""` rather than `null` for assistant
/// messages that only carry tool calls, since some servers reject `null`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Text content.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// Reasoning text the server returned for an assistant turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls requested by an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// How an assistant turn's generation ended (`stop`, `tool_calls`, `length` = cut at
    /// `max_tokens`), in the transcripts written for people and trainers
    /// ([`crate::agent::AgentResult::annotated_messages`]); never set on what a server is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The server's token counts for an assistant turn, alongside `finish_reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl Message {
    fn plain(role: &str, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
            finish_reason: None,
            usage: None,
        }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain("user", content)
    }

    /// An `assistant` message without tool calls.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain("assistant", content)
    }

    /// A `tool` message answering `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::plain("tool", content)
        }
    }
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => String::new(),
        Value::String(s) => s,
        // Content parts (`[{"type":"text","text":…}]`): keep the text parts.
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    })
}

/// An OpenAI function-tool definition offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Name, description and JSON-schema parameters.
    pub function: FunctionSchema,
}

/// The function part of a tool definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionSchema {
    /// Tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

impl ToolSchema {
    /// A function tool definition.
    pub fn function(name: &str, description: &str, parameters: Value) -> Self {
        ToolSchema {
            kind: "function".into(),
            function: FunctionSchema {
                name: name.into(),
                description: description.into(),
                parameters,
            },
        }
    }
}

/// Whether a request belongs to training or evaluation (separate concurrency limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Training rollouts.
    Train,
    /// Evaluation rollouts.
    Eval,
}

/// One chat-completion call.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools offered (`tool_choice: "auto"` is sent with them); shared by every request of
    /// a rollout.
    pub tools: Arc<[ToolSchema]>,
    /// Number of choices.
    pub n: u32,
    /// Sampling temperature.
    pub temperature: f64,
    /// Completion token limit.
    pub max_tokens: Option<u32>,
    /// Extra keys merged into the JSON body (OpenAI SDK `extra_body` semantics).
    pub extra_body: Map<String, Value>,
    /// Train or eval limits.
    pub split: Split,
}

impl ChatRequest {
    /// The JSON body sent to `/chat/completions` for `model`, serialised straight from the
    /// request (no intermediate `Value` tree of the whole conversation per turn).
    pub fn body<'a>(&'a self, model: &'a str) -> ChatBody<'a> {
        ChatBody {
            request: self,
            model,
            stream: false,
        }
    }

    /// [`Self::body`] asking for the answer as a stream of server-sent events, with the token
    /// counts in its last chunk (`stream: true`, `stream_options: {"include_usage": true}`).
    pub fn streaming_body<'a>(&'a self, model: &'a str) -> ChatBody<'a> {
        ChatBody {
            stream: true,
            ..self.body(model)
        }
    }
}

/// [`ChatRequest::body`]: `model`, `messages`, `n`, `temperature`, `max_tokens` (when set),
/// `tools` with `tool_choice: "auto"` (when tools are offered), `stream` and `stream_options`
/// (when streaming), then the `extra_body` keys.
/// An `extra_body` key that names one of those replaces its value in place (as a merge into a
/// JSON object does), so the caller can override anything.
#[derive(Debug, Clone, Copy)]
pub struct ChatBody<'a> {
    request: &'a ChatRequest,
    model: &'a str,
    stream: bool,
}

impl serde::Serialize for ChatBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let r = self.request;
        let extra = &r.extra_body;
        let mut map = serializer.serialize_map(None)?;
        body_entry(&mut map, extra, "model", self.model)?;
        body_entry(&mut map, extra, "messages", &r.messages)?;
        body_entry(&mut map, extra, "n", &r.n)?;
        body_entry(&mut map, extra, "temperature", &r.temperature)?;
        if let Some(m) = &r.max_tokens {
            body_entry(&mut map, extra, "max_tokens", m)?;
        }
        if !r.tools.is_empty() {
            body_entry(&mut map, extra, "tools", &*tools_json(&r.tools))?;
            body_entry(&mut map, extra, "tool_choice", "auto")?;
        }
        if self.stream {
            body_entry(&mut map, extra, "stream", &true)?;
            let usage = serde_json::json!({"include_usage": true});
            body_entry(&mut map, extra, "stream_options", &usage)?;
        }
        for (k, v) in extra {
            let written = matches!(k.as_str(), "model" | "messages" | "n" | "temperature")
                || (k == "max_tokens" && r.max_tokens.is_some())
                || (matches!(k.as_str(), "tools" | "tool_choice") && !r.tools.is_empty())
                || (matches!(k.as_str(), "stream" | "stream_options") && self.stream);
            if !written {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// Values made once per shared tool list. Every turn of every rollout offers the same list
/// (one `Arc`), so what is derived from it (the chat body's `tools` text, the chat template's
/// values) is made once per list, not per request. A list is known by its allocation, which
/// the `Weak` kept beside its value holds, so no other list can take its address while the
/// entry lives; at most [`Self::KEPT`] lists are kept (a run offers one, or one per toolset
/// distribution draw).
#[derive(Debug)]
pub(crate) struct PerToolList<V> {
    made: Mutex<Vec<(Weak<[ToolSchema]>, V)>>,
}

impl<V: Clone> PerToolList<V> {
    const KEPT: usize = 16;

    /// An empty memo.
    pub const fn new() -> Self {
        PerToolList {
            made: Mutex::new(Vec::new()),
        }
    }

    /// The value of `tools`, made with `make` the first time.
    pub fn get_or_make(&self, tools: &Arc<[ToolSchema]>, make: impl FnOnce() -> V) -> V {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, value)) = made
            .iter()
            .find(|(list, _)| std::ptr::addr_eq(list.as_ptr(), Arc::as_ptr(tools)))
        {
            return value.clone();
        }
        let value = make();
        made.retain(|(list, _)| list.strong_count() > 0);
        if made.len() >= Self::KEPT {
            made.remove(0);
        }
        made.push((Arc::downgrade(tools), value.clone()));
        value
    }
}

/// The JSON text of a request's `tools`, made once per shared list ([`PerToolList`]):
/// serialising the schemas again for every request was a tenth of a turn's chat-body work.
fn tools_json(tools: &Arc<[ToolSchema]>) -> Arc<RawValue> {
    static MADE: PerToolList<Arc<RawValue>> = PerToolList::new();
    MADE.get_or_make(tools, || {
        let text = serde_json::to_string(&**tools).expect("tool schemas serialise");
        RawValue::from_string(text)
            .expect("serde_json writes valid JSON")
            .into()
    })
}

/// One standard key of a [`ChatBody`]: `extra_body`'s value for it when there is one.
fn body_entry<M: serde::ser::SerializeMap, T: serde::Serialize + ?Sized>(
    map: &mut M,
    extra: &Map<String, Value>,
    key: &str,
    value: &T,
) -> Result<(), M::Error> {
    match extra.get(key) {
        Some(given) => map.serialize_entry(key, given),
        None => map.serialize_entry(key, value),
    }
}

/// The parts of a chat-completion response the agent loop reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChatResponse {
    /// Choices; may be empty on misbehaving servers.
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// Token counts the server reports, when it does.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// A response's `usage`: the tokens of its prompt and of its completion (all choices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Tokens generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
}

/// One choice of a response.
#[derive(Debug, Clone, Deserialize)]
pub struct Choice {
    /// The assistant message.
    pub message: ResponseMessage,
    /// `stop`, `length`, `tool_calls`, …
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// An assistant message as servers return it, with every reasoning field providers use.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseMessage {
    /// Text content (null becomes `""`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// Native tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// vLLM / DeepSeek style reasoning.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// OpenRouter style reasoning.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// OpenRouter `reasoning_details: [{"text": …}]`.
    #[serde(default)]
    pub reasoning_details: Option<Value>,
}

impl ResponseMessage {
    /// The first non-empty of `reasoning_content`, `reasoning`, `reasoning_details[0].text`.
    pub fn reasoning_text(&self) -> Option<String> {
        let non_empty = |s: &Option<String>| s.as_ref().filter(|s| !s.is_empty()).cloned();
        non_empty(&self.reasoning_content)
            .or_else(|| non_empty(&self.reasoning))
            .or_else(|| {
                self.reasoning_details
                    .as_ref()
                    .and_then(|d| d.get(0))
                    .and_then(|d| d.get("text"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_sends_auto_tool_choice_and_merges_extra_body() {
        let mut extra = Map::new();
        extra.insert("provider".into(), json!({"order": ["x"]}));
        let req = ChatRequest {
            messages: vec![Message::user("hi")],
            tools: vec![ToolSchema::function(
                "terminal",
                "run",
                json!({"type": "object"}),
            )]
            .into(),
            n: 1,
            temperature: 1.0,
            max_tokens: Some(16),
            extra_body: extra,
            split: Split::Train,
        };
        let body = serde_json::to_value(req.body("m")).unwrap();
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["provider"]["order"][0], "x");
        assert_eq!(body["max_tokens"], 16);
        assert_eq!(
            body["messages"][0],
            json!({"role": "user", "content": "hi"})
        );
    }

    /// The body is the old `Value` merge, byte for byte: standard keys in their order, an
    /// `extra_body` key that names one replaces it in place, the other keys follow.
    #[test]
    fn extra_body_replaces_standard_keys_in_place_and_appends_the_rest() {
        let mut extra = Map::new();
        extra.insert("top_p".into(), json!(0.9));
        extra.insert("temperature".into(), json!(0.25));
        extra.insert("max_tokens".into(), json!(99));
        let mut req = ChatRequest {
            messages: vec![Message::user("hi")],
            tools: Vec::new().into(),
            n: 2,
            temperature: 1.0,
            max_tokens: None,
            extra_body: extra,
            split: Split::Eval,
        };
        let text = serde_json::to_string(&req.body("m")).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2,"temperature":0.25,"top_p":0.9,"max_tokens":99}"#
        );
        req.max_tokens = Some(16);
        let text = serde_json::to_string(&req.body("m")).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2,"temperature":0.25,"max_tokens":99,"top_p":0.9}"#
        );
    }

    /// The `tools` text is made once per shared list and sent exactly as serialising the
    /// schemas in place would write it; another list gets its own text.
    #[test]
    fn the_tools_text_is_made_once_per_list_and_sent_verbatim() {
        let schema = |name: &str| {
            ToolSchema::function(
                name,
                "run \"quoted\" é",
                json!({"type": "object", "properties": {"command": {"type": "string"}}}),
            )
        };
        let tools: Arc<[ToolSchema]> = vec![schema("terminal"), schema("read_file")].into();
        let req = ChatRequest {
            messages: vec![Message::user("hi")],
            tools: Arc::clone(&tools),
            n: 1,
            temperature: 1.0,
            max_tokens: None,
            extra_body: Map::new(),
            split: Split::Train,
        };
        let inline = serde_json::to_string(&*tools).unwrap();
        let text = serde_json::to_string(&req.body("m")).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"n":1,"temperature":1.0,"tools":{inline},"tool_choice":"auto"}}"#
            )
        );
        assert!(Arc::ptr_eq(&tools_json(&tools), &tools_json(&tools)));
        let other: Arc<[ToolSchema]> = vec![schema("patch")].into();
        assert_eq!(
            tools_json(&other).get(),
            serde_json::to_string(&*other).unwrap()
        );
        assert_eq!(
            serde_json::to_value(req.body("m")).unwrap()["tools"],
            serde_json::to_value(&*tools).unwrap()
        );
    }

    #[test]
    fn response_tolerates_null_content_object_arguments_and_missing_ids() {
        let r: ChatResponse = serde_json::from_value(json!({"choices": [{"message": {
            "content": null, "reasoning_details": [{"text": "think"}],
            "tool_calls": [{"function": {"name": "t", "arguments": {"a": 1}}}]}}]}))
        .unwrap();
        let m = &r.choices[0].message;
        assert_eq!(m.content, "");
        assert_eq!(m.reasoning_text().as_deref(), Some("think"));
        let call = &m.tool_calls.as_ref().unwrap()[0];
        assert_eq!(call.function.arguments, r#"{"a":1}"#);
        assert!(call.id.starts_with("call_") && call.id.len() == 13);
    }
}
