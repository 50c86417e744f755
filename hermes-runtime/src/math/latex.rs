//! LaTeX clean-up: what a model may wrap around an answer that does not change its value
//! (delimiters, spacing, sizing, `\dfrac`, degree signs, thousands separators, a trailing full
//! stop), removed before tokenising, and a trailing percent sign taken off as a flag.

/// A normalised answer text and whether it ended in a percent sign (or word).
#[derive(Debug, PartialEq)]
pub(crate) struct Normalized {
    pub(crate) text: String,
    pub(crate) percent: bool,
}

/// Spellings that mean nothing for the value; removed in this order.
const ERASE: &[&str] = &[
    "\\displaystyle",
    "\\left",
    "\\right",
    "\\bigl",
    "\\bigr",
    "\\Bigl",
    "\\Bigr",
    "\\big",
    "\\Big",
    "^{\\circ}",
    "^\\circ",
    "\\circ",
    "\\degree",
    "°",
    "{,}",
    "{, }",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "\\qquad",
    "\\quad",
];

/// Spellings with a single meaning for the parser.
const REWRITE: &[(&str, &str)] = &[
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\cfrac", "\\frac"),
    ("\\lbrace", "\\{"),
    ("\\rbrace", "\\}"),
    ("\\cdot", "*"),
    ("\\times", "*"),
    ("\\ast", "*"),
    ("\\div", "/"),
    ("\\%", "%"),
    ("−", "-"),
    ("×", "*"),
    ("÷", "/"),
    ("π", "\\pi"),
    ("∞", "\\infty"),
    ("~", " "),
    // "12 and 13": two answers.
    ("\\text{ and }", ","),
    ("\\text{and}", ","),
    (" and ", ","),
];

/// Words after a number that say it is a percentage.
const PERCENT_WORDS: &[&str] = &["percentage", "percent", "pct", "%"];

/// Cleans `raw` (an extracted answer) for the tokeniser; `latex` when it came from LaTeX, where
/// `1,5` is a list, not plain text's decimal comma.
pub(crate) fn normalize(raw: &str, latex: bool) -> Normalized {
    let delimited = latex || raw.contains(['$', '\\']);
    let mut s = unwrap_math(raw.trim()).to_string();
    if let Some(inner) = crate::math::extract::final_boxes(&s) {
        s = inner;
    }
    s = s
        .replace("\\$", "")
        .replace('$', "")
        .replace(",\\! ", ",")
        .replace(",\\!", ",");
    s = single_backslashes(&s);
    // `x = 1/3 \approx 0.33`: the exact value is the answer, the approximation an aside.
    if let Some((exact, _)) = s.split_once("\\approx").filter(|(e, _)| e.contains('=')) {
        s = exact.to_string();
    }
    for pattern in ERASE {
        s = s.replace(pattern, "");
    }
    for (from, to) in REWRITE {
        s = s.replace(from, to);
    }
    s = s.replace("\\text{ }", " ");
    let mut s = s
        .trim()
        .trim_end_matches(['.', ',', ';'])
        .trim()
        .to_string();
    let mut percent = false;
    let lower = s.to_ascii_lowercase();
    for word in PERCENT_WORDS {
        if lower.ends_with(word) && s.len() > word.len() {
            s.truncate(s.len() - word.len());
            percent = true;
            break;
        }
    }
    for text_percent in ["\\text{%}", "\\text{ percent}", "\\text{percent}"] {
        if let Some(rest) = s.strip_suffix(text_percent) {
            s = rest.to_string();
            percent = true;
        }
    }
    let s = s.trim();
    let spaced = s.replace(' ', ",");
    let text = if !delimited && is_decimal_comma(s) {
        s.replace(',', ".")
    } else if is_grouped_thousands(s) || (!s.contains(',') && is_grouped_thousands(&spaced)) {
        spaced.replace(',', "")
    } else {
        braced_short_arguments(s)
    };
    Normalized { text, percent }
}

/// The inside of `$…$`, `$$…$$`, `\(…\)` or `\[…\]` when one pair wraps all of `s`.
fn unwrap_math(s: &str) -> &str {
    for (open, close) in [("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")] {
        if let Some(inner) = s.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
            return inner.trim();
        }
    }
    s
}

/// `\\frac` (a doubled backslash, as in an escaped string) → `\frac`.
fn single_backslashes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let doubled = c == '\\'
            && chars.peek() == Some(&'\\')
            && chars
                .clone()
                .nth(1)
                .is_some_and(|n| n.is_ascii_alphabetic());
        if !doubled {
            out.push(c);
        }
    }
    out
}

/// `1000,99` or `0,111` outside LaTeX: a decimal comma (math-verify reads plain text so),
/// unless the commas group thousands.
fn is_decimal_comma(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    s.split_once(',').is_some_and(|(int, frac)| {
        !int.is_empty()
            && !frac.is_empty()
            && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
            && !is_grouped_thousands(s)
    })
}

/// `1,234` or `-12,345,678.9`: commas every three digits, which are not a list.
fn is_grouped_thousands(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let groups: Vec<&str> = int.split(',').collect();
    groups.len() > 1
        && frac.bytes().all(|b| b.is_ascii_digit())
        && (1..=3).contains(&groups[0].len())
        && !groups[0].starts_with('0')
        && groups[1..].iter().all(|g| g.len() == 3)
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit()))
}

/// `\frac12` → `\frac{1}{2}`, `\sqrt2` → `\sqrt{2}`: LaTeX lets a one-character argument go
/// without braces, and models write it so.
fn braced_short_arguments(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let rest: String = chars[i..chars.len().min(i + 5)].iter().collect();
        let args = if rest == "\\frac" {
            2
        } else if rest == "\\sqrt" {
            1
        } else {
            0
        };
        if args == 0 || chars.get(i + 5).is_some_and(|c| c.is_ascii_alphabetic()) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        out.push_str(&rest);
        i += 5;
        if args == 1 && chars.get(i) == Some(&'[') {
            while i < chars.len() && chars[i] != ']' {
                out.push(chars[i]);
                i += 1;
            }
        }
        for _ in 0..args {
            while chars.get(i) == Some(&' ') && chars.get(i + 1).is_some_and(|c| *c != '{') {
                i += 1;
            }
            match chars.get(i) {
                Some(c) if c.is_ascii_alphanumeric() => {
                    out.push('{');
                    out.push(*c);
                    out.push('}');
                    i += 1;
                }
                _ => break,
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        normalize(s, false).text
    }

    #[test]
    fn delimiters_and_spacing_go() {
        assert_eq!(
            norm("$\\left( \\dfrac{1}{2} \\right)$."),
            "( \\frac{1}{2} )"
        );
        assert_eq!(norm("\\[ 90^\\circ \\]"), "90");
        assert_eq!(norm("$\\boxed{7}$"), "7");
        assert_eq!(norm("1\\,000"), "1000");
        assert_eq!(norm("x \\qquad"), "x");
    }

    #[test]
    fn thousands_separators_go_but_lists_stay() {
        assert_eq!(norm("7,425,000"), "7425000");
        assert_eq!(norm("$1,2$"), "1,2");
        assert_eq!(norm("1 000"), "1000");
        assert_eq!(norm("1000,99"), "1000.99");
        assert_eq!(norm("0,111"), "0.111");
        assert_eq!(norm("$1,22$"), "1,22");
        assert_eq!(norm("\\\\frac{1}{2}"), "\\frac{1}{2}");
        assert_eq!(norm("11,\\! 111,\\! 100"), "11111100");
    }

    #[test]
    fn percent_becomes_a_flag() {
        let n = normalize("$50\\%$", true);
        assert_eq!((n.text.as_str(), n.percent), ("50", true));
        assert!(normalize("28 percent", false).percent);
    }

    #[test]
    fn short_arguments_get_braces() {
        assert_eq!(norm("\\frac12"), "\\frac{1}{2}");
        assert_eq!(norm("2\\sqrt2"), "2\\sqrt{2}");
        assert_eq!(norm("\\frac3{3}"), "\\frac{3}{3}");
        assert_eq!(norm("\\sqrt[3]{8}"), "\\sqrt[3]{8}");
    }
}
