//! Atropos data formats: `ScoredDataGroup` and the Python-compatible JSON encodings.

pub mod api;
pub mod group;
pub mod json;
pub mod tokenize;

pub use api::{ApiError, TrajectoryApi};
pub use group::{placeholder_tokens, DropReason, ScoredDataGroup, ScoredItem, Slot};
