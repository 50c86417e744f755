//! `flags.md`: every `--env.*`, `--openai.*` and run flag, from the config sections' field
//! tables and defaults (what `--help` and parsing are built from too).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::config::{
    manager_fields, ApiServerConfig, ConfigSection, EnvDescriptor, FieldSpec, FlagShape,
    HermesEnvConfig, ManagerConfig, Mode, NoConfig, ScalarKind,
};

use super::markdown::{code, header, table};

/// The page.
pub fn page() -> String {
    let shared = EnvDescriptor::new::<NoConfig>("", "", HermesEnvConfig::default());
    let defaults = shared.env_defaults(Mode::Serve);
    let mut out = header(
        "Flags",
        "The flags of `serve`, `process` and `evaluate`. Each is also a key of the YAML file \
         given with `--config` (under `env:` or `openai:`); flags win over YAML, YAML over the \
         defaults. A flag that takes `null` clears its value with `None`. A number outside \
         its range (`INT in 1..=4096`) is refused with the range named, from a flag, the YAML \
         file or an environment's own default alike.",
    );
    out.push_str(
        "\n## Environment: `--env.*`\n\nThe shared fields of every environment. An \
         environment's own `#[config]` fields follow them in its `--help`, and \
         `#[hermes_env(field = value)]` changes a default for that environment.",
    );
    out.push_str(&process_defaults(
        &defaults,
        &shared.env_defaults(Mode::Process),
    ));
    out.push_str(&fields("--env.", &HermesEnvConfig::fields(), &defaults));
    out.push_str(
        "\n## Inference server: `--openai.*`\n\nOne server; YAML `openai:` may also be a list \
         of them.\n",
    );
    out.push_str(&fields(
        "--openai.",
        &ApiServerConfig::fields(),
        &map(&ApiServerConfig::default()),
    ));
    out.push_str("\n## Run\n");
    out.push_str(&fields(
        "--",
        &manager_fields(),
        &map(&ManagerConfig::default()),
    ));
    out
}

/// The sentence naming the env defaults `process` changes, if any.
fn process_defaults(serve: &Map<String, Value>, process: &Map<String, Value>) -> String {
    let changed: Vec<String> = process
        .iter()
        .filter(|(name, value)| serve.get(*name) != Some(*value))
        .map(|(name, value)| format!("{} ({})", code(name), code(&value.to_string())))
        .collect();
    if changed.is_empty() {
        return "\n".to_owned();
    }
    format!(
        " `process` starts from other defaults for {}.\n",
        changed.join(", ")
    )
}

/// The table of one section's fields.
fn fields(prefix: &str, fields: &[FieldSpec], defaults: &Map<String, Value>) -> String {
    table(
        &["Flag", "Type", "Default", "Description"],
        fields.iter().map(|field| {
            let default = defaults.get(field.name).unwrap_or(&Value::Null);
            vec![
                code(&format!("{prefix}{}", field.name)),
                match field.range {
                    Some(range) => {
                        format!("{} in {}", shape(field.shape), code(&range.to_string()))
                    }
                    None => shape(field.shape),
                },
                code(&default.to_string()),
                field.help.trim().to_owned(),
            ]
        }),
    )
}

/// The value a flag takes: its `--help` placeholder, or its choices.
fn shape(shape: FlagShape) -> String {
    let kind = match shape.kind {
        ScalarKind::Choice(choices) => {
            let choices: Vec<String> = choices.iter().map(|c| code(c)).collect();
            choices.join(", ")
        }
        _ => code(shape.value_name()),
    };
    if shape.nullable {
        format!("{kind} or `null`")
    } else {
        kind
    }
}

/// A section's defaults by field name.
fn map(section: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(section) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}
