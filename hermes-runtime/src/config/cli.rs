//! The generated binary's command line: `serve|process|evaluate` with every `--env.*`,
//! `--openai.*` and manager flag, built from the field tables so help and parsing agree.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use serde_json::{Map, Value};

use super::flags::{parse_flag_text, FieldSpec, ScalarKind};
use super::resolve::{manager_fields, EnvDescriptor, FlagValues, Mode};
use super::{ApiServerConfig, ConfigError, ConfigSection};

/// What the command line asked for.
#[derive(Debug)]
pub enum Invocation {
    /// Run an Atropos mode with these flag values.
    Run(Mode, Box<FlagValues>),
    /// Print this text (help) and exit successfully.
    Print(String),
    /// Run a utility subcommand (see [`crate::commands`]) with its parsed arguments.
    Utility(String, Box<ArgMatches>),
}

const MODES: [(Mode, &str); 3] = [
    (
        Mode::Serve,
        "Online RL: register with an Atropos trajectory API and send scored groups",
    ),
    (
        Mode::Process,
        "Offline rollouts: write scored groups to JSONL and an HTML viewer",
    ),
    (
        Mode::Evaluate,
        "Benchmark: run eval items and write metrics.json and samples.jsonl",
    ),
];

fn render_default(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "None".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn flag_arg(
    prefix: &str,
    field: &FieldSpec,
    default: Option<&Value>,
    heading: &'static str,
) -> Arg {
    let long = if prefix.is_empty() {
        field.name.to_owned()
    } else {
        format!("{prefix}.{}", field.name)
    };
    let shape = field.shape;
    let help = format!(
        "{} [default: {}]",
        field.help.trim(),
        render_default(default)
    );
    let mut arg = Arg::new(long.clone())
        .long(long)
        .help(help)
        .value_name(shape.value_name())
        .action(ArgAction::Set)
        .help_heading(heading)
        .value_parser(move |s: &str| parse_flag_text(shape, s));
    match shape.kind {
        ScalarKind::Int | ScalarKind::Float => arg = arg.allow_negative_numbers(true),
        ScalarKind::Bool => arg = arg.num_args(0..=1).default_missing_value("true"),
        _ => {}
    }
    arg
}

fn mode_command(desc: &EnvDescriptor, mode: Mode, about: &'static str) -> Command {
    let env_defaults = desc.env_defaults(mode);
    // `--openai.*` flags are merged over the first server, so its defaults are the ones shown:
    // the environment's declared server (e.g. OpenRouter), not the generic ones.
    let declared = desc.server_defaults();
    let server_defaults = declared.first().cloned().unwrap_or_default();
    let server_heading = if declared.len() > 1 {
        "Inference server (--openai.*: the first of the environment's declared servers)"
    } else {
        "Inference server (--openai.*)"
    };
    let manager_defaults =
        serde_json::to_value(super::ManagerConfig::default()).unwrap_or_default();
    let mut cmd = Command::new(mode.as_str()).about(about).arg(
        Arg::new("config")
            .long("config")
            .value_name("FILE")
            .help("YAML file with env:, openai: (a map or a list of servers), slurm:, testing:")
            .value_parser(clap::value_parser!(PathBuf)),
    );
    for field in desc.env_fields() {
        cmd = cmd.arg(flag_arg(
            "env",
            &field,
            env_defaults.get(field.name),
            "Environment (--env.*)",
        ));
    }
    for field in ApiServerConfig::fields() {
        cmd = cmd.arg(flag_arg(
            "openai",
            &field,
            server_defaults.get(field.name),
            server_heading,
        ));
    }
    for field in manager_fields() {
        cmd = cmd.arg(flag_arg(
            "",
            &field,
            manager_defaults.get(field.name),
            "Run",
        ));
    }
    cmd
}

/// The full command for an environment binary named `bin`: the three modes plus the
/// `utilities` subcommands the binary offers (given by the caller, so config knows no
/// commands).
pub fn command(bin: &str, desc: &EnvDescriptor, utilities: &[Command]) -> Command {
    let mut cmd = Command::new(bin.to_owned())
        .about(format!("{}: {}", desc.name, desc.about.trim()))
        .subcommand_required(true)
        .args_override_self(true)
        .disable_version_flag(true);
    for (mode, about) in MODES {
        cmd = cmd.subcommand(mode_command(desc, mode, about).args_override_self(true));
    }
    for utility in utilities {
        cmd = cmd.subcommand(utility.clone());
    }
    cmd
}

fn collect(m: &ArgMatches, prefix: &str, fields: &[FieldSpec]) -> Map<String, Value> {
    let mut out = Map::new();
    for f in fields {
        let id = if prefix.is_empty() {
            f.name.to_owned()
        } else {
            format!("{prefix}.{}", f.name)
        };
        if m.value_source(&id) == Some(ValueSource::CommandLine) {
            if let Some(v) = m.get_one::<Value>(&id) {
                out.insert(f.name.to_owned(), v.clone());
            }
        }
    }
    out
}

/// `cmd` with the `process` mode's flags (`--config`, `--env.*`, `--openai.*` and the run's
/// own): a utility that acts on a run's configuration takes them anywhere among its own
/// flags, and its help lists them. [`given_process_flags`] reads them back.
pub fn with_process_flags(cmd: Command, desc: &EnvDescriptor) -> Command {
    process_mode(desc)
        .get_arguments()
        .fold(cmd.args_override_self(true), |cmd, arg| {
            cmd.arg(arg.clone())
        })
}

/// The `process` mode's flags a utility built by [`with_process_flags`] was given, as
/// arguments for [`resolve_flags`] (each `--name=value`, as typed).
pub fn given_process_flags(desc: &EnvDescriptor, matches: &ArgMatches) -> Vec<OsString> {
    let mut given = Vec::new();
    for arg in process_mode(desc).get_arguments() {
        let (id, Some(long)) = (arg.get_id().as_str(), arg.get_long()) else {
            continue;
        };
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        for raw in matches.get_raw(id).into_iter().flatten() {
            let mut flag = OsString::from(format!("--{long}="));
            flag.push(raw);
            given.push(flag);
        }
    }
    given
}

fn process_mode(desc: &EnvDescriptor) -> Command {
    mode_command(desc, Mode::Process, "")
}

/// Turns a clap error into one line: the error plus clap's suggestion, if any.
fn one_line_error(err: &clap::Error, bin: &str, subcommand: Option<&str>) -> String {
    let rendered = err.render().to_string();
    let mut parts: Vec<String> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("error:") || l.starts_with("tip:"))
        .map(|l| l.trim_start_matches("error: ").to_owned())
        .collect();
    if parts.is_empty() {
        parts.push(
            rendered
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .to_owned(),
        );
    }
    let help = match subcommand {
        Some(name) => format!("{bin} {name} --help"),
        None => format!("{bin} --help"),
    };
    format!("{} (see '{help}')", parts.join("; "))
}

/// The (nested) subcommand `args` name, e.g. `sandbox reap`: whose help a parse error points to.
fn subcommand_named(top: &Command, args: &[OsString]) -> Option<String> {
    let mut path: Vec<&str> = Vec::new();
    let mut cmd = top;
    for arg in args.iter().skip(1).filter_map(|a| a.to_str()) {
        if let Some(sub) = cmd.find_subcommand(arg) {
            path.push(sub.get_name());
            cmd = sub;
        }
    }
    (!path.is_empty()).then(|| path.join(" "))
}

/// Parses `args` (including the program name) against the modes and `utilities`.
pub fn parse<I, T>(
    bin: &str,
    desc: &EnvDescriptor,
    utilities: &[Command],
    args: I,
) -> Result<Invocation, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cmd = command(bin, desc, utilities);
    let named = subcommand_named(&cmd, &args);
    let matches = match cmd.try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                | clap::error::ErrorKind::DisplayVersion => {
                    Ok(Invocation::Print(e.render().to_string()))
                }
                _ => Err(ConfigError::Usage(one_line_error(
                    &e,
                    bin,
                    named.as_deref(),
                ))),
            }
        }
    };
    let (name, sub) = matches.subcommand().expect("a subcommand is required");
    let Some(mode) = MODES.iter().map(|(m, _)| *m).find(|m| m.as_str() == name) else {
        return Ok(Invocation::Utility(name.to_owned(), Box::new(sub.clone())));
    };
    let values = FlagValues {
        env: collect(sub, "env", &desc.env_fields()),
        openai: collect(sub, "openai", &ApiServerConfig::fields()),
        manager: collect(sub, "", &manager_fields()),
        config_file: sub.get_one::<PathBuf>("config").cloned(),
    };
    Ok(Invocation::Run(mode, Box::new(values)))
}

/// The config `mode` would run with, given that mode's `flags` (`--config FILE`, `--env.*`,
/// `--openai.*`): for commands that act on a run's configuration without running it (`check`,
/// `hack`, `sandbox list|reap`).
pub fn resolve_flags<I, T>(
    desc: &EnvDescriptor,
    mode: Mode,
    flags: I,
) -> Result<super::ResolvedConfig, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let argv = [desc.name, mode.as_str()]
        .into_iter()
        .map(OsString::from)
        .chain(flags.into_iter().map(Into::into));
    match parse(desc.name, desc, &[], argv)? {
        Invocation::Run(mode, values) => super::resolve(desc, mode, *values),
        Invocation::Print(text) => Err(ConfigError::Usage(format!(
            "expected {} flags, not a request for help: {}",
            mode.as_str(),
            text.lines().next().unwrap_or_default()
        ))),
        Invocation::Utility(name, _) => Err(ConfigError::Usage(format!(
            "expected {} flags, got the subcommand '{name}'",
            mode.as_str()
        ))),
    }
}
