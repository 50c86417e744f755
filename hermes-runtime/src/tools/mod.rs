//! Model-facing tools: schemas, the toolset table, argument coercion and dispatch. Every tool
//! runs against the rollout's [`TaskSandbox`].

pub mod budget;
mod distributions;
mod files;
pub mod mcp;
mod patch;
mod process;
mod search;
mod searxng;
mod tavily;
mod terminal;
mod todo;
mod typed;
mod web;
mod web_http;
mod web_select;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use crate::llm::ToolSchema;
use crate::sandbox::{Sandbox, TaskSandbox};

pub(crate) use distributions::{DistributionSampler, GroupTools};
pub(crate) use files::{ReadFileTool, WriteFileTool};
pub(crate) use patch::PatchTool;
pub use process::cleanup as cleanup_processes;
pub(crate) use process::ProcessTool;
pub(crate) use search::SearchFilesTool;
pub(crate) use terminal::TerminalTool;
pub(crate) use todo::{MemoryTool, SessionSearchTool, TodoStore, TodoTool};
pub use typed::{sandbox_tool, typed_tool, TypedTool};
pub use web::FakeWebBackend;
pub(crate) use web::{Page, SearchHit, WebBackend, WebError, WebExtractTool, WebSearchTool};
pub(crate) use web_select::{select as select_web_backend, WebChoice};

/// What a tool call can reach: the rollout's sandbox and run settings.
pub struct ToolCallContext<'a> {
    /// The rollout's sandbox (created on first use).
    pub sandbox: &'a TaskSandbox,
    /// Default timeout of terminal commands.
    pub terminal_timeout: Duration,
    /// The rollout's first user message (context for tools that want it).
    pub user_task: &'a str,
}

/// One model-facing tool.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The OpenAI function definition.
    fn schema(&self) -> ToolSchema;
    /// The toolset it belongs to (`terminal`, `file`, …).
    fn toolset(&self) -> &'static str;
    /// Further toolsets that also include it (`web_search` is in `search` and `browser`).
    fn also_in(&self) -> &'static [&'static str] {
        &[]
    }
    /// Result size (characters) above which the result is saved in the sandbox and previewed;
    /// capped at `default_result_size_chars`. `None` = the default.
    fn max_result_chars(&self) -> Option<usize> {
        None
    }
    /// Whether the tool works in the rollout's sandbox: the agent loop then makes the sandbox
    /// before the call takes one of the `--env.tool_pool_size` permits, so a rollout waiting
    /// for a sandbox (a full Docker host) never holds a permit a rollout with a sandbox needs.
    /// Default `false`: a tool that uses the sandbox anyway still gets it, made under its
    /// permit.
    fn uses_sandbox(&self) -> bool {
        false
    }
    /// Runs the tool. Failures are results (`{"error": …}`), never panics or `Err`.
    async fn call(&self, args: Map<String, Value>, cx: &ToolCallContext<'_>) -> Value;
}

/// Hermes toolsets that exist upstream but have no tools available in this build (they need
/// a backend such as a web-search key); naming them is not an error.
const UNAVAILABLE_TOOLSETS: &[&str] = &[
    "web",
    "search",
    "browser",
    "vision",
    "image_gen",
    "code_execution",
    "delegation",
    "skills",
    "clarify",
    "cronjob",
    "tts",
];

/// The per-task directory, inside the sandbox, where tools keep their state (background
/// processes, saved oversized results): `/tmp/hermes-<hash of task id and workdir>`.
pub(crate) fn state_dir(sandbox: &dyn Sandbox) -> String {
    // FNV-1a: stable across runs and platforms.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in sandbox
        .task_id()
        .bytes()
        .chain([0])
        .chain(sandbox.workdir().bytes())
    {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}/hermes-{hash:016x}", sandbox.temp_dir())
}

/// A toolset name that no tool and no known Hermes toolset has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown toolset '{name}'; known toolsets: {}", known.join(", "))]
pub struct UnknownToolset {
    /// The requested name.
    pub name: String,
    /// Every toolset name accepted.
    pub known: Vec<String>,
}

/// All tools known to a run, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// The built-in tools: `terminal` (terminal, process), `file` (read_file, write_file,
    /// patch, search_files), `todo`, and the RL stand-ins `memory` and `session_search`.
    pub fn builtin() -> Self {
        let mut r = ToolRegistry::default();
        r.register(TerminalTool);
        r.register(ProcessTool);
        r.register(ReadFileTool);
        r.register(WriteFileTool);
        r.register(PatchTool);
        r.register(SearchFilesTool);
        r.register(TodoTool);
        r.register(MemoryTool);
        r.register(SessionSearchTool);
        r
    }

    /// Adds `web_search` and `web_extract` over `backend` (toolsets `web`, `search`).
    pub fn with_web(mut self, backend: Arc<dyn WebBackend>) -> Self {
        self.register(WebSearchTool(Arc::clone(&backend)));
        self.register(WebExtractTool(backend));
        self
    }

    /// Adds (or replaces) a tool.
    pub fn register(&mut self, tool: impl Tool + 'static) {
        let name = tool.schema().function.name;
        self.tools.insert(name, Arc::new(tool));
    }

    /// Names of the toolsets that have tools.
    pub fn toolsets(&self) -> Vec<&'static str> {
        let mut sets: Vec<_> = self
            .tools
            .values()
            .flat_map(|t| std::iter::once(t.toolset()).chain(t.also_in().iter().copied()))
            .collect();
        sets.sort_unstable();
        sets.dedup();
        sets
    }

    /// The tools of `enabled` toolsets (all when `None`) minus `disabled` ones. Unknown
    /// toolset names are an error; known-but-unavailable ones yield a warning.
    pub fn resolve(
        &self,
        enabled: Option<&[String]>,
        disabled: Option<&[String]>,
    ) -> Result<(ToolSet, Vec<String>), UnknownToolset> {
        let known = self.toolsets();
        let mut warnings = Vec::new();
        for name in enabled
            .into_iter()
            .flatten()
            .chain(disabled.into_iter().flatten())
        {
            if !known.contains(&name.as_str()) {
                if UNAVAILABLE_TOOLSETS.contains(&name.as_str()) {
                    warnings.push(format!(
                        "toolset '{name}' has no available tools in this build; skipped"
                    ));
                } else {
                    let mut all: Vec<String> = known.iter().map(|s| (*s).to_owned()).collect();
                    all.extend(
                        UNAVAILABLE_TOOLSETS
                            .iter()
                            .filter(|u| !known.contains(u))
                            .map(|s| (*s).to_owned()),
                    );
                    return Err(UnknownToolset {
                        name: name.clone(),
                        known: all,
                    });
                }
            }
        }
        let member = |t: &Arc<dyn Tool>, sets: &[String]| {
            sets.iter()
                .any(|s| s == t.toolset() || t.also_in().contains(&s.as_str()))
        };
        let tools = self
            .tools
            .iter()
            .filter(|(_, t)| enabled.is_none_or(|e| member(t, e)))
            .filter(|(_, t)| !disabled.is_some_and(|d| member(t, d)))
            .map(|(n, t)| (n.clone(), Arc::clone(t)))
            .collect();
        Ok((ToolSet::new(tools), warnings))
    }
}

/// The tools offered in one group's rollouts.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// The tools' schemas, built once: every chat request of every rollout sends them.
    schemas: Arc<[ToolSchema]>,
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolSet {
    fn new(tools: BTreeMap<String, Arc<dyn Tool>>) -> Self {
        let schemas = tools.values().map(|t| t.schema()).collect();
        ToolSet { tools, schemas }
    }

    /// Tool definitions to send with chat requests, sorted by name (shared, not copied).
    pub fn schemas(&self) -> Arc<[ToolSchema]> {
        Arc::clone(&self.schemas)
    }

    /// Sorted tool names.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// True when `name` is offered.
    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// The offered tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The parameters schema of the offered tool called `name`, from the schemas built once
    /// (a tool's `schema()` builds its JSON anew: 17 map entries for `terminal`, per call).
    pub fn parameters(&self, name: &str) -> Option<&Value> {
        self.schemas
            .iter()
            .find(|s| s.function.name == name)
            .map(|s| &s.function.parameters)
    }

    /// Calls a tool with schema-coerced arguments; unknown tools and missing required
    /// arguments are error results.
    pub async fn call(
        &self,
        name: &str,
        mut args: Map<String, Value>,
        cx: &ToolCallContext<'_>,
    ) -> Value {
        let (Some(tool), Some(schema)) = (self.tools.get(name), self.parameters(name)) else {
            return json!({"error": unknown_tool_message(name, &self.names())});
        };
        coerce_arguments(schema, &mut args);
        if let Some(missing) = missing_required(schema, &args) {
            return json!({"error": format!("Missing required argument '{missing}' for tool '{name}'")});
        }
        tool.call(args, cx).await
    }
}

/// Hermes's message for a call to a tool that is not offered, e.g.
/// `Unknown tool 'x'. Available tools: ['read_file', 'terminal']`.
pub(crate) fn unknown_tool_message(name: &str, available: &[&str]) -> String {
    let list: Vec<String> = available.iter().map(|n| format!("'{n}'")).collect();
    format!(
        "Unknown tool '{name}'. Available tools: [{}]",
        list.join(", ")
    )
}

fn missing_required<'a>(schema: &'a Value, args: &Map<String, Value>) -> Option<&'a str> {
    schema
        .get("required")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|r| args.get(*r).is_none_or(Value::is_null))
}

/// Coerces arguments to the types the schema declares: strings to numbers, booleans, arrays
/// and objects (`"42"` → 42, `"true"` → true, JSON text → arrays/objects), as Hermes's
/// dispatcher does, and — for formats whose parsers guess value types — numbers, booleans and
/// JSON values back to strings where a string is declared. Other values are left alone.
pub(crate) fn coerce_arguments(schema: &Value, args: &mut Map<String, Value>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, value) in args.iter_mut() {
        let ty = props
            .get(key)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str);
        let Some(text) = value.as_str() else {
            if ty == Some("string") {
                match value {
                    Value::Number(_) | Value::Bool(_) => *value = Value::String(value.to_string()),
                    Value::Array(_) | Value::Object(_) => {
                        *value = Value::String(crate::atropos::json::to_python_string(value))
                    }
                    _ => {}
                }
            }
            continue;
        };
        let coerced = match ty {
            Some("integer") => text.trim().parse::<i64>().ok().map(Value::from),
            Some("number") => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Value::from),
            Some("boolean") => match text.trim().to_ascii_lowercase().as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            Some("array") | Some("object") => serde_json::from_str(text).ok(),
            _ => None,
        };
        if let Some(v) = coerced {
            *value = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coercion_follows_the_schema() {
        let schema = json!({"properties": {"n": {"type": "integer"}, "b": {"type": "boolean"},
            "l": {"type": "array"}, "s": {"type": "string"}}});
        let mut args: Map<String, Value> =
            serde_json::from_value(json!({"n": "42", "b": "true", "l": "[1]", "s": "7", "x": "1"}))
                .unwrap();
        coerce_arguments(&schema, &mut args);
        assert_eq!(
            Value::Object(args),
            json!({"n": 42, "b": true, "l": [1], "s": "7", "x": "1"})
        );
        let mut guessed: Map<String, Value> =
            serde_json::from_value(json!({"s": 42, "n": 1.5, "b": false})).unwrap();
        let schema = json!({"properties": {"s": {"type": "string"}, "n": {"type": "number"}, "b": {"type": "string"}}});
        coerce_arguments(&schema, &mut guessed);
        assert_eq!(
            Value::Object(guessed),
            json!({"s": "42", "n": 1.5, "b": "false"})
        );
    }

    #[test]
    fn toolset_resolution() {
        let r = ToolRegistry::builtin();
        let (all, _) = r.resolve(None, None).unwrap();
        assert_eq!(
            all.names(),
            [
                "memory",
                "patch",
                "process",
                "read_file",
                "search_files",
                "session_search",
                "terminal",
                "todo",
                "write_file"
            ]
        );
        let (t, _) = r.resolve(Some(&["terminal".into()]), None).unwrap();
        assert_eq!(t.names(), ["process", "terminal"]);
        let (f, w) = r
            .resolve(
                Some(&["file".into(), "web".into()]),
                Some(&["terminal".into()]),
            )
            .unwrap();
        assert_eq!(
            f.names(),
            ["patch", "read_file", "search_files", "write_file"]
        );
        assert_eq!(w.len(), 1);
        assert!(r
            .resolve(Some(&["termnal".into()]), None)
            .unwrap_err()
            .to_string()
            .contains("unknown toolset 'termnal'"));
        let web = ToolRegistry::builtin().with_web(Arc::new(FakeWebBackend::new()));
        let (s, w) = web.resolve(Some(&["search".into()]), None).unwrap();
        assert_eq!((s.names(), w.len()), (vec!["web_search"], 0));
        let (b, _) = web
            .resolve(Some(&["web".into()]), Some(&["search".into()]))
            .unwrap();
        assert_eq!(b.names(), ["web_extract"]);
    }

    #[test]
    fn unknown_tool_message_matches_hermes() {
        assert_eq!(
            unknown_tool_message("x", &["read_file", "terminal"]),
            "Unknown tool 'x'. Available tools: ['read_file', 'terminal']"
        );
    }
}
