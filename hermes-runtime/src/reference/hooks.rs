//! `hooks.md`: the hooks of `Environment`, from the table the `#[hermes_env::hooks]` macro
//! checks and expands from.

use hermes_hooks::HOOKS;

use super::markdown::{code, header, table};

/// The page.
pub fn page() -> String {
    let mut out = header(
        "Hooks",
        "The fns of a `#[hermes_env::hooks]` block, which implements `Environment` from them. \
         `Item` is the type `get_next_item` yields. The block holds nothing else; helper fns \
         belong in a separate `impl` block.",
    );
    out.push_str(&table(
        &["Hook", "Required", "Signature", "What it is for"],
        HOOKS.iter().map(|hook| {
            vec![
                code(hook.name),
                if hook.required { "yes" } else { "no" }.to_owned(),
                code(&hook.signature()),
                hook.doc.to_owned(),
            ]
        }),
    ));
    out
}
