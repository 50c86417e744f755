//! The Docker backend's daemon-side guarantees, in-process against the real daemon: a sandbox's
//! idle process is a sleep of its lifetime and the daemon removes the container when it ends;
//! a pooled container is handed out only within its first lifetime; every provider keeps one
//! lease per run, a lease the daemon ends is replaced under the same run id, and the lease goes
//! with the provider.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::docker::{require_docker, settings};
use hermes_runtime::sandbox::{
    DockerProvider, DockerSettings, ExecRequest, SandboxProvider, SandboxSpec,
};

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Names of the containers with run id `run` and role `role`, running or not.
fn of_run(run: &str, role: &str) -> Vec<String> {
    let names = docker(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}",
        "--filter",
        &format!("label=hermes-env.run-id={run}"),
        "--filter",
        &format!("label=hermes-env.role={role}"),
    ]);
    names.lines().map(str::to_owned).collect()
}

/// Waits up to `limit` for `done`, checking every 100 ms.
async fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

async fn provider(settings: DockerSettings) -> DockerProvider {
    require_docker();
    DockerProvider::connect(settings)
        .await
        .expect("docker provider")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_sleeps_its_lifetime_then_the_daemon_removes_it() {
    let p = provider(DockerSettings {
        lifetime: Duration::from_secs(4),
        ..settings()
    })
    .await;
    let s = p.create("lifetime", &SandboxSpec::default()).await.unwrap();
    let name = of_run(p.run_id(), "sandbox")
        .pop()
        .expect("the sandbox is labelled");
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{json .Config.Cmd}} {{.HostConfig.AutoRemove}} {{.HostConfig.Init}}",
            &name
        ]),
        r#"["sleep","4"] true true"#
    );
    let out = s
        .exec(ExecRequest::new("echo up", Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(out.output, "up\n");
    assert!(
        eventually(Duration::from_secs(20), || of_run(p.run_id(), "sandbox")
            .is_empty())
        .await,
        "the daemon removed the container after its lifetime"
    );
    let err = s
        .exec(ExecRequest::new("true", Duration::from_secs(10)))
        .await
        .unwrap_err();
    assert!(err.is_infra(), "{err}");
    assert!(err.to_string().contains("no longer exists"), "{err}");
    s.teardown()
        .await
        .expect("removing a container that is gone is no error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_container_is_handed_out_only_within_its_first_lifetime() {
    let p = provider(DockerSettings {
        pool_size: 1,
        lifetime: Duration::from_secs(3),
        ..settings()
    })
    .await;
    assert_eq!(
        p.wait_for_pool(common::docker::IMAGE, Duration::from_secs(60))
            .await,
        1
    );
    let pooled = of_run(p.run_id(), "sandbox");
    assert_eq!(pooled.len(), 1);
    assert_eq!(
        docker(&["inspect", "-f", "{{json .Config.Cmd}}", &pooled[0]]),
        r#"["sleep","6"]"#,
        "a pooled container sleeps two lifetimes"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let s = p.create("late", &SandboxSpec::default()).await.unwrap();
    let out = s
        .exec(ExecRequest::new("echo fresh", Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(out.output, "fresh\n");
    let mine: Vec<String> = of_run(p.run_id(), "sandbox")
        .into_iter()
        .filter(|n| n.starts_with("hermes-late"))
        .collect();
    assert_eq!(
        mine.len(),
        1,
        "the stale pooled container was not handed out"
    );
    assert!(
        eventually(Duration::from_secs(10), || !of_run(p.run_id(), "sandbox")
            .contains(&pooled[0]))
        .await,
        "the stale pooled container is removed"
    );
    s.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_daemon_ends_is_replaced_and_the_provider_takes_its_lease_along() {
    let p = provider(settings()).await;
    assert!(
        of_run(p.run_id(), "lease").is_empty(),
        "no lease before the first sandbox"
    );
    let s = p.create("leased", &SandboxSpec::default()).await.unwrap();
    let first = of_run(p.run_id(), "lease");
    assert_eq!(first.len(), 1, "one lease per run");
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Status}}", &first[0]]),
        "running"
    );
    let second = p.create("leased-2", &SandboxSpec::default()).await.unwrap();
    assert_eq!(of_run(p.run_id(), "lease"), first, "still one lease");
    // The daemon loses the lease (as after a cut connection): the run starts another.
    docker(&["rm", "-f", &first[0]]);
    assert!(
        eventually(Duration::from_secs(20), || {
            let now = of_run(p.run_id(), "lease");
            now.len() == 1 && now != first
        })
        .await,
        "a new lease with the same run id runs"
    );
    let out = s
        .exec(ExecRequest::new("echo still", Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(out.output, "still\n");
    s.teardown().await.unwrap();
    second.teardown().await.unwrap();
    let run = p.run_id().to_owned();
    drop((s, second, p));
    assert!(
        eventually(Duration::from_secs(20), || of_run(&run, "lease").is_empty()).await,
        "dropping the provider ends its lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_reaper_removes_a_dead_runs_container_during_a_run() {
    let p = provider(DockerSettings {
        reap_interval: Some(Duration::from_secs(1)),
        ..settings()
    })
    .await;
    let s = p.create("reaping", &SandboxSpec::default()).await.unwrap();
    let orphan = format!("hermes-test-dead-run-{}", &p.run_id()[..8]);
    let dead_run = format!("dead{}", &p.run_id()[..8]);
    let started = Command::new("docker")
        .args([
            "run",
            "-d",
            "--init",
            "--network",
            "none",
            "--name",
            &orphan,
        ])
        .args([
            "--label",
            "hermes-env=1",
            "--label",
            "hermes-env.role=sandbox",
        ])
        .args(["--label", &format!("hermes-env.run-id={dead_run}")])
        .args(common::docker::owned_by_this_process())
        .args(["--label", "hermes-env.env=lease-test"])
        .args([common::docker::IMAGE, "sleep", "120"])
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    assert!(
        eventually(Duration::from_secs(20), || of_run(&dead_run, "sandbox")
            .is_empty())
        .await,
        "the periodic reaper removed {orphan}"
    );
    let out = s
        .exec(ExecRequest::new("echo mine", Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(
        out.output, "mine\n",
        "and left this run's own sandbox alone"
    );
    s.teardown().await.unwrap();
}
