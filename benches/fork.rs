//! Group sandboxes forked from one prepared copy (not a test), on the Docker daemon and on
//! local sandboxes:
//!
//! 1. **Fork latency**: an item prepared once (`SandboxSpec::prepare`), then a group of 16
//!    rollout sandboxes made from it at once, each timed from "prepared" to "its sandbox is
//!    ready"; beside it, 16 fresh sandboxes made at once (what a group without `prepare`
//!    pays before any setup). Then one fork and one fresh sandbox alone: what a copy costs
//!    when the machine is not making 15 others.
//! 2. **Setup CPU**: an item whose setup burns about 10 s of CPU (a build: a Python program
//!    hashing and writing 64 files), for a group of 16: run as 16 independent setups (every
//!    rollout its own) against prepared once and forked. CPU is the whole machine's (every
//!    core's busy time in `/proc/stat`, so the daemon, its storage driver and the containers
//!    count), from the first request to the last sandbox ready: run it on an idle machine.
//!
//! Needs a local daemon and the sandbox image (`sandbox-images/build`). Run:
//! `cargo bench --bench fork` (`-- --quick`: a 2 s setup instead of 10 s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_runtime::sandbox::{
    DockerProvider, DockerSettings, GroupFork, LocalProvider, SandboxProvider, SandboxSpec,
    SetupCommand, TaskSandbox,
};

const IMAGE: &str = "hermes-env/python:latest";
const GROUP: usize = 16;

fn pct(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Busy CPU seconds of the whole machine so far (all cores, from `/proc/stat`).
fn machine_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat.lines().next().expect("cpu line");
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    let busy: f64 = fields
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, v)| v)
        .sum();
    busy / 100.0
}

/// A build-like setup of about `seconds` of one core: hashes chained and written as files.
fn build(seconds: u64) -> SetupCommand {
    let rounds = seconds * 2_400_000;
    SetupCommand {
        name: "build".into(),
        command: format!(
            "mkdir -p build && python3 - <<'EOF'\n\
             import hashlib\n\
             h = b'seed'\n\
             for i in range(64):\n\
             \x20   for _ in range({rounds} // 64):\n\
             \x20       h = hashlib.sha256(h).digest()\n\
             \x20   open(f'build/part{{i}}.o', 'wb').write(h * 4096)\n\
             EOF"
        ),
        timeout: Duration::from_secs(seconds * 40 + 60),
    }
}

/// Prepares `spec` once, then makes `group` sandboxes from it at once: each one's time
/// from "prepared" to "ready", in milliseconds.
async fn fork_latency(
    provider: Arc<dyn SandboxProvider>,
    spec: &SandboxSpec,
    group: usize,
) -> Vec<f64> {
    let prepared = provider
        .prepare("bench", spec)
        .await
        .expect("prepare")
        .expect("this backend forks");
    let start = Instant::now();
    let made = futures::future::join_all((0..group).map(|i| {
        let prepared = Arc::clone(&prepared);
        let spec = spec.clone();
        async move {
            let sandbox = prepared
                .fork(&format!("fork-{i}"), &spec)
                .await
                .expect("fork");
            (start.elapsed().as_secs_f64() * 1e3, sandbox)
        }
    }))
    .await;
    let times = made.iter().map(|(t, _)| *t).collect();
    for (_, s) in made {
        s.teardown().await.expect("teardown");
    }
    prepared.remove().await.expect("remove");
    times
}

/// `group` fresh sandboxes made at once: each one's time to ready, in milliseconds.
async fn fresh_latency(provider: Arc<dyn SandboxProvider>, group: usize) -> Vec<f64> {
    let start = Instant::now();
    let made = futures::future::join_all((0..group).map(|i| {
        let provider = Arc::clone(&provider);
        async move {
            let sandbox = provider
                .create(&format!("fresh-{i}"), &SandboxSpec::default())
                .await
                .expect("create");
            (start.elapsed().as_secs_f64() * 1e3, sandbox)
        }
    }))
    .await;
    let times = made.iter().map(|(t, _)| *t).collect();
    for (_, s) in made {
        s.teardown().await.expect("teardown");
    }
    times
}

/// Readies a group of 16 rollouts of an item with `setup`: forked from one preparation or
/// each preparing its own. Returns (machine CPU seconds, wall seconds).
async fn setup_cost(
    provider: Arc<dyn SandboxProvider>,
    setup: &SetupCommand,
    fork: bool,
) -> (f64, f64) {
    let spec = SandboxSpec::default().with_prepare(setup.clone());
    let group = fork.then(|| GroupFork::new(Arc::clone(&provider), 1));
    let (cpu, wall) = (machine_cpu(), Instant::now());
    let sandboxes: Vec<TaskSandbox> = (0..GROUP)
        .map(|i| {
            TaskSandbox::new(format!("setup-{i}"), Arc::clone(&provider))
                .with_spec(spec.clone())
                .in_group(group.clone())
        })
        .collect();
    futures::future::join_all(sandboxes.iter().map(|s| async move {
        s.get().await.expect("sandbox");
    }))
    .await;
    let cost = (machine_cpu() - cpu, wall.elapsed().as_secs_f64());
    for s in &sandboxes {
        s.close().await.expect("teardown");
    }
    if let Some(group) = group {
        group.close().await;
    }
    cost
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let seconds = if quick { 2 } else { 10 };
    let docker: Arc<dyn SandboxProvider> = Arc::new(
        DockerProvider::connect(DockerSettings {
            env_name: "fork-bench".into(),
            image: IMAGE.into(),
            create_rate: 0.0,
            ..DockerSettings::default()
        })
        .await
        .expect("a Docker daemon"),
    );
    let local: Arc<dyn SandboxProvider> = Arc::new(LocalProvider::new().expect("local root"));
    let small = SandboxSpec::default().with_prepare(build(1));

    println!("## Fork latency: a group of {GROUP} sandboxes made at once (ms to ready)\n");
    println!("| backend | made at once | made | p50 | p99 |");
    println!("|---|---|---|---:|---:|");
    for (name, provider) in [("Docker", &docker), ("local", &local)] {
        for group in [GROUP, 1] {
            let forked = fork_latency(Arc::clone(provider), &small, group).await;
            let fresh = fresh_latency(Arc::clone(provider), group).await;
            for (how, t) in [
                ("forked from the prepared copy", &forked),
                ("fresh", &fresh),
            ] {
                println!(
                    "| {name} | {group} | {how} | {:.1} | {:.1} |",
                    pct(t, 0.5),
                    pct(t, 0.99)
                );
            }
        }
    }

    let setup = build(seconds);
    println!("\n## Setup of a group of {GROUP} (a build of ~{seconds} s of one core)\n");
    println!("| backend | setup | machine CPU s | wall s | CPU ratio |");
    println!("|---|---|---:|---:|---:|");
    for (name, provider) in [("Docker", &docker), ("local", &local)] {
        let (own_cpu, own_wall) = setup_cost(Arc::clone(provider), &setup, false).await;
        let (fork_cpu, fork_wall) = setup_cost(Arc::clone(provider), &setup, true).await;
        println!("| {name} | every rollout its own | {own_cpu:.1} | {own_wall:.1} | 1.0× |");
        println!(
            "| {name} | prepared once, forked | {fork_cpu:.1} | {fork_wall:.1} | {:.1}× lower |",
            own_cpu / fork_cpu
        );
    }
}
