//! The persistent shell both backends keep per sandbox: one long-lived `bash` reading framed
//! commands on its stdin, instead of one `bash -c` (or one Docker exec) per command.
//!
//! Each command runs in a forked subshell in its own process group (killed on timeout while
//! the shell lives on), with stdin from `/dev/null` (the framing channel is not the model's to
//! read) and stdout + stderr on the shell's stderr, the *output* channel. The shell's stdout,
//! the *report* channel, is written only by the shell itself; the command's process group
//! never holds it, so it cannot forge a report: `P<pgid>` once the command started, then
//! `X<exit code>` and the final working directory once it ended. Just before the exit record
//! the shell writes the command's end marker (a fresh nonce per command) on the output
//! channel, after everything the command printed. Only the working directory persists between
//! commands (the subshell writes it to a state file on exit, NUL-terminated, over the old
//! text rather than truncating the file: a truncation costs a filesystem flush per command on
//! ext4), as with the one-shot wrapper.
//!
//! The shell reads frames in the C locale (the lengths are bytes) with an empty `IFS`, both
//! set once: an `LC_ALL=C IFS=` prefix on each `read` makes bash re-derive its locale and
//! build a temporary environment twice per read, most of the shell's own work per command.
//! The subshell restores `IFS` and `LC_ALL` before
//! anything of the command runs.
//!
//! A command that is one external program with its arguments and redirections
//! ([`exec_word`]) is `exec`ed by its subshell instead of forked once more: bash never does that
//! itself for an `eval`ed command, and the subshell's exit trap (which records the working
//! directory) would prevent it anyway. Such a command cannot change the shell's working
//! directory, so the subshell records it just before the `exec`. The frame's nonce field then
//! carries the program's name (`<nonce>:<name>`); the subshell falls back to the usual path
//! when the name is not found on `PATH` (bash's own "command not found") or when the shell has
//! any function at all (imported from the environment: it could shadow the program). A
//! request's preamble (`ExecRequest::with_preamble`, the verifier's clean context) travels as
//! a field of its own and runs first, so the command after it can still be `exec`ed.

use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use tokio::time::{sleep_until, Instant};

use super::output::CappedOutput;
use super::proc_table::ticks_now;
use super::shell::{nonce, OutputSync};
use crate::sandbox::api::{ExecOutput, ExecRequest};
use crate::sandbox::error::SandboxError;

/// The shell's script (the output channel moves to fd 3, so job notices on fd 2 are dropped);
/// its arguments are candidate paths of the working-directory state file
/// (the first writable one is used; none writable = exit 97, and the caller runs one-shot).
const SCRIPT: &str = r#"exec 3>&2 2>/dev/null
set -m
trap : TERM INT HUP QUIT
for hermes_s in "$@"; do : >"$hermes_s" && break; hermes_s=; done
[ -n "$hermes_s" ] || exit 97
declare -F >"$hermes_s"
hermes_f=
IFS= read -r -d '' hermes_f <"$hermes_s"
printf -v hermes_q %q "$hermes_s"
hermes_t="{ pwd -P || pwd; printf '\\0'; } 1<>$hermes_q 2>/dev/null"
hermes_o=${LC_ALL+s$LC_ALL}
LC_ALL=C IFS=
while read -r -d '' hermes_c; do
  hermes_a= hermes_x=
  case $hermes_c in
  =*)
    hermes_l=${hermes_c#=}
    read -r -N "${hermes_l%%,*}" hermes_c || break
    hermes_l=${hermes_l#*,}
    read -r -N "${hermes_l%%,*}" hermes_a || break
    hermes_l=${hermes_l#*,}
    read -r -N "${hermes_l%%,*}" hermes_d || break
    read -r -N "${hermes_l#*,}" hermes_n || break;;
  *) read -r -d '' hermes_d && read -r -d '' hermes_n || break;;
  esac
  [ -n "$hermes_n" ] || break
  case $hermes_n in *:*) hermes_x=${hermes_n#*:}; hermes_n=${hermes_n%%:*};; esac
  printf '\0' 1<>"$hermes_s"
  (
    set +m
    IFS=$' \t\n'
    case $hermes_o in s*) LC_ALL=${hermes_o#s};; *) unset LC_ALL;; esac
    cd -- "$hermes_c" 2>/dev/null || cd -- "$HOME" 2>/dev/null || cd /
    eval "$hermes_a"
    if [ -n "$hermes_x" ] && [ -z "$hermes_f" ] && hash -- "$hermes_x" 2>/dev/null; then
      eval "$hermes_t"
      hermes_d="exec -- $hermes_d"
    else
      trap "$hermes_t" EXIT
    fi
    unset hermes_o hermes_s hermes_q hermes_t hermes_c hermes_n hermes_p hermes_r hermes_w hermes_x hermes_a hermes_f hermes_l
    set --
    eval "$hermes_d"
  ) </dev/null >&3 2>&3 3>&- &
  hermes_p=$!
  printf 'P%s\0' "$hermes_p"
  wait "$hermes_p"; hermes_r=$?
  while kill -0 "$hermes_p"; do wait "$hermes_p"; hermes_r=$?; done
  hermes_w=
  read -r -d '' hermes_w <"$hermes_s"
  printf '\036%s\036' "$hermes_n" >&3
  printf 'X%s\0%s\0' "$hermes_r" "${hermes_w%$'\n'}"
done
"#;

/// A frame with an empty nonce: the shell leaves its loop and exits.
const QUIT: &[u8] = b"\0\0\0";

/// After a timeout kill, how long the shell may take to report the killed command's end
/// before it is declared out of sync (and replaced).
pub(crate) const SETTLE_MAX: Duration = Duration::from_secs(5);

/// The argv starting the persistent shell with these state-file candidates.
pub(crate) fn shell_argv(state_files: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = vec!["bash".into(), "-c".into(), SCRIPT.into(), "hermes".into()];
    argv.extend(state_files.iter().cloned());
    argv
}

/// True when a command can go through the framing (bash strings cannot hold NUL bytes; such
/// a command takes the one-shot path, which reports the error as before).
pub(crate) fn frameable(cwd: &str, command: &str) -> bool {
    !cwd.contains('\0') && !command.contains('\0')
}

/// The frame of one command: a header `=<cwd>,<preamble>,<command>,<nonce field>` with the
/// byte lengths of the four fields that follow it unterminated, so the shell reads each with
/// one `read -N` instead of one system call per byte (bash reads a pipe byte by byte when it
/// looks for a delimiter). The nonce field is `<nonce>:<program>` when [`exec_word`] finds the
/// command `exec`able. (The shell also takes the older frame of three NUL-terminated fields,
/// cwd, command and nonce.)
fn frame(cwd: &str, request: &ExecRequest, nonce: &str) -> Vec<u8> {
    let (preamble, command) = request.parts();
    let nonce_field = match exec_word(command) {
        Some(word) => format!("{nonce}:{word}"),
        None => nonce.to_owned(),
    };
    let fields = [cwd, preamble, command, &nonce_field];
    let lengths: Vec<String> = fields.iter().map(|f| f.len().to_string()).collect();
    let mut frame = format!("={}\0", lengths.join(",")).into_bytes();
    for field in fields {
        frame.extend_from_slice(field.as_bytes());
    }
    frame
}

/// Bash's builtins and reserved words (bash 5.2, a superset of older versions'): a command
/// starting with one of them is never `exec`ed.
const NOT_PROGRAMS: &[&str] = &[
    ".",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "case",
    "esac",
    "for",
    "select",
    "while",
    "until",
    "do",
    "done",
    "in",
    "function",
    "time",
    "coproc",
];

/// The program a command runs when the command is that one program with its arguments and
/// redirections, nothing else: no list, pipe, background job, subshell, command substitution
/// or line break anywhere in it (even quoted: this is a conservative check, not a parser), and
/// a first word that is a plain name (no path, variable, quote or assignment) and not a bash
/// builtin or reserved word. `exec` runs such a command exactly as bash would, in one process
/// fewer. `2>&1`-style redirections (`>&`, `<&`, `&>`) are the only `&` allowed.
pub(crate) fn exec_word(command: &str) -> Option<&str> {
    let bytes = command.as_bytes();
    let lone_ampersand = |i: usize| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + 1).copied();
        !(matches!(before, Some(b'>' | b'<')) || after == Some(b'>'))
            || before == Some(b'&')
            || after == Some(b'&')
    };
    let forbidden = bytes.iter().enumerate().any(|(i, b)| match b {
        b';' | b'|' | b'(' | b')' | b'`' | b'\n' | b'\r' => true,
        b'&' => lone_ampersand(i),
        _ => false,
    });
    if forbidden {
        return None;
    }
    let word = command
        .trim_start_matches([' ', '\t'])
        .split([' ', '\t'])
        .next()?;
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'-');
    let ok = !word.is_empty()
        && !word.starts_with(['-', '.'])
        && word.bytes().all(plain)
        && !NOT_PROGRAMS.contains(&word);
    ok.then_some(word)
}

/// One piece of what the shell sent.
#[derive(Debug)]
pub(crate) enum Piece {
    /// Bytes of the report channel (the shell's stdout).
    Report(Vec<u8>),
    /// Bytes of the output channel (the commands' merged stdout and stderr).
    Output(Vec<u8>),
    /// The shell is gone (its report channel ended, or the transport failed).
    Closed,
}

/// The transport to one running shell: its stdin and its two output channels.
#[async_trait]
pub(crate) trait ShellLink: Send {
    /// Writes bytes to the shell's stdin.
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// The next piece the shell sent; must be cancel-safe.
    async fn recv(&mut self) -> Piece;
    /// The shell's own exit code once it is gone (`None` when unknown).
    async fn exit_code(&mut self) -> Option<i32>;
    /// Ends the shell's stdin (some transports cannot half-close, so the caller sent
    /// [`QUIT`] first).
    async fn close(&mut self) {}
}

/// How one command ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The command exited; `cwd` is its final working directory when it exited normally.
    Done {
        /// What it printed.
        output: CappedOutput,
        /// Its exit code (128 + signal when killed).
        code: i32,
        /// Its final working directory (`None` when it did not exit through the trap).
        cwd: Option<String>,
    },
    /// The deadline passed; the caller kills `pgid` and then calls [`PersistentShell::settle`].
    TimedOut {
        /// What it printed before the deadline.
        output: CappedOutput,
        /// The command's process group, when it was reported.
        pgid: Option<i32>,
    },
    /// The shell died. `started` says whether the command had begun (if not, it is safe to
    /// run it again on a fresh shell).
    Died {
        /// What it printed before.
        output: CappedOutput,
        /// Whether the shell had reported the command's start.
        started: bool,
        /// The shell's exit code, when known.
        code: Option<i32>,
    },
}

/// Splits the report channel into NUL-terminated fields.
#[derive(Debug, Default)]
struct Fields {
    raw: Vec<u8>,
}

impl Fields {
    fn push(&mut self, bytes: &[u8]) {
        self.raw.extend_from_slice(bytes);
    }

    fn next(&mut self) -> Option<String> {
        let end = self.raw.iter().position(|b| *b == 0)?;
        let field = String::from_utf8_lossy(&self.raw[..end]).into_owned();
        self.raw.drain(..=end);
        Some(field)
    }
}

/// The command in flight: what has arrived of its end.
#[derive(Debug)]
struct InFlight {
    sync: OutputSync,
    pgid: Option<i32>,
    exit: Option<(i32, Option<String>)>,
}

impl InFlight {
    fn finished(&self) -> bool {
        self.exit.is_some() && self.sync.seen()
    }
}

/// A running shell and the framing state of its channels.
#[derive(Debug)]
pub(crate) struct PersistentShell<L> {
    link: L,
    fields: Fields,
    /// A report field `X<code>` whose working-directory field has not arrived yet.
    pending_code: Option<i32>,
    /// The command whose end has not been read yet (after a timeout or a death).
    in_flight: Option<InFlight>,
}

impl<L: ShellLink> PersistentShell<L> {
    /// Wraps a freshly started shell.
    pub fn new(link: L) -> Self {
        PersistentShell {
            link,
            fields: Fields::default(),
            pending_code: None,
            in_flight: None,
        }
    }

    /// Ends the shell's stdin: the shell exits once its current command is over.
    pub async fn close(mut self) {
        let _ = self.link.send(QUIT).await;
        self.link.close().await;
    }

    /// True when no earlier command's end is still outstanding (the shell can take another).
    pub fn in_sync(&self) -> bool {
        self.in_flight.is_none()
    }

    /// Runs `request`'s command in `cwd` until it ends or `deadline` passes, streaming its
    /// output into a capture of the request's size; `report_pgid` learns its process group as soon
    /// as it starts, with the boot-clock ticks read just before the frame was sent (the
    /// group's leader, forked by the shell for this frame, started after them).
    pub async fn run(
        &mut self,
        cwd: &str,
        request: &ExecRequest,
        deadline: Instant,
        mut report_pgid: impl FnMut(i32, u64),
    ) -> Outcome {
        let mut output = CappedOutput::new(request.output_limit);
        let nonce = nonce();
        let frame = frame(cwd, request, &nonce);
        self.in_flight = Some(InFlight {
            sync: OutputSync::new(&nonce),
            pgid: None,
            exit: None,
        });
        let sent = ticks_now();
        let mut on_pgid = |pgid| report_pgid(pgid, sent);
        if !self.drop_stale_output() || self.link.send(&frame).await.is_err() {
            return self.died(output).await;
        }
        loop {
            let flight = self.in_flight.as_ref().expect("a command is in flight");
            if flight.finished() {
                let flight = self.in_flight.take().expect("a command is in flight");
                let (code, cwd) = flight.exit.expect("finished");
                return Outcome::Done { output, code, cwd };
            }
            let piece = tokio::select! {
                piece = self.link.recv() => piece,
                _ = sleep_until(deadline) => {
                    // The marker is written only once the command ended: what is held back
                    // is the command's own output.
                    let flight = self.in_flight.as_mut().expect("a command is in flight");
                    flight.sync.flush(|b| output.push(b));
                    let pgid = flight.pgid;
                    return Outcome::TimedOut { output, pgid };
                }
            };
            if !self.absorb(piece, &mut output, &mut on_pgid) {
                return self.died(output).await;
            }
        }
    }

    /// Drops what daemons of earlier commands printed since the last command ended (the
    /// one-shot wrapper never showed it either). False when the shell turns out to be gone.
    fn drop_stale_output(&mut self) -> bool {
        while let Some(piece) = self.link.recv().now_or_never() {
            match piece {
                Piece::Output(_) => {}
                Piece::Report(bytes) => self.fields.push(&bytes),
                Piece::Closed => return false,
            }
        }
        true
    }

    /// After the caller killed a timed-out command's process group: reads until the shell
    /// reports that command's end (its late output is dropped). False = the shell is out of
    /// sync and must be replaced.
    pub async fn settle(&mut self) -> bool {
        let until = Instant::now() + SETTLE_MAX;
        let mut sink = CappedOutput::new(0);
        while self.in_flight.as_ref().is_some_and(|f| !f.finished()) {
            let piece = tokio::select! {
                piece = self.link.recv() => piece,
                _ = sleep_until(until) => return false,
            };
            if !self.absorb(piece, &mut sink, &mut |_| {}) {
                return false;
            }
        }
        self.in_flight = None;
        true
    }

    /// Takes in one piece; false when the shell is gone.
    fn absorb(
        &mut self,
        piece: Piece,
        output: &mut CappedOutput,
        on_pgid: &mut impl FnMut(i32),
    ) -> bool {
        let flight = self.in_flight.as_mut().expect("a command is in flight");
        match piece {
            Piece::Output(bytes) => flight.sync.push(&bytes, |b| output.push(b)),
            Piece::Report(bytes) => {
                self.fields.push(&bytes);
                while let Some(field) = self.fields.next() {
                    if let Some(code) = self.pending_code.take() {
                        flight.exit = Some((code, Some(field).filter(|c| !c.is_empty())));
                    } else if let Some(pid) = field.strip_prefix('P') {
                        flight.pgid = pid.parse().ok();
                        if let Some(pgid) = flight.pgid {
                            on_pgid(pgid);
                        }
                    } else if let Some(code) = field.strip_prefix('X') {
                        self.pending_code = Some(code.parse().unwrap_or(-1));
                    }
                }
            }
            Piece::Closed => return false,
        }
        true
    }

    async fn died(&mut self, mut output: CappedOutput) -> Outcome {
        let flight = self.in_flight.as_mut().expect("a command is in flight");
        flight.sync.flush(|b| output.push(b));
        let started = flight.pgid.is_some();
        let code = self.link.exit_code().await;
        Outcome::Died {
            output,
            started,
            code,
        }
    }
}

/// What the command loop both backends share ([`run_in_shell`]) needs of a backend.
#[async_trait]
pub(crate) trait ShellHost: Sync {
    /// The transport of this backend's shells.
    type Link: ShellLink;
    /// Starts a fresh persistent shell.
    async fn fresh_shell(&self) -> Result<PersistentShell<Self::Link>, SandboxError>;
    /// Records the process group a command runs in (killed at reset and teardown); its leader
    /// started after the boot clock read `started_after` ([`ticks_now`]).
    fn note_group(&self, pgid: i32, started_after: u64);
    /// Kills the process group of a command past its deadline.
    async fn kill_command_group(&self, pgid: i32);
    /// Keeps the final working directory of a command that ended normally.
    fn keep_cwd(&self, cwd: String);
    /// Even a fresh shell could not start (exit `code`): the backend says so once and runs its
    /// commands one-shot from now on.
    fn shell_cannot_start(&self, code: Option<i32>);
}

/// Runs `request` in `cwd` on the persistent shell in `slot`, starting one when there is none
/// (or the one there is out of sync), and once more on a fresh shell when the shell died before
/// the command began. `None`: no shell could run it, and the caller runs it one-shot.
pub(crate) async fn run_in_shell<H: ShellHost + ?Sized>(
    host: &H,
    slot: &mut Option<PersistentShell<H::Link>>,
    cwd: &str,
    request: &ExecRequest,
) -> Result<Option<ExecOutput>, SandboxError> {
    for fresh in [false, true] {
        if slot.as_ref().is_none_or(|s| !s.in_sync()) {
            *slot = Some(host.fresh_shell().await?);
        }
        let shell = slot.as_mut().expect("a shell was just started");
        let deadline = Instant::now() + request.timeout;
        let outcome = shell
            .run(cwd, request, deadline, |pgid, sent| {
                host.note_group(pgid, sent)
            })
            .await;
        match outcome {
            Outcome::Done { output, code, cwd } => {
                if let (Some(cwd), None) = (cwd, &request.workdir) {
                    host.keep_cwd(cwd);
                }
                return Ok(Some(ExecOutput::finished(output, code)));
            }
            Outcome::TimedOut { output, pgid } => {
                if let Some(pgid) = pgid {
                    host.kill_command_group(pgid).await;
                }
                if !shell.settle().await {
                    tracing::warn!(
                        "the persistent shell did not report a killed command's end; starting a fresh one"
                    );
                    *slot = None;
                }
                return Ok(Some(ExecOutput::killed_by_deadline(
                    output,
                    request.timeout,
                )));
            }
            Outcome::Died {
                output,
                started,
                code,
            } => {
                *slot = None;
                if started {
                    return Ok(Some(ExecOutput::finished(output, code.unwrap_or(-1))));
                }
                if fresh {
                    host.shell_cannot_start(code);
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_fields_are_split_on_nul_across_chunks() {
        let mut f = Fields::default();
        f.push(b"P12");
        assert_eq!(f.next(), None);
        f.push(b"3\0X0\0/ro");
        assert_eq!(f.next().as_deref(), Some("P123"));
        assert_eq!(f.next().as_deref(), Some("X0"));
        assert_eq!(f.next(), None);
        f.push(b"ot\0");
        assert_eq!(f.next().as_deref(), Some("/root"));
    }

    #[test]
    fn only_one_plain_program_with_its_arguments_is_execed() {
        for (command, word) in [
            ("cat ~/greeting.txt", Some("cat")),
            ("  seq 1 5 > ~/count.txt", Some("seq")),
            ("make -j2 2>&1", Some("make")),
            ("python3 x.py &>log", Some("python3")),
            ("grep -n 'a b' \"$F\" <<< x", Some("grep")),
            ("cat f; ls", None),
            ("cat f && ls", None),
            ("sleep 9 &", None),
            ("cat f | wc -l", None),
            ("cat $(ls)", None),
            ("cat `ls`", None),
            ("(cat f)", None),
            ("cat f\nls", None),
            ("echo hi", None),
            ("cd /tmp", None),
            ("time sleep 1", None),
            ("X=1 env", None),
            ("./run.sh", None),
            ("/bin/cat f", None),
            ("$CMD x", None),
            ("'cat' f", None),
            ("-l", None),
            ("", None),
            ("cat f &&>x", None),
        ] {
            assert_eq!(exec_word(command), word, "{command:?}");
        }
    }

    #[test]
    fn a_frame_gives_the_byte_lengths_of_its_fields() {
        let request = ExecRequest::new("cat f\u{e9}", Duration::from_secs(1)).with_preamble("P=1");
        let framed = frame("/r", &request, "abc");
        assert_eq!(framed, "=2,4,7,7\0/rP=1\ncat f\u{e9}abc:cat".as_bytes());
        let plain = frame_of("cd /", "n");
        assert_eq!(plain, b"=1,0,4,1\0/cd /n");
        let mut odd = ExecRequest::new("\u{e9}", Duration::from_secs(1));
        odd.preamble_len = 1;
        assert_eq!(frame("/", &odd, "n"), "=1,0,2,1\0/\u{e9}n".as_bytes());
    }

    fn frame_of(command: &str, nonce: &str) -> Vec<u8> {
        frame(
            "/",
            &ExecRequest::new(command, Duration::from_secs(1)),
            nonce,
        )
    }

    #[test]
    fn commands_with_nul_bytes_are_not_framed() {
        assert!(frameable("/x", "echo hi"));
        assert!(!frameable("/x", "echo \0hi"));
    }
}
