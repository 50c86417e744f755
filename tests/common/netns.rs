//! The project's own test hosts: network namespaces (`ip netns`), each joined by a veth pair to
//! a bridge in the test's own namespace, which holds the "host side" address every namespace
//! reaches. Names carry the test process's pid, so concurrent test processes never collide;
//! dropping a [`TestNet`] (also while a test panics) deletes its namespaces, veths and bridge,
//! and creating one first removes what a killed test process left behind.

use std::net::Ipv4Addr;
use std::process::Command;

/// The address block the test networks are cut from: one /24 per live test network.
const BLOCK: [u8; 2] = [10, 213];

/// One test host: a network namespace with loopback and one veth address.
pub struct TestHost {
    /// The namespace's name (`ip netns exec NAME …`).
    pub netns: String,
    /// Its address on the test network.
    pub addr: Ipv4Addr,
}

impl TestHost {
    /// Processes running inside this host.
    pub fn pids(&self) -> Vec<u32> {
        ip(&["netns", "pids", &self.netns])
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// The command prefix that runs a program inside this host.
    pub fn exec_prefix(&self) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.netns.clone(),
        ]
    }
}

/// A bridge in the test's namespace with `count` test hosts on it; removed when dropped.
pub struct TestNet {
    bridge: String,
    /// The bridge's address: the host side, where the test runs its servers.
    pub host_addr: Ipv4Addr,
    /// The test hosts, in creation order.
    pub hosts: Vec<TestHost>,
    /// The veth ends in the test's namespace (gone with their namespace once moved there).
    outer: Vec<String>,
}

/// Runs `ip ARGS`, panicking with its error output when it fails.
fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip {}`: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "`ip {}` failed (the netns tests need root and a kernel with network namespaces, veth \
         and bridge support):\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ip ARGS` for clean-up: failures are reported, never raised (this runs in `Drop`).
fn ip_quiet(args: &[&str]) {
    match Command::new("ip").args(args).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "clean-up: `ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("clean-up: cannot run `ip {}`: {e}", args.join(" ")),
    }
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a name made by this module (`hermes-<pid>-<i>` or `hb<pid>`).
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("hermes-")
        .and_then(|r| r.split('-').next())
        .or_else(|| name.strip_prefix("hb"))?;
    rest.parse().ok()
}

/// Deletes the namespaces and bridges of test processes that no longer exist.
fn remove_leftovers() {
    for line in ip(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if owner_pid(name).is_some_and(|pid| !alive(pid)) {
            eprintln!("removing network namespace {name} left by a killed test process");
            ip_quiet(&["netns", "del", name]);
        }
    }
    for line in ip(&["-o", "link", "show", "type", "bridge"]).lines() {
        let name = line
            .split(':')
            .nth(1)
            .map(str::trim)
            .unwrap_or_default()
            .to_owned();
        if owner_pid(&name).is_some_and(|pid| !alive(pid)) {
            eprintln!("removing bridge {name} left by a killed test process");
            ip_quiet(&["link", "del", &name]);
        }
    }
}

/// A /24 of [`BLOCK`] that no interface of this machine uses.
fn free_subnet() -> u8 {
    let used = ip(&["-o", "-4", "addr", "show"]);
    (0..=255u8)
        .find(|n| !used.contains(&format!(" {}.{}.{n}.", BLOCK[0], BLOCK[1])))
        .expect("every 10.213.N.0/24 is in use: too many test networks")
}

impl TestNet {
    /// Creates the bridge and `count` test hosts (installing iproute2 when `ip` is missing).
    pub fn create(count: usize) -> TestNet {
        super::ensure_debian_package("ip", "iproute2");
        // Choosing and taking a subnet is one step for every test process on this machine.
        let lock = std::fs::File::create("/run/lock/hermes-test-netns.lock")
            .expect("the netns tests need root (cannot create /run/lock/hermes-test-netns.lock)");
        // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
        remove_leftovers();
        let pid = std::process::id();
        let n = free_subnet();
        let mut net = TestNet {
            bridge: format!("hb{pid}"),
            host_addr: Ipv4Addr::new(BLOCK[0], BLOCK[1], n, 1),
            hosts: Vec::new(),
            outer: Vec::new(),
        };
        ip(&["link", "add", &net.bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.host_addr),
            "dev",
            &net.bridge,
        ]);
        ip(&["link", "set", &net.bridge, "up"]);
        for i in 0..count {
            net.add_host(pid, i, Ipv4Addr::new(BLOCK[0], BLOCK[1], n, 2 + i as u8));
        }
        drop(lock);
        net
    }

    /// Takes test host `i` off the network without a word: its link goes down, so packets to
    /// it are lost and no reset comes (a host that lost power, a partition).
    pub fn unplug(&self, i: usize) {
        ip(&["link", "set", &self.outer[i], "down"]);
    }

    /// Test host `i`: its namespace, and a veth pair from the bridge into it.
    fn add_host(&mut self, pid: u32, i: usize, addr: Ipv4Addr) {
        let netns = format!("hermes-{pid}-{i}");
        let (outer, inner) = (format!("hv{pid}h{i}"), format!("hv{pid}n{i}"));
        ip(&["netns", "add", &netns]);
        self.hosts.push(TestHost {
            netns: netns.clone(),
            addr,
        });
        self.outer.push(outer.clone());
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ]);
        ip(&["link", "set", &inner, "netns", &netns]);
        ip(&["link", "set", &outer, "master", &self.bridge]);
        ip(&["link", "set", &outer, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", netns.as_str()];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&["addr", "add", &format!("{addr}/24"), "dev", &inner]);
        inside(&["link", "set", &inner, "up"]);
        inside(&["link", "set", "lo", "up"]);
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end inside it, and with it the outer end.
        for host in &self.hosts {
            ip_quiet(&["netns", "del", &host.netns]);
        }
        for veth in &self.outer {
            if std::path::Path::new("/sys/class/net").join(veth).exists() {
                ip_quiet(&["link", "del", veth]);
            }
        }
        ip_quiet(&["link", "del", &self.bridge]);
    }
}
