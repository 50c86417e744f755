//! `ssh://` Docker endpoints through bollard's own `ssh` transport: the system `ssh` client
//! (so `~/.ssh/config`, agents and `known_hosts` apply as for `docker -H ssh://…`) runs
//! `docker system dial-stdio` on the remote host, which must have the Docker CLI.

use bollard::{ClientVersion, Docker};

use crate::sandbox::error::SandboxError;

/// A client for `ssh://[user@]host[?key=PATH]` (no request is made). `?key=` is the private
/// key to log in with (`ssh -i`, and no other key); without it ssh's own configuration
/// decides. A port in the URL is refused: bollard 0.21 hands `user@host:port` to `ssh`
/// unparsed, so the port must come from `~/.ssh/config`.
pub(super) fn client(host: &str, version: &ClientVersion) -> Result<Docker, SandboxError> {
    let (address, key) = match host.split_once("?key=") {
        Some((address, key)) => (address, Some(key.to_owned())),
        None => (host, None),
    };
    let authority = address.trim_start_matches("ssh://");
    let name = authority.rsplit('@').next().unwrap_or_default();
    if name.is_empty() || name.contains(['/', '?']) {
        return Err(SandboxError::Daemon(format!(
            "Docker host '{host}' is not of the form ssh://[user@]host[?key=PATH]"
        )));
    }
    let port = name
        .rsplit_once(':')
        .filter(|(_, port)| port.parse::<u16>().is_ok());
    if let Some((machine, port)) = port {
        return Err(SandboxError::Daemon(format!(
            "Docker host '{host}': ssh:// endpoints cannot carry a port (bollard passes it to \
             ssh unparsed); add `Host {machine}` with `Port {port}` to ~/.ssh/config and use \
             ssh://{}{machine}",
            authority
                .rsplit_once('@')
                .map_or(String::new(), |(user, _)| format!("{user}@"))
        )));
    }
    Docker::connect_with_ssh(address, 120, version, key)
        .map_err(|e| SandboxError::docker(format!("cannot connect to Docker at {host}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(host: &str) -> String {
        client(host, bollard::API_DEFAULT_VERSION)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn user_host_and_key_make_a_client_without_a_request() {
        assert!(client("ssh://me@builder?key=/k/id", bollard::API_DEFAULT_VERSION).is_ok());
        assert!(client("ssh://builder", bollard::API_DEFAULT_VERSION).is_ok());
    }

    #[test]
    fn a_port_is_refused_with_the_ssh_config_fix() {
        let e = error("ssh://me@10.0.0.2:2222");
        assert!(e.contains("add `Host 10.0.0.2` with `Port 2222`"), "{e}");
        assert!(e.contains("use ssh://me@10.0.0.2"), "{e}");
    }

    #[test]
    fn a_url_without_a_host_is_refused() {
        assert!(error("ssh://").contains("ssh://[user@]host"));
        assert!(error("ssh://me@").contains("ssh://[user@]host"));
    }
}
