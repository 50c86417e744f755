//! One MCP session: the handler rmcp runs per `Mcp-Session-Id`. The episode (item, sandbox,
//! transcript) opens at `initialize` and is torn down at the verdict, at the session's end
//! (DELETE, `--idle-timeout`, shutdown) and at `--session-lifetime`.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InitializeRequestParams, InitializeResult, JsonObject, ListPromptsResult, ListToolsResult,
    PaginatedRequestParams, Prompt, PromptMessage, ProtocolVersion, Role, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tracing::warn;

use crate::env::Environment;
use crate::llm::Message;
use crate::modes::openenv::episode::{
    tool_specs, Episode, EpisodeError, Pick, ToolFault, ToolSpec, SUBMIT_TOOL,
};
use crate::modes::openenv::SessionLimits;
use crate::modes::rollout::{Runtime, SharedEnv};

/// The name of the prompt that carries the episode's task.
pub const TASK_PROMPT: &str = "task";

/// The highest protocol revision served: the last one with sessions.
const NEWEST_WITH_SESSIONS: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// What every session shares.
pub(crate) struct Shared<E> {
    pub env: SharedEnv<E>,
    pub rt: Runtime,
    pub name: &'static str,
    pub about: String,
    pub limits: SessionLimits,
    pub slots: Arc<Semaphore>,
}

impl<E> Shared<E> {
    /// Sessions holding a slot now.
    pub fn active(&self) -> usize {
        self.limits.max_sessions - self.slots.available_permits()
    }
}

/// A session's episode and the slot it holds.
struct State<E: Environment> {
    episode: Option<Episode<E>>,
    slot: Option<OwnedSemaphorePermit>,
    /// Why the episode was ended from outside (its lifetime), told to later calls.
    ended: Option<String>,
}

/// The handler of one MCP session. rmcp also makes throwaway ones (to look up a tool's schema),
/// so nothing is opened until `initialize`.
pub(crate) struct McpSession<E: Environment> {
    shared: Arc<Shared<E>>,
    state: Arc<Mutex<State<E>>>,
    lifetime: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
}

impl<E: Environment> McpSession<E> {
    pub fn new(shared: Arc<Shared<E>>) -> Self {
        McpSession {
            shared,
            state: Arc::new(Mutex::new(State {
                episode: None,
                slot: None,
                ended: None,
            })),
            lifetime: std::sync::Mutex::new(None),
        }
    }

    /// Ends the episode after `--session-lifetime`, however busy the session is.
    fn arm_lifetime(&self) {
        let state = Arc::clone(&self.state);
        let lifetime = self.shared.limits.lifetime;
        let timer = tokio::spawn(async move {
            tokio::time::sleep(lifetime).await;
            let mut st = state.lock().await;
            if let Some(mut episode) = st.episode.take() {
                episode.close().await;
            }
            st.slot = None;
            st.ended = Some(format!(
                "the session reached its lifetime of {} s (--session-lifetime); its sandbox was removed",
                lifetime.as_secs()
            ));
        });
        *self.lifetime.lock().expect("lifetime lock") = Some(timer.abort_handle());
    }
}

impl<E: Environment> Drop for McpSession<E> {
    fn drop(&mut self) {
        let Some(timer) = self.lifetime.lock().ok().and_then(|mut t| t.take()) else {
            return; // never initialized: nothing to tear down
        };
        timer.abort();
        let state = Arc::clone(&self.state);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut st = state.lock().await;
                if let Some(mut episode) = st.episode.take() {
                    episode.close().await;
                }
                // The slot goes back only once the sandbox is gone (the shutdown drain waits on it).
                st.slot = None;
            });
        }
    }
}

/// The prompt as one text: what clients show the agent as the server's instructions.
fn instructions(prompt: &[Message]) -> String {
    prompt
        .iter()
        .map(|m| m.content.trim())
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn mcp_tool(spec: &ToolSpec) -> Tool {
    let schema: JsonObject = spec.input_schema.as_object().cloned().unwrap_or_default();
    Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    )
}

fn scrub(text: &str) -> String {
    crate::config::redact::scrub(text).into_owned()
}

/// A tool result the agent reads as an error, with its typed reason in `structuredContent`.
fn tool_error(text: &str, structured: Value) -> CallToolResponse {
    let mut result = CallToolResult::error(vec![ContentBlock::text(scrub(text))]);
    result.structured_content = Some(structured);
    result.into()
}

impl<E: Environment> ServerHandler for McpSession<E> {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .build();
        let mut server = Implementation::new(self.shared.name, env!("CARGO_PKG_VERSION"));
        if !self.shared.about.is_empty() {
            server.description = Some(self.shared.about.clone());
        }
        InitializeResult::new(capabilities)
            .with_server_info(server)
            .with_protocol_version(NEWEST_WITH_SESSIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_WITH_SESSIONS))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let info = self.negotiate_initialize(&request)?;
        let mut st = self.state.lock().await;
        if st.episode.is_some() || st.ended.is_some() {
            return Err(McpError::invalid_request(
                "this session is already initialized; open a new session for another episode",
                None,
            ));
        }
        let max = self.shared.limits.max_sessions;
        let Ok(slot) = Arc::clone(&self.shared.slots).try_acquire_owned() else {
            return Err(McpError::new(
                ErrorCode(-32000),
                format!("the server is full: {max} sessions are open (--max-sessions {max})"),
                Some(json!({"code": "CAPACITY_REACHED", "max_sessions": max})),
            ));
        };
        let episode = Episode::open(&self.shared.env, &self.shared.rt, Pick::Next, None)
            .await
            .map_err(|e| {
                McpError::internal_error(
                    scrub(&crate::diagnostics::error_chain(&e)),
                    e.outcome().map(|k| json!({"outcome": k.as_str()})),
                )
            })?;
        let text = scrub(&instructions(&episode.prompt()));
        st.episode = Some(episode);
        st.slot = Some(slot);
        drop(st);
        self.arm_lifetime();
        Ok(info.with_instructions(text))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = tool_specs(&self.shared.rt.group_tools());
        Ok(ListToolsResult::with_all_items(
            tools.iter().map(mcp_tool).collect(),
        ))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            TASK_PROMPT,
            Some("This session's task (the same text as the server's instructions)"),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != TASK_PROMPT {
            return Err(McpError::invalid_params(
                format!(
                    "unknown prompt '{}': the one prompt is '{TASK_PROMPT}'",
                    request.name
                ),
                None,
            ));
        }
        let st = self.state.lock().await;
        let Some(episode) = st.episode.as_ref() else {
            return Err(McpError::invalid_request(
                st.ended
                    .clone()
                    .unwrap_or_else(|| "no episode: initialize first".into()),
                None,
            ));
        };
        // MCP prompts have no system role: the system prompt comes first, as user text.
        let messages = episode
            .prompt()
            .iter()
            .map(|m| PromptMessage::new_text(Role::User, scrub(&m.content)))
            .collect();
        Ok(GetPromptResult::new(messages).into())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.as_ref();
        let tools = self.shared.rt.group_tools();
        if name != SUBMIT_TOOL && !tools.contains(name) {
            let mut offered: Vec<String> = tools.names().into_iter().map(str::to_owned).collect();
            offered.push(SUBMIT_TOOL.into());
            return Err(McpError::invalid_params(
                format!("Unknown tool: {name}"),
                Some(json!({"error_type": "tool_not_found", "tools": offered})),
            ));
        }
        let arguments = request.arguments.map_or(Value::Null, Value::Object);
        let mut st = self.state.lock().await;
        let Some(episode) = st.episode.as_mut() else {
            return Ok(match &st.ended {
                Some(why) => tool_error(why, json!({"error_type": "session_ended"})),
                None => tool_error(
                    "no episode: initialize first",
                    json!({"error_type": "no_episode"}),
                ),
            });
        };
        let step = match episode
            .call_tool(&self.shared.env, &self.shared.rt, name, &arguments)
            .await
        {
            Ok(step) => step,
            Err(e @ EpisodeError::Failed { .. }) => {
                let kind = e.outcome().map(|k| k.as_str()).unwrap_or_default();
                let message = crate::diagnostics::error_chain(&e);
                warn!(
                    "mcp episode {} failed ({kind} failure, no reward): {message}",
                    episode.id()
                );
                return Ok(tool_error(
                    &message,
                    json!({"outcome": kind, "done": true, "error": scrub(&message)}),
                ));
            }
            Err(e) => {
                return Ok(tool_error(
                    &crate::diagnostics::error_chain(&e),
                    json!({"error_type": "episode_finished", "done": true}),
                ))
            }
        };
        if let Some(fault) = &step.fault {
            let kind = match fault {
                ToolFault::NotFound => "tool_not_found",
                ToolFault::InvalidArgs => "invalid_args",
            };
            return Ok(tool_error(&step.content, json!({"error_type": kind})));
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(scrub(&step.content))]);
        if let Some(v) = &step.verdict {
            result.structured_content = Some(json!({
                "reward": v.reward,
                "done": true,
                "outcome": v.outcome_name(),
            }));
        }
        Ok(result.into())
    }
}
