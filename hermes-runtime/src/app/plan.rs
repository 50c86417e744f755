//! The run's plan: what to start, decided from the resolved config alone — before any daemon,
//! server or network is touched — so a wrong backend, parser or tokenizer setting is one clear
//! line at once, and the choice is a value tests can check.

use anyhow::bail;
use serde_json::{Map, Value};

use crate::config::{Mode, ResolvedConfig, ServerType};
use crate::parsers::{self, ToolCallParser};
pub use crate::sandbox::Backend;

/// How the model is called, which decides where trainer tokens come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Chat completions (Phase 1): tokens re-rendered with a tokenizer, or placeholders.
    Chat,
    /// vLLM/SGLang `/generate` with exact tokens and logprobs (Phase 2).
    Managed,
}

/// What a run starts, before it starts anything.
pub struct RunPlan {
    /// The mode.
    pub mode: Mode,
    /// The sandbox backend.
    pub backend: Backend,
    /// Phase 1 or Phase 2.
    pub phase: Phase,
    /// The tokenizer to load (a local path or a hub id).
    pub tokenizer: String,
    /// The parser for tool calls in raw model text.
    pub parser: &'static dyn ToolCallParser,
    /// Its name (`hermes` when the configured one is unknown, as upstream falls back).
    pub parser_name: String,
    /// `chat_template_kwargs` of `--env.extra_body` (e.g. `enable_thinking`): the server
    /// renders Phase 1 chats with them, so our own renders (trainer tokens, Phase 2 prompts)
    /// must see the same.
    pub template_kwargs: Map<String, Value>,
    /// Lines to log at WARN before the run starts.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for RunPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunPlan")
            .field("mode", &self.mode)
            .field("backend", &self.backend)
            .field("phase", &self.phase)
            .field("tokenizer", &self.tokenizer)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl RunPlan {
    /// The plan for `cfg`; an error names the setting to change.
    pub fn new(cfg: &ResolvedConfig) -> anyhow::Result<RunPlan> {
        let backend = Backend::from_config(&cfg.env)?;
        let phase = match cfg.servers.first().map(|s| s.server_type) {
            Some(ServerType::Vllm | ServerType::Sglang) => Phase::Managed,
            _ => Phase::Chat,
        };
        if !cfg.manager.testing {
            if let Some(missing) = cfg.servers.iter().find_map(|s| s.missing_key_variable()) {
                bail!("{missing}");
            }
        }
        let mut warnings = cfg.warnings.clone();
        let (parser, parser_name) = match parsers::get(&cfg.env.tool_call_parser) {
            Ok(parser) => (parser, cfg.env.tool_call_parser.clone()),
            Err(e) => {
                warnings.push(format!("{e}; falling back to the hermes parser as upstream does (set --env.tool_call_parser to one of the names listed by the `parsers` subcommand)"));
                (
                    &parsers::HermesParser as &'static dyn ToolCallParser,
                    "hermes".to_owned(),
                )
            }
        };
        // An environment that offers no tools runs none of the model's commands: its sandbox
        // is made only if its verifier asks for one, for the author's own commands.
        let offers_tools = crate::setup::offers_tools(&cfg.env);
        if cfg.mode == Mode::Serve && backend == Backend::Local && offers_tools {
            warnings.push("the local sandbox backend runs the model's commands as this user on this host and network (not isolated); use --env.terminal_backend docker for training".into());
        }
        if cfg.servers.iter().any(|s| s.server_type == ServerType::Trl) {
            warnings.push("trl servers are driven through chat completions (Phase 1); token tracking needs vllm or sglang".into());
        }
        Ok(RunPlan {
            mode: cfg.mode,
            backend,
            phase,
            tokenizer: tokenizer_name(cfg, phase)?,
            parser,
            parser_name,
            template_kwargs: template_kwargs(cfg)?,
            warnings,
        })
    }
}

/// `extra_body.chat_template_kwargs`, which must be an object (vLLM and SGLang take it as the
/// template's keyword arguments).
fn template_kwargs(cfg: &ResolvedConfig) -> anyhow::Result<Map<String, Value>> {
    match cfg
        .env
        .extra_body
        .as_ref()
        .and_then(|b| b.get("chat_template_kwargs"))
    {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(kwargs)) => Ok(kwargs.clone()),
        Some(other) => bail!(
            "env.extra_body.chat_template_kwargs: must be an object of template variables such \
             as {{\"enable_thinking\": false}}, got {other}"
        ),
    }
}

/// The tokenizer of the run: in Phase 2 the servers' `--openai.tokenizer_name` when they set
/// one (as upstream's vLLM/SGLang servers read it; every server must name the same one, since
/// one run's tokens come from one tokenizer), else `--env.tokenizer_name`.
fn tokenizer_name(cfg: &ResolvedConfig, phase: Phase) -> anyhow::Result<String> {
    let mut named = cfg
        .servers
        .iter()
        .map(|s| s.tokenizer_name.as_str())
        .filter(|n| phase == Phase::Managed && !n.is_empty() && *n != "none");
    let Some(first) = named.next() else {
        return Ok(cfg.env.tokenizer_name.clone());
    };
    if let Some(other) = named.find(|n| n != &first) {
        bail!("the servers name different tokenizers ('{first}' and '{other}'); Phase 2 needs one tokenizer for the whole run: set the same --openai.tokenizer_name on every server");
    }
    Ok(first.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cli::{parse, Invocation};
    use crate::config::{resolve, EnvDescriptor, HermesEnvConfig, NoConfig};

    fn plan(args: &[&str]) -> anyhow::Result<RunPlan> {
        let desc = EnvDescriptor::new::<NoConfig>("t", "", HermesEnvConfig::default());
        let argv: Vec<&str> = ["t"].iter().chain(args).copied().collect();
        let Invocation::Run(mode, flags) = parse("t", &desc, &[], argv)? else {
            panic!("a run");
        };
        RunPlan::new(&resolve(&desc, mode, *flags)?)
    }

    #[test]
    fn the_plan_is_decided_from_the_config_alone() {
        let p = plan(&["process"]).unwrap();
        assert_eq!((p.backend, p.phase), (Backend::Local, Phase::Chat));
        assert_eq!(p.tokenizer, HermesEnvConfig::default().tokenizer_name);
        let p = plan(&[
            "serve",
            "--openai.server_type",
            "vllm",
            "--env.terminal_backend",
            "docker",
        ])
        .unwrap();
        assert_eq!((p.backend, p.phase), (Backend::Docker, Phase::Managed));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let p = plan(&["serve", "--env.enabled_toolsets", "terminal"]).unwrap();
        assert!(
            p.warnings.iter().any(|w| w.contains("not isolated")),
            "{:?}",
            p.warnings
        );
        // No tools offered: no command of the model's runs, so nothing to warn about.
        let p = plan(&["serve"]).unwrap();
        assert!(
            !p.warnings.iter().any(|w| w.contains("not isolated")),
            "{:?}",
            p.warnings
        );
        let p = plan(&["process", "--openai.server_type", "trl"]).unwrap();
        assert!(
            p.warnings.iter().any(|w| w.contains("trl servers")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn a_phase_2_server_tokenizer_wins_and_must_agree() {
        let p = plan(&[
            "process",
            "--openai.server_type",
            "sglang",
            "--openai.tokenizer_name",
            "org/tok",
        ])
        .unwrap();
        assert_eq!(p.tokenizer, "org/tok");
        // Phase 1 ignores the server's tokenizer, as upstream does.
        let p = plan(&["process", "--openai.tokenizer_name", "org/tok"]).unwrap();
        assert_eq!(p.tokenizer, HermesEnvConfig::default().tokenizer_name);
    }

    #[test]
    fn a_wrong_backend_is_refused_and_an_unknown_parser_falls_back() {
        let e = plan(&["process", "--env.terminal_backend", "modal"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("supported backends: local, docker, ssh"),
            "{e}"
        );
        let p = plan(&["process", "--env.tool_call_parser", "nonesuch"]).unwrap();
        assert_eq!(p.parser_name, "hermes");
        assert!(
            p.warnings.iter().any(|w| w.contains("nonesuch")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn chat_template_kwargs_come_from_extra_body_and_must_be_an_object() {
        let p = plan(&["process"]).unwrap();
        assert!(p.template_kwargs.is_empty());
        let p = plan(&[
            "process",
            "--env.extra_body",
            r#"{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 20}"#,
        ])
        .unwrap();
        assert_eq!(
            Value::Object(p.template_kwargs),
            serde_json::json!({"enable_thinking": false})
        );
        let e = plan(&[
            "process",
            "--env.extra_body",
            r#"{"chat_template_kwargs": "enable_thinking"}"#,
        ])
        .unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("env.extra_body.chat_template_kwargs: must be an object"),
            "{e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
