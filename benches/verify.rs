//! The fixed cost of a Docker rollout (not a test): create and start the container, two
//! `terminal` calls, the tripwires before verification, the reset of the agent's shell, and
//! the removal — with the tripwires reading the container's changes from the daemon's storage
//! (the default where it can) and from the daemon's diff (the path before it), rollouts of the
//! two interleaved in the same run. Each part of the tripwires is timed on its own after the
//! rollout's real check: the leftover killer, the change list, and the two home scans (hooks,
//! module shadows; over the storage, or as `find` commands in the container with the diff),
//! and the reset's kill as the exec of its own the reset used before it went through the shell.
//!
//! A third column runs the new path with a pool of 2 pre-started containers
//! (`--env.sandbox_pool_size 2`), which takes the create and start off the rollout.
//!
//! Needs a local daemon and the sandbox image (`sandbox-images/build`); reading the storage
//! needs root and an overlay storage driver, else both rows measure the diff (the bench says
//! so). Run: `cargo bench --bench verify` (`-- --quick`: 6 rollouts of each instead of 24).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_runtime::sandbox::docker::ChangeSource;
use hermes_runtime::sandbox::tripwire::{
    inspect, watched_roots, Armed, HOOK_NAMES, SHADOWED_MODULES,
};
use hermes_runtime::sandbox::{
    ChangeScan, DockerProvider, DockerSettings, ExecRequest, LeftoverRules, Sandbox,
    SandboxProvider, SandboxSpec,
};

const IMAGE: &str = "hermes-env/python:latest";

/// The phases of one rollout, in milliseconds.
#[derive(Default)]
struct Phases {
    create: Vec<f64>,
    first_call: Vec<f64>,
    second_call: Vec<f64>,
    tripwires: Vec<f64>,
    reset: Vec<f64>,
    reset_exec: Vec<f64>,
    remove: Vec<f64>,
    total: Vec<f64>,
    // Parts of the tripwires, each timed again on its own.
    leftovers: Vec<f64>,
    changes: Vec<f64>,
    scans: Vec<f64>,
}

/// One phase's samples in [`Phases`].
type Column = fn(&Phases) -> &Vec<f64>;

fn pct(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

fn settings(source: ChangeSource, pool_size: usize) -> DockerSettings {
    DockerSettings {
        env_name: "verify-bench".into(),
        create_rate: 0.0,
        change_source: source,
        pool_size,
        ..DockerSettings::default()
    }
}

/// The home scans of the tripwires (hooks anywhere, module shadows at the top).
fn home_scans(since: std::time::Duration) -> [ChangeScan; 2] {
    let hooks = ChangeScan {
        roots: vec!["~".into()],
        names: HOOK_NAMES.iter().map(|n| (*n).to_owned()).collect(),
        top_level: false,
        since,
    };
    let shadows = ChangeScan {
        roots: vec!["~".into()],
        names: SHADOWED_MODULES
            .iter()
            .flat_map(|m| [format!("{m}.py"), (*m).to_owned()])
            .collect(),
        top_level: true,
        since,
    };
    [hooks, shadows]
}

/// The scans as the check runs them: by the backend where it can, else as `find` commands in
/// the container, one exec each.
async fn run_scans(s: &dyn Sandbox, scans: &[ChangeScan]) {
    if s.scan_changes(scans).await.unwrap().is_some() {
        return;
    }
    for scan in scans {
        let command = format!("{}; true", scan.find_command());
        s.exec(ExecRequest::new(command, Duration::from_secs(30)))
            .await
            .unwrap();
    }
}

async fn rollout(p: &DockerProvider, i: usize, into: &mut Phases) {
    let spec = SandboxSpec::default();
    let begin = Instant::now();
    let s: Arc<dyn Sandbox> = p.create(&format!("verify-{i}"), &spec).await.unwrap();
    into.create.push(ms(begin));
    let armed = Armed::now();
    for (n, command) in ["echo 42 > answer.txt", "cat answer.txt"]
        .iter()
        .enumerate()
    {
        let start = Instant::now();
        let out = s
            .exec(ExecRequest::new(*command, Duration::from_secs(30)))
            .await
            .unwrap();
        assert_eq!(out.exit_code, 0, "{command}: {}", out.output);
        [&mut into.first_call, &mut into.second_call][n].push(ms(start));
    }
    let start = Instant::now();
    let wires = inspect(s.as_ref(), &spec, &armed, &[]).await.unwrap();
    into.tripwires.push(ms(start));
    assert!(wires.is_empty(), "an honest rollout fired {wires:?}");
    // The parts, again, outside the rollout's own timing (the shell as the check left it).
    let parts = Instant::now();
    let start = Instant::now();
    s.kill_leftover_processes(&LeftoverRules::default())
        .await
        .unwrap();
    into.leftovers.push(ms(start));
    let start = Instant::now();
    s.changed_paths(&watched_roots(&spec)).await.unwrap();
    into.changes.push(ms(start));
    let start = Instant::now();
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        - std::time::Duration::from_secs(60);
    run_scans(s.as_ref(), &home_scans(since)).await;
    into.scans.push(ms(start));
    let outside = parts.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    s.reset_processes().await.unwrap();
    into.reset.push(ms(start));
    // The reset's kill as an exec of its own, as the reset did it before (not in the total).
    let start = Instant::now();
    s.exec_one_shot(ExecRequest::new(
        "kill -KILL -- -2147483647 2>/dev/null; true",
        Duration::from_secs(30),
    ))
    .await
    .unwrap();
    let reset_exec = ms(start);
    into.reset_exec.push(reset_exec);
    let start = Instant::now();
    s.teardown().await.unwrap();
    into.remove.push(ms(start));
    into.total.push(ms(begin) - outside - reset_exec);
}

fn row(what: &str, storage: &[f64], daemon: &[f64], pooled: &[f64]) {
    println!(
        "  {what:<38} {:>7.1} / {:>7.1}   {:>7.1} / {:>7.1}   {:>6.1}×   {:>7.1} / {:>7.1}",
        pct(storage, 0.5),
        pct(storage, 0.95),
        pct(daemon, 0.5),
        pct(daemon, 0.95),
        pct(daemon, 0.5) / pct(storage, 0.5).max(1e-3),
        pct(pooled, 0.5),
        pct(pooled, 0.95),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = if quick { 6 } else { 24 };
    let storage = DockerProvider::connect(settings(ChangeSource::Storage, 0))
        .await
        .expect("a running Docker daemon");
    let daemon = DockerProvider::connect(settings(ChangeSource::Daemon, 0))
        .await
        .unwrap();
    let pooled = DockerProvider::connect(settings(ChangeSource::Storage, 2))
        .await
        .unwrap();
    println!(
        "Docker rollout fixed cost (image {IMAGE}, {} rollouts of each, interleaved, {} cores)",
        n,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // One of each first, to warm the image and start each run's lease.
    rollout(&storage, 0, &mut Phases::default()).await;
    rollout(&daemon, 0, &mut Phases::default()).await;
    rollout(&pooled, 0, &mut Phases::default()).await;
    let (mut new, mut old, mut pool) = (Phases::default(), Phases::default(), Phases::default());
    for i in 1..=n {
        rollout(&storage, i, &mut new).await;
        rollout(&daemon, i, &mut old).await;
        // The pool refills in the background, as in a run: a take finds it full or not.
        rollout(&pooled, i, &mut pool).await;
    }
    println!(
        "\n  {:<38} {:>17}   {:>17}   {:>7}   {:>17}",
        "ms (p50 / p95)", "storage (new)", "daemon diff (old)", "old/new", "new, pool of 2"
    );
    let rows: [(&str, Column); 11] = [
        ("create + start (or a pool's take)", |p| &p.create),
        ("1st terminal call (starts the shell)", |p| &p.first_call),
        ("2nd terminal call", |p| &p.second_call),
        ("tripwires (whole check)", |p| &p.tripwires),
        ("  leftover killer", |p| &p.leftovers),
        ("  change list", |p| &p.changes),
        ("  home scans", |p| &p.scans),
        ("reset of the agent's shell", |p| &p.reset),
        ("  its kill in an exec of its own", |p| &p.reset_exec),
        ("remove", |p| &p.remove),
        ("rollout fixed cost (wall)", |p| &p.total),
    ];
    for (what, of) in rows {
        row(what, of(&new), of(&old), of(&pool));
    }
}
