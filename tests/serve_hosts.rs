//! Many environment processes on many hosts, one trajectory API: the project's own test hosts
//! (network namespaces joined by veth pairs to a bridge, see `common::netns`) each run a
//! `terminal_test serve` process (local backend, embedded scripted LLM server), all sending to
//! the REAL `run-api` (atroposlib 0.4.0) on the bridge address; a trainer stand-in pulls
//! batches. One environment is SIGKILLed mid-run: the trainer keeps getting groups from the
//! other two, what the killed one had queued is still trained on, and the survivors stop
//! cleanly on SIGTERM. run-api's only use of the registered weight — `env_weight` in
//! `/status-env`, `max_token_length × weight` over the connected environments — is checked
//! before and after the kill and after a clean disconnect.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::atropos::{free_port, http, Api, Env, Trainer};
use common::netns::TestNet;
use serde_json::{json, Value};

/// `--env.inference_weight` of the three environment processes.
const WEIGHTS: [f64; 3] = [1.0, 2.0, 1.0];
/// The process that is SIGKILLed.
const KILLED: usize = 1;

/// Groups the trainer received, per `env_id`.
type Counts = BTreeMap<i64, usize>;

/// One environment process on its test host, with its own working directory.
struct HostedEnv {
    env: Env,
    id: i64,
    dir: tempfile::TempDir,
}

impl HostedEnv {
    fn groups_file(&self) -> PathBuf {
        self.dir.path().join("groups.jsonl")
    }

    fn spool(&self) -> PathBuf {
        self.dir.path().join("spool")
    }

    /// SIGTERM: the env exits 0, delivers everything (nothing spooled, none lost) and
    /// disconnects from the API.
    async fn stop(self) {
        let pid = self.env.child.id().expect("running") as i32;
        // SAFETY: signalling the child we spawned.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let (out, err) = self.env.finish(Duration::from_secs(30)).await;
        assert!(out.contains("serve stopped by a signal"), "{out}");
        assert!(out.contains("0 lost"), "{out}");
        assert!(
            err.contains("disconnected from the trajectory API"),
            "{err}"
        );
        assert!(
            is_empty_dir(&self.dir.path().join("spool")),
            "nothing spooled"
        );
    }
}

/// Starts `terminal_test serve` inside `net`'s host `k` and waits for its registration.
async fn start_env(net: &TestNet, k: usize, api_url: &str) -> HostedEnv {
    let dir = tempfile::tempdir().unwrap();
    let groups = dir.path().join("groups.jsonl");
    let spool = dir.path().join("spool");
    let weight = WEIGHTS[k].to_string();
    let mut env = Env::start_via(
        &net.hosts[k].exec_prefix(),
        api_url,
        dir.path(),
        &[
            "--env.terminal_backend",
            "local",
            "--env.inference_weight",
            &weight,
            "--env.total_steps",
            "100000",
            "--env.max_batches_offpolicy",
            "4",
            "--env.steps_per_eval",
            "0",
            "--env.ensure_scores_are_not_same",
            "false",
            "--env.shutdown_grace",
            "5",
            "--env.outbox_spool_dir",
            spool.to_str().unwrap(),
            "--env.data_path_to_save_groups",
            groups.to_str().unwrap(),
        ],
    );
    let line = env
        .expect_line("registered as env_id ", Duration::from_secs(90))
        .await;
    let id = line
        .split("registered as env_id ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no env id in {line:?}"));
    HostedEnv { env, id, dir }
}

/// `/status-env` of `env_id`, read as the trainer side.
async fn status_env(api: &str, env_id: i64) -> Value {
    http()
        .get(format!("{api}/status-env"))
        .json(&json!({ "env_id": env_id }))
        .send()
        .await
        .expect("GET /status-env")
        .json()
        .await
        .expect("JSON")
}

/// run-api's `env_weight` for each process: `weight / Σ weight` over `connected` (all
/// processes register the same `max_token_length`).
async fn assert_weights(api: &str, envs: &[HostedEnv], connected: &[usize], when: &str) {
    let total: f64 = connected.iter().map(|&k| WEIGHTS[k]).sum();
    for &k in connected {
        let got = status_env(api, envs[k].id).await["env_weight"]
            .as_f64()
            .expect("env_weight");
        let want = WEIGHTS[k] / total;
        assert!(
            (got - want).abs() < 1e-9,
            "{when}: env_id {} (weight {}) has env_weight {got}, expected {want}",
            envs[k].id,
            WEIGHTS[k]
        );
    }
}

/// Pulls batches until `done(counts)` holds; panics naming `what` after `within`.
async fn pull_until(
    trainer: &Trainer,
    counts: &mut Counts,
    within: Duration,
    what: &str,
    done: impl Fn(&Counts) -> bool,
) {
    let deadline = Instant::now() + within;
    while !done(counts) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; groups per env_id so far: {counts:?}"
        );
        match trainer.get("/batch").await["batch"].as_array() {
            Some(batch) => {
                for group in batch {
                    assert_eq!(group["tokens"].as_array().map(Vec::len), Some(2));
                    let id = group["env_id"].as_i64().expect("env_id on every group");
                    *counts.entry(id).or_default() += 1;
                }
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| l.ends_with('}')).count())
        .unwrap_or(0)
}

fn is_empty_dir(dir: &Path) -> bool {
    walk_files(dir) == 0
}

fn walk_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .fold(0, |n, e| {
            if e.path().is_dir() {
                n + walk_files(&e.path())
            } else {
                n + 1
            }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envs_on_three_test_hosts_feed_one_trainer_and_survive_one_sigkilled() {
    let started = Instant::now();
    let net = TestNet::create(3);
    let api = Api::start_on(&net.host_addr.to_string(), free_port()).await;
    let trainer = Trainer::register(&api.url, 4, 100000).await;
    let mut envs = Vec::new();
    for k in 0..3 {
        envs.push(start_env(&net, k, &api.url).await);
    }
    let mut ids: Vec<i64> = envs.iter().map(|e| e.id).collect();
    ids.sort();
    assert_eq!(ids, [0, 1, 2], "three registrations");
    assert_weights(&api.url, &envs, &[0, 1, 2], "all connected").await;

    let mut counts = Counts::new();
    pull_until(
        &trainer,
        &mut counts,
        Duration::from_secs(90),
        "2 groups from every env",
        |c| envs.iter().all(|e| c.get(&e.id).copied().unwrap_or(0) >= 2),
    )
    .await;
    eprintln!("before the kill ({:?} in): {counts:?}", started.elapsed());

    // SIGKILL: nothing of the env's shutdown runs.
    let killed = &mut envs[KILLED];
    killed.env.child.start_kill().expect("SIGKILL");
    let status = killed.env.child.wait().await.expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let killed_id = killed.id;
    let queued_at_kill = status_env(&api.url, killed_id).await["self_queue_size"]
        .as_i64()
        .unwrap() as usize;
    let at_kill = counts.clone();
    // run-api 0.4.0 has no liveness check: the killed env stays "connected", keeping its share.
    assert_weights(&api.url, &envs, &[0, 1, 2], "after the SIGKILL").await;

    let survivors: Vec<i64> = [0, 2].iter().map(|&k| envs[k].id).collect();
    pull_until(
        &trainer,
        &mut counts,
        Duration::from_secs(60),
        "3 more groups from each survivor after the kill",
        |c| survivors.iter().all(|id| c[id] >= at_kill[id] + 3),
    )
    .await;
    let get = |c: &Counts, id: i64| c.get(&id).copied().unwrap_or(0);
    // What the API had accepted from the killed env is still trained on. Not necessarily
    // before the survivors' newer groups: run-api 0.4.0 forms every batch its queue holds at
    // once and hands them out last-formed first (`curr_batch.pop()`), so the trainer keeps
    // pulling until they came.
    pull_until(
        &trainer,
        &mut counts,
        Duration::from_secs(60),
        "the killed env's queued groups",
        |c| get(c, killed_id) >= get(&at_kill, killed_id) + queued_at_kill,
    )
    .await;
    eprintln!(
        "after the kill: {counts:?} ({queued_at_kill} of env_id {killed_id} queued at the kill)"
    );
    // Nothing more came from it than it had produced.
    let from_killed = get(&counts, killed_id);
    let produced = lines(&envs[KILLED].groups_file());
    assert!(
        from_killed <= produced,
        "{from_killed} groups from the killed env, which produced {produced}"
    );
    assert!(
        is_empty_dir(&envs[KILLED].spool()),
        "a SIGKILLed env spools nothing"
    );

    // The survivors stop cleanly; a clean disconnect is the only thing run-api's weights see.
    envs.remove(0).stop().await;
    // envs is now [killed, last]: the killed one still counts, the disconnected one not.
    let last_weight = status_env(&api.url, envs[1].id).await["env_weight"]
        .as_f64()
        .unwrap();
    assert!(
        (last_weight - WEIGHTS[2] / (WEIGHTS[1] + WEIGHTS[2])).abs() < 1e-9,
        "after one disconnect: {last_weight}"
    );
    envs.remove(1).stop().await;
    // Nothing of any env (its local sandboxes included) runs on the test hosts any more.
    let deadline = Instant::now() + Duration::from_secs(10);
    for host in &net.hosts {
        while !host.pids().is_empty() {
            assert!(
                Instant::now() < deadline,
                "processes left on {}: {:?}",
                host.netns,
                host.pids()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    eprintln!(
        "groups per env_id: {counts:?}; killed env_id {killed_id} produced {produced}; {:?} in all",
        started.elapsed()
    );
    api.kill().await;
}
