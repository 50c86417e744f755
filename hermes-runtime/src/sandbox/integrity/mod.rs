//! The tripwires that run between a rollout's agent phase and its verifier, so a reward is
//! evidence of the task being solved rather than of the check being gamed: the file and
//! process wires every backend runs, the local backend's leftover-process killer, and the
//! sharing of one `/proc` reading among the scans that ask at once.

mod coalesced;
pub(super) mod leftovers;
pub mod tripwire;
