//! Group sandboxes forked from one prepared copy (`SandboxSpec::prepare`): the item's
//! preparation runs once per group, each rollout starts from a copy of it, and the copies
//! cannot see or change each other or the prepared one — on local sandboxes (a real `process`
//! run; a confined copy against its siblings' and the prepared directory) and on the real
//! Docker daemon (a snapshot image, removed with the group). What the preparation laid does
//! not fire the tripwires; what the agent plants afterwards still does.

mod common;

use std::sync::Arc;
use std::time::Duration;

use hermes_env::prelude::*;
use hermes_runtime::sandbox::tripwire::{self, Armed};
use hermes_runtime::sandbox::{
    DockerProvider, ExecRequest, GroupFork, LocalProvider, Sandbox, SandboxProvider, SandboxSpec,
    SetupCommand, TaskSandbox,
};
use hermes_runtime::testing::{Reply, ScriptedServer};
use serde_json::{json, Value};

/// The preparation the tests use: files in the home (a pytest hook among them, which the
/// agent may not plant but the preparation may), a counter of its runs on the host when
/// `counter` is given, and a process left running (a copy carries files, not processes).
fn preparation(counter: Option<&std::path::Path>) -> SetupCommand {
    let count = counter
        .map(|c| format!("echo ran >> '{}'; ", c.display()))
        .unwrap_or_default();
    SetupCommand {
        name: "preparation".into(),
        command: format!(
            "set -e; {count}mkdir -p pkg; echo prepared > prepared.txt; \
             echo 'import os' > pkg/conftest.py; sleep 300 & echo $! > sleep.pid"
        ),
        timeout: Duration::from_secs(60),
    }
}

/// Where the `process` run's preparations count themselves (one file per test process).
fn run_counter() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("hermes-fork-count-{}", std::process::id()))
}

#[derive(Debug, Clone, Serialize)]
pub struct Task {
    counter: String,
}

#[hermes_env(name = "forked", toolsets = ["terminal"], max_agent_turns = 2, main = false)]
pub struct Forked {}

#[hermes_env::hooks]
impl Forked {
    async fn get_next_item(&mut self) -> Option<Task> {
        Some(Task {
            counter: run_counter().display().to_string(),
        })
    }

    fn format_prompt(&self, _item: &Task) -> String {
        "Leave your mark.".to_owned()
    }

    fn sandbox_spec(&self, item: &Task) -> SandboxSpec {
        SandboxSpec::default().with_prepare(preparation(Some(std::path::Path::new(&item.counter))))
    }

    async fn compute_reward(
        &self,
        _item: &Task,
        _run: &AgentResult,
        ctx: &ToolContext,
    ) -> Result<f64> {
        // 1.0 only when the prepared file is there, this rollout's mark is the only one, the
        // preparation's process did not come along, and the copy was made while the model's
        // first turn ran.
        let out = ctx
            .terminal("cat prepared.txt; ls mark-* | wc -l; cat seen.txt early.txt")
            .await?;
        Ok(
            if out.output.split_whitespace().collect::<Vec<_>>() == ["prepared", "1", "0", "1"] {
                1.0
            } else {
                0.0
            },
        )
    }
}

/// Leaves a mark named by the shell's pid, records whether the preparation's `sleep` runs (a
/// killed one may linger as a zombie until its reaper collects it: that is not running), and
/// whether the copy was made well before this first tool call: the server takes
/// [`FIRST_TURN`] to answer, and a copy made at the call itself would be milliseconds old.
fn model(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    if messages.iter().any(|m| m["role"] == "tool") {
        return Reply::text("done");
    }
    Reply::Message {
        content: String::new(),
        tool_calls: vec![(
            "terminal".into(),
            json!({"command": "touch mark-$$; s=$(ps -o stat= -p $(cat sleep.pid)); case \"$s\" in ''|Z*) echo 0;; *) echo 1;; esac > seen.txt; \
                awk -v made=$(find prepared.txt -printf %C@) -v now=$(date +%s.%N) 'BEGIN { print (now - made > 1.0) ? 1 : 0 }' > early.txt"})
                .to_string(),
        )],
        reasoning: None,
    }
}

/// How long the scripted model takes to answer.
const FIRST_TURN: Duration = Duration::from_secs(2);

#[tokio::test]
async fn a_group_prepares_once_and_each_rollout_starts_from_its_own_copy() {
    let server = ScriptedServer::start(model).await.unwrap();
    server.set_delay(FIRST_TURN);
    let tmp = tempfile::tempdir().unwrap();
    let counter = run_counter();
    let _ = std::fs::remove_file(&counter);
    let jsonl = tmp.path().join("groups.jsonl");
    let logs = common::logs::Logs::default();
    let _guard = logs.capture();
    common::run_process::<Forked>(
        "forked",
        &server.base_url(),
        &jsonl,
        &[
            "--env.total_steps",
            "2",
            "--env.group_size",
            "4",
            "--env.max_rollout_retries",
            "0",
            "--env.terminal_backend",
            "local",
            // The preparation counts its runs in a host file, which a confined sandbox cannot
            // write.
            "--env.local_confinement",
            "false",
        ],
    )
    .await;

    let groups: Vec<Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(groups.len(), 2);
    for group in &groups {
        assert_eq!(
            group["scores"],
            json!([1.0, 1.0, 1.0, 1.0]),
            "every rollout saw the prepared files, only its own mark and no prepared process, \
             its copy made during the model's first turn; the prepared pytest hook fired no \
             tripwire"
        );
    }
    let runs = std::fs::read_to_string(&counter).unwrap().lines().count();
    let _ = std::fs::remove_file(&counter);
    assert_eq!(runs, 2, "one preparation per group, not per rollout");
    assert_eq!(
        logs.lines_with("its rollouts start from copies of that sandbox")
            .len(),
        2
    );
}

/// The scratch directories of a local provider's root whose name starts with `prefix`.
fn dirs_of(provider: &LocalProvider, prefix: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(provider.root())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

/// Rollout `id`'s sandbox handle, copied from `group`'s prepared one.
fn member(
    provider: &Arc<dyn SandboxProvider>,
    group: &Arc<GroupFork>,
    id: String,
    spec: &SandboxSpec,
) -> TaskSandbox {
    TaskSandbox::new(id, Arc::clone(provider))
        .with_spec(spec.clone())
        .in_group(Some(Arc::clone(group)))
}

/// Makes, checks (the prepared file is there) and closes one sandbox per spec in `group`,
/// then closes the group; returns how often the preparation ran (its `counter` lines).
async fn prepared_runs(
    provider: &Arc<dyn SandboxProvider>,
    group: &Arc<GroupFork>,
    specs: &[&SandboxSpec],
    counter: &std::path::Path,
) -> usize {
    for (i, spec) in specs.iter().enumerate() {
        let sandbox = member(provider, group, format!("rollout-{i}"), spec);
        let created = sandbox.get().await.unwrap();
        assert_eq!(
            run(created.as_ref(), "cat prepared.txt").await,
            (0, "prepared".into())
        );
        sandbox.close().await.unwrap();
    }
    group.close().await;
    std::fs::read_to_string(counter).unwrap().lines().count()
}

async fn run(sandbox: &dyn Sandbox, command: &str) -> (i32, String) {
    let out = sandbox
        .exec(ExecRequest::new(command, Duration::from_secs(30)))
        .await
        .unwrap();
    (out.exit_code, out.output.trim().to_owned())
}

#[tokio::test]
async fn a_confined_copy_cannot_reach_its_siblings_or_the_prepared_directory() {
    let provider = Arc::new(LocalProvider::new().unwrap().confined(true));
    let provider_dyn: Arc<dyn SandboxProvider> = provider.clone();
    let group = GroupFork::new(Arc::clone(&provider_dyn), 1);
    let spec = SandboxSpec::default().with_prepare(preparation(None));
    let sandboxes: Vec<TaskSandbox> = (0..3)
        .map(|i| member(&provider_dyn, &group, format!("copy-{i}"), &spec))
        .collect();
    for s in &sandboxes {
        s.get().await.unwrap();
    }
    let prepared = dirs_of(&provider, "task-prepared-");
    assert_eq!(prepared.len(), 1, "one prepared directory: {prepared:?}");
    let sibling = dirs_of(&provider, "task-copy-1").remove(0);
    let first = sandboxes[0].get().await.unwrap();
    assert_eq!(
        run(first.as_ref(), "cat prepared.txt").await,
        (0, "prepared".into())
    );
    // Changes stay in the copy.
    run(
        first.as_ref(),
        "echo changed > prepared.txt; rm pkg/conftest.py",
    )
    .await;
    let second = sandboxes[1].get().await.unwrap();
    assert_eq!(
        run(second.as_ref(), "cat prepared.txt").await,
        (0, "prepared".into())
    );
    assert_eq!(run(second.as_ref(), "test -f pkg/conftest.py").await.0, 0);
    assert_eq!(
        std::fs::read_to_string(prepared[0].join("prepared.txt")).unwrap(),
        "prepared\n"
    );
    // Neither the prepared directory nor a sibling's can be written from a copy.
    for target in [&prepared[0], &sibling] {
        let (code, _) = run(
            first.as_ref(),
            &format!("echo planted > '{}/planted'", target.display()),
        )
        .await;
        assert_ne!(code, 0, "a copy wrote into {}", target.display());
        assert!(!target.join("planted").exists());
    }
    for s in &sandboxes {
        s.close().await.unwrap();
    }
    group.close().await;
    assert!(
        dirs_of(&provider, "task-").is_empty(),
        "the prepared directory goes with the group"
    );
}

#[tokio::test]
async fn the_preparation_fires_no_wire_and_what_the_agent_plants_after_it_does() {
    let provider: Arc<dyn SandboxProvider> = Arc::new(LocalProvider::new().unwrap());
    let group = GroupFork::new(Arc::clone(&provider), 1);
    let spec = SandboxSpec::default().with_prepare(preparation(None));
    for plant in [false, true] {
        // Armed before the sandbox exists, as a rollout arms it before its first tool call.
        let armed = Armed::now();
        let sandbox = member(&provider, &group, format!("wired-{plant}"), &spec);
        let created = sandbox.get().await.unwrap();
        if plant {
            run(
                created.as_ref(),
                "mkdir -p other && echo 'import os' > other/conftest.py",
            )
            .await;
        }
        let wires = tripwire::inspect(
            created.as_ref(),
            sandbox.spec(),
            &armed.after(sandbox.laid_at()),
            &[],
        )
        .await
        .unwrap();
        match plant {
            false => assert!(wires.is_empty(), "the preparation fired {wires:?}"),
            true => {
                assert_eq!(wires.len(), 1, "{wires:?}");
                assert!(wires[0].contains("other/conftest.py"), "{wires:?}");
                assert!(!wires[0].contains("pkg/conftest.py"), "{wires:?}");
            }
        }
        sandbox.close().await.unwrap();
    }
    group.close().await;
}

#[tokio::test]
async fn a_failing_preparation_fails_the_group_after_its_attempts_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let counter = tmp.path().join("count");
    let provider: Arc<dyn SandboxProvider> =
        Arc::new(LocalProvider::new().unwrap().confined(false));
    let group = GroupFork::new(Arc::clone(&provider), 2);
    let spec = SandboxSpec::default().with_prepare(SetupCommand {
        name: "preparation".into(),
        command: format!(
            "echo ran >> '{}'; echo no network >&2; exit 3",
            counter.display()
        ),
        timeout: Duration::from_secs(10),
    });
    let mut errors = Vec::new();
    for i in 0..4 {
        let sandbox = member(&provider, &group, format!("fails-{i}"), &spec);
        errors.push(sandbox.get().await.err().expect("no sandbox").to_string());
        assert!(sandbox.infra_failure().is_some(), "a sandbox failure");
    }
    for e in &errors {
        assert!(
            e.contains("the group's preparation failed")
                && e.contains("preparation failed (exit code 3)")
                && e.contains("no network"),
            "{e}"
        );
    }
    let runs = std::fs::read_to_string(&counter).unwrap().lines().count();
    assert_eq!(
        runs, 2,
        "tried as often as a rollout is, then the group fails"
    );
    group.close().await;
}

#[tokio::test]
async fn docker_copies_come_from_a_snapshot_removed_with_the_group() {
    common::docker::require_docker();
    let provider = Arc::new(
        DockerProvider::connect(common::docker::settings())
            .await
            .unwrap(),
    );
    let run_id = provider.run_id().to_owned();
    let provider_dyn: Arc<dyn SandboxProvider> = provider.clone();
    let group = GroupFork::new(Arc::clone(&provider_dyn), 1);
    let spec = SandboxSpec::default().with_prepare(SetupCommand {
        name: "preparation".into(),
        command: "set -e; echo prepared > /opt/prepared; mkdir -p ~/pkg; \
                  echo 'import os' > ~/pkg/conftest.py; (sleep 300 &); true"
            .into(),
        timeout: Duration::from_secs(60),
    });
    let armed = Armed::now();
    let sandboxes: Vec<TaskSandbox> = (0..3)
        .map(|i| member(&provider_dyn, &group, format!("docker-copy-{i}"), &spec))
        .collect();
    for s in &sandboxes {
        s.get().await.unwrap();
    }
    let snapshots = docker_cli(&["images", "-q", "--filter", "label=hermes-env.role=snapshot"]);
    let ours = docker_cli(&[
        "images",
        "-q",
        "--filter",
        &format!("label=hermes-env.run-id={run_id}"),
    ]);
    assert_eq!(
        ours.lines().count(),
        1,
        "one snapshot image for the group: {snapshots}"
    );
    let first = sandboxes[0].get().await.unwrap();
    let second = sandboxes[1].get().await.unwrap();
    assert_eq!(
        run(first.as_ref(), "cat /opt/prepared").await,
        (0, "prepared".into())
    );
    assert_eq!(
        run(first.as_ref(), "pgrep -f 'sleep 300' | wc -l").await,
        (0, "0".into()),
        "the preparation's process is not in the copy"
    );
    run(
        first.as_ref(),
        "echo changed > /opt/prepared; touch /opt/mine",
    )
    .await;
    assert_eq!(
        run(second.as_ref(), "cat /opt/prepared").await,
        (0, "prepared".into())
    );
    assert_ne!(run(second.as_ref(), "test -e /opt/mine").await.0, 0);
    // The prepared hook fires nothing; one the agent plants does.
    let wires = tripwire::inspect(
        second.as_ref(),
        sandboxes[1].spec(),
        &armed.after(sandboxes[1].laid_at()),
        &[],
    )
    .await
    .unwrap();
    assert!(wires.is_empty(), "{wires:?}");
    run(
        second.as_ref(),
        "mkdir -p ~/other && echo 'import os' > ~/other/conftest.py",
    )
    .await;
    let wires = tripwire::inspect(
        second.as_ref(),
        sandboxes[1].spec(),
        &armed.after(sandboxes[1].laid_at()),
        &[],
    )
    .await
    .unwrap();
    assert!(
        wires.len() == 1 && wires[0].contains("other/conftest.py"),
        "{wires:?}"
    );
    // The reaper takes a dead run's snapshot and leaves this live run's one.
    let dead = dead_runs_snapshot();
    hermes_runtime::sandbox::docker::reaper::reap(provider.docker(), false)
        .await
        .unwrap();
    assert_eq!(
        docker_cli(&["images", "-q", &dead]),
        "",
        "a dead run's snapshot is reaped"
    );
    assert_eq!(
        docker_cli(&[
            "images",
            "-q",
            "--filter",
            &format!("label=hermes-env.run-id={run_id}"),
        ])
        .lines()
        .count(),
        1,
        "a live run's snapshot is not"
    );
    for s in &sandboxes {
        s.close().await.unwrap();
    }
    group.close().await;
    assert_eq!(
        docker_cli(&[
            "images",
            "-q",
            "--filter",
            &format!("label=hermes-env.run-id={run_id}"),
        ]),
        "",
        "the snapshot goes with the group"
    );
    assert!(
        common::docker::sandbox_states_of(std::process::id()).is_empty(),
        "no container is left"
    );
}

fn docker_cli(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A snapshot image labelled as a run that holds no lease left it (a killed run's).
fn dead_runs_snapshot() -> String {
    let name = format!("hermes-env-snapshot:dead-{}", std::process::id());
    let container = docker_cli(&["create", common::docker::IMAGE, "true"]);
    docker_cli(&[
        "commit",
        "--change",
        "LABEL hermes-env=1 hermes-env.role=snapshot hermes-env.run-id=dead-run-of-a-test",
        &container,
        &name,
    ]);
    docker_cli(&["rm", &container]);
    name
}

/// A backend that cannot copy a sandbox (the trait's default `prepare`).
struct NoCopies(LocalProvider);

#[async_trait::async_trait]
impl SandboxProvider for NoCopies {
    async fn create(
        &self,
        task_id: &str,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, hermes_runtime::sandbox::SandboxError> {
        self.0.create(task_id, spec).await
    }
}

#[tokio::test]
async fn a_backend_that_cannot_copy_prepares_every_rollout_and_says_so_once() {
    let logs = common::logs::Logs::default();
    let _guard = logs.capture();
    let tmp = tempfile::tempdir().unwrap();
    let counter = tmp.path().join("count");
    let provider: Arc<dyn SandboxProvider> =
        Arc::new(NoCopies(LocalProvider::new().unwrap().confined(false)));
    let group = GroupFork::new(Arc::clone(&provider), 1);
    let spec = SandboxSpec::default().with_prepare(preparation(Some(&counter)));
    let runs = prepared_runs(&provider, &group, &[&spec, &spec, &spec], &counter).await;
    assert_eq!(runs, 3, "each rollout prepared its own sandbox");
    // Said once per process (this is the binary's only test on such a backend).
    assert_eq!(logs.lines_with("cannot copy a prepared sandbox").len(), 1);
}

#[tokio::test]
async fn a_rollout_whose_spec_differs_from_the_prepared_one_prepares_its_own() {
    let logs = common::logs::Logs::default();
    let _guard = logs.capture();
    let tmp = tempfile::tempdir().unwrap();
    let counter = tmp.path().join("count");
    let provider: Arc<dyn SandboxProvider> =
        Arc::new(LocalProvider::new().unwrap().confined(false));
    let group = GroupFork::new(Arc::clone(&provider), 1);
    let spec = SandboxSpec::default().with_prepare(preparation(Some(&counter)));
    let other = spec.clone().protect("/opt/oracle");
    let runs = prepared_runs(&provider, &group, &[&spec, &other, &spec, &other], &counter).await;
    assert_eq!(
        runs, 3,
        "the group's preparation, then one per differing rollout"
    );
    assert_eq!(
        logs.lines_with("differs from the one the group prepared")
            .len(),
        1
    );
}
