//! Docker sandbox benchmark (not a test), each figure next to the same operation done by the
//! bare daemon API (bollard, no framework) and by the `docker` CLI, in the same run:
//! container acquire latency (cold and from the pool), exec round trip of `true`, a 1 MB
//! upload, and 64 concurrent rollouts (create, exec, write, read, remove) on this machine.
//!
//! Needs a running daemon and the sandbox image (`sandbox-images/build`).
//! Run: `cargo bench --bench sandbox` (add `-- --quick` for fewer samples, `-- --exec-only`
//! to stop after the exec round trip: the persistent shell back to back (a rollout's calls), the
//! daemon's attach stream alone, then persistent shell vs one exec per command interleaved).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::StartExecResults;
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, RemoveContainerOptions, UploadToContainerOptions,
};
use bollard::Docker;
use futures::StreamExt;
use hermes_runtime::sandbox::{
    DockerProvider, DockerSettings, ExecRequest, SandboxProvider, SandboxSpec,
};

const IMAGE: &str = "hermes-env/python:latest";

/// Latency samples in milliseconds.
struct Samples(Vec<f64>);

impl Samples {
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    }

    fn row(&self, what: &str) {
        println!(
            "  {what:<44} p50 {:>8.2} ms   p95 {:>8.2} ms   (n={})",
            self.pct(0.5),
            self.pct(0.95),
            self.0.len()
        );
    }
}

fn cli(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn settings(pool: usize) -> DockerSettings {
    DockerSettings {
        env_name: "sandbox-bench".into(),
        pool_size: pool,
        create_rate: 0.0,
        ..DockerSettings::default()
    }
}

/// The bare-API exec: create, start attached, drain, inspect for the exit code.
async fn bare_exec(docker: &Docker, container: &str) -> i64 {
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec!["true".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.unwrap()
    {
        while let Some(Ok(LogOutput::StdOut { .. } | LogOutput::StdErr { .. } | _)) =
            output.next().await
        {}
    }
    docker
        .inspect_exec(&exec.id)
        .await
        .unwrap()
        .exit_code
        .unwrap_or(-1)
}

/// The daemon's attach stream alone: one line written to a `cat` exec's stdin and read back,
/// `rounds` times on one exec (the transport a persistent shell's frame and report take).
async fn bare_stream_echo(docker: &Docker, container: &str, rounds: usize) -> Vec<f64> {
    use tokio::io::AsyncWriteExt;
    let exec = docker
        .create_exec(
            container,
            ExecConfig {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                cmd: Some(vec!["cat".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = docker.start_exec(&exec.id, None).await.unwrap()
    else {
        panic!("the echo exec did not attach");
    };
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        input.write_all(b"x\n").await.unwrap();
        input.flush().await.unwrap();
        let mut got = 0;
        while got < 2 {
            match output.next().await {
                Some(Ok(LogOutput::StdOut { message })) => got += message.len(),
                other => panic!("the echo exec ended: {other:?}"),
            }
        }
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    input.shutdown().await.unwrap();
    times
}

fn one_file_tar(name: &str, data: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, name, data).unwrap();
    b.into_inner().unwrap()
}

async fn bare_create(docker: &Docker, name: &str) {
    let body = ContainerCreateBody {
        image: Some(IMAGE.into()),
        cmd: Some(vec!["sleep".into(), "infinity".into()]),
        labels: Some(HashMap::from([("hermes-env-bench".into(), "1".into())])),
        host_config: Some(HostConfig {
            init: Some(true),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.into()),
                ..Default::default()
            }),
            body,
        )
        .await
        .unwrap();
    docker.start_container(name, None).await.unwrap();
}

async fn bare_remove(docker: &Docker, name: &str) {
    let _ = docker
        .remove_container(
            name,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
}

/// One small rollout: acquire, a command, a file written and read back, teardown.
async fn mini_rollout(p: &DockerProvider, i: usize) -> Result<(), String> {
    let s = p
        .create(&format!("bench-{i}"), &SandboxSpec::default())
        .await
        .map_err(|e| e.to_string())?;
    let result = async {
        let out = s
            .exec(ExecRequest::new(
                format!("echo {i} > n.txt && cat n.txt"),
                Duration::from_secs(60),
            ))
            .await
            .map_err(|e| e.to_string())?;
        if out.output.trim() != i.to_string() {
            return Err(format!("unexpected output {:?}", out.output));
        }
        s.write_file("data.bin", &[i as u8; 4096])
            .await
            .map_err(|e| e.to_string())?;
        let back = s.read_file("data.bin").await.map_err(|e| e.to_string())?;
        if back != [i as u8; 4096] {
            return Err("read back differs".into());
        }
        Ok(())
    }
    .await;
    s.teardown().await.map_err(|e| e.to_string())?;
    result
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let n = |full: usize| if quick { (full / 4).max(3) } else { full };
    if Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("the image {IMAGE} is missing: run sandbox-images/build first");
        std::process::exit(1);
    }
    let docker = Docker::connect_with_local_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .expect("a running Docker daemon");
    let version = docker.client_version();
    println!(
        "Docker sandbox benchmark (API {}.{}, image {IMAGE}, {} cores)",
        version.major_version,
        version.minor_version,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // Samples of the three ways are interleaved, so drift in the daemon's load (removals,
    // other work on this machine) affects them alike; removals happen outside the timings.
    let ms = |start: Instant| start.elapsed().as_secs_f64() * 1e3;

    // --- acquire ---------------------------------------------------------------------------
    println!("\ncontainer acquire (create + start, ready for commands):");
    let cold = DockerProvider::connect(settings(0)).await.unwrap();
    let (mut ours, mut bare, mut via_cli) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n(20) {
        let start = Instant::now();
        let s = cold
            .create(&format!("cold-{i}"), &SandboxSpec::default())
            .await
            .unwrap();
        ours.push(ms(start));
        s.teardown().await.unwrap();

        let name = format!("hermes-bench-bare-{i}");
        let start = Instant::now();
        bare_create(&docker, &name).await;
        bare.push(ms(start));
        bare_remove(&docker, &name).await;

        if i % 2 == 0 {
            let name = format!("hermes-bench-cli-{i}");
            let start = Instant::now();
            cli(&[
                "run",
                "-d",
                "--init",
                "--network",
                "none",
                "--label",
                "hermes-env-bench=1",
                "--name",
                &name,
                IMAGE,
                "sleep",
                "infinity",
            ]);
            via_cli.push(ms(start));
            cli(&["rm", "-f", &name]);
        }
    }
    Samples(ours).row("hermes-env cold (DockerProvider::create)");
    Samples(bare).row("bare API create + start");
    Samples(via_cli).row("docker run -d (CLI)");

    let pooled = DockerProvider::connect(settings(4)).await.unwrap();
    let mut takes = Vec::new();
    for i in 0..n(20) {
        // Wait for the refill, then time the take alone.
        pooled.wait_for_pool(IMAGE, Duration::from_secs(60)).await;
        let start = Instant::now();
        let s = pooled
            .create(&format!("pooled-{i}"), &SandboxSpec::default())
            .await
            .unwrap();
        takes.push(ms(start));
        s.teardown().await.unwrap();
    }
    Samples(takes).row("hermes-env pooled (pool size 4)");

    // --- exec ------------------------------------------------------------------------------
    println!("\nexec round trip of `true` (output streamed, exit code known):");
    let s = cold
        .create("exec-bench", &SandboxSpec::default())
        .await
        .unwrap();
    let name = cli(&[
        "ps",
        "-q",
        "--filter",
        "label=hermes-env.task-id=exec-bench",
    ]);
    let exec_true = || ExecRequest::new("true", Duration::from_secs(30));
    for _ in 0..5 {
        s.exec(exec_true()).await.unwrap();
        s.exec_one_shot(exec_true()).await.unwrap();
        bare_exec(&docker, &name).await;
    }
    // A rollout's calls follow one another on its shell with nothing else in between: this is
    // the marginal cost of one more `terminal` call. The interleaved rows below compare the
    // two paths under the same conditions, each persistent call after a one-shot and a bare exec
    // whose wind-down in the daemon still competes for the cores.
    let mut back_to_back = Vec::new();
    for _ in 0..n(200) {
        let start = Instant::now();
        assert_eq!(s.exec(exec_true()).await.unwrap().exit_code, 0);
        back_to_back.push(ms(start));
    }
    let back_to_back = Samples(back_to_back);
    back_to_back.row("hermes-env Sandbox::exec, back to back");
    let floor = Samples(bare_stream_echo(&docker, &name, n(200)).await);
    floor.row("bare API attach stream, one line via `cat`");
    println!("  interleaved (persistent, one-shot, bare, every third also the CLI):");
    let (mut ours, mut bare, mut via_cli) = (Vec::new(), Vec::new(), Vec::new());
    let mut one_shot = Vec::new();
    for i in 0..n(100) {
        let start = Instant::now();
        assert_eq!(s.exec(exec_true()).await.unwrap().exit_code, 0);
        ours.push(ms(start));
        let start = Instant::now();
        assert_eq!(s.exec_one_shot(exec_true()).await.unwrap().exit_code, 0);
        one_shot.push(ms(start));
        let start = Instant::now();
        assert_eq!(bare_exec(&docker, &name).await, 0);
        bare.push(ms(start));
        if i % 3 == 0 {
            let start = Instant::now();
            cli(&["exec", &name, "true"]);
            via_cli.push(ms(start));
        }
    }
    let (ours, bare, via_cli) = (Samples(ours), Samples(bare), Samples(via_cli));
    let one_shot = Samples(one_shot);
    ours.row("hermes-env Sandbox::exec (persistent shell)");
    one_shot.row("hermes-env exec_one_shot (one exec/command)");
    bare.row("bare API create/start/inspect exec");
    via_cli.row("docker exec (CLI)");
    println!(
        "  p50 ratio one exec per command / persistent shell: {:.1}x",
        one_shot.pct(0.5) / ours.pct(0.5)
    );
    println!(
        "  p50 ratio hermes-env / bare API: {:.2}x   hermes-env / CLI: {:.2}x",
        ours.pct(0.5) / bare.pct(0.5),
        ours.pct(0.5) / via_cli.pct(0.5)
    );
    if std::env::args().any(|a| a == "--exec-only") {
        s.teardown().await.unwrap();
        return;
    }

    // --- upload ----------------------------------------------------------------------------
    println!("\n1 MB upload into the container:");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one_mb.bin");
    let data: Vec<u8> = (0..1024 * 1024).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let tarball = bytes::Bytes::from(one_file_tar("root/bare.bin", &data));
    let target = format!("{name}:/root/cli.bin");
    let (mut ours, mut bare, mut via_cli) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n(30) {
        let start = Instant::now();
        s.upload_file(&file, &format!("up/{i}.bin")).await.unwrap();
        ours.push(ms(start));
        let start = Instant::now();
        docker
            .upload_to_container(
                &name,
                Some(UploadToContainerOptions {
                    path: "/".into(),
                    ..Default::default()
                }),
                bollard::body_full(tarball.clone()),
            )
            .await
            .unwrap();
        bare.push(ms(start));
        if i % 3 == 0 {
            let start = Instant::now();
            cli(&["cp", file.to_str().unwrap(), &target]);
            via_cli.push(ms(start));
        }
    }
    Samples(ours).row("hermes-env Sandbox::upload_file (tar stream)");
    Samples(bare).row("bare API PUT archive (prebuilt tar)");
    Samples(via_cli).row("docker cp (CLI)");
    s.teardown().await.unwrap();

    // --- concurrency -----------------------------------------------------------------------
    println!("\n64 concurrent rollouts (acquire, exec, write 4 KB, read back, remove):");
    let provider = Arc::new(
        DockerProvider::connect(DockerSettings {
            create_concurrency: 8,
            ..settings(0)
        })
        .await
        .unwrap(),
    );
    let start = Instant::now();
    let results = futures::future::join_all((0..64).map(|i| {
        let p = Arc::clone(&provider);
        async move { mini_rollout(&p, i).await }
    }))
    .await;
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    println!(
        "  hermes-env: {} ok, {} errors, wall {:.2} s{}",
        64 - errors.len(),
        errors.len(),
        start.elapsed().as_secs_f64(),
        errors
            .first()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    let start = Instant::now();
    let handles: Vec<_> = (0..64)
        .map(|i| {
            std::thread::spawn(move || {
                let name = format!("hermes-bench-cc-{i}");
                cli(&[
                    "run",
                    "-d",
                    "--init",
                    "--network",
                    "none",
                    "--label",
                    "hermes-env-bench=1",
                    "--name",
                    &name,
                    IMAGE,
                    "sleep",
                    "infinity",
                ]);
                let out = cli(&[
                    "exec",
                    &name,
                    "sh",
                    "-c",
                    &format!("echo {i} > n.txt && cat n.txt"),
                ]);
                cli(&["rm", "-f", &name]);
                out == i.to_string()
            })
        })
        .collect();
    let ok = handles
        .into_iter()
        .map(std::thread::JoinHandle::join)
        .filter(|r| matches!(r, Ok(true)))
        .count();
    println!(
        "  docker CLI (run, exec, rm per rollout, 64 threads): {ok} ok, {} errors, wall {:.2} s",
        64 - ok,
        start.elapsed().as_secs_f64()
    );
    drop(provider);
    drop(cold);
    drop(pooled);
    let left = hermes_runtime::sandbox::docker::remove_all_live().await;
    let stray = cli(&["ps", "-aq", "--filter", "label=hermes-env-bench=1"]);
    for id in stray.lines() {
        cli(&["rm", "-f", id]);
    }
    println!("\ncleanup: {left} hermes-env container(s) left");
}
