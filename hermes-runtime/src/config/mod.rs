//! Configuration: typed sections, their flags, YAML layering and the CLI.

pub mod cli;
mod default_server;
mod env;
pub mod flags;
mod mcp;
pub mod redact;
mod resolve;
mod section;
mod server;
mod yaml_depth;

pub use default_server::DefaultServer;
pub use env::{EvalHandling, HermesEnvConfig};
pub use flags::{FieldSpec, FlagShape, FlagType, Range, ScalarKind};
pub use mcp::{McpServer, DEFAULT_MCP_TIMEOUT};
pub(crate) use resolve::manager_fields;
pub use resolve::{resolve, EnvDescriptor, Mode, ResolvedConfig};
pub use section::{set_default, ConfigSection, NoConfig};
pub(crate) use server::ManagerConfig;
pub use server::{ApiServerConfig, ServerType};

/// A configuration problem; every variant renders as one line and exits with code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Bad command line (unknown flag, bad value, conflicting flags).
    #[error("{0}")]
    Usage(String),
    /// Unreadable or invalid YAML, or a bad value in it.
    #[error("{0}")]
    Yaml(String),
    /// A merged value fails validation.
    #[error("{0}")]
    Invalid(String),
}
