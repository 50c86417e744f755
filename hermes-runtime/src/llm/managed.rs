//! Phase 2 chat over `/generate` with exact token tracking (Atropos's ManagedServer): the chat
//! template is rendered locally, a prompt that extends an earlier turn's text reuses that
//! turn's tokens (node extension), new prompt text is masked `-100` with logprob `1.0`, sampled
//! tokens are trained with their real logprobs, and tool calls are parsed client-side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::generate::{GenerateClient, GenerateRequest, Generated};
use super::tokenizer::{ChatTokenizer, TokenizerError};
use super::{ChatBackend, ChatRequest, ChatResponse, Choice, LlmError, Message, ResponseMessage};
use crate::parsers::ToolCallParser;

/// Mask value of positions that are not trained.
pub(crate) const MASKED: i64 = -100;

/// Finish metadata of a node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeMetadata {
    /// `stop`, `length`, …
    pub finish_reason: String,
}

/// One tracked sequence: everything the model saw and produced so far in a rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SequenceNode {
    /// Prompt text plus completion text (special tokens kept).
    pub full_text: String,
    /// Token ids of the whole sequence.
    pub tokens: Vec<u32>,
    /// `tokens` with every prompt / tool / user position set to -100.
    pub masked_tokens: Vec<i64>,
    /// Sampler logprobs aligned with `tokens`; 1.0 at masked positions.
    pub logprobs: Vec<f64>,
    /// How the last completion ended.
    pub metadata: NodeMetadata,
}

/// The input of one generation: which node it extends and the prompt token ids.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Index of the node whose text prefixes the prompt, if any.
    pub extends: Option<usize>,
    /// Token ids sent to the server.
    pub input_ids: Vec<u32>,
}

/// One sampled completion to fold into the node list.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Decoded completion text (special tokens kept).
    pub text: String,
    /// Output ids.
    pub ids: Vec<u32>,
    /// Output logprobs (padded with 1.0 or truncated to `ids`).
    pub logprobs: Vec<f64>,
    /// Finish reason.
    pub finish_reason: String,
    /// False to keep the completion in the sequence but mask it (-100, logprob 1.0): a turn
    /// cut at `max_tokens` under `--env.mask_truncated_turns`.
    pub trained: bool,
}

/// The nodes of one rollout (list mode).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    /// Current nodes; the last one is the rollout's trajectory.
    pub nodes: Vec<SequenceNode>,
}

impl NodeList {
    /// Finds the first node whose text is a prefix of `prompt`: its tokens plus the encoded
    /// suffix are the input; otherwise the whole prompt is encoded (a duplicated leading BOS is
    /// dropped). `encode` is the rendered-chat encoding ([`ChatTokenizer::encode_rendered`]:
    /// no special tokens added, as transformers encodes a rendered chat).
    pub fn plan<E>(
        &self,
        prompt: &str,
        bos: Option<u32>,
        mut encode: impl FnMut(&str) -> Result<Vec<u32>, E>,
    ) -> Result<Plan, E> {
        let extends = self
            .nodes
            .iter()
            .position(|n| !n.full_text.is_empty() && prompt.starts_with(&n.full_text));
        let input_ids = match extends {
            Some(i) => {
                let node = &self.nodes[i];
                let suffix = &prompt[node.full_text.len()..];
                let mut ids = node.tokens.clone();
                if !suffix.is_empty() {
                    ids.extend(encode(suffix)?);
                }
                ids
            }
            None => {
                let mut ids = encode(prompt)?;
                if let Some(b) = bos {
                    if ids.len() >= 2 && ids[0] == b && ids[1] == b {
                        ids.remove(0);
                    }
                }
                ids
            }
        };
        Ok(Plan { extends, input_ids })
    }

    /// Builds one node per completion: the plan's new prompt tokens masked (-100, logprob
    /// 1.0), the completion trained. The first replaces the extended node; the others (and
    /// fresh contexts) are appended.
    pub fn commit(&mut self, plan: &Plan, prompt: &str, completions: Vec<Completion>) {
        let base = plan.extends.map(|i| self.nodes[i].clone());
        let (base_masked, base_logprobs) = match &base {
            Some(n) => (n.masked_tokens.as_slice(), n.logprobs.as_slice()),
            None => (&[][..], &[][..]),
        };
        let new_prompt = plan.input_ids.len() - base_masked.len();
        let mut built = Vec::with_capacity(completions.len());
        for c in completions {
            let mut tokens = plan.input_ids.clone();
            tokens.extend(&c.ids);
            let mut masked = base_masked.to_vec();
            masked.extend(std::iter::repeat_n(MASKED, new_prompt));
            let mut logprobs = base_logprobs.to_vec();
            logprobs.extend(std::iter::repeat_n(1.0, new_prompt));
            if c.trained {
                masked.extend(c.ids.iter().map(|&t| i64::from(t)));
                logprobs.extend(&c.logprobs);
            } else {
                masked.extend(std::iter::repeat_n(MASKED, c.ids.len()));
                logprobs.extend(std::iter::repeat_n(1.0, c.ids.len()));
            }
            built.push(SequenceNode {
                full_text: format!("{prompt}{}", c.text),
                tokens,
                masked_tokens: masked,
                logprobs,
                metadata: NodeMetadata {
                    finish_reason: c.finish_reason,
                },
            });
        }
        let mut built = built.into_iter();
        if let Some(i) = plan.extends {
            if let Some(first) = built.next() {
                self.nodes[i] = first;
            }
        }
        self.nodes.extend(built);
    }

    /// The rollout's trajectory (the last node).
    pub fn last(&self) -> Option<&SequenceNode> {
        self.nodes.last()
    }
}

/// Fits `logprobs` to `len`: padded with 1.0 or truncated.
pub(crate) fn fit_logprobs(mut logprobs: Vec<f64>, len: usize) -> Vec<f64> {
    logprobs.resize(len, 1.0);
    logprobs
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const THINK_OPEN_HOLD: &str = "\u{e000}hermes-think-open\u{e000}";
const THINK_CLOSE_HOLD: &str = "\u{e000}hermes-think-close\u{e000}";

/// Settings shared by every rollout's managed session.
pub struct Phase2 {
    /// The `/generate` client.
    pub client: GenerateClient,
    /// Tokenizer and chat template of the served model.
    pub tokenizer: Arc<ChatTokenizer>,
    /// Tool-call parser for the model's raw text (`--env.tool_call_parser`).
    pub parser: &'static dyn ToolCallParser,
    /// Keep `<think>` blocks as the template renders them (`thinking_mode`); otherwise they
    /// are shielded from templates that strip them, which would break prefix matching.
    pub preserve_think_blocks: bool,
    /// Mask completions cut at `max_tokens` instead of training them as generated
    /// (`--env.mask_truncated_turns`).
    pub mask_truncated_turns: bool,
}

impl std::fmt::Debug for Phase2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Phase2")
            .field("client", &self.client)
            .field("tokenizer", &self.tokenizer)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct SessionState {
    nodes: NodeList,
    raw_by_call: HashMap<String, String>,
}

/// One rollout's token-tracking chat session; the agent loop calls it like a chat server.
pub struct ManagedSession<'a> {
    phase2: &'a Phase2,
    state: Mutex<SessionState>,
}

fn template_error(e: TokenizerError) -> LlmError {
    LlmError::Config(e.to_string())
}

impl<'a> ManagedSession<'a> {
    /// A fresh session.
    pub fn new(phase2: &'a Phase2) -> Self {
        ManagedSession {
            phase2,
            state: Mutex::new(SessionState::default()),
        }
    }

    /// The tracked nodes so far.
    pub fn nodes(&self) -> NodeList {
        self.state.lock().expect("lock poisoned").nodes.clone()
    }

    /// The messages as the template sees them: assistant tool calls turned back into the
    /// exact raw text the model produced (or the parser's rendering when unknown).
    fn template_messages(&self, messages: &[Message]) -> Vec<Value> {
        let state = self.state.lock().expect("lock poisoned");
        let shield = !self.phase2.preserve_think_blocks;
        messages
            .iter()
            .map(|m| {
                if m.role != "assistant" {
                    return serde_json::to_value(m).expect("messages serialise");
                }
                let mut content = match &m.tool_calls {
                    Some(calls) if !calls.is_empty() => state
                        .raw_by_call
                        .get(&calls[0].id)
                        .cloned()
                        .unwrap_or_else(|| self.phase2.parser.render(&m.content, calls)),
                    _ => m.content.clone(),
                };
                if shield {
                    content = content
                        .replace(THINK_OPEN, THINK_OPEN_HOLD)
                        .replace(THINK_CLOSE, THINK_CLOSE_HOLD);
                }
                serde_json::json!({"role": "assistant", "content": content})
            })
            .collect()
    }

    fn render(&self, request: &ChatRequest) -> Result<String, LlmError> {
        let messages = self.template_messages(&request.messages);
        let add_generation_prompt = request
            .messages
            .last()
            .is_none_or(|m| m.role != "assistant");
        let text = self
            .phase2
            .tokenizer
            .render_chat(&messages, &request.tools, add_generation_prompt)
            .map_err(template_error)?;
        Ok(if self.phase2.preserve_think_blocks {
            text
        } else {
            text.replace(THINK_OPEN_HOLD, THINK_OPEN)
                .replace(THINK_CLOSE_HOLD, THINK_CLOSE)
        })
    }
}

/// One rollout's share of a group's single `n` generation: its own sequence node and the raw
/// text of its tool calls, to continue the rollout in its own session.
#[derive(Debug, Clone, Default)]
pub struct SessionSeed {
    nodes: NodeList,
    raw_by_call: HashMap<String, String>,
}

impl<'a> ManagedSession<'a> {
    /// A session continuing from `seed` (one choice of [`Self::chat_group`]).
    pub fn from_seed(phase2: &'a Phase2, seed: SessionSeed) -> Self {
        ManagedSession {
            phase2,
            state: Mutex::new(SessionState {
                nodes: seed.nodes,
                raw_by_call: seed.raw_by_call,
            }),
        }
    }

    /// The first turn of `request.n` rollouts in one `/generate` request: per choice, a
    /// one-choice response (usage: the shared prompt's tokens and this choice's own) and the
    /// seed of that rollout's session. A refusal that may be about `n` does not stop the run
    /// ([`GenerateClient::generate_group`]).
    pub async fn chat_group(
        phase2: &'a Phase2,
        request: &ChatRequest,
    ) -> Result<Vec<(ChatResponse, SessionSeed)>, LlmError> {
        let session = ManagedSession::new(phase2);
        let response = session.chat_with(request, true).await?;
        let state = session.state.into_inner().expect("lock poisoned");
        let prompt = response.usage.and_then(|u| u.prompt_tokens).unwrap_or(0);
        Ok(response
            .choices
            .into_iter()
            .zip(state.nodes.nodes)
            .map(|(choice, node)| {
                let usage = super::Usage {
                    prompt_tokens: Some(prompt),
                    completion_tokens: Some((node.tokens.len() as u64).saturating_sub(prompt)),
                };
                let response = ChatResponse {
                    choices: vec![choice],
                    usage: Some(usage),
                };
                let seed = SessionSeed {
                    nodes: NodeList { nodes: vec![node] },
                    raw_by_call: state.raw_by_call.clone(),
                };
                (response, seed)
            })
            .collect())
    }

    async fn chat_with(
        &self,
        request: &ChatRequest,
        group: bool,
    ) -> Result<ChatResponse, LlmError> {
        let tok = &self.phase2.tokenizer;
        let prompt = self.render(request)?;
        let plan = {
            let state = self.state.lock().expect("lock poisoned");
            state
                .nodes
                .plan(&prompt, tok.bos_id(), |t| tok.encode_rendered(t))
                .map_err(template_error)?
        };
        let generate = GenerateRequest {
            input_ids: plan.input_ids.clone(),
            n: request.n.max(1),
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            split: request.split,
        };
        let client = &self.phase2.client;
        let generated = match group {
            true => client.generate_group(&generate).await?,
            false => client.generate(&generate).await?,
        };
        let tools_active = !request.tools.is_empty();
        let generated_tokens: usize = generated.iter().map(|g| g.ids.len()).sum();
        let mut completions = Vec::with_capacity(generated.len());
        let mut choices = Vec::with_capacity(generated.len());
        for Generated {
            ids,
            logprobs,
            finish_reason,
        } in generated
        {
            let text = tok.decode(&ids, false).map_err(template_error)?;
            let body_ids = match ids.split_last() {
                Some((last, rest)) if Some(*last) == tok.eos_id() => rest,
                _ => &ids[..],
            };
            let raw = tok
                .decode(body_ids, !tools_active)
                .map_err(template_error)?;
            let parsed = if tools_active {
                let offered: Vec<&str> = request
                    .tools
                    .iter()
                    .map(|t| t.function.name.as_str())
                    .collect();
                self.phase2.parser.parse_offered(&raw, &offered)
            } else {
                Default::default()
            };
            let (content, tool_calls, finish) = if parsed.calls.is_empty() {
                (raw, None, finish_reason.clone())
            } else {
                self.state
                    .lock()
                    .expect("lock poisoned")
                    .raw_by_call
                    .insert(parsed.calls[0].id.clone(), raw);
                (
                    parsed.content.unwrap_or_default(),
                    Some(parsed.calls),
                    "tool_calls".to_owned(),
                )
            };
            choices.push(Choice {
                message: ResponseMessage {
                    content,
                    tool_calls,
                    reasoning_content: None,
                    reasoning: None,
                    reasoning_details: None,
                },
                finish_reason: Some(finish),
            });
            let trained = !(self.phase2.mask_truncated_turns && finish_reason == "length");
            completions.push(Completion {
                text,
                logprobs: fit_logprobs(logprobs, ids.len()),
                ids,
                finish_reason,
                trained,
            });
        }
        self.state
            .lock()
            .expect("lock poisoned")
            .nodes
            .commit(&plan, &prompt, completions);
        let usage = super::Usage {
            prompt_tokens: Some(plan.input_ids.len() as u64),
            completion_tokens: Some(generated_tokens as u64),
        };
        Ok(ChatResponse {
            choices,
            usage: Some(usage),
        })
    }
}

#[async_trait::async_trait]
impl ChatBackend for ManagedSession<'_> {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.chat_with(request, false).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy encoder with a fixed vocabulary: each listed piece is one token.
    fn toy(text: &str) -> Result<Vec<u32>, String> {
        let vocab = [
            ("P1", vec![1, 2, 3, 4, 5]),
            ("TOOL", vec![9, 10, 11, 12]),
            ("USER", vec![30, 31]),
        ];
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (piece, ids) = vocab
                .iter()
                .find(|(p, _)| rest.starts_with(p))
                .ok_or_else(|| format!("unknown text {rest:?}"))?;
            out.extend(ids);
            rest = &rest[piece.len()..];
        }
        Ok(out)
    }

    fn completion(text: &str, ids: &[u32], lps: &[f64], finish: &str) -> Completion {
        Completion {
            text: text.into(),
            ids: ids.to_vec(),
            logprobs: fit_logprobs(lps.to_vec(), ids.len()),
            finish_reason: finish.into(),
            trained: true,
        }
    }

    #[test]
    fn the_spec_worked_example_extends_one_sequence() {
        let mut nodes = NodeList::default();
        let plan = nodes.plan("P1", None, toy).unwrap();
        assert_eq!(
            plan,
            Plan {
                extends: None,
                input_ids: vec![1, 2, 3, 4, 5]
            }
        );
        nodes.commit(
            &plan,
            "P1",
            vec![completion(
                "A",
                &[6, 7, 8],
                &[-0.1, -0.2, -0.3],
                "tool_calls",
            )],
        );
        let n = nodes.last().unwrap();
        assert_eq!(n.tokens, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(n.masked_tokens, vec![-100, -100, -100, -100, -100, 6, 7, 8]);
        assert_eq!(n.logprobs, vec![1.0, 1.0, 1.0, 1.0, 1.0, -0.1, -0.2, -0.3]);

        // Turn 2: the history plus a tool result; the text starts with node 1's full text.
        let plan = nodes.plan("P1ATOOL", None, toy).unwrap();
        assert_eq!(plan.extends, Some(0));
        assert_eq!(plan.input_ids, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        nodes.commit(
            &plan,
            "P1ATOOL",
            vec![completion("B", &[13, 14], &[-0.5, -0.6], "stop")],
        );
        assert_eq!(nodes.nodes.len(), 1, "the extended node is replaced");
        let n = nodes.last().unwrap();
        assert_eq!(n.tokens, (1..=14).collect::<Vec<u32>>());
        assert_eq!(
            n.masked_tokens,
            vec![-100, -100, -100, -100, -100, 6, 7, 8, -100, -100, -100, -100, 13, 14]
        );
        assert_eq!(
            n.logprobs,
            vec![1.0, 1.0, 1.0, 1.0, 1.0, -0.1, -0.2, -0.3, 1.0, 1.0, 1.0, 1.0, -0.5, -0.6]
        );
        assert_eq!(n.full_text, "P1ATOOLB");
    }

    #[test]
    fn a_truncated_completion_keeps_its_tokens_and_pads_missing_logprobs() {
        let mut nodes = NodeList::default();
        let plan = nodes.plan("P1", None, toy).unwrap();
        // The server cut the completion at max_tokens and sent one logprob short.
        nodes.commit(
            &plan,
            "P1",
            vec![completion("AB", &[6, 7], &[-0.1], "length")],
        );
        let n = nodes.last().unwrap();
        assert_eq!(n.masked_tokens, vec![-100, -100, -100, -100, -100, 6, 7]);
        assert_eq!(n.logprobs, vec![1.0, 1.0, 1.0, 1.0, 1.0, -0.1, 1.0]);
        assert_eq!(n.metadata.finish_reason, "length");
        // The next prompt closes the cut turn and adds a user message: still an extension.
        let plan = nodes.plan("P1ABUSER", None, |t| {
            if t == "USER" {
                toy(t)
            } else {
                Err(format!("unexpected suffix {t:?}"))
            }
        });
        assert_eq!(plan.unwrap().input_ids, vec![1, 2, 3, 4, 5, 6, 7, 30, 31]);
    }

    #[test]
    fn a_rewritten_history_starts_a_fresh_fully_masked_node() {
        let mut nodes = NodeList::default();
        let plan = nodes.plan("P1", None, toy).unwrap();
        nodes.commit(&plan, "P1", vec![completion("A", &[6], &[-0.1], "stop")]);
        let plan = nodes.plan("USERTOOL", None, toy).unwrap();
        assert_eq!(plan.extends, None);
        nodes.commit(
            &plan,
            "USERTOOL",
            vec![completion("C", &[7], &[-0.2], "stop")],
        );
        assert_eq!(nodes.nodes.len(), 2, "a fresh context is appended");
        assert_eq!(
            nodes.last().unwrap().masked_tokens,
            vec![-100, -100, -100, -100, -100, -100, 7]
        );
    }

    #[test]
    fn n_samples_branch_from_the_same_prompt_and_bos_is_not_doubled() {
        let mut nodes = NodeList::default();
        let plan = nodes
            .plan("x", Some(0), |_| Ok::<_, ()>(vec![0, 0, 5]))
            .unwrap();
        assert_eq!(plan.input_ids, vec![0, 5]);
        nodes.commit(
            &plan,
            "x",
            vec![
                completion("a", &[1], &[-1.0], "stop"),
                completion("b", &[2], &[-2.0], "stop"),
            ],
        );
        assert_eq!(nodes.nodes.len(), 2);
        assert_eq!(nodes.nodes[1].tokens, vec![0, 5, 2]);
    }
}
