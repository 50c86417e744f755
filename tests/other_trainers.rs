//! The guide "Serving an environment to other trainers" runs as it stands: its OpenEnv episode
//! loop (`play_episode`, with openenv-core's client) and its MCP episode (`mcp_episode`, with
//! the official `mcp` client) are taken from `docs/guide/other-trainers.md` and played against
//! `terminal_test openenv` and `terminal_test mcp`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

const GUIDE: &str = "docs/guide/other-trainers.md";

/// The guide's `python` block whose first line is `first_line`.
fn guide_block(first_line: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(GUIDE);
    let text = std::fs::read_to_string(&path).expect("the guide");
    let mut blocks = text.split("```python\n").skip(1);
    let block = blocks
        .find(|b| b.starts_with(first_line))
        .unwrap_or_else(|| panic!("{GUIDE} has no python block starting with {first_line:?}"));
    block.split("```").next().unwrap().to_owned()
}

/// `terminal_test MODE` on a free port with local sandboxes; killed when dropped.
struct Served {
    child: Child,
    url: String,
    _tmp: tempfile::TempDir,
}

impl Served {
    fn start(mode: &str) -> Served {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(common::example_bin("terminal_test"))
            .args([mode, "--port", "0", "--env.terminal_backend", "local"])
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn terminal_test");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the listening line");
        let url = line
            .trim()
            .strip_prefix(&format!("{mode} listening on "))
            .unwrap_or_else(|| panic!("terminal_test {mode} did not start: {line:?}"))
            .to_owned();
        Served {
            child,
            url,
            _tmp: tmp,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(python: PathBuf, script: &str) -> Vec<Value> {
    let out = Command::new(python)
        .args(["-c", script])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn the_guides_openenv_episode_loop_plays_episodes_to_their_rewards() {
    let server = Served::start("openenv");
    let play_episode = guide_block("# play_episode");
    let script = format!(
        r#"{play_episode}
import json
URL = {url:?}
# The reference solution of terminal_test's first item, then the answer.
def reference(calls):
    def generate(messages, tools):
        assert any(t["name"] == "submit" for t in tools)
        return calls.pop(0)
    return generate
solution = [
    {{"name": "write_file", "arguments": {{"path": "~/greeting.txt", "content": "Hello from Hermes Agent"}}}},
    {{"name": "read_file", "arguments": {{"path": "~/greeting.txt"}}}},
    {{"name": "submit", "arguments": {{"answer": "Done: ~/greeting.txt is written."}}}},
]
messages, reward = play_episode(URL, reference(solution))
print(json.dumps({{"reward": reward, "turns": len(messages)}}))
# The next item, answered without any work.
messages, reward = play_episode(URL, reference([{{"name": "submit", "arguments": {{"answer": "done"}}}}]))
print(json.dumps({{"reward": reward}}))
# An evaluation item chosen by the reset options.
lazy = reference([{{"name": "submit", "arguments": {{"answer": "42"}}}}])
messages, reward = play_episode(URL, lazy, eval_index=0)
print(json.dumps({{"eval_task": messages[1]["content"], "reward": reward}}))
"#,
        url = server.url
    );
    let out = run(common::openenv_python(), &script);
    // system, user, three calls with their two tool messages.
    assert_eq!(out[0]["reward"], 1.0, "{out:?}");
    assert_eq!(out[0]["turns"], 2 + 3 + 2, "{out:?}");
    assert_eq!(out[1]["reward"], 0.0, "{out:?}");
    assert!(
        out[2]["eval_task"].as_str().unwrap().contains("6 * 7"),
        "{out:?}"
    );
    assert_eq!(out[2]["reward"], 0.0, "{out:?}");
}

#[test]
fn the_guides_mcp_episode_earns_its_reward() {
    let server = Served::start("mcp");
    let mcp_episode = guide_block("# mcp_episode");
    let script = format!(
        r#"{mcp_episode}
import json
print(json.dumps(asyncio.run(mcp_episode({url:?}))))
"#,
        url = server.url
    );
    let out = run(common::mcp_python(), &script);
    assert_eq!(
        out[0],
        serde_json::json!({"reward": 1.0, "done": true, "outcome": "scored"}),
        "{out:?}"
    );
}
