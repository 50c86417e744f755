//! The two frameworks under test and how to start them: hermes-env's `terminal_test` example
//! (release build, `process` mode) and the Python peer in `benches/python_peer/` (atroposlib
//! 0.4.0's `BaseEnv` `process` mode) in a virtualenv this bench creates under `target/`. Both
//! get the same command line, the same scripted server and the same built-in tokenizer (the
//! Python peer encodes the transcript's text with it, as Hermes did in Phase 1; hermes-env
//! re-renders the chat with its template and masks per assistant turn, which costs more), and
//! their JSONL is checked: every group complete, every rollout 4 turns, 3 tool results and
//! reward 1.0.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context as _};
use serde_json::Value;

use crate::scripted::TURNS;

/// Where the repository is (for the example build and the peer's sources).
const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// One framework configuration to run.
#[derive(Debug, Clone, Copy)]
pub enum Framework {
    /// hermes-env's `terminal_test`; `workers` overrides `--env.max_num_workers` (groups in
    /// flight; the default is 8, atroposlib's `process` runs one group at a time);
    /// `retokenize` gives it the tokenizer (trainer tokens from the chat template, every
    /// assistant turn trained), else its tokens are Phase 1 placeholders.
    Rust {
        /// `--env.max_num_workers`, when not the default.
        workers: Option<usize>,
        /// Whether `--env.tokenizer_name` is given.
        retokenize: bool,
    },
    /// The Python peer.
    Python,
}

impl Framework {
    /// A short label for the table.
    pub fn label(self) -> String {
        match self {
            Framework::Rust {
                workers: None,
                retokenize: true,
            } => "hermes-env (Rust)".into(),
            Framework::Rust {
                workers: Some(w),
                retokenize: true,
            } => format!("hermes-env, {w} group at a time"),
            Framework::Rust {
                workers,
                retokenize: false,
            } => format!(
                "hermes-env, placeholder tokens{}",
                workers.map_or(String::new(), |w| format!(", {w} grp"))
            ),
            Framework::Python => "Python peer (atroposlib)".into(),
        }
    }
}

/// The binaries both frameworks run with.
pub struct Installed {
    target: PathBuf,
    rust_bin: PathBuf,
    python: PathBuf,
}

/// The workload of one run.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Groups (`--env.total_steps`).
    pub groups: usize,
    /// Rollouts per group (`--env.group_size`).
    pub group_size: usize,
}

impl Workload {
    /// Rollouts in one run.
    pub fn rollouts(self) -> usize {
        self.groups * self.group_size
    }
}

impl Installed {
    /// Builds the example (release) and creates the peer's virtualenv when missing.
    pub fn prepare() -> anyhow::Result<Self> {
        let target = target_dir()?;
        Ok(Installed {
            rust_bin: build_example(&target)?,
            python: python_venv(&target)?,
            target,
        })
    }

    /// The cargo target directory.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The command line of one `process` run of `framework` writing into `dir`.
    pub fn command(&self, framework: Framework, work: Workload, url: &str, dir: &Path) -> Command {
        let mut cmd = match framework {
            Framework::Rust { .. } => Command::new(&self.rust_bin),
            Framework::Python => {
                let mut c = Command::new(&self.python);
                c.arg(Path::new(REPO).join("benches/python_peer/terminal_test_env.py"));
                c
            }
        };
        let tokenizer = hermes_runtime::llm::ChatTokenizer::builtin_dir();
        let (groups, group_size) = (work.groups.to_string(), work.group_size.to_string());
        let out = dir.join("out.jsonl");
        cmd.args(["process", "--env.total_steps", &groups])
            .args(["--env.group_size", &group_size])
            .args(["--env.use_wandb", "false"])
            .arg("--env.data_path_to_save_groups")
            .arg(&out)
            .args(["--openai.base_url", url])
            .args(["--openai.model_name", "scripted"])
            .args(["--openai.server_type", "openai"])
            .args(["--openai.health_check", "false"])
            .args(["--openai.api_key", "x"]);
        if let Framework::Rust {
            workers: Some(w), ..
        } = framework
        {
            cmd.args(["--env.max_num_workers", &w.to_string()]);
        }
        if !matches!(
            framework,
            Framework::Rust {
                retokenize: false,
                ..
            }
        ) {
            cmd.arg("--env.tokenizer_name").arg(&tokenizer);
        }
        let log = |name: &str| {
            std::fs::File::create(dir.join(name))
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null())
        };
        cmd.current_dir(dir)
            .env("TMPDIR", dir)
            .env("HF_HUB_OFFLINE", "1")
            .env("WANDB_MODE", "disabled")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENROUTER_API_KEY")
            .stdin(Stdio::null())
            .stdout(log("stdout.log"))
            .stderr(log("stderr.log"));
        cmd
    }
}

/// Checks the JSONL a run wrote: `groups` lines of `group_size` rollouts, each with
/// [`TURNS`] assistant turns, one tool result per tool turn, and reward 1.0.
/// Reads one line at a time: this process's peak RSS must stay small, since a child started
/// with posix_spawn inherits it in its `ru_maxrss` (the kernel records the pre-exec memory).
pub fn check_output(dir: &Path, work: Workload) -> anyhow::Result<()> {
    use std::io::BufRead;
    let file = std::fs::File::open(dir.join("out.jsonl")).context("the run's JSONL")?;
    let mut groups = 0;
    for line in std::io::BufReader::new(file).lines() {
        let g: Value = serde_json::from_str(&line?)?;
        groups += 1;
        let scores = g["scores"].as_array().context("scores")?;
        ensure!(
            scores.len() == work.group_size && scores.iter().all(|s| s.as_f64() == Some(1.0)),
            "scores {scores:?}"
        );
        for convo in g["messages"].as_array().context("messages")? {
            let count = |role: &str| {
                convo
                    .as_array()
                    .map_or(0, |m| m.iter().filter(|m| m["role"] == role).count())
            };
            ensure!(
                count("assistant") == TURNS && count("tool") == TURNS - 1,
                "a rollout with {} assistant and {} tool messages",
                count("assistant"),
                count("tool")
            );
        }
    }
    ensure!(groups == work.groups, "{groups} groups written");
    Ok(())
}

/// `target/` (this bench runs as `target/release/deps/vs_python-HASH`).
fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .context("target directory of the bench executable")
}

/// `cargo build --release --example terminal_test` (a no-op when it is up to date).
fn build_example(target: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    // The variables cargo set for running this bench: build scripts that watch them (ring
    // watches CARGO_MANIFEST_DIR and CARGO_PKG_*) would otherwise rebuild half the tree.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_for_targets = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
        ]
        .iter()
        .any(|p| key.starts_with(p))
            || [
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&key.as_ref());
        if set_for_targets {
            build.env_remove(key.as_ref());
        }
    }
    let status = build
        .args(["build", "--release", "--example", "terminal_test"])
        .current_dir(REPO)
        .env("CARGO_TARGET_DIR", target)
        .status()
        .context("running cargo to build the terminal_test example")?;
    ensure!(
        status.success(),
        "cargo build --release --example terminal_test failed"
    );
    Ok(target.join("release/examples/terminal_test"))
}

/// `target/python-peer-venv/bin/python` with the peer's pinned requirements installed
/// (created once, under a lock). Fails saying what is missing.
fn python_venv(target: &Path) -> anyhow::Result<PathBuf> {
    let venv = target.join("python-peer-venv");
    let python = venv.join("bin/python");
    let lock = std::fs::File::create(target.join("python-peer-venv.lock"))?;
    // SAFETY: flock on a file descriptor we own; released when `lock` is dropped.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let ready = || {
        Command::new(&python)
            .args(["-c", "import atroposlib.envs.base, openai, transformers"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready() {
        return Ok(python);
    }
    let requirements = Path::new(REPO).join("benches/python_peer/requirements.txt");
    eprintln!(
        "creating {} (pip install -r {})",
        venv.display(),
        requirements.display()
    );
    let step = |program: &Path, args: &[&std::ffi::OsStr]| -> anyhow::Result<()> {
        let out = Command::new(program).args(args).output().with_context(|| {
            format!(
                "the Python peer needs Python 3 with pip: cannot run {}",
                program.display()
            )
        })?;
        if !out.status.success() {
            bail!(
                "the Python peer needs its pinned packages from PyPI: {} failed:\n{}",
                program.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    };
    step(
        Path::new("python3"),
        &["-m".as_ref(), "venv".as_ref(), venv.as_os_str()],
    )?;
    step(
        &venv.join("bin/pip"),
        &[
            "install".as_ref(),
            "--quiet".as_ref(),
            "-r".as_ref(),
            requirements.as_os_str(),
        ],
    )?;
    ensure!(
        ready(),
        "{} cannot import atroposlib after the install",
        python.display()
    );
    Ok(python)
}
