//! The attribute macros of hermes-env: `#[hermes_env]` turns one annotated struct into an
//! environment (config section, CLI descriptor, `main`), and `#[hermes_env::hooks]` turns an
//! inherent impl block of hook fns into its `Environment` impl. Both check their input and
//! report every problem at once, each at its own span.
//!
//! Use them through the `hermes_env` crate, which re-exports both.

mod attr;
mod errors;
mod expand;
mod model;
mod serde_shim;
mod suggest;
mod validate;

use proc_macro::TokenStream;

/// Turns a struct with named fields into an environment.
///
/// ```text
/// /// Terminal tasks verified by reading a file.
/// #[hermes_env(name = "terminal-test", toolsets = ["terminal", "file"], max_agent_turns = 10)]
/// pub struct TerminalTest {
///     /// Appended to prompts.
///     #[config(default = "")]
///     prompt_suffix: String,
///     next: usize,
/// }
/// ```
///
/// Keys: `name = "…"` (default: the struct name in kebab-case), `main = false` (do not
/// generate `fn main`), `toolsets = ["…", …]` (the shared `enabled_toolsets`) and any shared
/// env field (`group_size = 3`, `system_prompt = "…"`, …) as its default.
///
/// `#[config]` fields become `--env.<field>` flags of the generated `<Name>Config` section,
/// with their doc comment as help text and `#[config(default = …)]` (else `Default`) as
/// default. Other fields are state, starting at `Default`. The struct doc is the CLI
/// description; `self.env_config()` returns the run's shared config.
#[proc_macro_attribute]
pub fn hermes_env(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::hermes_env(args.into(), item.into()).into()
}

/// Implements `Environment` from an inherent impl block of hook fns, checking their names and
/// signatures against the hook table `hermes_hooks::HOOKS`, which `docs/reference/hooks.md`
/// renders: the hooks, which are required, their signatures and what each is for. The block
/// may contain nothing else; helpers belong in a separate impl block.
#[proc_macro_attribute]
pub fn hooks(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::hooks(args.into(), item.into()).into()
}

/// serde's `Serialize` derive, usable without a `serde` dependency of your own: the prelude's
/// `#[derive(Serialize)]`. Takes serde's attributes (`#[serde(rename = "…")]`, …).
#[proc_macro_derive(Serialize, attributes(serde))]
pub fn derive_serialize(item: TokenStream) -> TokenStream {
    serde_shim::derive(item.into(), serde_shim::Trait::Serialize).into()
}

/// serde's `Deserialize` derive, usable without a `serde` dependency of your own: the
/// prelude's `#[derive(Deserialize)]`. Takes serde's attributes.
#[proc_macro_derive(Deserialize, attributes(serde))]
pub fn derive_deserialize(item: TokenStream) -> TokenStream {
    serde_shim::derive(item.into(), serde_shim::Trait::Deserialize).into()
}
