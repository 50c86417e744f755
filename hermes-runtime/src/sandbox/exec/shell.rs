//! The one-shot shell wrapper (`bash -c` per command): the path for `exec_one_shot`, for a
//! command issued while the persistent shell is busy, and for images where the persistent
//! shell cannot start (see `persistent.rs` for the usual path). It keeps the command's stdout and
//! stderr merged on one stream and reports on a separate one (the original stderr): first its
//! process id (the command's process group, killed on timeout), then at exit the exit code and
//! the final working directory (written by the `pwd` builtin, no command substitution: a
//! subshell would be one more fork per command), so `cd` persists across `terminal` calls of
//! one task. At exit
//! it also writes a per-command end marker on the output stream, after everything the command
//! printed: seeing it means no output is still in flight, even when a daemon the command
//! started keeps the stream open.

/// Separates the fields of the report stream (ASCII record separator).
const SEP: char = '\u{1e}';

/// bash script: `$1` = start directory, `$2` = the command, `$3` = the end-marker nonce.
/// File descriptors 56 (the output stream) and 57 (the report stream) are unlikely to be used
/// by commands, unlike 3–9.
const WRAPPER: &str = "exec 56>&1 57>&2 2>&1
printf '%s\\036' \"$$\" >&57
trap 'hermes_rc=$?; printf \"%s\\036\" \"$hermes_rc\" >&57; { pwd -P 2>/dev/null || pwd; } >&57; printf \"\\036\" >&57; printf \"\\036%s\\036\" \"$3\" >&56' EXIT
cd -- \"$1\" 2>/dev/null || cd -- \"$HOME\" 2>/dev/null || cd /
eval \"$2\"
";

/// The argv running `command` in `cwd` under the wrapper, ending its output with `nonce`'s
/// marker.
pub(crate) fn wrapper_argv(cwd: &str, command: &str, nonce: &str) -> Vec<String> {
    vec![
        "bash".into(),
        "-c".into(),
        WRAPPER.into(),
        "hermes".into(),
        cwd.into(),
        command.into(),
        nonce.into(),
    ]
}

/// The wrapper for one plain program ([`super::persistent::exec_word`]) after a preamble:
/// `$1` = start directory, `$2` = the command, `$3` = the nonce, `$4` = the program, `$5` =
/// the preamble. When `$4` is on `PATH`, the shell reports its pid and then `E` + the working
/// directory, closes the report and marker descriptors and `exec`s the command: one process
/// instead of the wrapper shell and a fork, and no end marker or exit record (the exit code is
/// the process's own, and the output is complete at the end of the stream or a bound after the
/// exit). A name not on `PATH` takes the usual path, so bash's own "command not found" is kept.
const EXEC_WRAPPER: &str = "exec 56>&1 57>&2 2>&1
printf '%s\\036' \"$$\" >&57
cd -- \"$1\" 2>/dev/null || cd -- \"$HOME\" 2>/dev/null || cd /
eval \"$5\"
if hash -- \"$4\" 2>/dev/null; then
  { printf E; pwd -P 2>/dev/null || pwd; printf '\\036'; } >&57
  exec 56>&- 57>&-
  eval \"exec -- $2\"
fi
trap 'hermes_rc=$?; printf \"%s\\036\" \"$hermes_rc\" >&57; { pwd -P 2>/dev/null || pwd; } >&57; printf \"\\036\" >&57; printf \"\\036%s\\036\" \"$3\" >&56' EXIT
eval \"$2\"
";

/// The argv of [`EXEC_WRAPPER`]: `preamble` runs first, then `command` (one run of `program`)
/// is `exec`ed.
pub(crate) fn exec_wrapper_argv(
    cwd: &str,
    preamble: &str,
    command: &str,
    program: &str,
    nonce: &str,
) -> Vec<String> {
    vec![
        "bash".into(),
        "-c".into(),
        EXEC_WRAPPER.into(),
        "hermes".into(),
        cwd.into(),
        command.into(),
        nonce.into(),
        program.into(),
        preamble.into(),
    ]
}

/// A fresh nonce for one command's end marker.
pub(crate) fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Passes the output stream on until the end marker, which it strips; holds back just enough
/// bytes to recognise a marker split across chunks.
#[derive(Debug)]
pub(crate) struct OutputSync {
    marker: Vec<u8>,
    pending: Vec<u8>,
    seen: bool,
}

impl OutputSync {
    /// A filter for the marker of `nonce`.
    pub fn new(nonce: &str) -> Self {
        OutputSync {
            marker: format!("{SEP}{nonce}{SEP}").into_bytes(),
            pending: Vec::new(),
            seen: false,
        }
    }

    /// Feeds a chunk; hands the output before the marker to `sink`. Output after the marker
    /// (from a daemon the command left running) is dropped.
    pub fn push(&mut self, chunk: &[u8], mut sink: impl FnMut(&[u8])) {
        if self.seen {
            return;
        }
        self.pending.extend_from_slice(chunk);
        if let Some(pos) = self
            .pending
            .windows(self.marker.len())
            .position(|w| w == self.marker.as_slice())
        {
            sink(&self.pending[..pos]);
            self.pending.clear();
            self.seen = true;
            return;
        }
        let keep = self.marker.len() - 1;
        if self.pending.len() > keep {
            let cut = self.pending.len() - keep;
            sink(&self.pending[..cut]);
            self.pending.drain(..cut);
        }
    }

    /// True once the marker has arrived: all of the shell's output is in.
    pub fn seen(&self) -> bool {
        self.seen
    }

    /// Hands over what is held back (at end of stream without a marker).
    pub fn flush(&mut self, mut sink: impl FnMut(&[u8])) {
        sink(&self.pending);
        self.pending.clear();
    }
}

/// What the report stream has said so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// The wrapper shell's pid (also its process group id).
    pub pid: Option<i32>,
    /// Exit code and final working directory, once the shell has exited normally.
    pub exit: Option<(i32, String)>,
    /// The working directory [`EXEC_WRAPPER`] `exec`ed its program in (its exit code is the
    /// process's own).
    pub execed_in: Option<String>,
}

/// Accumulates the report stream and parses it.
#[derive(Debug, Default)]
pub(crate) struct ReportReader {
    raw: Vec<u8>,
}

impl ReportReader {
    /// Appends bytes read from the report stream.
    pub fn push(&mut self, bytes: &[u8]) {
        // Anything bash prints before redirecting (a broken image) is tiny; keep it bounded.
        if self.raw.len() < 64 * 1024 {
            self.raw.extend_from_slice(bytes);
        }
    }

    /// The parsed report.
    pub fn report(&self) -> Report {
        let text = String::from_utf8_lossy(&self.raw);
        let fields: Vec<&str> = text.split(SEP).collect();
        // Complete fields are followed by a separator, so the last element is a partial one.
        let complete = &fields[..fields.len().saturating_sub(1)];
        let pid = complete.first().and_then(|p| p.trim().parse().ok());
        // `pwd` ends the directory with a newline.
        let dir = |d: &str| d.strip_suffix('\n').unwrap_or(d).to_owned();
        let execed_in = match complete {
            [_, field, ..] => field.strip_prefix('E').map(dir),
            _ => None,
        };
        let exit = match complete {
            [_, code, cwd, ..] if execed_in.is_none() => {
                code.trim().parse().ok().map(|c| (c, dir(cwd)))
            }
            _ => None,
        };
        Report {
            pid,
            exit,
            execed_in,
        }
    }

    /// True once the exit record has arrived (the shell is exiting), or the `exec` record
    /// (nothing more will be reported).
    pub fn finished(&self) -> bool {
        let report = self.report();
        report.exit.is_some() || report.execed_in.is_some()
    }

    /// Text that is not part of the report (for example bash's own error when it cannot start).
    pub fn stray_text(&self) -> String {
        if self.report().pid.is_some() {
            String::new()
        } else {
            String::from_utf8_lossy(&self.raw).trim().to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_is_parsed_incrementally() {
        let mut r = ReportReader::default();
        r.push(b"12");
        assert_eq!(r.report(), Report::default());
        r.push(b"3\x1e0\x1e/ro");
        assert_eq!(r.report().pid, Some(123));
        assert!(!r.finished());
        r.push(b"ot/x y\n\x1e");
        assert_eq!(r.report().exit, Some((0, "/root/x y".into())));
    }

    #[test]
    fn the_end_marker_is_found_across_chunks_and_stripped() {
        let mut sync = OutputSync::new("abc");
        let mut out = Vec::new();
        sync.push(b"hello \x1e", |b| out.extend_from_slice(b));
        sync.push(b"ab", |b| out.extend_from_slice(b));
        assert!(!sync.seen());
        sync.push(b"c\x1edaemon noise", |b| out.extend_from_slice(b));
        assert!(sync.seen());
        sync.push(b"more", |b| out.extend_from_slice(b));
        assert_eq!(out, b"hello ");
        let mut partial = OutputSync::new("abc");
        let mut out = Vec::new();
        partial.push(b"x\x1eab", |b| out.extend_from_slice(b));
        partial.flush(|b| out.extend_from_slice(b));
        assert_eq!(out, b"x\x1eab");
    }

    /// A plain program is `exec`ed after the preamble, in the start directory: its pid is the
    /// wrapper's, its exit code is the process's, and the report and marker descriptors are
    /// closed; a name that is not on `PATH` gets bash's own error and exit record.
    #[test]
    fn the_exec_wrapper_execs_a_found_program_and_falls_back_for_a_missing_one() {
        let argv = exec_wrapper_argv(
            "/usr",
            "hermes_x=1",
            "sh -c 'echo \"$hermes_x\" $$; ls /proc/self/fd; exit 4'",
            "sh",
            "n0",
        );
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("bash");
        let mut r = ReportReader::default();
        r.push(&out.stderr);
        let report = r.report();
        assert_eq!(report.execed_in.as_deref(), Some("/usr"));
        assert_eq!((report.exit, out.status.code()), (None, Some(4)));
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        // The preamble's variable was not exported: `sh` does not see it.
        assert_eq!(
            lines.next(),
            Some(format!(" {}", report.pid.unwrap()).as_str()),
            "{text}"
        );
        let fds: Vec<&str> = lines.collect();
        assert!(fds.contains(&"1"), "{text}");
        assert!(!fds.contains(&"56") && !fds.contains(&"57"), "{text}");
        let argv = exec_wrapper_argv("/", "", "no-such-program-x", "no-such-program-x", "n1");
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("bash");
        assert!(String::from_utf8_lossy(&out.stdout).contains("command not found"));
        let mut r = ReportReader::default();
        r.push(&out.stderr);
        assert_eq!(r.report().exit, Some((127, "/".into())));
        assert_eq!(r.report().execed_in, None);
    }

    #[test]
    fn wrapper_runs_in_bash_and_reports_cwd_and_code() {
        let argv = wrapper_argv("/", "cd /usr; echo hi; echo err >&2; exit 3", "n0");
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .expect("bash");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\nerr\n\x1en0\x1e");
        let mut r = ReportReader::default();
        r.push(&out.stderr);
        assert_eq!(r.report().exit, Some((3, "/usr".into())));
        assert_eq!(out.status.code(), Some(3));
    }
}
