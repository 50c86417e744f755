//! `wandb sync DIR…`: uploads run directories written offline (or online runs whose uploads
//! failed) to W&B, configured by the same `WANDB_*` variables as a run.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::wandb::run_dir::find_runs;
use crate::wandb::{sync_run, WandbSettings};

/// The clap definition of `wandb`.
pub fn command() -> Command {
    Command::new("wandb")
        .about("Weights & Biases utilities")
        .subcommand_required(true)
        .subcommand(
            Command::new("sync")
                .about("Upload run directories (wandb/offline-run-…) to W&B")
                .arg(
                    Arg::new("dirs")
                        .value_name("DIR")
                        .required(true)
                        .action(ArgAction::Append)
                        .value_parser(clap::value_parser!(PathBuf))
                        .help("A run directory, or a directory holding run directories (e.g. ./wandb)"),
                ),
        )
}

/// Runs `wandb sync`.
pub async fn run(matches: &ArgMatches) -> anyhow::Result<()> {
    let Some(("sync", sync)) = matches.subcommand() else {
        anyhow::bail!("unknown wandb subcommand");
    };
    let settings = WandbSettings::from_env()?;
    let mut runs = Vec::new();
    for dir in sync.get_many::<PathBuf>("dirs").into_iter().flatten() {
        let found = find_runs(dir);
        anyhow::ensure!(
            !found.is_empty(),
            "{}: no run directory (a directory with run.json) found",
            dir.display()
        );
        runs.extend(found);
    }
    for run in runs {
        let report = sync_run(&settings, &run)
            .await
            .with_context(|| format!("cannot sync {}", run.display()))?;
        println!(
            "synced {} ({} rows): {}",
            report.run_dir.display(),
            report.rows,
            report.url
        );
    }
    Ok(())
}
