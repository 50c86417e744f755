//! The agent loop and its result.

mod result;
mod run;

pub use result::{clip, panic_message, AgentResult, ToolError};
pub use run::{parse_arguments, tool_failure, AgentLoop, AgentSettings};
