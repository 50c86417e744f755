//! Expressions: a recursive-descent parser over [`Token`]s (with LaTeX's implicit
//! multiplication, `\frac`, `\sqrt`, powers, `\pi`) and their evaluation — exact while the
//! arithmetic stays rational, `f64` once a root, `\pi` or a variable comes in.

use super::rational::Rational;
use super::token::Token;

/// Deeper nesting than this is refused: model output is adversarial and recursion is not free.
const MAX_DEPTH: usize = 100;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Num {
        value: Rational,
        decimal: bool,
    },
    Var(String),
    Pi,
    E,
    Infinity,
    Neg(Box<Expr>),
    Add(Box<Expr>, Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Pow(Box<Expr>, Box<Expr>),
    /// `\sqrt[index]{radicand}`; index 2 for a square root.
    Root(Box<Expr>, Box<Expr>),
    Func(Func, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Func {
    Sin,
    Cos,
    Tan,
    Ln,
    Exp,
    Sec,
    Csc,
    Cot,
}

/// A value: exact when it can be.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value {
    Exact(Rational),
    Real(f64),
}

impl Value {
    pub(crate) fn to_f64(self) -> f64 {
        match self {
            Value::Exact(r) => r.to_f64(),
            Value::Real(x) => x,
        }
    }

    fn exact_or(exact: Option<Rational>, real: impl FnOnce() -> f64) -> Value {
        exact.map_or_else(|| Value::Real(real()), Value::Exact)
    }
}

impl Expr {
    /// A single literal written with a decimal point (`0.333`, `-2.5`): math-verify compares
    /// such answers rounded to six places.
    pub(crate) fn is_decimal_literal(&self) -> bool {
        match self {
            Expr::Num { decimal, .. } => *decimal,
            Expr::Neg(e) => e.is_decimal_literal(),
            _ => false,
        }
    }

    /// A single integer literal, for the percent rule (`28\%` matches `28`).
    pub(crate) fn integer_literal(&self) -> Option<Rational> {
        match self {
            Expr::Num { value, .. } if value.is_integer() => Some(*value),
            Expr::Neg(e) => e.integer_literal()?.neg(),
            _ => None,
        }
    }

    pub(crate) fn variables(&self, out: &mut Vec<String>) {
        match self {
            Expr::Var(v) if !out.contains(v) => out.push(v.clone()),
            Expr::Neg(a) | Expr::Func(_, a) => a.variables(out),
            Expr::Add(a, b)
            | Expr::Mul(a, b)
            | Expr::Div(a, b)
            | Expr::Pow(a, b)
            | Expr::Root(a, b) => {
                a.variables(out);
                b.variables(out);
            }
            _ => {}
        }
    }

    /// The value with each variable bound by `var`.
    pub(crate) fn eval(&self, var: &dyn Fn(&str) -> f64) -> Value {
        use Value::{Exact, Real};
        let both = |a: &Expr, b: &Expr| (a.eval(var), b.eval(var));
        match self {
            Expr::Num { value, .. } => Exact(*value),
            Expr::Var(v) => Real(var(v)),
            Expr::Pi => Real(std::f64::consts::PI),
            Expr::E => Real(std::f64::consts::E),
            Expr::Infinity => Real(f64::INFINITY),
            Expr::Neg(a) => match a.eval(var) {
                Exact(r) => Value::exact_or(r.neg(), || -r.to_f64()),
                Real(x) => Real(-x),
            },
            Expr::Add(a, b) => match both(a, b) {
                (Exact(x), Exact(y)) => Value::exact_or(x.add(y), || x.to_f64() + y.to_f64()),
                (x, y) => Real(x.to_f64() + y.to_f64()),
            },
            Expr::Mul(a, b) => match both(a, b) {
                (Exact(x), Exact(y)) => Value::exact_or(x.mul(y), || x.to_f64() * y.to_f64()),
                (x, y) => Real(x.to_f64() * y.to_f64()),
            },
            Expr::Div(a, b) => match both(a, b) {
                (Exact(x), Exact(y)) => Value::exact_or(x.div(y), || x.to_f64() / y.to_f64()),
                (x, y) => Real(x.to_f64() / y.to_f64()),
            },
            Expr::Pow(a, b) => match both(a, b) {
                (Exact(x), Exact(y)) => Value::exact_or(x.pow(y), || x.to_f64().powf(y.to_f64())),
                (x, y) => Real(x.to_f64().powf(y.to_f64())),
            },
            Expr::Root(index, a) => match both(index, a) {
                (Exact(n), Exact(x)) if n == Rational::integer(2) => {
                    Value::exact_or(x.sqrt(), || x.to_f64().sqrt())
                }
                (n, x) => Real(x.to_f64().powf(1.0 / n.to_f64())),
            },
            Expr::Func(f, a) => {
                let x = a.eval(var).to_f64();
                Real(match f {
                    Func::Sin => x.sin(),
                    Func::Cos => x.cos(),
                    Func::Tan => x.tan(),
                    Func::Ln => x.ln(),
                    Func::Exp => x.exp(),
                    Func::Sec => 1.0 / x.cos(),
                    Func::Csc => 1.0 / x.sin(),
                    Func::Cot => 1.0 / x.tan(),
                })
            }
        }
    }
}

/// Parses all of `tokens` as one expression; `None` when they are not one.
pub(crate) fn parse(tokens: &[Token]) -> Option<Expr> {
    let mut p = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let e = p.sum()?;
    (p.pos == tokens.len()).then_some(e)
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, t: &Token) -> bool {
        let hit = self.peek() == Some(t);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn sum(&mut self) -> Option<Expr> {
        let mut acc = self.term()?;
        loop {
            if self.eat(&Token::Plus) {
                acc = Expr::Add(Box::new(acc), Box::new(self.term()?));
            } else if self.eat(&Token::Minus) {
                let rhs = Expr::Neg(Box::new(self.term()?));
                acc = Expr::Add(Box::new(acc), Box::new(rhs));
            } else {
                return Some(acc);
            }
        }
    }

    fn term(&mut self) -> Option<Expr> {
        let mut acc = self.unary()?;
        loop {
            if self.eat(&Token::Star) {
                acc = Expr::Mul(Box::new(acc), Box::new(self.unary()?));
            } else if self.eat(&Token::Slash) {
                acc = Expr::Div(Box::new(acc), Box::new(self.unary()?));
            } else if self.starts_primary() {
                acc = Expr::Mul(Box::new(acc), Box::new(self.power()?));
            } else {
                return Some(acc);
            }
        }
    }

    fn starts_primary(&self) -> bool {
        matches!(
            self.peek(),
            Some(Token::Num { .. } | Token::Var(_) | Token::Cmd(_) | Token::LParen | Token::LBrace)
        )
    }

    fn unary(&mut self) -> Option<Expr> {
        self.nested(|p| {
            if p.eat(&Token::Minus) {
                Some(Expr::Neg(Box::new(p.unary()?)))
            } else if p.eat(&Token::Plus) {
                p.unary()
            } else {
                p.power()
            }
        })
    }

    fn power(&mut self) -> Option<Expr> {
        let base = self.primary()?;
        if !self.eat(&Token::Caret) {
            return Some(base);
        }
        let exponent = self.nested(|p| {
            if p.eat(&Token::Minus) {
                Some(Expr::Neg(Box::new(p.power()?)))
            } else {
                p.power()
            }
        })?;
        Some(Expr::Pow(Box::new(base), Box::new(exponent)))
    }

    /// `{…}` as an argument, or the next primary when the braces were left out.
    fn argument(&mut self) -> Option<Expr> {
        if self.eat(&Token::LBrace) {
            let e = self.sum()?;
            self.eat(&Token::RBrace).then_some(e)
        } else {
            self.primary()
        }
    }

    fn primary(&mut self) -> Option<Expr> {
        self.nested(|p| {
            let token = p.peek()?.clone();
            p.pos += 1;
            Some(match token {
                Token::Num { value, decimal } => Expr::Num { value, decimal },
                Token::Var(v) if v == "e" => Expr::E,
                Token::Var(v) => Expr::Var(v),
                Token::LParen => {
                    let e = p.sum()?;
                    p.eat(&Token::RParen).then_some(e)?
                }
                Token::LBrace => {
                    let e = p.sum()?;
                    p.eat(&Token::RBrace).then_some(e)?
                }
                Token::Cmd(name) => p.command(&name)?,
                _ => return None,
            })
        })
    }

    fn command(&mut self, name: &str) -> Option<Expr> {
        Some(match name {
            "pi" => Expr::Pi,
            "infty" | "infin" => Expr::Infinity,
            "frac" => {
                let num = self.argument()?;
                Expr::Div(Box::new(num), Box::new(self.argument()?))
            }
            "sqrt" => {
                let index = if self.eat(&Token::LBrack) {
                    let i = self.sum()?;
                    self.eat(&Token::RBrack).then_some(i)?
                } else {
                    Expr::Num {
                        value: Rational::integer(2),
                        decimal: false,
                    }
                };
                Expr::Root(Box::new(index), Box::new(self.argument()?))
            }
            "sin" | "cos" | "tan" | "sec" | "csc" | "cot" | "ln" | "log" | "exp" => {
                let f = match name {
                    "sin" => Func::Sin,
                    "cos" => Func::Cos,
                    "tan" => Func::Tan,
                    "sec" => Func::Sec,
                    "csc" => Func::Csc,
                    "cot" => Func::Cot,
                    "exp" => Func::Exp,
                    _ => Func::Ln,
                };
                // `\tan^2(y)` is `(\tan y)^2`.
                let exponent = if self.eat(&Token::Caret) {
                    Some(self.primary()?)
                } else {
                    None
                };
                let applied = Expr::Func(f, Box::new(self.power()?));
                match exponent {
                    Some(e) => Expr::Pow(Box::new(applied), Box::new(e)),
                    None => applied,
                }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::token::tokenize;

    fn value(s: &str) -> f64 {
        parse(&tokenize(s)).expect("parses").eval(&|_| 2.0).to_f64()
    }

    #[test]
    fn precedence_is_latexs() {
        assert_eq!(value("-x^2"), -4.0);
        assert_eq!(value("2^3^2"), 512.0);
        assert_eq!(value("2x^2"), 8.0);
        assert_eq!(value("1/2x"), 1.0);
        assert_eq!(value("\\frac{1}{2}(x+2)"), 2.0);
        assert_eq!(value("\\sqrt[3]{8}"), 2.0);
    }

    #[test]
    fn rational_arithmetic_stays_exact() {
        let e = parse(&tokenize("\\frac{1}{3} + \\frac{1}{6}")).unwrap();
        assert!(matches!(e.eval(&|_| 0.0), Value::Exact(r) if r == Rational::new(1, 2).unwrap()));
        let root = parse(&tokenize("\\sqrt{\\frac{9}{4}}")).unwrap();
        assert!(
            matches!(root.eval(&|_| 0.0), Value::Exact(r) if r == Rational::new(3, 2).unwrap())
        );
    }

    #[test]
    fn leftovers_and_deep_nesting_are_refused() {
        assert_eq!(parse(&tokenize("1 +")), None);
        assert_eq!(parse(&tokenize("(1")), None);
        assert_eq!(parse(&tokenize("\\unknown{1}")), None);
        assert_eq!(parse(&tokenize(&"(".repeat(500))), None);
    }
}
