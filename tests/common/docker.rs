//! Helpers for the tests that run against the real Docker daemon. They fail (never skip) with
//! a clear message when the daemon is missing, and build the sandbox image when it is missing.

use std::process::Command;
use std::sync::Once;
use std::time::{Duration, Instant};

use hermes_env::sandbox::DockerSettings;

/// The image the Docker tests run.
pub const IMAGE: &str = "hermes-env/python:latest";

/// Panics with a clear message unless the daemon answers and the sandbox image exists
/// (building it with `sandbox-images/build`, bounded to 15 minutes, when it is missing).
pub fn require_docker() {
    static READY: Once = Once::new();
    READY.call_once(|| {
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
