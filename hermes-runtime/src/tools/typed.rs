//! Author-defined tools from typed Rust functions: the JSON schema of the parameters is
//! derived from the argument type (`#[derive(Deserialize, JsonSchema)]`), arguments are
//! deserialised into it, and the function's `Ok` value (anything `Serialize`) or `Err`
//! message becomes the result.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{Tool, ToolCallContext};
use crate::llm::ToolSchema;
use crate::sandbox::Sandbox;

type BoxFuture = Pin<Box<dyn Future<Output = Value> + Send>>;
type Handler<A> = dyn Fn(A, Option<Arc<dyn Sandbox>>) -> BoxFuture + Send + Sync;

/// A tool built by [`typed_tool`] or [`sandbox_tool`].
pub struct TypedTool<A> {
    name: String,
    description: String,
    toolset: &'static str,
    parameters: Value,
    needs_sandbox: bool,
    handler: Box<Handler<A>>,
    _args: PhantomData<fn(A)>,
}

/// The parameters schema of `A`: an object schema without `$schema` and `title`.
fn parameters_schema<A: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(A)).unwrap_or_else(|_| json!({}));
    if let Some(obj) = v.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.entry("type").or_insert_with(|| "object".into());
        obj.entry("properties").or_insert_with(|| json!({}));
    }
    v
}

/// The result of a tool function as JSON.
fn outcome<R: Serialize, E: std::fmt::Display>(name: &str, result: Result<R, E>) -> Value {
    match result {
        Ok(r) => serde_json::to_value(r).unwrap_or_else(
            |e| json!({"error": format!("Error executing {name}: result is not JSON: {e}")}),
        ),
        Err(e) => json!({"error": format!("Error executing {name}: {e}")}),
    }
}

/// A tool running `f(args)` (no sandbox access). `A`'s schema becomes the tool's parameters.
pub fn typed_tool<A, R, E, F, Fut>(
    name: &str,
    description: &str,
    toolset: &'static str,
    f: F,
) -> TypedTool<A>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + 'static,
    E: std::fmt::Display + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
{
    let tool_name = name.to_owned();
    let f = Arc::new(f);
    TypedTool {
        name: name.to_owned(),
        description: description.to_owned(),
        toolset,
        parameters: parameters_schema::<A>(),
        needs_sandbox: false,
        handler: Box::new(move |args, _| {
            let (f, name) = (Arc::clone(&f), tool_name.clone());
            Box::pin(async move { outcome(&name, f(args).await) })
        }),
        _args: PhantomData,
    }
}

/// A tool running `f(args, sandbox)` in the rollout's sandbox.
pub fn sandbox_tool<A, R, E, F, Fut>(
    name: &str,
    description: &str,
    toolset: &'static str,
    f: F,
) -> TypedTool<A>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    R: Serialize + 'static,
    E: std::fmt::Display + 'static,
    F: Fn(A, Arc<dyn Sandbox>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
{
    let tool_name = name.to_owned();
    let f = Arc::new(f);
    TypedTool {
        name: name.to_owned(),
        description: description.to_owned(),
        toolset,
        parameters: parameters_schema::<A>(),
        needs_sandbox: true,
        handler: Box::new(move |args, sandbox| {
            let (f, name) = (Arc::clone(&f), tool_name.clone());
            Box::pin(async move {
                match sandbox {
                    Some(sandbox) => outcome(&name, f(args, sandbox).await),
                    None => json!({"error": format!("Error executing {name}: no sandbox")}),
                }
            })
        }),
        _args: PhantomData,
    }
}

#[async_trait]
impl<A: DeserializeOwned + Send + 'static> Tool for TypedTool<A> {
    fn schema(&self) -> ToolSchema {
        ToolSchema::function(&self.name, &self.description, self.parameters.clone())
    }

    fn toolset(&self) -> &'static str {
        self.toolset
    }

    fn uses_sandbox(&self) -> bool {
        self.needs_sandbox
    }

    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value {
        let args: A = match serde_json::from_value(Value::Object(args)) {
            Ok(a) => a,
            Err(e) => return json!({"error": format!("Invalid arguments for {}: {e}", self.name)}),
        };
        let sandbox = if self.needs_sandbox {
            match cx.sandbox.get().await {
                Ok(s) => Some(Arc::clone(s)),
                Err(e) => return json!({"error": format!("Error executing {}: {e}", self.name)}),
            }
        } else {
            None
        };
        (self.handler)(args, sandbox).await
    }
}
