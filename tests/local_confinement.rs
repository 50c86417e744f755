//! The local backend as a boundary (Landlock and a cgroup per sandbox, where the kernel allows
//! them): a rollout cannot write its siblings' files or read the user's, its file tools cannot
//! reach this process's `/proc/self`, it signals nothing outside itself, and a daemon that
//! clears its environment and leaves its session is still found and killed. Each case also
//! runs unconfined (`confined(false)`, the backend before confinement) to show the hole it
//! closes. The host must have Landlock and a writable cgroup v2 hierarchy (the CI machine
//! does); a host without them fails here, saying so.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use hermes_runtime::sandbox::{
    ExecRequest, LeftoverRules, LocalProvider, Sandbox, SandboxError, SandboxProvider, SandboxSpec,
};

fn provider(confined: bool) -> LocalProvider {
    LocalProvider::new().unwrap().confined(confined)
}

async fn sandbox(p: &LocalProvider, task: &str) -> Arc<dyn Sandbox> {
    p.create(task, &SandboxSpec::default()).await.unwrap()
}

async fn run(s: &Arc<dyn Sandbox>, command: &str) -> (i32, String) {
    let out = s
        .exec(ExecRequest::new(command, Duration::from_secs(20)))
        .await
        .unwrap();
    (out.exit_code, out.output)
}

/// Fails, naming what is missing, on a host that cannot confine.
fn require_kernel_support() {
    // SAFETY: the version query of landlock_create_ruleset reads no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    assert!(
        abi >= 1,
        "this test needs a kernel with Landlock (CONFIG_SECURITY_LANDLOCK, lsm=landlock)"
    );
    common::cgroup2_mount();
}

#[tokio::test]
async fn a_rollout_cannot_write_its_siblings_files() {
    require_kernel_support();
    for confined in [false, true] {
        let p = provider(confined);
        let (a, b) = (sandbox(&p, "a").await, sandbox(&p, "b").await);
        assert_eq!(run(&b, "echo mine > answer.txt").await.0, 0);
        let (code, out) = run(
            &a,
            "echo forged > ../task-b/answer.txt; cat ../task-b/answer.txt",
        )
        .await;
        let written = std::fs::read_to_string(p.root().join("task-b/answer.txt")).unwrap();
        if confined {
            assert_ne!(code, 0, "{out}");
            assert!(out.contains("Permission denied"), "{out}");
            assert_eq!(written, "mine\n", "the sibling's file is untouched");
        } else {
            assert_eq!(written, "forged\n", "unconfined, the hole is there: {out}");
        }
        // The file tools are held to the same boundary.
        let tool = a.write_file("../task-b/answer.txt", b"tool").await;
        if confined {
            let err = tool.unwrap_err();
            assert!(matches!(err, SandboxError::Path(_)), "{err}");
            assert!(err.to_string().contains("outside this sandbox"), "{err}");
        } else {
            tool.unwrap();
        }
    }
}

/// A live confined sandbox holds no descriptor of its own between commands: its ruleset and
/// its `cgroup.procs` are opened as each of its processes starts and closed once it has. So
/// thousands of sandboxes live at once (`openenv` sessions verifying) cost no open files.
#[tokio::test]
async fn live_confined_sandboxes_hold_no_open_files() {
    require_kernel_support();
    let open_files = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let p = provider(true);
    let victim = sandbox(&p, "fd-victim").await;
    let before = open_files();
    let mut live = Vec::new();
    for i in 0..200 {
        let s = sandbox(&p, &format!("fd-{i}")).await;
        let (code, out) = run(
            &s,
            "echo ok > verdict.txt; echo x > ../task-fd-victim/forged",
        )
        .await;
        assert_ne!(code, 0, "still confined: {out}");
        assert_eq!(s.read_file("verdict.txt").await.unwrap(), b"ok\n");
        live.push(s);
    }
    let grown = open_files().saturating_sub(before);
    // A bound, not zero: the other tests of this binary run at the same time with their own
    // sandboxes and shells (a few dozen descriptors at most), and the provider opens the
    // paths its rules share once. Holding a ruleset and a cgroup.procs each, the 200 live
    // sandboxes held 400.
    assert!(
        grown < 100,
        "{grown} more open files with 200 live sandboxes"
    );
    assert!(!p.root().join("task-fd-victim/forged").exists());
    drop(victim);
}

/// A process whose confinement cannot be built is not started: its command fails as a sandbox
/// failure (the infrastructure's), never runs unconfined. Here the sandbox's temp directory,
/// which its rules name, is removed from the host side.
#[tokio::test]
async fn a_command_that_cannot_be_confined_is_not_run() {
    require_kernel_support();
    let p = provider(true);
    let s = sandbox(&p, "unconfinable").await;
    assert_eq!(run(&s, "echo ok").await.0, 0);
    std::fs::remove_dir(p.root().join("tmp-task-unconfinable")).unwrap();
    let err = s
        .exec(ExecRequest::new(
            "echo ran > ~/marker",
            Duration::from_secs(20),
        ))
        .await
        .unwrap_err();
    assert!(err.is_infra(), "{err}");
    assert!(err.to_string().contains("cannot confine"), "{err}");
    assert!(!p.root().join("task-unconfinable/marker").exists());
}

#[tokio::test]
async fn a_rollout_cannot_read_the_users_files_or_this_process() {
    require_kernel_support();
    let secrets = tempfile::tempdir().unwrap();
    let dotenv = secrets.path().join(".env");
    std::fs::write(&dotenv, "OPENAI_API_KEY=sk-local-confinement-test\n").unwrap();
    let me = std::process::id();
    for confined in [false, true] {
        let p = provider(confined);
        let s = sandbox(&p, "r").await;
        let (_, out) = run(&s, &format!("cat {}", dotenv.display())).await;
        let environ = s.read_file("/proc/self/environ").await;
        // This process's descriptors (the other sandboxes' pipes among them) and memory.
        let (_, proc_out) = run(
            &s,
            &format!("ls -l /proc/{me}/fd/ 2>&1; head -c 1 /proc/{me}/mem 2>&1"),
        )
        .await;
        let (signal, _) = run(&s, &format!("kill -0 {me}")).await;
        if confined {
            assert!(!out.contains("sk-local"), "{out}");
            assert!(out.contains("Permission denied"), "{out}");
            let err = environ.unwrap_err();
            assert!(err.to_string().contains("outside this sandbox"), "{err}");
            assert!(
                !proc_out.contains("->"),
                "this process's descriptors: {proc_out}"
            );
            assert!(
                proc_out.contains("/mem' for reading: Permission denied"),
                "{proc_out}"
            );
            assert_ne!(signal, 0, "a confined command cannot signal this process");
            // The system stays readable, to commands and file tools alike.
            assert_eq!(
                run(&s, "cat /etc/passwd >/dev/null && python3 -c 'print(1)'")
                    .await
                    .0,
                0
            );
            s.read_file("/etc/passwd").await.unwrap();
        } else {
            assert!(
                out.contains("sk-local"),
                "unconfined, the hole is there: {out}"
            );
            let environ = String::from_utf8_lossy(&environ.unwrap()).into_owned();
            assert!(environ.contains("CARGO"), "unconfined, the hole is there");
            assert!(
                proc_out.contains("->"),
                "unconfined, the hole is there: {proc_out}"
            );
            assert_eq!(signal, 0);
        }
    }
}

/// A confined sandbox whose processes never start (a verifier that writes and reads a file)
/// makes its scratch directory and nothing else: its temp directory, its shell's state file
/// and its cgroup come with its first process, or with a file tool's first use of the temp
/// directory. Each was one more inode or cgroup per episode of an `openenv` session, made and
/// removed for nothing. Teardown removes what was made, and a second teardown is a no-op.
#[tokio::test]
async fn a_sandbox_without_processes_makes_only_its_directory() {
    require_kernel_support();
    let p = provider(true);
    let run_name = p.root().file_name().unwrap().to_string_lossy().into_owned();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let run_cgroup = common::cgroup2_mount()
        .0
        .join(own.trim_start_matches('/'))
        .join(&run_name);
    assert!(run_cgroup.is_dir(), "the run's cgroup {run_cgroup:?}");
    let state_files = || {
        let dir = std::path::Path::new("/dev/shm").join(&run_name);
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(".task-f."))
                    .count()
            })
            .unwrap_or(0)
    };

    let s = sandbox(&p, "f").await;
    s.write_file("verdict.txt", b"1").await.unwrap();
    assert_eq!(s.read_file("verdict.txt").await.unwrap(), b"1");
    let verdict = p.root().join("task-f/verdict.txt");
    let names = || -> Vec<String> {
        let entries = std::fs::read_dir(p.root().join("task-f")).unwrap();
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(), ["verdict.txt"], "made in place, no temporary file");
    let mode = |f: &std::path::Path| std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&verdict), 0o644);
    // Written again, it is replaced as before (through a temporary file), its mode kept.
    std::fs::set_permissions(&verdict, std::fs::Permissions::from_mode(0o600)).unwrap();
    s.write_file("verdict.txt", b"2").await.unwrap();
    assert_eq!(s.read_file("verdict.txt").await.unwrap(), b"2");
    assert_eq!(mode(&verdict), 0o600);
    assert_eq!(names(), ["verdict.txt"]);
    assert!(
        !p.root().join("tmp-task-f").exists(),
        "no temp directory yet"
    );
    assert!(!run_cgroup.join("task-f").exists(), "no cgroup yet");
    assert_eq!(state_files(), 0, "no shell state file yet");
    // Its file tools still refuse what is not its own (plain names of its own files are
    // taken as they are, with no lookup, while nothing but its small files is there).
    for path in ["../task-other/x", "/proc/self/environ", "sub/../../escape"] {
        let err = s.read_file(path).await.unwrap_err();
        assert!(
            err.to_string().contains("outside this sandbox"),
            "{path}: {err}"
        );
    }
    let err = s.write_file("../escape", b"x").await.unwrap_err();
    assert!(err.to_string().contains("outside this sandbox"), "{err}");
    assert!(!p.root().join("escape").exists());

    // A file tool reaching the temp directory first makes it (and the rest of the domain).
    let note = format!("{}/note", s.temp_dir());
    s.write_file(&note, b"from the tool").await.unwrap();
    assert!(p.root().join("tmp-task-f/note").is_file());
    assert!(
        run_cgroup.join("task-f").is_dir(),
        "made with the temp directory"
    );
    assert_eq!(state_files(), 1);
    let (code, out) = run(&s, "cat $TMPDIR/note; echo x > ../task-other").await;
    assert_ne!(code, 0, "its command is confined: {out}");
    assert!(out.contains("from the tool"), "{out}");

    s.teardown().await.unwrap();
    assert!(!p.root().join("task-f").exists());
    assert!(!p.root().join("tmp-task-f").exists());
    assert!(!run_cgroup.join("task-f").exists());
    assert_eq!(state_files(), 0);
    s.teardown().await.unwrap();

    // Torn down without ever making more than its directory.
    let bare = sandbox(&p, "bare").await;
    bare.write_file("x", b"x").await.unwrap();
    bare.teardown().await.unwrap();
    assert!(!p.root().join("task-bare").exists());
    assert!(!run_cgroup.join("task-bare").exists());
}

/// A confined sandbox where no process runs (an `openenv` episode's verifier writing and
/// reading one small file) is made, used and torn down without tokio's blocking pool: each
/// hand-off there and back cost more than the work. With the pool's only thread held, all of
/// it still completes; a sandbox with more files than a few waits for the pool at teardown.
#[test]
fn a_quiet_sandbox_with_a_small_file_needs_no_blocking_pool() {
    require_kernel_support();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    rt.block_on(async {
        let p = provider(true);
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, running) = tokio::sync::oneshot::channel();
        let hold = tokio::task::spawn_blocking(move || {
            let _ = started.send(());
            let _ = held.recv();
        });
        running.await.unwrap();

        let quiet = async {
            let s = sandbox(&p, "q").await;
            s.write_file("verdict.txt", b"1").await.unwrap();
            assert_eq!(s.read_file("verdict.txt").await.unwrap(), b"1");
            s.teardown().await.unwrap();
            s
        };
        let s = tokio::time::timeout(Duration::from_secs(10), quiet)
            .await
            .expect("made, written, read and torn down with the blocking pool held");
        assert!(!std::path::Path::new(s.workdir()).exists());

        let many = sandbox(&p, "many").await;
        for i in 0..20 {
            many.write_file(&format!("f{i}"), b"x").await.unwrap();
        }
        let teardown = many.teardown();
        tokio::pin!(teardown);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut teardown)
                .await
                .is_err(),
            "20 files are emptied on the blocking pool, which is held"
        );
        release.send(()).unwrap();
        teardown.await.unwrap();
        hold.await.unwrap();
        assert!(!std::path::Path::new(many.workdir()).exists());
    });
}

#[tokio::test]
async fn a_confined_rollout_has_its_own_temp_directory() {
    require_kernel_support();
    let p = provider(true);
    let s = sandbox(&p, "t").await;
    let (code, out) = run(&s, "f=$(mktemp) && echo ok > $f && cat $f && echo $f").await;
    assert_eq!(code, 0, "{out}");
    let root = p.root().to_string_lossy().into_owned();
    assert!(out.contains(&format!("{root}/tmp-task-t/")), "{out}");
    let (code, out) = run(&s, "echo x > /tmp/hermes-confinement-probe").await;
    assert_ne!(code, 0, "the shared /tmp is not writable: {out}");
    // Its own cgroup, which a process left running keeps populated until teardown.
    assert_eq!(run(&s, "sleep 7312 >/dev/null 2>&1 &").await.0, 0);
    std::thread::sleep(Duration::from_millis(300));
    let sleeper = find("sleep 7312").expect("the process runs");
    let cgroup = std::fs::read_to_string(format!("/proc/{sleeper}/cgroup")).unwrap();
    let cgroup = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 path")
        .to_owned();
    let mount = common::cgroup2_mount().0;
    assert!(
        mount.join(cgroup.trim_start_matches('/')).is_dir(),
        "{cgroup}"
    );
    s.teardown().await.unwrap();
    assert!(!p.root().join("tmp-task-t").exists(), "removed at teardown");
    assert!(
        !mount.join(cgroup.trim_start_matches('/')).exists(),
        "its cgroup {cgroup} is removed at teardown, its process killed"
    );
    assert!(!alive(sleeper), "its process is killed");
}

#[tokio::test]
async fn a_daemon_with_a_cleared_environment_and_its_own_session_is_killed() {
    require_kernel_support();
    for confined in [false, true] {
        let p = provider(confined);
        let s = sandbox(&p, "d").await;
        // Out of the sandbox's directory, environment and session: only its cgroup knows it.
        let (code, out) = run(
            &s,
            "env -i setsid sh -c 'cd / && exec sleep 7311' </dev/null >/dev/null 2>&1 & echo $!",
        )
        .await;
        assert_eq!(code, 0, "{out}");
        std::thread::sleep(Duration::from_millis(300));
        let daemon = find("sleep 7311").expect("the daemon runs");
        let kill = s
            .kill_leftover_processes(&LeftoverRules::default())
            .await
            .unwrap();
        let named = kill.leftovers.iter().any(|l| l.contains("7311"));
        if confined {
            assert!(named, "the cgroup names it: {:?}", kill.leftovers);
            std::thread::sleep(Duration::from_millis(200));
            assert!(!alive(daemon), "killed before verification");
        } else {
            assert!(
                !named,
                "unconfined, the hole is there: {:?}",
                kill.leftovers
            );
            assert!(alive(daemon));
            // SAFETY: kill(2) on the pid this test's daemon has.
            unsafe { libc::kill(daemon as i32, libc::SIGKILL) };
        }
    }
}

fn find(command: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        (String::from_utf8_lossy(&cmd).replace('\0', " ").trim() == command).then_some(pid)
    })
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
}
