//! `sandbox list|reap`: shows and removes this project's labelled Docker containers by hand
//! (the reaper of every Docker-backed run does the same for orphans automatically, by the same
//! rule: a container whose run holds a live lease is never an orphan). The daemons are the
//! run's own: its `--config` and `--env.docker_hosts` / `--env.docker_host` flags, as typed
//! after a run, or `--docker-host` addresses.

use std::io::Write as _;

use anyhow::Context as _;
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::config::cli::resolve_flags;
use crate::config::Mode;
use crate::env::EnvDefinition;
use crate::sandbox::docker::reaper::{self, ManagedContainer};
use crate::sandbox::docker::{watchdog, Endpoint};

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
                .action(ArgAction::Append)
                .help("Docker daemon address, repeatable for every host of --env.docker_hosts (default: DOCKER_HOST or the local socket)"),
        )
        .subcommand(
            Command::new("list")
                .about("Show every labelled container: task, owning run and whether it is alive, state, age, deadline"),
        )
        .subcommand(
            Command::new("reap")
                .about("Remove orphaned containers (their run holds no live lease)")
                .arg(
                    Arg::new("all")
                        .long("all")
                        .action(ArgAction::SetTrue)
                        .help("Remove every labelled container, also those of running processes"),
                ),
        )
        .subcommand(
            Command::new("watch")
                .hide(true)
                .about("A run's watchdog (started by the run itself): after the run dies, removes its containers")
                .arg(Arg::new("run_id").long("run-id").required(true)),
        )
}

/// Runs `sandbox list` or `sandbox reap` on every daemon of the run (one after another, each
/// headed by its address when there are several), or the hidden `sandbox watch`.
pub async fn run<E: EnvDefinition>(matches: &ArgMatches) -> anyhow::Result<()> {
    let hosts = hosts::<E>(matches)?;
    let several = hosts.len() > 1;
    for host in hosts {
        let (docker, endpoint) = Endpoint::connect(host.as_deref()).await?;
        if several && !matches!(matches.subcommand_name(), Some("watch")) {
            println!("host {}:", endpoint.host);
        }
        run_on(matches, &docker, &endpoint).await?;
        if matches!(matches.subcommand_name(), Some("watch")) {
            break;
        }
    }
    Ok(())
}

/// The daemons to act on: `--docker-host` addresses, else those of the run its flags
/// describe (`--env.docker_hosts`, else `--env.docker_host`), else `DOCKER_HOST` or the local
/// socket (`None`).
fn hosts<E: EnvDefinition>(matches: &ArgMatches) -> anyhow::Result<Vec<Option<String>>> {
    let given: Vec<String> = matches
        .get_many::<String>("docker_host")
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    // `list` and `reap` take the run's flags; the hidden `watch` has none.
    let flags = match matches.subcommand() {
        Some(("list" | "reap", sub)) => super::process_flags::<E>(sub),
        _ => Vec::new(),
    };
    if flags.is_empty() {
        return Ok(match given.is_empty() {
            true => vec![None],
            false => given.into_iter().map(Some).collect(),
        });
    }
    anyhow::ensure!(
        given.is_empty(),
        "give the daemons either as --docker-host or through the run's flags, not both"
    );
    let cfg = resolve_flags(&E::descriptor(), Mode::Process, &flags)?;
    let env = &cfg.env;
    Ok(match (&env.docker_hosts, &env.docker_host) {
        (Some(hosts), _) if !hosts.is_empty() => hosts.iter().cloned().map(Some).collect(),
        (_, Some(host)) => vec![Some(host.clone())],
        (_, None) => {
            if env.terminal_backend != "docker" {
                eprintln!(
                    "note: this run's --env.terminal_backend is '{}' and names no Docker host; \
                     acting on DOCKER_HOST or the local daemon",
                    env.terminal_backend
                );
            }
            vec![None]
        }
    })
}

async fn run_on(
    matches: &ArgMatches,
    docker: &bollard::Docker,
    endpoint: &Endpoint,
) -> anyhow::Result<()> {
    match matches.subcommand() {
        Some(("list", _)) => {
            let containers = reaper::list(docker)
                .await
                .with_context(|| format!("listing containers at {}", endpoint.host))?;
            print!(
                "{}",
                render(&containers, crate::sandbox::docker::unix_now())
            );
        }
        Some(("reap", sub)) => {
            let removed = reaper::reap(docker, sub.get_flag("all"))
                .await
                .with_context(|| format!("reaping at {}", endpoint.host))?;
            for c in &removed {
                println!("removed {} (task {}, {})", c.name, c.task_id, c.state);
            }
            println!("{} container(s) removed", removed.len());
        }
        Some(("watch", sub)) => {
            let run_id = sub.get_one::<String>("run_id").map_or("", String::as_str);
            let watched = watchdog::watch(docker, run_id).await?;
            if !watched.clean && watched.removed > 0 {
                // Its parent may be gone with the terminal: a failed write is no error.
                let _ = writeln!(
                    std::io::stderr(),
                    "sandbox watch: run {run_id} ended without cleaning up; removed {} container(s)",
                    watched.removed
                );
            }
        }
        _ => anyhow::bail!("usage: sandbox list | sandbox reap [--all]"),
    }
    Ok(())
}

/// The `sandbox list` table.
fn render(containers: &[ManagedContainer], now: u64) -> String {
    let row = |cells: [&str; 11]| {
        format!(
            "{:<32} {:<8} {:<36} {:<16} {:<12} {:<5} {:<12} {:<8} {:>7} {:>9}  {}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            cells[7],
            cells[8],
            cells[9],
            cells[10]
        )
    };
    let mut out = row([
        "NAME", "ROLE", "TASK", "ENV", "RUN", "ALIVE", "PROCESS", "STATE", "AGE", "DEADLINE",
        "ORPHAN",
    ]);
    for c in containers {
        let (run, alive, process) = match &c.owner {
            Some(o) => (
                o.run_id.chars().take(12).collect(),
                if c.owner_alive { "yes" } else { "no" },
                format!("{}@{}", o.pid, o.host),
            ),
            None => ("-".to_owned(), "-", "-".to_owned()),
        };
        let deadline = match c.deadline {
            Some(d) if d >= now => format!("in {}s", d - now),
            Some(_) => "passed".to_owned(),
            None => "-".to_owned(),
        };
        out.push_str(&row([
            &c.name,
            if c.role.is_empty() { "-" } else { &c.role },
            &c.task_id,
            &c.env,
            &run,
            alive,
            &process,
            &c.state,
            &format!("{}s", now.saturating_sub(c.created)),
            &deadline,
            if c.is_orphan(now) { "yes" } else { "no" },
        ]));
    }
    out.push_str(&format!("{} container(s)\n", containers.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::docker::Owner;

    fn container(role: &str, alive: bool) -> ManagedContainer {
        ManagedContainer {
            id: "abc".into(),
            name: "hermes-t1-0123abcd".into(),
            role: role.into(),
            task_id: "t1".into(),
            env: "swe-pytest".into(),
            image: "hermes-env/python:latest".into(),
            state: "running".into(),
            owner: Some(Owner {
                run_id: "0123456789abcdef0123456789abcdef".into(),
                pid: 42,
                start: 7,
                host: "box".into(),
            }),
            owner_alive: alive,
            created: 100,
            deadline: Some(400),
        }
    }

    #[test]
    fn the_table_shows_run_liveness_age_deadline_and_orphans() {
        let table = render(
            &[container("sandbox", false), container("sandbox", true)],
            160,
        );
        let lines: Vec<&str> = table.lines().collect();
        for column in ["RUN", "ALIVE", "STATE", "AGE", "DEADLINE", "ORPHAN"] {
            assert!(lines[0].contains(column), "{}", lines[0]);
        }
        let dead: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            dead,
            [
                "hermes-t1-0123abcd",
                "sandbox",
                "t1",
                "swe-pytest",
                "0123456789ab",
                "no",
                "42@box",
                "running",
                "60s",
                "in",
                "240s",
                "yes"
            ]
        );
        assert!(lines[2].ends_with("in 240s  no"), "{}", lines[2]);
        assert_eq!(lines[3], "2 container(s)");
    }
}
