//! Behaviour of every model-facing tool, including its error shapes. Each check takes a
//! `SandboxProvider`, so the same suite runs on every backend: `backend_suite!(local, …)`
//! below instantiates it for the local and the Docker backend.

mod common;

use std::sync::Arc;
use std::time::Duration;

use hermes_runtime::sandbox::{LocalProvider, SandboxProvider, TaskSandbox};
use hermes_runtime::tools::{FakeWebBackend, ToolCallContext, ToolRegistry, ToolSet};
use serde_json::{json, Map, Value};

/// A task sandbox plus every tool (web over the fake backend).
struct Bench {
    sandbox: TaskSandbox,
    tools: ToolSet,
}

impl Bench {
    fn new(provider: Arc<dyn SandboxProvider>) -> Self {
        let tools = ToolRegistry::builtin()
            .with_web(Arc::new(FakeWebBackend::new().with_page(
                "https://docs.test/rust",
                "Rust",
                "Rust is a language.",
            )))
            .resolve(None, None)
            .unwrap()
            .0;
        let task = format!("tools-{}", uuid_like());
        Bench {
            sandbox: TaskSandbox::new(task, provider),
            tools,
        }
    }

    async fn call(&self, name: &str, args: Value) -> Value {
        let args: Map<String, Value> = serde_json::from_value(args).unwrap();
        let cx = ToolCallContext {
            sandbox: &self.sandbox,
            terminal_timeout: Duration::from_secs(20),
            user_task: "",
        };
        self.tools.call(name, args, &cx).await
    }

    /// Removes the tools' state (background processes, saved results) and the sandbox, as the
    /// end of a rollout does.
    async fn finish(self) {
        if self.sandbox.is_created() {
            let sandbox = Arc::clone(self.sandbox.get().await.unwrap());
            let own = self.sandbox.own_processes();
            hermes_runtime::tools::cleanup_processes(sandbox.as_ref(), &own)
                .await
                .unwrap();
        }
        self.sandbox.close().await.unwrap();
    }

    async fn sh(&self, command: &str) -> String {
        let r = self.call("terminal", json!({"command": command})).await;
        assert_eq!(r["exit_code"], 0, "{command}: {r}");
        r["output"].as_str().unwrap().to_owned()
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

async fn terminal_foreground_and_errors(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    let r = b
        .call(
            "terminal",
            json!({"command": "echo hi; echo err >&2; exit 3"}),
        )
        .await;
    assert_eq!(
        r,
        json!({"output": "hi\nerr", "exit_code": 3, "error": null})
    );
    let r = b
        .call("terminal", json!({"command": "sleep 5", "timeout": 1}))
        .await;
    assert_eq!(r["exit_code"], 124);
    let r = b
        .call("terminal", json!({"command": "ls", "timeout": 601}))
        .await;
    assert_eq!(r["exit_code"], -1);
    assert!(r["error"].as_str().unwrap().contains("600s"));
    b.finish().await;
}

async fn background_processes(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    // Unique commands: `ps` may also see other tests' (and containers') processes.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let long = format!("sleep 30.{nanos:09}");
    let left_behind = format!("sleep 31.{nanos:09}");
    let started = b
        .call(
            "terminal",
            json!({"command": format!("echo ready; {long}"), "background": true}),
        )
        .await;
    assert_eq!(started["output"], "Background process started", "{started}");
    assert_eq!(started["exit_code"], 0);
    let id = started["session_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("proc_") && id.len() == 17, "{id}");
    assert!(started["pid"].as_i64().unwrap() > 0);

    let quick = b
        .call("terminal", json!({"command": "for i in 1 2 3 4 5; do echo line$i; done; exit 7", "background": true}))
        .await;
    let quick_id = quick["session_id"].as_str().unwrap().to_owned();
    let waited = b
        .call(
            "process",
            json!({"action": "wait", "session_id": quick_id, "timeout": 10}),
        )
        .await;
    assert_eq!(waited["status"], "exited", "{waited}");
    assert_eq!(waited["exit_code"], 7);
    assert_eq!(waited["output"], "line1\nline2\nline3\nline4\nline5\n");

    let log = b
        .call(
            "process",
            json!({"action": "log", "session_id": quick_id, "limit": 2}),
        )
        .await;
    assert_eq!(log["output"], "line4\nline5", "{log}");
    assert_eq!(
        (log["total_lines"].clone(), log["showing"].clone()),
        (json!(5), json!("2 lines"))
    );
    let log = b
        .call(
            "process",
            json!({"action": "log", "session_id": quick_id, "offset": 1, "limit": 2}),
        )
        .await;
    assert_eq!(log["output"], "line2\nline3");

    let listed = b.call("process", json!({"action": "list"})).await;
    let procs = listed["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{listed}");
    let running = procs
        .iter()
        .find(|p| p["session_id"] == id.as_str())
        .unwrap();
    assert_eq!(running["status"], "running");
    assert_eq!(running["command"], format!("echo ready; {long}"));
    assert!(running.get("exit_code").is_none());
    assert!(running["started_at"].as_str().unwrap().contains('T'));
    assert_eq!(running["cwd"], b.sandbox.get().await.unwrap().workdir());

    let polled = b
        .call("process", json!({"action": "poll", "session_id": id}))
        .await;
    assert_eq!(polled["status"], "running");
    assert_eq!(polled["output_preview"], "ready\n");

    let timeout = b
        .call(
            "process",
            json!({"action": "wait", "session_id": id, "timeout": 1}),
        )
        .await;
    assert_eq!(timeout["status"], "timeout", "{timeout}");
    assert!(timeout["timeout_note"].is_string());
    let clamped = b
        .call(
            "process",
            json!({"action": "wait", "session_id": quick_id, "timeout": 99}),
        )
        .await;
    assert_eq!(
        clamped["timeout_note"],
        "Requested wait of 99s was clamped to configured limit of 20s"
    );

    let killed = b
        .call("process", json!({"action": "kill", "session_id": id}))
        .await;
    assert_eq!(killed, json!({"status": "killed", "session_id": id}));
    let again = b
        .call("process", json!({"action": "kill", "session_id": id}))
        .await;
    assert_eq!(again, json!({"status": "already_exited", "exit_code": -15}));
    assert!(
        !b.sh("ps -eo args").await.contains(&long),
        "the process tree is gone"
    );

    // stdin: a reader that echoes what it gets.
    let reader = b
        .call("terminal", json!({"command": "while read -r l; do echo got:$l; [ \"$l\" = bye ] && exit 0; done", "background": true}))
        .await;
    let rid = reader["session_id"].as_str().unwrap().to_owned();
    let w = b
        .call(
            "process",
            json!({"action": "submit", "session_id": rid, "data": "hello"}),
        )
        .await;
    assert_eq!(w, json!({"status": "ok", "bytes_written": 6}));
    let w = b
        .call(
            "process",
            json!({"action": "write", "session_id": rid, "data": "bye\n"}),
        )
        .await;
    assert_eq!(w["status"], "ok");
    let done = b
        .call(
            "process",
            json!({"action": "wait", "session_id": rid, "timeout": 10}),
        )
        .await;
    assert_eq!(done["output"], "got:hello\ngot:bye\n", "{done}");
    let closed = b
        .call(
            "process",
            json!({"action": "write", "session_id": rid, "data": "x"}),
        )
        .await;
    assert_eq!(closed["status"], "error");

    // Error shapes.
    assert_eq!(
        b.call(
            "process",
            json!({"action": "poll", "session_id": "proc_000000000000"})
        )
        .await,
        json!({"status": "not_found", "error": "No process with ID proc_000000000000"})
    );
    assert_eq!(
        b.call("process", json!({"action": "log"})).await,
        json!({"error": "session_id is required for log"})
    );
    assert_eq!(
        b.call("process", json!({"action": "dance"})).await,
        json!({"error": "Unknown process action: dance. Use: list, poll, log, wait, kill, write, submit"})
    );

    // Teardown cleanup kills what is still running.
    let left = b
        .call(
            "terminal",
            json!({"command": left_behind, "background": true}),
        )
        .await;
    assert_eq!(left["exit_code"], 0);
    // (The pattern `[s]leep 31\.N` does not match the `grep` itself.) The call returns once
    // the command is started in the background, maybe before its `exec` of `sleep` (CI saw
    // that once on a loaded machine), so wait for it, up to 5 s.
    let pattern = format!("[s]{}", left_behind[1..].replace('.', "\\."));
    let running = b
        .sh(&format!(
            "for i in $(seq 100); do ps -eo args | grep -q -- '{pattern}' && {{ echo running; exit 0; }}; sleep 0.05; done; echo absent"
        ))
        .await;
    assert_eq!(running.trim(), "running", "{left_behind} did not start");
    let sandbox = Arc::clone(b.sandbox.get().await.unwrap());
    hermes_runtime::tools::cleanup_processes(sandbox.as_ref(), &b.sandbox.own_processes())
        .await
        .unwrap();
    // SIGKILLed: it runs no more code, but `ps` may list it until the kernel has finished
    // its exit (CI saw that once on a loaded machine), so wait for that, up to 5 s.
    let gone = b
        .sh(&format!(
            "for i in $(seq 100); do ps -eo args | grep -q -- '{pattern}' || {{ echo gone; exit 0; }}; sleep 0.05; done; echo alive"
        ))
        .await;
    assert_eq!(gone.trim(), "gone", "{left_behind} outlived the cleanup");
    assert_eq!(
        b.call("process", json!({"action": "list"})).await,
        json!({"processes": []})
    );
    b.finish().await;
}

async fn read_and_write_files(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    let w = b
        .call(
            "write_file",
            json!({"path": "deep/er/notes.txt", "content": "a\nb\nc\n"}),
        )
        .await;
    assert_eq!(w, json!({"bytes_written": 6, "dirs_created": true}));
    let r = b
        .call(
            "read_file",
            json!({"path": "deep/er/notes.txt", "offset": 2, "limit": 1}),
        )
        .await;
    assert_eq!(r["content"], "     2|b");
    assert_eq!(
        r["hint"],
        "Use offset=3 to continue reading (showing 2-2 of 3 lines)"
    );
    let missing = b.call("read_file", json!({"path": "nope.txt"})).await;
    assert_eq!(missing, json!({"error": "File not found: nope.txt"}));
    b.sh("printf 'a\\0b' > bin.dat").await;
    let bin = b.call("read_file", json!({"path": "bin.dat"})).await;
    assert_eq!(bin["is_binary"], true);
    assert!(bin["error"]
        .as_str()
        .unwrap()
        .starts_with("Binary file - cannot display as text."));
    assert_eq!(
        b.call("read_file", json!({})).await,
        json!({"error": "Missing required argument 'path' for tool 'read_file'"})
    );
    b.finish().await;
}

async fn patch_replace(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    b.call(
        "write_file",
        json!({"path": "app.py", "content": "def f():\n    return 1\n\ndef g():\n    return 1\n"}),
    )
    .await;
    let r = b
        .call("patch", json!({"mode": "replace", "path": "app.py", "old_string": "def f():\n    return 1", "new_string": "def f():\n    return 2"}))
        .await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["files_modified"], json!(["app.py"]));
    let diff = r["diff"].as_str().unwrap();
    assert!(diff.starts_with("--- a/app.py\n+++ b/app.py\n"), "{diff}");
    assert!(diff.contains("-    return 1\n+    return 2\n"), "{diff}");

    let dup = b
        .call("patch", json!({"mode": "replace", "path": "app.py", "old_string": "return", "new_string": "yield"}))
        .await;
    assert_eq!(dup["success"], false);
    assert!(
        dup["error"].as_str().unwrap().contains("appears 2 times"),
        "{dup}"
    );
    let all = b
        .call("patch", json!({"mode": "replace", "path": "app.py", "old_string": "return", "new_string": "yield", "replace_all": true}))
        .await;
    assert_eq!(all["success"], true);
    // Indentation-tolerant.
    let fuzzy = b
        .call("patch", json!({"mode": "replace", "path": "app.py", "old_string": "def g():\n  yield 1", "new_string": "def g():\n    yield 3"}))
        .await;
    assert_eq!(fuzzy["success"], true, "{fuzzy}");
    assert_eq!(
        b.sh("cat app.py").await,
        "def f():\n    yield 2\n\ndef g():\n    yield 3"
    );
    let none = b
        .call("patch", json!({"mode": "replace", "path": "app.py", "old_string": "nothing like it", "new_string": "x"}))
        .await;
    assert_eq!(none["success"], false);
    assert!(none["error"]
        .as_str()
        .unwrap()
        .starts_with("Could not find old_string in app.py"));
    assert_eq!(
        b.call(
            "patch",
            json!({"mode": "replace", "path": "gone.py", "old_string": "a", "new_string": "b"})
        )
        .await,
        json!({"success": false, "error": "File not found: gone.py"})
    );
    assert_eq!(
        b.call(
            "patch",
            json!({"mode": "replace", "old_string": "a", "new_string": "b"})
        )
        .await,
        json!({"error": "path required"})
    );
    assert_eq!(
        b.call(
            "patch",
            json!({"mode": "replace", "path": "app.py", "old_string": "a"})
        )
        .await,
        json!({"error": "old_string and new_string required"})
    );
    assert_eq!(
        b.call("patch", json!({"mode": "patch"})).await,
        json!({"error": "patch content required"})
    );
    assert_eq!(
        b.call("patch", json!({"mode": "merge"})).await,
        json!({"error": "Unknown mode: merge"})
    );
    b.finish().await;
}

async fn patch_v4a(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    b.call("write_file", json!({"path": "src/app.py", "content": "import os\n\ndef main():\n    print('old')\n    return 0\n"})).await;
    b.call("write_file", json!({"path": "old.txt", "content": "bye\n"}))
        .await;
    let patch = "*** Begin Patch\n*** Update File: src/app.py\n@@ def main @@\n def main():\n-    print('old')\n+    print('new')\n     return 0\n*** Add File: docs/new.md\n+# New\n+text\n*** Delete File: old.txt\n*** End Patch";
    let r = b
        .call("patch", json!({"mode": "patch", "patch": patch}))
        .await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["files_modified"], json!(["src/app.py"]));
    assert_eq!(r["files_created"], json!(["docs/new.md"]));
    assert_eq!(r["files_deleted"], json!(["old.txt"]));
    assert!(r["diff"].as_str().unwrap().contains("+    print('new')"));
    assert_eq!(
        b.sh("cat src/app.py").await,
        "import os\n\ndef main():\n    print('new')\n    return 0"
    );
    assert_eq!(b.sh("cat docs/new.md").await, "# New\ntext");
    assert!(b
        .sh("ls old.txt 2>&1 || true")
        .await
        .contains("No such file"));

    // A hunk that does not apply leaves every file untouched.
    let bad = "*** Begin Patch\n*** Add File: never.txt\n+x\n*** Update File: src/app.py\n-    print('missing')\n+    print('x')\n*** End Patch";
    let r = b
        .call("patch", json!({"mode": "patch", "patch": bad}))
        .await;
    assert_eq!(r["success"], false);
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .starts_with("Hunk 1 does not apply to src/app.py"),
        "{r}"
    );
    assert!(b
        .sh("ls never.txt 2>&1 || true")
        .await
        .contains("No such file"));
    let r = b
        .call("patch", json!({"mode": "patch", "patch": "just text"}))
        .await;
    assert_eq!(r["success"], false);
    b.finish().await;
}

async fn search_files(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    for (path, content) in [
        ("proj/a.py", "import os\ndef alpha():\n    return os.name\n"),
        ("proj/b.py", "def beta():\n    return 'os'\n"),
        ("proj/notes.md", "os notes\n"),
        ("proj/sub/c.py", "x = 1\n"),
    ] {
        b.call("write_file", json!({"path": path, "content": content}))
            .await;
    }
    let r = b
        .call(
            "search_files",
            json!({"pattern": "def \\w+", "path": "proj", "file_glob": "*.py"}),
        )
        .await;
    assert_eq!(r["total_count"], 2, "{r}");
    assert_eq!(
        r["matches"][0],
        json!({"path": "proj/a.py", "line": 2, "content": "def alpha():"})
    );
    let r = b
        .call(
            "search_files",
            json!({"pattern": "os", "path": "proj", "output_mode": "count"}),
        )
        .await;
    assert_eq!(
        r["counts"],
        json!({"proj/a.py": 2, "proj/b.py": 1, "proj/notes.md": 1}),
        "{r}"
    );
    assert_eq!(r["total_count"], 4);
    let r = b.call("search_files", json!({"pattern": "os", "path": "proj", "output_mode": "files_only", "limit": 1, "offset": 1})).await;
    assert_eq!(r["total_count"], 3, "{r}");
    assert_eq!(r["files"].as_array().unwrap().len(), 1);
    assert_eq!(r["truncated"], true);
    let r = b
        .call(
            "search_files",
            json!({"pattern": "return", "path": "proj", "context": 1, "file_glob": "b.py"}),
        )
        .await;
    assert_eq!(r["matches"][0]["context"], json!(["1: def beta():"]), "{r}");
    let r = b
        .call(
            "search_files",
            json!({"pattern": "*.py", "target": "files", "path": "proj"}),
        )
        .await;
    assert_eq!(
        r["files"],
        json!(["proj/a.py", "proj/b.py", "proj/sub/c.py"]),
        "{r}"
    );
    let r = b
        .call(
            "search_files",
            json!({"pattern": "note", "target": "find", "path": "proj"}),
        )
        .await;
    assert_eq!(r["files"], json!(["proj/notes.md"]));
    assert_eq!(
        b.call(
            "search_files",
            json!({"pattern": "zzz_nothing", "path": "proj"})
        )
        .await,
        json!({"total_count": 0, "matches": []})
    );
    assert_eq!(
        b.call(
            "search_files",
            json!({"pattern": "x", "path": "missing-dir"})
        )
        .await,
        json!({"error": "Path not found: missing-dir"})
    );
    let bad = b
        .call(
            "search_files",
            json!({"pattern": "(unclosed", "path": "proj"}),
        )
        .await;
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .starts_with("Search failed: "),
        "{bad}"
    );
    b.finish().await;
}

async fn web_and_stub_tools(p: Arc<dyn SandboxProvider>) {
    let b = Bench::new(p);
    let r = b
        .call("web_search", json!({"query": "rust", "limit": 2}))
        .await;
    assert_eq!(r["success"], true);
    assert_eq!(
        r["data"]["web"][0],
        json!({"title": "Rust", "url": "https://docs.test/rust", "description": "Rust is a language.", "position": 1})
    );
    let r = b
        .call(
            "web_extract",
            json!({"urls": ["https://docs.test/rust", "notaurl"]}),
        )
        .await;
    assert_eq!(r["results"][0]["content"], "Rust is a language.");
    assert_eq!(r["results"][1]["error"], "invalid URL: notaurl");
    assert_eq!(
        b.call("web_extract", json!({"urls": []})).await,
        json!({"error": "Content was inaccessible or not found"})
    );
    assert_eq!(
        b.call("memory", json!({"action": "add"})).await,
        json!({"error": "Memory is not available in RL environments."})
    );
    assert_eq!(
        b.call("session_search", json!({"query": "x"})).await,
        json!({"error": "Session search is not available in RL environments."})
    );
    assert!(
        !b.sandbox.is_created(),
        "web and stub tools need no sandbox"
    );
}

/// Instantiates every check for one backend.
macro_rules! backend_suite {
    ($backend:ident, $provider:expr) => {
        mod $backend {
            use super::*;

            async fn provider() -> Arc<dyn SandboxProvider> {
                $provider
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn terminal() {
                terminal_foreground_and_errors(provider().await).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn background_and_process() {
                background_processes(provider().await).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn files() {
                read_and_write_files(provider().await).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn patch_replace_mode() {
                patch_replace(provider().await).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn patch_v4a_mode() {
                patch_v4a(provider().await).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn search() {
                search_files(provider().await).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn web_and_stubs() {
                web_and_stub_tools(provider().await).await;
            }
        }
    };
}

backend_suite!(
    local,
    Arc::new(LocalProvider::new().expect("local provider"))
);
backend_suite!(docker, {
    common::docker::require_docker();
    Arc::new(
        hermes_runtime::sandbox::DockerProvider::connect(common::docker::settings())
            .await
            .expect("docker provider"),
    )
});
