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
