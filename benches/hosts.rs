//! Multi-host sandbox benchmark (not a test): sandbox acquire latency (p50/p99) and tool calls
//! per second at 64 and 256 concurrent rollouts, on 1 and on 3 Docker daemons spread by
//! `DockerHosts`; then a group of 16 whose item prepares (`SandboxSpec::prepare`) on a fleet of
//! 2 daemons with room for 8 each: preparations made and each rollout's time to its sandbox,
//! forked from the group's snapshots against every rollout preparing its own. The daemons are extra ones this bench starts itself (tests/common/dockerd.rs)
//! on this machine, so 3 daemons share its cores: the figures show what spreading over daemons
//! costs or saves per daemon, not what 3 machines would give.
//!
//! Needs root, `dockerd` and the sandbox image. Run: `cargo bench --bench hosts`
//! (`-- --fleet-forks`: the group alone).

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::dockerd::Dockerd;
use hermes_runtime::sandbox::docker::DockerHosts;
use hermes_runtime::sandbox::{
    DockerSettings, ExecRequest, GroupFork, SandboxProvider, SandboxSpec, SetupCommand, TaskSandbox,
};

/// Tool calls (execs) per rollout.
const CALLS: usize = 8;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// One rollout: acquire (timed), `CALLS` tool calls, teardown. Returns the acquire time.
async fn rollout(hosts: &DockerHosts, i: usize) -> Result<f64, String> {
    let start = Instant::now();
    let s = hosts
        .create(&format!("bench-{i}"), &SandboxSpec::default())
        .await
        .map_err(|e| e.to_string())?;
    let acquire = start.elapsed().as_secs_f64() * 1e3;
    let mut result = Ok(acquire);
    for call in 0..CALLS {
        let out = s
            .exec(ExecRequest::new(
                format!("echo {call}"),
                Duration::from_secs(120),
            ))
            .await;
        match out {
            Ok(o) if o.output.trim() == call.to_string() => {}
            Ok(o) => result = Err(format!("unexpected output {:?}", o.output)),
            Err(e) => result = Err(e.to_string()),
        }
    }
    s.teardown().await.map_err(|e| e.to_string())?;
    result
}

/// A fleet of `daemons` with room for `per_host` sandboxes each.
async fn connect(daemons: &[&Dockerd], per_host: usize) -> Arc<DockerHosts> {
    Arc::new(
        DockerHosts::connect(DockerSettings {
            hosts: daemons.iter().map(|d| d.host.clone()).collect(),
            max_per_host: per_host,
            create_rate: 0.0,
            env_name: "hermes-env-bench".into(),
            ..DockerSettings::default()
        })
        .await
        .expect("connect"),
    )
}

async fn measure(daemons: &[&Dockerd], concurrent: usize) {
    let hosts = connect(daemons, concurrent).await;
    let start = Instant::now();
    let results = futures::future::join_all((0..concurrent).map(|i| {
        let hosts = Arc::clone(&hosts);
        async move { rollout(&hosts, i).await }
    }))
    .await;
    let wall = start.elapsed().as_secs_f64();
    let mut acquire: Vec<f64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .copied()
        .collect();
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let ok = acquire.len();
    println!(
        "  {} daemon(s), {concurrent:>3} concurrent: acquire p50 {:>7.0} ms  p99 {:>7.0} ms   \
         {:>6.1} tool calls/s   wall {:>6.1} s   {ok} ok, {} errors{}",
        daemons.len(),
        pct(&mut acquire, 0.5),
        pct(&mut acquire, 0.99),
        (ok * CALLS) as f64 / wall,
        wall,
        errors.len(),
        errors
            .first()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
}

/// Rollouts of the fleet's group, and the room for them on each host.
const GROUP: usize = 16;
const ROOM: usize = 8;

/// A group of [`GROUP`] rollouts, all started at once, of an item whose preparation burns
/// about 1 s of one core, on `daemons` with room for [`ROOM`] each: forked from the group's
/// snapshots (`fork`) or each rollout preparing its own sandbox.
async fn fleet_group(daemons: &[&Dockerd], fork: bool) {
    let hosts = connect(daemons, ROOM).await;
    let provider: Arc<dyn SandboxProvider> = hosts.clone();
    let spec = SandboxSpec::default().with_prepare(SetupCommand {
        name: "build".into(),
        command: "python3 -c \"import hashlib\nh = b's'\nfor _ in range(2400000): h = \
                  hashlib.sha256(h).digest()\nopen('/opt/built', 'wb').write(h)\""
            .into(),
        timeout: Duration::from_secs(300),
    });
    let group = fork.then(|| GroupFork::new(Arc::clone(&provider), 1));
    let sandboxes: Vec<TaskSandbox> = (0..GROUP)
        .map(|i| {
            TaskSandbox::new(format!("fleet-{i}"), Arc::clone(&provider))
                .with_spec(spec.clone())
                .in_group(group.clone())
        })
        .collect();
    let start = Instant::now();
    let mut ready: Vec<f64> = futures::future::join_all(sandboxes.iter().map(|s| async move {
        s.get().await.expect("a sandbox");
        start.elapsed().as_secs_f64() * 1e3
    }))
    .await;
    let snapshots: Vec<usize> = daemons.iter().map(|d| d.snapshots()).collect();
    let in_use = hosts.in_use();
    for s in &sandboxes {
        s.close().await.expect("close");
    }
    if let Some(group) = group {
        group.close().await;
    }
    println!(
        "  {GROUP} rollouts, {} daemons of room {ROOM}, {:<32} ready p50 {:>6.0} ms  p99 {:>6.0} ms   \
         preparations: {:>2}   snapshots per host {snapshots:?}   sandboxes per host {in_use:?}",
        daemons.len(),
        match fork {
            true => "forked from the group's snapshots:",
            false => "each preparing its own:",
        },
        pct(&mut ready, 0.5),
        pct(&mut ready, 0.99),
        match fork {
            true => snapshots.iter().sum(),
            false => GROUP,
        },
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let daemons = [
        Dockerd::start("bench-1"),
        Dockerd::start("bench-2"),
        Dockerd::start("bench-3"),
    ];
    println!(
        "multi-host sandbox benchmark: {CALLS} tool calls (exec `echo`) per rollout, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let only_fleet = std::env::args().any(|a| a == "--fleet-forks");
    for concurrent in [64, 256] {
        if only_fleet {
            break;
        }
        measure(&[&daemons[0]], concurrent).await;
        measure(&[&daemons[0], &daemons[1], &daemons[2]], concurrent).await;
    }
    for fork in [false, true] {
        fleet_group(&[&daemons[0], &daemons[1]], fork).await;
    }
    let left = hermes_runtime::sandbox::docker::remove_all_live().await;
    assert_eq!(left, 0, "containers left");
}
