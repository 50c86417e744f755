//! The local sandbox backend: output capping, timeout kill of the whole process group,
//! background processes that keep the pipe open, binary-safe files, isolation, teardown.

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::logs::Logs;
use std::path::Path;

use hermes_runtime::sandbox::tripwire::{inspect, Armed};
use hermes_runtime::sandbox::{
    ExecOutput, ExecRequest, LocalProvider, Sandbox, SandboxError, SandboxProvider, SandboxSpec,
    Transfer,
};

async fn sandbox(provider: &LocalProvider, task: &str) -> Arc<dyn Sandbox> {
    provider
        .create(task, &SandboxSpec::default())
        .await
        .expect("create sandbox")
}

fn req(command: &str, secs: u64) -> ExecRequest {
    ExecRequest::new(command, Duration::from_secs(secs))
}

fn process_alive(pid: i32) -> bool {
    // A zombie still answers kill(0); check /proc state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"),
        Err(_) => false,
    }
}

#[tokio::test]
async fn stdout_and_stderr_are_interleaved_and_exit_codes_kept() {
    let p = LocalProvider::new().unwrap();
    let s = sandbox(&p, "a").await;
    let out = s
        .exec(req("echo one; echo two >&2; echo three; exit 7", 10))
        .await
        .unwrap();
    assert_eq!(out.output, "one\ntwo\nthree\n");
    assert_eq!(out.exit_code, 7);
    assert!(!out.timed_out);
}

#[tokio::test]
async fn a_command_for_another_user_is_refused_not_run_as_this_one() {
    let p = LocalProvider::new().unwrap();
    let sb = sandbox(&p, "t-user").await;
    for one_shot in [false, true] {
        let request = req("touch ran", 5).with_user("nobody");
        let out = if one_shot {
            sb.exec_one_shot(request).await
        } else {
            sb.exec(request).await
        };
        assert!(
            matches!(&out, Err(SandboxError::Unsupported { backend: "local", what }) if what.contains("nobody")),
            "{out:?}"
        );
    }
    assert_ne!(
        sb.exec(req("test -e ran", 5)).await.unwrap().exit_code,
        0,
        "nothing ran"
    );
    sb.teardown().await.unwrap();
}

#[tokio::test]
async fn huge_output_is_capped_to_40_percent_head_and_60_percent_tail() {
    let p = LocalProvider::new().unwrap();
    let s = sandbox(&p, "a").await;
    // 2,000,000 characters; only 50,000 are kept.
    let out = s
        .exec(req("head -c 2000000 /dev/zero | tr '\\0' 'x'", 30))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    let marker = "\n\n... [OUTPUT TRUNCATED - 1950000 chars omitted out of 2000000 total] ...\n\n";
    assert!(out.output.contains(marker));
    assert_eq!(out.output.len(), 50_000 + marker.len());
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group_and_reports_124() {
    let p = LocalProvider::new().unwrap();
    let s = sandbox(&p, "a").await;
    let out = s
        .exec(req(
            "sleep 1000 & echo $! > child.pid; echo started; sleep 1000",
            1,
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 124);
    assert!(out.timed_out);
    assert_eq!(out.output, "started\n\n[Command timed out after 1s]");
    let pid: i32 = String::from_utf8(s.read_file("child.pid").await.unwrap())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for _ in 0..50 {
        if !process_alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !process_alive(pid),
        "the background `sleep 1000` child must be killed with its group"
    );
    let again = s.exec(req("echo still usable", 5)).await.unwrap();
    assert_eq!(again.output, "still usable\n");
}

#[tokio::test]
async fn a_daemon_left_running_does_not_hang_the_call() {
    let p = LocalProvider::new().unwrap();
    let s = sandbox(&p, "a").await;
    let out = s
        .exec(req("sleep 300 & echo $! > d.pid; echo launched", 60))
        .await
        .unwrap();
    assert!(
        !out.timed_out,
        "the call must return when the shell exits, not when the daemon closes the pipe"
    );
    assert_eq!((out.exit_code, out.output.as_str()), (0, "launched\n"));
    let pid: i32 = String::from_utf8(s.read_file("d.pid").await.unwrap())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(process_alive(pid));
    s.teardown().await.unwrap();
    for _ in 0..50 {
        if !process_alive(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !process_alive(pid),
        "teardown kills what the task left running"
    );
}

#[tokio::test]
async fn files_are_binary_safe_and_atomic_with_parent_dirs() {
    let p = LocalProvider::new().unwrap();
    let s = sandbox(&p, "a").await;
    let every_byte: Vec<u8> = (0..=255u8).cycle().take(256 * 64).collect();
    assert!(
        s.write_file("~/deep/dir/bin.dat", &every_byte)
            .await
            .unwrap(),
        "parent dirs were created"
    );
    assert_eq!(s.read_file("deep/dir/bin.dat").await.unwrap(), every_byte);
    assert!(!s.write_file("deep/dir/bin.dat", b"v2").await.unwrap());
    let listing = s.exec(req("ls -A deep/dir", 5)).await.unwrap();
    assert_eq!(listing.output, "bin.dat\n", "no temp files are left behind");
    assert!(matches!(
        s.read_file("missing.txt").await,
        Err(SandboxError::NotFound(_))
    ));
    assert!(matches!(
        s.read_file("deep").await,
        Err(SandboxError::IsDirectory(_))
    ));
}

#[tokio::test]
async fn tasks_are_isolated_and_home_is_the_task_directory() {
    let p = LocalProvider::new().unwrap();
    let (a, b) = (sandbox(&p, "a").await, sandbox(&p, "b").await);
    a.exec(req("echo secret > ~/mine.txt", 5)).await.unwrap();
    let seen = b.exec(req("cat ~/mine.txt", 5)).await.unwrap();
    assert_ne!(seen.exit_code, 0);
    let home = a.exec(req("cd ~ && pwd -P", 5)).await.unwrap();
    assert_eq!(
        home.output.trim(),
        std::fs::canonicalize(a.workdir())
            .unwrap()
            .to_string_lossy()
    );
}

#[tokio::test]
async fn teardown_removes_the_directory_and_later_use_is_an_infra_error() {
    let p = LocalProvider::new().unwrap();
    let s = sandbox(&p, "a").await;
    let dir = std::path::PathBuf::from(s.workdir());
    s.write_file("f", b"x").await.unwrap();
    s.teardown().await.unwrap();
    s.teardown().await.unwrap();
    assert!(!dir.exists());
    let err = s.exec(req("true", 5)).await.unwrap_err();
    assert!(err.is_infra(), "{err}");
}

/// A sandbox none of whose processes ran (its files written by this process's tools only) is
/// emptied at teardown and its directory renamed into place for the next sandbox: on an ext4
/// without a journal that costs less than a `rmdir` and a `mkdir`. One in which a process ran
/// is removed, never reused.
#[tokio::test]
async fn a_directory_no_process_used_is_emptied_and_reused_and_no_other() {
    use std::os::unix::fs::MetadataExt;
    let p = LocalProvider::new().unwrap();
    let spares = || {
        std::fs::read_dir(p.root())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".spare-"))
            .count()
    };
    let a = sandbox(&p, "a").await;
    let inode = std::fs::metadata(a.workdir()).unwrap().ino();
    a.write_file("sub/answer.txt", b"42").await.unwrap();
    a.write_file("verdict.txt", b"1").await.unwrap();
    a.teardown().await.unwrap();
    assert!(!Path::new(a.workdir()).exists());
    assert_eq!(spares(), 1, "kept");

    let b = sandbox(&p, "b").await;
    assert_eq!(spares(), 0);
    let meta = std::fs::metadata(b.workdir()).unwrap();
    assert_eq!(meta.ino(), inode, "a's directory, renamed into place");
    assert_eq!(
        std::fs::read_dir(b.workdir()).unwrap().count(),
        0,
        "emptied"
    );
    let out = b.exec(req("echo hi > note && cat note", 5)).await.unwrap();
    assert_eq!(out.output.trim(), "hi");
    b.teardown().await.unwrap();
    assert!(!Path::new(b.workdir()).exists());
    assert_eq!(spares(), 0, "a directory a process ran in is removed");

    // A verifier's lone small file (emptied on the calling thread when confined).
    let c = sandbox(&p, "c").await;
    c.write_file("verdict.txt", b"1").await.unwrap();
    assert_eq!(c.read_file("verdict.txt").await.unwrap(), b"1");
    c.teardown().await.unwrap();
    assert!(!Path::new(c.workdir()).exists());
    assert_eq!(spares(), 1, "kept");
    let d = sandbox(&p, "d").await;
    assert_eq!(std::fs::read_dir(d.workdir()).unwrap().count(), 0);
}

/// A local sandbox that cannot scan its files from this process, as Docker and ssh cannot:
/// the tripwires run their scans as `find` commands in it.
struct FindsInside(Arc<dyn Sandbox>);

#[async_trait::async_trait]
impl Sandbox for FindsInside {
    fn task_id(&self) -> &str {
        self.0.task_id()
    }
    fn workdir(&self) -> &str {
        self.0.workdir()
    }
    async fn exec(&self, request: ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.0.exec(request).await
    }
    async fn read_file(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        self.0.read_file(path).await
    }
    async fn write_file(&self, path: &str, bytes: &[u8]) -> Result<bool, SandboxError> {
        self.0.write_file(path, bytes).await
    }
    async fn upload_file(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        self.0.upload_file(local, remote).await
    }
    async fn upload_dir(&self, local: &Path, remote: &str) -> Result<Transfer, SandboxError> {
        self.0.upload_dir(local, remote).await
    }
    async fn download_file(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        self.0.download_file(remote, local).await
    }
    async fn download_dir(&self, remote: &str, local: &Path) -> Result<Transfer, SandboxError> {
        self.0.download_dir(remote, local).await
    }
    async fn teardown(&self) -> Result<(), SandboxError> {
        self.0.teardown().await
    }
}

/// A protected file outside the sandbox and the wires armed in the second after it was
/// written (changes count from the second the wires are armed).
async fn protected_file_and_armed_wires() -> (tempfile::TempDir, SandboxSpec, Armed) {
    let oracle = tempfile::tempdir().unwrap();
    std::fs::write(oracle.path().join("answer.txt"), "42").unwrap();
    let spec = SandboxSpec::default().protect(oracle.path().display().to_string());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    tokio::time::sleep(Duration::from_nanos(
        1_000_000_000 - u64::from(now.subsec_nanos()),
    ))
    .await;
    (oracle, spec, Armed::now())
}

/// What an agent does to game each file wire: rewrites the protected answer, plants a hook
/// deep in its home and a module shadow at its top.
async fn tamper(s: &dyn Sandbox, oracle: &Path) {
    let agent = format!(
        "echo 0 > '{}'; mkdir -p pkg/deep; touch pkg/deep/sitecustomize.py json.py",
        oracle.join("answer.txt").display()
    );
    assert_eq!(s.exec(req(&agent, 10)).await.unwrap().exit_code, 0);
}

/// The tripwires' file scans — the paths the spec protects, hooks anywhere in the home, module
/// shadows at its top — run as one check and each fires its wire, whether the local backend
/// walks them on one file-system thread or they run as `find` in the sandbox (the other
/// backends' way): both find the same. An untouched sandbox fires none.
#[tokio::test]
async fn the_tripwire_scans_find_protected_changes_hooks_and_shadows_walked_or_with_find() {
    let (oracle, spec, armed) = protected_file_and_armed_wires().await;
    let p = LocalProvider::new().unwrap();
    let walked = p.create("walked", &spec).await.unwrap();
    let with_find = FindsInside(p.create("with-find", &spec).await.unwrap());
    for s in [&*walked, &with_find as &dyn Sandbox] {
        let clean = inspect(s, &spec, &armed, &[]).await.unwrap();
        assert!(clean.is_empty(), "an untouched sandbox fired {clean:?}");
    }
    tamper(&*walked, oracle.path()).await;
    let wires = inspect(&*walked, &spec, &armed, &[]).await.unwrap();
    let answer = oracle.path().join("answer.txt").display().to_string();
    assert_eq!(wires.len(), 2, "{wires:?}");
    assert!(
        wires[0].starts_with("1 path(s) the verifier relies on changed")
            && wires[0].ends_with(&answer),
        "{wires:?}"
    );
    assert!(
        wires[1].starts_with("2 Python/pytest hook or module shadow(s)")
            && wires[1].contains("pkg/deep/sitecustomize.py")
            && wires[1].contains("/json.py"),
        "{wires:?}"
    );
    tamper(&with_find, oracle.path()).await;
    let found = inspect(&with_find, &spec, &armed, &[]).await.unwrap();
    let home = |w: &str, s: &dyn Sandbox| w.replace(s.workdir(), "HOME");
    assert_eq!(
        found
            .iter()
            .map(|w| home(w, &with_find))
            .collect::<Vec<_>>(),
        wires.iter().map(|w| home(w, &*walked)).collect::<Vec<_>>(),
        "find found otherwise than the walk"
    );
}

/// A sandbox without `find` cannot be scanned: one WARN line says so for the whole check, and
/// its scans find nothing (the rollout is not failed for it).
#[tokio::test]
async fn without_find_the_scans_find_nothing_and_say_so_once() {
    let (oracle, spec, armed) = protected_file_and_armed_wires().await;
    // A `PATH` with bash alone.
    let bin = tempfile::tempdir().unwrap();
    let bash = ["/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|b| Path::new(b).exists())
        .expect("bash in /usr/bin or /bin");
    std::os::unix::fs::symlink(bash, bin.path().join("bash")).unwrap();
    let p = LocalProvider::new()
        .unwrap()
        .with_env(vec![format!("PATH={}", bin.path().display())]);
    let s = FindsInside(p.create("t", &spec).await.unwrap());
    let agent = format!(
        "echo 0 > '{}'; echo > json.py",
        oracle.path().join("answer.txt").display()
    );
    assert_eq!(s.exec(req(&agent, 10)).await.unwrap().exit_code, 0);
    let logs = Logs::default();
    let wires = {
        let _guard = logs.capture();
        inspect(&s, &spec, &armed, &[]).await.unwrap()
    };
    assert!(wires.is_empty(), "{wires:?}");
    let warned = logs.lines_with("no usable `find`");
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("WARN"), "{warned:?}");
}

#[tokio::test]
async fn dropping_the_provider_removes_every_task_directory() {
    let p = LocalProvider::new().unwrap();
    let root = p.root().to_owned();
    let s = sandbox(&p, "a").await;
    s.write_file("f", b"x").await.unwrap();
    drop(s);
    drop(p);
    assert!(!root.exists());
}

/// The shell keeps its working directory in a state file under `/dev/shm` (a file per sandbox
/// made and removed on the scratch directories' disk slowed every later file made there), in
/// a per-run directory that teardown empties and the provider removes.
#[tokio::test]
async fn the_shells_state_file_lives_in_dev_shm_and_goes_with_the_sandbox() {
    let p = LocalProvider::new().unwrap();
    let name = p.root().file_name().unwrap().to_owned();
    let state_root = std::path::Path::new("/dev/shm").join(&name);
    let s = sandbox(&p, "a").await;
    let out = s.exec(req("mkdir -p sub && cd sub", 10)).await.unwrap();
    assert_eq!(out.exit_code, 0, "{}", out.output);
    let pwd = s.exec(req("pwd", 10)).await.unwrap();
    assert!(
        pwd.output.trim_end().ends_with("/task-a/sub"),
        "{}",
        pwd.output
    );
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let state = names(&state_root);
    assert_eq!(state.len(), 1, "{state:?}");
    assert!(state[0].starts_with(".task-a.hermes-cwd-"), "{state:?}");
    let mut beside = names(p.root());
    beside.sort();
    assert_eq!(
        beside,
        [".owner", "task-a"],
        "nothing beside the scratch directory but the run's owner file (the next run's reaper reads it)"
    );
    s.teardown().await.unwrap();
    assert!(names(&state_root).is_empty());
    drop(s);
    drop(p);
    assert!(!state_root.exists());
}

#[tokio::test]
async fn a_plain_program_that_cannot_be_started_runs_through_bash_and_says_so() {
    let logs = Logs::default();
    let _guard = logs.capture();
    // A program on PATH that looks like one (ELF magic, executable), so it is started
    // directly; the kernel refuses it (ENOEXEC), and the shell runs it and reports what bash
    // reports.
    let bin = tempfile::tempdir().unwrap();
    let bad = bin.path().join("notelf");
    std::fs::write(&bad, b"\x7fELF not really").unwrap();
    std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("PATH={}:/usr/bin:/bin", bin.path().display());
    let provider = LocalProvider::new().unwrap().with_env(vec![path]);
    let sb = sandbox(&provider, "bad-elf").await;
    for _ in 0..2 {
        let out = sb.exec(req("notelf", 10)).await.unwrap();
        assert_eq!(out.exit_code, 126, "{}", out.output);
        assert!(
            out.output.contains("cannot execute binary file"),
            "{}",
            out.output
        );
    }
    let lines = logs.lines_with("without a shell");
    assert_eq!(
        lines.len(),
        1,
        "one warning for two failed starts: {lines:?}"
    );
    assert!(
        lines[0].contains("WARN") && lines[0].contains("notelf"),
        "{}",
        lines[0]
    );
}
