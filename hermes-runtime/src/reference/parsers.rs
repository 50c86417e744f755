//! `parsers.md`: the tool-call parsers, from the parsers' registry.

use crate::config::HermesEnvConfig;
use crate::parsers::families;

use super::markdown::{code, header, table};

/// The page.
pub fn page() -> String {
    let intro = format!(
        "The values of `--env.tool_call_parser` (default {}): the format raw model text is \
         parsed as (Phase 2 output, and Phase 1 replies whose content holds markup). Aliases \
         are the names vLLM and SGLang use. `<env> parsers list` prints the names and \
         `<env> parsers check --parser NAME FILE` shows what a parser reads from a file.",
        code(&HermesEnvConfig::default().tool_call_parser)
    );
    let mut out = header("Tool-call parsers", &intro);
    out.push_str(&table(
        &["Parser", "Aliases", "Models and format"],
        families().iter().map(|family| {
            let aliases: Vec<String> = family.names[1..].iter().map(|a| code(a)).collect();
            vec![
                code(family.names[0]),
                aliases.join(", "),
                family.models.to_owned(),
            ]
        }),
    ));
    out
}
