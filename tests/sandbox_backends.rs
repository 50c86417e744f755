//! Behaviour every sandbox backend shares, run against both the local backend and the Docker
//! backend (real daemon): cwd persistence, timeout kill of the process group, daemons that
//! keep the stream open, output capping, isolation, binary-safe transfers of any size, path
//! checks on download, the bound on commands running at once (also on the ssh backend). Docker-only behaviour
//! (hardening, tmpfs paths, vanished containers) is at the end.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::docker::{containers_of, require_docker, settings, IMAGE};
use hermes_runtime::sandbox::docker::ChangeSource;
use hermes_runtime::sandbox::{
    DockerProvider, DockerSettings, ExecRequest, LocalProvider, Sandbox, SandboxError,
    SandboxProvider, SandboxSpec, SshProvider,
};

/// Each Docker test must finish well within this.
const TEST_LIMIT: Duration = Duration::from_secs(180);

fn req(command: &str, secs: u64) -> ExecRequest {
    ExecRequest::new(command, Duration::from_secs(secs))
}

async fn run(s: &dyn Sandbox, command: &str) -> (i32, String) {
    let out = s.exec(req(command, 30)).await.expect("exec");
    (out.exit_code, out.output)
}

/// A provider of the named backend (keeps the local root alive for the test's duration).
async fn provider(backend: &str) -> Arc<dyn SandboxProvider> {
    match backend {
        "local" => Arc::new(LocalProvider::new().expect("local provider")),
        "docker" => {
            require_docker();
            Arc::new(
                DockerProvider::connect(settings())
                    .await
                    .expect("docker provider"),
            )
        }
        other => unreachable!("{other}"),
    }
}

async fn sandbox(p: &Arc<dyn SandboxProvider>, task: &str) -> Arc<dyn Sandbox> {
    p.create(task, &SandboxSpec::default())
        .await
        .expect("create sandbox")
}

/// Runs `body` for one backend under the time limit and checks that the sandboxes it made
/// are gone afterwards.
async fn with_backend<F, Fut>(backend: &str, body: F)
where
    F: FnOnce(Arc<dyn SandboxProvider>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let p = provider(backend).await;
    tokio::time::timeout(TEST_LIMIT, body(p))
        .await
        .expect("the test exceeded its time limit");
}

/// A provider of `backend` whose sandboxes run at most `at_once` commands at a time
/// (`--env.sandbox_command_concurrency`), and the sshd it reaches (ssh only: it stops when
/// dropped).
async fn provider_running(
    backend: &str,
    at_once: usize,
) -> (Arc<dyn SandboxProvider>, Option<common::sshd::Sshd>) {
    match backend {
        "local" => (
            Arc::new(
                LocalProvider::new()
                    .expect("local provider")
                    .with_command_concurrency(at_once),
            ),
            None,
        ),
        "ssh" => {
            let sshd = common::sshd::start_sshd().await;
            let provider = SshProvider::connect(sshd.settings(), Vec::new())
                .await
                .expect("ssh provider")
                .with_command_concurrency(at_once);
            (Arc::new(provider), Some(sshd))
        }
        _ => {
            require_docker();
            let provider = DockerProvider::connect(DockerSettings {
                command_concurrency: at_once,
                ..settings()
            })
            .await
            .expect("docker provider");
            (Arc::new(provider), None)
        }
    }
}

/// The host's clock at a command's start and end, in seconds.
fn span(output: &str) -> (f64, f64) {
    let times: Vec<f64> = output
        .split_whitespace()
        .map(|t| t.parse().expect("a time"))
        .collect();
    (times[0], times[1])
}

/// Six sandboxes each run a one-second command at once with room for two: never more than two
/// run at a time (each command's own clock readings, taken inside its place, say so).
async fn commands_run_at_most_their_budget_at_once(backend: &str) {
    let (p, _sshd) = provider_running(backend, 2).await;
    let mut boxes = Vec::new();
    for i in 0..6 {
        boxes.push(sandbox(&p, &format!("at-once-{i}")).await);
    }
    let command = "date +%s.%N; sleep 1; date +%s.%N";
    let runs = boxes.iter().map(|s| async move {
        let out = s.exec(req(command, 60)).await.expect("exec");
        assert_eq!(out.exit_code, 0, "{}", out.output);
        span(&out.output)
    });
    let spans = tokio::time::timeout(TEST_LIMIT, futures::future::join_all(runs))
        .await
        .expect("the commands did not finish in time");
    let most = spans
        .iter()
        .map(|(start, _)| {
            spans
                .iter()
                .filter(|(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap();
    assert!(
        most <= 2,
        "{most} commands ran at once with room for 2: {spans:?}"
    );
    for s in &boxes {
        s.teardown().await.expect("teardown");
    }
}

/// A hung command holds its place for its slice only: with room for one, a second sandbox's
/// command runs after 5 s while the first is still sleeping.
async fn a_hung_command_gives_its_place_back(backend: &str) {
    let (p, _sshd) = provider_running(backend, 1).await;
    let boxes = [sandbox(&p, "hung").await, sandbox(&p, "next").await];
    let mut hung = Box::pin(boxes[0].exec(req("sleep 120", 180)));
    let waited = Instant::now();
    let next = async {
        // Sent once the hung command holds the place.
        tokio::time::sleep(Duration::from_millis(500)).await;
        boxes[1].exec(req("echo ran", 60)).await.expect("exec")
    };
    let out = tokio::select! {
        out = next => out,
        done = &mut hung => panic!("the sleep ended first: {done:?}"),
    };
    assert_eq!(out.output.trim(), "ran");
    let waited = waited.elapsed();
    assert!(
        waited >= Duration::from_secs(5),
        "ran after {waited:?}: the hung command's place was not held for its slice"
    );
    // Dropped before the teardown: it holds the sandbox's shell.
    drop(hung);
    for s in &boxes {
        s.teardown().await.expect("teardown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_commands_run_at_most_their_budget_at_once() {
    commands_run_at_most_their_budget_at_once("local").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_commands_run_at_most_their_budget_at_once() {
    commands_run_at_most_their_budget_at_once("docker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_hung_command_gives_its_place_back() {
    a_hung_command_gives_its_place_back("local").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_hung_command_gives_its_place_back() {
    a_hung_command_gives_its_place_back("docker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_commands_run_at_most_their_budget_at_once() {
    commands_run_at_most_their_budget_at_once("ssh").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_hung_command_gives_its_place_back() {
    a_hung_command_gives_its_place_back("ssh").await;
}

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod local {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::with_backend("local", super::$name).await } )*
        }
        mod docker {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::with_backend("docker", super::$name).await } )*
        }
    };
}

both_backends!(
    cwd_persists_across_commands,
    stdout_and_stderr_are_merged_and_exit_codes_kept,
    huge_output_is_capped_while_streaming,
    timeout_kills_the_process_group_and_the_sandbox_stays_usable,
    a_daemon_left_running_does_not_hang_the_call,
    two_sandboxes_cannot_see_each_others_files,
    files_are_binary_safe_and_report_missing_and_directories,
    large_and_binary_files_round_trip_through_upload_and_download,
    directories_round_trip_and_links_stay_links,
    download_refuses_links_that_escape_the_target,
);

async fn cwd_persists_across_commands(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "cwd").await;
    assert_eq!(
        run(&*s, "mkdir -p sub/deeper && cd sub && touch here.txt")
            .await
            .0,
        0
    );
    let (code, out) = run(&*s, "ls && basename \"$PWD\"").await;
    assert_eq!((code, out.as_str()), (0, "deeper\nhere.txt\nsub\n"));
    run(&*s, "cd deeper").await;
    assert!(run(&*s, "pwd").await.1.trim_end().ends_with("/sub/deeper"));
    // A failing command still keeps the directory it reached; an explicit workdir does not move it.
    assert_eq!(run(&*s, "cd .. && false").await.0, 1);
    let explicit = s
        .exec(ExecRequest {
            workdir: Some("/".into()),
            ..req("pwd", 10)
        })
        .await
        .unwrap();
    assert_eq!(explicit.output, "/\n");
    assert!(run(&*s, "pwd").await.1.trim_end().ends_with("/sub"));
    s.teardown().await.unwrap();
}

async fn stdout_and_stderr_are_merged_and_exit_codes_kept(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "merge").await;
    let (code, out) = run(&*s, "echo one; echo two >&2; echo three; exit 7").await;
    assert_eq!((code, out.as_str()), (7, "one\ntwo\nthree\n"));
    let (code, out) = run(&*s, "printf 'no newline'").await;
    assert_eq!((code, out.as_str()), (0, "no newline"));
    s.teardown().await.unwrap();
}

async fn huge_output_is_capped_while_streaming(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "cap").await;
    let out = s
        .exec(req("head -c 2000000 /dev/zero | tr '\\0' 'x'", 60))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    let marker = "\n\n... [OUTPUT TRUNCATED - 1950000 chars omitted out of 2000000 total] ...\n\n";
    assert!(out.output.contains(marker));
    assert_eq!(out.output.len(), 50_000 + marker.len());
    s.teardown().await.unwrap();
}

async fn timeout_kills_the_process_group_and_the_sandbox_stays_usable(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "timeout").await;
    let started = Instant::now();
    let out = s
        .exec(req(
            "sleep 1000 & echo $! > child.pid; echo started; sleep 1000",
            2,
        ))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(out.exit_code, 124);
    assert!(out.timed_out);
    assert_eq!(out.output, "started\n\n[Command timed out after 2s]");
    // The background child is gone too: check with ps inside the sandbox.
    let mut alive = String::new();
    for _ in 0..50 {
        let (_, o) = run(
            &*s,
            "ps -o stat= -p \"$(cat ~/child.pid)\" | grep -v Z || true",
        )
        .await;
        alive = o;
        if alive.trim().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        alive.trim(),
        "",
        "the `sleep 1000` child must be killed with its group"
    );
    assert_eq!(run(&*s, "echo still usable").await.1, "still usable\n");
    s.teardown().await.unwrap();
}

async fn a_daemon_left_running_does_not_hang_the_call(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "daemon").await;
    let started = Instant::now();
    let out = s.exec(req("sleep 300 & echo launched", 60)).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call must return when the shell exits, not when the daemon closes the stream"
    );
    assert_eq!(
        (out.exit_code, out.output.as_str(), out.timed_out),
        (0, "launched\n", false)
    );
    s.teardown().await.unwrap();
}

async fn two_sandboxes_cannot_see_each_others_files(p: Arc<dyn SandboxProvider>) {
    let (a, b) = tokio::join!(sandbox(&p, "iso-a"), sandbox(&p, "iso-b"));
    let (ra, rb) = tokio::join!(
        run(&*a, "echo secret-a > ~/mine.txt && cat ~/mine.txt"),
        run(&*b, "echo secret-b > ~/mine.txt && cat ~/mine.txt"),
    );
    assert_eq!((ra.1.as_str(), rb.1.as_str()), ("secret-a\n", "secret-b\n"));
    assert_eq!(a.read_file("~/mine.txt").await.unwrap(), b"secret-a\n");
    assert_eq!(b.read_file("~/mine.txt").await.unwrap(), b"secret-b\n");
    b.teardown().await.unwrap();
    assert_eq!(run(&*a, "cat ~/mine.txt").await.1, "secret-a\n");
    a.teardown().await.unwrap();
}

async fn files_are_binary_safe_and_report_missing_and_directories(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "files").await;
    let every_byte: Vec<u8> = (0..=255u8).cycle().take(256 * 64).collect();
    assert!(s
        .write_file("~/deep/dir/bin.dat", &every_byte)
        .await
        .unwrap());
    assert_eq!(s.read_file("deep/dir/bin.dat").await.unwrap(), every_byte);
    assert!(!s.write_file("deep/dir/bin.dat", b"v2").await.unwrap());
    assert_eq!(s.read_file("~/deep/dir/bin.dat").await.unwrap(), b"v2");
    run(
        &*s,
        "printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 755 run.sh",
    )
    .await;
    s.write_file("run.sh", b"#!/bin/sh\necho rewritten\n")
        .await
        .unwrap();
    assert_eq!(
        run(&*s, "./run.sh").await.1,
        "rewritten\n",
        "the mode is kept"
    );
    assert!(matches!(
        s.read_file("missing.txt").await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        s.read_file("deep").await,
        Err(SandboxError::IsDirectory(_))
    ));
    run(&*s, "ln -s deep/dir/bin.dat link.dat").await;
    assert_eq!(
        s.read_file("link.dat").await.unwrap(),
        b"v2",
        "links are followed"
    );
    s.teardown().await.unwrap();
}

fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

async fn large_and_binary_files_round_trip_through_upload_and_download(
    p: Arc<dyn SandboxProvider>,
) {
    let s = sandbox(&p, "large").await;
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    // 50 MB of pseudo-random bytes (xorshift), so compression or text paths cannot hide damage.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let data: Vec<u8> = (0..50 * 1024 * 1024 / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    std::fs::write(&big, &data).unwrap();
    let every = dir.path().join("every.bin");
    std::fs::write(&every, (0..=255u8).collect::<Vec<u8>>()).unwrap();

    let sent = s.upload_file(&big, "~/in/big.bin").await.unwrap();
    assert_eq!((sent.files, sent.bytes), (1, data.len() as u64));
    s.upload_file(&every, "in/every.bin").await.unwrap();
    let (_, inside) = run(&*s, "sha256sum in/big.bin | cut -d' ' -f1").await;
    assert_eq!(
        inside.trim(),
        sha256(&big),
        "the file inside is byte-identical"
    );
    assert_eq!(run(&*s, "stat -c %s in/every.bin").await.1, "256\n");

    let back = dir.path().join("back/big.bin");
    let got = s.download_file("in/big.bin", &back).await.unwrap();
    assert_eq!(got.bytes, data.len() as u64);
    assert_eq!(sha256(&back), sha256(&big));
    let every_back = dir.path().join("every.back");
    s.download_file("~/in/every.bin", &every_back)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(&every_back).unwrap(),
        (0..=255u8).collect::<Vec<u8>>()
    );
    assert!(matches!(
        s.download_file("in/none.bin", &dir.path().join("none"))
            .await,
        Err(SandboxError::NotFound(_))
    ));
    s.teardown().await.unwrap();
}

async fn directories_round_trip_and_links_stay_links(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "dirs").await;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("pkg/sub")).unwrap();
    std::fs::write(src.join("pkg/a.py"), "A = 1\n").unwrap();
    std::fs::write(src.join("pkg/sub/b.bin"), [0u8, 255, 10, 13]).unwrap();
    std::fs::write(src.join("top.txt"), "top\n").unwrap();
    std::os::unix::fs::symlink("pkg/a.py", src.join("alias.py")).unwrap();
    let sent = s.upload_dir(&src, "~/proj").await.unwrap();
    assert_eq!((sent.files, sent.bytes), (3, 6 + 4 + 4));
    let (_, listing) = run(&*s, "cd proj && find . | sort && readlink alias.py").await;
    assert_eq!(
        listing,
        ".\n./alias.py\n./pkg\n./pkg/a.py\n./pkg/sub\n./pkg/sub/b.bin\n./top.txt\npkg/a.py\n"
    );
    run(&*s, "echo made-inside > ~/proj/pkg/new.txt").await;
    let out = dir.path().join("out");
    let got = s.download_dir("proj", &out).await.unwrap();
    assert_eq!(got.files, 4);
    assert_eq!(
        std::fs::read(out.join("pkg/sub/b.bin")).unwrap(),
        [0u8, 255, 10, 13]
    );
    assert_eq!(
        std::fs::read_to_string(out.join("pkg/new.txt")).unwrap(),
        "made-inside\n"
    );
    assert_eq!(
        std::fs::read_link(out.join("alias.py")).unwrap(),
        Path::new("pkg/a.py")
    );
    s.teardown().await.unwrap();
}

async fn download_refuses_links_that_escape_the_target(p: Arc<dyn SandboxProvider>) {
    let s = sandbox(&p, "escape").await;
    run(
        &*s,
        "mkdir -p d && echo ok > d/fine.txt && ln -s /etc d/evil",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let err = s
        .download_dir("d", &dir.path().join("out"))
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Path(_)), "{err}");
    run(&*s, "rm d/evil && ln -s ../../../../../x d/up").await;
    let err = s
        .download_dir("d", &dir.path().join("out2"))
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Path(_)), "{err}");
    s.teardown().await.unwrap();
}

// ---- Docker only ----------------------------------------------------------------------

async fn docker_provider(settings: hermes_runtime::sandbox::DockerSettings) -> DockerProvider {
    require_docker();
    DockerProvider::connect(settings)
        .await
        .expect("docker provider")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_containers_are_hardened_by_default() {
    let p = docker_provider(settings()).await;
    let s = p.create("hardened", &SandboxSpec::default()).await.unwrap();
    let (_, out) = run(
        &*s,
        "ls /sys/class/net; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; \
         cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes \
             /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/memory.max; \
         findmnt -n -o FSTYPE /tmp 2>/dev/null || grep ' /tmp ' /proc/mounts; id -u; pwd",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "lo", "no network but loopback: {out}");
    // CHOWN, DAC_OVERRIDE, FOWNER, SETGID, SETUID only.
    assert_eq!(lines[1], "CapEff:\t00000000000000cb", "{out}");
    assert_eq!(lines[2], "NoNewPrivs:\t1", "{out}");
    assert_eq!(lines[3], "256", "{out}");
    assert_eq!(lines[4], (4096u64 * 1024 * 1024).to_string(), "{out}");
    assert_eq!(lines[5], "100000", "one CPU: {out}");
    assert!(out.contains("tmpfs"), "{out}");
    assert!(out.ends_with("0\n/root\n"), "{out}");
    s.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_files_on_tmpfs_use_tar_through_exec() {
    let p = docker_provider(settings()).await;
    let s = p.create("tmpfs", &SandboxSpec::default()).await.unwrap();
    assert!(s.write_file("/tmp/w/x.txt", b"on tmpfs").await.unwrap());
    assert_eq!(run(&*s, "cat /tmp/w/x.txt").await.1, "on tmpfs");
    // A file's mode is kept when it is rewritten; a write into an existing directory made none.
    run(&*s, "chmod 750 /tmp/w/x.txt").await;
    assert!(!s.write_file("/tmp/w/x.txt", b"again").await.unwrap());
    assert_eq!(
        run(&*s, "stat -c %a /tmp/w/x.txt; cat /tmp/w/x.txt")
            .await
            .1,
        "750\nagain"
    );
    assert!(!s.write_file("/tmp/w/new.txt", b"on tmpfs").await.unwrap());
    assert_eq!(run(&*s, "stat -c %a /tmp/w/new.txt").await.1.trim(), "644");
    assert_eq!(s.read_file("/tmp/w/x.txt").await.unwrap(), b"again");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.bin"), [1u8, 0, 2]).unwrap();
    let sent = s.upload_dir(dir.path(), "/tmp/up").await.unwrap();
    assert_eq!((sent.files, sent.bytes), (1, 3));
    assert_eq!(
        run(&*s, "od -An -tu1 /tmp/up/f.bin").await.1.trim(),
        "1   0   2"
    );
    s.download_file("/tmp/up/f.bin", &dir.path().join("back.bin"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("back.bin")).unwrap(),
        [1u8, 0, 2]
    );
    assert!(matches!(
        s.read_file("/tmp/none").await,
        Err(SandboxError::NotFound(_))
    ));
    s.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_home_of_a_non_root_user_is_the_one_its_commands_get() {
    // `~` resolves without a command where the daemon's storage is readable (the image's
    // passwd), with one where it is not (the daemon's diff): both as the user's `$HOME`.
    for source in [ChangeSource::Storage, ChangeSource::Daemon] {
        let p = docker_provider(DockerSettings {
            user: Some("games".into()),
            change_source: source,
            ..settings()
        })
        .await;
        let s = p.create("home", &SandboxSpec::default()).await.unwrap();
        s.write_file("~/at-home.txt", b"here").await.unwrap();
        let (code, out) = run(&*s, "printf '%s ' \"$HOME\"; cat /usr/games/at-home.txt").await;
        assert_eq!((code, out.as_str()), (0, "/usr/games here"), "{source:?}");
        s.teardown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_killed_container_is_an_infrastructure_error() {
    let p = docker_provider(settings()).await;
    let s = p.create("killed", &SandboxSpec::default()).await.unwrap();
    let name = containers_of(std::process::id())
        .into_iter()
        .find(|n| n.starts_with("hermes-killed"))
        .expect("the container is labelled with its task and owner");
    let out = std::process::Command::new("docker")
        .args(["rm", "-f", &name])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = s.exec(req("true", 10)).await.unwrap_err();
    assert!(err.is_infra(), "{err}");
    let err = s.read_file("x").await.unwrap_err();
    assert!(err.is_infra(), "{err}");
    s.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_bad_image_and_unreachable_daemon_are_clear_errors() {
    let p = docker_provider(settings()).await;
    let Err(err) = p
        .create("bad", &SandboxSpec::image("hermes-env/no-such-image:nope"))
        .await
    else {
        panic!("a missing image must fail the creation");
    };
    assert!(err.is_infra());
    assert!(
        err.to_string().contains("hermes-env/no-such-image:nope"),
        "{err}"
    );
    let err = DockerProvider::connect(hermes_runtime::sandbox::DockerSettings {
        host: Some("unix:///nonexistent/docker.sock".into()),
        ..settings()
    })
    .await
    .unwrap_err();
    assert!(err.is_infra());
    assert!(
        err.to_string().contains("/nonexistent/docker.sock"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_a_container_that_fails_to_start_is_removed() {
    // Mounting a file over a directory passes the create and fails the start.
    let p = docker_provider(hermes_runtime::sandbox::DockerSettings {
        mounts: vec!["/etc/hostname:/root".into()],
        ..settings()
    })
    .await;
    let Err(err) = p.create("nostart", &SandboxSpec::default()).await else {
        panic!("the start must fail");
    };
    assert!(err.is_infra(), "{err}");
    assert!(err.to_string().contains("not a directory"), "{err}");
    let left: Vec<String> = containers_of(std::process::id())
        .into_iter()
        .filter(|n| n.starts_with("hermes-nostart"))
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "the created container was removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_per_item_image_override_is_used() {
    let p = docker_provider(settings()).await;
    let alt = "hermes-env/python-alt:test";
    let tagged = std::process::Command::new("docker")
        .args(["tag", IMAGE, alt])
        .output()
        .unwrap();
    assert!(tagged.status.success());
    let s = p.create("alt", &SandboxSpec::image(alt)).await.unwrap();
    let name = containers_of(std::process::id())
        .into_iter()
        .find(|n| n.starts_with("hermes-alt"))
        .unwrap();
    let image = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.Config.Image}}", &name])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&image.stdout).trim(), alt);
    s.teardown().await.unwrap();
    let untagged = std::process::Command::new("docker")
        .args(["rmi", alt])
        .output()
        .unwrap();
    assert!(untagged.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_pool_hands_out_pre_started_containers_once() {
    let p = docker_provider(hermes_runtime::sandbox::DockerSettings {
        pool_size: 2,
        ..settings()
    })
    .await;
    assert_eq!(p.wait_for_pool(IMAGE, Duration::from_secs(60)).await, 2);
    let started = Instant::now();
    let a = p.create("pooled-a", &SandboxSpec::default()).await.unwrap();
    let b = p.create("pooled-b", &SandboxSpec::default()).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    run(&*a, "echo a > ~/who").await;
    assert_eq!(
        run(&*b, "cat ~/who 2>&1 || echo none")
            .await
            .1
            .trim_end()
            .lines()
            .last(),
        Some("none")
    );
    a.teardown().await.unwrap();
    b.teardown().await.unwrap();
    // The pool refills, and a refilled container is fresh.
    assert_eq!(p.wait_for_pool(IMAGE, Duration::from_secs(60)).await, 2);
    let c = p.create("pooled-c", &SandboxSpec::default()).await.unwrap();
    assert_eq!(run(&*c, "ls ~/who 2>/dev/null | wc -l").await.1, "0\n");
    c.teardown().await.unwrap();
    drop(p);
    let pool_left = || {
        containers_of(std::process::id())
            .into_iter()
            .filter(|n| n.starts_with("hermes-pool-"))
            .count()
    };
    for _ in 0..100 {
        if pool_left() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pool_left(), 0, "dropping the provider removes its pool");
}
