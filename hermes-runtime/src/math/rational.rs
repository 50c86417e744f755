//! Exact rationals over `i128`, so `0.1 + 0.2` equals `3/10` and `\frac{2}{4}` equals `0.5`
//! without floating-point doubt. Every operation is checked: on overflow it answers `None`
//! and the caller falls back to `f64`.

/// A reduced fraction with a positive denominator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rational {
    num: i128,
    den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.abs()
}

impl Rational {
    pub(crate) fn integer(n: i128) -> Rational {
        Rational { num: n, den: 1 }
    }

    /// `num / den` reduced; `None` for a zero denominator or on overflow.
    pub(crate) fn new(num: i128, den: i128) -> Option<Rational> {
        if den == 0 {
            return None;
        }
        let g = gcd(num, den);
        let (mut num, mut den) = (num / g, den / g);
        if den < 0 {
            num = num.checked_neg()?;
            den = den.checked_neg()?;
        }
        Some(Rational { num, den })
    }

    /// A decimal literal such as `12.50` or `.4`: digits before and after the point.
    pub(crate) fn from_decimal(int: &str, frac: &str) -> Option<Rational> {
        let digits = format!("{int}{frac}");
        let num: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        let den = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
        Rational::new(num, den)
    }

    pub(crate) fn is_integer(self) -> bool {
        self.den == 1
    }

    pub(crate) fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    pub(crate) fn add(self, o: Rational) -> Option<Rational> {
        let num = self
            .num
            .checked_mul(o.den)?
            .checked_add(o.num.checked_mul(self.den)?)?;
        Rational::new(num, self.den.checked_mul(o.den)?)
    }

    pub(crate) fn neg(self) -> Option<Rational> {
        Some(Rational {
            num: self.num.checked_neg()?,
            den: self.den,
        })
    }

    pub(crate) fn mul(self, o: Rational) -> Option<Rational> {
        Rational::new(self.num.checked_mul(o.num)?, self.den.checked_mul(o.den)?)
    }

    pub(crate) fn div(self, o: Rational) -> Option<Rational> {
        Rational::new(self.num.checked_mul(o.den)?, self.den.checked_mul(o.num)?)
    }

    /// `self^exp` for an integer exponent of modest size (larger ones overflow anyway).
    pub(crate) fn pow(self, exp: Rational) -> Option<Rational> {
        if !exp.is_integer() || exp.num.abs() > 256 {
            return None;
        }
        let e = u32::try_from(exp.num.abs()).ok()?;
        let base = Rational::new(self.num.checked_pow(e)?, self.den.checked_pow(e)?)?;
        if exp.num < 0 {
            Rational::integer(1).div(base)
        } else {
            Some(base)
        }
    }

    /// The exact square root when numerator and denominator are perfect squares.
    pub(crate) fn sqrt(self) -> Option<Rational> {
        if self.num < 0 {
            return None;
        }
        Rational::new(isqrt(self.num)?, isqrt(self.den)?)
    }
}

fn isqrt(n: i128) -> Option<i128> {
    let r = (n as f64).sqrt().round() as i128;
    (r.checked_mul(r)? == n).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact_fractions() {
        let a = Rational::from_decimal("0", "1").unwrap();
        let b = Rational::from_decimal("0", "2").unwrap();
        assert_eq!(a.add(b), Rational::from_decimal("", "3"));
        assert_eq!(Rational::from_decimal("12", "50"), Rational::new(25, 2));
    }

    #[test]
    fn overflow_answers_none() {
        let big = Rational::integer(i128::MAX);
        assert_eq!(big.add(big), None);
        assert_eq!(Rational::integer(10).pow(Rational::integer(100)), None);
        assert_eq!(Rational::new(1, 0), None);
    }

    #[test]
    fn square_roots_of_squares_are_exact() {
        assert_eq!(Rational::new(9, 4).unwrap().sqrt(), Rational::new(3, 2));
        assert_eq!(Rational::integer(8).sqrt(), None);
    }
}
