//! Delivery of finished groups to the trajectory API: sends run concurrently off the loop;
//! groups that could not be delivered wait in order in the outbox and are resent when the API
//! answers again; at shutdown whatever is still undelivered is spooled to disk (bounded in
//! bytes) and the next start of the same environment resends it.

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::task::{Id, JoinSet};
use tracing::{info, warn};

use super::ServeSummary;
use crate::atropos::api::SendOutcome;
use crate::atropos::{ApiError, ScoredDataGroup, Slot, TrajectoryApi};
use crate::pyjson::JsonLayout;

/// Groups kept for resending while the trajectory API is unreachable; older ones beyond this
/// are counted as lost (with a log line).
pub const OUTBOX_CAPACITY: usize = 4096;

type SendResult = (ScoredDataGroup, Result<SendOutcome, ApiError>);

/// Undelivered groups (in order) and the sends in flight.
#[derive(Default)]
pub(super) struct Outbox {
    queue: VecDeque<ScoredDataGroup>,
    sends: JoinSet<SendResult>,
    /// A copy of each group in flight, so a send cut short at shutdown is spooled, not lost.
    in_flight: HashMap<Id, ScoredDataGroup>,
    failed_since: Option<Instant>,
}

impl Outbox {
    /// Sends `group` now (off the loop), or queues it behind undelivered ones.
    pub(super) fn submit(&mut self, api: &TrajectoryApi, env_id: i64, mut group: ScoredDataGroup) {
        if self.failed_since.is_some() || !self.queue.is_empty() {
            self.queue.push_back(group);
            return;
        }
        group.env_id = Slot::Value(env_id);
        let api = api.clone();
        let copy = group.clone();
        let handle = self.sends.spawn(async move {
            let outcome = api.send(std::slice::from_ref(&group)).await;
            (group, outcome)
        });
        self.in_flight.insert(handle.id(), copy);
    }

    /// Queues groups spooled by an earlier run ahead of everything else.
    pub(super) fn requeue_front(&mut self, groups: Vec<ScoredDataGroup>) {
        for g in groups.into_iter().rev() {
            self.queue.push_front(g);
        }
    }

    /// True when sends are in flight.
    pub(super) fn sending(&self) -> bool {
        !self.sends.is_empty()
    }

    /// True when groups wait to be resent.
    pub(super) fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Groups waiting to be resent.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Groups handed to the outbox and not yet answered for: queued and in flight. The worker
    /// cap counts them in the off-policy budget, so a send still on its way cannot let the
    /// loop start a worker past it.
    pub(super) fn undelivered(&self) -> usize {
        self.queue.len() + self.in_flight.len()
    }

    /// Waits for the next send to finish and accounts for it; `false` when none is in flight.
    pub(super) async fn next_sent(&mut self, summary: &mut ServeSummary) -> bool {
        match self.sends.join_next_with_id().await {
            Some(Ok((id, (group, result)))) => {
                self.in_flight.remove(&id);
                match result {
                    Ok(outcome) => Self::delivered(outcome, false, summary),
                    Err(e) => self.undeliverable(group, &e),
                }
                true
            }
            Some(Err(e)) => {
                match self.in_flight.remove(&e.id()) {
                    Some(group) => self.queue.push_back(group),
                    None => summary.groups_lost += 1,
                }
                true
            }
            None => false,
        }
    }

    fn delivered(outcome: SendOutcome, resent: bool, summary: &mut ServeSummary) {
        match outcome {
            SendOutcome::Accepted(_) => {
                summary.groups_sent += 1;
                if resent {
                    summary.groups_resent += 1;
                }
            }
            SendOutcome::Rejected(e) => {
                warn!("the trajectory API refused a group (dropped): {e}");
                summary.groups_rejected += 1;
            }
        }
    }

    fn undeliverable(&mut self, group: ScoredDataGroup, e: &ApiError) {
        if self.failed_since.is_none() {
            warn!(
                "cannot send a group: {e}; keeping it to resend (groups not delivered count \
                 against max_batches_offpolicy: new rollouts wait once they fill it)"
            );
            self.failed_since = Some(Instant::now());
        }
        self.queue.push_back(group);
    }

    /// Sends queued groups in order; stops at the first transport failure (kept for later).
    /// Cancel-safe: a group leaves the queue only once the API answered for it.
    pub(super) async fn flush(
        &mut self,
        api: &TrajectoryApi,
        env_id: i64,
        summary: &mut ServeSummary,
    ) {
        while let Some(front) = self.queue.front() {
            let mut group = front.clone();
            group.env_id = Slot::Value(env_id);
            match api.send(std::slice::from_ref(&group)).await {
                Ok(outcome) => {
                    self.queue.pop_front();
                    Self::delivered(outcome, true, summary);
                    if self.failed_since.take().is_some() {
                        info!("trajectory API reachable again");
                    }
                }
                Err(e) => {
                    if self.failed_since.is_none() {
                        warn!("cannot send a group: {e}; keeping it to resend");
                        self.failed_since = Some(Instant::now());
                    }
                    break;
                }
            }
        }
        while self.queue.len() > OUTBOX_CAPACITY {
            self.queue.pop_front();
            summary.groups_lost += 1;
            warn!(
                "outbox over {OUTBOX_CAPACITY} groups while the trajectory API is unreachable: \
                 dropped the oldest ({} lost so far)",
                summary.groups_lost
            );
        }
    }

    /// Forgets the transport failure (after re-registering: try again at once).
    pub(super) fn reset_failure(&mut self) {
        self.failed_since = None;
    }

    /// Stops the sends still in flight and returns every undelivered group, oldest first.
    pub(super) fn abandon(&mut self) -> Vec<ScoredDataGroup> {
        self.sends.abort_all();
        let mut groups: Vec<ScoredDataGroup> = self.queue.drain(..).collect();
        groups.extend(self.in_flight.drain().map(|(_, g)| g));
        groups
    }
}

/// Who a spooled group was made by and for. A spool is resent only by a run with the same
/// identity: groups of another model, tokenizer or trainer run would be trained on as if they
/// were this run's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpoolIdentity {
    /// The name the env registered under (`wandb_name`, else the env's name).
    pub env: String,
    /// The inference servers' model names, in the config's order.
    pub models: Vec<String>,
    /// [`crate::llm::ChatTokenizer::fingerprint`] of the tokenizer that made the trainer
    /// tokens, or `placeholder` for Phase 1 placeholder tokens.
    pub tokenizer: String,
    /// The trainer run the groups were meant for: what the trainer passed to the API's
    /// `/register` and the API tells every env — `/wandb_info`'s project and group and
    /// `/register-env`'s `checkpoint_dir`. The requester uuid is never shown to envs, and the
    /// step moves, so these are the most specific stable marks of a trainer run.
    pub trainer: TrainerRun,
}

/// The trainer run, as the trajectory API exposes it to an env.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainerRun {
    /// `/wandb_info` `project` (null when the API did not say).
    pub wandb_project: Option<String>,
    /// `/wandb_info` `group`.
    pub wandb_group: Option<String>,
    /// `/register-env` `checkpoint_dir`.
    pub checkpoint_dir: String,
}

impl SpoolIdentity {
    /// The fields that differ from `now`, each as `field: old -> new`.
    fn differences(&self, now: &SpoolIdentity) -> Vec<String> {
        let mut out = Vec::new();
        let mut field = |name: &str, old: String, new: String| {
            if old != new {
                out.push(format!("{name}: {old} -> {new}"));
            }
        };
        let opt = |v: &Option<String>| v.as_deref().map_or("null".into(), |s| format!("{s:?}"));
        field("env", format!("{:?}", self.env), format!("{:?}", now.env));
        field(
            "models",
            format!("{:?}", self.models),
            format!("{:?}", now.models),
        );
        field("tokenizer", self.tokenizer.clone(), now.tokenizer.clone());
        let (a, b) = (&self.trainer, &now.trainer);
        field(
            "trainer.wandb_project",
            opt(&a.wandb_project),
            opt(&b.wandb_project),
        );
        field(
            "trainer.wandb_group",
            opt(&a.wandb_group),
            opt(&b.wandb_group),
        );
        field(
            "trainer.checkpoint_dir",
            format!("{:?}", a.checkpoint_dir),
            format!("{:?}", b.checkpoint_dir),
        );
        out
    }
}

/// The first line of a spool file.
#[derive(Serialize, Deserialize)]
struct SpoolHeader {
    spool_identity: SpoolIdentity,
}

/// Why a spool file was not resent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StaleSpool {
    /// A file of the format before identities (its first line is a group).
    #[error("written before spools carried an identity")]
    NoIdentity,
    /// Another env, model, tokenizer or trainer run.
    #[error("spooled by another run: {}", .0.join("; "))]
    Differs(Vec<String>),
}

/// The sub-directory spool files of another identity are moved to (never deleted).
pub const STALE_DIR: &str = "stale";

/// Where a serve run's undelivered groups are kept between runs of the same environment:
/// `<dir>/<env name>/spool-*.jsonl`, bounded in bytes. Each file starts with the
/// [`SpoolIdentity`] of the run that wrote it; files of another identity go to `stale/`.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
}

impl Spool {
    /// The spool of environment `name` (its registered name) under `dir`
    /// (`outbox_spool_dir`; `None` = `~/.local/state/hermes-env/outbox`).
    pub fn new(dir: Option<&str>, name: &str, max_mb: i64) -> Self {
        let base = match dir {
            Some(d) => PathBuf::from(d),
            None => std::env::var_os("XDG_STATE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
                .unwrap_or_else(std::env::temp_dir)
                .join("hermes-env/outbox"),
        };
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Spool {
            dir: base.join(safe),
            max_bytes: (max_mb.max(0) as u64).saturating_mul(1 << 20),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the groups an earlier run with identity `me` spooled (oldest first) and removes
    /// their files; files of another identity, or of none, are moved to `stale/` with one
    /// WARN each naming the file and why.
    pub fn take(&self, me: &SpoolIdentity) -> std::io::Result<Vec<ScoredDataGroup>> {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("spool-") && n.ends_with(".jsonl"))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        files.sort();
        let mut groups = Vec::new();
        let mut taken = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file)?;
            let mut lines = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .peekable();
            let header = lines
                .peek()
                .and_then(|(_, l)| serde_json::from_str::<SpoolHeader>(l).ok());
            let stale = match &header {
                None => Some(StaleSpool::NoIdentity),
                Some(h) if h.spool_identity != *me => {
                    Some(StaleSpool::Differs(h.spool_identity.differences(me)))
                }
                Some(_) => None,
            };
            if let Some(why) = stale {
                let to = self.move_aside(file)?;
                warn!(
                    "spool file {} not resent: {why}; moved to {}",
                    file.display(),
                    to.display()
                );
                continue;
            }
            lines.next();
            for (n, line) in lines {
                match serde_json::from_str(line) {
                    Ok(g) => groups.push(g),
                    Err(e) => warn!(
                        "{}:{}: not a spooled group, skipped: {e}",
                        file.display(),
                        n + 1
                    ),
                }
            }
            taken.push(file);
        }
        for file in taken {
            std::fs::remove_file(file)?;
        }
        Ok(groups)
    }

    /// Moves `file` into `stale/` (a free name there) and returns where it went.
    fn move_aside(&self, file: &Path) -> std::io::Result<PathBuf> {
        let stale = self.dir.join(STALE_DIR);
        std::fs::create_dir_all(&stale)?;
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let mut to = stale.join(&*name);
        let mut n = 1;
        while to.exists() {
            to = stale.join(format!("{name}.{n}"));
            n += 1;
        }
        std::fs::rename(file, &to)?;
        Ok(to)
    }

    /// Writes `groups` (oldest first) to a new spool file headed by `me`, keeping the newest
    /// that fit in the byte limit; returns (kept, dropped) and the file.
    pub fn save(
        &self,
        groups: &[ScoredDataGroup],
        me: &SpoolIdentity,
    ) -> std::io::Result<(usize, usize, PathBuf)> {
        let header = serde_json::to_vec(&SpoolHeader {
            spool_identity: me.clone(),
        })
        .map_err(std::io::Error::other)?;
        let lines: Vec<Vec<u8>> = groups
            .iter()
            .map(|g| g.to_json(JsonLayout::Compact))
            .collect();
        let mut budget = self.max_bytes.saturating_sub(header.len() as u64 + 1);
        let mut keep_from = lines.len();
        while keep_from > 0 && (lines[keep_from - 1].len() as u64 + 1) <= budget {
            keep_from -= 1;
            budget -= lines[keep_from].len() as u64 + 1;
        }
        std::fs::create_dir_all(&self.dir)?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let path = self
            .dir
            .join(format!("spool-{stamp:015}-{}.jsonl", std::process::id()));
        let partial = path.with_extension("partial");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
        out.write_all(&header)?;
        out.write_all(b"\n")?;
        for line in &lines[keep_from..] {
            out.write_all(line)?;
            out.write_all(b"\n")?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&partial, &path)?;
        Ok((lines.len() - keep_from, keep_from, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(score: f64) -> ScoredDataGroup {
        let mut g = ScoredDataGroup {
            tokens: vec![vec![1, 2, 3]],
            masks: vec![vec![-100, 2, 3]],
            scores: vec![score],
            ..Default::default()
        };
        g.fill_absent_nulls();
        g
    }

    fn me() -> SpoolIdentity {
        SpoolIdentity {
            env: "e".into(),
            models: vec!["m1".into()],
            tokenizer: "placeholder".into(),
            trainer: TrainerRun {
                wandb_project: Some("proj".into()),
                wandb_group: None,
                checkpoint_dir: "ckpts".into(),
            },
        }
    }

    #[test]
    fn spooled_groups_come_back_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(Some(dir.path().to_str().unwrap()), "my env/1", 1);
        assert!(spool.dir().ends_with("my_env_1"));
        assert!(spool.take(&me()).unwrap().is_empty());
        let (kept, dropped, _) = spool.save(&[group(0.0), group(1.0)], &me()).unwrap();
        assert_eq!((kept, dropped), (2, 0));
        let back = spool.take(&me()).unwrap();
        assert_eq!(back, vec![group(0.0), group(1.0)]);
        assert!(
            spool.take(&me()).unwrap().is_empty(),
            "taken groups are removed"
        );
    }

    #[test]
    fn the_spool_keeps_the_newest_groups_within_its_byte_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::new(Some(dir.path().to_str().unwrap()), "e", 1);
        let one = serde_json::to_vec(&group(0.0)).unwrap().len() as u64 + 1;
        let header = serde_json::to_vec(&SpoolHeader {
            spool_identity: me(),
        })
        .unwrap()
        .len() as u64
            + 1;
        spool.max_bytes = header + 2 * one;
        let (kept, dropped, _) = spool
            .save(&[group(0.0), group(0.5), group(1.0)], &me())
            .unwrap();
        assert_eq!((kept, dropped), (2, 1));
        assert_eq!(spool.take(&me()).unwrap(), vec![group(0.5), group(1.0)]);
    }

    #[test]
    fn a_spool_of_another_identity_is_moved_aside_not_resent() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(Some(dir.path().to_str().unwrap()), "e", 1);
        let (_, _, file) = spool.save(&[group(0.0)], &me()).unwrap();
        let mut other = me();
        other.models = vec!["m2".into()];
        other.trainer.wandb_group = Some("g".into());
        assert!(spool.take(&other).unwrap().is_empty());
        let moved = spool.dir().join(STALE_DIR).join(file.file_name().unwrap());
        assert!(
            moved.is_file() && !file.exists(),
            "moved aside, not deleted"
        );
        let header: SpoolHeader = serde_json::from_str(
            std::fs::read_to_string(&moved)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            header.spool_identity.differences(&other),
            vec![
                r#"models: ["m1"] -> ["m2"]"#.to_owned(),
                r#"trainer.wandb_group: null -> "g""#.to_owned()
            ]
        );
        // The stale directory itself is not read as a spool file.
        assert!(spool.take(&me()).unwrap().is_empty());
    }
}
