//! Tokenizers and datasets by hub id, against a Hugging Face cache laid out by
//! huggingface_hub itself: the fixture's files are made with the real Python packages (a tiny
//! BPE trained with `tokenizers`, parquet written with `pyarrow`, in the venv the test set-up
//! creates), served by a local fake hub that speaks the resolve API, and fetched into the cache
//! with `huggingface_hub.hf_hub_download`. The example binaries then run with
//! `HF_HUB_OFFLINE=1` on that cache; the download tests point `HF_ENDPOINT` at the fake hub.

mod common;
#[allow(dead_code)]
#[path = "hub_fixture/fake_hub.rs"]
mod fake_hub;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fake_hub::{FakeHub, Repos, Revision};
use hermes_env::data::Dataset;
use hermes_runtime::hub::{HubId, HubRepo, HubSettings, RepoKind};
use hermes_runtime::llm::ChatTokenizer;
use serde_json::Value;

const DEFAULT_TOKENIZER: &str = "NousResearch/DeepHermes-3-Llama-3-3B-Preview";
const TINY: &str = "hermes-test/tiny-bpe";
const TINY_JINJA: &str = "hermes-test/tiny-bpe-jinja";
const FRAMES: &str = "google/frames-benchmark";
const QA: &str = "hermes-test/qa";
const GSM8K: &str = "openai/gsm8k";
const GSM8K_LEGACY: &str = "gsm8k";
const CARDS: &str = "hermes-test/cards";

/// openai/gsm8k's dataset card as the hub serves it: two configs, neither marked default.
const GSM8K_CARD: &str = "---\nannotations_creators:\n- crowdsourced\nlanguage:\n- en\nlicense:\n- mit\npretty_name: Grade School Math 8K\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n  - split: test\n    path: main/test-*\n- config_name: socratic\n  data_files:\n  - split: train\n    path: socratic/train-*\n  - split: test\n    path: socratic/test-*\n---\n\n# Dataset Card for GSM8K\n";

/// A card whose second config is `default: true`, with a config that has only a train split.
const CARDS_CARD: &str = "---\nconfigs:\n- config_name: easy\n  data_files:\n  - split: train\n    path: easy.jsonl\n- config_name: hard\n  default: true\n  data_files:\n  - split: train\n    path: hard/part-*.jsonl\n  - split: test\n    path: hard/test.jsonl\n---\n# cards\n";

/// The files of openai/gsm8k's main revision, as the real repository lays them out.
fn gsm8k_files(src: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![("README.md".to_owned(), GSM8K_CARD.as_bytes().to_vec())];
    for config in ["main", "socratic"] {
        for split in ["train", "test"] {
            files.push((
                format!("{config}/{split}-00000-of-00001.parquet"),
                read(&src.join(format!("gsm8k-{config}-{split}.parquet"))),
            ));
        }
    }
    files
}

fn gsm8k_converted_files(src: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for config in ["main", "socratic"] {
        for split in ["train", "test"] {
            files.push((
                format!("{config}/{split}/0000.parquet"),
                read(&src.join(format!("gsm8k-{config}-{split}.parquet"))),
            ));
        }
    }
    files
}

fn cards_files() -> Vec<(String, Vec<u8>)> {
    let row = |q: &str| format!("{{\"question\": \"{q}\", \"answer\": \"1\"}}\n");
    vec![
        ("README.md".into(), CARDS_CARD.as_bytes().to_vec()),
        ("easy.jsonl".into(), row("easy 0").into_bytes()),
        (
            "hard/part-0.jsonl".into(),
            (row("hard 0") + &row("hard 1")).into_bytes(),
        ),
        ("hard/part-1.jsonl".into(), row("hard 2").into_bytes()),
        ("hard/test.jsonl".into(), row("hard test").into_bytes()),
    ]
}
const TOKEN: &str = "hf_fixture_token_7d1c";

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/hub_fixture")
        .join(name)
}

/// The fixture's source files, built once per test binary with the real Python packages.
fn sources() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let template = ChatTokenizer::builtin_dir().join("tokenizer_config.json");
        run_python(
            Command::new(common::hub_python())
                .arg(script("make_fixture.py"))
                .arg(&dir)
                .arg(template),
        );
        dir
    })
}

fn run_python(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run python");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn revision(commit: char, files: &[(String, Vec<u8>)]) -> Revision {
    Revision {
        commit: std::iter::repeat_n(commit, 40).collect(),
        files: files.iter().cloned().collect(),
    }
}

/// The fixture repositories: two tokenizer repos plus the default id, FRAMES with its data
/// only in the auto-converted parquet revision, and a dataset with hub-named split files.
fn repos() -> Repos {
    let src = sources();
    let files = |dir: &str, names: &[&str]| -> Vec<(String, Vec<u8>)> {
        names
            .iter()
            .map(|n| (n.to_string(), read(&src.join(dir).join(n))))
            .collect()
    };
    let plain = files("tokenizer", &["tokenizer.json", "tokenizer_config.json"]);
    let jinja = files(
        "tokenizer-jinja",
        &[
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
        ],
    );
    let model = |repo: &str| ("".to_owned(), repo.to_owned(), "main".to_owned());
    let dataset = |repo: &str, rev: &str| ("datasets/".to_owned(), repo.to_owned(), rev.to_owned());
    Repos::from([
        (model(TINY), revision('a', &plain)),
        (model(DEFAULT_TOKENIZER), revision('b', &plain)),
        (model(TINY_JINJA), revision('c', &jinja)),
        (
            dataset(FRAMES, "main"),
            revision('d', &[("README.md".into(), b"# FRAMES fixture\n".to_vec())]),
        ),
        (
            dataset(FRAMES, "refs/convert/parquet"),
            revision(
                'e',
                &[(
                    "default/test/0000.parquet".into(),
                    read(&src.join("frames.parquet")),
                )],
            ),
        ),
        (
            dataset(QA, "main"),
            revision(
                'f',
                &[
                    ("README.md".into(), b"# qa\n".to_vec()),
                    (
                        "data/train-00000-of-00001.parquet".into(),
                        read(&src.join("qa-train.parquet")),
                    ),
                    (
                        "data/test-00000-of-00001.parquet".into(),
                        read(&src.join("qa-test.parquet")),
                    ),
                ],
            ),
        ),
        (dataset(GSM8K, "main"), revision('7', &gsm8k_files(src))),
        (
            dataset(GSM8K, "refs/convert/parquet"),
            revision('8', &gsm8k_converted_files(src)),
        ),
        // The hub redirects the legacy id to openai/gsm8k; huggingface_hub caches what it gets
        // under the id it was asked for (datasets--gsm8k), which is all an offline run sees.
        (
            dataset(GSM8K_LEGACY, "main"),
            revision('7', &gsm8k_files(src)),
        ),
        (dataset(CARDS, "main"), revision('9', &cards_files())),
    ])
}

/// A hub cache populated by huggingface_hub's `hf_hub_download` from the fake hub, built once.
fn python_cache() -> &'static Path {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let cache = tempfile::tempdir().unwrap().keep().join("hub");
        let hub = FakeHub::start(repos(), None);
        let downloads = serde_json::json!([
            [TINY, "model", "main", "tokenizer.json"],
            [TINY, "model", "main", "tokenizer_config.json"],
            [DEFAULT_TOKENIZER, "model", "main", "tokenizer.json"],
            [DEFAULT_TOKENIZER, "model", "main", "tokenizer_config.json"],
            [TINY_JINJA, "model", "main", "tokenizer.json"],
            [TINY_JINJA, "model", "main", "tokenizer_config.json"],
            [TINY_JINJA, "model", "main", "chat_template.jinja"],
            [
                FRAMES,
                "dataset",
                "refs/convert/parquet",
                "default/test/0000.parquet"
            ],
            [QA, "dataset", "main", "data/train-00000-of-00001.parquet"],
            [QA, "dataset", "main", "data/test-00000-of-00001.parquet"],
        ]);
        let mut downloads = downloads.as_array().unwrap().clone();
        let src = sources();
        for (name, _) in gsm8k_files(src) {
            downloads.push(serde_json::json!([GSM8K, "dataset", "main", name]));
        }
        for (name, _) in gsm8k_converted_files(src) {
            downloads.push(serde_json::json!([
                GSM8K,
                "dataset",
                "refs/convert/parquet",
                name
            ]));
        }
        for name in ["README.md", "main/train-00000-of-00001.parquet"] {
            downloads.push(serde_json::json!([GSM8K_LEGACY, "dataset", "main", name]));
        }
        for (name, _) in cards_files() {
            downloads.push(serde_json::json!([CARDS, "dataset", "main", name]));
        }
        let downloads = Value::Array(downloads);
        run_python(
            python_env(Command::new(common::hub_python()), &cache)
                .env("HF_ENDPOINT", &hub.url)
                .arg(script("populate.py"))
                .arg(downloads.to_string()),
        );
        cache
    })
}

/// `cmd` with a clean hub environment on `cache` (nothing of the user's HF set-up).
fn python_env(mut cmd: Command, cache: &Path) -> Command {
    for var in [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN_PATH",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HF_HUB_CACHE", cache)
        .env("HF_HOME", cache.parent().unwrap().join("hf-home"))
        .env("HF_HUB_DISABLE_TELEMETRY", "1");
    cmd
}

struct Run {
    ok: bool,
    stderr: String,
    groups: Vec<Value>,
}

/// Runs an example's `process` in a fresh directory with the hub environment `envs`.
fn process(example: &str, args: &[&str], cache: &Path, envs: &[(&str, &str)]) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = python_env(Command::new(common::example_bin(example)), cache);
    cmd.arg("process");
    if !args.contains(&"--testing") {
        cmd.args(["--testing", "true"]);
    }
    cmd.args(["--env.use_wandb", "false"])
        .args(["--env.total_steps", "2", "--env.group_size", "2"])
        .args(["--env.include_messages", "true"])
        .args(["--env.data_path_to_save_groups", "out.jsonl"])
        .args(args)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let groups = std::fs::read_to_string(tmp.path().join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        ok: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        groups,
    }
}

fn offline(example: &str, args: &[&str]) -> Run {
    let run = process(example, args, python_cache(), &[("HF_HUB_OFFLINE", "1")]);
    assert!(run.ok, "{}", run.stderr);
    run
}

/// The snapshot directory huggingface_hub wrote for a model id.
fn snapshot(cache: &Path, repo: &str) -> PathBuf {
    let folder = cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = std::fs::read_to_string(folder.join("refs/main")).unwrap();
    folder.join("snapshots").join(commit.trim())
}

/// Every sequence of every group decoded by the Python `tokenizers` package.
fn decode_with_python(tokenizer_json: &Path, groups: &[Value]) -> Vec<String> {
    let ids: Vec<&Value> = groups
        .iter()
        .flat_map(|g| g["tokens"].as_array().unwrap())
        .collect();
    let mut child = Command::new(common::hub_python())
        .arg(script("decode.py"))
        .arg(tokenizer_json)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&ids).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn messages(groups: &[Value]) -> Vec<Value> {
    groups
        .iter()
        .flat_map(|g| {
            g["messages"]
                .as_array()
                .expect("messages in the group")
                .clone()
        })
        .collect()
}

/// Real tokens: not placeholders, BPE merges (fewer tokens than bytes), and the Python
/// decoding of each sequence holds every message of its conversation; in Phase 1 (`rendered`)
/// it is exactly the chat template's rendering of the conversation with the tools the example
/// offers (`terminal` and `file`), as in Phase 2 prompts.
fn assert_real_tokens(run: &Run, repo: &str, rendered: bool) {
    assert!(!run.groups.is_empty(), "{}", run.stderr);
    for g in &run.groups {
        assert_eq!(
            g["group_overrides"],
            serde_json::json!({}),
            "not placeholder tokens"
        );
    }
    let snap = snapshot(python_cache(), repo);
    let texts = decode_with_python(&snap.join("tokenizer.json"), &run.groups);
    let template = ChatTokenizer::load(snap.to_str().unwrap()).unwrap();
    let conversations = messages(&run.groups);
    let tools: Vec<serde_json::Value> = common::all_tools()
        .schemas()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    assert_eq!(texts.len(), conversations.len());
    for (text, chat) in texts.iter().zip(&conversations) {
        let chat = chat.as_array().unwrap();
        if rendered {
            assert_eq!(text, &template.render(chat, Some(&tools), false).unwrap());
        } else {
            assert!(
                text.starts_with("<|im_start|>system\n") && text.ends_with("<|im_end|>"),
                "{text}"
            );
        }
        for m in chat {
            if let Some(content) = m["content"].as_str().filter(|c| !c.is_empty()) {
                assert!(text.contains(content), "{content:?} not in {text:?}");
            }
        }
    }
    let tokens: usize = run
        .groups
        .iter()
        .flat_map(|g| g["tokens"].as_array().unwrap())
        .map(|t| t.as_array().unwrap().len())
        .sum();
    let bytes: usize = texts.iter().map(String::len).sum();
    assert!(
        tokens < bytes,
        "{tokens} tokens for {bytes} bytes: not the BPE"
    );
}

#[test]
fn process_with_a_hub_tokenizer_id_writes_real_tokens_offline() {
    let run = offline("terminal_test", &["--env.tokenizer_name", TINY]);
    assert_eq!(run.groups.len(), 2, "total_steps 2: two groups");
    assert_real_tokens(&run, TINY, true);
}

#[test]
fn a_commit_revision_reads_its_snapshot_directly() {
    let pinned = format!("{TINY}@{}", "a".repeat(40));
    let run = offline("terminal_test", &["--env.tokenizer_name", &pinned]);
    assert_real_tokens(&run, TINY, true);
}

#[test]
fn the_default_tokenizer_id_is_used_without_a_flag_when_cached() {
    let run = offline("terminal_test", &[]);
    assert_real_tokens(&run, DEFAULT_TOKENIZER, true);
}

#[test]
fn phase_2_process_tokenizes_with_a_hub_tokenizer() {
    let run = offline(
        "terminal_test",
        &["--openai.server_type", "vllm", "--env.tokenizer_name", TINY],
    );
    assert!(
        run.stderr
            .contains(&format!("tokenizer ChatTokenizer {{ source: \"{TINY}\"")),
        "{}",
        run.stderr
    );
    assert_real_tokens(&run, TINY, false);
    for g in &run.groups {
        assert!(
            g["inference_logprobs"].is_array(),
            "Phase 2 groups carry logprobs"
        );
    }
}

#[test]
fn phase_2_honours_the_servers_tokenizer_name() {
    // The server's tokenizer wins over --env.tokenizer_name (which does not even exist).
    let run = offline(
        "terminal_test",
        &[
            "--openai.server_type",
            "vllm",
            "--openai.tokenizer_name",
            TINY_JINJA,
            "--env.tokenizer_name",
            "/nonexistent/tokenizer",
        ],
    );
    assert!(run.stderr.contains(TINY_JINJA), "{}", run.stderr);
    assert_real_tokens(&run, TINY_JINJA, false);
}

#[test]
fn web_research_takes_its_prompts_from_the_cached_parquet() {
    let run = offline(
        "web_research",
        &["--env.dataset_name", FRAMES, "--env.tokenizer_name", TINY],
    );
    assert!(
        run.stderr.contains(&format!(
            "dataset {FRAMES} (hub cache, revision refs/convert/parquet, commit eeeeeeeeeeee): split 'test', 30 rows"
        )),
        "{}",
        run.stderr
    );
    let prompts: Vec<String> = messages(&run.groups)
        .iter()
        .flat_map(|chat| chat.as_array().unwrap().clone())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(!prompts.is_empty());
    for p in &prompts {
        assert!(p.contains("Question: Fixture question "), "{p}");
    }
}

#[test]
fn web_research_falls_back_to_its_questions_with_a_warning() {
    let empty = tempfile::tempdir().unwrap();
    let run = process(
        "web_research",
        &[],
        &empty.path().join("hub"),
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert!(run.ok, "{}", run.stderr);
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("using the 10 built-in questions instead"))
        .unwrap_or_else(|| panic!("no fallback warning:\n{}", run.stderr));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("hf download google/frames-benchmark --repo-type dataset"),
        "{line}"
    );
}

#[test]
fn a_missing_tokenizer_offline_names_the_download_command() {
    let empty = tempfile::tempdir().unwrap();
    let cache = empty.path().join("hub");
    // Phase 2: the run stops with the command.
    let run = process(
        "terminal_test",
        &[
            "--openai.server_type",
            "vllm",
            "--testing",
            "false",
            "--openai.base_url",
            "http://127.0.0.1:9/v1",
        ],
        &cache,
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert!(!run.ok);
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: tokenizer: NousResearch/DeepHermes-3-Llama-3-3B-Preview: tokenizer.json is not in the hub cache")
            && last.contains("HF_HUB_OFFLINE is set; fetch it with `hf download NousResearch/DeepHermes-3-Llama-3-3B-Preview tokenizer.json tokenizer_config.json`"),
        "{}",
        run.stderr
    );
    // Phase 1: one warning with the command, then placeholder tokens (TRANSFORMERS_OFFLINE
    // means offline too, as in huggingface_hub).
    let run = process(
        "terminal_test",
        &[],
        &cache,
        &[("TRANSFORMERS_OFFLINE", "1")],
    );
    assert!(run.ok, "{}", run.stderr);
    let warning = run
        .stderr
        .lines()
        .find(|l| l.contains("hf download NousResearch/DeepHermes-3-Llama-3-3B-Preview tokenizer.json tokenizer_config.json"))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(
        warning.contains("WARN") && warning.contains("Phase 1 continues without a tokenizer"),
        "{warning}"
    );
    assert_eq!(run.groups[0]["group_overrides"]["placeholder_tokens"], true);
}

#[test]
fn unreachable_or_refusing_hubs_are_one_line_errors_with_the_command() {
    let empty = tempfile::tempdir().unwrap();
    let cache = empty.path().join("hub");
    let phase2 = [
        "--openai.server_type",
        "vllm",
        "--testing",
        "false",
        "--openai.base_url",
        "http://127.0.0.1:9/v1",
        "--env.tokenizer_name",
        TINY,
    ];
    let command = format!("`hf download {TINY} tokenizer.json tokenizer_config.json`");
    // Nothing listens on port 9.
    let run = process(
        "terminal_test",
        &phase2,
        &cache,
        &[("HF_ENDPOINT", "http://127.0.0.1:9")],
    );
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(!run.ok);
    assert!(
        last.starts_with(&format!(
            "error: tokenizer: {TINY}: cannot fetch tokenizer.json from http://127.0.0.1:9: "
        )) && last.contains(&command)
            && last.contains("HF_HUB_OFFLINE=1"),
        "{}",
        run.stderr
    );
    // A hub that wants a token the run does not have.
    let hub = FakeHub::start(repos(), Some(TOKEN));
    let run = process(
        "terminal_test",
        &phase2,
        &cache,
        &[("HF_ENDPOINT", &hub.url)],
    );
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(!run.ok);
    assert!(
        last.contains("access denied")
            && last.contains("needs HF_TOKEN")
            && last.contains(&command),
        "{}",
        run.stderr
    );
}

/// The (relative path → symlink target or content) tree of a repository's cache folder.
fn layout(folder: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![folder.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(folder)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                );
            } else if meta.is_dir() {
                if !rel.starts_with(".locks") {
                    stack.push(path);
                }
            } else {
                out.insert(rel, format!("{} bytes", meta.len()));
            }
        }
    }
    out
}

#[test]
fn downloads_go_through_hf_endpoint_with_the_token_into_the_python_layout() {
    let hub = FakeHub::start(repos(), Some(TOKEN));
    let home = tempfile::tempdir().unwrap();
    let cache = home.path().join("hub");
    let run = process(
        "terminal_test",
        &["--env.tokenizer_name", TINY],
        &cache,
        &[("HF_ENDPOINT", &hub.url), ("HF_TOKEN", TOKEN)],
    );
    assert!(run.ok, "{}", run.stderr);
    assert!(!run.stderr.contains(TOKEN), "the token reached the logs");
    assert_eq!(run.groups[0]["group_overrides"], serde_json::json!({}));
    let seen = hub.seen();
    assert!(seen
        .iter()
        .any(|s| s.path == format!("/{TINY}/resolve/main/tokenizer.json")));
    for s in &seen {
        assert_eq!(
            s.authorization.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str()),
            "{s:?}"
        );
    }
    // The same tree huggingface_hub wrote for the same files (plus the .no_exist marker for
    // the chat_template.jinja this repository lacks, which huggingface_hub writes too).
    let ours = layout(&cache.join("models--hermes-test--tiny-bpe"));
    let python = layout(&python_cache().join("models--hermes-test--tiny-bpe"));
    let mut expected = python.clone();
    expected.insert(
        format!(".no_exist/{}/chat_template.jinja", "a".repeat(40)),
        "0 bytes".into(),
    );
    assert_eq!(ours, expected);
    // And Python tools read it back offline.
    let paths = run_python(
        python_env(Command::new(common::hub_python()), &cache)
            .env("HF_HUB_OFFLINE", "1")
            .arg(script("populate.py"))
            .arg(serde_json::json!([[TINY, "model", "main", "tokenizer.json"]]).to_string()),
    );
    assert!(
        paths.contains(&format!("snapshots/{}/tokenizer.json", "a".repeat(40))),
        "{paths}"
    );
}

#[test]
fn datasets_download_through_the_parquet_revision_with_the_token_file() {
    let hub = FakeHub::start(repos(), Some(TOKEN));
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("token"), format!("{TOKEN}\n")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(common::example_bin("web_research"))
        .args(["process", "--testing", "true", "--env.use_wandb", "false"])
        .args(["--env.total_steps", "1", "--env.group_size", "1"])
        .args([
            "--env.tokenizer_name",
            ChatTokenizer::builtin_dir().to_str().unwrap(),
        ])
        .args(["--env.data_path_to_save_groups", "out.jsonl"])
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", &hub.url)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("dataset {FRAMES} (hub, revision refs/convert/parquet, commit eeeeeeeeeeee): split 'test', 30 rows")),
        "{stderr}"
    );
    let folder = home.path().join("hub/datasets--google--frames-benchmark");
    let commit = std::fs::read_to_string(folder.join("refs/refs/convert/parquet")).unwrap();
    assert_eq!(commit, "e".repeat(40));
    assert!(folder
        .join(format!("snapshots/{commit}/default/test/0000.parquet"))
        .is_file());
    let seen = hub.seen();
    assert!(
        seen.iter()
            .any(|s| s.path == format!("/api/datasets/{FRAMES}/revision/main")),
        "{seen:?}"
    );
    assert!(seen
        .iter()
        .all(|s| s.authorization.as_deref() == Some(format!("Bearer {TOKEN}").as_str())));
}

#[test]
fn xdg_cache_home_and_hf_token_path_are_honoured() {
    let hub = FakeHub::start(repos(), Some(TOKEN));
    let xdg = tempfile::tempdir().unwrap();
    let token_file = xdg.path().join("my-token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(common::example_bin("terminal_test"))
        .args(["process", "--testing", "true", "--env.use_wandb", "false"])
        .args(["--env.total_steps", "1", "--env.group_size", "1"])
        .args(["--env.tokenizer_name", TINY])
        .args(["--env.data_path_to_save_groups", "out.jsonl"])
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_HOME")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env("XDG_CACHE_HOME", xdg.path())
        .env("HF_TOKEN_PATH", &token_file)
        .env("HF_ENDPOINT", &hub.url)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folder = xdg
        .path()
        .join("huggingface/hub/models--hermes-test--tiny-bpe");
    assert!(
        folder.join("refs/main").is_file(),
        "no cache under XDG_CACHE_HOME"
    );
    let groups = std::fs::read_to_string(tmp.path().join("out.jsonl")).unwrap();
    assert!(groups.contains("\"group_overrides\": {}"), "{groups}");
}

#[tokio::test]
async fn the_library_reads_hub_split_files_and_chat_template_jinja() {
    let settings = HubSettings::new(python_cache().to_owned(), "http://127.0.0.1:9", None, true);
    #[derive(serde::Deserialize)]
    struct Qa {
        prompt: String,
        #[serde(deserialize_with = "hermes_env::data::text")]
        answer: String,
    }
    let test: Vec<Qa> = Dataset::open_with(QA, "test", &settings)
        .await
        .unwrap()
        .items()
        .unwrap();
    assert_eq!(
        test.iter()
            .map(|q| (q.prompt.as_str(), q.answer.as_str()))
            .collect::<Vec<_>>(),
        [
            ("test prompt 0", "0"),
            ("test prompt 1", "10"),
            ("test prompt 2", "20")
        ]
    );
    let train = Dataset::open_with(QA, "train", &settings).await.unwrap();
    assert_eq!(train.len(), 5);
    let e = Dataset::open_with(QA, "validation", &settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no data files for split 'validation' (splits found: train, test)"),
        "{e}"
    );

    let repo = HubRepo::new(
        HubId::parse(RepoKind::Model, TINY_JINJA).unwrap(),
        settings.clone(),
    );
    let tok = ChatTokenizer::from_hub(repo).await.unwrap();
    let chat = [serde_json::json!({"role": "user", "content": "hi"})];
    assert_eq!(
        tok.render(&chat, None, true).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = tok.encode("<|im_start|>user", false).unwrap();
    assert_eq!(tok.decode(&ids, false).unwrap(), "<|im_start|>user");
}

/// Phase 2 `serve` against the real Atropos `run-api` with a hub tokenizer id (offline, from
/// the huggingface_hub-written cache): the trainer's batch holds real BPE tokens whose Python
/// decoding carries the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phase_2_serve_sends_real_tokens_from_a_hub_tokenizer() {
    use std::time::{Duration, Instant};
    let python = common::atropos_python();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let _api = tokio::process::Command::new(python.parent().unwrap().join("run-api"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run-api");
    let url = format!("http://127.0.0.1:{port}");
    // Building a TrajectoryApi installs the TLS provider reqwest's rustls-no-provider needs.
    hermes_runtime::atropos::TrajectoryApi::new(
        "http://127.0.0.1:1",
        hermes_runtime::llm::RetryPolicy::default(),
        Duration::from_secs(1),
    )
    .unwrap();
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while http.get(format!("{url}/info")).send().await.is_err() {
        assert!(Instant::now() < deadline, "run-api did not come up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let register = serde_json::json!({"wandb_group": "g", "wandb_project": "p", "batch_size": 2,
        "max_token_len": 1_000_000, "checkpoint_dir": "c", "save_checkpoint_interval": 2,
        "starting_step": 0, "num_steps": 1});
    http.post(format!("{url}/register"))
        .json(&register)
        .send()
        .await
        .unwrap();
    let batch = |http: reqwest::Client, url: String| async move {
        let v: Value = http
            .get(format!("{url}/batch"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["batch"].clone()
    };
    assert!(
        batch(http.clone(), url.clone()).await.is_null(),
        "the first /batch starts the trainer"
    );

    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = python_env(
        std::process::Command::new(common::example_bin("terminal_test")),
        python_cache(),
    );
    cmd.args(["serve", "--testing", "true", "--openai.server_type", "vllm"])
        .args(["--env.rollout_server_url", &url, "--env.use_wandb", "false"])
        .args(["--env.group_size", "2", "--env.max_num_workers", "1"])
        .args(["--env.ensure_scores_are_not_same", "false"])
        .args(["--env.include_messages", "true"])
        .args(["--env.tokenizer_name", TINY])
        .env("HF_HUB_OFFLINE", "1")
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut env = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let groups = loop {
        let b = batch(http.clone(), url.clone()).await;
        if let Some(groups) = b.as_array() {
            break groups.clone();
        }
        if let Ok(Some(status)) = env.try_wait() {
            panic!("serve exited early ({status})");
        }
        assert!(
            Instant::now() < deadline,
            "no batch from serve within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    env.kill().await.unwrap();
    let run = Run {
        ok: true,
        stderr: String::new(),
        groups,
    };
    assert_real_tokens(&run, TINY, false);
}

#[test]
fn a_cached_revision_is_used_online_without_fetching_it_again() {
    let copy = tempfile::tempdir().unwrap();
    let cache = copy.path().join("hub");
    let status = Command::new("cp")
        .arg("-a")
        .arg(python_cache())
        .arg(&cache)
        .status()
        .unwrap();
    assert!(status.success(), "cp -a of the fixture cache");
    let hub = FakeHub::start(repos(), None);
    let run = process(
        "terminal_test",
        &["--env.tokenizer_name", TINY],
        &cache,
        &[("HF_ENDPOINT", &hub.url)],
    );
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.groups[0]["group_overrides"], serde_json::json!({}));
    // Only the optional chat_template.jinja, absent from the snapshot, is asked for; its 404
    // is recorded so the next run asks nothing.
    let paths: Vec<String> = hub.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, [format!("/{TINY}/resolve/main/chat_template.jinja")]);
    let again = process(
        "terminal_test",
        &["--env.tokenizer_name", TINY],
        &cache,
        &[("HF_ENDPOINT", &hub.url)],
    );
    assert!(again.ok, "{}", again.stderr);
    assert_eq!(
        hub.seen().len(),
        1,
        "the .no_exist marker saved the request"
    );
}

fn offline_settings() -> HubSettings {
    HubSettings::new(python_cache().to_owned(), "http://127.0.0.1:9", None, true)
}

fn questions(ds: &Dataset) -> Vec<String> {
    ds.rows()
        .iter()
        .map(|r| r["question"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_multi_config_dataset_needs_a_config_and_reads_only_its_files() {
    let settings = offline_settings();
    // Both configs have a train split and the card marks neither default: `datasets` refuses
    // to guess, and so does the library (it used to merge main and socratic into 10 rows).
    let e = Dataset::open_with(GSM8K, "train", &settings)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "dataset openai/gsm8k: split 'train' exists in several configs (main, socratic) and none \
         was chosen; name one as openai/gsm8k:CONFIG or with --env.dataset_config"
    );
    let main = Dataset::open_with(&format!("{GSM8K}:main"), "train", &settings)
        .await
        .unwrap();
    assert_eq!(main.len(), 6);
    assert_eq!(main.config(), Some("main"));
    assert!(questions(&main).iter().all(|q| q.starts_with("main train")));
    let socratic = Dataset::open_config_with(GSM8K, Some("socratic"), "test", &settings)
        .await
        .unwrap();
    assert_eq!(socratic.len(), 2);
    assert!(questions(&socratic)
        .iter()
        .all(|q| q.starts_with("socratic test")));
    assert!(socratic.rows()[0]["answer"]
        .as_str()
        .unwrap()
        .contains(" ** "));
    let e = Dataset::open_config_with(GSM8K, Some("mian"), "train", &settings)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "dataset openai/gsm8k: no config 'mian' (configs: main, socratic)"
    );
    let e = Dataset::open_config_with(
        &format!("{GSM8K}:main"),
        Some("socratic"),
        "train",
        &settings,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("config 'main' but config 'socratic'"), "{e}");
}

#[tokio::test]
async fn the_auto_converted_parquet_revision_has_the_same_configs() {
    let settings = offline_settings();
    let converted = format!("{GSM8K}@refs/convert/parquet");
    let e = Dataset::open_with(&converted, "train", &settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("several configs (main, socratic)"), "{e}");
    let socratic = Dataset::open_with(&format!("{converted}:socratic"), "train", &settings)
        .await
        .unwrap();
    assert_eq!(socratic.len(), 4);
    assert!(socratic
        .source()
        .contains("revision refs/convert/parquet, commit 888888888888"));
    let e = Dataset::open_with(&format!("{converted}:main"), "validation", &settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no data files for split 'validation' (splits found: train, test)"),
        "{e}"
    );
}

#[tokio::test]
async fn a_cards_default_config_is_taken_and_its_splits_are_its_own() {
    let settings = offline_settings();
    let hard = Dataset::open_with(CARDS, "train", &settings).await.unwrap();
    assert_eq!(questions(&hard), ["hard 0", "hard 1", "hard 2"]);
    assert_eq!(hard.config(), Some("hard"));
    let easy = Dataset::open_with(&format!("{CARDS}:easy"), "train", &settings)
        .await
        .unwrap();
    assert_eq!(questions(&easy), ["easy 0"]);
    let e = Dataset::open_with(&format!("{CARDS}:easy"), "test", &settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("no data files for split 'test' (splits found: train)"),
        "{e}"
    );
}

#[tokio::test]
async fn a_legacy_id_reads_its_own_cache_folder_offline() {
    let settings = offline_settings();
    let main = Dataset::open_with(&format!("{GSM8K_LEGACY}:main"), "train", &settings)
        .await
        .unwrap();
    assert_eq!(main.len(), 6);
    assert!(main
        .source()
        .starts_with("gsm8k (hub cache, revision main, commit 777777777777"));
    assert!(python_cache().join("datasets--gsm8k/refs/main").is_file());
    // The socratic files were never downloaded under the legacy id: offline, that is the
    // one-line "not in the cache" error with the command that fetches them (and the cached
    // current id), not "no such split".
    let e = Dataset::open_with(&format!("{GSM8K_LEGACY}:socratic"), "train", &settings)
        .await
        .unwrap_err();
    let chain = format!("{:#}", anyhow::Error::from(e));
    assert!(
        chain.starts_with("gsm8k: split 'train' of config 'socratic' is not in the hub cache")
            && chain.contains("fetch it with `hf download gsm8k --repo-type dataset`")
            && chain.ends_with("the cache holds it under its current id openai/gsm8k: use that id"),
        "{chain}"
    );
}

#[tokio::test]
async fn a_missing_legacy_id_is_one_line_naming_the_cached_current_id() {
    let cache = tempfile::tempdir().unwrap();
    let folder = "datasets--openai--gsm8k";
    let status = Command::new("cp")
        .arg("-a")
        .arg(python_cache().join(folder))
        .arg(cache.path().join(folder))
        .status()
        .unwrap();
    assert!(status.success());
    let settings = HubSettings::new(cache.path().to_owned(), "http://127.0.0.1:9", None, true);
    let e = Dataset::open_with(GSM8K_LEGACY, "train", &settings)
        .await
        .unwrap_err();
    // As an anyhow chain ({:#}, the way a setup hook's `?` reports it): the text once.
    let chain = format!("{:#}", anyhow::Error::from(e));
    assert_eq!(
        chain,
        format!(
            "gsm8k: the revision is not in the hub cache {} and HF_HUB_OFFLINE is set; fetch it \
             with `hf download gsm8k --repo-type dataset`; the cache holds it under its current \
             id openai/gsm8k: use that id",
            cache.path().display()
        )
    );
    assert_eq!(chain.lines().count(), 1);
}

#[test]
fn process_reads_the_config_named_by_the_dataset_config_flag() {
    let run = offline(
        "web_research",
        &[
            "--env.dataset_name",
            GSM8K,
            "--env.dataset_config",
            "socratic",
            "--env.dataset_split",
            "train",
            "--env.tokenizer_name",
            TINY,
        ],
    );
    assert!(
        run.stderr.contains(&format!(
            "dataset {GSM8K} (hub cache, revision main, commit 777777777777): config 'socratic', split 'train', 4 rows"
        )),
        "{}",
        run.stderr
    );
    let prompts: Vec<String> = messages(&run.groups)
        .iter()
        .flat_map(|chat| chat.as_array().unwrap().clone())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(!prompts.is_empty());
    for p in &prompts {
        assert!(p.contains("socratic train question"), "{p}");
    }
}
