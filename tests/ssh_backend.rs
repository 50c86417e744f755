//! The ssh backend against a real `sshd` (Debian's openssh-server, installed by the test when
//! missing) that the test starts on 127.0.0.1 with its own host key, authorized key and config:
//! key-only login bound to loopback, nothing reachable from outside.

mod common;

use std::time::Duration;

use common::sshd::start_sshd;
use hermes_runtime::sandbox::{ExecRequest, SandboxProvider, SandboxSpec, SshProvider};
use tokio::process::Command;

/// Prints `alive` or `gone` for pid `$1` (a zombie counts as gone: a container's pid 1 may
/// never reap the children of killed processes).
const ALIVE: &str = "sh -c 's=$(cut -d\" \" -f3 /proc/$1/stat 2>/dev/null); if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo alive; else echo gone; fi' alive";

fn req(command: &str) -> ExecRequest {
    ExecRequest::new(command, Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_files_timeouts_and_teardown_on_a_real_sshd() {
    let sshd = start_sshd().await;
    std::env::set_var("HERMES_TEST_HOST_SECRET", "do-not-leak");
    let provider = SshProvider::connect(sshd.settings(), vec!["PYTHONHASHSEED=0".into()])
        .await
        .unwrap();
    let sb = provider
        .create("task/1", &SandboxSpec::default())
        .await
        .unwrap();
    let dir = sb.workdir().to_owned();
    assert!(dir.contains("hermes-env-task-"), "{dir}");

    // Commands run in the scratch dir, `cd` persists, the environment is cleared.
    let out = sb
        .exec(req("pwd; echo \"$HOME\"; mkdir sub; cd sub"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.output.trim(), format!("{dir}\n{dir}"));
    let out = sb.exec(req("pwd; env | sort")).await.unwrap();
    assert!(
        out.output.starts_with(&format!("{dir}/sub\n")),
        "{}",
        out.output
    );
    assert!(
        out.output.contains("PYTHONHASHSEED=0") && !out.output.contains("do-not-leak"),
        "{}",
        out.output
    );
    let out = sb
        .exec(req("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.output.trim()), (3, "out\nerr"));

    // A timeout kills the command's whole remote process group.
    let mut slow = req("sleep 300 & echo $! > ~/bg.pid; sleep 300");
    slow.timeout = Duration::from_secs(1);
    let out = sb.exec(slow).await.unwrap();
    assert!(out.timed_out && out.exit_code == 124, "{out:?}");
    let out = sb
        .exec(req(&format!("{ALIVE} \"$(cat ~/bg.pid)\"")))
        .await
        .unwrap();
    assert_eq!(out.output.trim(), "gone");

    // Files: atomic writes with parents, binary round trips, directories.
    assert!(sb.write_file("a/b/c.txt", b"hello").await.unwrap());
    assert!(!sb.write_file("a/b/c.txt", b"hello again").await.unwrap());
    assert_eq!(sb.read_file("~/a/b/c.txt").await.unwrap(), b"hello again");
    assert!(matches!(
        sb.read_file("missing.txt").await,
        Err(hermes_env::sandbox::SandboxError::NotFound(_))
    ));
    let host = tempfile::tempdir().unwrap();
    let blob: Vec<u8> = (0..1_500_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(host.path().join("blob.bin"), &blob).unwrap();
    let sent = sb
        .upload_file(&host.path().join("blob.bin"), "data/blob.bin")
        .await
        .unwrap();
    assert_eq!(sent.bytes, blob.len() as u64);
    sb.download_file("data/blob.bin", &host.path().join("back.bin"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(host.path().join("back.bin")).unwrap(), blob);
    std::fs::create_dir_all(host.path().join("tree/inner")).unwrap();
    std::fs::write(host.path().join("tree/inner/x.sh"), "echo hi\n").unwrap();
    sb.upload_dir(&host.path().join("tree"), &format!("{dir}/tests"))
        .await
        .unwrap();
    let out = sb.exec(req("cat ~/tests/inner/x.sh")).await.unwrap();
    assert_eq!(out.output.trim(), "echo hi");
    let got = sb
        .download_dir("tests", &host.path().join("got"))
        .await
        .unwrap();
    assert_eq!(got.files, 1);
    assert_eq!(
        std::fs::read_to_string(host.path().join("got/inner/x.sh")).unwrap(),
        "echo hi\n"
    );

    // A daemon does not hang the call (it holds the session's streams, so ssh itself keeps
    // running; before, the call waited for its 30 s deadline and killed the daemon), and
    // teardown kills what the rollout left running and removes its directory.
    let out = sb
        .exec(req(
            "nohup sleep 300 >/dev/null 2>&1 & echo $! > ~/daemon.pid",
        ))
        .await
        .unwrap();
    assert!(!out.timed_out && out.exit_code == 0, "{out:?}");
    let out = sb.exec(req("sleep 300 & echo started")).await.unwrap();
    assert!(!out.timed_out && out.exit_code == 0, "{out:?}");
    assert_eq!(out.output.trim(), "started");
    let pid = String::from_utf8(sb.read_file("daemon.pid").await.unwrap()).unwrap();
    sb.teardown().await.unwrap();
    let other = provider
        .create("task/2", &SandboxSpec::default())
        .await
        .unwrap();
    let check = format!(
        "test -e {dir} && echo kept || echo removed; {ALIVE} {}",
        pid.trim()
    );
    let out = other.exec(req(&check)).await.unwrap();
    assert_eq!(out.output.trim(), "removed\ngone");
    other.teardown().await.unwrap();

    // A sandbox dropped without its teardown (a cancelled rollout) is cleaned up too.
    let dropped = provider
        .create("task/3", &SandboxSpec::default())
        .await
        .unwrap();
    let dropped_dir = dropped.workdir().to_owned();
    let out = dropped
        .exec(req("nohup sleep 300 >/dev/null 2>&1 & echo $! > ~/d.pid"))
        .await
        .unwrap();
    assert!(!out.timed_out && out.exit_code == 0, "{out:?}");
    let pid = String::from_utf8(dropped.read_file("d.pid").await.unwrap()).unwrap();
    drop(dropped);
    let last = provider
        .create("task/4", &SandboxSpec::default())
        .await
        .unwrap();
    let check = format!(
        "test -e {dropped_dir} && echo kept || echo removed; {ALIVE} {}",
        pid.trim()
    );
    assert_eq!(
        last.exec(req(&check)).await.unwrap().output.trim(),
        "removed\ngone"
    );
    last.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_host_is_one_clear_error() {
    let sshd = start_sshd().await;
    let mut settings = sshd.settings();
    settings.port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = SshProvider::connect(settings, Vec::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("sandbox creation failed") && err.contains("ssh to"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn terminal_test_check_passes_on_the_ssh_backend() {
    let sshd = start_sshd().await;
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(common::example_bin("terminal_test"))
        .args(["check", "--limit", "10", "--env.terminal_backend", "ssh"])
        .envs(sshd.vars())
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "check: 4 items, 4 passed, 0 failed (min score 1) (7 repeated training items skipped)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_on_the_ssh_backend_starts_from_copies_made_on_the_host() {
    use hermes_runtime::sandbox::{GroupFork, SetupCommand, TaskSandbox};
    use std::sync::Arc;
    let sshd = start_sshd().await;
    let provider: Arc<dyn SandboxProvider> = Arc::new(
        SshProvider::connect(sshd.settings(), Vec::new())
            .await
            .unwrap(),
    );
    let group = GroupFork::new(Arc::clone(&provider), 1);
    let spec = SandboxSpec::default().with_prepare(SetupCommand {
        name: "preparation".into(),
        command: "mkdir -p pkg && echo prepared > pkg/state && echo \"$PWD\" > prepared-in".into(),
        timeout: Duration::from_secs(30),
    });
    let copies: Vec<TaskSandbox> = (0..2)
        .map(|i| {
            TaskSandbox::new(format!("ssh-copy-{i}"), Arc::clone(&provider))
                .with_spec(spec.clone())
                .in_group(Some(Arc::clone(&group)))
        })
        .collect();
    let first = copies[0].get().await.unwrap();
    let second = copies[1].get().await.unwrap();
    assert_ne!(first.workdir(), second.workdir());
    let out = first
        .exec(req("cat pkg/state; cat prepared-in"))
        .await
        .unwrap();
    let lines: Vec<&str> = out.output.lines().collect();
    assert_eq!(lines[0], "prepared", "{}", out.output);
    let prepared_dir = lines[1].to_owned();
    assert_ne!(
        prepared_dir,
        first.workdir(),
        "a copy, not the prepared directory"
    );
    first
        .exec(req("echo changed > pkg/state; touch mine"))
        .await
        .unwrap();
    let out = second
        .exec(req(
            "cat pkg/state; test -e mine && echo leaked; cat \"$(cat prepared-in)/pkg/state\"",
        ))
        .await
        .unwrap();
    assert_eq!(out.output.trim(), "prepared\nprepared", "{}", out.output);
    for c in &copies {
        c.close().await.unwrap();
    }
    group.close().await;
    let out = Command::new("test")
        .args(["-e", &prepared_dir])
        .status()
        .await
        .unwrap();
    assert!(
        !out.success(),
        "the prepared directory {prepared_dir} goes with the group"
    );
}
