//! `ssh://` Docker endpoints through bollard's own ssh transport, against a real sshd on
//! loopback (tests/common/sshd.rs) whose remote side reaches this machine's main Docker daemon
//! with `docker system dial-stdio`: a sandbox is created over ssh, runs commands and moves
//! files, and teardown leaves nothing; a port in the URL is refused with the fix; a full
//! `terminal_test` run over ssh earns reward 1.0, and one SIGKILLed mid-run leaves no
//! container (its lease ends with its ssh connection, its watchdog reaches the daemon over ssh).
//!
//! bollard starts the system `ssh`, which reads its configuration from the user's
//! `~/.ssh/config`. So that the test touches nothing of the machine's, `ssh` on this test's
//! PATH is the real client with `-F` pointing at the test's own config (a `Host` naming the
//! sshd's port and `known_hosts`), and ssh's control sockets go to the test's directory
//! (`XDG_STATE_HOME`). Both are set for the test process (one test at a time) and passed to the
//! environment binaries it starts.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::docker::{
    containers_of, require_docker, sandbox_states_of, settings, wait_until_no_containers, IMAGE,
};
use common::sshd::{start_sshd, Sshd};
use hermes_runtime::sandbox::{
    DockerProvider, DockerSettings, ExecRequest, SandboxProvider, SandboxSpec,
};

/// The `Host` the test's ssh config defines for the sshd.
const ALIAS: &str = "hermes-docker-over-ssh";

/// One test at a time: each changes this process's PATH.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Puts an `ssh` that reads `dir/ssh_config` first on PATH, and ssh's control sockets in
/// `dir`; returns the config's path (written once the sshd's port is known).
fn ssh_client_in(dir: &Path) -> std::path::PathBuf {
    common::ensure_debian_package("ssh", "openssh-client");
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v ssh"])
            .output()
            .expect("sh")
            .stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    let config = dir.join("ssh_config");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let wrapper = bin.join("ssh");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {real} -F {} \"$@\"\n", config.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    static ORIGINAL_PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let path = ORIGINAL_PATH.get_or_init(|| std::env::var("PATH").unwrap_or_default());
    std::env::set_var("PATH", format!("{}:{path}", bin.display()));
    std::env::set_var("XDG_STATE_HOME", dir.join("state"));
    config
}

/// The client config: [`ALIAS`] is the sshd (its port, its user, its host key only).
fn write_client_config(config: &Path, sshd: &Sshd) {
    std::fs::write(
        config,
        format!(
            "Host {ALIAS}\n  HostName 127.0.0.1\n  Port {}\n  User {}\n  \
             UserKnownHostsFile {}/known_hosts\n  GlobalKnownHostsFile /dev/null\n",
            sshd.port,
            sshd.user,
            sshd.dir.path().display()
        ),
    )
    .unwrap();
}

/// The ssh client processes (masters and mux clients) still running with `dir` in their
/// command line (the test's `-F` config and control sockets are there).
fn ssh_pids_in(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            let argv0 = cmd.split('\0').next().unwrap_or_default();
            Path::new(argv0).file_name() == Some("ssh".as_ref()) && cmd.contains(&needle)
        })
        .collect()
}

#[test]
fn a_sandbox_over_ssh_runs_moves_files_and_leaves_nothing() {
    let _serial = serial();
    require_docker();
    let client_dir = tempfile::tempdir().unwrap();
    let config = ssh_client_in(client_dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sshd = start_sshd().await;
        write_client_config(&config, &sshd);
        let key = sshd.key().display().to_string();
        let on = |host: String| DockerSettings {
            host: Some(host),
            ..settings()
        };

        // bollard hands `user@host:port` to ssh unparsed (ssh cannot resolve "host:port"),
        // so hermes refuses a port up front and names the ~/.ssh/config fix.
        let direct = format!("ssh://{}@127.0.0.1:{}", sshd.user, sshd.port);
        let raw = bollard::Docker::connect_with_ssh(
            &direct,
            10,
            bollard::API_DEFAULT_VERSION,
            Some(key.clone()),
        )
        .unwrap();
        let e = raw.ping().await.expect_err("bollard cannot use the port");
        let mut chain = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            chain.push_str(&format!(": {s}"));
            source = s.source();
        }
        eprintln!("bollard with a port in the URL: {chain}");
        assert!(
            chain.contains(&format!(
                "Could not resolve hostname 127.0.0.1:{}",
                sshd.port
            )),
            "{chain}"
        );
        let e = DockerProvider::connect(on(format!("{direct}?key={key}")))
            .await
            .expect_err("a port is refused");
        assert!(
            e.to_string()
                .contains(&format!("add `Host 127.0.0.1` with `Port {}`", sshd.port)),
            "{e}"
        );

        // A Host of the ssh config, with the key given in the URL.
        let host = format!("ssh://{}@{ALIAS}?key={key}", sshd.user);
        let provider = DockerProvider::connect(on(host))
            .await
            .expect("connect over ssh");
        let sandbox = provider
            .create("ssh-1", &SandboxSpec::default())
            .await
            .expect("create over ssh");
        let out = sandbox
            .exec(ExecRequest::new(
                "echo over-ssh; cat /etc/os-release | head -1",
                Duration::from_secs(30),
            ))
            .await
            .expect("exec over ssh");
        assert!(out.output.starts_with("over-ssh\n"), "{}", out.output);
        assert_eq!(out.exit_code, 0);
        assert!(
            sandbox
                .write_file("/tmp/over-ssh/hello.txt", b"through dial-stdio")
                .await
                .expect("write over ssh"),
            "the parent directory was created"
        );
        assert_eq!(
            sandbox
                .read_file("/tmp/over-ssh/hello.txt")
                .await
                .expect("read over ssh"),
            b"through dial-stdio"
        );
        let local = client_dir.path().join("hello.txt");
        sandbox
            .download_file("/tmp/over-ssh/hello.txt", &local)
            .await
            .expect("download over ssh");
        assert_eq!(std::fs::read(&local).unwrap(), b"through dial-stdio");
        let pid = std::process::id();
        assert_eq!(
            sandbox_states_of(pid),
            ["running"],
            "the sandbox runs on the machine's main daemon"
        );
        sandbox.teardown().await.expect("teardown over ssh");
        drop(sandbox);
        drop(provider);
        // (Waited for off the runtime's thread, which removes the lease meanwhile.)
        let left = tokio::task::spawn_blocking(move || {
            wait_until_no_containers(pid, Duration::from_secs(30))
        })
        .await
        .unwrap();
        assert_eq!(left, Vec::<String>::new(), "containers left after teardown");
        // Every ssh connection bollard opened is closed with its client.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ssh_pids_in(client_dir.path()).is_empty() {
            assert!(
                Instant::now() < deadline,
                "ssh connections left open after the provider was dropped"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// `terminal_test process` with its sandboxes on `docker_host`, in `dir`.
fn run_over(docker_host: &str, dir: &Path, steps: usize) -> Command {
    let mut c = Command::new(common::example_bin("terminal_test"));
    c.current_dir(dir)
        .args(["process", "--testing", "true", "--env.use_wandb", "false"])
        .args(["--env.terminal_backend", "docker"])
        .args(["--env.docker_host", docker_host])
        .args(["--env.docker_image", IMAGE])
        .args(["--env.total_steps", &steps.to_string()])
        .args(["--env.group_size", "2", "--env.max_num_workers", "2"])
        .args(["--env.data_path_to_save_groups", "out.jsonl"])
        .env("PATH", std::env::var("PATH").unwrap())
        .env("XDG_STATE_HOME", std::env::var("XDG_STATE_HOME").unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn scores(jsonl: &Path) -> Vec<f64> {
    std::fs::read_to_string(jsonl)
        .unwrap_or_default()
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
        .collect()
}

#[test]
fn a_run_over_ssh_earns_full_reward_and_a_sigkilled_one_leaves_no_container() {
    let _serial = serial();
    require_docker();
    let client_dir = tempfile::tempdir().unwrap();
    let config = ssh_client_in(client_dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sshd = runtime.block_on(start_sshd());
    write_client_config(&config, &sshd);
    let host = format!("ssh://{}@{ALIAS}?key={}", sshd.user, sshd.key().display());

    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = run_over(&host, dir.path(), 2).output().expect("run");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the run over ssh failed:\n{log}");
    assert_eq!(
        scores(&dir.path().join("out.jsonl")),
        [1.0; 4],
        "reference solutions earn 1.0 over ssh:\n{log}"
    );
    eprintln!("2 groups of 2 over ssh in {:?}", started.elapsed());

    // SIGKILL as soon as the run holds a sandbox: nothing of its clean-up runs.
    let dir = tempfile::tempdir().unwrap();
    let mut child = run_over(&host, dir.path(), 50).spawn().expect("spawn");
    let pid = child.id();
    let start = Instant::now();
    while sandbox_states_of(pid).is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it held a sandbox"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no sandbox appeared over ssh"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("holding {:?} before the SIGKILL", containers_of(pid));
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let killed = Instant::now();
    let left = wait_until_no_containers(pid, Duration::from_secs(60));
    assert_eq!(
        left,
        Vec::<String>::new(),
        "containers left after a SIGKILL"
    );
    eprintln!("nothing left {:?} after the SIGKILL", killed.elapsed());
    // What a SIGKILL cannot clean: bollard starts each connection's ssh master with
    // ControlPersist=yes, and nobody is left to send it `-O exit` (the README says so). They
    // are this test's processes (its config path is on their command line): end them.
    let masters = ssh_pids_in(client_dir.path());
    eprintln!("ssh processes left by the killed run: {}", masters.len());
    assert!(
        !masters.is_empty(),
        "the killed run's ssh masters are gone: update the README's ssh paragraph"
    );
    // Signal whatever ssh process of this test is alive until none has been for half a second:
    // a master may still be forking its ControlPersist child when the run is killed, and one
    // blocked in a write that its SA_RESTART handler restarts (OpenSSH installs its handlers
    // so) outlives SIGTERM. SIGTERM for 10 s, SIGKILL after.
    let started = Instant::now();
    let mut quiet_since: Option<Instant> = None;
    loop {
        let alive = ssh_pids_in(client_dir.path());
        if alive.is_empty() {
            if quiet_since.get_or_insert_with(Instant::now).elapsed() >= Duration::from_millis(500)
            {
                break;
            }
        } else {
            quiet_since = None;
            let signal = if started.elapsed() < Duration::from_secs(10) {
                libc::SIGTERM
            } else {
                libc::SIGKILL
            };
            for pid in &alive {
                // SAFETY: signalling an ssh process this test's run started.
                unsafe { libc::kill(*pid as i32, signal) };
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "ssh processes of the killed run survive SIGTERM and SIGKILL: {alive:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "its ssh processes ended {:?} after the first signal",
        started.elapsed()
    );
}
