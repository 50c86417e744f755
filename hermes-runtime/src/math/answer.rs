//! An answer's shape — one value (maybe a percentage), an interval, a list or set, or plain
//! text — and when two answers are the same, following math-verify's rules.

use super::expr::{self, Expr, Value};
use super::latex::normalize;
use super::rational::Rational;
use super::token::{tokenize, Rel, Token};

/// Longer answers are compared as text: no real answer is this long, and an expression tree
/// as deep as `1+1+…+1` would cost recursion to evaluate.
const MAX_TOKENS: usize = 1000;

#[derive(Debug)]
pub(crate) enum Answer {
    Value {
        expr: Expr,
        percent: bool,
    },
    /// `(a, b]` and kin; `(a, b)` is also an ordered pair, as math-verify reads it.
    Interval {
        lo: Expr,
        hi: Expr,
        lo_closed: bool,
        hi_closed: bool,
    },
    /// `a, b` or `\{a, b\}` (order-insensitive), or an n-tuple `(a, b, c)` (ordered).
    List {
        items: Vec<Expr>,
        ordered: bool,
    },
    /// An equation that is not an assignment (`2x + z = 1`) or an inequality (`x \geq 5`).
    Relation {
        lhs: Expr,
        rel: Option<Rel>,
        rhs: Expr,
    },
    /// What no parse accepts, compared as lower-case text without spaces.
    Text(String),
}

/// Reads an extracted answer (see [`super::extract_answer`]); `latex` when it came from LaTeX.
pub(crate) fn read(raw: &str, latex: bool) -> Answer {
    let n = normalize(raw, latex);
    let mut tokens = tokenize(&n.text);
    if tokens.len() > MAX_TOKENS {
        return Answer::Text(text_key(&n.text));
    }
    // Units after a value (`5 cm`, `12 \text{ dollars}`) do not change it.
    while tokens.len() > 1 && matches!(tokens.last(), Some(Token::Word(_))) {
        tokens.pop();
    }
    let relations = top_level_relations(&tokens);
    let all_equal = relations.iter().all(|&i| tokens[i] == Token::Eq);
    let answer = match (relations.first(), relations.last()) {
        (Some(&first), Some(&last)) => {
            if all_equal && matches!(tokens[..first], [Token::Var(_)]) {
                // An assignment `x = 3`, or a chain `x = 2 + 1 = 3`: the last side answers.
                shaped(&tokens[last + 1..], n.percent)
            } else if all_equal || first == last {
                relation(&tokens, first, last)
            } else {
                None
            }
        }
        _ => shaped(&tokens, n.percent),
    };
    answer.unwrap_or_else(|| Answer::Text(text_key(&n.text)))
}

/// `lhs op rhs`, where `lhs` ends before `first` and `rhs` starts after `last`.
fn relation(tokens: &[Token], first: usize, last: usize) -> Option<Answer> {
    Some(Answer::Relation {
        lhs: expr::parse(&tokens[..first])?,
        rel: match &tokens[first] {
            Token::Rel(r) => Some(*r),
            _ => None,
        },
        rhs: expr::parse(&tokens[last + 1..])?,
    })
}

fn top_level_relations(tokens: &[Token]) -> Vec<usize> {
    let mut depth = 0usize;
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if opens(t) {
            depth += 1;
        } else if closes(t) {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && matches!(t, Token::Eq | Token::Rel(_)) {
            out.push(i);
        }
    }
    out
}

fn text_key(text: &str) -> String {
    let words = text
        .replace("\\text", "")
        .replace("\\mathrm", "")
        .replace(['{', '}', '\\', '(', ')'], "");
    words
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect()
}

fn shaped(tokens: &[Token], percent: bool) -> Option<Answer> {
    let commas = top_level(tokens, &Token::Comma);
    let (first, last) = (tokens.first()?, tokens.last()?);
    let bracketed = tokens.len() > 2 && matching_close(tokens) == Some(tokens.len() - 1);
    let inner = if bracketed {
        &tokens[1..tokens.len() - 1]
    } else {
        &[]
    };
    if bracketed && *first == Token::SetOpen {
        return Some(Answer::List {
            items: items(inner)?,
            ordered: false,
        });
    }
    let listed = !top_level(inner, &Token::Comma).is_empty();
    if bracketed && listed && matches!(first, Token::LParen | Token::LBrack) {
        let mut items = items(inner)?;
        if items.len() == 2 && matches!(last, Token::RParen | Token::RBrack) {
            let hi = items.pop()?;
            let lo = items.pop()?;
            return Some(Answer::Interval {
                lo,
                hi,
                lo_closed: *first == Token::LBrack,
                hi_closed: *last == Token::RBrack,
            });
        }
        return Some(Answer::List {
            items,
            ordered: true,
        });
    }
    if !commas.is_empty() {
        return Some(Answer::List {
            items: items(tokens)?,
            ordered: false,
        });
    }
    Some(Answer::Value {
        expr: expr::parse(tokens)?,
        percent,
    })
}

fn items(tokens: &[Token]) -> Option<Vec<Expr>> {
    let mut out = Vec::new();
    let mut start = 0;
    for comma in top_level(tokens, &Token::Comma)
        .into_iter()
        .chain([tokens.len()])
    {
        out.push(expr::parse(&tokens[start..comma])?);
        start = comma + 1;
    }
    Some(out)
}

fn opens(t: &Token) -> bool {
    matches!(
        t,
        Token::LParen | Token::LBrack | Token::LBrace | Token::SetOpen
    )
}

fn closes(t: &Token) -> bool {
    matches!(
        t,
        Token::RParen | Token::RBrack | Token::RBrace | Token::SetClose
    )
}

/// Positions of `which` outside any bracket.
fn top_level(tokens: &[Token], which: &Token) -> Vec<usize> {
    let mut depth = 0usize;
    let mut out = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if opens(t) {
            depth += 1;
        } else if closes(t) {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && t == which {
            out.push(i);
        }
    }
    out
}

/// Where the bracket opened by `tokens[0]` closes (any closing kind: `(a, b]` is legal).
fn matching_close(tokens: &[Token]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        if opens(t) {
            depth += 1;
        } else if closes(t) {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

/// Whether `answer` says what `gold` says.
pub(crate) fn same(gold: &Answer, answer: &Answer) -> bool {
    use Answer::*;
    match (gold, answer) {
        (
            Value {
                expr: g,
                percent: gp,
            },
            Value {
                expr: a,
                percent: ap,
            },
        ) => same_value(g, *gp, a, *ap),
        (
            Interval {
                lo,
                hi,
                lo_closed,
                hi_closed,
            },
            Interval {
                lo: lo2,
                hi: hi2,
                lo_closed: lc2,
                hi_closed: hc2,
            },
        ) => lo_closed == lc2 && hi_closed == hc2 && same_expr(lo, lo2) && same_expr(hi, hi2),
        // An open interval `(a, b)` is also the pair `(a, b)`.
        (
            Interval {
                lo,
                hi,
                lo_closed: false,
                hi_closed: false,
            },
            List {
                items,
                ordered: true,
            },
        )
        | (
            List {
                items,
                ordered: true,
            },
            Interval {
                lo,
                hi,
                lo_closed: false,
                hi_closed: false,
            },
        ) => items.len() == 2 && same_expr(lo, &items[0]) && same_expr(hi, &items[1]),
        (
            List {
                items: g,
                ordered: go,
            },
            List {
                items: a,
                ordered: ao,
            },
        ) => {
            g.len() == a.len()
                && if *go && *ao {
                    g.iter().zip(a).all(|(x, y)| same_expr(x, y))
                } else {
                    same_multiset(g, a)
                }
        }
        (
            Relation { lhs, rel, rhs },
            Relation {
                lhs: l2,
                rel: r2,
                rhs: h2,
            },
        ) => same_relation((lhs, *rel, rhs), (l2, *r2, h2)),
        // A reply's equation answers a plain gold value by its last side.
        (Value { expr, percent }, Relation { rel: None, rhs, .. }) => {
            same_value(expr, *percent, rhs, false)
        }
        (Text(g), Text(a)) => !g.is_empty() && g == a,
        // `\text{C}` reads as the variable C, `\text{(C)}` as text.
        (
            Value {
                expr: Expr::Var(v), ..
            },
            Text(t),
        )
        | (
            Text(t),
            Value {
                expr: Expr::Var(v), ..
            },
        ) => v.to_lowercase() == *t,
        _ => false,
    }
}

/// The relation as `difference op 0` with `op` one of `=`, `≠`, `<`, `≤`.
fn to_zero(lhs: &Expr, rel: Option<Rel>, rhs: &Expr) -> (Expr, Option<Rel>) {
    let minus = |a: &Expr, b: &Expr| {
        Expr::Add(
            Box::new(a.clone()),
            Box::new(Expr::Neg(Box::new(b.clone()))),
        )
    };
    match rel {
        Some(Rel::Gt) => (minus(rhs, lhs), Some(Rel::Lt)),
        Some(Rel::Ge) => (minus(rhs, lhs), Some(Rel::Le)),
        _ => (minus(lhs, rhs), rel),
    }
}

/// Two relations say the same when, brought to `d op 0`, they have the same `op` and one `d`
/// is a constant multiple of the other — positive for an inequality, so `x < 1` is `-x > -1`
/// and `x^2/4 + y^2/3 = 1` is `x^2/16 + y^2/12 = 1/4`.
fn same_relation(gold: (&Expr, Option<Rel>, &Expr), answer: (&Expr, Option<Rel>, &Expr)) -> bool {
    let (g, g_rel) = to_zero(gold.0, gold.1, gold.2);
    let (a, a_rel) = to_zero(answer.0, answer.1, answer.2);
    if g_rel != a_rel {
        return false;
    }
    let values: Vec<(f64, f64)> = (0..3)
        .map(|point| {
            let bind = |name: &str| sample(name, point);
            (g.eval(&bind).to_f64(), a.eval(&bind).to_f64())
        })
        .collect();
    let Some(&(gv, av)) = values.iter().find(|(_, av)| av.abs() > 1e-12) else {
        return values.iter().all(|(gv, _)| gv.abs() <= 1e-12);
    };
    let factor = gv / av;
    let sign_ok = factor > 0.0 || matches!(g_rel, None | Some(Rel::Ne));
    factor.is_finite()
        && factor != 0.0
        && sign_ok
        && values.iter().all(|&(gv, av)| close(gv, factor * av))
}

fn same_multiset(gold: &[Expr], answer: &[Expr]) -> bool {
    let mut used = vec![false; answer.len()];
    gold.iter().all(|g| {
        let hit = (0..answer.len()).find(|&i| !used[i] && same_expr(g, &answer[i]));
        hit.map(|i| used[i] = true).is_some()
    })
}

/// `28\%` is `0.28`, and — as math-verify has it — also `28` when both are integers.
fn same_value(gold: &Expr, gold_pct: bool, answer: &Expr, answer_pct: bool) -> bool {
    if gold_pct == answer_pct {
        return same_expr(gold, answer);
    }
    if gold.integer_literal().is_some() && answer.integer_literal().is_some() {
        return gold.integer_literal() == answer.integer_literal();
    }
    let hundredth = |e: &Expr| {
        Expr::Div(
            Box::new(e.clone()),
            Box::new(Expr::Num {
                value: Rational::integer(100),
                decimal: false,
            }),
        )
    };
    if gold_pct {
        same_expr(&hundredth(gold), answer)
    } else {
        same_expr(gold, &hundredth(answer))
    }
}

/// Equal values: exactly when both stay rational; to six decimal places when either is a
/// decimal literal (math-verify's float rule); otherwise to 1e-9 relative at a few points
/// for the variables, which decides polynomial identities and `2\sqrt2 = \sqrt8` alike.
pub(crate) fn same_expr(gold: &Expr, answer: &Expr) -> bool {
    let mut vars = Vec::new();
    gold.variables(&mut vars);
    answer.variables(&mut vars);
    if vars.is_empty() {
        let (g, a) = (gold.eval(&|_| 0.0), answer.eval(&|_| 0.0));
        let exact = match (g, a) {
            (Value::Exact(g), Value::Exact(a)) => Some(g == a),
            _ => None,
        };
        if exact == Some(true) {
            return true;
        }
        if gold.is_decimal_literal() || answer.is_decimal_literal() {
            let round = |v: Value| (v.to_f64() * 1e6).round();
            return round(g) == round(a) && g.to_f64().is_finite();
        }
        return exact.unwrap_or_else(|| close(g.to_f64(), a.to_f64()));
    }
    (0..3).all(|point| {
        let bind = |name: &str| sample(name, point);
        close(gold.eval(&bind).to_f64(), answer.eval(&bind).to_f64())
    })
}

/// A value in [0.5, 2.5) for a variable at one of the sample points, different per name.
fn sample(name: &str, point: u64) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ point.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    0.5 + 2.0 * ((h >> 11) as f64 / (1u64 << 53) as f64)
}

fn close(a: f64, b: f64) -> bool {
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}
