//! Tool calls as the model requests them (OpenAI's shape): the one type both the inference
//! clients and the raw-text parsers speak, kept apart so neither depends on the other.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A function call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id echoed back in the `tool` message.
    #[serde(default = "new_call_id")]
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// Name and raw JSON arguments.
    pub function: FunctionCall,
}

impl ToolCall {
    /// A call with a fresh `call_<8 hex>` id.
    pub fn new(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall {
            id: new_call_id(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }
}

/// The function part of a tool call; `arguments` is the model's raw JSON text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text (kept raw so malformed JSON can be reported to the model).
    #[serde(default, deserialize_with = "arguments_as_text")]
    pub arguments: String,
}

fn arguments_as_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => String::new(),
        Value::String(s) => s,
        other => other.to_string(),
    })
}

/// A fresh OpenAI-style call id, `call_<8 hex>`.
pub fn new_call_id() -> String {
    format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

fn function_type() -> String {
    "function".into()
}
