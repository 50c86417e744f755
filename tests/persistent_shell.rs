//! The persistent shell of both backends (local scratch dir and real Docker): commands share
//! one long-lived shell, a shell that dies is replaced transparently (the working directory
//! kept), a command reading stdin gets end of file rather than the framing channel, output
//! that contains the framing bytes is passed through verbatim and cannot forge a report,
//! `reset_processes` kills the shell and what commands left running, and `exec_one_shot`
//! runs outside the persistent shell. A command can write frames into its own shell's stdin
//! (`/proc/$$/fd/0`); one that holds the shell cannot make the tripwire checks pass. A
//! command that is one plain program is `exec`ed by its subshell, with the same results. On
//! the local backend the first command of a sandbox (or after `reset_processes`) runs in a
//! one-shot wrapper (one plain program `exec`ed by it) instead of starting the shell for it, and a
//! command of literal words only is started by the framework itself, with the shell's results.
//! A command sees the locale and `IFS` of a fresh bash, not the ones the shell reads frames in.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::docker::{require_docker, settings};
use hermes_runtime::sandbox::{
    DockerProvider, ExecRequest, LocalProvider, Sandbox, SandboxProvider, SandboxSpec,
};

const TEST_LIMIT: Duration = Duration::from_secs(180);

fn req(command: &str) -> ExecRequest {
    ExecRequest::new(command, Duration::from_secs(30))
}

async fn run(s: &dyn Sandbox, command: &str) -> (i32, String) {
    let out = s.exec(req(command)).await.expect("exec");
    (out.exit_code, out.output)
}

/// The persistent shell's pid (`$$` in a command is the shell, commands run in subshells).
/// Runs a first command, so that the next ones share the persistent shell: on the local
/// backend a sandbox's first command runs one-shot (a shell started for one command costs more
/// than a `bash -c`), and the shell starts with the second.
async fn start_the_shell(s: &dyn Sandbox) {
    assert_eq!(run(s, "cd .").await.0, 0);
}

async fn shell_pid(s: &dyn Sandbox) -> String {
    let (code, out) = run(s, "echo $$").await;
    assert_eq!(code, 0, "{out}");
    out.trim().to_owned()
}

async fn with_backend<F, Fut>(backend: &str, body: F)
where
    F: FnOnce(Arc<dyn Sandbox>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let p: Arc<dyn SandboxProvider> = match backend {
        "local" => Arc::new(LocalProvider::new().expect("local provider")),
        _ => {
            require_docker();
            Arc::new(
                DockerProvider::connect(settings())
                    .await
                    .expect("docker provider"),
            )
        }
    };
    let s = p
        .create("shell", &SandboxSpec::default())
        .await
        .expect("create sandbox");
    tokio::time::timeout(TEST_LIMIT, body(s.clone()))
        .await
        .expect("the test exceeded its time limit");
    s.teardown().await.expect("teardown");
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
    commands_share_one_shell,
    a_shell_that_dies_mid_rollout_is_replaced_and_the_cwd_kept,
    a_command_reading_stdin_gets_end_of_file,
    output_containing_the_framing_bytes_cannot_confuse_the_framing,
    reset_processes_kills_the_shell_and_what_commands_left_running,
    one_shot_commands_run_outside_the_persistent_shell,
    a_daemons_later_output_does_not_reach_the_next_call,
    a_frame_queued_in_the_shells_own_stdin_cannot_pass_the_tripwires,
    a_plain_program_is_execed_with_the_results_bash_would_give,
    a_shorter_cwd_written_over_a_longer_one_is_read_whole,
    a_command_sees_the_locale_and_field_splitting_a_fresh_bash_has,
);

async fn commands_share_one_shell(s: Arc<dyn Sandbox>) {
    start_the_shell(&*s).await;
    let first = shell_pid(&*s).await;
    assert_eq!(
        shell_pid(&*s).await,
        first,
        "a second command ran in another shell"
    );
    // Variables do not persist (each command is its own subshell), only the cwd does.
    run(&*s, "export X=1; mkdir -p sub; cd sub").await;
    let (_, out) = run(&*s, "echo \"[$X]\"; basename \"$PWD\"").await;
    assert_eq!(out, "[]\nsub\n");
}

/// The state file that carries the working directory is written over, not truncated: a
/// shorter path after a longer one must not pick up the longer one's tail.
async fn a_shorter_cwd_written_over_a_longer_one_is_read_whole(s: Arc<dyn Sandbox>) {
    let long = "a-rather-long-directory-name/with/several/levels/below-it";
    run(&*s, &format!("mkdir -p {long} short; cd {long}")).await;
    let (_, out) = run(&*s, "pwd").await;
    assert!(out.trim().ends_with(long), "{out}");
    let (_, home) = run(&*s, "cd ../../../../.. && pwd").await;
    run(&*s, "cd short").await;
    let (code, out) = run(&*s, "pwd; ls -d ../short").await;
    assert_eq!(code, 0, "the cwd is a real directory: {out}");
    assert_eq!(out, format!("{}/short\n../short\n", home.trim()));
    run(&*s, "cd /").await;
    assert_eq!(run(&*s, "pwd").await, (0, "/\n".to_owned()));
}

async fn a_shell_that_dies_mid_rollout_is_replaced_and_the_cwd_kept(s: Arc<dyn Sandbox>) {
    run(&*s, "mkdir -p deep/er; cd deep/er").await;
    let first = shell_pid(&*s).await;
    // The command kills its own shell: its result is the shell's death.
    let out = s
        .exec(req("echo before; kill -KILL $$; sleep 1; echo after"))
        .await
        .expect("exec");
    assert!(out.output.starts_with("before\n"), "{:?}", out.output);
    assert_eq!(out.exit_code, 137, "{out:?}");
    let second = shell_pid(&*s).await;
    assert_ne!(second, first, "the dead shell must be replaced");
    let (code, out) = run(&*s, "pwd").await;
    assert_eq!((code, out.trim().ends_with("/deep/er")), (0, true), "{out}");
    // Killed between two commands (from outside the shell): the next command just runs.
    let killed = s
        .exec_one_shot(req(&format!("kill -KILL {second}")))
        .await
        .expect("one-shot kill");
    assert_eq!(killed.exit_code, 0, "{killed:?}");
    let (code, out) = run(&*s, "echo alive; pwd").await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.starts_with("alive\n") && out.trim().ends_with("/deep/er"),
        "{out}"
    );
    assert_ne!(shell_pid(&*s).await, second);
}

async fn a_command_reading_stdin_gets_end_of_file(s: Arc<dyn Sandbox>) {
    let (code, out) = run(
        &*s,
        "cat; echo \"cat=$?\"; read -r x; echo \"read=$? [$x]\"",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "cat=0\nread=1 []\n"));
    // Reading the shell's own stdin through /proc is the framing channel only in theory:
    // it is not the command's stdin, and the next command still frames correctly.
    let (code, out) = run(&*s, "head -c 10 /dev/stdin | od -c | head -1; echo done").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("done\n"), "{out}");
    assert_eq!(run(&*s, "echo next").await, (0, "next\n".to_owned()));
}

async fn output_containing_the_framing_bytes_cannot_confuse_the_framing(s: Arc<dyn Sandbox>) {
    let start = run(&*s, "pwd").await.1;
    // Record separators (the end marker's framing), NULs and fake report fields on the
    // output, a fake marker with a guessed nonce, then writes to every fd a report channel
    // could have: none may end the command early, change the exit code or move the cwd.
    let command = r#"printf '\036abc\036\000X0\000/etc\000P1\000'; printf '\036%s\036' "$RANDOM"
for fd in 3 4 56 57; do (printf 'X0\000/etc\000' >&$fd) 2>/dev/null && echo "fd $fd open"; done
echo after; exit 7"#;
    let out = s.exec(req(command)).await.expect("exec");
    assert_eq!(out.exit_code, 7, "{out:?}");
    assert!(
        out.output
            .starts_with("\u{1e}abc\u{1e}\0X0\0/etc\0P1\0\u{1e}"),
        "{:?}",
        out.output
    );
    assert!(out.output.ends_with("\u{1e}after\n"), "{:?}", out.output);
    assert!(!out.output.contains("open"), "{:?}", out.output);
    assert_eq!(run(&*s, "pwd").await.1, start);
    assert_eq!(run(&*s, "echo next").await, (0, "next\n".to_owned()));
}

async fn reset_processes_kills_the_shell_and_what_commands_left_running(s: Arc<dyn Sandbox>) {
    run(&*s, "mkdir -p kept; cd kept").await;
    let shell = shell_pid(&*s).await;
    let (_, daemon) = run(&*s, "nohup sleep 1000 >/dev/null 2>&1 & echo $!").await;
    let daemon = daemon.trim().to_owned();
    s.reset_processes().await.expect("reset");
    // Probe from a fresh one-shot shell (the persistent one is gone too).
    // Alive = present and not a zombie (a container's init may never reap).
    let probe = format!(
        "for p in {shell} {daemon}; do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null) && \
         [ \"$s\" != Z ] && echo \"$p alive\"; done; true"
    );
    let mut alive = String::new();
    for _ in 0..50 {
        alive = s.exec_one_shot(req(&probe)).await.expect("probe").output;
        if alive.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !alive.is_empty() {
        let ps = "for d in /proc/[0-9]*; do echo \"${d#/proc/} $(cut -d' ' -f3-5 $d/stat) $(tr '\\0' ' ' <$d/cmdline | head -c 80)\"; done";
        let ps = s.exec_one_shot(req(ps)).await.expect("ps").output;
        panic!("reset_processes left processes running: {alive}\n{ps}");
    }
    let (code, out) = run(&*s, "pwd").await;
    assert_eq!((code, out.trim().ends_with("/kept")), (0, true), "{out}");
    assert_ne!(shell_pid(&*s).await, shell);
}

async fn one_shot_commands_run_outside_the_persistent_shell(s: Arc<dyn Sandbox>) {
    start_the_shell(&*s).await;
    let shell = shell_pid(&*s).await;
    let one = s
        .exec_one_shot(req("echo $$; exit 4"))
        .await
        .expect("one-shot");
    assert_eq!(one.exit_code, 4);
    assert_ne!(one.output.trim(), shell);
    assert_eq!(
        shell_pid(&*s).await,
        shell,
        "the persistent shell is untouched"
    );
}

async fn a_daemons_later_output_does_not_reach_the_next_call(s: Arc<dyn Sandbox>) {
    let (code, _) = run(&*s, "(sleep 0.3; echo late) &").await;
    assert_eq!(code, 0);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(run(&*s, "echo next").await, (0, "next\n".to_owned()));
}

async fn a_frame_queued_in_the_shells_own_stdin_cannot_pass_the_tripwires(s: Arc<dyn Sandbox>) {
    use hermes_runtime::sandbox::tripwire::{inspect, Armed};
    let armed = Armed::now();
    start_the_shell(&*s).await;
    // The frame runs as soon as this command ends and holds the shell, printing nothing: the
    // checks that run in the shell would wait behind it and see only its output.
    // It names its pid and becomes `sleep 300` in place, so the wait below can see the exec done
    // (a marker file alone can be seen while the frame is still a copy of the shell).
    let queue = r#"printf '%s\0%s\0%s\0' "$PWD" 'echo $BASHPID > ~/jam; exec sleep 300' n0 > /proc/$$/fd/0; echo queued"#;
    assert_eq!(run(&*s, queue).await, (0, "queued\n".to_owned()));
    let mut jammed = false;
    for _ in 0..50 {
        let seen = s
            .exec_one_shot(req(
                r#"p=$(cat ~/jam 2>/dev/null) && [ "$(tr '\0' ' ' < /proc/$p/cmdline)" = 'sleep 300 ' ] && echo yes"#,
            ))
            .await
            .expect("one-shot");
        if seen.output.trim() == "yes" {
            jammed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        jammed,
        "the queued frame did not run: the shell's stdin was not writable"
    );
    match inspect(&*s, &SandboxSpec::default(), &armed, &[]).await {
        Ok(wires) => assert!(
            wires
                .iter()
                .any(|w| w.contains("outlived the agent phase") && w.contains("sleep 300")),
            "the held shell passed the tripwires: {wires:?}"
        ),
        Err(e) => assert!(e.to_string().contains("did not finish within 30 s"), "{e}"),
    }
}

async fn a_plain_program_is_execed_with_the_results_bash_would_give(s: Arc<dyn Sandbox>) {
    run(&*s, "mkdir -p d; cd d").await;
    let shell = shell_pid(&*s).await;
    // `cat` reading its own stat line: exec'd, it is the shell's child and leads its own
    // process group (forked from the subshell, its parent would be the subshell).
    // (Quoted: a command of literal words only starts without a shell on the local backend.)
    let (code, stat) = run(&*s, "cat '/proc/self/stat'").await;
    assert_eq!(code, 0, "{stat}");
    assert_eq!(
        parent_and_group(&stat),
        (shell.clone(), pid_of(&stat)),
        "cat was not exec'd by its subshell: {stat}"
    );
    // Redirections, failures and a name that is not a program behave as in bash.
    assert_eq!(run(&*s, "seq 1 3 > out.txt").await, (0, String::new()));
    assert_eq!(run(&*s, "cat out.txt").await, (0, "1\n2\n3\n".to_owned()));
    let (code, out) = run(&*s, "cat missing.txt 2>&1").await;
    assert_eq!(
        (code, out.as_str()),
        (1, "cat: missing.txt: No such file or directory\n")
    );
    let (code, out) = run(&*s, "no-such-program-here x").await;
    assert_eq!(code, 127, "{out}");
    assert!(
        out.contains("no-such-program-here: command not found"),
        "{out}"
    );
    let (code, out) = run(&*s, "cat > /no/such/dir/f").await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("/no/such/dir/f: No such file or directory"),
        "{out}"
    );
    // A long command with line breaks and multibyte text goes through the framing intact.
    let text = "h\u{e9}llo \\ w\u{1e}rld\n".repeat(400);
    let (code, out) = run(&*s, &format!("cat <<'EOF'\n{text}EOF")).await;
    assert_eq!((code, out == text), (0, true), "{out:?}");
    // The working directory is still the one the earlier `cd` left.
    let (code, out) = run(&*s, "pwd").await;
    assert_eq!((code, out.trim().ends_with("/d")), (0, true), "{out}");
}

/// The shell reads its frames in the C locale with an empty `IFS`; the command must not see
/// either: its locale (multibyte lengths), `IFS` and `LC_ALL` are those of a fresh `bash -c`.
async fn a_command_sees_the_locale_and_field_splitting_a_fresh_bash_has(s: Arc<dyn Sandbox>) {
    let probe = r#"s=$(printf '\303\251'); read -r a b <<< " x  y "; printf '%s %q %s [%s]\n' "${#s}" "$IFS" "${LC_ALL-unset}" "$b""#;
    let persistent = run(&*s, probe).await;
    let fresh = s.exec_one_shot(req(probe)).await.expect("one-shot exec");
    assert_eq!(persistent, (fresh.exit_code, fresh.output.clone()));
    assert!(
        persistent.1.ends_with(" $' \\t\\n' unset [y]\n"),
        "{persistent:?}"
    );
    let (_, lang) = run(&*s, "echo \"$LANG\"").await;
    if lang.trim_end().ends_with("UTF-8") {
        assert!(
            persistent.1.starts_with("1 "),
            "{lang}: é is one character: {persistent:?}"
        );
    }
}

/// The pid of a `/proc/self/stat` line.
fn pid_of(stat: &str) -> String {
    stat.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `(parent pid, process group)` from a `/proc/self/stat` line.
fn parent_and_group(stat: &str) -> (String, String) {
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let get = |i: usize| fields.get(i).copied().unwrap_or_default().to_owned();
    (get(1), get(2))
}

/// Local backend: the first command of a sandbox, and the first after `reset_processes` (a
/// verifier's lone `cat`), runs one-shot; a plain program is `exec`ed by its wrapper: this
/// process is its parent and it leads its own process group. Exit codes, bash's "command not
/// found", the preamble and the working directory are as in the shell; the next command
/// starts the persistent shell, whose plain programs are `exec`ed by its subshells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_a_first_command_runs_one_shot_and_the_next_command_starts_the_shell() {
    with_backend("local", |s| async move {
        let me = std::process::id().to_string();
        // Quoted, so that the command is not one this process starts itself.
        let (code, stat) = run(&*s, "cat '/proc/self/stat'").await;
        let pid = pid_of(&stat);
        assert_eq!(code, 0, "{stat}");
        assert_eq!(parent_and_group(&stat), (me.clone(), pid), "{stat}");
        s.reset_processes().await.expect("reset");
        let (code, out) = run(&*s, "ls '/no/such/path'").await;
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("No such file or directory"), "{out}");
        s.reset_processes().await.expect("reset");
        let (code, out) = run(&*s, "no-such-program-here x").await;
        assert_eq!(code, 127, "{out}");
        assert!(out.contains("command not found"), "{out}");
        s.reset_processes().await.expect("reset");
        // A first command that needs a shell (a builtin, a redirection, `;`) runs in a one-shot
        // `bash -c` too: no subshell, and the working directory it leaves is kept.
        let (code, out) = run(
            &*s,
            "mkdir -p sub; cd sub; [ $$ = $BASHPID ] && echo one-shot",
        )
        .await;
        assert_eq!((code, out.as_str()), (0, "one-shot\n"));
        assert!(run(&*s, "pwd").await.1.trim_end().ends_with("/sub"));
        run(&*s, "cd ..").await;
        s.reset_processes().await.expect("reset");
        let request = req("cat /proc/self/environ").with_preamble("export HERMES_PREAMBLE_RAN=1");
        let out = s.exec(request).await.expect("exec");
        assert_eq!(out.exit_code, 0, "{}", out.output);
        assert!(
            out.output.contains("HERMES_PREAMBLE_RAN=1"),
            "{}",
            out.output
        );
        // The sandbox's working directory is still its home, and the shell starts now.
        let (code, home) = run(&*s, "pwd").await;
        assert_eq!(code, 0, "{home}");
        let shell = shell_pid(&*s).await;
        assert_eq!(
            run(&*s, "[ $$ = $BASHPID ] || echo subshell").await,
            (0, "subshell\n".to_owned()),
            "a command of the running shell runs in its subshell"
        );
        assert_ne!(shell, me);
        let (code, stat) = run(&*s, "cat '/proc/self/stat'").await;
        assert_eq!(code, 0, "{stat}");
        assert_eq!(parent_and_group(&stat).0, shell, "{stat}");
        assert_eq!(run(&*s, "pwd").await, (0, home));
    })
    .await;
}

/// Local backend: a command of literal words only (`cat notes.txt`, `wc -c ~/f`) is started
/// by this process itself, with or without a running shell, in a process group of its own:
/// its output, exit code, environment and working directory are what the shell gives the same
/// command quoted (which takes the shell path); a timeout kills it, a daemon it leaves does not
/// hold the call, and the verifier's clean one-shot commands start the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_a_command_of_literal_words_starts_without_a_shell_with_the_shells_results() {
    with_backend("local", |s| async move {
        let me = std::process::id().to_string();
        run(&*s, "mkdir -p d; cd d; printf abc > ~/f").await;
        let shell = shell_pid(&*s).await;
        let (code, stat) = run(&*s, "cat /proc/self/stat").await;
        let pid = pid_of(&stat);
        assert_eq!(
            (code, parent_and_group(&stat)),
            (0, (me.clone(), pid)),
            "{stat}"
        );
        let sorted_lines = |(code, out): (i32, String)| {
            let mut lines: Vec<String> = out.split(['\n', '\0']).map(String::from).collect();
            lines.sort();
            (code, lines)
        };
        for (direct, through_the_shell) in [
            ("cat /proc/self/environ", "cat '/proc/self/environ'"),
            ("env -u X_NOT_SET", "env -u 'X_NOT_SET'"),
            ("cat missing.txt", "cat 'missing.txt'"),
            ("wc -c ~/f", "wc -c \"$HOME/f\""),
            ("ls -a .", "ls -a '.'"),
            ("ls /no/such/path", "ls '/no/such/path'"),
            ("sh -c exit", "sh -c 'exit'"),
        ] {
            assert_eq!(
                sorted_lines(run(&*s, direct).await),
                sorted_lines(run(&*s, through_the_shell).await),
                "{direct}"
            );
        }
        assert_eq!(
            run(&*s, "wc -c ~/f").await.1.split_whitespace().next(),
            Some("3")
        );
        // The shell is still the one started above, its working directory unchanged.
        assert_eq!(shell_pid(&*s).await, shell);
        assert!(run(&*s, "pwd").await.1.trim_end().ends_with("/d"));
        // A timeout kills the program's group; a daemon it leaves holding the output does
        // not hold the call beyond the drain.
        let started = std::time::Instant::now();
        let out = s
            .exec(ExecRequest::new("sleep 20", Duration::from_secs(1)))
            .await
            .expect("exec");
        assert_eq!(
            (out.exit_code, out.timed_out),
            (124, true),
            "{}",
            out.output
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let started = std::time::Instant::now();
        let (code, out) = run(&*s, "setsid -f sleep 20").await;
        assert_eq!(code, 0, "{out}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        s.reset_processes().await.expect("reset");
        // The verifier's command: one-shot, from the home, with the clean PATH.
        let verifier = |command: &str| {
            req(command)
                .with_preamble(hermes_runtime::sandbox::CLEAN_PREAMBLE)
                .with_workdir("~")
        };
        let out = s
            .exec_one_shot(verifier("cat /proc/self/stat"))
            .await
            .expect("exec");
        assert_eq!(parent_and_group(&out.output).0, me, "{}", out.output);
        let one_shot = |command: &'static str| {
            let s = s.clone();
            async move {
                let out = s.exec_one_shot(verifier(command)).await.expect("exec");
                sorted_lines((out.exit_code, out.output))
            }
        };
        let direct = one_shot("env -u X_NOT_SET").await;
        assert_eq!(direct, one_shot("env -u 'X_NOT_SET'").await);
        assert!(
            direct.1.iter().any(|l| l == "PYTHONNOUSERSITE=1"),
            "{direct:?}"
        );
    })
    .await;
}
