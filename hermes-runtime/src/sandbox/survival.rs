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
        checks.push_str(&format!(
            "  [ \"/proc/$1/exe\" -ef {} ] && case \"$sa\" in {}) return 0;; esac\n",
            shell_quote(&s.exe),
            s.shell_pattern()
        ));
    }
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
owned() {{ q=$1; while [ -n "$q" ] && [ "$q" -gt 1 ]; do stat_of "$q" || return 1; case "$own" in *" $q:$st "*) return 0;; esac; q=$pp; done; return 1; }}
{survivor}
"#,
        own = own.join(" ")
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

    #[test]
    fn the_shell_pattern_quotes_everything_but_the_stars() {
        assert_eq!(
            survivor("python3 -m http.server *").shell_pattern(),
            "'python3 -m http.server '*''"
        );
        assert_eq!(survivor("it's ?[x]*").shell_pattern(), r"'it'\''s ?[x]'*''");
    }
}
