//! Toolset distributions (`--env.distribution`): each toolset is included independently with
//! its probability; if none is drawn, the most likely one is used. Sampled once per group with
//! a seedable RNG so runs can be reproduced.

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tracing::warn;

use super::{ToolRegistry, ToolSet};

/// A named distribution: (toolset, percent chance) pairs.
pub type Distribution = (&'static str, &'static [(&'static str, f64)]);

/// The Hermes distribution table.
pub const DISTRIBUTIONS: &[Distribution] = &[
    (
        "default",
        &[
            ("web", 100.0),
            ("vision", 100.0),
            ("image_gen", 100.0),
            ("terminal", 100.0),
            ("file", 100.0),
            ("browser", 100.0),
        ],
    ),
    (
        "image_gen",
        &[
            ("image_gen", 90.0),
            ("vision", 90.0),
            ("web", 55.0),
            ("terminal", 45.0),
        ],
    ),
    (
        "research",
        &[
            ("web", 90.0),
            ("browser", 70.0),
            ("vision", 50.0),
            ("terminal", 10.0),
        ],
    ),
    (
        "science",
        &[
            ("web", 94.0),
            ("terminal", 94.0),
            ("file", 94.0),
            ("vision", 65.0),
            ("browser", 50.0),
            ("image_gen", 15.0),
        ],
    ),
    (
        "development",
        &[
            ("terminal", 80.0),
            ("file", 80.0),
            ("web", 30.0),
            ("vision", 10.0),
        ],
    ),
    (
        "safe",
        &[
            ("web", 80.0),
            ("browser", 70.0),
            ("vision", 60.0),
            ("image_gen", 60.0),
        ],
    ),
    (
        "balanced",
        &[
            ("web", 50.0),
            ("vision", 50.0),
            ("image_gen", 50.0),
            ("terminal", 50.0),
            ("file", 50.0),
            ("browser", 50.0),
        ],
    ),
    ("minimal", &[("web", 100.0)]),
    ("terminal_only", &[("terminal", 100.0), ("file", 100.0)]),
    (
        "terminal_web",
        &[("terminal", 100.0), ("file", 100.0), ("web", 100.0)],
    ),
    (
        "creative",
        &[("image_gen", 90.0), ("vision", 90.0), ("web", 30.0)],
    ),
    (
        "reasoning",
        &[("web", 90.0), ("file", 60.0), ("terminal", 20.0)],
    ),
    (
        "browser_use",
        &[("browser", 100.0), ("web", 80.0), ("vision", 70.0)],
    ),
    ("browser_only", &[("browser", 100.0)]),
    (
        "browser_tasks",
        &[("browser", 97.0), ("vision", 12.0), ("terminal", 15.0)],
    ),
    (
        "terminal_tasks",
        &[
            ("terminal", 97.0),
            ("file", 97.0),
            ("web", 97.0),
            ("browser", 75.0),
            ("vision", 50.0),
            ("image_gen", 10.0),
        ],
    ),
    (
        "mixed_tasks",
        &[
            ("browser", 92.0),
            ("terminal", 92.0),
            ("file", 92.0),
            ("web", 35.0),
            ("vision", 15.0),
            ("image_gen", 15.0),
        ],
    ),
];

/// An unknown `--env.distribution` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown toolset distribution '{name}'; available: {}", distribution_names().join(", "))]
pub struct UnknownDistribution {
    /// The requested name.
    pub name: String,
}

/// Every distribution name.
pub fn distribution_names() -> Vec<&'static str> {
    DISTRIBUTIONS.iter().map(|(n, _)| *n).collect()
}

/// Draws toolsets from one distribution.
#[derive(Debug)]
pub struct DistributionSampler {
    name: &'static str,
    entries: &'static [(&'static str, f64)],
    rng: Mutex<StdRng>,
}

impl DistributionSampler {
    /// A sampler for `name`, seeded with `seed` (random when `None`).
    pub fn new(name: &str, seed: Option<u64>) -> Result<Self, UnknownDistribution> {
        let (name, entries) = DISTRIBUTIONS
            .iter()
            .find(|(n, _)| *n == name)
            .copied()
            .ok_or_else(|| UnknownDistribution {
                name: name.to_owned(),
            })?;
        let rng = match seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Ok(DistributionSampler {
            name,
            entries,
            rng: Mutex::new(rng),
        })
    }

    /// The distribution's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// One draw: every toolset with `uniform(0, 100) < p`; the most likely one if none.
    pub fn sample(&self) -> Vec<String> {
        let mut rng = self.rng.lock().expect("distribution rng lock poisoned");
        let mut picked: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, p)| rng.random_range(0.0..100.0) < *p)
            .map(|(t, _)| (*t).to_owned())
            .collect();
        if picked.is_empty() {
            let best = self
                .entries
                .iter()
                .fold(None::<&(&str, f64)>, |best, e| match best {
                    Some(b) if b.1 >= e.1 => Some(b),
                    _ => Some(e),
                });
            picked.extend(best.map(|(t, _)| (*t).to_owned()));
        }
        picked
    }
}

/// Resolves each group's tools from a distribution: draw toolsets, drop unknown ones with a
/// warning, then remove `disabled` toolsets.
pub struct GroupTools {
    sampler: DistributionSampler,
    registry: ToolRegistry,
    disabled: Option<Vec<String>>,
}

impl std::fmt::Debug for GroupTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupTools")
            .field("distribution", &self.sampler.name())
            .finish()
    }
}

impl GroupTools {
    /// Draws from `sampler` over `registry`'s tools.
    pub fn new(
        sampler: DistributionSampler,
        registry: ToolRegistry,
        disabled: Option<Vec<String>>,
    ) -> Self {
        GroupTools {
            sampler,
            registry,
            disabled,
        }
    }

    /// One group's tools.
    pub fn draw(&self) -> Arc<ToolSet> {
        let known = self.registry.toolsets();
        let (usable, skipped): (Vec<String>, Vec<String>) = self
            .sampler
            .sample()
            .into_iter()
            .partition(|t| known.contains(&t.as_str()));
        if !skipped.is_empty() {
            warn!(
                "distribution '{}': toolsets without available tools skipped: {}",
                self.sampler.name(),
                skipped.join(", ")
            );
        }
        let disabled: Vec<String> = self
            .disabled
            .iter()
            .flatten()
            .filter(|d| known.contains(&d.as_str()))
            .cloned()
            .collect();
        let resolved = self.registry.resolve(Some(&usable), Some(&disabled));
        Arc::new(resolved.map(|(set, _)| set).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_draws_repeat_and_certain_toolsets_always_appear() {
        let a = DistributionSampler::new("development", Some(7)).unwrap();
        let b = DistributionSampler::new("development", Some(7)).unwrap();
        let draws_a: Vec<_> = (0..20).map(|_| a.sample()).collect();
        let draws_b: Vec<_> = (0..20).map(|_| b.sample()).collect();
        assert_eq!(draws_a, draws_b);
        assert!(
            draws_a.iter().any(|d| d.len() != draws_a[0].len()),
            "draws vary"
        );
        let t = DistributionSampler::new("terminal_only", Some(1)).unwrap();
        for _ in 0..10 {
            assert_eq!(t.sample(), ["terminal", "file"]);
        }
    }

    #[test]
    fn rates_follow_the_table() {
        let s = DistributionSampler::new("research", Some(42)).unwrap();
        let n = 4000;
        let web = (0..n)
            .filter(|_| s.sample().contains(&"web".to_owned()))
            .count();
        let rate = web as f64 / n as f64;
        assert!((rate - 0.9).abs() < 0.03, "{rate}");
    }

    #[test]
    fn empty_draw_falls_back_to_the_most_likely_toolset_and_unknown_names_fail() {
        let s = DistributionSampler::new("browser_tasks", Some(3)).unwrap();
        assert!((0..200).all(|_| !s.sample().is_empty()));
        let err = DistributionSampler::new("nope", None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unknown toolset distribution 'nope'; available: default, image_gen")
        );
    }

    #[test]
    fn group_tools_skip_unavailable_toolsets_and_apply_disabled() {
        let g = GroupTools::new(
            DistributionSampler::new("terminal_web", Some(0)).unwrap(),
            ToolRegistry::builtin(),
            Some(vec!["file".into()]),
        );
        assert_eq!(g.draw().names(), ["process", "terminal"]);
    }
}
