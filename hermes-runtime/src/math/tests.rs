use super::*;
use proptest::prelude::*;

fn yes(gold: &str, answer: &str) {
    assert!(verify(gold, answer), "{answer:?} should match {gold:?}");
}

fn no(gold: &str, answer: &str) {
    assert!(
        !verify(gold, answer),
        "{answer:?} should not match {gold:?}"
    );
}

#[test]
fn numbers_in_their_spellings() {
    yes("72", "#### 72");
    yes("7425000", "7,425,000");
    yes("1000", "1000.0");
    yes("0.4", ".4");
    yes("-5", "The answer is $-5$.");
    no("2", "AZYUK2A");
    no("72", "#### 73");
}

#[test]
fn fractions_and_decimals() {
    yes("0.5", "\\frac12");
    yes("$\\frac{1}{2}$", "$1/2$");
    yes("$\\dfrac{10}{9}$", "\\boxed{\\tfrac{10}{9}}");
    yes("$1/3$", "$0.333333$");
    no("$1/3$", "$0.3333$");
    yes("3", "\\frac{3}{1}");
    // Exact values are not "close enough": only a decimal literal is rounded.
    no("1", "\\frac{1000000001}{1000000000}");
}

#[test]
fn percentages_follow_math_verify() {
    yes("$28\\%$", "28");
    yes("$28\\%$", "28 percent");
    yes("$50\\%$", "$0.5$");
    no("$0.28$", "28");
    no("$28$", "28/100");
}

#[test]
fn latex_decoration_and_units_go() {
    yes("$1/3$", "$\\left( \\frac{1}{3} \\right)$");
    yes("$90^\\circ$", "\\boxed{90}");
    yes("5", "$5 \\text{ cm}$");
    yes("16386.17", "is worth $\\boxed{\\$16386.17}$ after 5 years");
    yes("$10/9$", "Answer $ \\frac{1}{2} \\$ = \\frac{10}{9} $");
    yes("$1/3$", "$k = \\frac{1}{3}$");
    yes(
        "$\\text{Evelyn}$",
        "so $\\boxed{\\text{Evelyn}}$ is our answer",
    );
    no("$\\text{Evelyn}$", "\\boxed{\\text{Carla}}");
}

#[test]
fn roots_pi_and_polynomials() {
    yes("$2\\sqrt{2}$", "$\\sqrt{8}$");
    yes("$\\sqrt{3}$", "$\\sqrt3$");
    yes("$\\sqrt[3]{8}$", "2");
    yes("$2\\pi$", "$\\pi \\cdot 2$");
    yes("$\\pi$", "$3.141593$");
    yes("$x^2+2x+1$", "$(x+1)^2$");
    no("$x^2+2x+1$", "$(x-1)^2$");
    no("$x+1$", "$y+1$");
}

#[test]
fn intervals_keep_their_ends() {
    assert!(matches!(
        answer::read("$(0, 1]$", true),
        answer::Answer::Interval { .. }
    ));
    yes("$[0,1)$", "$[0,1)$");
    no("$[0,9)$", "$[0,1)$");
    no("$(0,9)$", "$[0,9)$");
    yes("$(-\\infty, 2]$", "$\\left(-\\infty, 2\\right]$");
}

#[test]
fn sets_ignore_order_and_tuples_keep_it() {
    assert!(matches!(
        answer::read("\\{1, 2\\}", true),
        answer::Answer::List { ordered: false, .. }
    ));
    assert!(matches!(
        answer::read("(1, 2, 3)", true),
        answer::Answer::List { ordered: true, .. }
    ));
    yes("$\\{1,2\\}$", "$\\{2,1\\}$");
    yes("$1,2$", "$2,1$");
    yes(
        "$(3, \\frac{\\pi}{2})$",
        "\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
    );
    no("$(1,2)$", "$(2,1)$");
    no("$1,2$", "$1,2,3$");
}

#[test]
fn relations_match_when_equivalent() {
    yes("$x >= 5$", "Therefore $x \\geq 5$ is the solution.");
    yes("$x < 1$", "$-x > -1$");
    yes("$x \\leq 5$", "$5 \\geq x$");
    yes("$x^2/4 + y^2/3 = 1$", "$x^2/16 + y^2/12 = 1/4$");
    yes("$11$", "$x\\approx11$");
    no("$x < 1$", "$x > 1$");
    no("$x < 1$", "$x \\leq 1$");
    // Only an assignment's value stands alone, as in math-verify.
    no("$a + 3z = 0$", "$0$");
    yes("$11a + c$", "$7 = 11a+c$");
}

#[test]
fn trigonometric_identities_hold_numerically() {
    yes("$\\tan^2(y)+1$", "$\\sec^2(y)$");
}

#[test]
fn tuples_compare_exactly() {
    yes("$(1,\\frac{9}{2})$", "$(1,4.5)$");
}

#[test]
fn no_answer_is_wrong() {
    no("5", "I do not know.");
    no("5", "");
    no("", "5");
}

#[test]
fn hostile_nesting_is_refused_not_overflowed() {
    let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
    no("1", &deep);
    let braces = format!("\\boxed{{{}}}", "\\frac{".repeat(50_000));
    no("1", &braces);
    no("1", &"^".repeat(10_000));
    no("1", &format!("${}1$", "1+".repeat(100_000)));
    no("1", &"\\boxed{".repeat(100_000));
    no("1", &"\\( answer ".repeat(100_000));
    no("1", &"$ final answer is".repeat(100_000));
}

proptest! {
    #[test]
    fn any_text_is_answered_without_panic(gold in ".{0,40}", answer in "\\PC{0,80}") {
        let _ = extract_answer(&answer);
        let _ = verify(&gold, &answer);
    }

    #[test]
    fn latexish_text_is_answered_without_panic(answer in "[\\\\{}()\\[\\]$^_0-9a-z.,+*/=% -]{0,60}") {
        let _ = verify("1", &answer);
        let _ = verify(&answer, &answer);
    }

    #[test]
    fn a_number_matches_itself(n in any::<i64>(), frac in 0u32..1_000_000) {
        let x = format!("{}.{:06}", n, frac);
        prop_assert!(verify(&n.to_string(), &n.to_string()));
        prop_assert!(verify(&x, &x));
        let gold = format!("${}$", x);
        let reply = format!("The answer is \\boxed{{{}}}.", x);
        prop_assert!(verify(&gold, &reply));
    }
}
