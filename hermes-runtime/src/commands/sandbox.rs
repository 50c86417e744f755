//! `sandbox list|reap`: shows and removes this project's labelled Docker containers by hand
//! (the start-up reaper of every Docker-backed run does the same for orphans automatically).

use anyhow::Context as _;
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::sandbox::docker::reaper::{self, ManagedContainer};
use crate::sandbox::docker::Endpoint;

/// The clap definition of `sandbox`.
pub fn command() -> Command {
    Command::new("sandbox")
        .about("List or remove this project's sandbox containers (Docker backend)")
        .subcommand_required(true)
        .arg(
            Arg::new("docker_host")
                .long("docker-host")
                .value_name("URL")
                .global(true)
                .help("Docker daemon address (default: DOCKER_HOST or the local socket)"),
        )
        .subcommand(
            Command::new("list")
                .about("Show every labelled container: task, owner process, state, age"),
        )
        .subcommand(
            Command::new("reap")
                .about("Remove orphaned containers (owner process gone, or past their deadline)")
                .arg(
                    Arg::new("all")
                        .long("all")
                        .action(ArgAction::SetTrue)
                        .help("Remove every labelled container, also those of running processes"),
                ),
        )
}

/// Runs `sandbox list` or `sandbox reap`.
pub async fn run(matches: &ArgMatches) -> anyhow::Result<()> {
    let host = matches.get_one::<String>("docker_host").map(String::as_str);
    let (docker, endpoint) = Endpoint::connect(host).await?;
    match matches.subcommand() {
        Some(("list", _)) => {
            let containers = reaper::list(&docker)
                .await
                .with_context(|| format!("listing containers at {}", endpoint.host))?;
            print!(
                "{}",
                render(&containers, crate::sandbox::docker::unix_now())
            );
        }
        Some(("reap", sub)) => {
            let removed = reaper::reap(&docker, sub.get_flag("all")).await?;
            for c in &removed {
                println!("removed {} (task {}, {})", c.name, c.task_id, c.state);
            }
            println!("{} container(s) removed", removed.len());
        }
        _ => anyhow::bail!("usage: sandbox list | sandbox reap [--all]"),
    }
    Ok(())
}

/// The `sandbox list` table.
fn render(containers: &[ManagedContainer], now: u64) -> String {
    let mut out = format!(
        "{:<24} {:<38} {:<16} {:<14} {:<8} {:>7}  {}\n",
        "NAME", "TASK", "ENV", "OWNER", "STATE", "AGE", "ORPHAN"
    );
    for c in containers {
        let owner = match (&c.owner, c.owner_alive) {
            (Some(o), Some(true)) => format!("{} (alive)", o.pid),
            (Some(o), Some(false)) => format!("{} (gone)", o.pid),
            (Some(o), None) => format!("{}@{}", o.pid, o.host),
            (None, _) => "-".into(),
        };
        out.push_str(&format!(
            "{:<24} {:<38} {:<16} {:<14} {:<8} {:>6}s  {}\n",
            c.name,
            c.task_id,
            c.env,
            owner,
            c.state,
            now.saturating_sub(c.created),
            if c.is_orphan(now) { "yes" } else { "no" }
        ));
    }
    out.push_str(&format!("{} container(s)\n", containers.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::docker::Owner;

    #[test]
    fn the_table_marks_orphans() {
        let me = Owner::current();
        let c = ManagedContainer {
            id: "abc".into(),
            name: "hermes-t1-0123abcd".into(),
            task_id: "t1".into(),
            env: "swe-pytest".into(),
            image: "hermes-env/python:latest".into(),
            state: "running".into(),
            owner: Some(Owner { pid: 42, ..me }),
            owner_alive: Some(false),
            created: 100,
            deadline: Some(10_000),
        };
        let table = render(&[c], 160);
        assert!(table.contains("hermes-t1-0123abcd"));
        assert!(table.contains("42 (gone)"));
        assert!(table.contains("60s  yes"));
        assert!(table.ends_with("1 container(s)\n"));
    }
}
