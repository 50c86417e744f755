//! `-- --callgrind`: instructions per LLM turn of the Rust framework, counted by valgrind's
//! callgrind (repeatable on a noisy machine, unlike CPU time). The `terminal_test` example
//! runs twice under callgrind against the scripted server, with 1 and 4 groups of 4 rollouts
//! (one group at a time); the difference divided by the extra turns is the marginal cost of
//! a turn, start-up excluded (per-rollout work — sandbox, reward, JSONL — is spread over its
//! 4 turns). The profiles stay in `target/callgrind/` for `callgrind_annotate`.

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context as _};

use crate::frameworks::{check_output, Framework, Installed, Workload};
use crate::scripted::{ServerProcess, TURNS};

/// Runs both workloads and prints the instruction counts.
pub fn run(installed: &Installed, server: &mut ServerProcess) -> anyhow::Result<()> {
    let found = Command::new("valgrind").arg("--version").output();
    ensure!(
        found.is_ok_and(|o| o.status.success()),
        "--callgrind needs valgrind (apt-get install valgrind)"
    );
    let out_dir = installed.target().join("callgrind");
    std::fs::create_dir_all(&out_dir)?;
    let small = Workload {
        groups: 1,
        group_size: 4,
    };
    let large = Workload {
        groups: 4,
        group_size: 4,
    };
    let mut counts = Vec::new();
    for work in [small, large] {
        let dir = tempfile::tempdir()?;
        let profile = out_dir.join(format!("terminal_test.{}groups.out", work.groups));
        let framework = Framework::Rust {
            workers: Some(1),
            retokenize: true,
        };
        let cmd = installed.command(framework, work, &server.base_url, dir.path());
        let program = cmd.get_program().to_owned();
        let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
        let mut valgrind = Command::new("valgrind");
        valgrind
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", profile.display()))
            .arg(program)
            .args(args);
        // Same directory, environment and log files as the plain run.
        valgrind.current_dir(dir.path());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => valgrind.env(k, v),
                None => valgrind.env_remove(k),
            };
        }
        let status = valgrind
            .stdout(std::fs::File::create(dir.path().join("stdout.log"))?)
            .stderr(std::fs::File::create(dir.path().join("stderr.log"))?)
            .status()?;
        ensure!(
            status.success(),
            "callgrind run failed: {}",
            std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default()
        );
        check_output(dir.path(), work)?;
        counts.push((work, instructions(&profile)?));
    }
    let [(s, s_ir), (l, l_ir)] = counts[..] else {
        unreachable!("two workloads")
    };
    let extra_turns = ((l.rollouts() - s.rollouts()) * TURNS) as f64;
    let per_turn = (l_ir - s_ir) as f64 / extra_turns;
    let startup = s_ir as f64 - per_turn * (s.rollouts() * TURNS) as f64;
    println!("callgrind, hermes-env terminal_test (one group of 4 at a time):");
    println!(
        "  {} groups: {s_ir} instructions; {} groups: {l_ir}",
        s.groups, l.groups
    );
    println!("  per LLM turn: {per_turn:.0} instructions; start-up and shutdown: {startup:.0}");
    println!("  profiles: {}", out_dir.display());
    Ok(())
}

/// The total instruction count of a callgrind profile (its `summary:` line).
fn instructions(profile: &Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(profile)?;
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .or_else(|| text.lines().find_map(|l| l.strip_prefix("totals:")))
        .context("no summary line in the callgrind profile")?
        .trim()
        .parse()
        .context("callgrind summary")
}
