//! What a sandbox never lets through, on the local backend and on the Docker backend (real
//! daemon): the host environment (only an allowlist and `container_env`), files over the
//! 100 MiB `read_file` limit (real and sparse ≥ 8 GiB files, whose archive entry carries the
//! size in a PAX record), FIFOs and devices, links whose target resolves outside a download
//! (chained links included), and uploads through a link the agent planted.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::docker::{require_docker, settings};
use hermes_runtime::sandbox::{
    DockerProvider, ExecRequest, LocalProvider, Sandbox, SandboxError, SandboxProvider,
    SandboxSpec, READ_LIMIT,
};

/// Each test must finish well within this.
const TEST_LIMIT: Duration = Duration::from_secs(300);

/// The `container_env` every sandbox here gets.
const AUTHOR_ENV: &str = "HERMES_AUTHOR_VAR=from-container-env";

async fn run(s: &dyn Sandbox, command: &str) -> (i32, String) {
    let out = s
        .exec(ExecRequest::new(command, Duration::from_secs(120)))
        .await
        .expect("exec");
    (out.exit_code, out.output)
}

async fn ok(s: &dyn Sandbox, command: &str) -> String {
    let (code, out) = run(s, command).await;
    assert_eq!(code, 0, "{command}: {out}");
    out
}

async fn provider(backend: &str) -> Arc<dyn SandboxProvider> {
    match backend {
        "local" => Arc::new(
            LocalProvider::new()
                .expect("local provider")
                .with_env(vec![AUTHOR_ENV.into()]),
        ),
        "docker" => {
            require_docker();
            let mut s = settings();
            s.env = vec![AUTHOR_ENV.into()];
            Arc::new(DockerProvider::connect(s).await.expect("docker provider"))
        }
        other => unreachable!("{other}"),
    }
}

async fn with_backend<F, Fut>(backend: &str, task: &str, body: F)
where
    F: FnOnce(Arc<dyn Sandbox>, &'static str) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let p = provider(backend).await;
    let s = p
        .create(task, &SandboxSpec::default())
        .await
        .expect("create sandbox");
    let backend: &'static str = if backend == "local" {
        "local"
    } else {
        "docker"
    };
    tokio::time::timeout(TEST_LIMIT, body(Arc::clone(&s), backend))
        .await
        .expect("the test exceeded its time limit");
    s.teardown().await.unwrap();
}

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod local {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() {
                   super::with_backend("local", stringify!($name), super::$name).await
               } )*
        }
        mod docker {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() {
                   super::with_backend("docker", stringify!($name), super::$name).await
               } )*
        }
    };
}

both_backends!(
    commands_see_only_the_allowlist_and_container_env,
    read_file_stops_at_100_mib_on_a_real_file,
    read_file_refuses_a_sparse_9_gib_file_without_reading_it,
    read_file_refuses_fifos_and_devices_without_blocking,
    chained_links_that_resolve_outside_are_refused_on_download,
);

/// Names a sandbox command may see besides `container_env`: the allowlist, what bash sets
/// itself, and (Docker) what the image defines.
fn allowed(name: &str, backend: &str) -> bool {
    const LOCAL: &[&str] = &[
        "PATH", "HOME", "LANG", "TERM", "TZ", "USER", "SHELL", "PWD", "OLDPWD", "SHLVL", "_",
    ];
    LOCAL.contains(&name) || name.starts_with("LC_") || backend == "docker"
}

async fn commands_see_only_the_allowlist_and_container_env(s: Arc<dyn Sandbox>, backend: &str) {
    let host: Vec<(String, String)> = std::env::vars().collect();
    assert!(
        host.iter().any(|(k, _)| k == "CARGO_MANIFEST_DIR"),
        "the test process has host-only variables to leak"
    );
    let out = ok(&*s, "env -0").await;
    let seen: Vec<(&str, &str)> = out
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert!(
        seen.contains(&("HERMES_AUTHOR_VAR", "from-container-env")),
        "container_env reaches the command: {seen:?}"
    );
    for (k, _) in &seen {
        assert!(
            *k == "HERMES_AUTHOR_VAR" || allowed(k, backend),
            "{backend}: host variable {k} reached the command"
        );
    }
    for (k, v) in &host {
        if allowed(k, "local") || v.len() < 4 {
            continue;
        }
        assert!(
            !seen.contains(&(k.as_str(), v.as_str())),
            "{backend}: host variable {k}={v} reached the command"
        );
    }
}

async fn read_file_stops_at_100_mib_on_a_real_file(s: Arc<dyn Sandbox>, backend: &str) {
    ok(
        &*s,
        &format!("head -c {READ_LIMIT} /dev/urandom > exact && cp exact over && printf x >> over"),
    )
    .await;
    let started = Instant::now();
    let bytes = s.read_file("exact").await.expect("exactly the limit reads");
    assert_eq!(bytes.len() as u64, READ_LIMIT);
    let at_limit = started.elapsed();
    let started = Instant::now();
    let err = s.read_file("over").await.unwrap_err();
    let refused = started.elapsed();
    let limit_bytes = READ_LIMIT + 1;
    assert!(
        err.to_string().contains(&format!(
            "is {limit_bytes} bytes, over the {READ_LIMIT}-byte limit"
        )),
        "{backend}: {err}"
    );
    eprintln!("{backend}: read 100 MiB in {at_limit:.2?}; refused 100 MiB + 1 in {refused:.2?}");
}

async fn read_file_refuses_a_sparse_9_gib_file_without_reading_it(
    s: Arc<dyn Sandbox>,
    backend: &str,
) {
    let mut paths = vec!["sparse".to_owned()];
    if backend == "docker" {
        // /tmp is a tmpfs: read through the container's own `tar` (GNU, PAX size records).
        paths.push("/tmp/sparse".into());
    }
    for path in paths {
        ok(&*s, &format!("truncate -s 9G {path}")).await;
        let started = Instant::now();
        let err = s.read_file(&path).await.unwrap_err();
        let took = started.elapsed();
        assert!(
            err.to_string().contains("is 9663676416 bytes, over the"),
            "{backend} {path}: {err}"
        );
        eprintln!("{backend}: refused the 9 GiB sparse {path} in {took:.2?}");
        ok(&*s, &format!("rm {path}")).await;
    }
}

async fn read_file_refuses_fifos_and_devices_without_blocking(s: Arc<dyn Sandbox>, backend: &str) {
    ok(&*s, "mkfifo pipe").await;
    for path in ["pipe", "/dev/zero", "/dev/stdin", "/dev/null"] {
        let read = tokio::time::timeout(Duration::from_secs(20), s.read_file(path))
            .await
            .unwrap_or_else(|_| panic!("{backend}: read_file({path}) blocked"));
        match read {
            Err(SandboxError::Path(m)) => {
                assert!(m.contains("not a regular file"), "{backend} {path}: {m}")
            }
            // Inside a container /dev/stdin of the archive endpoint may not exist.
            Err(SandboxError::NotFound(_)) if path == "/dev/stdin" => {}
            other => panic!("{backend} {path}: {other:?}"),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let download = tokio::time::timeout(
        Duration::from_secs(20),
        s.download_file("pipe", &dir.path().join("p")),
    )
    .await
    .unwrap_or_else(|_| panic!("{backend}: download_file(fifo) blocked"));
    assert!(
        matches!(download, Err(SandboxError::Path(_))),
        "{backend}: {download:?}"
    );
}

async fn chained_links_that_resolve_outside_are_refused_on_download(
    s: Arc<dyn Sandbox>,
    backend: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // Each link looks harmless lexically; `m` resolves to the target's parent.
        "mkdir -p t/a && echo ok > t/a/f && ln -s .. t/a/l && ln -s a/l/.. t/m",
        "mkdir -p u && ln -s . u/d && ln -s d/.. u/e",
    ];
    for (i, setup) in cases.iter().enumerate() {
        ok(&*s, setup).await;
        let root = if i == 0 { "t" } else { "u" };
        let target = dir.path().join(format!("out{i}"));
        let err = s.download_dir(root, &target).await.unwrap_err();
        assert!(
            matches!(err, SandboxError::Path(_)),
            "{backend} {setup}: {err}"
        );
        for link in ["m", "e"] {
            let p = target.join(link);
            if let Ok(resolved) = std::fs::canonicalize(&p) {
                assert!(
                    resolved.starts_with(&target),
                    "{backend}: {} resolves to {}",
                    p.display(),
                    resolved.display()
                );
            }
        }
    }
    // A link that resolves inside through another link is still copied.
    ok(&*s, "mkdir -p v/a/b && ln -s a v/l && ln -s l/b v/m").await;
    let target = dir.path().join("inside");
    s.download_dir("v", &target)
        .await
        .expect("links resolving inside are kept");
    assert_eq!(
        std::fs::read_link(target.join("m")).unwrap(),
        Path::new("l/b")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn local_uploads_refuse_a_link_the_agent_planted() {
    let p = provider("local").await;
    let s = p.create("planted", &SandboxSpec::default()).await.unwrap();
    let host = tempfile::tempdir().unwrap();
    let victim = host.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/file"), "payload").unwrap();
    std::fs::write(host.path().join("one"), "payload").unwrap();
    ok(
        &*s,
        &format!(
            "ln -s {} x && mkdir real && ln -s {} real/y",
            victim.display(),
            victim.display()
        ),
    )
    .await;
    for remote in ["x", "x/deeper", "real/y"] {
        let err = s.upload_dir(&src, remote).await.unwrap_err();
        assert!(
            matches!(err, SandboxError::Path(_)),
            "upload_dir {remote}: {err}"
        );
    }
    let err = s
        .upload_file(&host.path().join("one"), "x/one")
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Path(_)), "upload_file: {err}");
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing was written through the link"
    );
    s.teardown().await.unwrap();
}

/// A `tar` the agent put first on the `PATH`: for any path it sends an entry whose header
/// says 0 bytes and whose PAX record says 1 TiB, then zeros for ever.
const LYING_TAR: &str = r#"#!/usr/bin/python3
import sys, tarfile
info = tarfile.TarInfo(sys.argv[-1])
info.size = 1 << 40
out = sys.stdout.buffer
out.write(info.tobuf(format=tarfile.PAX_FORMAT))
zeros = bytes(1 << 16)
while True:
    out.write(zeros)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_lying_tar_on_tmpfs_cannot_stream_past_the_limit() {
    let p = provider("docker").await;
    let s = p
        .create("lying-tar", &SandboxSpec::default())
        .await
        .unwrap();
    s.write_file("/usr/local/bin/tar", LYING_TAR.as_bytes())
        .await
        .unwrap();
    ok(
        &*s,
        "chmod +x /usr/local/bin/tar && command -v tar && echo hi > /tmp/x",
    )
    .await;
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(60), s.read_file("/tmp/x"))
        .await
        .expect("read_file returns")
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        err.to_string().contains("is 1099511627776 bytes, over the"),
        "{err}"
    );
    // Once read_file gave up, the fake tar is killed (the daemon would drain it for ever).
    let mut gone = None;
    for _ in 0..100 {
        if run(&*s, "pgrep -x tar").await.0 == 1 {
            gone = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = gone.expect("the abandoned tar is killed within 10 s");
    eprintln!("docker: lying tar refused in {took:.2?}, killed {gone:.2?} after the read began");
    s.teardown().await.unwrap();
}
