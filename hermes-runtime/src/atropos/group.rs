//! `ScoredDataGroup`: the unit Atropos trains on, with the exact key order and the
//! absent / `null` / `[]` distinctions the reference environment produces.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::llm::Message;
use crate::pyjson::{write_int_array, JsonLayout};

/// A key of a group that can be missing, explicitly `null`, or carry a value. Atropos output
/// depends on the difference (`"ref_logprobs": []` from the default collector vs `null`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Slot<T> {
    /// The key is not written at all.
    #[default]
    Absent,
    /// The key is written as `null`.
    Null,
    /// The key is written with this value.
    Value(T),
}

impl<T> Slot<T> {
    /// True when the key is not written.
    pub fn is_absent(&self) -> bool {
        matches!(self, Slot::Absent)
    }

    /// `Absent` becomes `Null`; other states are kept (Atropos's "set to null only if absent").
    pub fn null_if_absent(&mut self) {
        if self.is_absent() {
            *self = Slot::Null;
        }
    }

    /// The value, if any.
    pub fn value(&self) -> Option<&T> {
        match self {
            Slot::Value(v) => Some(v),
            _ => None,
        }
    }
}

impl<T: Serialize> Serialize for Slot<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Slot::Value(v) => v.serialize(s),
            _ => s.serialize_none(),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Slot<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<T>::deserialize(d)? {
            Some(v) => Slot::Value(v),
            None => Slot::Null,
        })
    }
}

/// All rollouts for one item, as sent to the trajectory API and written to JSONL.
/// Field order is the order the Hermes agent environment produces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScoredDataGroup {
    /// Prompt + completion token ids, one list per rollout.
    pub tokens: Vec<Vec<i64>>,
    /// Same shape as `tokens`; `-100` marks positions that are not trained.
    pub masks: Vec<Vec<i64>>,
    /// One reward per rollout.
    pub scores: Vec<f64>,
    /// Optional per-token advantages.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub advantages: Slot<Vec<Vec<f64>>>,
    /// Optional reference-model logprobs.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub ref_logprobs: Slot<Vec<Vec<f64>>>,
    /// Chat transcript per rollout.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub messages: Slot<Vec<Vec<Message>>>,
    /// Sampling parameters, e.g. `{"temperature": 1.0}`.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub generation_params: Slot<Map<String, Value>>,
    /// Sampler logprobs aligned with `tokens` (1.0 at masked positions).
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub inference_logprobs: Slot<Vec<Vec<f64>>>,
    /// Group-level knobs (`group_size`, `temperature`, …).
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub group_overrides: Slot<Map<String, Value>>,
    /// Per-rollout knobs.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub overrides: Slot<Vec<Map<String, Value>>>,
    /// Opaque multimodal payload.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub images: Slot<Value>,
    /// Teacher top-k token ids (on-policy distillation).
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub distill_token_ids: Slot<Value>,
    /// Teacher top-k logprobs (on-policy distillation).
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub distill_logprobs: Slot<Value>,
    /// Registered environment id; set only when sending to the API.
    #[serde(default, skip_serializing_if = "Slot::is_absent")]
    pub env_id: Slot<i64>,
}

impl ScoredDataGroup {
    /// This group as JSON in `layout`: the bytes serialising it with serde writes
    /// ([`JsonLayout::to_vec`]), with `tokens` and `masks` — nearly all of a group — written
    /// by an integer writer of its own (cheaper per integer than serde_json's path) and the
    /// other keys by serde.
    pub fn to_json(&self, layout: JsonLayout) -> Vec<u8> {
        let rest = layout.to_vec(&AfterLists::of(self));
        let ints: usize = self.tokens.iter().chain(&self.masks).map(Vec::len).sum();
        let mut out = Vec::with_capacity(rest.len() + ints * 6 + 64);
        out.extend_from_slice(b"{");
        for (key, lists) in [("tokens", &self.tokens), ("masks", &self.masks)] {
            out.push(b'"');
            out.extend_from_slice(key.as_bytes());
            out.push(b'"');
            out.extend_from_slice(layout.key_separator());
            out.push(b'[');
            for (i, list) in lists.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(layout.item_separator());
                }
                write_int_array(&mut out, list, layout);
            }
            out.push(b']');
            out.extend_from_slice(layout.item_separator());
        }
        // `rest` is `{"scores": …}`: its keys continue the object.
        out.extend_from_slice(&rest[1..]);
        out
    }
}

/// The keys of a [`ScoredDataGroup`] after `tokens` and `masks`, borrowed, with the derive's
/// attributes: [`ScoredDataGroup::to_json`] writes the two lists itself and these with
/// serde. Built with every field named, so a key added to the group is a compile error here.
#[derive(Serialize)]
struct AfterLists<'a> {
    scores: &'a Vec<f64>,
    #[serde(skip_serializing_if = "absent")]
    advantages: &'a Slot<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "absent")]
    ref_logprobs: &'a Slot<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "absent")]
    messages: &'a Slot<Vec<Vec<Message>>>,
    #[serde(skip_serializing_if = "absent")]
    generation_params: &'a Slot<Map<String, Value>>,
    #[serde(skip_serializing_if = "absent")]
    inference_logprobs: &'a Slot<Vec<Vec<f64>>>,
    #[serde(skip_serializing_if = "absent")]
    group_overrides: &'a Slot<Map<String, Value>>,
    #[serde(skip_serializing_if = "absent")]
    overrides: &'a Slot<Vec<Map<String, Value>>>,
    #[serde(skip_serializing_if = "absent")]
    images: &'a Slot<Value>,
    #[serde(skip_serializing_if = "absent")]
    distill_token_ids: &'a Slot<Value>,
    #[serde(skip_serializing_if = "absent")]
    distill_logprobs: &'a Slot<Value>,
    #[serde(skip_serializing_if = "absent")]
    env_id: &'a Slot<i64>,
}

impl<'a> AfterLists<'a> {
    fn of(group: &'a ScoredDataGroup) -> Self {
        let ScoredDataGroup {
            tokens: _,
            masks: _,
            scores,
            advantages,
            ref_logprobs,
            messages,
            generation_params,
            inference_logprobs,
            group_overrides,
            overrides,
            images,
            distill_token_ids,
            distill_logprobs,
            env_id,
        } = group;
        AfterLists {
            scores,
            advantages,
            ref_logprobs,
            messages,
            generation_params,
            inference_logprobs,
            group_overrides,
            overrides,
            images,
            distill_token_ids,
            distill_logprobs,
            env_id,
        }
    }
}

fn absent<T>(slot: &&Slot<T>) -> bool {
    slot.is_absent()
}

/// The key marking groups whose tokens are Phase 1 placeholders (not trainable).
pub(crate) const PLACEHOLDER_TOKENS_KEY: &str = "placeholder_tokens";

/// One scored rollout before it is folded into a group.
#[derive(Debug, Clone)]
pub struct ScoredItem {
    /// Token ids of the whole rollout.
    pub tokens: Vec<i64>,
    /// Mask aligned with `tokens`.
    pub masks: Vec<i64>,
    /// The reward.
    pub score: f64,
    /// The transcript.
    pub messages: Vec<Message>,
    /// Sampler logprobs when real tokens exist (Phase 2).
    pub inference_logprobs: Option<Vec<f64>>,
}

impl ScoredDataGroup {
    /// Folds rollouts the way Atropos's default `collect_trajectories` does: empty lists for
    /// `advantages`, `ref_logprobs`, `overrides`, `images`, `{}` for `group_overrides`.
    /// `placeholder_tokens` marks Phase 1 groups in `group_overrides`.
    pub fn from_items(items: Vec<ScoredItem>, placeholder_tokens: bool) -> Self {
        let mut group = ScoredDataGroup {
            advantages: Slot::Value(Vec::new()),
            ref_logprobs: Slot::Value(Vec::new()),
            messages: Slot::Value(Vec::new()),
            group_overrides: Slot::Value(Map::new()),
            overrides: Slot::Value(Vec::new()),
            images: Slot::Value(Value::Array(Vec::new())),
            ..Default::default()
        };
        if placeholder_tokens {
            if let Slot::Value(o) = &mut group.group_overrides {
                o.insert(PLACEHOLDER_TOKENS_KEY.into(), Value::Bool(true));
            }
        }
        let mut logprobs = Vec::new();
        for item in items {
            group.tokens.push(item.tokens);
            group.masks.push(item.masks);
            group.scores.push(item.score);
            if let Slot::Value(m) = &mut group.messages {
                m.push(item.messages);
            }
            if let Some(lp) = item.inference_logprobs {
                logprobs.push(lp);
            }
        }
        if !logprobs.is_empty() && logprobs.len() == group.tokens.len() {
            group.inference_logprobs = Slot::Value(logprobs);
        }
        group
    }

    /// Atropos sets these keys to `null` before sending or writing, only when absent.
    pub fn fill_absent_nulls(&mut self) {
        self.ref_logprobs.null_if_absent();
        self.overrides.null_if_absent();
        self.group_overrides.null_if_absent();
        self.distill_token_ids.null_if_absent();
        self.distill_logprobs.null_if_absent();
    }

    /// The size the group must have: `group_overrides.group_size` when present, else `default`.
    /// A `null` `group_overrides` is treated as empty (upstream crashes on it).
    pub fn expected_size(&self, default: usize) -> usize {
        self.group_overrides
            .value()
            .and_then(|o| o.get("group_size"))
            .and_then(Value::as_u64)
            .map_or(default, |n| n as usize)
    }

    /// True when every score is equal (such groups carry no learning signal).
    pub fn scores_all_equal(&self) -> bool {
        self.scores.windows(2).all(|w| w[0] == w[1])
    }

    /// Why the upstream group rules drop this group, or `None` when it may be sent:
    /// the wrong number of rollouts, all scores equal (with `ensure_scores_are_not_same`),
    /// or (with a trainer limit) a sequence at or above `length_limit` tokens.
    pub fn drop_reason(
        &self,
        group_size: usize,
        ensure_scores_are_not_same: bool,
        length_limit: Option<i64>,
    ) -> Option<DropReason> {
        let expected = self.expected_size(group_size);
        if self.tokens.len() != expected {
            return Some(DropReason::Size {
                got: self.tokens.len(),
                expected,
            });
        }
        if ensure_scores_are_not_same && self.scores_all_equal() {
            return Some(DropReason::EqualScores);
        }
        let limit = length_limit.filter(|&l| l > 0)?;
        self.tokens
            .iter()
            .map(Vec::len)
            .find(|&l| l as i64 >= limit)
            .map(|len| DropReason::TooLong { len, limit })
    }

    /// Number of trained positions per rollout (mask entries other than -100).
    pub fn completion_lengths(&self) -> Vec<usize> {
        self.masks
            .iter()
            .map(|m| m.iter().filter(|&&t| t != -100).count())
            .collect()
    }
}

/// Phase 1 placeholder tokens, as upstream computes them without a tokenizer:
/// `0..min(len(text)/4, 128)`, with only the first position masked. At least one token is
/// produced so `tokens` and `masks` keep equal lengths (upstream can emit `[]` vs `[-100]`).
pub fn placeholder_tokens(messages: &[Message]) -> (Vec<i64>, Vec<i64>) {
    let full_text: Vec<&str> = messages
        .iter()
        .map(|m| m.content.as_str())
        .filter(|c| !c.is_empty())
        .collect();
    let chars = full_text.join("\n").chars().count();
    let n = (chars / 4).clamp(1, 128) as i64;
    let tokens: Vec<i64> = (0..n).collect();
    let mut masks = tokens.clone();
    masks[0] = -100;
    (tokens, masks)
}

/// Why the upstream group rules drop a group (Atropos drops these silently; we count and
/// announce them with the knob that changes the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The group does not have the expected number of rollouts.
    Size {
        /// Rollouts in the group.
        got: usize,
        /// `group_size` (or `group_overrides.group_size`).
        expected: usize,
    },
    /// Every rollout has the same score (`ensure_scores_are_not_same`).
    EqualScores,
    /// A sequence reached the trainer's token limit.
    TooLong {
        /// The longest offending sequence's length.
        len: usize,
        /// The trainer's `max_token_len`.
        limit: i64,
    },
    /// The environment's `score_group` hook skipped the group.
    Skipped,
}

impl DropReason {
    /// The reason's name in metrics (`train/groups_dropped_<key>`).
    pub fn key(&self) -> &'static str {
        match self {
            DropReason::Size { .. } => "size",
            DropReason::EqualScores => "equal_scores",
            DropReason::TooLong { .. } => "too_long",
            DropReason::Skipped => "skipped",
        }
    }

    /// What happened and the knob that changes it, for the log.
    pub fn explain(&self) -> String {
        match self {
            DropReason::Size { got, expected } => format!(
                "a group had {got} rollouts, expected {expected} (group_size or group_overrides.group_size)"
            ),
            DropReason::EqualScores => "all scores in a group were equal; --env.ensure_scores_are_not_same false keeps such groups".into(),
            DropReason::TooLong { limit, .. } => format!(
                "a sequence reached the trainer's max_token_len {limit}; raise it in the trainer or lower --env.max_token_length"
            ),
            DropReason::Skipped => {
                "skipped by the environment's score_group (each reason is logged at DEBUG)".into()
            }
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropReason::Size { got, expected } => {
                write!(f, "has {got} rollouts, expected {expected}")
            }
            DropReason::EqualScores => {
                write!(f, "all scores are equal (ensure_scores_are_not_same)")
            }
            DropReason::TooLong { len, limit } => write!(
                f,
                "a sequence has {len} tokens, at or above the trainer's limit {limit}"
            ),
            DropReason::Skipped => write!(f, "skipped by the environment's score_group"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atropos::json::to_python_string;

    fn item(score: f64, answer: &str) -> ScoredItem {
        let messages = vec![Message::user("List files."), Message::assistant(answer)];
        let (tokens, masks) = placeholder_tokens(&messages);
        ScoredItem {
            tokens,
            masks,
            score,
            messages,
            inference_logprobs: None,
        }
    }

    #[test]
    fn hermes_group_has_the_reference_key_order_and_empty_lists() {
        let mut g = ScoredDataGroup::from_items(vec![item(1.0, "a.py"), item(0.0, "b.py")], false);
        g.fill_absent_nulls();
        let line = to_python_string(&g);
        assert!(
            line.starts_with(r#"{"tokens": [[0, 1, 2, 3]], "#)
                || line.starts_with(r#"{"tokens": [["#)
        );
        let keys: Vec<String> = serde_json::from_str::<Map<String, Value>>(&line)
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            [
                "tokens",
                "masks",
                "scores",
                "advantages",
                "ref_logprobs",
                "messages",
                "group_overrides",
                "overrides",
                "images",
                "distill_token_ids",
                "distill_logprobs"
            ]
        );
        assert!(line.contains(r#""advantages": [], "ref_logprobs": [], "messages": [[{"role": "user", "content": "List files."}"#));
        assert!(line.ends_with(r#""group_overrides": {}, "overrides": [], "images": [], "distill_token_ids": null, "distill_logprobs": null}"#));
    }

    #[test]
    fn round_trip_keeps_null_vs_absent() {
        let text = r#"{"tokens": [[1]], "masks": [[-100]], "scores": [1.0], "ref_logprobs": null}"#;
        let g: ScoredDataGroup = serde_json::from_str(text).unwrap();
        assert_eq!(g.ref_logprobs, Slot::Null);
        assert!(g.overrides.is_absent());
        assert_eq!(to_python_string(&g), text);
    }

    /// `to_json` writes what serde writes for the group, in both layouts, whatever state each
    /// key is in (absent, null, a value) and however long the lists are.
    #[test]
    fn to_json_is_the_serde_serialisation_byte_for_byte() {
        let mut full = ScoredDataGroup::from_items(vec![item(1.0, "a.py"), item(0.5, "é")], true);
        full.tokens
            .push((0..5000).map(|i| i * 37 % 151_700).collect());
        full.masks.push(
            (0..5000)
                .map(|i| if i % 3 == 0 { -100 } else { i })
                .collect(),
        );
        full.advantages = Slot::Value(vec![vec![0.5, -1.0]]);
        full.generation_params = Slot::Value(Map::from_iter([("temperature".into(), 1.0.into())]));
        full.inference_logprobs = Slot::Value(vec![vec![-0.25, 1.0]]);
        full.overrides = Slot::Value(vec![Map::new()]);
        full.distill_token_ids = Slot::Value(serde_json::json!([[1, 2]]));
        full.env_id = Slot::Value(7);
        let mut nulls = ScoredDataGroup::from_items(vec![item(1.0, "a.py")], false);
        nulls.fill_absent_nulls();
        nulls.images = Slot::Null;
        nulls.messages = Slot::Null;
        let empty = ScoredDataGroup::default();
        for group in [full, nulls, empty] {
            for layout in [JsonLayout::Python, JsonLayout::Compact] {
                let fast = group.to_json(layout);
                assert_eq!(
                    String::from_utf8(fast).unwrap(),
                    String::from_utf8(layout.to_vec(&group)).unwrap()
                );
            }
        }
    }

    #[test]
    fn placeholder_tokens_keep_lengths_equal_for_empty_text() {
        let (t, m) = placeholder_tokens(&[]);
        assert_eq!((t, m), (vec![0], vec![-100]));
    }

    #[test]
    fn expected_size_survives_null_group_overrides() {
        let g = ScoredDataGroup {
            group_overrides: Slot::Null,
            ..Default::default()
        };
        assert_eq!(g.expected_size(4), 4);
    }

    #[test]
    fn group_rules_name_their_reason() {
        let g = ScoredDataGroup {
            tokens: vec![vec![1, 2, 3], vec![1]],
            scores: vec![1.0, 1.0],
            ..Default::default()
        };
        assert_eq!(
            g.drop_reason(3, false, None),
            Some(DropReason::Size {
                got: 2,
                expected: 3
            })
        );
        assert_eq!(g.drop_reason(2, true, None), Some(DropReason::EqualScores));
        assert_eq!(g.drop_reason(2, false, None), None);
        assert_eq!(g.drop_reason(2, false, Some(4)), None);
        assert_eq!(
            g.drop_reason(2, false, Some(3)),
            Some(DropReason::TooLong { len: 3, limit: 3 })
        );
        assert_eq!(g.drop_reason(2, false, Some(-1)), None);
        let mut o = serde_json::Map::new();
        o.insert("group_size".into(), 2.into());
        let g2 = ScoredDataGroup {
            group_overrides: Slot::Value(o),
            ..g
        };
        assert_eq!(g2.drop_reason(5, false, None), None);
    }
}
