//! The tripwires that run between a rollout's agent phase and its verifier, so a reward is
//! evidence of the task being solved rather than of the check being gamed: the file and
//! process wires every backend runs, the leftover-process killers (the container backends' script
//! run inside, the local backend's scan of the host), and the
//! sharing of one `/proc` reading among the scans that ask at once.

mod coalesced;
pub(super) mod inside;
pub(super) mod leftovers;
pub mod tripwire;
