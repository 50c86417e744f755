//! Test support for authors and for hermes-env's own tests: a scripted OpenAI-compatible
//! server (real HTTP on 127.0.0.1), the reference-solution player behind `--testing true`, and
//! a request-recording W&B stand-in, and the authors' kit ([`Kit`]): one item through the
//! whole pipeline with any policy, redacted snapshots, the reference-solution oracle (`check`)
//! and the red team (`hack`: the exploit library played against every verifier).

mod cassette;
mod events;
mod exploits;
mod hack;
mod kit;
mod local_http;
mod raw;
mod reference;
mod server;
mod wandb;

pub use cassette::{Cassette, CassettePlayer, CassetteRecorder};
pub(crate) use exploits::load_exploits;
pub use exploits::{library as exploit_library, Exploit};
pub use hack::HackOptions;
pub(crate) use hack::{outcome_kind, HackReport};
pub use kit::{
    CheckOptions, CheckReport, CheckedItem, ItemReport, Kit, KitBuilder, ParsedToolCall, Redactor,
};
pub use raw::RawTextPolicy;
pub use reference::{ReferenceBook, ReferencePolicy};
pub use server::{Policy, Reply, Script, ScriptedServer};
pub use wandb::{StandInBehavior, WandbStandIn};
