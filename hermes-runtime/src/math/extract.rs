//! Finding the final answer in a model's reply, in math-verify's order of trust: the last
//! `\boxed{}`, then "final answer is X", then GSM8K's `#### X` (which math-verify does not
//! know; a reply in GSM8K's format means it), then what follows the word "answer", then the
//! last math span or number.

/// How far after the word "answer" its value may start (math-verify allows 50 characters).
const ANSWER_REACH: usize = 50;

/// How far after the word "answer" an `=` may introduce its value (math-verify: 100).
const EQUALS_REACH: usize = 100;

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
    if let Some(boxed) = final_boxes(text) {
        return Some(Found {
            text: boxed,
            latex: true,
        });
    }
    let candidates = candidates(text);
    if let Some(s) = final_answer_is(text, &candidates) {
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
    if let Some(s) = after_answer_word(text, &candidates) {
        return Some(found(s));
    }
    candidates
        .iter()
        .max_by_key(|s| (s.end, std::cmp::Reverse(s.start)))
        .map(found)
}

/// The contents of the last complete `\boxed{…}` or `\fbox{…}` (balanced braces), joined with
/// those of the boxes just before it when only "and", a comma or spacing stands between them
/// (`\boxed{-2} \quad\text{and}\quad \boxed{1}` is the list `-2, 1`), as math-verify joins them.
pub(crate) fn final_boxes(text: &str) -> Option<String> {
    let boxes = boxes(text);
    let &(mut start, open, close) = boxes.last()?;
    let mut parts = vec![text[open + 1..close].trim()];
    for &(before_start, before_open, before_close) in boxes.iter().rev().skip(1) {
        if before_close >= start || !separates(&text[before_close + 1..start]) {
            break;
        }
        parts.push(text[before_open + 1..before_close].trim());
        start = before_start;
    }
    parts.reverse();
    Some(parts.join(", "))
}

fn separates(gap: &str) -> bool {
    let mut rest = gap.to_string();
    for separator in [
        "\\text{ and }",
        "\\text{and}",
        "\\text{ or }",
        "\\text{or}",
        "\\qquad",
        "\\quad",
        "\\(",
        "\\)",
        "and",
        "or",
        "$",
        ",",
        ";",
    ] {
        rest = rest.replace(separator, "");
    }
    rest.trim().is_empty()
}

/// Every complete box as (where its command starts, its `{`, its `}`), in order.
fn boxes(text: &str) -> Vec<(usize, usize, usize)> {
    let mut starts: Vec<(usize, usize)> = ["\\boxed", "\\fbox"]
        .iter()
        .flat_map(|cmd| text.match_indices(cmd).map(|(i, m)| (i, i + m.len())))
        .collect();
    starts.sort_unstable();
    let pairs = brace_pairs(text);
    starts
        .into_iter()
        .filter_map(|(start, after)| {
            let rest = text[after..].trim_start();
            let open = text.len() - rest.len();
            let at = pairs.binary_search_by_key(&open, |&(o, _)| o).ok()?;
            Some((start, open, pairs[at].1))
        })
        .collect()
}

/// Every balanced `{`…`}` as (open, close) byte positions, sorted by open: one pass, so
/// that a reply of a thousand unclosed boxes costs no more than one.
fn brace_pairs(text: &str) -> Vec<(usize, usize)> {
    let mut stack = Vec::new();
    let mut pairs = Vec::new();
    for (i, b) in text.bytes().enumerate() {
        match b {
            b'{' => stack.push(i),
            b'}' => {
                if let Some(open) = stack.pop() {
                    pairs.push((open, i));
                }
            }
            _ => {}
        }
    }
    pairs.sort_unstable();
    pairs
}

/// The first candidate starting at or after byte `at` (candidates are sorted by start).
fn first_from(candidates: &[Span], at: usize) -> Option<&Span> {
    candidates.get(candidates.partition_point(|s| s.start < at))
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
        first_from(candidates, value_at).filter(|s| {
            text[value_at..s.start]
                .trim_start_matches([':', ' '])
                .is_empty()
        })
    })
}

/// After the last word "answer" that has one, as math-verify matches it: the value after the
/// last `=` within 100 characters (`answer: 3 + 4 = 7`), else the first candidate within 50
/// characters; either way not the left side of an equation.
fn after_answer_word<'a>(text: &str, candidates: &'a [Span]) -> Option<&'a Span> {
    let lower = text.to_ascii_lowercase();
    let mut words: Vec<usize> = lower
        .match_indices("answer")
        .map(|(i, w)| i + w.len())
        .collect();
    words.reverse();
    let not_a_left_side = |s: &Span| !text[s.end..].trim_start().starts_with('=');
    words.into_iter().find_map(|after| {
        let window = within_chars(text, after, EQUALS_REACH);
        if let Some(eq) = window.rfind('=') {
            let at = after + eq + 1;
            let right_side = first_from(candidates, at)
                .filter(|s| text[at..s.start].trim().is_empty() && not_a_left_side(s));
            if right_side.is_some() {
                return right_side;
            }
        }
        let reach = after + within_chars(text, after, ANSWER_REACH).len();
        let from = candidates.partition_point(|s| s.start < after);
        candidates[from..]
            .iter()
            .take_while(|s| s.start <= reach)
            .find(|s| not_a_left_side(s))
    })
}

/// The text from byte `at` on, at most `chars` characters of it.
fn within_chars(text: &str, at: usize, chars: usize) -> &str {
    let rest = &text[at..];
    let end = rest
        .char_indices()
        .nth(chars)
        .map_or(rest.len(), |(i, _)| i);
    &rest[..end]
}

/// Every math span (`$…$`, `$$…$$`, `\(…\)`, `\[…\]`) and every plain number outside them
/// in `text`, sorted by start.
fn candidates(text: &str) -> Vec<Span> {
    let mut out = math_spans(text);
    let plain: Vec<Span> = numbers(text)
        .into_iter()
        .filter(|n| {
            // Spans do not overlap and are sorted: only the last one starting before can hold n.
            let before = out.partition_point(|m| m.start <= n.start);
            before == 0 || out[before - 1].end < n.end
        })
        .collect();
    out.extend(plain);
    out.sort_by_key(|s| s.start);
    out
}

fn math_spans(text: &str) -> Vec<Span> {
    let delimiters = [
        ("$$", "$$", true),
        ("\\[", "\\]", true),
        ("\\(", "\\)", false),
        ("$", "$", false),
    ];
    // Where each closing delimiter occurs, found once: looking ahead from every opening one
    // would be quadratic in a reply full of unclosed `\(`. An escaped `\$` (a currency sign
    // inside math) closes nothing.
    let closers: Vec<Vec<usize>> = delimiters
        .iter()
        .map(|(_, close, _)| {
            text.match_indices(close)
                .map(|(at, _)| at)
                .filter(|&at| *close != "$" || !text[..at].ends_with('\\'))
                .collect()
        })
        .collect();
    let newlines: Vec<usize> = text.match_indices('\n').map(|(at, _)| at).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let found = delimiters
            .iter()
            .zip(&closers)
            .find_map(|((open, close, multiline), at)| {
                rest.strip_prefix(open)?;
                let body_start = i + open.len();
                let end = *at.get(at.partition_point(|&p| p < body_start))?;
                let line_end = newlines[newlines.partition_point(|&p| p < body_start)..]
                    .first()
                    .copied()
                    .unwrap_or(usize::MAX);
                let inner = &text[body_start..end];
                let ok = !inner.trim().is_empty() && (*multiline || end < line_end);
                ok.then(|| (end + close.len() - i, inner.trim().to_string()))
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
        assert_eq!(
            extract_answer("roots \\[ \\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}. \\]")
                .as_deref(),
            Some("-2, 1")
        );
        assert_eq!(
            extract_answer("\\boxed{1} so then \\boxed{2}").as_deref(),
            Some("2")
        );
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
    fn after_answer_an_equals_sign_leads_to_the_value() {
        assert_eq!(
            extract_answer("To answer this, we compute 3+4 = 7. So it is 7 apples").as_deref(),
            Some("7")
        );
        assert_eq!(
            extract_answer("To answer it: x = 2, y = 3, and more words").as_deref(),
            Some("3")
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
