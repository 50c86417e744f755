//! hermes-env against the Python original, in one run: the `terminal_test` example
//! (release, `process` mode) and a Python peer of it on atroposlib 0.4.0's `BaseEnv` with a
//! Hermes-style tool loop (`benches/python_peer/`), both against the same scripted
//! OpenAI-compatible server in its own process (4 turns per rollout, 3 of them `terminal`
//! calls), 32 groups × 8 rollouts, median of 3 runs each (runs interleaved). Prints, per LLM
//! turn, the framework's own CPU (user + system of its process, without children and without
//! the server), the total CPU with the tools' child processes, rollouts/s and peak RSS, then
//! the ratios against issue #14's targets: framework CPU ≥ 20×, total CPU ≥ 4×, rollouts/s
//! ≥ 5×.
//!
//! Run: `cargo bench --bench vs_python` (`-- --quick`: 8 groups, one run each; `-- --callgrind`:
//! instructions per turn of the Rust side instead, see `callgrind.rs`; `-- --tmpfs`: every run's
//! directory, which is both frameworks' `TMPDIR` and so holds their sandboxes, in `/dev/shm`
//! instead of the system temp dir). The first run creates `target/python-peer-venv` from
//! `benches/python_peer/requirements.txt` (PyPI).

mod callgrind;
mod frameworks;
mod measure;
mod scripted;

use std::time::Duration;

use frameworks::{check_output, Framework, Installed, Workload};
use measure::Cost;
use scripted::{ServerProcess, SERVER_FLAG, TURNS};

/// Puts the runs' directories (and so both frameworks' sandboxes) on tmpfs: on a filesystem
/// that makes every new file slower while recently deleted ones pile up (ext4 without a
/// journal), the sandboxes' directories cost each framework the same time, which grows over a
/// session of runs and swamps what the frameworks themselves cost.
const TMPFS_FLAG: &str = "--tmpfs";

/// The acceptance targets: (what, Python / Rust ratio wanted).
const TARGETS: [(&str, f64); 3] = [
    ("framework CPU per turn", 20.0),
    ("total CPU per turn", 4.0),
    ("rollouts/s", 5.0),
];

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == SERVER_FLAG) {
        return scripted::serve();
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let (work, runs) = if quick {
        (
            Workload {
                groups: 8,
                group_size: 8,
            },
            1,
        )
    } else {
        (
            Workload {
                groups: 32,
                group_size: 8,
            },
            3,
        )
    };
    let installed = Installed::prepare()?;
    let mut server = ServerProcess::start()?;
    if std::env::args().any(|a| a == "--callgrind") {
        callgrind::run(&installed, &mut server)?;
        return server.stop();
    }
    let frameworks = [
        Framework::Rust {
            workers: None,
            retokenize: true,
        },
        Framework::Rust {
            workers: Some(1),
            retokenize: true,
        },
        Framework::Rust {
            workers: None,
            retokenize: false,
        },
        Framework::Python,
    ];
    println!(
        "hermes-env vs the Python peer: {} groups x {} rollouts x {TURNS} turns (3 terminal calls), \
         scripted server in its own process, {runs} run(s) each, {} cores, sandboxes in {}",
        work.groups,
        work.group_size,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if std::env::args().any(|a| a == TMPFS_FLAG) {
            "/dev/shm".to_owned()
        } else {
            std::env::temp_dir().display().to_string()
        }
    );
    let mut costs: Vec<Vec<Cost>> = vec![Vec::new(); frameworks.len()];
    for round in 0..runs {
        // Rotate the order each round so drift on a shared machine hits everyone alike.
        for k in 0..frameworks.len() {
            let i = (k + round) % frameworks.len();
            let cost = run_once(&installed, frameworks[i], work, &mut server)?;
            print_row(
                &format!("run {}: {}", round + 1, frameworks[i].label()),
                &cost,
                work,
            );
            costs[i].push(cost);
        }
    }
    server.stop()?;
    println!("\nmedians:");
    print_header();
    let medians: Vec<Cost> = costs.iter().map(|c| median(c)).collect();
    for (f, m) in frameworks.iter().zip(&medians) {
        print_row(&f.label(), m, work);
    }
    let python = &medians[3];
    for (f, m) in frameworks.iter().zip(&medians).take(3) {
        print_ratios(m, python, &f.label());
    }
    println!(
        "\nown = user+sys of the framework process (clock ticks, /proc/PID/stat at exit; of it sys = \
         the kernel's part, split from user time by tick sampling); child = its reaped children \
         (tool shells, commands); whole process incl. start-up; RSS = ru_maxrss"
    );
    Ok(())
}

/// One `process` run of `framework` in a fresh directory; checks its output and that the
/// server answered exactly the expected number of turns.
fn run_once(
    installed: &Installed,
    framework: Framework,
    work: Workload,
    server: &mut ServerProcess,
) -> anyhow::Result<Cost> {
    let dir = if std::env::args().any(|a| a == TMPFS_FLAG) {
        tempfile::tempdir_in("/dev/shm")?
    } else {
        tempfile::tempdir()?
    };
    let before = server.request_count()?;
    let cost = measure::run(&mut installed.command(framework, work, &server.base_url, dir.path()))
        .map_err(|e| {
            let log = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            e.context(format!(
                "{}; stderr ends:\n{}",
                framework.label(),
                tail.join("\n")
            ))
        })?;
    check_output(dir.path(), work)
        .map_err(|e| e.context(format!("{}: wrong output", framework.label())))?;
    let turns = server.request_count()? - before;
    anyhow::ensure!(
        turns as usize == work.rollouts() * TURNS,
        "{}: {turns} chat requests, expected {}",
        framework.label(),
        work.rollouts() * TURNS
    );
    Ok(cost)
}

fn median(costs: &[Cost]) -> Cost {
    let mid = |f: fn(&Cost) -> f64| {
        let mut v: Vec<f64> = costs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Cost {
        own: Duration::from_secs_f64(mid(|c| c.own.as_secs_f64())),
        own_system: Duration::from_secs_f64(mid(|c| c.own_system.as_secs_f64())),
        total: Duration::from_secs_f64(mid(|c| c.total.as_secs_f64())),
        wall: Duration::from_secs_f64(mid(|c| c.wall.as_secs_f64())),
        rss_mb: mid(|c| c.rss_mb),
    }
}

fn per_turn_ms(d: Duration, work: Workload) -> f64 {
    d.as_secs_f64() * 1e3 / (work.rollouts() * TURNS) as f64
}

fn print_header() {
    println!(
        "{:<40} {:>13} {:>10} {:>15} {:>15} {:>11} {:>8} {:>8}",
        "",
        "own ms/turn",
        "of it sys",
        "child ms/turn",
        "total ms/turn",
        "rollouts/s",
        "wall s",
        "RSS MB"
    );
}

fn print_row(label: &str, c: &Cost, work: Workload) {
    let (own, total) = (per_turn_ms(c.own, work), per_turn_ms(c.total, work));
    println!(
        "{label:<40} {own:>13.3} {:>10.3} {:>15.3} {total:>15.3} {:>11.1} {:>8.2} {:>8.1}",
        per_turn_ms(c.own_system, work),
        total - own,
        work.rollouts() as f64 / c.wall.as_secs_f64(),
        c.wall.as_secs_f64(),
        c.rss_mb
    );
}

/// Python / Rust ratios of the medians against [`TARGETS`].
fn print_ratios(rust: &Cost, python: &Cost, label: &str) {
    let ratios = [
        python.own.as_secs_f64() / rust.own.as_secs_f64().max(1e-9),
        python.total.as_secs_f64() / rust.total.as_secs_f64().max(1e-9),
        python.wall.as_secs_f64() / rust.wall.as_secs_f64().max(1e-9),
    ];
    println!("\n{label} vs the Python peer (ratio, target, verdict):");
    for ((what, target), ratio) in TARGETS.iter().zip(ratios) {
        let verdict = if ratio >= *target {
            "met".to_owned()
        } else {
            format!("NOT met ({:.0}% of the target)", ratio / target * 100.0)
        };
        println!("  {what:<24} {ratio:>7.1}x   >= {target:>4.0}x   {verdict}");
    }
    println!(
        "  peak RSS                 {:>7.1}x   (Python {:.0} MB / Rust {:.0} MB)",
        python.rss_mb / rust.rss_mb.max(1e-9),
        python.rss_mb,
        rust.rss_mb
    );
}
