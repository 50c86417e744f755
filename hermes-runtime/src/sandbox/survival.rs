//! What may outlive the agent phase, as the pre-verification kill is told it: facts the model
//! cannot forge. The `process` tool's own background processes are named by what this process
//! recorded when it started them (pid and kernel start time), never by files in the sandbox;
//! the services a task declares ([`Survivor`]) are recognised by the kernel's view of each
//! process (the file it executes and its command line).

/// A process a task allows to outlive the agent phase (a service the task asks the agent to
/// leave running, e.g. `python3 -m http.server`). A process survives the pre-verification kill
/// when the file it executes is `exe` (the kernel's `/proc/PID/exe` and `exe` are the same
/// file, links followed) and its command line (its arguments joined by single spaces) matches
/// `command`, where `*` stands for any characters and everything else is literal. Each process
/// is judged on its own: a survivor's children are killed like any other leftover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survivor {
    /// The executable's path in the sandbox (a link to it works too).
    pub exe: String,
    /// The command-line pattern (`*` = any characters).
    pub command: String,
}

impl Survivor {
    /// The `exe` that stands for "any executable, while it holds a listening socket" (TCP or
    /// TCP6 in state LISTEN, or a listening Unix socket, read from `/proc/net` and the
    /// process's own descriptors): a service, whatever program serves it
    /// ([`super::SandboxSpec::keep_services`]).
    pub const LISTENING: &'static str = "@listening";

    /// True when `exe` is [`Survivor::LISTENING`].
    pub fn any_listener(&self) -> bool {
        self.exe == Self::LISTENING
    }

    /// True when `cmdline` (arguments joined by single spaces) matches the pattern.
    pub fn command_matches(&self, cmdline: &str) -> bool {
        wildcard_match(&self.command, cmdline)
    }

    /// The pattern as a bash `case` pattern: literal runs single-quoted, each `*` bare.
    pub fn shell_pattern(&self) -> String {
        self.command
            .split('*')
            .map(shell_quote)
            .collect::<Vec<_>>()
            .join("*")
    }
}

/// `text` single-quoted for bash (empty: `''`).
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// True when `text` matches `pattern`, in which `*` matches any run of characters (none
/// included) and every other character itself.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let tail: Vec<&str> = parts.collect();
    let Some((last, middle)) = tail.split_last() else {
        // No `*`: the whole text is the literal.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A background process the `process` tool started, as this process recorded it when the
/// tool's own start command reported it: its pid as the sandbox sees it and its start time in
/// clock ticks since boot (`/proc/PID/stat` field 22). The pair names one process: a later
/// process given the same pid starts at another time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnProcess {
    /// Its pid inside the sandbox.
    pub pid: u32,
    /// Its kernel start time, clock ticks since boot.
    pub started: u64,
}

/// What the pre-verification kill is told: which processes are the `process` tool's own
/// (killed without a wire, with everything below them) and which may survive. Everything else
/// the agent left is killed and fires the process wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftoverRules {
    /// The `process` tool's background processes, from this process's own records.
    pub own: Vec<OwnProcess>,
    /// The services the item's [`super::SandboxSpec`] allows to keep running.
    pub survivors: Vec<Survivor>,
}

/// What the pre-verification kill did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftoverKill {
    /// `pid command` of each killed process that is neither one of the `process` tool's own nor
    /// below one: what fires the process wire.
    pub leftovers: Vec<String>,
    /// How many of the tool's own processes, and processes below them, were killed.
    pub own: usize,
    /// `pid command` of each declared survivor left running.
    pub survivors: Vec<String>,
}

/// `lst`: the inodes of the listening sockets (TCP and TCP6 state `0A`, Unix flag
/// `00010000`); `listens PID`: true when one of PID's descriptors is a socket among them.
const LISTENS: &str = r#"lst=' '
for f in /proc/net/tcp /proc/net/tcp6; do while read -r _ _ _ s _ _ _ _ _ i _; do [ "$s" = 0A ] && lst="$lst$i "; done 2>/dev/null < "$f"; done
while read -r _ _ _ fl _ _ i _; do [ "$fl" = 00010000 ] && lst="$lst$i "; done 2>/dev/null < /proc/net/unix
listens() { local f k v; for f in /proc/$1/fdinfo/*; do [ -S "/proc/$1/fd/${f##*/}" ] || continue; while read -r k v _; do [ "$k" = ino: ] && case "$lst" in *" $v "*) return 0;; esac; done 2>/dev/null < "$f"; done; return 1; }
"#;

/// Shell functions (bash builtins only: the agent may have replaced any program on `PATH`)
/// that tell the `process` tool's own processes and the declared survivors from the rest:
/// `field PID KEY` sets `hv` to a `/proc/PID/status` value; `stat_of PID` sets `pp`, `sg` and
/// `st` (parent, process group, start time) from `/proc/PID/stat` and fails when it is gone;
/// `args_of PID` sets `sa` to its arguments joined by single spaces;
/// `owned PID` is true when PID or one of its ancestors is one of `own` (pid and start time
/// both equal, read now); `survivor PID` is true when PID executes one of the survivors' files
/// with a matching command line.
pub(crate) fn shell_functions(rules: &LeftoverRules) -> String {
    let own: Vec<String> = rules
        .own
        .iter()
        .map(|o| format!("{}:{}", o.pid, o.started))
        .collect();
    let mut checks = String::new();
    for s in &rules.survivors {
        if s.any_listener() {
            checks.push_str(&format!(
                "  listens \"$1\" && case \"$sa\" in {}) return 0;; esac\n",
                s.shell_pattern()
            ));
            continue;
        }
        checks.push_str(&format!(
            "  [ \"/proc/$1/exe\" -ef {} ] && case \"$sa\" in {}) return 0;; esac\n",
            shell_quote(&s.exe),
            s.shell_pattern()
        ));
    }
    let listening = if rules.survivors.iter().any(Survivor::any_listener) {
        LISTENS
    } else {
        ""
    };
    let survivor = if checks.is_empty() {
        "survivor() { return 1; }".to_owned()
    } else {
        format!("survivor() {{ args_of \"$1\"\n{checks}  return 1; }}")
    };
    format!(
        r#"own=' {own} '
field() {{ hv=; while read -r k v _; do [ "$k" = "$2:" ] && hv=$v; done 2>/dev/null < "/proc/$1/status"; }}
stat_of() {{ local IFS=' '; pp=; sg=; st=; read -r sl 2>/dev/null < "/proc/$1/stat" || return 1; sl=${{sl##*) }}; set -- $sl; pp=$2; sg=$3; st=${{20}}; [ -n "$st" ]; }}
args_of() {{ sa=; sx=; while IFS= read -r -d '' sx || [ -n "$sx" ]; do sa="$sa $sx"; sx=; done 2>/dev/null < "/proc/$1/cmdline"; sa=${{sa# }}; }}
{listening}owned() {{ q=$1; while [ -n "$q" ] && [ "$q" -gt 1 ]; do stat_of "$q" && [ "$st" -ge {first} ] || return 1; case "$own" in *" $q:$st "*) return 0;; esac; q=$pp; done; return 1; }}
{survivor}
"#,
        own = own.join(" "),
        // A process started before the first of them cannot be one or below one (a child
        // starts after its parent): the walk up stops there.
        first = rules
            .own
            .iter()
            .map(|o| o.started)
            .min()
            .unwrap_or(i64::MAX as u64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survivor(command: &str) -> Survivor {
        Survivor {
            exe: "/usr/bin/python3".into(),
            command: command.into(),
        }
    }

    #[test]
    fn a_command_pattern_is_literal_but_for_its_stars() {
        let s = survivor("python3 -m http.server *");
        assert!(s.command_matches("python3 -m http.server 8000"));
        assert!(s.command_matches("python3 -m http.server "));
        assert!(!s.command_matches("python3 -m http.server"));
        assert!(!s.command_matches("/usr/bin/python3 -m http.server 8000"));
        assert!(!s.command_matches("python3 -c evil -m http.server 8000"));
        let s = survivor("*python3 -m http.server *");
        assert!(s.command_matches("/usr/bin/python3 -m http.server 8000"));
        let s = survivor("a*b*a");
        assert!(s.command_matches("aba") && s.command_matches("a-b-b-a"));
        assert!(!s.command_matches("ab") && !s.command_matches("aXa"));
        let s = survivor("x?[y]");
        assert!(s.command_matches("x?[y]") && !s.command_matches("xz[y]"));
        assert!(survivor("*").command_matches("anything at all"));
        assert!(survivor("exact").command_matches("exact"));
        assert!(!survivor("exact").command_matches("exact "));
    }

    /// A child running `program args`, once its `exec` is done.
    fn started(program: &str, args: &[&str]) -> (std::process::Child, OwnProcess) {
        let child = std::process::Command::new(program)
            .args(args)
            .spawn()
            .expect(program);
        let pid = child.id();
        let name = program.rsplit('/').next().unwrap_or(program);
        for _ in 0..400 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == name {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let started = fields[19].parse().unwrap();
        (child, OwnProcess { pid, started })
    }

    /// Runs `command` after the shell functions of `rules` in bash; its output.
    fn in_bash(rules: &LeftoverRules, command: &str) -> String {
        let script = format!("{}{command}", shell_functions(rules));
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .expect("bash");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[test]
    fn the_shell_functions_tell_own_processes_and_survivors_by_the_kernels_facts() {
        let (mut sleep, record) = started("sleep", &["30", "1"]);
        let (mut shell, shell_record) = started("bash", &["-c", "sleep 31; :"]);
        let pid = record.pid;
        let check = format!("owned {pid} && echo owned; survivor {pid} && echo survivor");
        let own = |own: Vec<OwnProcess>, survivors: Vec<Survivor>| LeftoverRules { own, survivors };
        assert_eq!(in_bash(&own(vec![record], vec![]), &check), "owned");
        // Same pid, another start time: a later process given the pid is not the tool's.
        let stale = OwnProcess {
            started: record.started + 1,
            ..record
        };
        assert_eq!(in_bash(&own(vec![stale], vec![]), &check), "");
        assert_eq!(in_bash(&own(vec![], vec![]), &check), "");
        // Below a recorded process: the tool's too.
        let shell_pid = shell_record.pid;
        let below = format!(
            "for d in /proc/[0-9]*; do p=${{d#/proc/}}; [ \"$p\" != {shell_pid} ] && owned \"$p\" && stat_of \"$p\" && [ \"$pp\" = {shell_pid} ] && echo \"$p\"; done"
        );
        // The shell forks its `sleep` after its own exec: wait for it, up to 2 s.
        let mut child = String::new();
        for _ in 0..400 {
            child = in_bash(&own(vec![shell_record], vec![]), &below);
            if !child.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let child: i32 = child.parse().expect("the shell's child is found below it");
        assert_eq!(in_bash(&own(vec![], vec![]), &below), "");
        // SAFETY: kill(2) on the shell's child, found above.
        unsafe { libc::kill(child, libc::SIGKILL) };
        // Survivors: the executed file (a link to it too) and the command line must both match.
        let sleep_at = |exe: &str, command: &str| Survivor {
            exe: exe.into(),
            command: command.into(),
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let exe = exe.to_str().unwrap();
        for (survivor, expected) in [
            (sleep_at(exe, "sleep 30 1"), "survivor"),
            (sleep_at(exe, "sleep * 1"), "survivor"),
            (sleep_at(exe, "sleep 30"), ""),
            (sleep_at("/bin/sh", "sleep 30 1"), ""),
            (sleep_at("/nonexistent", "*"), ""),
        ] {
            let rules = own(vec![], vec![survivor.clone()]);
            assert_eq!(in_bash(&rules, &check), expected, "{survivor:?}");
        }
        let linked = tempfile::tempdir().unwrap();
        let link = linked.path().join("sleep-link");
        std::os::unix::fs::symlink(exe, &link).unwrap();
        let rules = own(vec![], vec![sleep_at(link.to_str().unwrap(), "sleep *")]);
        assert_eq!(in_bash(&rules, &check), "survivor");
        for child in [&mut sleep, &mut shell] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    #[test]
    fn the_shell_pattern_quotes_everything_but_the_stars() {
        assert_eq!(
            survivor("python3 -m http.server *").shell_pattern(),
            "'python3 -m http.server '*''"
        );
        assert_eq!(survivor("it's ?[x]*").shell_pattern(), r"'it'\''s ?[x]'*''");
    }
}
