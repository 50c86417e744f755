//! Applying the environment's `score_group` hook to a finished group: what the hook sees, and
//! how its reshaped rewards, dropped rollouts and skip become the group.
//!
//! The group-size rule: a group the hook made smaller is kept with `group_overrides.group_size`
//! set to its new size (the per-group size Atropos groups may declare), so the size rule does
//! not drop it; a group whose every rollout was dropped is skipped.

use tracing::debug;

use crate::env::{Environment, GroupRollout, ScoredGroup, ScoredRollout};

use super::trainer_tokens::TrainerTokens;

/// What the hook made of a group.
pub(crate) struct HookedGroup<I> {
    /// The rollouts kept, with their (possibly reshaped) rewards.
    pub rollouts: Vec<ScoredRollout<I>>,
    /// Their trainer tokens, in the same order.
    pub trained: Vec<TrainerTokens>,
    /// Rollouts the hook dropped.
    pub dropped: usize,
    /// Why the hook skipped the group, if it did.
    pub skipped: Option<String>,
}

/// Runs `score_group` on `rollouts` (all training data, each with its trainer tokens). A hook
/// that panics or leaves a reward that is not finite is a verifier failure: `Err` with the
/// message. Tampered rollouts keep their reward whatever the hook sets.
pub(crate) fn apply<E: Environment>(
    env: &E,
    item: &E::Item,
    rollouts: Vec<ScoredRollout<E::Item>>,
    trained: Vec<TrainerTokens>,
) -> Result<HookedGroup<E::Item>, String> {
    let seen = rollouts
        .iter()
        .zip(&trained)
        .map(|(r, t)| {
            let trainable = t.masks.iter().filter(|&&m| m != -100).count();
            GroupRollout::new(r.reward, trainable, r.run.clone(), r.outcome.clone())
        })
        .collect();
    let mut group = ScoredGroup::new(seen);
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        env.score_group(item, &mut group)
    }));
    if let Err(panic) = called {
        return Err(format!(
            "score_group panicked: {}",
            crate::agent::panic_message(panic.as_ref())
        ));
    }
    if let Some(bad) = group.rollouts.iter().find(|r| !r.reward.is_finite()) {
        return Err(format!("score_group left a reward of {}", bad.reward));
    }
    let mut kept = HookedGroup {
        rollouts: Vec::with_capacity(rollouts.len()),
        trained: Vec::with_capacity(rollouts.len()),
        dropped: 0,
        skipped: group.skipped().map(str::to_owned),
    };
    for ((mut rollout, tokens), seen) in rollouts.into_iter().zip(trained).zip(&group.rollouts) {
        if let Some(reason) = seen.dropped() {
            debug!("score_group dropped a rollout: {reason}");
            kept.dropped += 1;
            continue;
        }
        // A tampered rollout keeps `tampered_reward`: a hook must not turn a caught hack back
        // into a reward.
        if rollout.outcome.tampered().is_none() {
            rollout.reward = seen.reward;
        }
        kept.rollouts.push(rollout);
        kept.trained.push(tokens);
    }
    if kept.rollouts.is_empty() && kept.skipped.is_none() {
        kept.skipped = Some("score_group dropped every rollout".into());
    }
    if let Some(reason) = &kept.skipped {
        debug!("score_group skipped a group: {reason}");
    }
    Ok(kept)
}
