//! `parsers check --parser NAME FILE`: what a tool-call parser extracts from a file of raw model
//! output (`-` reads stdin), for authors debugging a model's format, as a report or (`--json`)
//! one JSON object for scripts; `parsers list` names the formats with their vLLM/SGLang aliases.
//!
//! `check --json` prints `{"parser", "offered", "content", "tool_calls": [{"id", "type",
//! "function": {"name", "arguments"}, "arguments_error"}]}`: `content` is null when empty,
//! `arguments_error` null when the arguments are valid JSON (else the message the agent loop
//! would answer the call with). `list --json` prints `[{"name", "aliases"}]`.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Arg, ArgAction, ArgMatches, Command};
use serde_json::{json, Value};

use crate::parsers::{self, Parsed};

/// The clap definition of `parsers`.
pub fn command() -> Command {
    Command::new("parsers")
        .about("Inspect the tool-call parsers (--env.tool_call_parser)")
        .subcommand_required(true)
        .subcommand(
            Command::new("list")
                .about("Print every parser with its aliases (the vLLM / SGLang names)")
                .arg(json_flag("Print a JSON list of {name, aliases}")),
        )
        .subcommand(
            Command::new("check")
                .about("Print the content and tool calls a parser extracts from raw model output")
                .arg(
                    Arg::new("parser")
                        .long("parser")
                        .short('p')
                        .value_name("NAME")
                        .default_value("hermes")
                        .help("Parser name, e.g. hermes, qwen3_coder, mistral, kimi_k2"),
                )
                .arg(
                    Arg::new("file")
                        .value_name("FILE")
                        .required(true)
                        .value_parser(clap::value_parser!(PathBuf))
                        .help("File with the model's raw text (- for stdin)"),
                )
                .arg(
                    Arg::new("tools")
                        .long("tools")
                        .value_name("NAMES")
                        .value_delimiter(',')
                        .help("Offered tool names, comma-separated (auto reads unmarked JSON calls only for these)"),
                )
                .arg(json_flag("Print one JSON object instead of a report")),
        )
}

fn json_flag(help: &'static str) -> Arg {
    Arg::new("json")
        .long("json")
        .action(ArgAction::SetTrue)
        .help(help)
}

/// The registered formats as JSON: `[{"name", "aliases"}]`.
pub fn list_json() -> Value {
    parsers::families()
        .iter()
        .map(|f| json!({"name": f.names[0], "aliases": &f.names[1..]}))
        .collect()
}

/// One line per format: the canonical name, then its aliases.
pub fn list_text() -> String {
    parsers::families()
        .iter()
        .map(|f| match &f.names[1..] {
            [] => format!("{}\n", f.names[0]),
            aliases => format!("{:<16} aliases: {}\n", f.names[0], aliases.join(", ")),
        })
        .collect()
}

/// The parse as JSON: content, tool calls, and per call whether its arguments are valid.
pub fn report_json(parser: &str, offered: &[&str], parsed: &Parsed) -> Value {
    let calls: Vec<Value> = parsed
        .calls
        .iter()
        .map(|c| {
            let error = crate::agent::parse_arguments(&c.function.arguments).err();
            json!({"id": c.id, "type": c.kind,
                   "function": {"name": c.function.name, "arguments": c.function.arguments},
                   "arguments_error": error})
        })
        .collect();
    json!({"parser": parser, "offered": offered, "content": parsed.content, "tool_calls": calls})
}

/// The parse as a human-readable report.
pub fn report_text(parser: &str, parsed: &Parsed) -> String {
    let mut out = format!("parser: {parser}\n");
    match &parsed.content {
        Some(c) => out.push_str(&format!("content: {c:?}\n")),
        None => out.push_str("content: (none)\n"),
    }
    out.push_str(&format!("tool calls: {}\n", parsed.calls.len()));
    for (i, c) in parsed.calls.iter().enumerate() {
        let name = if c.function.name.is_empty() {
            "(no name)"
        } else {
            &c.function.name
        };
        out.push_str(&format!(
            "  [{}] {name}  id={}\n      arguments: {}\n",
            i + 1,
            c.id,
            c.function.arguments
        ));
        if let Err(e) = crate::agent::parse_arguments(&c.function.arguments) {
            out.push_str(&format!(
                "      ! invalid arguments ({e}): the agent loop answers this call with an error\n"
            ));
        }
    }
    out
}

/// Runs `parsers`.
pub fn run(matches: &ArgMatches) -> anyhow::Result<()> {
    match matches.subcommand() {
        Some(("list", m)) => {
            if m.get_flag("json") {
                println!("{}", list_json());
            } else {
                print!("{}", list_text());
            }
            Ok(())
        }
        Some(("check", m)) => {
            let name = m.get_one::<String>("parser").expect("has a default");
            let parser = parsers::get(name)?;
            let file = m.get_one::<PathBuf>("file").expect("FILE is required");
            let text = if file.as_os_str() == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read stdin")?;
                s
            } else {
                let bytes = std::fs::read(file)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                String::from_utf8_lossy(&bytes).into_owned()
            };
            let offered: Vec<&str> = m
                .get_many::<String>("tools")
                .map(|v| v.map(String::as_str).collect())
                .unwrap_or_default();
            let parsed = parser.parse_offered(&text, &offered);
            if m.get_flag("json") {
                println!("{}", report_json(name, &offered, &parsed));
            } else {
                print!("{}", report_text(name, &parsed));
            }
            Ok(())
        }
        _ => anyhow::bail!("usage: parsers check --parser NAME FILE, or parsers list"),
    }
}
