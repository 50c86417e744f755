//! Atropos data formats: `ScoredDataGroup` and the Python-compatible JSON encodings.

pub mod api;
pub mod group;
/// Python-compatible JSON (the byte layout Atropos writes); lives in [`crate::pyjson`].
pub use crate::pyjson as json;
pub mod tokenize;

pub(crate) use api::ApiError;
pub use api::TrajectoryApi;
pub use group::{placeholder_tokens, ScoredDataGroup, Slot};
pub(crate) use group::{DropReason, ScoredItem};
