//! `cli.md`: the subcommands of an environment binary and their options, walked from the clap
//! command the binary parses with.

use clap::{Arg, Command};

use crate::config::cli::command;
use crate::config::{EnvDescriptor, HermesEnvConfig, NoConfig};

use super::markdown::{code, header, table};

/// What the pages call the environment binary.
const BIN: &str = "<env>";

/// The page.
pub fn page() -> String {
    let desc = EnvDescriptor::new::<NoConfig>(BIN, "", HermesEnvConfig::default());
    let mut out = header(
        "Command line",
        "Every environment binary (`<env>` below) has the three Atropos modes and the utility \
         subcommands; `<env> <subcommand> --help` prints the same, with an environment's own \
         `--env.*` flags.",
    );
    for sub in command(BIN, &desc, &crate::commands::definitions(&desc)).get_subcommands() {
        subcommand(&mut out, BIN, sub);
    }
    out
}

/// The section of `cmd` (run as `parent cmd`), then those of its visible subcommands.
fn subcommand(out: &mut String, parent: &str, cmd: &Command) {
    if cmd.is_hide_set() {
        return;
    }
    let path = format!("{parent} {}", cmd.get_name());
    out.push_str(&format!("\n## {}\n\n", code(&path)));
    if let Some(about) = cmd.get_about() {
        out.push_str(&format!("{about}.\n"));
    }
    let (grouped, own): (Vec<&Arg>, Vec<&Arg>) = cmd
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .partition(|arg| arg.get_help_heading().is_some());
    if !own.is_empty() {
        out.push_str(&table(
            &["Option", "Default", "Description"],
            own.into_iter().map(|arg| {
                let defaults: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| code(&v.to_string_lossy()))
                    .collect();
                vec![code(&usage(arg)), defaults.join(" "), help(arg)]
            }),
        ));
    }
    let mut headings: Vec<&str> = grouped
        .iter()
        .filter_map(|arg| arg.get_help_heading())
        .collect();
    headings.dedup();
    if !headings.is_empty() {
        out.push_str(&format!(
            "\nAnd the flags of [flags.md](flags.md): {}.\n",
            headings.join(", ")
        ));
    }
    for sub in cmd.get_subcommands() {
        subcommand(out, &path, sub);
    }
}

/// How an argument is written: `-o, --output <FILE.html>`, `<DIR>…`.
fn usage(arg: &Arg) -> String {
    let values: Vec<String> = match arg.get_value_names() {
        Some(names) => names.iter().map(|n| format!("<{n}>")).collect(),
        None => vec![format!("<{}>", arg.get_id().as_str().to_uppercase())],
    };
    let repeats = matches!(arg.get_action(), clap::ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let mut text = match (arg.get_short(), arg.get_long()) {
        (Some(short), Some(long)) => format!("-{short}, --{long}"),
        (None, Some(long)) => format!("--{long}"),
        (Some(short), None) => format!("-{short}"),
        (None, None) => String::new(),
    };
    if arg.get_action().takes_values() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&values.join(" "));
    }
    if repeats {
        text.push('…');
    }
    text
}

/// The argument's help, with where it also applies.
fn help(arg: &Arg) -> String {
    let mut help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    if arg.is_required_set() {
        help.push_str(" (required)");
    }
    if arg.is_global_set() {
        help.push_str(" (also after a subcommand)");
    }
    help.trim().to_owned()
}
