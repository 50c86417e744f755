//! A real `sshd` (Debian's openssh-server, installed by the test when missing) that the test
//! starts on 127.0.0.1 with its own host key, authorized key and config: key-only login bound
//! to loopback, nothing reachable from outside. Killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use hermes_runtime::sandbox::SshSettings;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running sshd and the client files that reach it.
pub struct Sshd {
    _child: Child,
    /// Holds the keys, configs and `known_hosts`.
    pub dir: tempfile::TempDir,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// The user it lets in (the test's own).
    pub user: String,
}

impl Sshd {
    /// The client's private key.
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// A client config (`ssh -F`) that trusts this sshd's host key and no other.
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("client_config")
    }

    /// The upstream variables (plus the client config) that point the backend at this sshd.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TERMINAL_SSH_HOST", "127.0.0.1".into()),
            ("TERMINAL_SSH_PORT", self.port.to_string()),
            ("TERMINAL_SSH_USER", self.user.clone()),
            ("TERMINAL_SSH_KEY", self.key().display().to_string()),
            ("TERMINAL_SSH_CONFIG", self.config().display().to_string()),
        ]
    }

    /// The ssh backend's settings for this sshd.
    pub fn settings(&self) -> SshSettings {
        let vars = self.vars();
        SshSettings::from_lookup(|n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()))
            .unwrap()
    }
}

fn keygen(path: &Path) {
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .expect("run ssh-keygen");
    assert!(status.success(), "ssh-keygen failed");
}

/// Starts an sshd on a free loopback port (installing openssh-server when missing).
pub async fn start_sshd() -> Sshd {
    super::ensure_debian_package("sshd", "openssh-server");
    let sshd = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v sshd"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::create_dir_all("/run/sshd").expect("sshd's privilege separation directory");
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    keygen(&d.join("host_key"));
    keygen(&d.join("client_key"));
    std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
    let user = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    // A free port can be taken by another test before sshd binds it: then another port.
    let mut attempt = 0;
    let (child, mut lines, port) = loop {
        attempt += 1;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        write_configs(d, port, &user);
        match listening(&sshd, d).await {
            Ok((child, lines)) => break (child, lines, port),
            Err(log) if log.contains("Address already in use") && attempt < 3 => {
                eprintln!("sshd: port {port} was taken before it bound it; trying another");
            }
            Err(log) => panic!("sshd exited before listening:\n{log}"),
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Sshd {
        _child: child,
        dir,
        port,
        user,
    }
}

/// sshd's config for `port`, and the client's `known_hosts` and config that trust it, in `d`.
fn write_configs(d: &Path, port: u16, user: &str) {
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
             PidFile {d}/sshd.pid\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nAllowUsers {user}\nUsePAM no\n\
             StrictModes no\nX11Forwarding no\nAllowTcpForwarding no\nPermitUserEnvironment no\n",
            d = d.display()
        ),
    )
    .unwrap();
    let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
    std::fs::write(
        d.join("known_hosts"),
        format!("[127.0.0.1]:{port} {host_pub}"),
    )
    .unwrap();
    std::fs::write(
        d.join("client_config"),
        format!(
            "Host *\n  UserKnownHostsFile {}/known_hosts\n  GlobalKnownHostsFile /dev/null\n",
            d.display()
        ),
    )
    .unwrap();
}

type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStderr>>;

/// Starts `sshd` with the config in `d` and waits for the line saying it listens; what it
/// printed when it exited first.
async fn listening(sshd: &str, d: &Path) -> Result<(Child, Lines), String> {
    let mut child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start sshd");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    loop {
        match lines.next_line().await.unwrap() {
            Some(line) if line.contains("Server listening on 127.0.0.1") => {
                return Ok((child, lines))
            }
            Some(line) => log.push_str(&format!("{line}\n")),
            None => return Err(log),
        }
    }
}
