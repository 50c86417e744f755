//! Test support for authors and for hermes-env's own tests: a scripted OpenAI-compatible
//! server (real HTTP on 127.0.0.1) and the reference-solution player behind `--testing true`.

mod reference;
mod server;

pub use reference::{ReferenceBook, ReferencePolicy, NO_REFERENCE_REPLY};
pub use server::{Policy, Reply, Script, ScriptedServer};
