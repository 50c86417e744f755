//! Encoding a rendered chat piece by piece. The tokenizer itself first cuts its input at the
//! added tokens it matches before normalising (`<|im_start|>`, `<|im_end|>`, …) and encodes each
//! piece between them on its own; every chat of a run repeats the system prompt with its tool
//! schemas, and the rollouts of a group repeat their prompt, so those pieces are encoded once and
//! remembered. The ids and offsets are the tokenizer's own: the same cut, the same pieces, the
//! same encoder. Where a piece's tokens could depend on where it lies in the text (an added token
//! that strips or needs word boundaries, a `Metaspace` pre-tokenizer that prefixes only the
//! first piece) or on the whole input (truncation, padding), the text is encoded whole.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use foldhash::fast::RandomState;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use tokenizers::pre_tokenizers::metaspace::PrependScheme;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::Tokenizer;

/// Pieces remembered at most (the memo is emptied when full).
const KEPT_MAX: usize = 512;
/// Pieces seen once that are tracked at most (emptied when full).
const SEEN_MAX: usize = 65_536;

/// Token ids of a text and the byte offset each starts at.
pub(crate) type Encoded = (Vec<u32>, Vec<usize>);

/// The cut a tokenizer makes first, and the pieces already encoded.
pub(crate) struct PieceEncoder {
    /// The added tokens matched before normalisation, leftmost-longest as the tokenizer does.
    cut: AhoCorasick,
    /// Their ids, by pattern.
    ids: Vec<u32>,
    hasher: RandomState,
    memo: Mutex<Memo>,
}

/// Both sets are keyed by the piece's hash, computed once per piece (hashing every piece twice
/// showed in a turn's profile); a kept piece is compared with its text before use.
#[derive(Default)]
struct Memo {
    /// Hashes of pieces seen once: a piece is remembered when it comes again, so one-off
    /// pieces (tool output, the model's own turns) are never stored.
    seen: HashSet<u64, RandomState>,
    kept: HashMap<u64, (String, Arc<Encoded>), RandomState>,
}

impl PieceEncoder {
    /// The piece encoder of `tokenizer`, when cutting cannot change its tokens.
    pub fn new(tokenizer: &Tokenizer) -> Option<Self> {
        if tokenizer.get_truncation().is_some()
            || tokenizer.get_padding().is_some()
            || tokenizer.get_encode_special_tokens()
            || !tokenizer.get_pre_tokenizer().is_none_or(position_free)
        {
            return None;
        }
        let mut added: Vec<(u32, String)> = Vec::new();
        for (id, token) in tokenizer.get_added_tokens_decoder() {
            if token.normalized {
                continue;
            }
            if token.single_word || token.lstrip || token.rstrip {
                return None;
            }
            added.push((id, token.content));
        }
        if added.is_empty() {
            return None;
        }
        added.sort();
        let cut = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(added.iter().map(|(_, content)| content))
            .ok()?;
        Some(PieceEncoder {
            cut,
            ids: added.into_iter().map(|(id, _)| id).collect(),
            hasher: RandomState::default(),
            memo: Mutex::new(Memo::default()),
        })
    }

    /// `tokenizer.encode(text, false)`'s ids and token start offsets.
    pub fn encode(&self, tokenizer: &Tokenizer, text: &str) -> tokenizers::Result<Encoded> {
        // A token covers at least one byte in byte-level BPEs (most chat models): room for the
        // whole text up front, where growing by doubling copied ids and offsets of a long chat
        // (kilobytes each) several times over.
        let (mut ids, mut starts) = (
            Vec::with_capacity(text.len()),
            Vec::with_capacity(text.len()),
        );
        let mut at = 0;
        let piece = |from: usize, to: usize, ids: &mut Vec<u32>, starts: &mut Vec<usize>| {
            if from < to {
                let encoded = self.piece(tokenizer, &text[from..to])?;
                ids.extend_from_slice(&encoded.0);
                starts.extend(encoded.1.iter().map(|s| s + from));
            }
            tokenizers::Result::Ok(())
        };
        for found in self.cut.find_iter(text) {
            piece(at, found.start(), &mut ids, &mut starts)?;
            ids.push(self.ids[found.pattern().as_usize()]);
            starts.push(found.start());
            at = found.end();
        }
        piece(at, text.len(), &mut ids, &mut starts)?;
        Ok((ids, starts))
    }

    /// One piece between added tokens, from the memo when it was encoded before.
    fn piece(&self, tokenizer: &Tokenizer, piece: &str) -> tokenizers::Result<Arc<Encoded>> {
        let hash = self.hasher.hash_one(piece);
        let keep = {
            let mut memo = self.memo.lock().expect("piece memo poisoned");
            if let Some((text, found)) = memo.kept.get(&hash) {
                if text == piece {
                    return Ok(found.clone());
                }
            }
            if memo.seen.len() >= SEEN_MAX {
                memo.seen.clear();
            }
            !memo.seen.insert(hash)
        };
        let encoding = tokenizer.encode(piece, false)?;
        let encoded = Arc::new((
            encoding.get_ids().to_vec(),
            encoding.get_offsets().iter().map(|o| o.0).collect(),
        ));
        if keep {
            let mut memo = self.memo.lock().expect("piece memo poisoned");
            if memo.kept.len() >= KEPT_MAX {
                memo.kept.clear();
            }
            memo.kept.insert(hash, (piece.to_owned(), encoded.clone()));
        }
        Ok(encoded)
    }
}

/// True when a pre-tokenizer treats every piece alike, wherever it lies in the text.
fn position_free(pre: &PreTokenizerWrapper) -> bool {
    match pre {
        PreTokenizerWrapper::Metaspace(m) => m.get_prepend_scheme() != PrependScheme::First,
        PreTokenizerWrapper::Sequence(seq) => seq.as_ref().iter().all(position_free),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::AddedToken;

    /// A byte-level BPE with real merges (the tiny built-in tokenizer has none) and ChatML
    /// specials.
    fn bpe() -> Tokenizer {
        let alphabet = ByteLevel::alphabet();
        let mut vocab: tokenizers::models::bpe::Vocab = alphabet
            .iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), i as u32))
            .collect();
        let merges: Vec<(String, String)> = [
            ("Ġ", "t"),
            ("h", "e"),
            ("Ġt", "he"),
            ("i", "n"),
            ("Ġ", "a"),
            ("r", "e"),
            ("o", "n"),
            ("Ġ", "c"),
            ("e", "r"),
            ("Ċ", "Ċ"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        for (a, b) in &merges {
            let next = vocab.len() as u32;
            vocab.entry(format!("{a}{b}")).or_insert(next);
        }
        let model = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .expect("bpe");
        let mut tok = Tokenizer::new(model);
        tok.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tok.add_special_tokens(&[
            AddedToken::from("<|im_start|>", true),
            AddedToken::from("<|im_end|>", true),
            AddedToken::from("<tool_call>", false),
        ]);
        tok
    }

    fn whole(tok: &Tokenizer, text: &str) -> Encoded {
        let e = tok.encode(text, false).expect("encode");
        (
            e.get_ids().to_vec(),
            e.get_offsets().iter().map(|o| o.0).collect(),
        )
    }

    #[test]
    fn the_test_tokenizer_merges() {
        let tok = bpe();
        assert_eq!(whole(&tok, " the").0.len(), 1, "Ġthe is one token");
        assert_eq!(whole(&tok, "<|im_start|>").0.len(), 1);
    }

    proptest! {
        #[test]
        fn pieces_encode_exactly_as_the_whole_text(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just("<|im_start|>".to_owned()),
                    Just("<|im_end|>".to_owned()),
                    Just("<tool_call>".to_owned()),
                    Just("<|im_".to_owned()),
                    "[ a-z\\n{}\":,é]{0,24}",
                ],
                0..16,
            )
        ) {
            let tok = bpe();
            let pieces = PieceEncoder::new(&tok).expect("a ChatML BPE can be cut");
            let text = parts.concat();
            // Twice: the second encodes from the memo.
            for _ in 0..2 {
                prop_assert_eq!(pieces.encode(&tok, &text).unwrap(), whole(&tok, &text));
            }
        }
    }

    #[test]
    fn a_repeated_piece_is_remembered_and_a_one_off_is_not() {
        let tok = bpe();
        let pieces = PieceEncoder::new(&tok).unwrap();
        let system = "<|im_start|>system\nthe tools<|im_end|>";
        pieces.encode(&tok, &format!("{system}one")).unwrap();
        assert!(pieces.memo.lock().unwrap().kept.is_empty());
        pieces.encode(&tok, &format!("{system}two")).unwrap();
        let memo = pieces.memo.lock().unwrap();
        let kept: Vec<&str> = memo.kept.values().map(|(text, _)| text.as_str()).collect();
        assert_eq!(kept, ["system\nthe tools"]);
    }

    /// The memo is keyed by hash: a kept piece of another text under the same hash (a
    /// collision) is never used for this one.
    #[test]
    fn a_kept_piece_is_used_only_for_its_own_text() {
        let tok = bpe();
        let pieces = PieceEncoder::new(&tok).unwrap();
        let hash = pieces.hasher.hash_one("the text");
        let other = Arc::new((vec![7, 7, 7], vec![0, 1, 2]));
        pieces
            .memo
            .lock()
            .unwrap()
            .kept
            .insert(hash, ("another text".into(), other));
        assert_eq!(
            pieces.encode(&tok, "the text").unwrap(),
            whole(&tok, "the text")
        );
    }

    #[test]
    fn tokenizers_whose_pieces_depend_on_their_place_are_encoded_whole() {
        let mut stripping = bpe();
        let mut token = AddedToken::from("<x>", true);
        token.lstrip = true;
        stripping.add_special_tokens(&[token]);
        assert!(PieceEncoder::new(&stripping).is_none());
        let mut first_only = bpe();
        first_only.with_pre_tokenizer(Some(tokenizers::pre_tokenizers::metaspace::Metaspace::new(
            '▁',
            PrependScheme::First,
            true,
        )));
        assert!(PieceEncoder::new(&first_only).is_none());
    }
}
