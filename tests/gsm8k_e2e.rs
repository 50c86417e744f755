//! The GSM8K port (`examples/gsm8k.rs`) end to end, offline, on a Hugging Face cache laid out
//! by huggingface_hub itself (`openai/gsm8k` with its `main` and `socratic` configs, parquet
//! written by pyarrow, fetched from a local fake hub with `hf_hub_download`): `process
//! --testing`, `process` against a scripted model (its JSONL validated by atroposlib's own
//! `ScoredData`), the length penalty, `evaluate`, `check`, `hack`, and `serve` against the real
//! `run-api`, stopped and restarted: the checkpoint brings back the dataset position (no item
//! repeated) and the environment's own state; a corrupt checkpoint stops the run with one
//! line and is left as it is.

mod common;
#[allow(dead_code)]
#[path = "hub_fixture/fake_hub.rs"]
mod fake_hub;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::atropos::{Api, Trainer};
use fake_hub::{FakeHub, Repos, Revision};
use hermes_runtime::testing::{Policy, Reply, ScriptedServer};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const GSM8K: &str = "openai/gsm8k";
const TRAIN_ROWS: usize = 200;
const TEST_ROWS: usize = 6;

/// openai/gsm8k's card: two configs, neither the default.
const CARD: &str = "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n- config_name: socratic\n  data_files:\n  - split: train\n    path: socratic/train-*\n  - split: test\n    path: socratic/test-*\n---\n\n# Dataset Card for GSM8K\n";

/// Writes GSM8K-shaped parquet files with pyarrow: question `i` has the gold answer
/// `1000 + i`, written with a thousands comma as GSM8K does (`#### 1,007`). Socratic rows ask
/// something else, so a run that read them would show it.
const MAKE_PARQUET: &str = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
out = sys.argv[1]
for config in ["main", "socratic"]:
    for split, rows in [("train", int(sys.argv[2])), ("test", int(sys.argv[3]))]:
        offset = 0 if split == "train" else 5000
        qs = [f"Question {offset + i}: Tom has {offset + i} apples and buys 1000 more. How many apples does he have?"
              if config == "main" else f"Socratic {i}?" for i in range(rows)]
        ans = [f"He has {offset + i} + 1000 = <<{offset + i}+1000={offset + i + 1000}>>{offset + i + 1000} apples.\n#### {offset + i + 1000:,}"
               for i in range(rows)]
        pq.write_table(pa.table({"question": qs, "answer": ans}), f"{out}/{config}-{split}.parquet")
"#;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hub_fixture")
        .join(name)
}

fn run_python(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().expect("run python");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The hub cache holding openai/gsm8k as huggingface_hub downloads it, built once.
fn cache() -> &'static Path {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let src = tempfile::tempdir().unwrap().keep();
        run_python(
            std::process::Command::new(common::hub_python())
                .args(["-c", MAKE_PARQUET])
                .arg(&src)
                .arg(TRAIN_ROWS.to_string())
                .arg(TEST_ROWS.to_string()),
        );
        let mut files = vec![("README.md".to_owned(), CARD.as_bytes().to_vec())];
        for config in ["main", "socratic"] {
            for split in ["train", "test"] {
                files.push((
                    format!("{config}/{split}-00000-of-00001.parquet"),
                    std::fs::read(src.join(format!("{config}-{split}.parquet"))).unwrap(),
                ));
            }
        }
        let downloads: Vec<Value> = files
            .iter()
            .map(|(name, _)| json!([GSM8K, "dataset", "main", name]))
            .collect();
        let repos = Repos::from([(
            ("datasets/".to_owned(), GSM8K.to_owned(), "main".to_owned()),
            Revision {
                commit: "7".repeat(40),
                files: files.into_iter().collect(),
            },
        )]);
        let hub = FakeHub::start(repos, None);
        let cache = tempfile::tempdir().unwrap().keep().join("hub");
        run_python(
            hub_env(std::process::Command::new(common::hub_python()), &cache)
                .env("HF_ENDPOINT", &hub.url)
                .arg(script("populate.py"))
                .arg(Value::Array(downloads).to_string()),
        );
        cache
    })
}

/// `cmd` on the fixture cache, offline, with nothing of the user's HF set-up.
fn hub_env<C: std::borrow::BorrowMut<std::process::Command>>(mut cmd: C, cache: &Path) -> C {
    let c = cmd.borrow_mut();
    for var in [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_ENDPOINT",
        "HF_TOKEN_PATH",
    ] {
        c.env_remove(var);
    }
    c.env("HF_HUB_CACHE", cache)
        .env("HF_HOME", cache.parent().unwrap().join("hf-home"))
        .env("HF_HUB_DISABLE_TELEMETRY", "1");
    cmd
}

fn tokenizer_dir() -> String {
    hermes_runtime::llm::ChatTokenizer::builtin_dir()
        .to_string_lossy()
        .into_owned()
}

/// The example binary with `args`, in `dir`, offline on the fixture cache, local sandboxes
/// and the built-in tokenizer.
fn gsm8k(dir: &Path, args: &[&str]) -> Command {
    let mut std_cmd = hub_env(
        std::process::Command::new(common::example_bin("gsm8k")),
        cache(),
    );
    std_cmd
        .env("HF_HUB_OFFLINE", "1")
        .env("TMPDIR", dir)
        .env("RUST_LOG", "info")
        .current_dir(dir)
        .args(args)
        .args(["--env.terminal_backend", "local"])
        .args(["--env.use_wandb", "false"])
        .args(["--env.tokenizer_name", &tokenizer_dir()]);
    let mut cmd = Command::from(std_cmd);
    cmd.kill_on_drop(true);
    cmd
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn run(dir: &Path, args: &[&str]) -> Out {
    let out = gsm8k(dir, args).output().await.unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The question number in a prompt `Question N: …`.
fn question_number(prompt: &str) -> u64 {
    prompt
        .split_whitespace()
        .nth(1)
        .and_then(|w| w.trim_end_matches(':').parse().ok())
        .unwrap_or_else(|| panic!("not a fixture question: {prompt}"))
}

fn user_prompt(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A model whose k-th answer to a question is `answer(k, gold)`.
fn model(answer: fn(usize, u64) -> String) -> impl Policy {
    let seen: Mutex<HashMap<String, usize>> = Mutex::default();
    move |request: &Value| {
        let prompt = user_prompt(request);
        let gold = question_number(&prompt) + 1000;
        let mut seen = seen.lock().unwrap();
        let k = seen.entry(prompt).or_default();
        let text = answer(*k, gold);
        *k += 1;
        Reply::text(text)
    }
}

/// Right on even tries, wrong on odd ones, with thinking first.
fn mixed(k: usize, gold: u64) -> String {
    let answer = if k.is_multiple_of(2) { gold } else { gold + 1 };
    format!("<think>\nTom had some apples and bought 1000 more, so I add them.\n</think>\nHe has \\boxed{{{answer}}} apples.")
}

/// Always right, with 0, 8 or 30 sentences of working before the answer.
fn long_and_short(k: usize, gold: u64) -> String {
    let working = "I will check the sum once more. ".repeat([0, 8, 30][k % 3]);
    format!("<think>\n{working}\n</think>\nThe answer is \\boxed{{{gold}}}.")
}

/// The groups of `path` checked by atroposlib 0.4.0's own `ScoredData` model (what `run-api`
/// accepts on `/scored_data`).
fn validate_with_atroposlib(path: &Path) {
    let check = r#"
import json, sys
from atroposlib.api.server import ScoredData
n = 0
for line in open(sys.argv[1]):
    if line.strip():
        ScoredData(**json.loads(line))
        n += 1
print(n)
"#;
    let n = run_python(
        std::process::Command::new(common::atropos_python())
            .args(["-c", check])
            .arg(path),
    );
    assert!(
        n.trim().parse::<usize>().unwrap() > 0,
        "no groups validated in {}",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_testing_plays_reference_answers_whose_equal_groups_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        tmp.path(),
        &[
            "process",
            "--testing",
            "true",
            "--env.total_steps",
            "3",
            "--env.group_size",
            "2",
            "--env.data_path_to_save_groups",
            "out.jsonl",
        ],
    )
    .await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("dataset openai/gsm8k (hub cache, revision main"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!(
            "config 'main', split 'train', {TRAIN_ROWS} rows from 1 file(s)"
        )),
        "only the main config is read: {}",
        out.stderr
    );
    // The reference answers are all right and equally short: upstream's score() returns None
    // for such a group, and so does the port (a `skipped` drop, not a failure).
    assert!(lines(&tmp.path().join("out.jsonl")).is_empty());
    assert!(
        out.stderr
            .contains("skipped by the environment's score_group"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("failure"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_writes_plus_minus_one_groups_that_atroposlib_accepts() {
    let server = ScriptedServer::start(model(mixed)).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        tmp.path(),
        &[
            "process",
            "--openai.base_url",
            &server.base_url(),
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
            "--env.total_steps",
            "3",
            "--env.group_size",
            "4",
            "--env.data_path_to_save_groups",
            "out.jsonl",
        ],
    )
    .await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    let path = tmp.path().join("out.jsonl");
    let groups = lines(&path);
    assert_eq!(groups.len(), 3, "{}", out.stderr);
    for g in &groups {
        let mut scores: Vec<f64> = serde_json::from_value(g["scores"].clone()).unwrap();
        scores.sort_by(f64::total_cmp);
        assert_eq!(scores, [-1.0, -1.0, 1.0, 1.0], "{g}");
        let system = &g["messages"][0][0];
        assert_eq!(system["role"], "system");
        assert!(system["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a deep thinking AI"));
    }
    validate_with_atroposlib(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_penalty_applies_when_every_answer_is_right() {
    let server = ScriptedServer::start(model(long_and_short)).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    const MAX: f64 = 200.0;
    let out = run(
        tmp.path(),
        &[
            "process",
            "--openai.base_url",
            &server.base_url(),
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
            "--env.total_steps",
            "2",
            "--env.group_size",
            "3",
            "--env.max_token_length",
            "200",
            "--env.data_path_to_save_groups",
            "out.jsonl",
        ],
    )
    .await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    let groups = lines(&tmp.path().join("out.jsonl"));
    assert_eq!(groups.len(), 2, "{}", out.stderr);
    let mut penalised = 0;
    for g in &groups {
        let scores: Vec<f64> = serde_json::from_value(g["scores"].clone()).unwrap();
        let masks: Vec<Vec<i64>> = serde_json::from_value(g["masks"].clone()).unwrap();
        for (score, mask) in scores.iter().zip(&masks) {
            let length = mask.iter().filter(|&&m| m != -100).count() as f64;
            let expected = if length <= MAX / 2.0 {
                1.0
            } else {
                1.0 - ((length - MAX / 2.0) / (MAX / 2.0)).min(1.0)
            };
            assert!(
                (score - expected).abs() < 1e-9,
                "{length} tokens: {score} {g}"
            );
            penalised += usize::from(*score < 1.0);
        }
    }
    assert!(penalised >= 2, "the long answers are penalised");
    validate_with_atroposlib(&tmp.path().join("out.jsonl"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluate_check_and_hack_run_on_the_test_split() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        tmp.path(),
        &[
            "evaluate",
            "--testing",
            "true",
            "--env.data_dir_to_save_evals",
            "evals",
        ],
    )
    .await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    let metrics: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("evals/metrics.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        metrics["results"]["all"]["eval/percent_correct"], 1.0,
        "{metrics}"
    );
    let samples = lines(&tmp.path().join("evals/samples.jsonl"));
    assert_eq!(samples.len(), TEST_ROWS);
    assert!(samples
        .iter()
        .all(|s| s["item"]["answer"].as_str().unwrap().contains("####")));

    let check = run(tmp.path(), &["check", "--limit", "4"]).await;
    assert!(check.ok, "check: {}\n{}", check.stdout, check.stderr);
    let hack = run(tmp.path(), &["hack", "--limit", "2"]).await;
    assert!(hack.ok, "hack: {}\n{}", hack.stdout, hack.stderr);
    // Every item of the check (4 train + the eval split) is paid by its reference answer.
    assert!(
        check.stdout.contains(&format!(
            "check: {} items, {} passed, 0 failed",
            4 + TEST_ROWS,
            4 + TEST_ROWS
        )),
        "{}",
        check.stdout
    );
    // No exploit of the library earns anything: the reward reads only the boxed answer.
    let rows: Vec<&str> = hack
        .stdout
        .lines()
        .filter(|l| l.starts_with("train #") || l.starts_with("eval #"))
        .collect();
    assert!(rows.len() >= 14 * (2 + TEST_ROWS), "{}", hack.stdout);
    assert!(
        rows.iter()
            .all(|r| r.contains("-1.000") && r.ends_with("refused")),
        "{}",
        hack.stdout
    );
}

/// The example in `serve`, its stderr lines collected.
struct Serving {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Serving {
    fn start(dir: &Path, api: &str, model: &str) -> Serving {
        let mut cmd = gsm8k(
            dir,
            &[
                "serve",
                "--env.rollout_server_url",
                api,
                "--openai.base_url",
                model,
                "--openai.server_type",
                "openai",
                "--openai.health_check",
                "false",
                "--env.group_size",
                "2",
                "--env.max_num_workers",
                "2",
                "--env.total_steps",
                "1000",
                "--env.checkpoint_dir",
                "ck",
                "--env.data_path_to_save_groups",
                "groups.jsonl",
            ],
        );
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let stderr = child.stderr.take().unwrap();
        tokio::spawn(async move {
            let mut r = BufReader::new(stderr).lines();
            while let Ok(Some(l)) = r.next_line().await {
                let _ = tx.send(l);
            }
        });
        Serving {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    async fn expect(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(l)) => self.seen.push(l),
                _ => panic!(
                    "no line with {needle:?} within {within:?}:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// SIGINT (a graceful stop), then the rest of stderr.
    async fn stop(mut self) -> Vec<String> {
        let pid = self.child.id().unwrap() as i32;
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let status = tokio::time::timeout(Duration::from_secs(90), self.child.wait())
            .await
            .expect("serve exits after SIGINT")
            .unwrap();
        while let Some(l) = self.lines.recv().await {
            self.seen.push(l);
        }
        assert!(
            status.success(),
            "serve: {status}\n{}",
            self.seen.join("\n")
        );
        self.seen
    }
}

/// The newest checkpoint file of the example and its JSON.
fn newest_checkpoint(dir: &Path) -> (PathBuf, Value) {
    let dir = dir.join("ck/env_checkpoints/gsm8k");
    let newest = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .max_by_key(|p| {
            let name = p.file_stem().unwrap().to_str().unwrap().to_owned();
            name.trim_start_matches("step-").parse::<i64>().unwrap()
        })
        .expect("a checkpoint");
    let value = serde_json::from_str(&std::fs::read_to_string(&newest).unwrap()).unwrap();
    (newest, value)
}

fn questions(path: &Path) -> Vec<u64> {
    lines(path)
        .iter()
        .flat_map(|g| g["messages"].as_array().unwrap().clone())
        .map(|chat| {
            let user = chat
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["role"] == "user")
                .unwrap()["content"]
                .as_str()
                .unwrap()
                .to_owned();
            question_number(&user)
        })
        .collect::<BTreeSet<u64>>()
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_restarted_resumes_from_its_checkpoint_against_run_api() {
    let server = ScriptedServer::start(model(mixed)).await.unwrap();
    let api = Api::start(common::atropos::free_port()).await;
    let trainer = Trainer::register(&api.url, 4, 1000).await;
    let tmp = tempfile::tempdir().unwrap();
    // The trainer takes a batch whenever there is one, moving the step on.
    let url = api.url.clone();
    let puller = tokio::spawn(async move {
        let http = common::atropos::http();
        loop {
            let _ = http.get(format!("{url}/batch")).send().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });

    let mut first = Serving::start(tmp.path(), &api.url, &server.base_url());
    first
        .expect(
            "no checkpoint in ck/env_checkpoints/gsm8k",
            Duration::from_secs(120),
        )
        .await;
    // The interval is 2: a checkpoint whenever the trainer's step crosses a multiple of 2 (then
    // at exit). The step can jump past 2 when the trainer takes several batches between two
    // polls, so the file's number is not known in advance.
    let saved_line = first
        .expect(
            "checkpoint saved: ck/env_checkpoints/gsm8k/step-",
            Duration::from_secs(180),
        )
        .await;
    let number: i64 = saved_line
        .rsplit("step-")
        .next()
        .and_then(|s| s.strip_suffix(".json"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no step number in {saved_line:?}"));
    assert!(number >= 2 && number % 2 == 0, "{saved_line}");
    let log = first.stop().await;
    let (_, saved) = newest_checkpoint(tmp.path());
    let position = saved["cursors"]["train"].as_u64().unwrap();
    let scored = saved["state"]["groups_scored"].as_u64().unwrap();
    assert_eq!(saved["env"], "gsm8k");
    let before = questions(&tmp.path().join("groups.jsonl"));
    assert!(
        !before.is_empty() && position >= before.len() as u64,
        "{saved}\n{}",
        log.join("\n")
    );
    assert!(scored >= before.len() as u64);

    let mut second = Serving::start(tmp.path(), &api.url, &server.base_url());
    let resumed = second
        .expect("resuming from checkpoint", Duration::from_secs(120))
        .await;
    assert!(
        resumed.contains(&format!("train at item {position}"))
            && resumed.contains("environment state with groups_scored"),
        "{resumed}"
    );
    // Wait for new groups to be written by the second run (groups_1.jsonl).
    let after_path = tmp.path().join("groups_1.jsonl");
    let deadline = Instant::now() + Duration::from_secs(180);
    while questions(&after_path).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the restarted serve sent no groups"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let log = second.stop().await;
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("resuming from checkpoint"))
            .count(),
        1
    );
    let after = questions(&after_path);
    let repeated: Vec<&u64> = after.iter().filter(|q| before.contains(q)).collect();
    assert!(
        repeated.is_empty(),
        "items repeated after the restart: {repeated:?}"
    );
    let (newest, resaved) = newest_checkpoint(tmp.path());
    let end = resaved["cursors"]["train"].as_u64().unwrap();
    // Still in the first epoch, so a repeated question could only come from a lost position.
    assert!(end > position && end < TRAIN_ROWS as u64, "{resaved}");
    eprintln!("{resumed}\nfirst run: {} questions, position {position}; second run: {} questions, position {end}", before.len(), after.len());
    assert!(
        resaved["state"]["groups_scored"].as_u64().unwrap() > scored,
        "the environment's own state continued from the checkpoint: {resaved}"
    );

    // A corrupt newest checkpoint: one line, exit non-zero, the file untouched.
    std::fs::write(
        &newest,
        "{\"format\": \"hermes-env checkpoint 1\", \"env\": ",
    )
    .unwrap();
    let out = gsm8k(
        tmp.path(),
        &[
            "serve",
            "--env.rollout_server_url",
            &api.url,
            "--openai.base_url",
            &server.base_url(),
            "--openai.server_type",
            "openai",
            "--openai.health_check",
            "false",
            "--env.group_size",
            "2",
            "--env.checkpoint_dir",
            "ck",
        ],
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let complaint: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("is corrupt"))
        .collect();
    assert_eq!(complaint.len(), 1, "{stderr}");
    assert!(complaint[0].contains(newest.file_name().unwrap().to_str().unwrap()));
    assert_eq!(
        std::fs::read_to_string(&newest).unwrap(),
        "{\"format\": \"hermes-env checkpoint 1\", \"env\": "
    );
    puller.abort();
    drop(trainer);
    api.kill().await;
}
