//! The serve spool resends only groups of the same identity (env, models, tokenizer, trainer
//! run), against the real `run-api`: a run with another model does not send an earlier run's
//! spooled groups (they are moved to `stale/` with a WARN naming the file and the field), a
//! spool file of the format before identities is moved aside too, and a run with the
//! spooling run's identity resends them.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::atropos::{free_port, Api, Env, Trainer};
use common::proxy::FaultProxy;
use hermes_runtime::atropos::ScoredDataGroup;

/// The name `terminal_test` registers under: its spool is `<spool dir>/terminal-test`.
const ENV_NAME: &str = "terminal-test";

/// Where files of another identity go (`hermes_runtime::modes::serve::STALE_DIR`).
const STALE_DIR: &str = "stale";

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

fn sigterm(env: &Env) {
    let pid = env.child.id().expect("running") as i32;
    // SAFETY: signalling the child we spawned.
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

async fn eventually<F: std::future::Future<Output = bool>>(
    within: Duration,
    what: &str,
    mut f: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `serve` of `terminal_test` with model `model`, spooling to `spool`, writing every group
/// it hands to the API to `jsonl` as well.
fn start(api: &str, tmp: &Path, spool: &Path, jsonl: &Path, model: &str) -> Env {
    Env::start(
        api,
        tmp,
        &[
            "--openai.model_name",
            model,
            "--env.total_steps",
            "1000",
            "--env.shutdown_grace",
            "5",
            "--env.outbox_spool_dir",
            spool.to_str().unwrap(),
            "--env.data_path_to_save_groups",
            jsonl.to_str().unwrap(),
        ],
    )
}

/// The spool files (not `stale/`) of the env.
fn spool_files(spool: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(spool.join(ENV_NAME))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect()
}

/// The WARN lines about spool files not resent.
fn not_resent(err: &str) -> Vec<&str> {
    err.lines()
        .filter(|l| l.contains("WARN") && l.contains("not resent"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_is_resent_only_by_a_run_of_the_same_model() {
    let api = Api::start(free_port()).await;
    let trainer = Trainer::register(&api.url, 4, 1000).await;
    let proxy = FaultProxy::start(&api.url).await;
    let tmp = tempfile::tempdir().unwrap();
    let spool = tmp.path().join("spool");

    // A (model m1): the API takes no scored data; SIGTERM spools what was produced.
    proxy.block(&["/scored_data"]);
    let jsonl_a = tmp.path().join("a.jsonl");
    let mut env = start(&proxy.url, tmp.path(), &spool, &jsonl_a, "m1");
    env.expect_line("cannot send a group", Duration::from_secs(60))
        .await;
    eventually(Duration::from_secs(30), "2 groups produced", || async {
        lines(&jsonl_a) >= 2
    })
    .await;
    sigterm(&env);
    let (_, err) = env.finish(Duration::from_secs(40)).await;
    let spooled_line = err
        .lines()
        .find(|l| l.contains(" undelivered groups spooled to"))
        .unwrap_or_else(|| panic!("no spool line:\n{err}"));
    let before = &spooled_line[..spooled_line.find(" undelivered groups spooled to").unwrap()];
    let spooled: usize = before
        .rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("count in {spooled_line:?}"));
    assert!(spooled >= 2, "{spooled_line}");
    assert_eq!(spooled, lines(&jsonl_a), "every produced group is spooled");
    let files = spool_files(&spool);
    assert_eq!(files.len(), 1, "one spool file: {files:?}");
    let file = files[0].clone();
    assert_eq!(trainer.status().await.1, 0, "the API received nothing");

    // B (model m2): the API works; A's groups are not sent, the file is moved aside.
    proxy.block(&[]);
    let jsonl_b = tmp.path().join("b.jsonl");
    let mut env = start(&proxy.url, tmp.path(), &spool, &jsonl_b, "m2");
    let warn = env.expect_line("not resent", Duration::from_secs(60)).await;
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(warn.contains(name), "the WARN names the file: {warn}");
    assert!(
        warn.contains(r#"models: ["m1"] -> ["m2"]"#),
        "the WARN names the differing field, old and new: {warn}"
    );
    assert!(
        !warn.contains("tokenizer") && !warn.contains("trainer"),
        "only the model differs: {warn}"
    );
    eventually(Duration::from_secs(60), "B's groups queued", || async {
        trainer.status().await.1 >= 2
    })
    .await;
    sigterm(&env);
    let (_, err) = env.finish(Duration::from_secs(40)).await;
    assert_eq!(not_resent(&err).len(), 1, "one WARN per moved file:\n{err}");
    assert!(!err.contains("could not deliver (spooled in"), "{err}");
    let produced_b = lines(&jsonl_b);
    assert_eq!(
        trainer.status().await.1 as usize,
        produced_b,
        "the trainer's queue holds only B's groups"
    );
    let stale = spool.join(ENV_NAME).join(STALE_DIR).join(name);
    assert_eq!(
        lines(&stale),
        spooled + 1,
        "moved aside intact, not deleted"
    );
    assert!(spool_files(&spool).is_empty(), "nothing left to resend");

    // C (model m1 again), with the file put back: A's identity, so its groups are resent.
    std::fs::rename(&stale, &file).unwrap();
    let jsonl_c = tmp.path().join("c.jsonl");
    let mut env = start(&proxy.url, tmp.path(), &spool, &jsonl_c, "m1");
    let resend = env
        .expect_line("could not deliver (spooled in", Duration::from_secs(60))
        .await;
    assert!(
        resend.contains(&format!("resending {spooled} groups")),
        "{resend}"
    );
    eventually(Duration::from_secs(60), "A's groups queued", || async {
        trainer.status().await.1 as usize >= produced_b + spooled
    })
    .await;
    sigterm(&env);
    let (_, err) = env.finish(Duration::from_secs(40)).await;
    assert!(not_resent(&err).is_empty(), "{err}");
    assert_eq!(
        trainer.status().await.1 as usize,
        produced_b + spooled + lines(&jsonl_c),
        "A's groups are delivered once, beside B's and C's"
    );
    assert!(
        spool_files(&spool).is_empty(),
        "the spool is empty after delivery"
    );
    api.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_written_before_identities_is_moved_aside() {
    let api = Api::start(free_port()).await;
    let trainer = Trainer::register(&api.url, 4, 1000).await;
    let tmp = tempfile::tempdir().unwrap();
    let spool = tmp.path().join("spool");
    // The old format: one group per line, no identity line.
    let mut group = ScoredDataGroup {
        tokens: vec![vec![1, 2, 3], vec![1, 2, 4]],
        masks: vec![vec![-100, 2, 3], vec![-100, 2, 4]],
        scores: vec![0.0, 1.0],
        ..Default::default()
    };
    group.fill_absent_nulls();
    let dir = spool.join(ENV_NAME);
    std::fs::create_dir_all(&dir).unwrap();
    let legacy = dir.join("spool-000000000000001-1.jsonl");
    let line = serde_json::to_string(&group).unwrap();
    std::fs::write(&legacy, format!("{line}\n{line}\n")).unwrap();

    let jsonl = tmp.path().join("run.jsonl");
    let mut env = start(&api.url, tmp.path(), &spool, &jsonl, "m1");
    let warn = env.expect_line("not resent", Duration::from_secs(60)).await;
    assert!(
        warn.contains("spool-000000000000001-1.jsonl")
            && warn.contains("written before spools carried an identity"),
        "{warn}"
    );
    eventually(
        Duration::from_secs(60),
        "the run's groups queued",
        || async { trainer.status().await.1 >= 2 },
    )
    .await;
    sigterm(&env);
    let (_, err) = env.finish(Duration::from_secs(40)).await;
    assert!(!err.contains("could not deliver (spooled in"), "{err}");
    assert_eq!(not_resent(&err).len(), 1, "{err}");
    assert_eq!(
        trainer.status().await.1 as usize,
        lines(&jsonl),
        "only the run's own groups reached the trainer"
    );
    assert!(!legacy.exists());
    assert_eq!(
        lines(&dir.join(STALE_DIR).join(legacy.file_name().unwrap())),
        2
    );
    api.kill().await;
}
