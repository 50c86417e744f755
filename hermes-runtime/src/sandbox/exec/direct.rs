//! Commands the local backend starts itself, without a shell: one program with literal
//! arguments (`cat ~/notes.txt`, `wc -c out.txt`, `pytest -q tests`). For such a command bash
//! only looks the program up on `PATH`, expands a leading `~` and `exec`s it, from a fork of
//! the persistent shell or from a fresh `bash -c`, and that fork or start can cost as much as
//! a short program itself. Anything else a shell could act on takes the
//! shell path, so the results stay bash's: quotes, `$`, globs, braces, redirections, operators,
//! comments, an assignment, a builtin or reserved word, a name not found on an all-absolute
//! `PATH`, a file that is neither an ELF binary nor a `#!` script (bash runs those itself),
//! functions imported from the environment, a preamble other than the verifier's clean one.
//!
//! The program gets what bash's `exec` gives it: the sandbox environment plus `PWD` (the
//! working directory), `OLDPWD` (the shell's start directory) and `SHLVL` (one above the
//! environment's from the persistent shell, the environment's from a one-shot `bash -c`).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::path_memo::remembered;
use super::persistent::exec_word;
use super::preamble::{CLEAN_PREAMBLE, GIT_SET, GIT_UNSET};

/// What to start for one command: the program file, its argv (argv\[0\] is the name as
/// typed, as bash passes it), the working directory and the whole environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The program file found on `PATH`.
    pub program: PathBuf,
    /// The words of the command, `~` expanded.
    pub argv: Vec<OsString>,
    /// The working directory.
    pub cwd: PathBuf,
    /// The complete environment of the program.
    pub env: Vec<(OsString, OsString)>,
}

/// The shell a [`Launch`] stands in for: the `SHLVL` its `exec` leaves differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InPlaceOf {
    /// A subshell of the persistent shell: one level above the environment's.
    PersistentShell,
    /// The one-shot `bash -c` wrapper, whose top level `exec`s the program and so lowers the
    /// level it raised: the environment's.
    OneShot,
}

/// The [`Launch`] of `command` (after `preamble`) in `cwd`, when bash would do nothing to it
/// but start its program; `None` sends it to the shell. `cwd` is a directory the caller has
/// just seen exist (else the shell's `cd` would go elsewhere); `start_dir` is where the shell
/// would have started (its `OLDPWD` after the `cd` into `cwd`).
pub(crate) fn launch(
    preamble: &str,
    command: &str,
    (cwd, start_dir): (&Path, &Path),
    in_place_of: InPlaceOf,
    sandbox_env: &[(OsString, OsString)],
) -> Option<Launch> {
    let var = |env: &[(OsString, OsString)], name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    if sandbox_env
        .iter()
        .any(|(k, _)| k.as_bytes().starts_with(b"BASH_FUNC_"))
        || !is_canonical(cwd)
    {
        return None;
    }
    let home = var(sandbox_env, "HOME");
    let mut env = match preamble.strip_suffix('\n') {
        None if preamble.is_empty() => sandbox_env.to_vec(),
        Some(p) if p == CLEAN_PREAMBLE => {
            let path = var(sandbox_env, "PATH").unwrap_or_default();
            let clean = clean_path(&path, home.as_deref().unwrap_or_default())?;
            let mut env = sandbox_env.to_vec();
            set(&mut env, "PATH", clean);
            set(&mut env, "PYTHONNOUSERSITE", "1".into());
            set(&mut env, "PYTHONDONTWRITEBYTECODE", "1".into());
            env.retain(|(k, _)| !GIT_UNSET.iter().any(|u| k == u));
            for (key, value) in GIT_SET {
                set(&mut env, key, (*value).into());
            }
            env
        }
        _ => return None,
    };
    let argv = literal_argv(command, home.as_deref())?;
    let path = var(&env, "PATH").unwrap_or_default();
    let program = remembered(&path, &argv[0], find_program)?;
    // Bash's own corrections of an odd `SHLVL` (negative, too high, not a number) are left
    // to bash.
    let level = match var(&env, "SHLVL") {
        None => 0,
        Some(l) => l.to_str()?.parse::<u16>().ok().filter(|l| *l < 999)?,
    };
    set(&mut env, "PWD", cwd.into());
    set(&mut env, "OLDPWD", start_dir.into());
    let level = match in_place_of {
        InPlaceOf::PersistentShell => level + 1,
        InPlaceOf::OneShot => level,
    };
    set(&mut env, "SHLVL", level.to_string().into());
    Some(Launch {
        program,
        argv,
        cwd: cwd.to_owned(),
        env,
    })
}

/// Sets `key` in `env`, replacing an earlier value.
fn set(env: &mut Vec<(OsString, OsString)>, key: &str, value: OsString) {
    env.retain(|(k, _)| k != key);
    env.push((key.into(), value));
}

/// True for an absolute path without `.`, `..` or empty components (bash's `cd` would
/// rewrite any other into `PWD`).
fn is_canonical(cwd: &Path) -> bool {
    let text = cwd.as_os_str().as_bytes();
    cwd.is_absolute()
        && !text.windows(2).any(|w| w == b"//")
        && cwd
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The words of `command` when it is one program ([`exec_word`]) with literal words only:
/// ASCII letters, digits and `_ . / , : + - = @ %`, and a `~` that starts a word alone or
/// before a `/` (expanded to `home`, as bash's tilde expansion does; without a `HOME` the
/// shell decides).
pub(crate) fn literal_argv(command: &str, home: Option<&OsStr>) -> Option<Vec<OsString>> {
    exec_word(command)?;
    let literal = |b: u8| b.is_ascii_alphanumeric() || b"_./,:+-=@%".contains(&b);
    command
        .split([' ', '\t'])
        .filter(|w| !w.is_empty())
        .map(|word| {
            let (tilde, rest) = match word.strip_prefix('~') {
                Some(rest) if rest.is_empty() || rest.starts_with('/') => (true, rest),
                Some(_) => return None,
                None => (false, word),
            };
            if !rest.bytes().all(literal) {
                return None;
            }
            if !tilde {
                return Some(OsString::from(rest));
            }
            let mut expanded = home?.to_owned();
            expanded.push(rest);
            Some(expanded)
        })
        .collect()
}

/// `name` looked up on `path` as bash looks it up: the first regular file this process may
/// execute. `None` (the shell decides, and reports) when it is not found before a relative or
/// empty entry (those depend on the working directory), or when the file found is neither an
/// ELF binary nor a `#!` script (bash runs such a file as a script itself).
pub(crate) fn find_program(path: &OsStr, name: &OsStr) -> Option<PathBuf> {
    for dir in path.as_bytes().split(|b| *b == b':') {
        let dir = Path::new(OsStr::from_bytes(dir));
        if !dir.is_absolute() {
            return None;
        }
        let candidate = dir.join(name);
        if candidate.is_file() && may_execute(&candidate) {
            return starts_like_a_program(&candidate).then_some(candidate);
        }
    }
    None
}

/// `faccessat(X_OK, AT_EACCESS)`: what bash's `eaccess` check asks.
fn may_execute(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path; faccessat only reads it.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, libc::AT_EACCESS) == 0 }
}

/// True when the file starts with the ELF magic or `#!`.
fn starts_like_a_program(path: &Path) -> bool {
    let mut head = [0u8; 4];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let n = file.read(&mut head).unwrap_or(0);
    head[..n].starts_with(b"\x7fELF") || head[..n].starts_with(b"#!")
}

/// The `PATH` that [`CLEAN_PREAMBLE`] exports: `path`'s entries without empty, relative,
/// `home` and below-`home` ones. `None` when an entry holds a glob character (the preamble's
/// unquoted `$PATH` would expand it).
fn clean_path(path: &OsStr, home: &OsStr) -> Option<OsString> {
    let bytes = path.as_bytes();
    if bytes.iter().any(|b| b"*?[".contains(b)) {
        return None;
    }
    let home = home.as_bytes();
    let kept: Vec<&[u8]> = bytes
        .split(|b| *b == b':')
        .filter(|e| {
            let below_home = e.starts_with(home) && e.get(home.len()) == Some(&b'/');
            e.starts_with(b"/") && *e != home && !below_home
        })
        .collect();
    Some(OsStr::from_bytes(&kept.join(&b':')).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(command: &str) -> Option<Vec<String>> {
        literal_argv(command, Some(OsStr::new("/h")))
            .map(|w| w.iter().map(|w| w.to_string_lossy().into_owned()).collect())
    }

    #[test]
    fn only_literal_words_after_a_program_name_are_taken() {
        assert_eq!(
            words("  cat ~/a.txt\t-n ~ x=1 a,b:c@d%e+f "),
            Some(
                ["cat", "/h/a.txt", "-n", "/h", "x=1", "a,b:c@d%e+f"]
                    .map(String::from)
                    .to_vec()
            )
        );
        for shell_work in [
            "cat 'a'",
            "cat \"a\"",
            "cat a\\ b",
            "cat $HOME",
            "cat *.txt",
            "cat a?",
            "cat [ab]",
            "cat {a,b}",
            "cat a > b",
            "cat < a",
            "cat a 2>&1",
            "cat a # note",
            "cat ~root/x",
            "cat a~",
            "cat x=~/a",
            "cat !x",
            "cat caf\u{e9}",
            "X=1 cat a",
            "echo hi",
            "cd /",
            "./run",
            "/bin/cat a",
            "cat a; ls",
            "cat a && ls",
            "",
        ] {
            assert_eq!(words(shell_work), None, "{shell_work}");
        }
        assert_eq!(literal_argv("cat ~/a", None), None);
        assert_eq!(
            literal_argv("cat a", None),
            Some(vec!["cat".into(), "a".into()])
        );
    }

    /// The native clean `PATH` is the one bash computes by running the preamble.
    #[test]
    fn clean_path_matches_the_preamble_run_by_bash() {
        // Found on this process's `PATH`: the child's own is the one under test.
        let bash = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join("bash"))
            .find(|p| p.is_file())
            .expect("bash on PATH");
        for (path, home) in [
            ("/usr/bin:/bin", "/h"),
            (":/usr/bin::.:bin:/h:/h/.local/bin:/hx/bin:/bin:", "/h"),
            ("/h/bin:/usr/local/bin", "/h"),
            ("/usr/bin:/bin", ""),
            ("", "/h"),
        ] {
            let script = format!("{CLEAN_PREAMBLE}\nprintf %s \"$PATH\"");
            let out = std::process::Command::new(&bash)
                .args(["-c", &script])
                .env_clear()
                .env("PATH", path)
                .env("HOME", home)
                .output()
                .expect("bash");
            let native = clean_path(OsStr::new(path), OsStr::new(home)).expect("no globs");
            assert_eq!(native.as_bytes(), out.stdout, "PATH={path:?} HOME={home:?}");
        }
        assert_eq!(clean_path(OsStr::new("/a*:/bin"), OsStr::new("/h")), None);
    }

    #[test]
    fn a_program_is_found_as_bash_finds_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let write = |name: &str, text: &[u8], mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            let p = d.join(name);
            std::fs::write(&p, text).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        write("script", b"#!/bin/sh\necho hi\n", 0o755);
        write("plain", b"echo hi\n", 0o755);
        write("unexec", b"#!/bin/sh\n", 0o644);
        let path = |dirs: &[&str]| OsString::from(dirs.join(":"));
        let d_str = d.to_str().expect("utf-8 temp dir");
        assert_eq!(
            find_program(&path(&[d_str, "/usr/bin"]), OsStr::new("script")),
            Some(d.join("script"))
        );
        assert_eq!(
            find_program(&path(&[d_str]), OsStr::new("plain")),
            None,
            "no #!: bash runs it as a script"
        );
        let cat = find_program(&path(&[d_str, "/usr/bin", "/bin"]), OsStr::new("cat"));
        assert!(cat.is_some_and(|c| c.ends_with("bin/cat")));
        assert_eq!(
            find_program(&path(&["", "/usr/bin"]), OsStr::new("cat")),
            None,
            "an empty entry (the working directory) comes first"
        );
        assert_eq!(find_program(&path(&[d_str]), OsStr::new("missing")), None);
        // A file this user may not execute is passed over, as bash does (root may execute
        // any file with an execute bit, so only the missing bit is checked here).
        assert_eq!(find_program(&path(&[d_str]), OsStr::new("unexec")), None);
    }

    #[test]
    fn the_launch_carries_the_variables_bash_adds() {
        let env: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("HOME".into(), "/tmp".into()),
            ("SHLVL".into(), "3".into()),
        ];
        let at = (Path::new("/tmp"), Path::new("/"));
        let l = launch("", "cat ~/x", at, InPlaceOf::PersistentShell, &env).expect("launch");
        assert_eq!(l.argv, vec![OsString::from("cat"), "/tmp/x".into()]);
        let get = |k: &str| l.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PWD"), Some("/tmp".into()));
        assert_eq!(get("OLDPWD"), Some("/".into()));
        assert_eq!(get("SHLVL"), Some("4".into()));
        let clean = format!("{CLEAN_PREAMBLE}\n");
        let l = launch(&clean, "cat x", at, InPlaceOf::OneShot, &env).expect("clean");
        let get = |k: &str| l.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("PYTHONNOUSERSITE"), Some("1".into()));
        assert_eq!(get("SHLVL"), Some("3".into()));
        assert_eq!(launch("x=1\n", "cat x", at, InPlaceOf::OneShot, &env), None);
        assert_eq!(
            launch(
                "",
                "cat x",
                (Path::new("/tmp/../tmp"), Path::new("/")),
                InPlaceOf::OneShot,
                &env
            ),
            None
        );
        let mut with_function = env.clone();
        with_function.push(("BASH_FUNC_cat%%".into(), "() { :; }".into()));
        assert_eq!(
            launch("", "cat x", at, InPlaceOf::OneShot, &with_function),
            None
        );
    }
}
