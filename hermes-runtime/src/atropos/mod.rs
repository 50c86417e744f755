//! Atropos data formats: `ScoredDataGroup` and the Python-compatible JSON encodings.

pub mod group;
pub mod json;

pub use group::{placeholder_tokens, ScoredDataGroup, ScoredItem, Slot};
