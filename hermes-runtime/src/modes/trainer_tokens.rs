//! The trainer tokens of one finished rollout: what the trainer is sent for it, or why
//! nothing can be. A chat the tokenizer's template cannot render has no trainer tokens; the
//! rollout becomes a `tokenization` failure (never placeholder ids in a group marked as real
//! tokens, which upstream Atropos sent in that case).

use std::sync::Arc;

use crate::agent::AgentResult;
use crate::atropos::placeholder_tokens;
use crate::atropos::tokenize::{tokenize_rollout, CutTurns};
use crate::llm::managed::{NodeList, MASKED};
use crate::llm::tokenizer::TokenizerError;
use crate::llm::ToolSchema;

use super::rollout::TokenSource;

/// Tokens, masks and (Phase 2) sampler logprobs of one rollout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrainerTokens {
    /// Token ids of the whole chat.
    pub tokens: Vec<i64>,
    /// `tokens` with untrained positions set to -100.
    pub masks: Vec<i64>,
    /// Phase 2: the sampler's logprobs, aligned with `tokens`.
    pub inference_logprobs: Option<Vec<f64>>,
}

/// Why a rollout has no trainer tokens.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrainerTokensError {
    /// The chat template (or the tokenizer) refused the finished chat.
    #[error("the chat template of {tokenizer} cannot render this rollout for the trainer")]
    Render {
        /// Where the tokenizer came from.
        tokenizer: String,
        /// The template's or tokenizer's error (boxed: it can hold a hub error).
        #[source]
        source: Box<TokenizerError>,
    },
}

/// The assistant messages of `run` whose generation was cut at `max_tokens`.
fn cut_turns(run: &AgentResult) -> Vec<usize> {
    run.turns
        .iter()
        .filter(|t| t.is_truncated())
        .map(|t| t.message)
        .collect()
}

/// The trainer tokens of `run` under `source` (Phase 2: from the rollout's token state
/// `nodes`, where cut turns were masked or not as they were generated), with `tools` as the
/// model was offered them; Phase 1 trains its cut turns by `cut_rule`.
pub(crate) fn trainer_tokens(
    source: &TokenSource,
    run: &AgentResult,
    tools: &Arc<[ToolSchema]>,
    nodes: Option<&NodeList>,
    cut_rule: CutTurns,
) -> Result<TrainerTokens, TrainerTokensError> {
    match source {
        TokenSource::Placeholder => {
            let (tokens, masks) = placeholder_tokens(&run.messages);
            Ok(TrainerTokens {
                tokens,
                masks,
                inference_logprobs: None,
            })
        }
        TokenSource::Retokenized(tok) => {
            tokenize_rollout(tok, &run.messages, tools, &cut_turns(run), cut_rule)
                .map(|t| TrainerTokens {
                    tokens: t.tokens,
                    masks: t.masks,
                    inference_logprobs: None,
                })
                .map_err(|source| TrainerTokensError::Render {
                    tokenizer: tok.source().to_owned(),
                    source: Box::new(source),
                })
        }
        TokenSource::Managed(phase2) => {
            if let Some(node) = nodes.and_then(NodeList::last) {
                return Ok(TrainerTokens {
                    tokens: node.tokens.iter().map(|&t| i64::from(t)).collect(),
                    masks: node.masked_tokens.clone(),
                    inference_logprobs: Some(node.logprobs.clone()),
                });
            }
            // No generation happened (the rollout timed out before its first answer): the
            // prompt alone, untrained.
            let messages: Vec<serde_json::Value> = run
                .messages
                .iter()
                .map(|m| serde_json::to_value(m).expect("messages serialise"))
                .collect();
            let tools: Vec<serde_json::Value> = tools
                .iter()
                .map(|t| serde_json::to_value(t).expect("tools serialise"))
                .collect();
            let tools = (!tools.is_empty()).then_some(tools.as_slice());
            let tok = &phase2.tokenizer;
            let ids = tok
                .render(&messages, tools, true)
                .and_then(|text| tok.encode_rendered(&text))
                .map_err(|source| TrainerTokensError::Render {
                    tokenizer: tok.source().to_owned(),
                    source: Box::new(source),
                })?;
            let tokens: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
            let n = tokens.len();
            Ok(TrainerTokens {
                tokens,
                masks: vec![MASKED; n],
                inference_logprobs: Some(vec![1.0; n]),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ApiServerConfig;
    use crate::llm::{ChatTokenizer, GenerateClient, Message, Phase2, RetryPolicy};

    /// The built-in tokenizer with a chat template that refuses every chat.
    fn refusing() -> Arc<ChatTokenizer> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            ChatTokenizer::builtin_dir().join("tokenizer.json"),
            dir.path().join("tokenizer.json"),
        )
        .unwrap();
        let template = "{{ raise_exception('roles must alternate') }}";
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            serde_json::json!({"eos_token": "<|im_end|>", "chat_template": template}).to_string(),
        )
        .unwrap();
        Arc::new(ChatTokenizer::load(dir.path().to_str().unwrap()).unwrap())
    }

    fn run() -> AgentResult {
        AgentResult {
            messages: vec![Message::user("Q"), Message::assistant("A")],
            turns_used: 1,
            ..Default::default()
        }
    }

    /// Neither phase answers a refused render with stand-in tokens (placeholders in Phase 1,
    /// an empty sequence in Phase 2): the error comes back, with the template's reason.
    #[test]
    fn a_refused_render_is_an_error_in_both_phases_never_stand_in_tokens() {
        let tools: Arc<[ToolSchema]> = Vec::new().into();
        let phase1 = TokenSource::Retokenized(refusing());
        let err = trainer_tokens(&phase1, &run(), &tools, None, CutTurns::AsGenerated).unwrap_err();
        let chain = crate::diagnostics::error_chain(&err);
        assert!(chain.contains("roles must alternate"), "{chain}");
        let config = ApiServerConfig {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            server_type: crate::config::ServerType::Vllm,
            ..Default::default()
        };
        let phase2 = TokenSource::Managed(Arc::new(Phase2 {
            client: GenerateClient::new(&[config], RetryPolicy::default()).unwrap(),
            tokenizer: refusing(),
            parser: crate::parsers::get("hermes").unwrap(),
            preserve_think_blocks: false,
            mask_truncated_turns: false,
        }));
        assert!(trainer_tokens(&phase2, &run(), &tools, None, CutTurns::AsGenerated).is_err());
        // Placeholders only where they are asked for (no tokenizer), and marked as such by the
        // group (`ScoredDataGroup::from_items`).
        let placeholder = trainer_tokens(
            &TokenSource::Placeholder,
            &run(),
            &tools,
            None,
            CutTurns::AsGenerated,
        )
        .unwrap();
        assert!(placeholder.inference_logprobs.is_none());
    }
}
