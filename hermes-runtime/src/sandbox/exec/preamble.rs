//! The clean context a verifier's commands run in, as a preamble of the framework's own
//! ([`ExecRequest::with_preamble`](crate::sandbox::api::ExecRequest::with_preamble)).

/// Run before every reward command: the verifier starts in the sandbox home (not wherever the
/// agent's shell was left), with a `PATH` stripped of the entries the agent fills by default
/// (relative or empty entries, anything under the home), without Python's user site
/// (`~/.local`) and without writing byte-code the agent could later see.
pub const CLEAN_PREAMBLE: &str = r#"hermes_path=; IFS=:; for hermes_e in $PATH; do case "$hermes_e" in ''|.|[!/]*|"$HOME"|"$HOME"/*) ;; *) hermes_path="${hermes_path:+$hermes_path:}$hermes_e";; esac; done; unset IFS hermes_e; export PATH="$hermes_path" PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1; unset hermes_path; hash -r"#;
