//! The container backends' leftover killer: a script run inside the sandbox between the agent
//! phase and the verifier, from facts the model cannot forge. It stops everything the agent
//! left (a stopped process cannot fork, so each one's ancestry holds until all are found),
//! tells the `process` tool's own processes (by pid and start time, as this process recorded
//! them) from the rest, leaves the declared survivors running, then kills what it stopped.

use crate::sandbox::api::Sandbox;
use crate::sandbox::error::SandboxError;
use crate::sandbox::survival::{shell_functions, LeftoverKill, LeftoverRules};

use super::tripwire::wire_exec;

/// The in-sandbox leftover killer (container backends), run by the exec's own shell after the
/// [`shell_functions`] of the rules. Everything but init (pid 1), the container's entrypoint
/// (the first child of init), this script with its own children and the survivors is stopped,
/// in rounds until a round finds nothing new, then killed with SIGKILL; a last sweep of up to
/// three rounds kills whatever still escaped. Prints `own PID COMMAND` for each of the tool's
/// own processes and those below them, `left PID COMMAND` for every other killed process and
/// `kept PID PGID COMMAND` for each survivor (the command line's first 120 characters, or
/// `[name]` when it has none). Only shell builtins are used: the agent may have
/// replaced any program on `PATH`.
pub const LEFTOVER_SCRIPT: &str = r#"me=$$; entry=
for d in /proc/[0-9]*; do p=${d#/proc/}; field "$p" PPid; [ "$hv" = 1 ] && { [ -z "$entry" ] || [ "$p" -lt "$entry" ]; } && entry=$p; done
name_of() { args_of "$1"; [ -n "$sa" ] || { read -r sa 2>/dev/null < "/proc/$1/comm"; sa="[$sa]"; }; sa=${sa//$'\n'/ }; cmd=${sa:0:120}; }
spared() { q=$1; while [ -n "$q" ] && [ "$q" -gt 1 ]; do [ "$q" = "$me" ] && return 0; field "$q" PPid; q=$hv; done; return 1; }
seen=' '; held=
for round in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case " 1 $entry $me$seen" in *" $p "*) continue;; esac
    [ -r "$d/status" ] || continue
    field "$p" State
    [ "$hv" = Z ] && continue
    spared "$p" && continue
    name_of "$p"
    if survivor "$p"; then stat_of "$p"; echo "kept $p ${sg:-0} $cmd"; seen="$seen$p "; continue; fi
    kill -STOP "$p" 2>/dev/null || continue
    seen="$seen$p "; held="$held $p"; found=1
    if owned "$p"; then echo "own $p $cmd"; else echo "left $p $cmd"; fi
  done
  [ -z "$found" ] && break
done
[ -n "$held" ] && kill -KILL $held 2>/dev/null
for round in 1 2 3; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case " 1 $entry $me$seen" in *" $p "*) continue;; esac
    [ -r "$d/status" ] || continue
    field "$p" State
    [ "$hv" = Z ] && continue
    spared "$p" && continue
    name_of "$p"
    kill -KILL "$p" 2>/dev/null && { echo "left $p $cmd"; found=1; }
  done
  [ -z "$found" ] && break
done
exit 0"#;

/// Runs [`LEFTOVER_SCRIPT`] in `sandbox` under `rules`; returns what it did and the process
/// groups of the survivors it left running (a later reset of the sandbox's command groups
/// must pass over them).
pub async fn kill_leftovers_inside<S: Sandbox + ?Sized>(
    sandbox: &S,
    rules: &LeftoverRules,
) -> Result<(LeftoverKill, Vec<i32>), SandboxError> {
    let command = format!("{}{LEFTOVER_SCRIPT}", shell_functions(rules));
    let out = wire_exec(sandbox, command).await?;
    Ok(parse(&out.output))
}

/// The script's report. Lines of another shape (a survivor holding the shell's output may
/// write some) are not the script's and are passed over.
fn parse(output: &str) -> (LeftoverKill, Vec<i32>) {
    let mut kill = LeftoverKill::default();
    let mut groups = Vec::new();
    for line in output.lines() {
        let mut words = line.trim().splitn(2, ' ');
        let (kind, rest) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let pid_first = |rest: &str| {
            rest.split(' ')
                .next()
                .is_some_and(|p| p.parse::<u32>().is_ok())
        };
        match kind {
            "left" if pid_first(rest) => kill.leftovers.push(rest.to_owned()),
            "own" if pid_first(rest) => kill.own += 1,
            "kept" if pid_first(rest) => {
                let mut fields = rest.splitn(3, ' ');
                let pid = fields.next().unwrap_or_default();
                if let Some(group) = fields.next().and_then(|g| g.parse::<i32>().ok()) {
                    if group > 1 {
                        groups.push(group);
                    }
                }
                let name = fields.next().unwrap_or_default();
                kill.survivors.push(format!("{pid} {name}"));
            }
            _ => {}
        }
    }
    (kill, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_read_line_by_line() {
        let (kill, groups) = parse(
            "own 12 bash\nleft 40 sleep\nkept 33 33 python3\nleft x forged\nnoise\nown 13 sleep\n",
        );
        assert_eq!(kill.leftovers, ["40 sleep"]);
        assert_eq!(kill.own, 2);
        assert_eq!(kill.survivors, ["33 python3"]);
        assert_eq!(groups, [33]);
    }
}
