//! Compile-time behaviour of `#[hermes_env]` and `#[hermes_env::hooks]`: environments that
//! must build (and run), and inputs whose errors must read exactly as in `tests/ui/fail/*.stderr`.
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test macro_ui`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
