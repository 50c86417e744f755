//! Egress allowlists for sandbox containers (Harbor's `network_mode = "allowlist"`): the
//! container joins a Docker network with no route out (`internal`), and its `HTTP(S)_PROXY`
//! names an HTTP proxy this process runs on that network's gateway, which connects only to
//! the allowed hosts (names, `*.` wildcards, addresses, CIDR ranges) and refuses the rest with
//! 403. Nothing else leaves the container: a client that ignores the proxy variables reaches
//! nothing. The daemon must be this machine's (its gateway address is this machine's).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use bollard::models::NetworkCreateRequest;
use bollard::Docker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OnceCell;
use tracing::{info, warn};

use super::lifecycle::{Endpoint, LABEL_MANAGED};
use crate::sandbox::error::SandboxError;

/// The longest request head the proxy reads.
const HEAD_LIMIT: usize = 16 * 1024;

/// The egress network of one daemon and its proxies, one per allowlist.
#[derive(Debug)]
pub(crate) struct Egress {
    docker: Docker,
    endpoint: Endpoint,
    run_id: String,
    network: OnceCell<(String, IpAddr)>,
    proxies: Mutex<HashMap<Vec<String>, u16>>,
}

impl Egress {
    pub(crate) fn new(docker: Docker, endpoint: Endpoint, run_id: &str) -> Self {
        Egress {
            docker,
            endpoint,
            run_id: run_id.to_owned(),
            network: OnceCell::new(),
            proxies: Mutex::default(),
        }
    }

    /// The network a container allowed `hosts` joins, and the environment that sends its
    /// traffic through the proxy for them.
    pub(crate) async fn route(
        &self,
        hosts: &[String],
    ) -> Result<(String, Vec<String>), SandboxError> {
        let (network, gateway) = self.network().await?;
        let mut key = hosts.to_vec();
        key.sort();
        let known = self
            .proxies
            .lock()
            .expect("lock poisoned")
            .get(&key)
            .copied();
        let port = match known {
            Some(port) => port,
            None => {
                let port = start_proxy(*gateway, Rules::parse(&key)).await?;
                *self
                    .proxies
                    .lock()
                    .expect("lock poisoned")
                    .entry(key)
                    .or_insert(port)
            }
        };
        let proxy = format!("http://{gateway}:{port}");
        let env = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
            .iter()
            .map(|k| format!("{k}={proxy}"))
            .chain([
                "NO_PROXY=localhost,127.0.0.1,::1".into(),
                "no_proxy=localhost,127.0.0.1,::1".into(),
            ])
            .collect();
        Ok((network.clone(), env))
    }

    async fn network(&self) -> Result<&(String, IpAddr), SandboxError> {
        self.network
            .get_or_try_init(|| async {
                if !self.endpoint.host.starts_with("unix://") {
                    return Err(SandboxError::Create(format!(
                        "an egress allowlist needs the Docker daemon of this machine (its proxy runs here); {} is not",
                        self.endpoint.host
                    )));
                }
                let name = format!("hermes-egress-{}", self.run_id);
                let request = NetworkCreateRequest {
                    name: name.clone(),
                    internal: Some(true),
                    labels: Some(HashMap::from([(LABEL_MANAGED.to_owned(), "1".to_owned())])),
                    ..Default::default()
                };
                if let Err(e) = self.docker.create_network(request).await {
                    let exists = matches!(&e, bollard::errors::Error::DockerResponseServerError { status_code: 409, .. });
                    if !exists {
                        return Err(SandboxError::docker(format!("creating the egress network {name}"), e));
                    }
                }
                let inspected = self
                    .docker
                    .inspect_network(&name, None::<bollard::query_parameters::InspectNetworkOptions>)
                    .await
                    .map_err(|e| SandboxError::docker(format!("inspecting the egress network {name}"), e))?;
                let gateway = inspected
                    .ipam
                    .and_then(|i| i.config)
                    .into_iter()
                    .flatten()
                    .find_map(|c| c.gateway?.parse::<IpAddr>().ok())
                    .ok_or_else(|| SandboxError::Create(format!("the egress network {name} has no gateway address")))?;
                info!("egress allowlists: network {name}, proxy on {gateway}");
                Ok((name, gateway))
            })
            .await
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        let Some((name, _)) = self.network.get().cloned() else {
            return;
        };
        let endpoint = self.endpoint.clone();
        // On a thread of its own: the caller's runtime may be shutting down.
        let _ = std::thread::Builder::new()
            .name("hermes-egress-rm".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async {
                    if let Ok(docker) = endpoint.client() {
                        if let Err(e) = docker.remove_network(&name).await {
                            warn!("removing the egress network {name}: {e}");
                        }
                    }
                });
            })
            .map(|t| t.join());
    }
}

/// Allowed hosts: exact names, `*.` suffixes, addresses, CIDR ranges.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    names: Vec<String>,
    suffixes: Vec<String>,
    ranges: Vec<(IpAddr, u8)>,
}

impl Rules {
    pub(crate) fn parse(hosts: &[String]) -> Rules {
        let mut rules = Rules::default();
        for host in hosts {
            let host = host.trim().to_ascii_lowercase();
            if let Some(suffix) = host.strip_prefix("*.") {
                rules.suffixes.push(format!(".{suffix}"));
            } else if let Some((ip, bits)) = host.split_once('/') {
                if let (Ok(ip), Ok(bits)) = (ip.parse(), bits.parse()) {
                    rules.ranges.push((ip, bits));
                }
            } else if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
                rules.ranges.push((ip, if ip.is_ipv4() { 32 } else { 128 }));
            } else {
                rules.names.push(host);
            }
        }
        rules
    }

    /// Whether `host` (lower case, no brackets) is allowed by name: exactly, or under a `*.`
    /// wildcard.
    fn allows_name(&self, host: &str) -> bool {
        self.names.iter().any(|n| n == host)
            || self.suffixes.iter().any(|s| host.ends_with(s.as_str()))
    }

    /// Where `host` (a name or an address) may be reached, or why not. A name allowed by
    /// name goes wherever it resolves; otherwise every address it resolves to must be in a
    /// range.
    pub(crate) async fn admit(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<std::net::SocketAddr>, Refusal> {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        let by_name = self.allows_name(&host);
        let addrs: Vec<std::net::SocketAddr> =
            match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(addrs) => addrs.collect(),
                Err(_) if by_name => return Err(Refusal::Unresolved),
                Err(_) => return Err(Refusal::NotAllowed),
            };
        let in_ranges = addrs
            .iter()
            .all(|a| self.ranges.iter().any(|r| in_range(a.ip(), *r)));
        match by_name || (!addrs.is_empty() && in_ranges) {
            true if addrs.is_empty() => Err(Refusal::Unresolved),
            true => Ok(addrs),
            false => Err(Refusal::NotAllowed),
        }
    }
}

/// Why the proxy does not connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not on the allowlist: 403.
    NotAllowed,
    /// Allowed, but its name does not resolve here: 502.
    Unresolved,
}

fn in_range(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let bits = u32::from(bits.min(32));
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let bits = u32::from(bits.min(128));
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Starts a proxy for `rules` on `gateway`; returns its port.
async fn start_proxy(gateway: IpAddr, rules: Rules) -> Result<u16, SandboxError> {
    let listener = TcpListener::bind((gateway, 0)).await.map_err(|e| {
        SandboxError::Create(format!("the egress proxy cannot listen on {gateway}: {e}"))
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| SandboxError::Create(format!("the egress proxy's address: {e}")))?
        .port();
    let rules = Arc::new(rules);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let rules = Arc::clone(&rules);
            tokio::spawn(async move {
                let _ = serve(client, &rules).await;
            });
        }
    });
    Ok(port)
}

/// One client connection: `CONNECT host:port` (tunnelled) or a request with an absolute URI
/// (forwarded as it came), to an allowed host; anything else is refused.
async fn serve(mut client: TcpStream, rules: &Rules) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut buf).await?;
        if n == 0 || head.len() > HEAD_LIMIT {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head[..head.iter().position(|&b| b == b'\r').unwrap_or(0)])
        .into_owned();
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (host, port, tunnel) = if method.eq_ignore_ascii_case("CONNECT") {
        let (h, p) = split_host_port(target, 443);
        (h, p, true)
    } else if let Some(rest) = target.strip_prefix("http://") {
        let authority = rest.split('/').next().unwrap_or("");
        let (h, p) = split_host_port(authority, 80);
        (h, p, false)
    } else {
        client
            .write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            .await?;
        return Ok(());
    };
    let addrs = match rules.admit(&host, port).await {
        Ok(addrs) => addrs,
        Err(refusal) => {
            let (status, body) = match refusal {
                Refusal::NotAllowed => {
                    info!("egress: refused {host}:{port} (not in the sandbox's allowlist)");
                    let body = format!("{host} is not in this sandbox's egress allowlist\n");
                    ("403 Forbidden", body)
                }
                Refusal::Unresolved => ("502 Bad Gateway", format!("{host} does not resolve\n")),
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            client.write_all(reply.as_bytes()).await?;
            return Ok(());
        }
    };
    let Ok(mut upstream) = TcpStream::connect(&addrs[..]).await else {
        client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
            .await?;
        return Ok(());
    };
    if tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
    } else {
        upstream.write_all(&head).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// `host:port` (or `[v6]:port`, or a bare host with `default`).
fn split_host_port(authority: &str, default: u16) -> (String, u16) {
    if let Some(rest) = authority.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once("]:") {
            return (h.to_owned(), p.parse().unwrap_or(default));
        }
        return (rest.trim_end_matches(']').to_owned(), default);
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h.to_owned(), p.parse().unwrap_or(default)),
        _ => (authority.to_owned(), default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_wildcards_addresses_and_ranges() {
        let rules = Rules::parse(&[
            "localhost".into(),
            "*.example.test".into(),
            "10.1.0.0/16".into(),
            "127.0.0.3".into(),
        ]);
        assert!(rules.admit("LOCALHOST", 80).await.is_ok());
        assert!(rules.admit("10.1.2.3", 80).await.is_ok());
        assert_eq!(rules.admit("10.2.0.1", 80).await, Err(Refusal::NotAllowed));
        assert!(rules.admit("127.0.0.3", 80).await.is_ok());
        assert_eq!(rules.admit("127.0.0.4", 80).await, Err(Refusal::NotAllowed));
        // Wildcards cover subdomains, not the apex; an allowed name that does not resolve
        // is a 502, not a refusal.
        assert!(rules.allows_name("a.example.test") && rules.allows_name("b.a.example.test"));
        assert!(!rules.allows_name("example.test") && !rules.allows_name("badexample.test"));
        assert_eq!(
            rules.admit("nowhere.example.test", 80).await,
            Err(Refusal::Unresolved)
        );
        assert_eq!(
            rules.admit("nowhere.invalid", 80).await,
            Err(Refusal::NotAllowed)
        );
        assert!(in_range(
            "::1".parse().unwrap(),
            ("::1".parse().unwrap(), 128)
        ));
        assert!(!in_range(
            "10.0.0.1".parse().unwrap(),
            ("::1".parse().unwrap(), 0)
        ));
        assert_eq!(split_host_port("a.b:8080", 80), ("a.b".into(), 8080));
        assert_eq!(split_host_port("[::1]:9", 80), ("::1".into(), 9));
        assert_eq!(split_host_port("a.b", 443), ("a.b".into(), 443));
    }
}
