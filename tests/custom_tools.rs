//! Authors' own tools: a typed Rust function whose JSON schema is derived from its argument
//! type, registered (with its own toolset) by the `register_tools` hook, offered to the model
//! and called through the agent loop like a built-in.

mod common;

use common::Harness;
use hermes_env::prelude::*;
use hermes_env::schemars::JsonSchema;
use hermes_env::testing::{Reply, Script};
use hermes_env::tools::{sandbox_tool, typed_tool, ToolRegistry};

/// Arguments of `add`.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "hermes_env::schemars")]
struct AddArgs {
    /// First addend.
    a: i64,
    /// Second addend.
    b: i64,
    /// Optional label echoed back.
    label: Option<String>,
}

/// Arguments of `file_size`.
#[derive(Deserialize, JsonSchema)]
#[schemars(crate = "hermes_env::schemars")]
struct SizeArgs {
    /// File to measure.
    path: String,
}

/// An environment that offers a calculator toolset next to the built-ins.
#[hermes_env(name = "custom-tools", toolsets = ["math", "file"], main = false)]
struct CustomTools {}

#[hermes_env::hooks]
impl CustomTools {
    async fn get_next_item(&mut self) -> Option<u32> {
        Some(1)
    }

    fn format_prompt(&self, item: &u32) -> String {
        format!("add {item}")
    }

    async fn compute_reward(
        &self,
        _item: &u32,
        _run: &AgentResult,
        _ctx: &ToolContext,
    ) -> Result<f64> {
        Ok(1.0)
    }

    fn register_tools(&self, registry: &mut ToolRegistry) {
        registry.register(typed_tool(
            "add",
            "Add two integers.",
            "math",
            |args: AddArgs| async move {
                if args.a == i64::MAX {
                    anyhow::bail!("overflow");
                }
                Ok::<_, anyhow::Error>(json!({"sum": args.a + args.b, "label": args.label}))
            },
        ));
        registry.register(sandbox_tool(
            "file_size",
            "Size of a file in the task's sandbox, in bytes.",
            "math",
            |args: SizeArgs, sandbox| async move {
                sandbox
                    .read_file(&args.path)
                    .await
                    .map(|b| json!({"bytes": b.len()}))
            },
        ));
    }
}

fn tools() -> hermes_runtime::tools::ToolSet {
    let env = <CustomTools as hermes_env::EnvDefinition>::from_config(
        Default::default(),
        Default::default(),
    );
    let mut registry = ToolRegistry::builtin();
    env.register_tools(&mut registry);
    registry
        .resolve(Some(&["math".into(), "file".into()]), None)
        .unwrap()
        .0
}

#[test]
fn the_schema_is_derived_from_the_argument_type() {
    let schema = tools()
        .schemas()
        .iter()
        .find(|s| s.function.name == "add")
        .cloned()
        .unwrap();
    let params = serde_json::to_value(&schema.function.parameters).unwrap();
    assert_eq!(params["type"], "object");
    assert_eq!(params["required"], json!(["a", "b"]));
    assert_eq!(params["properties"]["a"]["type"], "integer");
    assert_eq!(params["properties"]["a"]["description"], "First addend.");
    assert!(params.get("$schema").is_none() && params.get("title").is_none());
}

#[tokio::test]
async fn custom_tools_run_in_the_agent_loop_with_coercion_and_error_shapes() {
    let mut h = Harness::new(Script::new([
        Reply::tool("add", json!({"a": "2", "b": 40, "label": "x"})),
        Reply::tool("add", json!({"a": 9223372036854775807i64, "b": 1}))
            .and_tool("add", json!({"a": "two", "b": 1})),
        Reply::tool("write_file", json!({"path": "f.txt", "content": "12345"}))
            .and_tool("file_size", json!({"path": "f.txt"})),
        Reply::text("done"),
    ]))
    .await;
    h.tools = tools();
    let r = h.run("add").await;
    assert_eq!(
        r.messages[2].content, r#"{"sum": 42, "label": "x"}"#,
        "\"2\" was coerced to 2"
    );
    assert_eq!(
        r.messages[4].content,
        r#"{"error": "Error executing add: overflow"}"#
    );
    assert!(
        r.messages[5]
            .content
            .starts_with(r#"{"error": "Invalid arguments for add: invalid type: string \"two\""#),
        "{}",
        r.messages[5].content
    );
    assert_eq!(r.messages[8].content, r#"{"bytes": 5}"#);
    assert_eq!(r.tool_errors.len(), 2);
}
