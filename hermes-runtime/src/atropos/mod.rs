//! Atropos data formats: `ScoredDataGroup` and the Python-compatible JSON encodings.

pub mod api;
pub mod group;
/// Python-compatible JSON (the byte layout Atropos writes); lives in [`crate::pyjson`].
pub use crate::pyjson as json;
pub mod tokenize;

pub use api::{ApiError, TrajectoryApi};
pub use group::{placeholder_tokens, DropReason, ScoredDataGroup, ScoredItem, Slot};
