//! The agent loop and its result.

mod result;
mod run;

pub(crate) use result::{clip, panic_message};
pub use result::{AgentResult, ToolError, TurnRecord};
pub(crate) use run::{parse_arguments, Dispatcher};
pub use run::{AgentLoop, AgentSettings, Ending};
