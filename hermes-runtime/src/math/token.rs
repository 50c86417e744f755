//! Tokens of a normalised answer: numbers (exact), variables, LaTeX commands, `\text{}` words
//! and punctuation. Anything unknown becomes [`Token::Other`], which no parse accepts, so odd
//! input falls back to comparing text rather than guessing.

use super::rational::Rational;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token {
    /// A literal; `decimal` when written with a point (math-verify rounds those).
    Num {
        value: Rational,
        decimal: bool,
    },
    Var(String),
    /// A LaTeX command without its backslash: `frac`, `sqrt`, `pi`, `sin`, …
    Cmd(String),
    /// The words of `\text{…}` / `\mathrm{…}`, or a unit such as `cm`.
    Word(String),
    LParen,
    RParen,
    LBrack,
    RBrack,
    LBrace,
    RBrace,
    SetOpen,
    SetClose,
    Plus,
    Minus,
    Star,
    Slash,
    Caret,
    Comma,
    Eq,
    /// An inequality sign (`<`, `\leq`, `\neq`, …).
    Rel(Rel),
    Other(char),
}

/// The relations other than `=` an answer may state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rel {
    Lt,
    Le,
    Gt,
    Ge,
    Ne,
}

/// LaTeX spellings of the relations; `\approx` reads as `=`, as math-verify has it.
fn relation_command(name: &str) -> Option<Token> {
    Some(match name {
        "lt" => Token::Rel(Rel::Lt),
        "le" | "leq" | "leqslant" => Token::Rel(Rel::Le),
        "gt" => Token::Rel(Rel::Gt),
        "ge" | "geq" | "geqslant" => Token::Rel(Rel::Ge),
        "ne" | "neq" => Token::Rel(Rel::Ne),
        "approx" => Token::Eq,
        _ => return None,
    })
}

/// Commands whose braced argument is prose (a word, a unit, a name), not math.
const TEXT_COMMANDS: &[&str] = &[
    "text",
    "textbf",
    "textit",
    "mathrm",
    "mathbf",
    "mathit",
    "textnormal",
    "mbox",
    "operatorname",
];

/// Greek letters and other commands that name a variable.
const VARIABLE_COMMANDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "theta", "lambda", "mu", "phi", "sigma", "omega", "tau",
    "rho", "epsilon",
];

/// Multi-letter words read as a unit (dropped) rather than a product of variables.
const UNITS: &[&str] = &[
    "cm", "mm", "km", "kg", "mg", "lb", "lbs", "ft", "in", "mi", "hr", "hrs", "min", "sec",
    "units", "unit", "dollars", "dollar", "cents", "degrees", "degree", "meters", "feet", "inches",
    "miles", "hours", "minutes", "seconds", "days", "years", "sq", "mph", "square",
];

/// Whether `word` is a unit of measure (`cm`, `dollars`), which an answer may trail.
pub(crate) fn is_unit(word: &str) -> bool {
    UNITS.contains(&word.to_ascii_lowercase().as_str())
}

pub(crate) fn tokenize(s: &str) -> Vec<Token> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        let token = match c {
            ' ' | '\t' | '\n' | '\r' => continue,
            '0'..='9' | '.' => {
                let start = i - 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let int: String = chars[start..i].iter().collect();
                if c == '.' && int.len() == 1 {
                    out.push(Token::Other('.'));
                    continue;
                }
                let (int, frac, decimal) = match int.split_once('.') {
                    Some((a, b)) => (a.to_string(), b.to_string(), true),
                    None if chars.get(i) == Some(&'.')
                        && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()) =>
                    {
                        i += 1;
                        let fstart = i;
                        while i < chars.len() && chars[i].is_ascii_digit() {
                            i += 1;
                        }
                        (int, chars[fstart..i].iter().collect(), true)
                    }
                    None => (int, String::new(), false),
                };
                match Rational::from_decimal(&int, &frac) {
                    Some(value) => Token::Num { value, decimal },
                    None => Token::Other(c),
                }
            }
            'a'..='z' | 'A'..='Z' => {
                let start = i - 1;
                while i < chars.len() && chars[i].is_ascii_alphabetic() {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                if word.len() > 1 && is_unit(&word) {
                    Token::Word(word)
                } else {
                    for letter in word.chars() {
                        out.push(Token::Var(letter.to_string()));
                    }
                    if chars.get(i) == Some(&'_') {
                        i += 1;
                        let sub = group_or_char(&chars, &mut i);
                        if let Some(Token::Var(v)) = out.last_mut() {
                            v.push('_');
                            v.push_str(&sub);
                        }
                    }
                    continue;
                }
            }
            '\\' => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_alphabetic() {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                match name.as_str() {
                    "" => {
                        i += 1;
                        match chars.get(i - 1) {
                            Some('{') => Token::SetOpen,
                            Some('}') => Token::SetClose,
                            Some(other) => Token::Other(*other),
                            None => Token::Other('\\'),
                        }
                    }
                    n if TEXT_COMMANDS.contains(&n) => {
                        while chars.get(i) == Some(&' ') {
                            i += 1;
                        }
                        let text = group_or_char(&chars, &mut i);
                        let text = text.trim();
                        if text.len() == 1 && text.chars().all(|c| c.is_ascii_alphabetic()) {
                            Token::Var(text.to_string())
                        } else if text.is_empty() {
                            continue;
                        } else {
                            Token::Word(text.to_string())
                        }
                    }
                    n if VARIABLE_COMMANDS.contains(&n) => Token::Var(name),
                    n => relation_command(n).unwrap_or(Token::Cmd(name)),
                }
            }
            '(' => Token::LParen,
            ')' => Token::RParen,
            '[' => Token::LBrack,
            ']' => Token::RBrack,
            '{' => Token::LBrace,
            '}' => Token::RBrace,
            '+' => Token::Plus,
            '-' => Token::Minus,
            '*' => Token::Star,
            '/' => Token::Slash,
            '^' => Token::Caret,
            ',' => Token::Comma,
            '=' => Token::Eq,
            '<' | '>' | '!' | '≤' | '≥' | '≠' => {
                let or_equal = chars.get(i) == Some(&'=');
                i += usize::from(or_equal);
                Token::Rel(match (c, or_equal) {
                    ('<', false) => Rel::Lt,
                    ('<', true) | ('≤', _) => Rel::Le,
                    ('>', false) => Rel::Gt,
                    ('>', true) | ('≥', _) => Rel::Ge,
                    ('!', false) => {
                        out.push(Token::Other('!'));
                        continue;
                    }
                    _ => Rel::Ne,
                })
            }
            other => Token::Other(other),
        };
        out.push(token);
    }
    out
}

/// The text of a `{…}` group (balanced) or of the next single character, advancing `i`.
fn group_or_char(chars: &[char], i: &mut usize) -> String {
    if chars.get(*i) != Some(&'{') {
        let c = chars.get(*i).map(|c| c.to_string()).unwrap_or_default();
        *i += 1;
        return c;
    }
    let mut depth = 0usize;
    let start = *i + 1;
    while *i < chars.len() {
        match chars[*i] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    *i += 1;
                    return chars[start..*i - 1].iter().collect();
                }
            }
            _ => {}
        }
        *i += 1;
    }
    chars[start.min(chars.len())..].iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_exact_and_know_their_point() {
        let t = tokenize("12.5 + .4");
        assert_eq!(
            t[0],
            Token::Num {
                value: Rational::new(25, 2).unwrap(),
                decimal: true
            }
        );
        assert_eq!(t[1], Token::Plus);
        assert!(matches!(t[2], Token::Num { decimal: true, .. }));
    }

    #[test]
    fn text_and_units_are_words() {
        assert_eq!(
            tokenize("5 \\text{ cm}"),
            vec![
                Token::Num {
                    value: Rational::integer(5),
                    decimal: false
                },
                Token::Word("cm".into())
            ]
        );
        assert_eq!(tokenize("xy")[1], Token::Var("y".into()));
        assert_eq!(tokenize("x_{12}"), vec![Token::Var("x_12".into())]);
    }

    #[test]
    fn set_braces_are_not_groups() {
        assert_eq!(tokenize("\\{")[0], Token::SetOpen);
        assert_eq!(tokenize("{")[0], Token::LBrace);
    }
}
