//! Configuration: typed sections, their flags, YAML layering and the CLI.

pub mod cli;
mod default_server;
mod env;
pub mod flags;
pub mod redact;
mod resolve;
mod section;
mod server;

pub use default_server::{DefaultServer, OPENROUTER_BASE_URL};
pub use env::{EvalHandling, HermesEnvConfig};
pub use flags::{FieldSpec, FlagShape, FlagType, ScalarKind};
pub use resolve::{manager_fields, resolve, EnvDescriptor, FlagValues, Mode, ResolvedConfig};
pub use section::{set_default, ConfigSection, IntoConfigValue, NoConfig};
pub use server::{ApiServerConfig, ManagerConfig, ServerType};

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
