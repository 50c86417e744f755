//! Keeps this process's own secrets (api keys in its environment or on its command line)
//! away from the commands it runs. Local-backend commands are children of this process under
//! the same user, so `cat /proc/$PPID/environ` or `/proc/$PPID/cmdline` would show the
//! environment and the arguments the process started with. At start, before any thread
//! exists, [`protect`]:
//! - remembers every secret value for the text scrubber ([`crate::config::redact::scrub`]);
//! - moves the environment to the heap (`setenv` of every variable, so `getenv` keeps
//!   working) and zeroes the original block, which is what `/proc/<pid>/environ` reads;
//! - overwrites the values of secret-named flags (`--openai.api_key …`) in the original
//!   argument block, which is what `/proc/<pid>/cmdline` and `ps` read;
//! - marks the process non-dumpable, so other processes of the same (non-root) user cannot
//!   read its memory or environment through `/proc` or ptrace.
//!
//! Root (or `CAP_SYS_PTRACE`) can still read the process memory; the local backend is not a
//! security boundary, and the README says so.

use std::ffi::OsString;

use crate::config::redact::{is_secret_name, remember_environment_secrets, remember_secret};

/// Hides the environment and secret arguments (see the module docs). Call once, first thing
/// in `main`, after collecting `args` and before any thread starts. Failures leave things as
/// they were (this is best effort on systems without `/proc`).
pub fn protect(args: &[OsString]) {
    remember_environment_secrets();
    let secret_args = secret_argument_values(args);
    for value in &secret_args {
        remember_secret(value);
    }
    let Some(blocks) = Blocks::of_this_process() else {
        return;
    };
    move_environment_to_heap();
    // SAFETY: after `move_environment_to_heap`, no `environ` entry points into the original
    // environment block [env_start, env_end), which the kernel mapped writable on this
    // process's stack; nothing else references it.
    unsafe { std::ptr::write_bytes(blocks.env_start as *mut u8, 0, blocks.env_len()) };
    hide_argument_values(&blocks, &secret_args);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_DUMPABLE) takes plain integers and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// Values of secret-named flags: `--x.api_key VALUE` and `--x.api_key=VALUE`.
fn secret_argument_values(args: &[OsString]) -> Vec<String> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut values = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        let Some(flag) = arg.strip_prefix("--") else {
            continue;
        };
        match flag.split_once('=') {
            Some((name, value)) if is_secret_name(name) => values.push(value.to_owned()),
            None if is_secret_name(flag) => values.extend(args.get(i + 1).cloned()),
            _ => {}
        }
    }
    values.retain(|v| !v.is_empty());
    values
}

fn move_environment_to_heap() {
    for (key, value) in std::env::vars_os() {
        // Sound only before other threads exist (see `protect`).
        std::env::set_var(key, value);
    }
}

/// The original argument and environment blocks of this process (`/proc/self/stat`
/// fields 48–51).
struct Blocks {
    arg_start: usize,
    arg_end: usize,
    env_start: usize,
    env_end: usize,
}

impl Blocks {
    fn of_this_process() -> Option<Blocks> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which may contain spaces) start at field 3.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<usize> = rest
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let field = |n: usize| fields.get(n - 3).copied().filter(|v| *v != 0);
        let blocks = Blocks {
            arg_start: field(48)?,
            arg_end: field(49)?,
            env_start: field(50)?,
            env_end: field(51)?,
        };
        (blocks.arg_end > blocks.arg_start && blocks.env_end >= blocks.env_start).then_some(blocks)
    }

    fn env_len(&self) -> usize {
        self.env_end - self.env_start
    }
}

/// Overwrites every occurrence of a secret value in the argument block with `*`.
fn hide_argument_values(blocks: &Blocks, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    // SAFETY: [arg_start, arg_end) is this process's original argument block, mapped
    // writable on its stack; std's argument iterator reads it only when called (the
    // arguments were collected before `protect`).
    let block = unsafe {
        std::slice::from_raw_parts_mut(
            blocks.arg_start as *mut u8,
            blocks.arg_end - blocks.arg_start,
        )
    };
    for secret in secrets {
        let needle = secret.as_bytes();
        let mut i = 0;
        while i + needle.len() <= block.len() {
            if &block[i..i + needle.len()] == needle {
                block[i..i + needle.len()].fill(b'*');
                i += needle.len();
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_flag_values_are_found_in_both_spellings() {
        let args: Vec<OsString> = [
            "bin",
            "process",
            "--openai.api_key",
            "sk-one",
            "--openai.base_url=http://x",
            "--env.hf_token=hf-two",
            "--env.max_token_length",
            "5",
        ]
        .map(OsString::from)
        .to_vec();
        assert_eq!(secret_argument_values(&args), ["sk-one", "hf-two"]);
    }

    #[test]
    fn this_process_has_argument_and_environment_blocks() {
        let blocks = Blocks::of_this_process().expect("/proc/self/stat fields 48-51");
        assert!(blocks.env_len() > 0);
    }
}
