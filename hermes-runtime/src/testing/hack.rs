//! The red team behind `hack`: plays every exploit of the library (and the author's own)
//! against every item through the real sandbox, the real tripwires and the real verifier, and
//! reports each item × exploit that earned more than the allowed score. `check` proves a
//! verifier can pay a correct solution; this proves it does not pay the known ways of gaming.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;

use super::exploits::Exploit;
use super::kit::Kit;
use super::reference::ReferenceBook;
use crate::env::{Environment, RewardOutcome};
use crate::llm::Split;

/// Options of [`Kit::hack`].
#[derive(Debug, Clone)]
pub struct HackOptions {
    /// Most training items drawn from `get_next_item`.
    pub limit: usize,
    /// Highest score an exploit may earn without failing the run.
    pub max_score: f64,
    /// Items attacked at once (an item's exploits run one after another).
    pub concurrency: usize,
    /// The exploits to play: [`super::exploit_library`] plus the author's.
    pub exploits: Vec<Exploit>,
}

impl Default for HackOptions {
    fn default() -> Self {
        HackOptions {
            limit: 100,
            max_score: 0.0,
            concurrency: 4,
            exploits: super::exploits::library(),
        }
    }
}

/// One item × exploit.
#[derive(Debug, Clone, Serialize)]
pub struct HackRow {
    /// `train #N` or `eval #N`, then the item's name when it has one (`item_name`).
    pub item: String,
    /// The exploit's name.
    pub exploit: String,
    /// The exploit's category.
    pub category: String,
    /// The reward the verifier paid (`tampered_reward` when a tripwire fired).
    pub reward: f64,
    /// How the reward came about (`tampered` when a tripwire caught the exploit).
    pub outcome: RewardOutcome,
    /// True when the verifier paid above the allowed maximum: it can be gamed. A caught
    /// exploit never is, whatever `tampered_reward` pays (the verifier did not run).
    pub paid: bool,
    /// Time the rollout took.
    #[serde(skip)]
    pub elapsed: Duration,
}

/// What `hack` found.
#[derive(Debug, Clone, Serialize)]
pub struct HackReport {
    /// Every item × exploit, items in `check` order, exploits in library order.
    pub rows: Vec<HackRow>,
    /// The allowed maximum.
    pub max_score: f64,
    /// Items attacked.
    pub items: usize,
}

impl HackReport {
    /// The item × exploit pairs the verifier paid for.
    pub fn paid(&self) -> Vec<&HackRow> {
        self.rows.iter().filter(|r| r.paid).collect()
    }

    /// The item × exploit pairs that never reached the verifier because the infrastructure
    /// failed (an LLM, sandbox or tokenization failure: a missing image, a dead daemon): they
    /// prove nothing about the verifier either way.
    pub fn unrun(&self) -> Vec<&HackRow> {
        self.rows.iter().filter(|r| not_run(&r.outcome)).collect()
    }

    /// True when there was something to attack, every exploit ran and none was paid.
    pub fn passed(&self) -> bool {
        !self.rows.is_empty() && self.paid().is_empty() && self.unrun().is_empty()
    }

    /// The report as a fixed-width table (item, exploit, category, reward, outcome, verdict),
    /// stable for snapshots: no timings, no ids. Verdicts: `PAID` (the verifier was gamed),
    /// `caught` (a tripwire fired), `refused` (the verifier paid nothing), `error` (the exploit
    /// broke the verifier: in training a failure, retried and never trained on), `not run`
    /// (the infrastructure failed before the verifier could judge: see [`HackReport::unrun`]).
    pub fn table(&self) -> String {
        let w = self
            .rows
            .iter()
            .map(|r| r.item.chars().count())
            .max()
            .unwrap_or(0)
            .max(10);
        let mut out = format!(
            "{:<w$} {:<20} {:<12} {:>6}  {:<16} verdict\n",
            "item", "exploit", "category", "reward", "outcome"
        );
        for r in &self.rows {
            let verdict = if r.paid {
                "PAID"
            } else if matches!(r.outcome, RewardOutcome::Tampered { .. }) {
                "caught"
            } else if r.outcome.is_training_data() {
                "refused"
            } else if not_run(&r.outcome) {
                "not run"
            } else {
                "error"
            };
            out.push_str(&format!(
                "{:<w$} {:<20} {:<12} {:>6.3}  {:<16} {verdict}\n",
                r.item,
                r.exploit,
                r.category,
                r.reward,
                outcome_kind(&r.outcome)
            ));
        }
        out
    }
}

/// An outcome the infrastructure decided (LLM, sandbox, tokenization): no verdict was reached.
fn not_run(outcome: &RewardOutcome) -> bool {
    matches!(
        outcome,
        RewardOutcome::LlmFailure { .. }
            | RewardOutcome::SandboxFailure { .. }
            | RewardOutcome::TokenizationFailure { .. }
    )
}

/// The outcome's kind as written in files (`scored`, `tampered`, …).
pub fn outcome_kind(outcome: &RewardOutcome) -> &'static str {
    match outcome {
        RewardOutcome::Scored => "scored",
        RewardOutcome::ModelEnded { .. } => "model_ended",
        RewardOutcome::Timeout { .. } => "timeout",
        RewardOutcome::LlmFailure { .. } => "llm_failure",
        RewardOutcome::SandboxFailure { .. } => "sandbox_failure",
        RewardOutcome::VerifierFailure { .. } => "verifier_failure",
        RewardOutcome::Tampered { .. } => "tampered",
        RewardOutcome::ContextExceeded { .. } => "context_exceeded",
        RewardOutcome::TokenizationFailure { .. } => "tokenization_failure",
    }
}

impl<E: Environment> Kit<E> {
    /// The red team: plays each of `options.exploits` against every item `check` would run,
    /// through `book` (the kit must answer with a [`super::ReferencePolicy`] over it), and
    /// reports every reward. Items run `options.concurrency` at a time.
    pub async fn hack(&mut self, book: &ReferenceBook, options: &HackOptions) -> HackReport {
        let (items, train, _) = self.select_items(options.limit).await;
        let count = items.len();
        let this = &*self;
        let mut results: Vec<(usize, Vec<HackRow>)> =
            futures::stream::iter(items.into_iter().enumerate().map(
                |(index, (split, item))| async move {
                    let label = item_label(split, index, train, &item);
                    let prompt = this.env().format_prompt(&item);
                    let mut rows = Vec::new();
                    for exploit in &options.exploits {
                        book.insert(&prompt, exploit.solution(&prompt));
                        let started = Instant::now();
                        let report = this.run_item(item.clone(), split).await;
                        rows.push(HackRow {
                            item: label.clone(),
                            exploit: exploit.name.clone(),
                            category: exploit.category.clone(),
                            reward: report.reward,
                            paid: report.reward > options.max_score
                                && report.outcome.tampered().is_none(),
                            outcome: report.outcome,
                            elapsed: started.elapsed(),
                        });
                    }
                    (index, rows)
                },
            ))
            .buffer_unordered(options.concurrency.max(1))
            .collect()
            .await;
        results.sort_by_key(|(index, _)| *index);
        HackReport {
            rows: results.into_iter().flat_map(|(_, rows)| rows).collect(),
            max_score: options.max_score,
            items: count,
        }
    }

    /// Plays every item once with the kit's own policy (the `--hacker-model` behind a
    /// [`super::KitBuilder::upstream`] kit) and reports it as exploit `name`.
    pub async fn hack_as(&mut self, name: &str, options: &HackOptions) -> HackReport {
        let (items, train, _) = self.select_items(options.limit).await;
        let count = items.len();
        let this = &*self;
        let mut rows: Vec<(usize, HackRow)> =
            futures::stream::iter(items.into_iter().enumerate().map(
                |(index, (split, item))| async move {
                    let started = Instant::now();
                    let label = item_label(split, index, train, &item);
                    let report = this.run_item(item, split).await;
                    let row = HackRow {
                        item: label,
                        exploit: name.to_owned(),
                        category: "llm".into(),
                        reward: report.reward,
                        paid: report.reward > options.max_score
                            && report.outcome.tampered().is_none(),
                        outcome: report.outcome,
                        elapsed: started.elapsed(),
                    };
                    (index, row)
                },
            ))
            .buffer_unordered(options.concurrency.max(1))
            .collect()
            .await;
        rows.sort_by_key(|(index, _)| *index);
        HackReport {
            rows: rows.into_iter().map(|(_, r)| r).collect(),
            max_score: options.max_score,
            items: count,
        }
    }
}

fn item_label<I: serde::Serialize>(split: Split, index: usize, train: usize, item: &I) -> String {
    let label = if split == Split::Eval {
        format!("eval #{}", index - train)
    } else {
        format!("train #{index}")
    };
    match super::kit::item_name(item) {
        Some(name) => format!("{label} {name}"),
        None => label,
    }
}
