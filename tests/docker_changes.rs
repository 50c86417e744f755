//! The tripwires' two sources of a Docker container's changes against each other on real
//! containers: the container's upper directory in the daemon's storage (read from this process,
//! the default where it can) and the daemon's own diff (`docker diff`). Whatever the diff
//! reports under the watched roots, the storage reports too; and a system directory replaced
//! by a link to a writable place — which the diff shows only as one changed directory, outside
//! every watched root — is reported by both.
//!
//! Needs a local Docker daemon with an overlay storage driver and this process as root (the
//! storage must be readable here); it fails with a message otherwise.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use hermes_runtime::sandbox::tripwire::{watched_changes, watched_roots};
use hermes_runtime::sandbox::{
    ChangeScan, DockerProvider, ExecRequest, Sandbox, SandboxProvider, SandboxSpec,
};

async fn sandbox() -> (DockerProvider, Arc<dyn Sandbox>) {
    common::docker::require_docker();
    let provider = DockerProvider::connect(common::docker::settings())
        .await
        .unwrap();
    let s = provider
        .create("changes", &SandboxSpec::default())
        .await
        .unwrap();
    (provider, s)
}

async fn ok(s: &dyn Sandbox, command: &str) -> String {
    let out = s
        .exec(ExecRequest::new(command, Duration::from_secs(120)))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{command}: {}", out.output);
    out.output
}

/// The daemon's diff of the container the sandbox runs in (its hostname is its id's prefix).
async fn daemon_diff(docker: &Docker, s: &dyn Sandbox) -> Vec<String> {
    let id = ok(s, "cat /etc/hostname").await.trim().to_owned();
    docker
        .container_changes(&id)
        .await
        .unwrap()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.path)
        .collect()
}

/// The storage's changes under the watched roots; they must not come from the diff (which
/// would also name the home's files).
async fn storage_changes(s: &dyn Sandbox, spec: &SandboxSpec) -> Vec<String> {
    let paths = s
        .changed_paths(&watched_roots(spec))
        .await
        .unwrap()
        .expect("Docker reports changes");
    assert!(
        !paths.iter().any(|p| p.starts_with("/root")),
        "the changes came from the daemon's diff, not the storage (this test needs a local \
         daemon with an overlay storage driver and root): {paths:?}"
    );
    paths
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// `path` is `other` or below it.
fn covered(path: &str, by: &[String]) -> bool {
    by.iter()
        .any(|b| path == b || path.starts_with(&format!("{b}/")))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_storage_reports_every_watched_change_the_daemons_diff_reports() {
    let (provider, s) = sandbox().await;
    let spec = SandboxSpec::default();
    // Untouched: nothing watched changed (the engine's own `docker-init` is not a change).
    assert_eq!(
        watched_changes(&storage_changes(s.as_ref(), &spec).await, &spec),
        Vec::<String>::new()
    );
    ok(
        s.as_ref(),
        "set -e
         printf '#!/bin/sh\\n' > /usr/local/bin/shim && chmod +x /usr/local/bin/shim
         rm /usr/bin/yes
         echo '# changed' >> /usr/lib/python3.11/os.py
         chmod 700 /usr/bin/env
         touch -d 2000-01-01 /usr/sbin/nologin
         mkdir -p /usr/lib/python3/dist-packages/evilpkg
         echo x > /usr/lib/python3/dist-packages/evilpkg/__init__.py
         mkdir -p /usr/lib/python3.11/__pycache__ && echo x > /usr/lib/python3.11/__pycache__/x.cpython-311.pyc
         echo 'echo hi' >> /etc/profile
         rm -rf /etc/python3.11 && mkdir /etc/python3.11 && echo x > /etc/python3.11/sitecustomize.py
         ln -s /tmp/x /usr/local/sbin/linked
         mv /usr/bin/tac /usr/bin/tac2
         echo 42 > /root/answer.txt",
    )
    .await;
    let storage = sorted(watched_changes(
        &storage_changes(s.as_ref(), &spec).await,
        &spec,
    ));
    let daemon = sorted(watched_changes(
        &daemon_diff(provider.docker(), s.as_ref()).await,
        &spec,
    ));
    // The same list here; where a directory was made anew over one the image had with more
    // files, the diff also names each file it hid, the storage the directory.
    for path in &daemon {
        assert!(
            covered(path, &storage),
            "the diff reports {path}, the storage does not:\nstorage {storage:?}\ndaemon {daemon:?}"
        );
    }
    assert_eq!(storage, daemon);
    for path in [
        "/usr/local/bin/shim",
        "/usr/bin/yes",
        "/usr/lib/python3.11/os.py",
        "/usr/bin/env",
        "/usr/sbin/nologin",
        "/usr/lib/python3/dist-packages/evilpkg/__init__.py",
        "/etc/profile",
        "/etc/python3.11/sitecustomize.py",
        "/usr/local/sbin/linked",
        "/usr/bin/tac",
        "/usr/bin/tac2",
    ] {
        assert!(
            storage.iter().any(|p| p == path),
            "{path} missing from {storage:?}"
        );
    }
    assert!(
        !storage.iter().any(|p| p.contains("__pycache__")),
        "{storage:?}"
    );
    s.teardown().await.unwrap();
}

/// The exploit of a verifier's interpreter through a trusted path that is not what it seems:
/// `/usr/local` (which holds the Python site directory `/usr/local/lib/python3.11/dist-packages`)
/// replaced by a link to a copy in `/tmp` with a start-up hook added. Every Python the
/// verifier starts then runs the hook; the daemon's diff lists only `C /usr/local`.
pub const LINKED_SYSTEM_DIR: &str = "cp -a /usr/local /tmp/ul && \
     echo 'import sys; print(\"hooked\", file=sys.stderr)' > /tmp/ul/lib/python3.11/dist-packages/zz.pth && \
     rm -rf /usr/local && ln -s /tmp/ul /usr/local";

#[tokio::test(flavor = "multi_thread")]
async fn a_system_directory_replaced_by_a_link_is_a_watched_change_from_either_source() {
    let (provider, s) = sandbox().await;
    let spec = SandboxSpec::default();
    ok(s.as_ref(), LINKED_SYSTEM_DIR).await;
    // The exploit works: the system's Python runs the hook.
    let out = ok(s.as_ref(), "python3 -c 'print(1)' 2>&1").await;
    assert!(out.contains("hooked"), "{out}");
    let storage = watched_changes(&storage_changes(s.as_ref(), &spec).await, &spec);
    assert_eq!(storage, ["/usr/local"]);
    let diff = daemon_diff(provider.docker(), s.as_ref()).await;
    // The diff names the link only, outside every watched root …
    assert!(diff.iter().any(|p| p == "/usr/local"), "{diff:?}");
    assert!(
        !diff.iter().any(|p| p.starts_with("/usr/local/")),
        "{diff:?}"
    );
    // … which the wires count as a change of the roots below it.
    assert_eq!(watched_changes(&diff, &spec), ["/usr/local"]);
    // With system changes allowed, a replaced system directory is allowed too.
    let open = SandboxSpec {
        mutable_system: true,
        ..SandboxSpec::default()
    };
    assert!(watched_changes(&storage_changes(s.as_ref(), &open).await, &open).is_empty());
    s.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_home_scans_over_the_storage_find_what_find_in_the_container_finds() {
    let (_provider, s) = sandbox().await;
    let since = std::time::Duration::from_secs(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    );
    ok(
        s.as_ref(),
        "set -e; cd ~
         mkdir -p pkg/__pycache__ deep/er/_pytest os
         touch conftest.py pkg/evil.pth pkg/__pycache__/conftest.py deep/er/_pytest/x.py json.py notes.txt
         ln -s /usr/lib linked
         rm .bashrc",
    )
    .await;
    let names = |n: &[&str]| -> Arc<[String]> { n.iter().map(|n| (*n).to_owned()).collect() };
    let scans = [
        // The deleted `.bashrc` is a whiteout in the storage, no file: neither reports it.
        ChangeScan {
            roots: vec!["~".into()],
            names: names(&["conftest.py", "*.pth", "_pytest", ".bashrc", "linked"]),
            top_level: false,
            since,
        },
        ChangeScan {
            roots: vec!["~".into()],
            names: names(&["json.py", "os", "deep", ".bashrc"]),
            top_level: true,
            since,
        },
        ChangeScan {
            roots: vec!["~/deep".into(), "/nonexistent".into()],
            names: names(&[]),
            top_level: false,
            since,
        },
    ];
    let host = s
        .scan_changes(&scans)
        .await
        .unwrap()
        .expect("the scans read the storage (this test needs a local daemon with an overlay storage driver and root)");
    for (scan, found) in scans.iter().zip(host) {
        let inside = ok(s.as_ref(), &format!("{}; true", scan.find_command())).await;
        let inside = sorted(inside.lines().map(str::to_owned).collect());
        assert!(!inside.is_empty(), "{scan:?}");
        assert_eq!(sorted(found), inside, "{scan:?}");
    }
    s.teardown().await.unwrap();
}
