//! Finding the final answer in a model's reply, in math-verify's order of trust: the last
//! `\boxed{}`, then what follows the word "answer", then GSM8K's `#### X`, then the last
//! math span or number.

/// How far after the word "answer" its value may start (math-verify allows 50 characters).
const ANSWER_REACH: usize = 50;

/// Where a candidate sits in the text and what it says.
#[derive(Clone)]
struct Span {
    start: usize,
    end: usize,
    text: String,
    latex: bool,
}

/// An extracted answer and whether it came from LaTeX (a box or a math span), where a comma
/// separates items rather than decimals.
pub(crate) struct Found {
    pub(crate) text: String,
    pub(crate) latex: bool,
}

/// The final answer in `text`, as written (LaTeX and all); `None` when there is none.
pub fn extract_answer(text: &str) -> Option<String> {
    find(text).map(|found| found.text)
}

pub(crate) fn find(text: &str) -> Option<Found> {
    let found = |s: &Span| Found {
        text: s.text.clone(),
        latex: s.latex,
    };
    if let Some(boxed) = last_boxed(text) {
        return Some(Found {
            text: boxed.trim().to_string(),
            latex: true,
        });
    }
    let candidates = candidates(text);
    if let Some(s) = final_answer_is(text, &candidates) {
        return Some(found(s));
    }
    if let Some(s) = after_answer_word(text, &candidates) {
        return Some(found(s));
    }
    if let Some((_, rest)) = text.rsplit_once("####") {
        let line = rest.trim_start().lines().next().unwrap_or("").trim();
        if !line.is_empty() {
            return Some(Found {
                text: line.to_string(),
                latex: line.contains(['$', '\\']),
            });
        }
    }
    candidates
        .iter()
        .max_by_key(|s| (s.end, std::cmp::Reverse(s.start)))
        .map(found)
}

/// The contents of the last complete `\boxed{…}` or `\fbox{…}` (balanced braces).
pub(crate) fn last_boxed(text: &str) -> Option<&str> {
    let mut starts: Vec<usize> = ["\\boxed", "\\fbox"]
        .iter()
        .flat_map(|cmd| text.match_indices(cmd).map(|(i, m)| i + m.len()))
        .collect();
    starts.sort_unstable();
    starts.iter().rev().find_map(|&after| {
        let rest = text[after..].trim_start();
        let open = text.len() - rest.len();
        if !rest.starts_with('{') {
            return None;
        }
        let mut depth = 0usize;
        for (i, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(&text[open + 1..open + i]);
                    }
                }
                _ => {}
            }
        }
        None
    })
}

/// "The final answer is X" (math-verify lets up to 100 characters sit between "final answer"
/// and "is"): the candidate right after the "is".
fn final_answer_is<'a>(text: &str, candidates: &'a [Span]) -> Option<&'a Span> {
    let lower = text.to_ascii_lowercase();
    let mut phrases: Vec<usize> = lower
        .match_indices("final answer")
        .map(|(i, w)| i + w.len())
        .collect();
    phrases.reverse();
    phrases.into_iter().find_map(|after| {
        let window: String = lower[after..].chars().take(100 + 3).collect();
        let is = window.find(" is")? + 3;
        let value_at = after + is;
        let gap = |s: &Span| {
            s.start >= value_at
                && text[value_at..s.start]
                    .trim_start_matches([':', ' '])
                    .is_empty()
        };
        candidates.iter().filter(|s| gap(s)).min_by_key(|s| s.start)
    })
}

/// The first candidate starting soon after the last word "answer" that has one.
fn after_answer_word<'a>(text: &str, candidates: &'a [Span]) -> Option<&'a Span> {
    let lower = text.to_ascii_lowercase();
    let mut words: Vec<usize> = lower
        .match_indices("answer")
        .map(|(i, w)| i + w.len())
        .collect();
    words.reverse();
    words.into_iter().find_map(|after| {
        candidates
            .iter()
            .filter(|s| s.start >= after && text[after..s.start].chars().count() <= ANSWER_REACH)
            .min_by_key(|s| s.start)
    })
}

/// Every math span (`$…$`, `$$…$$`, `\(…\)`, `\[…\]`) and every plain number in `text`.
fn candidates(text: &str) -> Vec<Span> {
    let mut out = math_spans(text);
    let plain: Vec<Span> = numbers(text)
        .into_iter()
        .filter(|n| !out.iter().any(|m| m.start <= n.start && n.end <= m.end))
        .collect();
    out.extend(plain);
    out
}

fn math_spans(text: &str) -> Vec<Span> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let delimiters = [
            ("$$", "$$", true),
            ("\\[", "\\]", true),
            ("\\(", "\\)", false),
            ("$", "$", false),
        ];
        let found = delimiters.iter().find_map(|(open, close, multiline)| {
            let body = rest.strip_prefix(open)?;
            // An escaped `\$` (a currency sign inside math) does not close the span.
            let end = body
                .match_indices(close)
                .map(|(at, _)| at)
                .find(|&at| !body[..at].ends_with('\\'))?;
            let inner = &body[..end];
            let ok = !inner.trim().is_empty() && (*multiline || !inner.contains('\n'));
            ok.then(|| (open.len() + end + close.len(), inner.trim().to_string()))
        });
        match found {
            Some((len, inner)) => {
                out.push(Span {
                    start: i,
                    end: i + len,
                    text: inner,
                    latex: true,
                });
                i += len;
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// Plain numbers: `-12`, `1,234.5`, `2,74` (a decimal comma), `.5`, `3/4`, `28%`, standing on
/// their own (not inside a word such as `AZYUK2A`).
fn numbers(text: &str) -> Vec<Span> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts_number = b[i].is_ascii_digit()
            || (matches!(b[i], b'-' | b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit));
        let anchored =
            i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.' || b[i - 1] == b'\\');
        if !(starts_number && anchored) {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        let mut end = i;
        while end < b.len() {
            let c = b[end];
            let digit_at = |k: usize| b.get(k).is_some_and(u8::is_ascii_digit);
            if c.is_ascii_digit() {
                end += 1;
            } else if c == b',' && (1..=3).all(|k| digit_at(end + k)) && !digit_at(end + 4) {
                end += 4;
            } else if digit_at(end + 1)
                && (c == b'.' || c == b'/' || (c == b',' && !text[start..end].contains([',', '.'])))
            {
                end += 2;
            } else {
                break;
            }
        }
        let rest = &text[end..];
        let trimmed = rest.trim_start();
        let text_end = if trimmed.starts_with('%') {
            end + (rest.len() - trimmed.len()) + 1
        } else {
            end
        };
        out.push(Span {
            start,
            end: text_end,
            text: text[start..text_end].to_string(),
            latex: false,
        });
        i = end.max(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_box_wins_and_braces_balance() {
        assert_eq!(
            extract_answer("first \\boxed{1} then \\boxed{\\frac{1}{2}} done").as_deref(),
            Some("\\frac{1}{2}")
        );
        assert_eq!(extract_answer("\\fbox{7}").as_deref(), Some("7"));
        assert_eq!(extract_answer("\\boxed{unclosed").as_deref(), None);
    }

    #[test]
    fn the_answer_word_beats_a_later_number() {
        assert_eq!(
            extract_answer("The answer is $12$. Check: 3 * 4 = 12 and 5.").as_deref(),
            Some("12")
        );
    }

    #[test]
    fn the_final_answer_is_what_follows_is() {
        assert_eq!(
            extract_answer("Final Answer: The largest $n$ is 34.").as_deref(),
            Some("34")
        );
    }

    #[test]
    fn gsm8k_hashes_then_the_last_number() {
        assert_eq!(extract_answer("so 3+4=7\n#### 7").as_deref(), Some("7"));
        assert_eq!(
            extract_answer("costs 1,234.5 dollars").as_deref(),
            Some("1,234.5")
        );
        assert_eq!(extract_answer("about 28 %").as_deref(), Some("28 %"));
        assert_eq!(
            extract_answer("Soucis : 2,74 $ a..").as_deref(),
            Some("2,74")
        );
        assert_eq!(extract_answer("AZYUK2A"), None);
        assert_eq!(extract_answer("nothing here"), None);
    }

    #[test]
    fn math_spans_count_as_candidates() {
        assert_eq!(
            extract_answer("so $x = \\sqrt{2}$").as_deref(),
            Some("x = \\sqrt{2}")
        );
        assert_eq!(extract_answer("so \\[ 9 \\]").as_deref(), Some("9"));
    }
}
