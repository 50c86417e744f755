//! Sandboxes on several Docker hosts (`--env.docker_hosts`), against real extra daemons this
//! test starts itself (tests/common/dockerd.rs): placement uses every host, a host that stops
//! answering is marked down within seconds and its sandboxes fail as infrastructure failures,
//! new sandboxes avoid it, a full run survives losing a host at full reward, what a lost
//! host kept is removed once it answers again, and a group's copies come from one snapshot per
//! host they fill.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::docker::{settings, IMAGE};
use common::dockerd::Dockerd;
use common::example_bin;
use hermes_runtime::sandbox::docker::DockerHosts;
use hermes_runtime::sandbox::{
    DockerSettings, ExecRequest, GroupFork, Sandbox, SandboxError, SandboxProvider, SandboxSpec,
    SetupCommand, TaskSandbox,
};

/// One test at a time: each starts daemons, and the 2-core machine stays responsive.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs an async test body alone, on a runtime of its own.
fn serially(body: impl std::future::Future<Output = ()>) {
    let _serial = serial();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(body);
}

fn on(hosts: &[&Dockerd], per_host: usize) -> DockerSettings {
    DockerSettings {
        hosts: hosts.iter().map(|d| d.host.clone()).collect(),
        max_per_host: per_host,
        ..settings()
    }
}

async fn echo(sandbox: &dyn Sandbox) -> Result<String, SandboxError> {
    let out = sandbox
        .exec(ExecRequest::new("echo ok", Duration::from_secs(30)))
        .await?;
    Ok(out.output.trim().to_owned())
}

/// Sandbox containers on `d`, in any state.
fn sandboxes(d: &Dockerd) -> usize {
    d.cli(&["ps", "-aq", "--filter", "label=hermes-env.role=sandbox"])
        .lines()
        .count()
}

/// Waits (bounded) until `cond` holds, polling a cheap in-process state.
async fn until(limit: Duration, what: &str, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

#[test]
fn placement_fills_both_hosts_and_a_hung_host_is_left_then_cleaned_on_return() {
    serially(async {
        let a = Dockerd::start("place-a");
        let b = Dockerd::start("place-b");
        let hosts = DockerHosts::connect(on(&[&a, &b], 3))
            .await
            .expect("connect two hosts");
        let spec = SandboxSpec::default();
        let mut first: Vec<Arc<dyn Sandbox>> = Vec::new();
        for i in 0..4 {
            let s = hosts.create(&format!("t{i}"), &spec).await.expect("create");
            assert_eq!(echo(s.as_ref()).await.expect("exec"), "ok");
            first.push(s);
        }
        assert_eq!(hosts.in_use(), [2, 2], "free room spreads the sandboxes");
        assert_eq!((sandboxes(&a), sandboxes(&b)), (2, 2));

        // A host that hangs (SIGSTOP: connections stay open, nothing answers).
        let pid = b.pid();
        // SAFETY: signalling the daemon this test started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let took = until(Duration::from_secs(10), "marking b down", || {
            hosts.up() == [true, false]
        })
        .await;
        eprintln!("hung host marked down after {took:?}");
        let mut failed = 0;
        for s in &first {
            let result = tokio::time::timeout(Duration::from_secs(5), echo(s.as_ref()))
                .await
                .expect("an op on a down host fails at once, it does not hang");
            if let Err(e) = result {
                assert!(e.is_infra(), "an infrastructure failure: {e}");
                assert!(e.to_string().contains(&b.host), "{e}");
                failed += 1;
            }
        }
        assert_eq!(failed, 2, "b's two sandboxes fail, a's two work");
        // New sandboxes go to a only; a's third place is the last one.
        let extra = hosts.create("t-extra", &spec).await.expect("create on a");
        assert_eq!(echo(extra.as_ref()).await.expect("exec on a"), "ok");
        assert_eq!(sandboxes(&a), 3);
        drop(first);
        drop(extra);

        // b answers again: what this run kept there is removed before b takes new sandboxes.
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        until(Duration::from_secs(30), "b coming back", || {
            hosts.up() == [true, true]
        })
        .await;
        assert_eq!(sandboxes(&b), 0, "b kept sandboxes after its return");
        let again: Vec<Arc<dyn Sandbox>> = futures::future::join_all((0..4).map(|i| {
            let hosts = &hosts;
            async move {
                hosts
                    .create(&format!("r{i}"), &SandboxSpec::default())
                    .await
            }
        }))
        .await
        .into_iter()
        .map(|r| r.expect("create after the return"))
        .collect();
        assert!(
            hosts.in_use()[1] > 0,
            "b takes sandboxes again: {:?}",
            hosts.in_use()
        );
        for s in &again {
            assert_eq!(echo(s.as_ref()).await.expect("exec"), "ok");
            s.teardown().await.expect("teardown");
        }
        drop(again);
        drop(hosts);
    });
}

/// Two hosts with room for `per_host` sandboxes each and one group whose items prepare
/// `/opt/prepared` once per host.
struct FleetGroup {
    hosts: Arc<DockerHosts>,
    provider: Arc<dyn SandboxProvider>,
    group: Arc<GroupFork>,
    spec: SandboxSpec,
    prefix: &'static str,
}

impl FleetGroup {
    async fn on(a: &Dockerd, b: &Dockerd, per_host: usize, prefix: &'static str) -> Self {
        let hosts = Arc::new(
            DockerHosts::connect(on(&[a, b], per_host))
                .await
                .expect("connect two hosts"),
        );
        let provider: Arc<dyn SandboxProvider> = hosts.clone();
        let group = GroupFork::new(Arc::clone(&provider), 1);
        let spec = SandboxSpec::default().with_prepare(SetupCommand {
            name: "preparation".into(),
            command: "set -e; echo prepared > /opt/prepared".into(),
            timeout: Duration::from_secs(60),
        });
        Self {
            hosts,
            provider,
            group,
            spec,
            prefix,
        }
    }

    /// The group's `i`th rollout sandbox (made at its first use).
    fn member(&self, i: usize) -> TaskSandbox {
        TaskSandbox::new(format!("{}-{i}", self.prefix), Arc::clone(&self.provider))
            .with_spec(self.spec.clone())
            .in_group(Some(Arc::clone(&self.group)))
    }
}

#[test]
fn a_group_prepares_on_one_host_until_it_is_full_and_its_snapshots_go_with_it() {
    serially(async {
        let a = Dockerd::start("fork-a");
        let b = Dockerd::start("fork-b");
        let fleet = FleetGroup::on(&a, &b, 3, "fleet-copy").await;
        let (hosts, group, member) = (&fleet.hosts, &fleet.group, |i| fleet.member(i));
        let run = |sandbox: Arc<dyn Sandbox>, command: &'static str| async move {
            let out = sandbox
                .exec(ExecRequest::new(command, Duration::from_secs(30)))
                .await
                .expect("exec");
            out.output.trim().to_owned()
        };
        // Three copies fit on the host prepared first: it takes them all, and the other host
        // prepares nothing (placement by free room alone would have split them).
        let members: Vec<TaskSandbox> = (0..3).map(member).collect();
        let mut made = Vec::new();
        for m in &members {
            made.push(Arc::clone(m.get().await.expect("a copy")));
        }
        let (on_a, on_b) = (a.snapshots(), b.snapshots());
        assert_eq!(on_a + on_b, 1, "one preparation for three copies");
        assert!(
            hosts.in_use() == vec![3, 0] || hosts.in_use() == vec![0, 3],
            "the copies share the prepared host: {:?}",
            hosts.in_use()
        );
        // The fourth finds that host full: the other one prepares and takes it.
        let fourth = member(3);
        made.push(Arc::clone(fourth.get().await.expect("a fourth copy")));
        assert_eq!(
            (a.snapshots(), b.snapshots()),
            (1, 1),
            "one snapshot per host"
        );
        let mut in_use = hosts.in_use();
        in_use.sort();
        assert_eq!(in_use, vec![1, 3]);
        // Every copy holds the prepared file, and a change to one reaches no sibling.
        for sandbox in &made {
            assert_eq!(
                run(Arc::clone(sandbox), "cat /opt/prepared").await,
                "prepared"
            );
        }
        run(Arc::clone(&made[0]), "echo changed > /opt/prepared").await;
        for sandbox in &made[1..] {
            assert_eq!(
                run(Arc::clone(sandbox), "cat /opt/prepared").await,
                "prepared"
            );
        }
        drop(made);
        for m in members.iter().chain([&fourth]) {
            m.close().await.expect("close");
        }
        group.close().await;
        assert_eq!(
            (a.snapshots(), b.snapshots()),
            (0, 0),
            "the snapshots go with the group"
        );
        // What is left is each host's lease, which the run's end removes.
        assert_eq!((sandboxes(&a), sandboxes(&b)), (0, 0), "sandboxes left");
    });
}

#[test]
fn a_group_whose_prepared_host_is_lost_prepares_on_another() {
    serially(async {
        let mut a = Dockerd::start("lost-a");
        let mut b = Dockerd::start("lost-b");
        let fleet = FleetGroup::on(&a, &b, 2, "lost-copy").await;
        let (hosts, group, member) = (&fleet.hosts, &fleet.group, |i| fleet.member(i));
        let first = member(0);
        first.get().await.expect("a copy");
        let prepared_on_a = a.snapshots() == 1;
        let (lost, other) = if prepared_on_a {
            (&mut a, &b)
        } else {
            (&mut b, &a)
        };
        assert_eq!(other.snapshots(), 0, "one preparation so far");
        lost.kill();
        // The next copy cannot go to the lost host: the other one prepares and takes it.
        let second = member(1);
        let copy = second.get().await.expect("a copy on the other host");
        let out = copy
            .exec(ExecRequest::new(
                "cat /opt/prepared",
                Duration::from_secs(30),
            ))
            .await
            .expect("exec");
        assert_eq!(out.output.trim(), "prepared");
        assert_eq!(other.snapshots(), 1, "prepared on the host that answers");
        let up = hosts.up();
        assert_eq!(up.iter().filter(|u| **u).count(), 1, "{up:?}");
        let _ = first.close().await;
        second.close().await.expect("close");
        group.close().await;
        assert_eq!(other.snapshots(), 0, "its snapshot goes with the group");
        assert_eq!(sandboxes(other), 0, "sandboxes left");
    });
}

#[test]
fn a_host_without_the_image_is_named_with_the_fix() {
    serially(async {
        let a = Dockerd::start("noimage");
        let err = DockerHosts::connect(DockerSettings {
            image: "hermes-env/not-loaded:latest".into(),
            ..on(&[&a], 2)
        })
        .await
        .expect_err("the image is missing there");
        let message = err.to_string();
        assert!(message.contains(&a.host), "{message}");
        assert!(
            message.contains(&format!(
                "docker save hermes-env/not-loaded:latest | docker -H {} load",
                a.host
            )),
            "{message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
    });
}

#[test]
fn with_every_host_down_creation_fails_at_once() {
    serially(async {
        let a = Dockerd::start("alldown");
        let hosts = DockerHosts::connect(on(&[&a], 2)).await.expect("connect");
        // SAFETY: signalling the daemon this test started.
        unsafe { libc::kill(a.pid(), libc::SIGSTOP) };
        until(Duration::from_secs(10), "marking a down", || {
            hosts.up() == [false]
        })
        .await;
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            hosts.create("t", &SandboxSpec::default()),
        )
        .await
        .expect("no wait for a place");
        // SAFETY: as above.
        unsafe { libc::kill(a.pid(), libc::SIGCONT) };
        let e = result.err().expect("no host to place on");
        assert!(e.is_infra(), "{e}");
        assert!(e.to_string().contains("every Docker host is down"), "{e}");
        assert!(e.to_string().contains(&a.host), "{e}");
    });
}

#[test]
fn a_tls_host_takes_sandboxes_with_its_own_certificates() {
    serially(async {
        let a = Dockerd::start_tls("tls");
        assert!(a.host.contains("?tls="), "{}", a.host);
        let hosts = DockerHosts::connect(on(&[&a], 2))
            .await
            .expect("connect over mutual TLS");
        let s = hosts
            .create("t", &SandboxSpec::default())
            .await
            .expect("create over TLS");
        assert_eq!(echo(s.as_ref()).await.expect("exec over TLS"), "ok");
        s.teardown().await.expect("teardown");
        assert_eq!(sandboxes(&a), 0);
        // Without the client certificate the daemon refuses the connection.
        let plain = DockerHosts::connect(DockerSettings {
            hosts: vec![a.host.split('?').next().unwrap().to_owned()],
            ..on(&[&a], 2)
        })
        .await;
        assert!(plain.is_err(), "a plain client was let in");
    });
}

#[test]
fn a_run_survives_a_host_killed_mid_run_at_full_reward() {
    let _serial = serial();
    let a = Dockerd::start("run-a");
    let mut b = Dockerd::start("run-b");
    let dir = tempfile::tempdir().unwrap();
    let hosts = format!("[\"{}\", \"{}\"]", a.host, b.host);
    let (steps, group) = (6, 2);
    let mut child = Command::new(example_bin("terminal_test"))
        .current_dir(dir.path())
        .args(["process", "--testing", "true", "--env.use_wandb", "false"])
        .args([
            "--env.terminal_backend",
            "docker",
            "--env.docker_hosts",
            &hosts,
        ])
        .args([
            "--env.max_containers_per_host",
            "2",
            "--env.max_num_workers",
            "2",
        ])
        .args(["--env.total_steps", &steps.to_string()])
        .args(["--env.group_size", &group.to_string()])
        .args(["--env.data_path_to_save_groups", "out.jsonl"])
        .args(["--env.docker_image", IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn terminal_test");
    // Kill b as soon as it holds a sandbox.
    let start = Instant::now();
    while sandboxes(&b) == 0 {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the run ended before b held a sandbox"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "b never held a sandbox"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    b.kill();
    let out = wait_with_output_bounded(child, Duration::from_secs(300));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the run failed:\n{log}");
    for line in log
        .lines()
        .filter(|l| l.contains("Docker host") || l.contains("retr"))
    {
        eprintln!("run: {line}");
    }
    assert!(
        log.contains(&format!("Docker host {} stopped answering", b.host)),
        "{log}"
    );
    let scores: Vec<f64> = std::fs::read_to_string(dir.path().join("out.jsonl"))
        .expect("groups written")
        .lines()
        .flat_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("json line");
            v["scores"]
                .as_array()
                .expect("scores")
                .iter()
                .map(|s| s.as_f64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(scores.len(), steps * group, "every group completed:\n{log}");
    assert!(
        scores.iter().all(|s| *s == 1.0),
        "full reward: {scores:?}\n{log}"
    );
    assert_eq!(a.managed(), Vec::<String>::new(), "left on the survivor");

    // b comes back; `sandbox reap` with the run's own flags (as a user types it after the run)
    // removes what it kept over both hosts, and `sandbox list --config` (the same hosts in a
    // YAML file) shows both clean.
    b.run();
    let cli = |args: &[&str]| {
        let out = Command::new(example_bin("terminal_test"))
            .current_dir(dir.path())
            .arg("sandbox")
            .args(args)
            .output()
            .expect("sandbox subcommand");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let kept = b.managed();
    let reaped = cli(&[
        "reap",
        "--env.terminal_backend",
        "docker",
        "--env.docker_hosts",
        &hosts,
    ]);
    assert!(reaped.contains(&format!("host {}:", b.host)), "{reaped}");
    assert_eq!(
        b.wait_until_clean(Duration::from_secs(15)),
        Vec::<String>::new(),
        "left on the returned host (it kept {kept:?}; reap said {reaped}); its log:\n{}",
        b.log_tail()
    );
    eprintln!("b kept {kept:?} after its restart; reap: {reaped}");
    std::fs::write(
        dir.path().join("run.yaml"),
        format!("env:\n  terminal_backend: docker\n  docker_hosts: {hosts}\n"),
    )
    .unwrap();
    let listed = cli(&["list", "--config", "run.yaml"]);
    assert!(listed.contains(&format!("host {}:", a.host)), "{listed}");
    assert!(listed.contains(&format!("host {}:", b.host)), "{listed}");
    assert_eq!(listed.matches("0 container(s)").count(), 2, "{listed}");
}

fn wait_with_output_bounded(child: std::process::Child, limit: Duration) -> std::process::Output {
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(limit) {
        Ok(out) => out.expect("run output"),
        Err(_) => {
            // SAFETY: killing the child this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("the run did not finish within {limit:?}");
        }
    }
}
