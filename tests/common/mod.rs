//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod atropos;
pub mod docker;
pub mod dockerd;
pub mod logs;
pub mod netns;
pub mod proxy;
pub mod sshd;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hermes_env::testing::{Policy, ScriptedServer};
use hermes_runtime::agent::{AgentLoop, AgentResult, AgentSettings};
use hermes_runtime::config::ApiServerConfig;
use hermes_runtime::llm::{LlmClient, Message, RetryPolicy, Split};
use hermes_runtime::sandbox::{LocalProvider, SandboxProvider, TaskSandbox};
use hermes_runtime::tools::{ToolRegistry, ToolSet};
use tokio::sync::Semaphore;

/// Where the cgroup v2 hierarchy is mounted, and its superblock options (`rw,favordynmods`,
/// …); fails, saying so, on a host without one.
pub fn cgroup2_mount() -> (PathBuf, String) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("/proc/self/mountinfo");
    info.lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - cgroup2 ")?;
            let options = right.split(' ').nth(1).unwrap_or_default();
            Some((left.split(' ').nth(4)?.into(), options.to_owned()))
        })
        .expect("this test needs a cgroup v2 hierarchy mounted")
}

/// A client for one server with fast retries (3 attempts, ≤ 20 ms backoff).
pub fn client(base_url: &str) -> LlmClient {
    let config = ApiServerConfig {
        base_url: Some(base_url.to_owned()),
        ..Default::default()
    };
    let retry = RetryPolicy {
        attempts: 3,
        base: Duration::from_millis(10),
        cap: Duration::from_millis(20),
    };
    LlmClient::new(&[config], 8, retry).expect("client")
}

/// The built-in `terminal` and `file` tools.
pub fn all_tools() -> ToolSet {
    ToolRegistry::builtin()
        .resolve(Some(&["terminal".into(), "file".into()]), None)
        .expect("builtin toolsets")
        .0
}

/// A scripted server, a local sandbox and the agent loop wired together.
pub struct Harness {
    pub server: ScriptedServer,
    pub llm: LlmClient,
    pub tools: ToolSet,
    pub provider: Arc<LocalProvider>,
    pub sandbox: Arc<TaskSandbox>,
    pub permits: Semaphore,
    pub settings: AgentSettings,
}

impl Harness {
    pub async fn new(policy: impl Policy) -> Self {
        let server = ScriptedServer::start(policy).await.expect("server");
        let llm = client(&server.base_url());
        let provider = Arc::new(LocalProvider::new().expect("local provider"));
        let dynamic: Arc<dyn SandboxProvider> = provider.clone();
        Harness {
            llm,
            tools: all_tools(),
            sandbox: Arc::new(TaskSandbox::new("task-1", dynamic)),
            provider,
            server,
            permits: Semaphore::new(4),
            settings: AgentSettings {
                max_turns: 5,
                temperature: 1.0,
                max_tokens: Some(256),
                extra_body: Default::default(),
                split: Split::Train,
                terminal_timeout: Duration::from_secs(20),
                tool_call_parser: "hermes".into(),
                result_budget: Default::default(),
            },
        }
    }

    pub async fn run(&self, prompt: &str) -> AgentResult {
        AgentLoop {
            llm: &self.llm,
            tools: &self.tools,
            sandbox: &self.sandbox,
            tool_permits: &self.permits,
            settings: &self.settings,
        }
        .run(vec![Message::user(prompt)])
        .await
    }
}

/// Runs `E`'s `process` mode in this process, as its binary `bin` would: against the
/// OpenAI-style server at `base_url` (no health check), without W&B, its groups saved to
/// `jsonl`; `flags` follow (the run's size, backend and what the test is about).
pub async fn run_process<E: hermes_runtime::env::Environment>(
    bin: &str,
    base_url: &str,
    jsonl: &std::path::Path,
    flags: &[&str],
) {
    let saved = [
        "--env.data_path_to_save_groups",
        jsonl.to_str().expect("a UTF-8 path"),
    ];
    let flags: Vec<&str> = saved.iter().chain(flags).copied().collect();
    run_mode::<E>(bin, "process", base_url, &flags).await;
}

/// Runs `E`'s `mode` (`process`, `evaluate`) in this process, as its binary `bin` would:
/// against the OpenAI-style server at `base_url` (no health check), without W&B, with `flags`.
pub async fn run_mode<E: hermes_runtime::env::Environment>(
    bin: &str,
    mode: &str,
    base_url: &str,
    flags: &[&str],
) {
    use hermes_runtime::app::{execute, parse_invocation, Resolved};
    let common = [
        bin,
        mode,
        "--env.use_wandb",
        "false",
        "--openai.server_type",
        "openai",
        "--openai.health_check",
        "false",
        "--openai.base_url",
        base_url,
    ];
    let args = common
        .iter()
        .chain(flags)
        .map(std::ffi::OsString::from)
        .collect();
    let Some(Resolved::Run(cfg)) = parse_invocation::<E>(bin, args).unwrap() else {
        panic!("a {mode} invocation");
    };
    execute::<E>(*cfg, &hermes_runtime::shutdown::Shutdown::new())
        .await
        .unwrap();
}

/// The example binary built by `cargo test` (examples are built before tests run).
pub fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile dir");
    let bin = dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "example binary {} is missing: run the tests with `cargo test`, which builds the examples first",
        bin.display()
    );
    bin
}

/// A Python with `atroposlib==0.4.0` installed, for conformance checks against Atropos's own
/// models. Uses `HERMES_ATROPOS_PYTHON` when set; otherwise creates (once, under a lock) a
/// virtualenv in the target directory and installs the package from PyPI. Fails with a clear
/// message when Python or the package cannot be had.
pub fn atropos_python() -> PathBuf {
    if let Ok(p) = std::env::var("HERMES_ATROPOS_PYTHON") {
        return PathBuf::from(p);
    }
    python_venv(
        "atropos-venv",
        &["atroposlib==0.4.0"],
        "import atroposlib.api.server",
    )
}

/// A Python with the Hugging Face packages the hub tests build their fixtures with
/// (`tokenizers` to train a tiny BPE, `pyarrow` to write parquet, `huggingface_hub` to lay
/// out the cache exactly as Python tools do), in `target/hub-venv`.
pub fn hub_python() -> PathBuf {
    python_venv(
        "hub-venv",
        &["tokenizers", "pyarrow", "huggingface_hub"],
        "import tokenizers, pyarrow.parquet, huggingface_hub",
    )
}

/// A Python with Hugging Face `transformers` (no torch) and `tokenizers`, for the chat-template
/// conformance suite, plus `cmake` and `scikit-build-core`, which pip needs to read the metadata
/// of the llama-cpp-python source distribution the real templates come from, and `gguf`, which
/// reads the real vocabularies of `real_tokenizers.rs` out of GGUF files.
pub fn template_python() -> PathBuf {
    python_venv(
        "template-venv",
        &[
            "transformers==5.24.0",
            "tokenizers",
            "jinja2",
            "scikit-build-core",
            "cmake",
            "gguf==0.19.0",
        ],
        "import transformers, tokenizers, jinja2, scikit_build_core, cmake, gguf",
    )
}

/// A Python with Hugging Face's `math-verify` (and the sympy and latex2sympy2_extended it
/// pulls in), for checking `hermes_env::math` against it, in `target/math-verify-venv`.
pub fn math_verify_python() -> PathBuf {
    python_venv(
        "math-verify-venv",
        &["math-verify==0.9.0"],
        "import math_verify",
    )
}

/// The source distribution that vendors llama.cpp and its `models/templates/` (real chat
/// templates), in `target/chat-templates/`, downloaded from PyPI once under a lock; panics
/// with pip's message when PyPI cannot be reached.
pub fn llama_cpp_sdist() -> PathBuf {
    const SDIST: &str = "llama-cpp-python==0.3.36";
    const SDIST_FILE: &str = "llama_cpp_python-0.3.36.tar.gz";
    let python = template_python();
    let bin = python.parent().unwrap().to_owned();
    let target = bin.parent().unwrap().parent().unwrap().to_owned();
    let work = target.join("chat-templates");
    std::fs::create_dir_all(&work).unwrap();
    let lock = std::fs::File::create(target.join("chat-templates.lock")).expect("lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let sdist = work.join(SDIST_FILE);
    if !sdist.exists() {
        // pip reads the sdist's metadata (scikit-build-core wants cmake on PATH).
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
            ])
            .args(["--no-build-isolation", SDIST, "-d"])
            .arg(&work)
            .env("PATH", path)
            .output()
            .unwrap();
        assert!(
            out.status.success() && sdist.exists(),
            "this test needs {SDIST} from PyPI (the real chat templates): pip download failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(lock);
    sdist
}

/// openenv-core 0.3.0, installed without its optional-looking hard dependencies (gradio,
/// openai, the CLI's typer): its server, clients and `validate_running_environment` need only
/// the packages of the second step.
const OPENENV_INSTALLS: [&[&str]; 2] = [
    &["--no-deps", "openenv-core==0.3.0"],
    &[
        "fastapi",
        "pydantic",
        "uvicorn",
        "requests",
        "websockets>=15.0.1",
        "httpx",
        "fastmcp",
    ],
];

/// What a venv with openenv-core imports.
const OPENENV_PROBE: &str = "from openenv.core.mcp_client import MCPToolClient; \
     from openenv.core.generic_client import GenericEnvClient; \
     from openenv.core.env_server.http_server import create_app; \
     from openenv.cli._validation import validate_running_environment";

/// A Python with `openenv-core==0.3.0` (the OpenEnv wire's own server, clients and
/// `openenv validate` checks) in `target/openenv-venv`.
pub fn openenv_python() -> PathBuf {
    python_venv_steps("openenv-venv", &OPENENV_INSTALLS, OPENENV_PROBE)
}

/// [`openenv_python`] with uvloop and httptools besides (what `uvicorn[standard]` adds, and
/// uvicorn then runs on), in `target/openenv-venv-uvloop`.
pub fn openenv_uvloop_python() -> PathBuf {
    let [core, packages] = OPENENV_INSTALLS;
    python_venv_steps(
        "openenv-venv-uvloop",
        &[core, packages, &["uvloop", "httptools"]],
        &format!("{OPENENV_PROBE}; import uvloop, httptools"),
    )
}

/// A Python with the official MCP SDK (`mcp` from PyPI: its `Client` over Streamable HTTP) in
/// `target/mcp-venv`.
pub fn mcp_python() -> PathBuf {
    python_venv(
        "mcp-venv",
        &["mcp>=2.3"],
        "from mcp import Client; from mcp.shared.exceptions import MCPError",
    )
}

/// A Python with the MCP SDK's 1.x line (`mcp` < 2, whose FastMCP serves stdio and Streamable
/// HTTP; 2.x renamed it) in `target/fastmcp-venv`, for the MCP servers environments use.
pub fn fastmcp_python() -> PathBuf {
    python_venv(
        "fastmcp-venv",
        &["mcp>=1.20,<2"],
        "from mcp.server.fastmcp import FastMCP",
    )
}

/// A Python 3.12 (what `harbor` requires) with the `harbor` package's models importable, in
/// `target/harbor-venv`: `harbor==0.26.0` without its runtime dependencies (agents, cloud
/// environments), plus what `harbor.models` imports. The interpreter is `HERMES_PYTHON312`,
/// else `python3.12` on `PATH`, else pyenv's 3.12.
pub fn harbor_python() -> PathBuf {
    let interpreter = std::env::var("HERMES_PYTHON312").ok().or_else(|| {
        let runs = |p: &str| {
            std::process::Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if runs("python3.12") {
            return Some("python3.12".to_owned());
        }
        let root = std::env::var("PYENV_ROOT")
            .unwrap_or_else(|_| format!("{}/.pyenv", std::env::var("HOME").unwrap_or_default()));
        let mut found: Vec<PathBuf> = std::fs::read_dir(format!("{root}/versions"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/python3.12")))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.pop().map(|p| p.display().to_string())
    });
    let interpreter = interpreter.unwrap_or_else(|| {
        panic!(
            "this test needs Python 3.12 (the harbor package requires it): set HERMES_PYTHON312 \
             or put python3.12 on PATH"
        )
    });
    python_venv_with(
        &interpreter,
        "harbor-venv",
        &[
            &["--no-deps", "harbor==0.26.0"],
            &["pydantic", "toml", "shortuuid"],
        ],
        "from harbor.models.task.config import TaskConfig; \
         from harbor.models.job.result import JobResult",
    )
}

/// `target/<name>/bin/python` with `packages` installed from PyPI (created once, under a
/// lock, when `probe` does not run); panics with a message naming what is missing.
fn python_venv(name: &str, packages: &[&str], probe: &str) -> PathBuf {
    python_venv_steps(name, &[packages], probe)
}

fn python_venv_steps(name: &str, installs: &[&[&str]], probe: &str) -> PathBuf {
    python_venv_with("python3", name, installs, probe)
}

/// A venv `target/NAME` of `interpreter` where `probe` runs, made (once, under a lock) by one
/// `pip install` per entry of `installs`.
fn python_venv_with(interpreter: &str, name: &str, installs: &[&[&str]], probe: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
    let venv = target.join(name);
    let python = venv.join("bin/python");
    let lock = std::fs::File::create(target.join(format!("{name}.lock"))).expect("lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let ready = || {
        std::process::Command::new(&python)
            .args(["-c", probe])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ready() {
        let wanted = installs.concat().join(" ");
        let step = |program: &std::path::Path, args: &[&str]| {
            let out = std::process::Command::new(program)
                .args(args)
                .output()
                .unwrap_or_else(|e| {
                    panic!(
                        "this test needs Python 3 with pip to install {wanted}: cannot run {}: {e}",
                        program.display()
                    )
                });
            assert!(
                out.status.success(),
                "this test needs {wanted} from PyPI: `{} {}` failed:\n{}",
                program.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        step(
            std::path::Path::new(interpreter),
            &["-m", "venv", venv.to_str().unwrap()],
        );
        for packages in installs {
            let mut args = vec!["install", "--quiet"];
            args.extend_from_slice(packages);
            step(&venv.join("bin/pip"), &args);
        }
    }
    drop(lock);
    python
}

/// Makes sure the command `binary` exists, installing Debian package `package` with apt-get
/// (once, under a lock) when it is missing and this test runs as root — the test set-up
/// installs what it needs, so `cargo test --workspace` works on a fresh machine. Panics with
/// a clear message when the package cannot be installed.
pub fn ensure_debian_package(binary: &str, package: &str) {
    let found = || {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {binary}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found() {
        return;
    }
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
    let lock = std::fs::File::create(target.join("apt-install.lock")).expect("lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if found() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test needs `{binary}`: install it with `apt-get install -y {package}` (as root the test does it itself)"
    );
    let script = format!(
        "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq {package}"
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap_or_else(|e| panic!("this test needs `{binary}`; running apt-get failed: {e}"));
    assert!(
        out.status.success() && found(),
        "this test needs `{binary}`; `apt-get install -y {package}` failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The prompt tokens Phase 2 sends to `/generate` for `messages` and `tools`: one managed
/// session against a scripted vLLM server, its node's masked prefix.
pub async fn phase2_prompt(
    tokenizer: Arc<hermes_runtime::llm::ChatTokenizer>,
    messages: Vec<Message>,
    tools: Arc<[hermes_runtime::llm::ToolSchema]>,
) -> Result<Vec<u32>, hermes_runtime::llm::LlmError> {
    use hermes_env::testing::{Reply, Script};
    use hermes_runtime::llm::{ChatBackend, ChatRequest, GenerateClient, ManagedSession, Phase2};
    let server = ScriptedServer::start(Script::new(vec![Reply::text("Done.")]))
        .await
        .unwrap();
    let config = ApiServerConfig {
        base_url: Some(server.base_url()),
        server_type: hermes_runtime::config::ServerType::Vllm,
        ..Default::default()
    };
    let phase2 = Phase2 {
        client: GenerateClient::new(&[config], RetryPolicy::default()).unwrap(),
        tokenizer,
        parser: hermes_runtime::parsers::get("hermes").unwrap(),
        preserve_think_blocks: true,
        mask_truncated_turns: false,
    };
    let session = ManagedSession::new(&phase2);
    let request = ChatRequest {
        messages,
        tools,
        n: 1,
        temperature: 1.0,
        max_tokens: None,
        extra_body: Default::default(),
        split: Split::Train,
    };
    session.chat(&request).await?;
    let node = session.nodes().last().unwrap().clone();
    let prompt_len = node
        .masked_tokens
        .iter()
        .take_while(|&&m| m == -100)
        .count();
    Ok(node.tokens[..prompt_len].to_vec())
}
