//! `tokenize_for_trainer`: re-tokenizes a finished chat with the tokenizer's chat template and
//! masks everything but the assistant output (the last turn, or every assistant turn).

use std::sync::Arc;

use serde_json::Value;
use tracing::warn;

use crate::llm::tokenizer::{ChatTokenizer, PreparedChat, TokenizerError};
use crate::llm::{Message, ToolSchema};

/// Trainer tokens of one chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Tokenized {
    /// The templated chat's token ids.
    pub tokens: Vec<i64>,
    /// `tokens` with untrained positions set to -100.
    pub masks: Vec<i64>,
}

fn to_values(chat: &[Message]) -> Vec<Value> {
    chat.iter()
        .map(|m| serde_json::to_value(m).expect("messages serialise"))
        .collect()
}

/// The rendered chat with its tools, as the model saw it, and where its tokens start.
struct Rendered<'a> {
    tok: &'a ChatTokenizer,
    chat: PreparedChat,
    text: String,
    /// How many messages `text` renders.
    messages: usize,
    ids: Vec<u32>,
    starts: Vec<usize>,
}

impl<'a> Rendered<'a> {
    fn new(
        tok: &'a ChatTokenizer,
        chat: &[Message],
        tools: &Arc<[ToolSchema]>,
    ) -> Result<Self, TokenizerError> {
        let values = to_values(chat);
        let prepared = tok.prepare(&values, tools);
        let text = tok.render_prefix(&prepared, values.len(), false)?;
        let (ids, starts) = tok.encode_rendered_with_starts(&text)?;
        Ok(Rendered {
            tok,
            chat: prepared,
            text,
            messages: values.len(),
            ids,
            starts,
        })
    }

    /// Byte length of the template of the first `n` messages, as a position in the full text.
    /// A template that renders that prefix differently from the full chat (not prefix-stable)
    /// is logged, and the length is used as it is.
    fn boundary(&self, n: usize, add_generation_prompt: bool) -> Result<usize, TokenizerError> {
        if n >= self.messages && !add_generation_prompt {
            // The whole chat: the text already rendered (the last assistant turn's end).
            return Ok(self.text.len());
        }
        let prefix = self
            .tok
            .measure_prefix(&self.chat, n, add_generation_prompt, &self.text)?;
        if !prefix.is_prefix {
            warn!(
                "chat template of {} is not prefix-stable at message {n}: the trained span there is                  placed by length and may be off",
                self.tok.source()
            );
        }
        Ok(prefix.len.min(self.text.len()))
    }

    /// Unmasks every token that starts in the byte range `[start, end)`.
    fn train(&self, masks: &mut [i64], start: usize, end: usize) {
        // Token starts are in text order.
        let first = self.starts.partition_point(|&at| at < start);
        let last = self.starts.partition_point(|&at| at < end);
        if last > first {
            for (mask, &id) in masks[first..last].iter_mut().zip(&self.ids[first..last]) {
                *mask = i64::from(id);
            }
        }
    }
}

/// Atropos's `tokenize_for_trainer`, on the chat rendered with its `tools` exactly as the
/// inference server renders it ([`ChatTokenizer::render`]). Default (last turn only):
/// everything up to and including the final assistant header is masked.
/// `train_on_all_assistant_turns`: every assistant message's span, from the end of
/// `template(chat[:i], add_generation_prompt)` to the end of `template(chat[:i+1])`, is trained.
/// Spans are located in the text and mapped to the tokens that start in them, so a token merge
/// across a boundary cannot shift them. With `finish_reason == "length"` a trailing end-of-turn
/// token is dropped.
pub fn tokenize_for_trainer(
    tok: &ChatTokenizer,
    chat: &[Message],
    tools: &Arc<[ToolSchema]>,
    train_on_all_assistant_turns: bool,
    finish_reason: &str,
) -> Result<Tokenized, TokenizerError> {
    let rendered = Rendered::new(tok, chat, tools)?;
    let tokens: Vec<i64> = rendered.ids.iter().map(|&t| i64::from(t)).collect();
    let mut masks = vec![-100i64; tokens.len()];
    if train_on_all_assistant_turns {
        for (i, m) in chat.iter().enumerate() {
            if m.role != "assistant" && m.role != "agent" {
                continue;
            }
            let start = rendered.boundary(i, true)?;
            let end = rendered.boundary(i + 1, false)?;
            rendered.train(&mut masks, start, end);
        }
    } else if !chat.is_empty() {
        let start = rendered.boundary(chat.len() - 1, true)?;
        rendered.train(&mut masks, start, usize::MAX);
    }
    let mut out = Tokenized { tokens, masks };
    if finish_reason == "length"
        && tok
            .eos_id()
            .is_some_and(|eos| out.tokens.last() == Some(&i64::from(eos)))
    {
        out.tokens.pop();
        out.masks.pop();
    }
    Ok(out)
}

/// How the assistant turns cut at `max_tokens` (`finish_reason == "length"`) are trained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CutTurns {
    /// Exactly as generated: the text the model produced, and not the end-of-turn markup the
    /// chat template closes every assistant turn with (the model never generated it).
    #[default]
    AsGenerated,
    /// Not at all: masked -100 (`--env.mask_truncated_turns`).
    Masked,
}

/// The trainer tokens of a finished rollout (Phase 1 re-tokenization): every assistant turn
/// trained as in [`tokenize_for_trainer`], except the turns at message indices `cut`, which
/// were cut at `max_tokens` and are trained by `rule`. A rollout that ends with a cut turn
/// also ends its tokens where the generation stopped, as Phase 2's exact tokens do.
///
/// Upstream (Atropos's `tokenize_for_trainer`) only dropped one final end-of-turn token, and
/// only when the caller passed `finish_reason == "length"` for the whole chat; the Hermes agent
/// environment passed none, so a cut turn was trained with the end-of-turn token (and markup
/// after it) that the template invents for every assistant turn.
pub fn tokenize_rollout(
    tok: &ChatTokenizer,
    chat: &[Message],
    tools: &Arc<[ToolSchema]>,
    cut: &[usize],
    rule: CutTurns,
) -> Result<Tokenized, TokenizerError> {
    let rendered = Rendered::new(tok, chat, tools)?;
    let mut tokens: Vec<i64> = rendered.ids.iter().map(|&t| i64::from(t)).collect();
    let mut masks = vec![-100i64; tokens.len()];
    let mut text_end = rendered.text.len();
    for (i, m) in chat.iter().enumerate() {
        if m.role != "assistant" && m.role != "agent" {
            continue;
        }
        let start = rendered.boundary(i, true)?;
        let end = rendered.boundary(i + 1, false)?;
        if !cut.contains(&i) {
            rendered.train(&mut masks, start, end);
            continue;
        }
        let generated =
            generated_end(&rendered.text, start, end, m).ok_or(TokenizerError::CutTurn(i))?;
        if rule == CutTurns::AsGenerated {
            rendered.train(&mut masks, start, generated);
        }
        if i + 1 == chat.len() {
            text_end = generated;
        }
    }
    // Tokens that start after the end of a final cut turn are the template's closing markup.
    let keep = rendered.starts.partition_point(|&at| at < text_end);
    tokens.truncate(keep);
    masks.truncate(keep);
    Ok(Tokenized { tokens, masks })
}

/// Where the generated text of the cut assistant message `m` ends in `text`, whose template
/// renders it in `[start, end)`: after its content (or, with no content, its reasoning) as
/// the model wrote it. `None` when the template does not render it as written, or when tool
/// calls were parsed from the cut text (their rendering is not what was generated).
fn generated_end(text: &str, start: usize, end: usize, m: &Message) -> Option<usize> {
    if m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) {
        return None;
    }
    let span = text.get(start..end)?;
    let written = if m.content.is_empty() {
        m.reasoning_content.as_deref().unwrap_or_default()
    } else {
        m.content.as_str()
    };
    if written.is_empty() {
        return Some(start);
    }
    // The last occurrence: reasoning rendered before the content may repeat its text.
    [written, written.trim_end()]
        .into_iter()
        .filter(|w| !w.is_empty())
        .find_map(|w| span.rfind(w).map(|at| start + at + w.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trained_text(tok: &ChatTokenizer, t: &Tokenized) -> Vec<String> {
        // Contiguous trained spans, decoded.
        let mut spans = Vec::new();
        let mut cur: Vec<u32> = Vec::new();
        for (&id, &m) in t.tokens.iter().zip(&t.masks) {
            if m == -100 {
                if !cur.is_empty() {
                    spans.push(tok.decode(&cur, false).unwrap());
                    cur.clear();
                }
            } else {
                assert_eq!(m, id);
                cur.push(id as u32);
            }
        }
        if !cur.is_empty() {
            spans.push(tok.decode(&cur, false).unwrap());
        }
        spans
    }

    fn no_tools() -> Arc<[ToolSchema]> {
        Vec::new().into()
    }

    fn chat() -> Vec<Message> {
        vec![
            Message::user("Q"),
            Message::assistant("A1"),
            Message::tool("c", "R"),
            Message::assistant("A2"),
        ]
    }

    #[test]
    fn last_turn_masks_everything_up_to_the_final_assistant_header() {
        let tok = ChatTokenizer::builtin();
        let t = tokenize_for_trainer(&tok, &chat(), &no_tools(), false, "stop").unwrap();
        assert_eq!(t.tokens.len(), t.masks.len());
        assert_eq!(trained_text(&tok, &t), ["A2<|im_end|>\n"]);
        let prefix = t.masks.iter().take_while(|&&m| m == -100).count();
        assert!(t.masks[prefix..].iter().all(|&m| m != -100));
    }

    #[test]
    fn all_assistant_turns_are_trained_and_truncation_drops_the_eos() {
        let tok = ChatTokenizer::builtin();
        let t = tokenize_for_trainer(&tok, &chat(), &no_tools(), true, "stop").unwrap();
        assert_eq!(trained_text(&tok, &t), ["A1<|im_end|>\n", "A2<|im_end|>\n"]);
    }

    #[test]
    fn a_cut_turn_is_trained_as_generated_or_masked_and_ends_the_tokens_where_it_stopped() {
        let tok = ChatTokenizer::builtin();
        let full = tokenize_for_trainer(&tok, &chat(), &no_tools(), true, "stop").unwrap();
        let cut =
            tokenize_rollout(&tok, &chat(), &no_tools(), &[3], CutTurns::AsGenerated).unwrap();
        assert_eq!(trained_text(&tok, &cut), ["A1<|im_end|>\n", "A2"]);
        assert_eq!(
            cut.tokens[..],
            full.tokens[..full.tokens.len() - 2],
            "no <|im_end|>\\n"
        );
        let masked = tokenize_rollout(&tok, &chat(), &no_tools(), &[3], CutTurns::Masked).unwrap();
        assert_eq!(masked.tokens, cut.tokens);
        assert_eq!(trained_text(&tok, &masked), ["A1<|im_end|>\n"]);
        // A cut turn inside the chat keeps the template's closing markup as masked context.
        let inner =
            tokenize_rollout(&tok, &chat(), &no_tools(), &[1], CutTurns::AsGenerated).unwrap();
        assert_eq!(inner.tokens, full.tokens);
        assert_eq!(trained_text(&tok, &inner), ["A1", "A2<|im_end|>\n"]);
        let none = tokenize_rollout(&tok, &chat(), &no_tools(), &[], CutTurns::Masked).unwrap();
        assert_eq!(none, full);
    }

    #[test]
    fn a_truncated_completion_loses_a_trailing_eos() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            ChatTokenizer::builtin_dir().join("tokenizer.json"),
            dir.path().join("tokenizer.json"),
        )
        .unwrap();
        let template =
            "{% for m in messages %}{{ m.role + ':' + m.content + '<|im_end|>' }}{% endfor %}";
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            serde_json::json!({"eos_token": "<|im_end|>", "chat_template": template}).to_string(),
        )
        .unwrap();
        let tok = ChatTokenizer::load(dir.path().to_str().unwrap()).unwrap();
        let cut = &chat()[..2];
        let stop = tokenize_for_trainer(&tok, cut, &no_tools(), false, "stop").unwrap();
        assert_eq!(stop.tokens.last(), Some(&257));
        let length = tokenize_for_trainer(&tok, cut, &no_tools(), false, "length").unwrap();
        assert_eq!(length.tokens, stop.tokens[..stop.tokens.len() - 1]);
        assert_eq!(trained_text(&tok, &length), ["assistant:A1"]);
    }
}
