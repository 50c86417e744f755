//! Extra Docker daemons a test starts itself (each with its own data root, exec root,
//! containerd namespace, unix socket and loopback TCP port, a bridge of its own and no iptables
//! rules, so it never touches the main daemon's containers or network), loaded with the sandbox
//! image. Not `--bridge none`: a daemon started so deletes the host's `docker0`, which the main
//! daemon's bridge-networked containers need. A test that
//! cannot start one fails with the daemon's log. Dropping a [`Dockerd`] stops its daemon and
//! deletes its directories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::docker::{require_docker, IMAGE};

/// One extra daemon started by this test process.
pub struct Dockerd {
    /// `tcp://127.0.0.1:PORT`, what the sandbox settings get.
    pub host: String,
    /// `unix://…/sock`, what the `docker` CLI of the helpers uses.
    pub socket: String,
    dir: PathBuf,
    exec_root: PathBuf,
    namespace: String,
    /// Its own bridge (`hd<port>`), made before it starts and deleted with it.
    bridge: String,
    /// Server certificates when the TCP endpoint speaks TLS (see [`Dockerd::start_tls`]).
    tls: Option<PathBuf>,
    child: Option<Child>,
}

impl Dockerd {
    /// Starts a daemon named `name` (unique within the test binary) and loads the sandbox
    /// image into it (`docker save | docker -H … load`).
    pub fn start(name: &str) -> Dockerd {
        Self::start_with(name, false)
    }

    /// Like [`Dockerd::start`], with the TCP endpoint behind mutual TLS (certificates made
    /// with `openssl` for this daemon): `host` is `tcp://127.0.0.1:PORT?tls=DIR`, DIR holding
    /// the client's `ca.pem`, `cert.pem` and `key.pem`.
    pub fn start_tls(name: &str) -> Dockerd {
        Self::start_with(name, true)
    }

    fn start_with(name: &str, tls: bool) -> Dockerd {
        require_docker();
        let tag = format!("{name}-{}", std::process::id());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("dockerd-{tag}"));
        // Unix socket paths are short: the exec root (containerd's sockets) lives in /tmp.
        let exec_root = std::env::temp_dir().join(format!("hd-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("daemon directory");
        std::fs::write(dir.join("daemon.json"), "{}").expect("empty daemon config");
        let port = free_port();
        let tls = tls.then(|| make_certs(&dir));
        let host = match &tls {
            Some(_) => format!(
                "tcp://127.0.0.1:{port}?tls={}",
                dir.join("client").display()
            ),
            None => format!("tcp://127.0.0.1:{port}"),
        };
        let bridge = make_bridge(port);
        let mut d = Dockerd {
            bridge,
            tls,
            host,
            socket: format!("unix://{}/sock", dir.display()),
            dir,
            exec_root,
            namespace: format!("hd-{tag}"),
            child: None,
        };
        d.run();
        d.cli(&["info"]);
        let loaded = Command::new("sh")
            .arg("-c")
            .arg(format!("docker save {IMAGE} | docker -H {} load", d.socket))
            .output()
            .expect("docker save | docker load");
        assert!(
            loaded.status.success(),
            "copying {IMAGE} into the extra daemon failed: {}",
            String::from_utf8_lossy(&loaded.stderr)
        );
        d
    }

    /// Starts (or restarts) the daemon process and waits until it answers on its socket.
    pub fn run(&mut self) {
        assert!(self.child.is_none(), "the daemon already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))
            .expect("daemon log");
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(self.dir.join("daemon.json"))
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(&self.exec_root)
            .arg("--pidfile")
            .arg(self.dir.join("pid"))
            .args(["-H", &self.socket, "-H", self.tcp()])
            .args(self.tls_args())
            .args(["--bridge", &self.bridge, "--iptables=false"])
            .args(["--containerd-namespace", &self.namespace])
            .args([
                "--containerd-plugins-namespace",
                &format!("{}-p", self.namespace),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start dockerd (this test needs it, as root): {e}"));
        self.child = Some(child);
        let start = Instant::now();
        loop {
            let ping = Command::new("docker")
                .args([
                    "-H",
                    &self.socket,
                    "version",
                    "--format",
                    "{{.Server.Version}}",
                ])
                .output();
            if ping.is_ok_and(|o| o.status.success()) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("dockerd exited ({status}) at start:\n{}", self.log_tail());
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "dockerd did not answer within 60 s:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The TCP address the daemon listens on (without the client's `?tls=`).
    fn tcp(&self) -> &str {
        self.host.split('?').next().unwrap_or_default()
    }

    fn tls_args(&self) -> Vec<String> {
        let Some(server) = &self.tls else {
            return Vec::new();
        };
        let file = |f: &str| server.join(f).display().to_string();
        vec![
            "--tlsverify".into(),
            format!("--tlscacert={}", file("ca.pem")),
            format!("--tlscert={}", file("cert.pem")),
            format!("--tlskey={}", file("key.pem")),
        ]
    }

    /// Kills the daemon with SIGKILL (a host lost without warning); its containers' processes
    /// stay until it is started again, which stops them.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The daemon's process id (for SIGSTOP / SIGCONT).
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("the daemon runs").id() as i32
    }

    /// Runs the `docker` CLI against this daemon; panics on failure.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("docker")
            .args(["-H", &self.socket])
            .args(args)
            .output()
            .expect("docker CLI");
        assert!(
            out.status.success(),
            "docker -H {} {args:?} failed: {}",
            self.socket,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Group snapshot images on this daemon.
    pub fn snapshots(&self) -> usize {
        self.cli(&["images", "-q", "--filter", "label=hermes-env.role=snapshot"])
            .lines()
            .count()
    }

    /// `name state` of this project's labelled containers on this daemon (running or not).
    pub fn managed(&self) -> Vec<String> {
        self.cli(&[
            "ps",
            "-a",
            "--format",
            "{{.Names}} {{.State}}",
            "--filter",
            "label=hermes-env=1",
        ])
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// Waits (up to `limit`) until no labelled container is left; returns what is left. A
    /// daemon that just restarted may still be removing its auto-remove containers itself.
    /// Entries its listing shows but no request can find (`docker inspect`: no such
    /// container) are not containers: a daemon killed while it removed one may list it dead,
    /// without a name, until it restarts again. They are printed, not counted.
    pub fn wait_until_clean(&self, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        loop {
            let listed = self.cli(&[
                "ps",
                "-a",
                "--format",
                "{{.ID}} {{.Names}} {{.State}}",
                "--filter",
                "label=hermes-env=1",
            ]);
            let (ghosts, left): (Vec<&str>, Vec<&str>) =
                listed.lines().partition(|line| self.is_listed_only(line));
            if left.is_empty() || start.elapsed() > limit {
                if !ghosts.is_empty() {
                    eprintln!("listed, but no such container (not counted): {ghosts:?}");
                }
                return left.into_iter().map(str::to_owned).collect();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// True when `line` (`ID …`) names a container this daemon lists but cannot find.
    fn is_listed_only(&self, line: &str) -> bool {
        let id = line.split_whitespace().next().unwrap_or_default();
        let out = Command::new("docker")
            .args(["-H", &self.socket, "inspect", id])
            .output()
            .expect("docker CLI");
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("No such")
    }

    /// The last lines of the daemon's log (for a failure message).
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: the daemon stops its containers and its containerd.
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if start.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        // What the daemon left mounted under its directories, innermost first.
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| {
                Path::new(m).starts_with(&self.dir) || Path::new(m).starts_with(&self.exec_root)
            })
            .collect();
        ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in ours {
            let _ = Command::new("umount").arg(m).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.exec_root);
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .status();
    }
}

/// Makes the bridge `hd<port>` with a free `10.214.N.1/24` (the extra daemon's containers'
/// network), up.
fn make_bridge(port: u16) -> String {
    let name = format!("hd{port}");
    let ip = |args: &[&str]| {
        let out = Command::new("ip")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("this test needs `ip` (iproute2): {e}"));
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let _ = Command::new("ip").args(["link", "del", &name]).output();
    let used = ip(&["-o", "-4", "addr", "show"]);
    let n = (0..=255u8)
        .find(|n| !used.contains(&format!(" 10.214.{n}.")))
        .expect("every 10.214.N.0/24 is in use");
    ip(&["link", "add", &name, "type", "bridge"]);
    ip(&["addr", "add", &format!("10.214.{n}.1/24"), "dev", &name]);
    ip(&["link", "set", &name, "up"]);
    name
}

/// A CA, a server certificate for 127.0.0.1 (in `dir/server`) and a client certificate (in
/// `dir/client`), each directory with `ca.pem`, `cert.pem` and `key.pem`; returns the server's.
fn make_certs(dir: &Path) -> PathBuf {
    let script = r#"
set -e
mkdir -p server client
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca-key.pem -out ca.pem
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server/key.pem -out server.csr
printf 'subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth
' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile server.ext -out server/cert.pem
openssl req -newkey rsa:2048 -nodes -subj /CN=client -keyout client/key.pem -out client.csr
printf 'extendedKeyUsage=clientAuth
' > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile client.ext -out client/cert.pem
cp ca.pem server/ca.pem
cp ca.pem client/ca.pem
"#;
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (the TLS test needs it): {e}"));
    assert!(
        out.status.success(),
        "making test certificates with openssl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("server")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
