//! `check`: the oracle. Plays every item's reference solution (the training items from
//! `get_next_item`, up to `--limit`, then the eval items) through the real sandbox and
//! verifier and reports every item that does not reach `--min-score`, so a broken verifier or
//! task is caught before training (terminal-bench's oracle agent does the same). Exits
//! non-zero when any item fails. Other arguments are the `process` mode's flags
//! (`--env.terminal_backend docker`, `--config FILE`, …).

use crate::diagnostics::printable;
use clap::{Arg, ArgMatches, Command};

use crate::env::Environment;
use crate::testing::{CheckOptions, Kit};

/// The clap definition of `check`.
pub fn command() -> Command {
    Command::new("check")
        .about("Run every item's reference solution through the sandbox and verifier; report items below the maximum score")
        .arg(
            Arg::new("limit")
                .long("limit")
                .value_name("N")
                .default_value("100")
                .value_parser(clap::value_parser!(usize))
                .help("Most training items to draw from get_next_item (repeated items run once)"),
        )
        .arg(
            Arg::new("min-score")
                .long("min-score")
                .value_name("SCORE")
                .default_value("1.0")
                .value_parser(clap::value_parser!(f64))
                .help("Lowest passing score"),
        )
        .arg(
            Arg::new("concurrency")
                .long("concurrency")
                .value_name("N")
                .default_value("4")
                .value_parser(clap::value_parser!(usize))
                .help("Items checked at once"),
        )
        .arg(
            Arg::new("table")
                .long("table")
                .action(clap::ArgAction::SetTrue)
                .help("Print one line per item (label, reward, outcome, verdict), not only the failures"),
        )
        .arg(
            Arg::new("json")
                .long("json")
                .value_name("FILE")
                .value_parser(clap::value_parser!(std::path::PathBuf))
                .help("Also write the report (every item) as JSON to FILE"),
        )
}

/// Runs `check` for environment `E`.
pub async fn run<E: Environment>(matches: &ArgMatches) -> anyhow::Result<()> {
    let options = CheckOptions {
        limit: *matches.get_one::<usize>("limit").expect("has a default"),
        min_score: *matches.get_one::<f64>("min-score").expect("has a default"),
        concurrency: *matches
            .get_one::<usize>("concurrency")
            .expect("has a default"),
    };
    let flags = super::process_flags::<E>(matches);
    let mut kit = Kit::<E>::builder().args(flags).start().await?;
    let report = kit.check(&options).await;
    if let Some(path) = matches.get_one::<std::path::PathBuf>("json") {
        super::write_json(path, &report)?;
    }
    if matches.get_flag("table") {
        for item in &report.items {
            println!(
                "{:<40} {:>6.3}  {:<16} {}",
                item.label(),
                item.reward,
                crate::testing::outcome_kind(&item.outcome),
                if item.passed { "pass" } else { "FAIL" }
            );
        }
    }
    let failures = report.failures();
    for failure in &failures {
        println!("FAIL {}", printable(&failure.describe()));
    }
    let dup = if report.duplicates_skipped > 0 {
        format!(
            " ({} repeated training items skipped)",
            report.duplicates_skipped
        )
    } else {
        String::new()
    };
    println!(
        "check: {} items, {} passed, {} failed (min score {}){dup}",
        report.items.len(),
        report.items.len() - failures.len(),
        failures.len(),
        options.min_score
    );
    anyhow::ensure!(
        !report.items.is_empty(),
        "the environment produced no items to check"
    );
    anyhow::ensure!(
        failures.is_empty(),
        "{} of {} items did not reach {} with their reference solution",
        failures.len(),
        report.items.len(),
        options.min_score
    );
    Ok(())
}
