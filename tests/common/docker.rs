//! Helpers for the tests that run against the real Docker daemon. They fail (never skip) with
//! a clear message when the daemon is missing, and build the sandbox image when it is missing:
//! every test that needs the image calls [`require_docker`] first, so no test depends on
//! another test binary having run before it.

use std::os::fd::AsRawFd as _;
use std::process::Command;
use std::sync::Once;
use std::time::{Duration, Instant};

use hermes_runtime::sandbox::DockerSettings;

/// The image the Docker tests run.
pub const IMAGE: &str = "hermes-env/python:latest";

/// Panics with a clear message unless the daemon answers and the sandbox image exists
/// (building it with `sandbox-images/build`, bounded to 15 minutes, when it is missing). Test
/// binaries may run at once (`cargo test -j`, several terminals): a lock file in the target
/// directory makes one of them build while the others wait, then find the image up to date.
pub fn require_docker() {
    static READY: Once = Once::new();
    READY.call_once(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
        let lock = std::fs::File::create(target.join("sandbox-image.lock")).expect("lock file");
        // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        let info = Command::new("timeout")
            .args(["20", "docker", "info", "--format", "{{.ServerVersion}}"])
            .output();
        match info {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "these tests need a running Docker daemon, and `docker info` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!("these tests need Docker: cannot run the `docker` CLI: {e}"),
        }
        let image = Command::new("docker")
            .args(["image", "inspect", IMAGE])
            .output();
        if !image.is_ok_and(|o| o.status.success()) {
            // The offline image build needs mmdebstrap.
            super::ensure_debian_package("mmdebstrap", "mmdebstrap");
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/sandbox-images/build");
        let out = Command::new("timeout")
            .args(["900", script, "python"])
            .output()
            .expect("run sandbox-images/build");
        assert!(
            out.status.success(),
            "building the sandbox image with sandbox-images/build failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        drop(lock);
    });
}

/// Docker settings for tests: the default hardening, labelled with a test env name.
pub fn settings() -> DockerSettings {
    DockerSettings {
        env_name: "hermes-env-tests".into(),
        create_rate: 0.0,
        ..DockerSettings::default()
    }
}

/// Names of the labelled containers (running or not) owned by process `pid`.
pub fn containers_of(pid: u32) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            "label=hermes-env=1",
            "--filter",
            &format!("label=hermes-env.owner-pid={pid}"),
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Polls until `pid` owns no labelled container (up to `limit`); returns what is left.
pub fn wait_until_no_containers(pid: u32, limit: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let left = containers_of(pid);
        if left.is_empty() || start.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `state` of every labelled container owned by process `pid` (its lease included), sorted
/// (`created`, `running`, …).
pub fn states_of(pid: u32) -> Vec<String> {
    states_where(&[
        "label=hermes-env=1",
        &format!("label=hermes-env.owner-pid={pid}"),
    ])
}

/// `state` of every sandbox (not lease) container owned by process `pid`, sorted.
pub fn sandbox_states_of(pid: u32) -> Vec<String> {
    states_where(&[
        "label=hermes-env.role=sandbox",
        &format!("label=hermes-env.owner-pid={pid}"),
    ])
}

fn states_where(filters: &[&str]) -> Vec<String> {
    let mut ps = Command::new("docker");
    ps.args(["ps", "-a", "--format", "{{.State}}"]);
    for f in filters {
        ps.args(["--filter", f]);
    }
    let out = ps.output().expect("docker ps");
    let mut states: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    states.sort();
    states
}

/// The pid of the `sandbox watch` child of process `pid`, waiting up to 10 s for it to start.
pub fn watchdog_of(pid: u32) -> u32 {
    let start = Instant::now();
    loop {
        let found = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|child| {
                let stat =
                    std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
                let ppid = stat
                    .rfind(')')
                    .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
                ppid == Some(pid) && String::from_utf8_lossy(&cmdline).contains("sandbox\0watch")
            });
        if let Some(child) = found {
            return child;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "process {pid} started no `sandbox watch` child"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `docker run` arguments labelling a container as owned by this test process (pid, start
/// time, host): reapers of releases before run ids, which judge by these, leave it alone, so
/// only the lease rule decides its fate.
pub fn owned_by_this_process() -> Vec<String> {
    let pid = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/self/stat");
    let start = stat[stat.rfind(')').expect("stat") + 1..]
        .split_whitespace()
        .nth(19)
        .expect("start time")
        .to_owned();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    [
        format!("hermes-env.owner-pid={pid}"),
        format!("hermes-env.owner-start={start}"),
        format!("hermes-env.owner-host={}", host.trim()),
    ]
    .into_iter()
    .flat_map(|l| ["--label".to_owned(), l])
    .collect()
}
