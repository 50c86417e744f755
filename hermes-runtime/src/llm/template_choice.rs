//! Which of a tokenizer's chat templates renders a chat, chosen as transformers'
//! `PreTrainedTokenizerBase.get_chat_template` chooses (transformers 5.24): a `chat_template`
//! may be one template or a list of named ones (`[{"name": "default", …}, {"name":
//! "tool_use", …}]`, as Hermes 3 repositories ship). With named templates and no name asked
//! for, `tool_use` renders a chat that is passed tools when there is one, else `default`;
//! without a `default`, transformers raises. A name asked for (`--env.chat_template_name`)
//! renders every chat. Upstream Atropos and vLLM render through transformers and so get its
//! choice; before this we always took `default` (or the first), so the tool-use chats of a
//! Hermes 3 tokenizer were rendered with a template the server did not use.

use serde_json::Value;

use super::tokenizer::TokenizerError;

/// The key of the single template in the template environment.
pub(crate) const SINGLE: &str = "chat";

/// A tokenizer's chat templates, by name, and the rule that picks one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TemplateChoice {
    /// One template, keyed [`SINGLE`].
    Single,
    /// Named templates (keyed by name), and the one asked for by name, if any.
    Named {
        /// Names in the config's order.
        names: Vec<String>,
        /// `--env.chat_template_name`.
        chosen: Option<String>,
    },
}

/// The templates of a config's `chat_template` value: one (a string) or named ones (a list of
/// `{"name", "template"}` entries), with their keys in the template environment.
pub(crate) fn templates_of(
    value: Option<&Value>,
) -> Option<(TemplateChoice, Vec<(String, String)>)> {
    match value? {
        Value::String(s) => Some((TemplateChoice::Single, vec![(SINGLE.to_owned(), s.clone())])),
        Value::Array(list) => {
            let named: Vec<(String, String)> = list
                .iter()
                .filter_map(|t| {
                    let name = t.get("name")?.as_str()?;
                    let text = t.get("template")?.as_str()?;
                    Some((name.to_owned(), text.to_owned()))
                })
                .collect();
            if named.is_empty() {
                return None;
            }
            let names = named.iter().map(|(n, _)| n.clone()).collect();
            Some((
                TemplateChoice::Named {
                    names,
                    chosen: None,
                },
                named,
            ))
        }
        _ => None,
    }
}

impl TemplateChoice {
    /// The choice with the template named `name` rendering every chat; an error naming the
    /// templates there are when there is no such one (transformers would render the name
    /// itself as a template).
    pub fn with_name(self, name: &str, source: &str) -> Result<Self, TokenizerError> {
        match self {
            TemplateChoice::Named { names, .. } if names.iter().any(|n| n == name) => {
                Ok(TemplateChoice::Named {
                    names,
                    chosen: Some(name.to_owned()),
                })
            }
            TemplateChoice::Named { names, .. } => Err(TokenizerError::Template(format!(
                "--env.chat_template_name {name}: {source} has no chat template of that name \
                 (it has {})",
                names.join(", ")
            ))),
            TemplateChoice::Single => Err(TokenizerError::Template(format!(
                "--env.chat_template_name {name}: {source} has a single chat template, no named ones"
            ))),
        }
    }

    /// The key of the template that renders a chat, passed tools or not.
    pub fn key(&self, tools: bool) -> Result<&str, TokenizerError> {
        let TemplateChoice::Named { names, chosen } = self else {
            return Ok(SINGLE);
        };
        if let Some(name) = chosen {
            return Ok(name);
        }
        let has = |n: &str| names.iter().find(|m| *m == n).map(String::as_str);
        let tool_use = has("tool_use").filter(|_| tools);
        tool_use.or_else(|| has("default")).ok_or_else(|| {
            TokenizerError::Template(format!(
                "this tokenizer has several chat templates ({}) and none named default: pick \
                 one with --env.chat_template_name",
                names.join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hermes3() -> TemplateChoice {
        let config =
            json!([{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]);
        let (choice, templates) = templates_of(Some(&config)).unwrap();
        assert_eq!(
            templates,
            [
                ("default".into(), "D".into()),
                ("tool_use".into(), "T".into())
            ]
        );
        choice
    }

    #[test]
    fn tool_use_renders_chats_with_tools_default_the_others_and_a_name_every_chat() {
        let choice = hermes3();
        assert_eq!(choice.key(true).unwrap(), "tool_use");
        assert_eq!(choice.key(false).unwrap(), "default");
        let chosen = choice.clone().with_name("default", "t").unwrap();
        assert_eq!(chosen.key(true).unwrap(), "default");
        let err = choice.with_name("rag", "t").unwrap_err().to_string();
        assert!(
            err.contains("has no chat template of that name (it has default, tool_use)"),
            "{err}"
        );
    }

    #[test]
    fn without_a_default_only_tool_use_chats_render_and_a_single_template_has_no_names() {
        let config =
            json!([{"name": "tool_use", "template": "T"}, {"name": "rag", "template": "R"}]);
        let (choice, _) = templates_of(Some(&config)).unwrap();
        assert_eq!(choice.key(true).unwrap(), "tool_use");
        let err = choice.key(false).unwrap_err().to_string();
        assert!(err.contains("none named default"), "{err}");
        let (single, templates) = templates_of(Some(&json!("S"))).unwrap();
        assert_eq!(templates, [(SINGLE.into(), "S".into())]);
        assert_eq!(single.key(true).unwrap(), SINGLE);
        assert!(single.with_name("default", "t").is_err());
        assert!(templates_of(Some(&json!([]))).is_none());
    }
}
