//! Multi-host sandbox benchmark (not a test): sandbox acquire latency (p50/p99) and tool calls
//! per second at 64 and 256 concurrent rollouts, on 1 and on 3 Docker daemons spread by
//! `DockerHosts`. The daemons are extra ones this bench starts itself (tests/common/dockerd.rs)
//! on this machine, so 3 daemons share its cores: the figures show what spreading over daemons
//! costs or saves per daemon, not what 3 machines would give.
//!
//! Needs root, `dockerd` and the sandbox image. Run: `cargo bench --bench hosts`.

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::dockerd::Dockerd;
use hermes_runtime::sandbox::docker::DockerHosts;
use hermes_runtime::sandbox::{DockerSettings, ExecRequest, SandboxProvider, SandboxSpec};

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

async fn measure(daemons: &[&Dockerd], concurrent: usize) {
    let hosts = Arc::new(
        DockerHosts::connect(DockerSettings {
            hosts: daemons.iter().map(|d| d.host.clone()).collect(),
            max_per_host: concurrent,
            create_rate: 0.0,
            env_name: "hermes-env-bench".into(),
            ..DockerSettings::default()
        })
        .await
        .expect("connect"),
    );
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
    for concurrent in [64, 256] {
        measure(&[&daemons[0]], concurrent).await;
        measure(&[&daemons[0], &daemons[1], &daemons[2]], concurrent).await;
    }
    let left = hermes_runtime::sandbox::docker::remove_all_live().await;
    assert_eq!(left, 0, "containers left");
}
