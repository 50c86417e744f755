//! Checking a model's math answer against a gold answer, the way Hugging Face's
//! `math-verify` does (its extraction order, its LaTeX clean-up, its rules for percentages,
//! decimals, intervals and sets), in plain Rust: no Python, no computer algebra system.
//!
//! [`extract_answer`] finds the final answer in a reply; [`verify`] decides whether it says
//! what the gold answer says. Values are compared exactly while they stay rational, and
//! numerically otherwise (roots, `\pi`, and expressions in variables, evaluated at a few
//! points), so `2\sqrt{2}` equals `\sqrt{8}` and `(x+1)^2` equals `x^2+2x+1`.
//! `docs/design/math-verifier.md` lists what is and is not covered and how it was checked
//! against math-verify.

mod answer;
mod expr;
mod extract;
mod latex;
mod rational;
mod token;

pub use extract::extract_answer;
use token::is_unit;

/// Whether `answer` (a model's reply, or just an answer) gives the same answer as `gold`.
///
/// Each side is read whole when it is a bare answer (`"1/2"`, `"\frac{1}{2}"`, `"(0, 1]"`),
/// otherwise its final answer is [extracted](extract_answer) first. A reply with no answer
/// is wrong. Never panics, whatever the input.
pub fn verify(gold: &str, answer: &str) -> bool {
    match (final_answer(gold), final_answer(answer)) {
        (Some(g), Some(a)) => answer::same(&g, &a),
        _ => false,
    }
}

/// The answer `text` gives: all of it when it is a bare answer, else the extracted one.
fn final_answer(text: &str) -> Option<answer::Answer> {
    if is_bare(text) {
        Some(answer::read(text.trim(), text.contains(['$', '\\'])))
    } else {
        extract::find(text).map(|found| answer::read(&found.text, found.latex))
    }
}

/// One line with no prose in it: no word of letters but a unit, and no run of three letters
/// outside a LaTeX command.
fn is_bare(text: &str) -> bool {
    let text = text.trim();
    if text.is_empty() || text.contains('\n') || text.contains("####") {
        return false;
    }
    let prose = |w: &str| w.len() > 1 && w.chars().all(|c| c.is_ascii_alphabetic()) && !is_unit(w);
    if text.split_whitespace().any(prose) {
        return false;
    }
    let mut run = 0;
    let mut in_command = false;
    for c in text.chars() {
        if c.is_ascii_alphabetic() {
            run += 1;
            if run >= 3 && !in_command {
                return false;
            }
        } else {
            run = 0;
            in_command = c == '\\';
        }
    }
    true
}

#[cfg(test)]
mod tests;
