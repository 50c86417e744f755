//! The run's services, built from its [`RunPlan`]: the sandbox backend, the tokenizer and
//! trainer-token source, the inference pool and clients, the scripted server of `--testing`,
//! and the environment itself after `setup`. Runs, the testing kit, tests and benches build
//! their environment through the same steps.

use std::sync::Arc;

use anyhow::{bail, Context as _};
use tracing::{info, warn};

use super::plan::{Phase, RunPlan};
use crate::config::{HermesEnvConfig, Mode, ResolvedConfig, ServerType};
use crate::data::Cursors;
use crate::env::Environment;
use crate::llm::{
    ChatTokenizer, Failover, GenerateClient, LlmClient, Phase2, RetryPolicy, ServerPool,
};
use crate::modes::{write_evaluate_config, Runtime, TokenSource};
use crate::sandbox::start_backend;
use crate::setup::build_env_in;
use crate::testing::{RawTextPolicy, ReferenceBook, ReferencePolicy, ScriptedServer};

/// Everything a mode runs with.
pub struct Services<E> {
    /// The environment, after `setup` and `register_tools`.
    pub env: E,
    /// The shared services of the rollouts.
    pub rt: Runtime,
    /// The resolved config (with `--testing`, its servers point at the scripted server).
    pub cfg: ResolvedConfig,
    /// The environment's name.
    pub name: &'static str,
    /// The embedded scripted server of `--testing`; it serves as long as this lives.
    pub scripted: Option<ScriptedServer>,
    /// The dataset cursors `setup` made (their positions are checkpointed by `serve`).
    pub cursors: Cursors,
}

impl<E: Environment> Services<E> {
    /// Starts what `plan` says, in order: sandbox backend, tokenizer, scripted server
    /// (`--testing`), inference pool (health-checked), then the environment.
    pub async fn start(mut cfg: ResolvedConfig, plan: &RunPlan) -> anyhow::Result<Self> {
        for server in &cfg.servers {
            crate::config::redact::remember_secret(server.api_key.as_deref().unwrap_or(""));
        }
        // The author's container_env reaches the sandbox, where the model can print it; its
        // values are secrets to everything saved (JSONL, viewer, W&B, samples).
        for entry in cfg.env.container_env.iter().flatten() {
            if let Some((_, value)) = entry.split_once('=') {
                crate::config::redact::remember_secret(value);
            }
        }
        let name = E::descriptor().name;
        cfg.env.tool_call_parser = plan.parser_name.clone();
        if cfg.manager.testing && cfg.env.web_backend.as_deref() == Some("auto") {
            // A dry run never reaches a real search provider.
            info!("--testing: web_backend auto uses the fake web backend (canned results)");
            cfg.env.web_backend = Some("fake".into());
        }
        let sandboxes = start_backend(&cfg.env, plan.backend, name).await?.provider;
        let managed = plan.phase == Phase::Managed;
        let tokenizer = match load_tokenizer(&plan.tokenizer, managed, cfg.manager.testing).await? {
            Some(tok) => {
                let tok = with_template_kwargs(tok, &plan.template_kwargs);
                Some(Arc::new(with_template_name(
                    tok,
                    cfg.env.chat_template_name.as_deref(),
                )?))
            }
            None => None,
        };
        let (references, scripted) = match cfg.manager.testing {
            true => {
                let (book, server) = start_scripted(&mut cfg, plan, tokenizer.as_ref()).await?;
                (Some(book), Some(server))
            }
            false => (None, None),
        };
        let pool = Arc::new(ServerPool::new(
            &cfg.servers,
            RetryPolicy::from_config(&cfg.env),
            Failover::from_config(&cfg.env),
        )?);
        let tokens = token_source(plan, tokenizer, &pool, &cfg.env)?;
        refuse_untrainable(&cfg, &tokens)?;
        pool.check_health().await?;
        let llm = LlmClient::with_pool(pool, cfg.manager.max_n_completions.max(1) as u32);
        if cfg.mode == Mode::Evaluate {
            if let Some(dir) = &cfg.env.data_dir_to_save_evals {
                write_evaluate_config(dir.as_ref(), &cfg)?;
            }
        }
        let cursors = Cursors::default();
        let (env, shared, tools, distribution) = build_env_in::<E>(&cfg, &cursors).await?;
        let rt = Runtime::builder(shared, llm, sandboxes, tools)
            .distribution(distribution)
            .references(references)
            .tokens(tokens)
            .build();
        Ok(Services {
            env,
            rt,
            cfg,
            name,
            scripted,
            cursors,
        })
    }
}

/// The run's tokenizer: `name` as a local path or a hub id (through the Hugging Face cache,
/// downloading into it when online; see [`crate::hub`]). When it cannot be had: a Phase 2
/// `--testing` run uses the built-in tiny tokenizer, Phase 2 stops with the error (which names
/// the download command), Phase 1 continues with placeholder tokens after one warning naming it.
async fn load_tokenizer(
    name: &str,
    phase2: bool,
    testing: bool,
) -> anyhow::Result<Option<ChatTokenizer>> {
    use crate::llm::tokenizer::TokenizerError;
    let hub = crate::hub::HubSettings::from_env();
    match ChatTokenizer::resolve(name, &hub).await {
        Ok(tok) => Ok(Some(tok)),
        Err(e @ (TokenizerError::Hub(_) | TokenizerError::NotFound(_))) => {
            if phase2 && testing {
                info!("--testing: {e}; using the built-in tiny tokenizer");
                Ok(Some(ChatTokenizer::builtin()))
            } else if phase2 {
                Err(e.into())
            } else {
                warn!("{e}; Phase 1 continues without a tokenizer");
                Ok(None)
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The tokenizer rendering with the run's `chat_template_kwargs` (said once, so a user sees
/// that e.g. `enable_thinking` reaches the trainer tokens and Phase 2 prompts too).
fn with_template_kwargs(
    tok: ChatTokenizer,
    kwargs: &serde_json::Map<String, serde_json::Value>,
) -> ChatTokenizer {
    if kwargs.is_empty() {
        return tok;
    }
    let names: Vec<&str> = kwargs.keys().map(String::as_str).collect();
    info!(
        "chat template of {}: rendering with chat_template_kwargs {} from --env.extra_body \
         (Phase 1 trainer tokens and Phase 2 prompts alike)",
        tok.source(),
        names.join(", ")
    );
    tok.with_template_kwargs(kwargs.clone())
}

/// The tokenizer rendering every chat with its template `name` (`--env.chat_template_name`),
/// said once; without a name, transformers' choice among named templates.
fn with_template_name(tok: ChatTokenizer, name: Option<&str>) -> anyhow::Result<ChatTokenizer> {
    let Some(name) = name else {
        return Ok(tok);
    };
    let tok = tok.with_template_name(name)?;
    info!(
        "chat template of {}: rendering every chat with its template {name} from \
         --env.chat_template_name (Phase 1 trainer tokens and Phase 2 prompts alike)",
        tok.source()
    );
    Ok(tok)
}

/// Starts the embedded scripted server of `--testing` (playing the environment's reference
/// solutions) and points every server at it.
async fn start_scripted(
    cfg: &mut ResolvedConfig,
    plan: &RunPlan,
    tokenizer: Option<&Arc<ChatTokenizer>>,
) -> anyhow::Result<(ReferenceBook, ScriptedServer)> {
    let book = ReferenceBook::default();
    let policy = ReferencePolicy::new(book.clone());
    let managed = plan.phase == Phase::Managed;
    let server = match tokenizer {
        Some(tok) if managed => {
            ScriptedServer::start_with_tokenizer(policy, false, Arc::clone(tok)).await
        }
        _ if cfg.env.testing_raw_tool_calls => {
            ScriptedServer::start_with(RawTextPolicy::new(policy, plan.parser), false).await
        }
        _ => ScriptedServer::start_with(policy, false).await,
    }
    .context("cannot start the scripted inference server")?;
    info!(
        "--testing: using the embedded scripted server at {}",
        server.base_url()
    );
    for s in &mut cfg.servers {
        s.base_url = Some(server.base_url());
        if !managed {
            s.server_type = ServerType::Openai;
        }
    }
    Ok((book, server))
}

/// Where the trainer tokens come from: Phase 2's exact tokens, Phase 1 re-rendered with the
/// tokenizer, or placeholders when there is none.
fn token_source(
    plan: &RunPlan,
    tokenizer: Option<Arc<ChatTokenizer>>,
    pool: &Arc<ServerPool>,
    env: &HermesEnvConfig,
) -> anyhow::Result<TokenSource> {
    Ok(match tokenizer {
        Some(tok) if plan.phase == Phase::Managed => {
            info!(
                "Phase 2: /generate with token tracking, tokenizer {tok:?}, tool-call parser {}",
                env.tool_call_parser
            );
            TokenSource::Managed(Arc::new(Phase2 {
                client: GenerateClient::with_pool(Arc::clone(pool))?,
                tokenizer: tok,
                parser: plan.parser,
                preserve_think_blocks: env.thinking_mode,
                mask_truncated_turns: env.mask_truncated_turns,
            }))
        }
        Some(tok) => {
            info!("Phase 1 (chat completions): rollouts re-tokenized for the trainer with {tok:?}");
            TokenSource::Retokenized(tok)
        }
        None => TokenSource::Placeholder,
    })
}

/// `serve` refuses placeholder tokens (not trainable) unless asked; other modes say what
/// they are good for.
fn refuse_untrainable(cfg: &ResolvedConfig, tokens: &TokenSource) -> anyhow::Result<()> {
    if !tokens.is_placeholder() {
        return Ok(());
    }
    if cfg.mode == Mode::Serve && !cfg.env.allow_placeholder_tokens {
        bail!(
            "serve needs trainable tokens: use --openai.server_type vllm|sglang (Phase 2), or give a \
             tokenizer that can be loaded (--env.tokenizer_name DIR or a cached hub id) to re-tokenize Phase 1 chats; \
             --env.allow_placeholder_tokens true sends Phase 1 placeholder tokens anyway"
        );
    }
    if cfg.mode != Mode::Evaluate {
        warn!("Phase 1 (chat completions) without a tokenizer: tokens are placeholders, usable for SFT data and evaluation, not RL training; groups carry group_overrides.placeholder_tokens = true");
    }
    Ok(())
}
