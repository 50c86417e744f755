//! `openenv`: serves the environment over the OpenEnv wire (`openenv-core`'s HTTP and
//! WebSocket protocol) until stopped, so a trainer's own agent loop drives its episodes: one
//! WebSocket session = one item, its own sandbox and tools; the final answer runs the
//! verifier. Other arguments are the `process` mode's flags (`--config FILE`, `--env.*`,
//! `--openai.*`); no inference server is needed unless the verifier calls an LLM judge.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Arg, ArgMatches, Command};

use crate::config::{Mode, ResolvedConfig};
use crate::env::Environment;
use crate::modes::openenv::{serve, start, OpenEnvOptions, SessionLimits};
use crate::shutdown::Shutdown;

/// The clap definition of `openenv`.
pub fn command() -> Command {
    serving_args(
        Command::new("openenv")
            .about("Serve the environment over the OpenEnv wire (HTTP + WebSocket /ws, MCP actions) for a trainer's agent loop"),
        "WebSocket sessions",
    )
}

/// The flags of the serving modes (`openenv`, `mcp`): where to listen, the session limits and
/// the `process` mode's flags.
pub(super) fn serving_args(command: Command, sessions: &'static str) -> Command {
    let number = |name: &'static str, value: &'static str, default: &'static str, help: String| {
        Arg::new(name)
            .long(name)
            .value_name(value)
            .default_value(default)
            .value_parser(clap::value_parser!(u64))
            .help(help)
    };
    command
        .arg(
            Arg::new("host")
                .long("host")
                .value_name("HOST")
                .default_value("127.0.0.1")
                .value_parser(clap::value_parser!(IpAddr))
                .help("Address to listen on"),
        )
        .arg(
            Arg::new("port")
                .long("port")
                .value_name("PORT")
                .default_value("8000")
                .value_parser(clap::value_parser!(u16))
                .help("Port to listen on (0 picks a free one)"),
        )
        .arg(number(
            "max-sessions",
            "N",
            "64",
            format!("Most concurrent {sessions}; more are refused with CAPACITY_REACHED"),
        ))
        .arg(number(
            "idle-timeout",
            "SECONDS",
            "300",
            "A session without a message for this long is closed and its sandbox removed".into(),
        ))
        .arg(number(
            "session-lifetime",
            "SECONDS",
            "3600",
            "A session is closed after this long however busy (checked between messages)".into(),
        ))
}

/// The configuration of environment `E` and the serving options [`serving_args`] gave.
pub(super) fn serving_options<E: Environment>(
    matches: &ArgMatches,
) -> anyhow::Result<(ResolvedConfig, OpenEnvOptions)> {
    let seconds =
        |name: &str| Duration::from_secs(*matches.get_one::<u64>(name).expect("has a default"));
    let host = *matches.get_one::<IpAddr>("host").expect("has a default");
    let port = *matches.get_one::<u16>("port").expect("has a default");
    let flags = super::process_flags::<E>(matches);
    let cfg = crate::config::cli::resolve_flags(&E::descriptor(), Mode::Process, flags)?;
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let grace = crate::shutdown::grace(cfg.env.shutdown_grace);
    let options = OpenEnvOptions {
        addr: SocketAddr::new(host, port),
        limits: SessionLimits {
            max_sessions: usize::try_from(
                *matches
                    .get_one::<u64>("max-sessions")
                    .expect("has a default"),
            )
            .context("--max-sessions is too large")?,
            idle_timeout: seconds("idle-timeout"),
            lifetime: seconds("session-lifetime"),
        },
        grace,
    };
    if let Some(line) = descriptor_shortfall(options.limits.max_sessions, open_file_limit()) {
        tracing::warn!("{line}");
    }
    Ok((cfg, options))
}

/// This process's open-file limit (the generated `main` raised it to the hard limit at
/// start); 0 when it cannot be read.
fn open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) only writes the struct we pass.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
        0 => limit.rlim_cur,
        _ => 0,
    }
}

/// Open files one busy session can hold at once: its socket and its sandbox's persistent
/// shell's three pipes (a local sandbox opens its Landlock ruleset and cgroup only while one
/// of its processes starts, a few at a time across the host's command queue).
const FILES_PER_SESSION: usize = 4;

/// Files this process keeps besides its sessions (the listener, the runtime's, logs).
const FILES_BESIDES: usize = 64;

/// A warning when `max_sessions` busy sessions could open more files than the process may
/// (`limit`): past that, a session's sandbox fails to open a file (a sandbox failure of that
/// episode, never a reward), so the user hears it at start instead of mid-run.
fn descriptor_shortfall(max_sessions: usize, limit: u64) -> Option<String> {
    let needed = max_sessions
        .saturating_mul(FILES_PER_SESSION)
        .saturating_add(FILES_BESIDES);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    (limit > 0 && needed > limit).then(|| {
        format!(
            "--max-sessions {max_sessions}: busy sessions can hold up to {FILES_PER_SESSION} open files each \
             (the socket, the sandbox's), {needed} in all, over this process's limit of {limit}: from about \
             {} busy sessions on, a new sandbox can fail with \"Too many open files\" (a sandbox failure, \
             never a reward); raise the limit (ulimit -Hn; LimitNOFILE= under systemd) or lower --max-sessions",
            limit.saturating_sub(FILES_BESIDES) / FILES_PER_SESSION
        )
    })
}

#[cfg(test)]
mod tests {
    use super::descriptor_shortfall;

    #[test]
    fn sessions_that_could_run_out_of_descriptors_are_said_at_start() {
        assert_eq!(descriptor_shortfall(64, 1024), None, "the default fits");
        assert_eq!(descriptor_shortfall(4_000, 20_000), None);
        let line = descriptor_shortfall(8_192, 20_000).expect("a shortfall");
        assert!(line.contains("--max-sessions 8192"), "{line}");
        assert!(line.contains("32832 in all"), "{line}");
        assert!(line.contains("limit of 20000"), "{line}");
        assert!(line.contains("from about 4984 busy sessions on"), "{line}");
        assert!(line.contains("ulimit -Hn"), "{line}");
        assert!(
            descriptor_shortfall(usize::MAX, 20_000).is_some(),
            "no overflow"
        );
        assert_eq!(descriptor_shortfall(10, 0), None, "an unknown limit");
    }
}

/// Runs `openenv` for environment `E` until `shutdown` is requested.
pub async fn run<E: Environment>(matches: &ArgMatches, shutdown: &Shutdown) -> anyhow::Result<()> {
    let (cfg, options) = serving_options::<E>(matches)?;
    let (env, rt) = shutdown.unless_requested(start::<E>(&cfg)).await??;
    serve(env, rt, options, shutdown.clone(), |addr| {
        // One line on stdout for scripts and tests: where to connect.
        println!("openenv listening on http://{addr}");
    })
    .await
}
