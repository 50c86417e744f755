//! The clean context a verifier's commands run in, as a preamble of the framework's own
//! ([`ExecRequest::with_preamble`](crate::sandbox::api::ExecRequest::with_preamble)).

/// Run before every reward command: the verifier starts in the sandbox home (not wherever the
/// agent's shell was left), with a `PATH` stripped of the entries the agent fills by default
/// (relative or empty entries, anything under the home), without Python's user site
/// (`~/.local`) and without writing byte-code the agent could later see. Git, which verifiers
/// run in repositories the model wrote, reads the repository's configuration: the keys that
/// make it run a program while only reading (`core.fsmonitor`, hooks, a pager, signature
/// checks, any transport) are overridden at command-line precedence, and git's own variables
/// that point it elsewhere are unset. (Drivers in sections the model names cannot be
/// overridden; the tripwire reports a configuration defining them.)
pub const CLEAN_PREAMBLE: &str = concat!(
    r#"hermes_path=; IFS=:; for hermes_e in $PATH; do case "$hermes_e" in ''|.|[!/]*|"$HOME"|"$HOME"/*) ;; *) hermes_path="${hermes_path:+$hermes_path:}$hermes_e";; esac; done; unset IFS hermes_e; export PATH="$hermes_path" PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1; unset hermes_path; "#,
    "unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_EXEC_PATH GIT_TEMPLATE_DIR GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_EXTERNAL_DIFF GIT_SSH GIT_SSH_COMMAND GIT_ASKPASS SSH_ASKPASS GIT_PROXY_COMMAND; ",
    "export GIT_TERMINAL_PROMPT=0 GIT_PAGER=cat GIT_EDITOR=: GIT_CONFIG_COUNT=7 ",
    "GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=false ",
    "GIT_CONFIG_KEY_1=core.hooksPath GIT_CONFIG_VALUE_1=/dev/null ",
    "GIT_CONFIG_KEY_2=core.pager GIT_CONFIG_VALUE_2=cat ",
    "GIT_CONFIG_KEY_3=log.showSignature GIT_CONFIG_VALUE_3=false ",
    "GIT_CONFIG_KEY_4=protocol.allow GIT_CONFIG_VALUE_4=never ",
    "GIT_CONFIG_KEY_5=core.sshCommand GIT_CONFIG_VALUE_5=false ",
    "GIT_CONFIG_KEY_6=credential.helper GIT_CONFIG_VALUE_6=; ",
    "hash -r"
);

/// Git's variables [`CLEAN_PREAMBLE`] unsets (a direct launch does the same).
pub(crate) const GIT_UNSET: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_EXTERNAL_DIFF",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_PROXY_COMMAND",
];

/// The variables [`CLEAN_PREAMBLE`] exports for git (a direct launch sets the same).
pub(crate) const GIT_SET: &[(&str, &str)] = &[
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_PAGER", "cat"),
    ("GIT_EDITOR", ":"),
    ("GIT_CONFIG_COUNT", "7"),
    ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
    ("GIT_CONFIG_VALUE_0", "false"),
    ("GIT_CONFIG_KEY_1", "core.hooksPath"),
    ("GIT_CONFIG_VALUE_1", "/dev/null"),
    ("GIT_CONFIG_KEY_2", "core.pager"),
    ("GIT_CONFIG_VALUE_2", "cat"),
    ("GIT_CONFIG_KEY_3", "log.showSignature"),
    ("GIT_CONFIG_VALUE_3", "false"),
    ("GIT_CONFIG_KEY_4", "protocol.allow"),
    ("GIT_CONFIG_VALUE_4", "never"),
    ("GIT_CONFIG_KEY_5", "core.sshCommand"),
    ("GIT_CONFIG_VALUE_5", "false"),
    ("GIT_CONFIG_KEY_6", "credential.helper"),
    ("GIT_CONFIG_VALUE_6", ""),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_and_the_direct_launch_set_the_same_git_environment() {
        let unset = format!("unset {}; ", GIT_UNSET.join(" "));
        assert!(CLEAN_PREAMBLE.contains(&unset), "{CLEAN_PREAMBLE}");
        let set: Vec<String> = GIT_SET.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let export = format!("export {}; ", set.join(" "));
        assert!(CLEAN_PREAMBLE.contains(&export), "{CLEAN_PREAMBLE}");
    }
}
