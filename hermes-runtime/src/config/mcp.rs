//! `McpServer`: one MCP server whose tools an environment offers to the model (`mcp_servers`
//! in `#[hermes_env]`, YAML `env.mcp_servers`, `--env.mcp_servers '[…]'`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::section::IntoConfigValue;

/// Seconds one tool call may take before the server counts as hung (a rollout failure).
pub const DEFAULT_MCP_TIMEOUT: f64 = 60.0;

/// One MCP server: a stdio child (`command`, `args`, an environment allowlist) or a
/// Streamable HTTP endpoint (`url`, headers read from named variables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// The server's name: its tools are offered as `mcp__<name>__<tool>` and its toolset is
    /// `<name>` (letters, digits, `_` and `-`).
    pub name: String,
    /// stdio: the program to start (looked up on the allowlisted `PATH`, if any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: the child's whole environment. `NAME` passes the host's value of `NAME` (when
    /// set), `NAME=value` sets it; nothing else of the host's environment reaches the child.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// stdio: working directory of the child (null = this process's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Streamable HTTP: the endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: header name → the environment variable holding its value, e.g.
    /// `{"Authorization": "SEARCH_AUTH"}`; the values are never written anywhere.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_from_env: BTreeMap<String, String>,
    /// Seconds a start-up or one tool call may take before the server counts as hung.
    #[serde(default = "default_timeout")]
    pub timeout: f64,
}

fn default_timeout() -> f64 {
    DEFAULT_MCP_TIMEOUT
}

impl McpServer {
    /// A stdio server: `command` with `args`, started with an empty environment (add
    /// variables with [`Self::env`]).
    pub fn stdio<const N: usize>(name: &str, command: &str, args: [&str; N]) -> Self {
        McpServer {
            name: name.to_owned(),
            command: Some(command.to_owned()),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
            url: None,
            headers_from_env: BTreeMap::new(),
            timeout: DEFAULT_MCP_TIMEOUT,
        }
    }

    /// A Streamable HTTP server at `url`.
    pub fn http(name: &str, url: &str) -> Self {
        McpServer {
            url: Some(url.to_owned()),
            command: None,
            ..McpServer::stdio(name, "", [])
        }
    }

    /// Adds entries to the child's environment allowlist (`NAME` or `NAME=value`).
    pub fn env<const N: usize>(mut self, entries: [&str; N]) -> Self {
        self.env.extend(entries.iter().map(|e| (*e).to_owned()));
        self
    }

    /// Sends header `header` with the value of environment variable `var`.
    pub fn header_from_env(mut self, header: &str, var: &str) -> Self {
        self.headers_from_env
            .insert(header.to_owned(), var.to_owned());
        self
    }

    /// Sets the start-up and per-call time limit in seconds.
    pub fn timeout(mut self, seconds: f64) -> Self {
        self.timeout = seconds;
        self
    }

    /// Why this declaration cannot be started, if it cannot (checked before anything starts).
    pub fn problem(&self) -> Option<String> {
        let name = &self.name;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Some(format!(
                "MCP server name '{name}' must be letters, digits, '_' or '-'"
            ));
        }
        let command = self.command.as_deref().filter(|c| !c.is_empty());
        match (command, self.url.as_deref()) {
            (Some(_), Some(_)) => {
                return Some(format!(
                    "MCP server '{name}' has both `command` and `url`; give one"
                ))
            }
            (None, None) => {
                return Some(format!(
                    "MCP server '{name}' needs `command` (stdio) or `url` (Streamable HTTP)"
                ))
            }
            (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Some(format!(
                    "MCP server '{name}': url '{url}' is not http:// or https://"
                ))
            }
            _ => {}
        }
        if command.is_none() && (!self.env.is_empty() || !self.args.is_empty()) {
            return Some(format!(
                "MCP server '{name}': `args` and `env` are for stdio servers (it has a url)"
            ));
        }
        if command.is_some() && !self.headers_from_env.is_empty() {
            return Some(format!(
                "MCP server '{name}': `headers_from_env` is for HTTP servers (it has a command)"
            ));
        }
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 86_400.0) {
            return Some(format!(
                "MCP server '{name}': timeout {} must be in (0, 86400] seconds",
                self.timeout
            ));
        }
        None
    }
}

impl<const N: usize> IntoConfigValue<Option<Vec<McpServer>>> for [McpServer; N] {
    fn into_config_value(self) -> Option<Vec<McpServer>> {
        Some(self.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_checked_before_start() {
        assert!(McpServer::stdio("files", "python3", ["s.py"])
            .problem()
            .is_none());
        assert!(McpServer::http("search", "http://127.0.0.1:1/mcp")
            .problem()
            .is_none());
        let bad = |s: McpServer| s.problem().unwrap();
        assert!(bad(McpServer::stdio("a b", "x", [])).contains("letters"));
        assert!(bad(McpServer::http("s", "ftp://x")).contains("not http"));
        assert!(bad(McpServer::stdio("s", "", [])).contains("needs `command`"));
        assert!(bad(McpServer::http("s", "http://x").env(["PATH"])).contains("stdio"));
        assert!(bad(McpServer::stdio("s", "x", []).timeout(0.0)).contains("timeout"));
        let yaml: McpServer =
            serde_yaml::from_str("{name: s, url: 'http://x', headers_from_env: {A: B}}").unwrap();
        assert_eq!(yaml.timeout, DEFAULT_MCP_TIMEOUT);
        assert!(serde_yaml::from_str::<McpServer>("{name: s, urll: x}").is_err());
    }
}
