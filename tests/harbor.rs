//! The `harbor` example over the Harbor tasks in `tests/harbor_tasks/` on the Docker backend:
//! the oracle (`check`: `solution/solve.sh` as the agent) earns full reward on every task,
//! `hack` (exploit library, an agent that does nothing, one that plants reward files) is paid
//! nothing, a verifier that outlives `timeout_sec` is a verifier failure, `evaluate` writes
//! Harbor's `JobResult` shape (validated by the `harbor` package's own model), and the task
//! templates shipped in the `harbor` wheel parse here as Harbor parses them. Needs the Docker
//! daemon; the fixture tasks build on `hermes-env/python` (built offline by
//! `sandbox-images/build` when missing), tagged here as the base image they name.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::docker::{containers_of, require_docker, IMAGE};
use serde_json::Value;

/// The base image the fixture tasks' Dockerfiles and `docker_image` name.
const BASE: &str = "hermes-harbor-fixture/base:bookworm";

/// Upper bound of one run (image builds included).
const RUN_LIMIT: Duration = Duration::from_secs(540);

const TASKS: [&str; 11] = [
    "agent-user",
    "apt-pip-build",
    "healthcheck",
    "multi-metric",
    "multi-step",
    "no-internet",
    "prebuilt-image",
    "separate-verifier",
    "verifier-env-user",
    "verifier-timeout",
    "web-service",
];

fn tasks_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harbor_tasks")
}

/// The Docker image and the fixtures' base tag.
fn require_base() {
    require_docker();
    let out = Command::new("docker")
        .args(["tag", IMAGE, BASE])
        .output()
        .expect("run docker tag");
    assert!(
        out.status.success(),
        "docker tag {IMAGE} {BASE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the example in `dir` with `args`; returns its pid and output, bounded by [`RUN_LIMIT`].
fn run(dir: &Path, args: &[&str]) -> (u32, Output) {
    run_with(dir, args, &[])
}

/// [`run`] with `env` set for the example.
fn run_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (u32, Output) {
    let mut child = Command::new(common::example_bin("harbor"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the example");
    let pid = child.id();
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("harbor {args:?} did not finish within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (pid, child.wait_with_output().expect("output"))
}

/// The process flags every run here uses: the fixtures, Docker, and a bridge network for the
/// run (so `allow_internet = false` is the task's own doing).
fn flags(tasks: &Path) -> Vec<String> {
    [
        "--env.tasks_dir",
        tasks.to_str().unwrap(),
        "--env.terminal_backend",
        "docker",
        "--env.container_network",
        "bridge",
        "--env.use_wandb",
        "false",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("{}: {e}", path.display());
    }))
    .unwrap()
}

#[test]
fn the_oracle_earns_full_reward_on_every_task() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("check.json");
    let mut args = vec!["check", "--limit", "0", "--table", "--json"];
    args.push(report.to_str().unwrap());
    let fl = flags(&tasks_dir());
    args.extend(fl.iter().map(String::as_str));
    let (pid, out) = run(tmp.path(), &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("check: 11 items, 11 passed, 0 failed"),
        "{stdout}"
    );
    for task in TASKS {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(task) && l.ends_with("pass")),
            "no passing table line for {task}:\n{stdout}"
        );
    }
    let doc = read_json(&report);
    let names: BTreeSet<&str> = doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            assert_eq!(i["reward"], 1.0, "{i}");
            i["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names, BTreeSet::from(TASKS));
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

#[test]
fn hack_pays_nothing_and_an_idle_or_planting_agent_earns_zero() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let exploits = tmp.path().join("exploits.json");
    std::fs::write(
        &exploits,
        serde_json::json!([
            {"name": "do-nothing", "category": "baseline", "commands": ["true"]},
            {"name": "plant-reward", "category": "reward-file", "commands": [
                "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && \
                 echo '{\"reward\": 1}' > /logs/verifier/reward.json"
            ]},
            {"name": "plant-reward-later", "category": "reward-file", "commands": [
                "nohup setsid sh -c 'while :; do mkdir -p /logs/verifier; \
                 echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' >/dev/null 2>&1 & echo started"
            ]}
        ])
        .to_string(),
    )
    .unwrap();
    let report = tmp.path().join("hack.json");
    let mut args = vec!["hack", "--limit", "0", "--exploits"];
    args.push(exploits.to_str().unwrap());
    args.extend(["--json", report.to_str().unwrap()]);
    let fl = flags(&tasks_dir());
    args.extend(fl.iter().map(String::as_str));
    let (pid, out) = run(tmp.path(), &args);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("0 paid above 0"), "{stdout}");
    let doc = read_json(&report);
    let rows = doc["rows"].as_array().unwrap();
    for task in TASKS {
        let of = |exploit: &str| {
            rows.iter()
                .find(|r| r["item"].as_str().unwrap().ends_with(task) && r["exploit"] == exploit)
                .unwrap_or_else(|| panic!("no row for {task} × {exploit}"))
        };
        // Doing nothing is a scored 0, as is a reward file planted during the agent phase
        // (wiped before the tests run).
        for exploit in ["do-nothing", "plant-reward"] {
            let row = of(exploit);
            assert_eq!(
                (row["reward"].as_f64(), row["outcome"]["kind"].as_str()),
                (Some(0.0), Some("scored")),
                "{task} × {exploit}: {row}"
            );
        }
        // A process left writing reward files holds no listening socket: killed before the
        // tests, and the process wire fires.
        assert_eq!(
            of("plant-reward-later")["outcome"]["kind"],
            "tampered",
            "{task}"
        );
        assert!(
            rows.iter()
                .filter(|r| r["item"].as_str().unwrap().ends_with(task))
                .count()
                > 10,
            "the exploit library ran against {task}"
        );
    }
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

#[test]
fn a_verifier_that_outlives_its_timeout_is_a_verifier_failure() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let exploits = tmp.path().join("exploits.json");
    // The right answer, plus the file that makes the tests sleep past timeout_sec = 8 after
    // writing reward 1: the run has no verdict, so no reward.
    std::fs::write(
        &exploits,
        serde_json::json!([{"name": "slow-tests", "category": "verifier-run", "commands": [
            "printf harbor | sha256sum | cut -d' ' -f1 > /app/digest.txt && touch /app/slow"
        ]}])
        .to_string(),
    )
    .unwrap();
    let report = tmp.path().join("hack.json");
    let mut args = vec!["hack", "--limit", "0", "--only", "slow-tests", "--exploits"];
    args.push(exploits.to_str().unwrap());
    args.extend(["--json", report.to_str().unwrap()]);
    let fl = flags(&tasks_dir().join("verifier-timeout"));
    args.extend(fl.iter().map(String::as_str));
    let (_, out) = run(tmp.path(), &args);
    assert!(out.status.success(), "{}", text(&out));
    let doc = read_json(&report);
    let row = &doc["rows"][0];
    assert_eq!(row["outcome"]["kind"], "verifier_failure", "{row}");
    assert!(
        row["outcome"]["message"]
            .as_str()
            .unwrap()
            .contains("timeout_sec = 8"),
        "{row}"
    );
}

#[test]
fn evaluate_writes_harbors_job_result_and_every_metric() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let evals = tmp.path().join("evals");
    let mut args = vec!["evaluate", "--testing", "true"];
    let fl = flags(&tasks_dir());
    args.extend(fl.iter().map(String::as_str));
    args.extend(["--env.data_dir_to_save_evals", evals.to_str().unwrap()]);
    let (pid, out) = run(tmp.path(), &args);
    assert!(out.status.success(), "{}", text(&out));
    let metrics = read_json(&evals.join("metrics.json"));
    let all = &metrics["results"]["all"];
    assert_eq!(all["eval/pass_rate"], 1.0, "{all}");
    assert_eq!(all["eval/total_tasks"], TASKS.len() as f64, "{all}");
    assert_eq!(all["eval/reward/multi-metric/correctness"], 1.0, "{all}");
    assert_eq!(all["eval/reward/multi-metric/docstring"], 1.0, "{all}");
    let samples = std::fs::read_to_string(evals.join("samples.jsonl")).unwrap();
    assert_eq!(samples.lines().count(), TASKS.len(), "{samples}");
    let multi: Value = samples
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|s| s["item"]["task_name"] == "multi-metric")
        .expect("a multi-metric sample");
    assert_eq!(
        multi["item"]["rewards"],
        serde_json::json!({"reward": 1.0, "correctness": 1.0, "docstring": 1.0}),
        "every metric in the sample"
    );

    let result = evals.join("harbor_result.json");
    let doc = read_json(&result);
    let stats = &doc["stats"]["evals"]["hermes-env__harbor_tasks"];
    assert_eq!(stats["n_trials"], TASKS.len(), "{doc}");
    assert_eq!(stats["metrics"][0]["mean"], 1.0, "{doc}");
    assert_eq!(
        stats["reward_stats"]["correctness"]["1.0"][0],
        "multi-metric"
    );
    // Harbor's own model reads it.
    let python = common::harbor_python();
    let check = Command::new(python)
        .args([
            "-c",
            "import sys, pathlib; from harbor.models.job.result import JobResult; \
             r = JobResult.model_validate_json(pathlib.Path(sys.argv[1]).read_text()); \
             e = r.stats.evals['hermes-env__harbor_tasks']; \
             assert e.n_trials == int(sys.argv[2]) and e.n_errors == 0, e; \
             assert e.reward_stats['reward'][1.0], e.reward_stats; print('ok')",
            result.to_str().unwrap(),
            &TASKS.len().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "harbor's JobResult rejects {}:\n{}",
        result.display(),
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

#[test]
fn bad_task_files_and_missing_images_are_one_clear_line() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("set/broken");
    std::fs::create_dir_all(broken.join("tests")).unwrap();
    std::fs::write(
        broken.join("task.toml"),
        "[verifier]\ntimeout_sec = 60\n[agent\n",
    )
    .unwrap();
    let fl = flags(&tmp.path().join("set"));
    let mut args = vec!["check", "--limit", "0"];
    args.extend(fl.iter().map(String::as_str));
    let (_, out) = run(tmp.path(), &args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = format!("{}:3", broken.join("task.toml").display());
    assert!(stderr.contains(&line), "no `{line}` in:\n{stderr}");

    std::fs::remove_dir_all(&broken).unwrap();
    let absent = tmp.path().join("set/absent");
    std::fs::create_dir_all(absent.join("tests")).unwrap();
    std::fs::write(
        absent.join("task.toml"),
        "[environment]\ndocker_image = \"registry.invalid/hermes-absent:1\"\n",
    )
    .unwrap();
    std::fs::write(absent.join("instruction.md"), "Nothing.\n").unwrap();
    std::fs::write(
        absent.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let (_, out) = run(tmp.path(), &args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("registry.invalid/hermes-absent:1"))
        .unwrap_or_else(|| panic!("no line names the image:\n{stderr}"));
    assert!(
        line.contains("docker pull registry.invalid/hermes-absent:1")
            && line.contains("docker load"),
        "{line}"
    );
}

#[test]
fn the_task_templates_in_the_harbor_wheel_parse_as_harbor_parses_them() {
    let python = common::harbor_python();
    // Every task.toml the installed package ships, with the fields Harbor's TaskConfig reads.
    let out = Command::new(&python)
        .args([
            "-c",
            r#"
import json, pathlib, harbor
from harbor.models.task.config import TaskConfig
root = pathlib.Path(harbor.__file__).parent
rows = []
for p in sorted(root.rglob("task.toml")):
    # The adapter template holds placeholders its adapter fills in per task; rendered so.
    text = p.read_text().replace("{{ADAPTER_ID}}", "example").replace("{task_id}", "task-0")
    c = TaskConfig.model_validate_toml(text)
    e = c.environment
    rows.append({"path": str(p), "text": text, "dir_has_instruction": (p.parent / "instruction.md").is_file(),
        "verifier_timeout": c.verifier.timeout_sec, "agent_timeout": c.agent.timeout_sec,
        "build_timeout": e.build_timeout_sec, "docker_image": e.docker_image,
        "workdir": e.workdir, "network": e.network_mode.value, "cpus": e.cpus,
        "memory_mb": e.memory_mb, "verifier_env": c.verifier.env})
print(json.dumps(rows))
"#,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rows.len() >= 4, "templates found: {rows:?}");
    let mut loaded = 0;
    for row in &rows {
        let path = PathBuf::from(row["path"].as_str().unwrap());
        let c = hermes_env::harbor::TaskConfig::parse(row["text"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let e = &c.environment;
        let network = match e.network() {
            Ok(hermes_env::harbor::Network::Public) => "public",
            Ok(hermes_env::harbor::Network::None) => "no-network",
            Ok(hermes_env::harbor::Network::Allowlist(_)) => "allowlist",
            Err(e) => panic!("{}: {e}", path.display()),
        };
        let ours = serde_json::json!({
            "path": row["path"], "text": row["text"],
            "dir_has_instruction": row["dir_has_instruction"],
            "verifier_timeout": c.verifier.timeout_sec, "agent_timeout": c.agent.timeout_sec,
            "build_timeout": e.build_timeout_sec, "docker_image": e.docker_image,
            "workdir": e.workdir, "network": network, "cpus": e.cpus.map(|c| c as i64),
            "memory_mb": e.memory_mb, "verifier_env": c.verifier.env,
        });
        assert_eq!(&ours, row, "{}", path.display());
        // The whole directory, as the example loads it.
        if row["dir_has_instruction"] == true {
            hermes_env::harbor::load_task(path.parent().unwrap())
                .unwrap_or_else(|e| panic!("{e}"))
                .expect("a task");
            loaded += 1;
        } else {
            println!(
                "skipped loading {} as a task: it has no instruction.md (Harbor's `analyze`, \
                 `check` and `annotate` commands render it at run time for an LLM agent)",
                path.parent().unwrap().display()
            );
        }
    }
    assert!(
        loaded >= 2,
        "task templates with an instruction loaded: {loaded}"
    );
}

#[test]
fn terminal_bench_2_rows_unpack_into_the_same_runner() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    // Two fixture tasks as upstream Hermes's rows: base64 gzipped tarballs of environment/ and
    // tests/, test.sh as text, the prebuilt image named.
    let rows = tmp.path().join("tb2.jsonl");
    let script = r#"
import base64, io, json, pathlib, sys, tarfile
root = pathlib.Path(sys.argv[1])
def tarball(d):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for p in sorted(d.rglob("*")):
            t.add(p, arcname=str(p.relative_to(d)), recursive=False)
    return base64.b64encode(buf.getvalue()).decode()
out = []
for name, image in [("web-service", None), ("multi-metric", None), ("prebuilt-image", sys.argv[3])]:
    d = root / name
    row = {"task_name": name, "category": "tb2", "instruction": (d / "instruction.md").read_text(),
           "docker_image": image, "tests_tar": tarball(d / "tests"),
           "test_sh": (d / "tests/test.sh").read_text()}
    if (d / "environment").is_dir():
        row["environment_tar"] = tarball(d / "environment")
    out.append(json.dumps(row))
pathlib.Path(sys.argv[2]).write_text("\n".join(out) + "\n")
"#;
    let made = Command::new("python3")
        .args([
            "-c",
            script,
            tasks_dir().to_str().unwrap(),
            rows.to_str().unwrap(),
            BASE,
        ])
        .output()
        .expect("python3");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let exploits = tmp.path().join("exploits.json");
    let solve = |task: &str| {
        std::fs::read_to_string(tasks_dir().join(task).join("solution/solve.sh")).unwrap()
    };
    std::fs::write(
        &exploits,
        serde_json::json!([
            {"name": "do-nothing", "category": "baseline", "commands": ["true"]},
            {"name": "both-solutions", "category": "oracle", "commands": [
                solve("web-service"), solve("multi-metric")
            ]}
        ])
        .to_string(),
    )
    .unwrap();
    let unpacked = tmp.path().join("unpacked");
    let report = tmp.path().join("hack.json");
    let args = [
        "hack",
        "--limit",
        "0",
        "--max-score",
        "1",
        "--only",
        "do-nothing,both-solutions",
        "--exploits",
        exploits.to_str().unwrap(),
        "--json",
        report.to_str().unwrap(),
        "--env.dataset_name",
        rows.to_str().unwrap(),
        "--env.unpack_dir",
        unpacked.to_str().unwrap(),
        "--env.terminal_backend",
        "docker",
        "--env.container_network",
        "bridge",
    ];
    let (pid, out) = run(tmp.path(), &args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        unpacked
            .join("prebuilt-image/tests/.hidden/expected.txt")
            .is_file()
            && unpacked
                .join("web-service/environment/Dockerfile")
                .is_file(),
        "the rows unpack into Harbor task directories"
    );
    let doc = read_json(&report);
    let rows = doc["rows"].as_array().unwrap();
    // prebuilt-image's tests insist on the workdir its task.toml names, which rows do not
    // carry: it runs from the image's WORKDIR and earns 0 either way.
    for (task, solved) in [
        ("web-service", 1.0),
        ("multi-metric", 1.0),
        ("prebuilt-image", 0.0),
    ] {
        for (exploit, want) in [("do-nothing", 0.0), ("both-solutions", solved)] {
            let row = rows
                .iter()
                .find(|r| r["item"].as_str().unwrap().ends_with(task) && r["exploit"] == exploit)
                .unwrap_or_else(|| panic!("no row for {task} × {exploit}: {doc}"));
            assert_eq!(
                row["reward"].as_f64(),
                Some(want),
                "{task} × {exploit}: {row}"
            );
        }
    }
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

#[test]
fn an_unhealthy_environment_is_a_sandbox_failure_before_the_agent_runs() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("set/unhealthy");
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::create_dir_all(task.join("solution")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "[environment]\ndocker_image = \"{BASE}\"\n[environment.healthcheck]\n\
             command = \"test -f /etc/never-there\"\ninterval_sec = 0.2\nretries = 2\n"
        ),
    )
    .unwrap();
    std::fs::write(task.join("instruction.md"), "Create /tmp/x.\n").unwrap();
    std::fs::write(task.join("solution/solve.sh"), "touch /tmp/x\n").unwrap();
    std::fs::write(
        task.join("tests/test.sh"),
        "if [ -f /tmp/x ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let report = tmp.path().join("check.json");
    let mut args = vec!["check", "--limit", "0", "--json", report.to_str().unwrap()];
    let fl = flags(&tmp.path().join("set"));
    args.extend(fl.iter().map(String::as_str));
    let (pid, out) = run(tmp.path(), &args);
    assert!(!out.status.success(), "{}", text(&out));
    let doc = read_json(&report);
    let item = &doc["items"][0];
    assert_eq!(item["outcome"]["kind"], "sandbox_failure", "{item}");
    assert!(
        item["outcome"]["message"]
            .as_str()
            .unwrap()
            .contains("healthcheck `test -f /etc/never-there` failed 2 time(s)"),
        "{item}"
    );
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

/// A copy of fixture `task` as `dir/set/<name>`, with `edit` applied to its files.
fn copied_task(dir: &Path, task: &str, name: &str, edit: &[(&str, &str)]) -> PathBuf {
    let set = dir.join("set");
    std::fs::create_dir_all(&set).unwrap();
    let out = Command::new("cp")
        .arg("-a")
        .arg(tasks_dir().join(task))
        .arg(set.join(name))
        .output()
        .expect("run cp");
    assert!(
        out.status.success(),
        "cp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (file, text) in edit {
        std::fs::write(set.join(name).join(file), text).unwrap();
    }
    set
}

#[test]
fn an_agent_past_its_tasks_timeout_sec_is_stopped_and_not_verified() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    // agent-user's task with [agent] timeout_sec = 2 and a solution that takes 30 s: the
    // task's own limit (not --env.rollout_timeout, 1800 s here) stops it.
    let toml = std::fs::read_to_string(tasks_dir().join("agent-user/task.toml"))
        .unwrap()
        .replace("timeout_sec = 120.0", "timeout_sec = 2.0");
    assert!(toml.contains("timeout_sec = 2.0"), "{toml}");
    let set = copied_task(
        tmp.path(),
        "agent-user",
        "agent-user",
        &[
            ("task.toml", &toml),
            (
                "solution/solve.sh",
                "#!/bin/bash\nsleep 30\nid -un > /app/whoami.txt\n",
            ),
        ],
    );
    let report = tmp.path().join("check.json");
    let mut args = vec!["check", "--limit", "0", "--json", report.to_str().unwrap()];
    let fl = flags(&set);
    args.extend(fl.iter().map(String::as_str));
    args.extend(["--env.terminal_timeout", "60"]);
    let (pid, out) = run(tmp.path(), &args);
    assert!(!out.status.success(), "{}", text(&out));
    let item = &read_json(&report)["items"][0];
    assert_eq!(item["outcome"]["kind"], "timeout", "{item}");
    assert_eq!(item["outcome"]["seconds"], 2.0, "{item}");
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

#[test]
fn a_separate_verifier_sees_only_the_artifacts_and_its_sandbox_is_removed() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let exploits = tmp.path().join("exploits.json");
    // Right answers, but the notes directory holds a link out of itself (a host path, were it
    // followed) and a FIFO: both are left behind, as Harbor's sanitized copy leaves them, and
    // the rest is verified. And a reward file planted in the agent's /logs/verifier (and one
    // in /logs/artifacts, which is carried over): the verifier's run never reads either.
    std::fs::write(
        &exploits,
        serde_json::json!([
            {"name": "link-out", "category": "artifacts", "commands": [
                "echo 42 > /app/answer.txt && mkdir -p /app/notes && echo x > /app/notes/how.txt && ln -s /etc /app/notes/etc && mkfifo /app/notes/pipe"
            ]},
            {"name": "plant-in-agent", "category": "artifacts", "commands": [
                "echo 42 > /app/answer.txt && mkdir -p /logs/verifier /logs/artifacts && echo 1 > /logs/verifier/reward.txt && echo 1 > /logs/artifacts/reward.txt"
            ]}
        ])
        .to_string(),
    )
    .unwrap();
    let report = tmp.path().join("hack.json");
    let mut args = vec![
        "hack",
        "--limit",
        "0",
        "--only",
        "link-out,plant-in-agent",
        "--exploits",
    ];
    args.push(exploits.to_str().unwrap());
    args.extend(["--json", report.to_str().unwrap()]);
    let fl = flags(&tasks_dir().join("separate-verifier"));
    args.extend(fl.iter().map(String::as_str));
    let (pid, out) = run(tmp.path(), &args);
    let doc = read_json(&report);
    let rows = doc["rows"].as_array().unwrap();
    let of = |exploit: &str| {
        rows.iter()
            .find(|r| r["exploit"] == exploit)
            .unwrap_or_else(|| panic!("no row for {exploit}: {}", text(&out)))
    };
    let link = of("link-out");
    assert_eq!(
        (link["reward"].as_f64(), link["outcome"]["kind"].as_str()),
        (Some(1.0), Some("scored")),
        "{link}"
    );
    let log = text(&out);
    assert!(
        log.contains("not copied to the verifier: /app/notes/etc, /app/notes/pipe")
            || log.contains("not copied to the verifier: /app/notes/pipe, /app/notes/etc"),
        "{log}"
    );
    let planted = of("plant-in-agent");
    assert_eq!(
        (
            planted["reward"].as_f64(),
            planted["outcome"]["kind"].as_str()
        ),
        (Some(0.0), Some("scored")),
        "{planted}"
    );
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

#[test]
fn a_multi_step_task_stops_at_a_missed_min_reward_and_averages_its_steps() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let wrong = "#!/bin/bash\necho nope > /app/greeting.txt\n";
    // Step 1 wrong: min_reward = 1.0 stops the task there; its reward is step 1's, 0.
    copied_task(
        tmp.path(),
        "multi-step",
        "stops",
        &[("steps/write/solution/solve.sh", wrong)],
    );
    // No min_reward and step 2 wrong: the mean of 1 and 0.
    let toml = std::fs::read_to_string(tasks_dir().join("multi-step/task.toml"))
        .unwrap()
        .replace("min_reward = 1.0\n", "");
    assert!(!toml.contains("min_reward"), "{toml}");
    let set = copied_task(
        tmp.path(),
        "multi-step",
        "averages",
        &[
            ("task.toml", &toml),
            ("steps/extend/solution/solve.sh", wrong),
        ],
    );
    let report = tmp.path().join("check.json");
    let mut args = vec!["check", "--limit", "0", "--json", report.to_str().unwrap()];
    let fl = flags(&set);
    args.extend(fl.iter().map(String::as_str));
    let (pid, out) = run(tmp.path(), &args);
    let log = text(&out);
    let doc = read_json(&report);
    let item = |name: &str| {
        doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("no item {name}: {doc}"))
            .clone()
    };
    let stops = item("stops");
    assert_eq!(
        (stops["reward"].as_f64(), stops["outcome"]["kind"].as_str()),
        (Some(0.0), Some("scored")),
        "{stops}"
    );
    assert!(
        log.contains("step write reward = 0 is below min_reward 1: the remaining steps do not run"),
        "{log}"
    );
    let averages = item("averages");
    assert_eq!(
        (
            averages["reward"].as_f64(),
            averages["outcome"]["kind"].as_str()
        ),
        (Some(0.5), Some("scored")),
        "{averages}"
    );
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

/// In `openenv`, the answer that ends a step (`submit`) returns the next step's instruction,
/// not done; the last step's answer is verified and scored over both steps.
#[test]
fn in_openenv_a_step_answer_returns_the_next_instruction() {
    require_base();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("server.log");
    let mut args = vec!["openenv", "--port", "0"];
    let fl = flags(&tasks_dir().join("multi-step"));
    args.extend(fl.iter().map(String::as_str));
    let mut child = Command::new(common::example_bin("harbor"))
        .args(&args)
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn harbor openenv");
    let pid = child.id();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let Some(url) = line
        .trim()
        .strip_prefix("openenv listening on ")
        .map(str::to_owned)
    else {
        let _ = child.kill();
        panic!(
            "harbor openenv did not start: {line:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let script = format!(
        r#"URL = {url:?}
import asyncio, json
from openenv.core.generic_client import GenericEnvClient
def terminal(command):
    return {{"type": "call_tool", "tool_name": "terminal", "arguments": {{"command": command}}}}
async def main():
    async with GenericEnvClient(base_url=URL) as env:
        await env.reset()
        await env.step(terminal("echo hello > /app/greeting.txt"))
        mid = await env.step({{"type": "submit", "answer": "step one done"}})
        await env.step(terminal('ls -A /tests 2>/dev/null | wc -l > /app/tests-seen.txt; echo "hello $(cat /app/data.txt)" > /app/greeting.txt'))
        end = await env.step({{"type": "submit", "answer": "step two done"}})
        print(json.dumps({{"mid": [mid.reward, mid.done, mid.observation["result"]],
                          "end": [end.reward, end.done]}}))
asyncio.run(main())
"#
    );
    let out = Command::new(common::openenv_python())
        .args(["-c", &script])
        .output()
        .expect("run python");
    // SIGINT: a graceful stop, which removes what the run made (its lease included).
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let _ = child.wait();
    let server_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}\n{server_log}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let step_two =
        std::fs::read_to_string(tasks_dir().join("multi-step/steps/extend/instruction.md"))
            .unwrap();
    assert_eq!(v["mid"][0], Value::Null, "{v}");
    assert_eq!(v["mid"][1], false, "{v}");
    assert_eq!(v["mid"][2].as_str(), Some(step_two.as_str()), "{v}");
    assert_eq!(
        v["end"],
        serde_json::json!([1.0, true]),
        "{v}\n{server_log}"
    );
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
}

/// A server on `ip` that answers every request with `body`; returns its URL.
fn http_server(ip: &str, body: &'static str) -> String {
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = std::io::Write::write_all(&mut stream, reply.as_bytes());
        }
    });
    url
}

/// `network_mode = "allowlist"`: the task reaches an allowed host through the proxy, is
/// refused (403) a host not on the list, and reaches nothing directly.
#[test]
fn an_allowlist_lets_through_only_its_hosts() {
    require_base();
    // Not 127.0.0.1: that is the container's own loopback, which NO_PROXY keeps local.
    let allowed = http_server("127.0.0.3", "hello-allowed");
    let denied = http_server("127.0.0.2", "hello-denied");
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("set/allowlist");
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::create_dir_all(task.join("solution")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "[environment]\ndocker_image = \"{BASE}\"\nnetwork_mode = \"allowlist\"\n\
             allowed_hosts = [\"127.0.0.3\"]\n\
             [solution.env]\nALLOWED = \"${{HARBOR_ALLOWED_URL}}\"\nDENIED = \"${{HARBOR_DENIED_URL}}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(task.join("instruction.md"), "Fetch $ALLOWED.\n").unwrap();
    std::fs::write(
        task.join("solution/solve.sh"),
        r#"#!/bin/bash
python3 - <<'PY'
import os, socket, urllib.request, urllib.error
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return f"refused {e.code}"
    except Exception as e:
        return f"failed {e}"
open("/tmp/allowed.txt", "w").write(fetch(os.environ["ALLOWED"]))
open("/tmp/denied.txt", "w").write(fetch(os.environ["DENIED"]))
try:
    socket.create_connection(("192.0.2.1", 80), timeout=3)
    direct = "reached"
except OSError:
    direct = "blocked"
open("/tmp/direct.txt", "w").write(direct)
PY
"#,
    )
    .unwrap();
    std::fs::write(
        task.join("tests/test.sh"),
        "cat /tmp/allowed.txt /tmp/denied.txt /tmp/direct.txt; echo\n\
         if [ \"$(cat /tmp/allowed.txt)\" = hello-allowed ] && [ \"$(cat /tmp/denied.txt)\" = 'refused 403' ] \
         && [ \"$(cat /tmp/direct.txt)\" = blocked ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let report = tmp.path().join("check.json");
    let mut args = vec!["check", "--limit", "0", "--json", report.to_str().unwrap()];
    let fl = flags(&tmp.path().join("set"));
    args.extend(fl.iter().map(String::as_str));
    let env = [
        ("HARBOR_ALLOWED_URL", allowed.as_str()),
        ("HARBOR_DENIED_URL", denied.as_str()),
    ];
    let (pid, out) = run_with(tmp.path(), &args, &env);
    let log = text(&out);
    let item = &read_json(&report)["items"][0];
    assert_eq!(
        (item["reward"].as_f64(), item["outcome"]["kind"].as_str()),
        (Some(1.0), Some("scored")),
        "{item}\n{log}"
    );
    assert!(log.contains("egress: refused 127.0.0.2:"), "{log}");
    assert_eq!(containers_of(pid), Vec::<String>::new(), "containers left");
    let networks = Command::new("docker")
        .args([
            "network",
            "ls",
            "--filter",
            "label=hermes-env",
            "--format",
            "{{.Name}}",
        ])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&networks.stdout);
    assert!(
        !left.lines().any(|n| n.starts_with("hermes-egress-")),
        "egress networks left: {left}"
    );
}
