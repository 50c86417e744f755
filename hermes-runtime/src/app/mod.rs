//! The generated binary's `main`: parse the command line, resolve the config, plan the run
//! (`RunPlan`, pure), start its `Services` and dispatch to a mode's entry
//! (`modes::{process,evaluate,serve}::main`). Errors are one line on stderr with exit code 2. The first
//! SIGINT/SIGTERM stops a run gracefully (exit 0, see [`crate::shutdown`]); a second cancels
//! it (exit 130). Every sandbox is torn down either way.

mod plan;
mod services;

use std::ffi::OsString;
use std::process::ExitCode;

use tracing::warn;

use crate::config::cli::{parse, Invocation};
use crate::config::{resolve, Mode, ResolvedConfig};
use crate::env::{EnvDefinition, Environment};
use crate::shutdown::{Interrupted, Shutdown};
pub use plan::Phase;
pub(crate) use plan::RunPlan;
pub(crate) use services::Services;

/// Lets glibc's allocator keep freed memory at the top of the heap (up to 8 MiB) and grow it
/// 4 MiB at a time. It serves the process when hermes-env is built without its default
/// `jemalloc` feature (and C code's allocations either way). With the defaults it hands the
/// top back whenever a rollout's trainer tokens or a group's JSONL line (tens to hundreds of
/// KiB, freed together) are freed, and the next ones take it again, page fault by page fault;
/// keeping it halves those faults for a little more peak RSS (pages that were in use a moment
/// before). What is kept is at most the trim threshold.
fn keep_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters, under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_TOP_PAD, 4 << 20);
    }
}

/// Raises this process's soft limit of open file descriptors to its hard limit. Every live
/// rollout or session holds a few (its inference connection, its local shell's pipes, a
/// WebSocket), and the usual soft limit of 1,024 would refuse the thousandth; the hard limit
/// is what the administrator allows (`ulimit -Hn`). Returns the limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                ..limit
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur as u64;
            }
        }
        limit.rlim_cur as u64
    }
}

/// Entry point called by the `main` that `#[hermes_env]` generates.
pub fn main<E: Environment>() -> ExitCode {
    keep_freed_heap();
    let args: Vec<OsString> = std::env::args_os().collect();
    // Before `protect`, so that keys read from `.env` are remembered as secrets too.
    let dotenv = crate::dotenv::load_from_cwd();
    crate::own_secrets::protect(&args);
    init_tracing();
    let descriptors = raise_descriptor_limit();
    tracing::debug!("open file descriptor limit: {descriptors} (the hard limit, ulimit -Hn)");
    crate::sandbox::docker::watchdog::enable();
    match dotenv {
        Ok(Some(report)) => tracing::info!("{}", report.describe()),
        Ok(None) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let bin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| E::descriptor().name.to_owned());
    let invocation = match parse_invocation::<E>(&bin, args) {
        Ok(Some(invocation)) => invocation,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // One thread: a run is one future (its groups and rollouts are joined, not spawned), so
    // a multi-thread runtime only moved each I/O event to a worker that then woke this thread
    // (two context switches per HTTP reply, pipe read or child exit). Blocking work still goes
    // to tokio's blocking pool. See README "Speed" for the figures.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        let shutdown = Shutdown::on_signals();
        let outcome = match invocation {
            // Runs stop gracefully on the first signal; only a second one cancels them.
            // A second request wins even when the run ended in the same instant.
            Resolved::Run(cfg) => tokio::select! {
                biased;
                () = shutdown.forced() => None,
                result = execute::<E>(*cfg, &shutdown) => Some(result),
            }
            .filter(|_| !shutdown.is_forced()),
            // A serving subcommand drains on the first signal; only a second one cancels it.
            Resolved::Utility(name, matches) if crate::commands::serves_until_stopped(&name) => {
                tokio::select! {
                    biased;
                    () = shutdown.forced() => None,
                    result = crate::commands::serve::<E>(&name, &matches, &shutdown) => Some(result),
                }
            }
            Resolved::Utility(name, matches) => tokio::select! {
                result = crate::commands::run::<E>(&name, &matches) => Some(result),
                () = shutdown.requested() => None,
            },
        };
        // The cancelled rollouts' guards are removing their containers; wait for them and
        // remove whatever is left (a second Ctrl-C does not cut this short).
        cleanup_sandboxes().await;
        outcome
    });
    match outcome {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) if e.is::<Interrupted>() => {
            eprintln!("interrupted before the run started; sandboxes removed");
            ExitCode::from(130)
        }
        Some(Err(e)) => {
            let message = one_line(&crate::diagnostics::error_chain(e.as_ref()));
            let message = crate::diagnostics::printable(&message);
            eprintln!("error: {}", crate::config::redact::redact_text(&message));
            ExitCode::from(2)
        }
        None => {
            eprintln!("interrupted: rollouts cancelled and sandboxes removed");
            ExitCode::from(130)
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(crate::progress::LogWriter)
        .try_init();
}

/// Removes every sandbox container this process still owns, then reaps what runs that are gone
/// left on the same daemons, telling an impatient user that a repeated Ctrl-C is ignored until
/// it is done.
async fn cleanup_sandboxes() {
    let cleanup = async {
        let left = crate::sandbox::docker::remove_all_live().await;
        crate::sandbox::docker::reaper::reap_after_run().await;
        crate::sandbox::docker::watchdog::release_all();
        left
    };
    tokio::pin!(cleanup);
    loop {
        tokio::select! {
            left = &mut cleanup => {
                if left > 0 {
                    eprintln!("warning: {left} sandbox container(s) could not be removed; `sandbox reap` removes them");
                }
                return;
            }
            _ = tokio::signal::ctrl_c() => {
                eprintln!("still removing sandbox containers; please wait");
            }
        }
    }
}

/// What to do after parsing: run a mode with a resolved config, or a utility subcommand.
pub enum Resolved {
    /// Run an Atropos mode.
    Run(Box<ResolvedConfig>),
    /// Run a utility subcommand with its arguments.
    Utility(String, Box<clap::ArgMatches>),
}

/// Parses and resolves the command line; `Ok(None)` when help was printed.
pub fn parse_invocation<E: EnvDefinition>(
    bin: &str,
    args: Vec<OsString>,
) -> Result<Option<Resolved>, crate::config::ConfigError> {
    let desc = E::descriptor();
    match parse(bin, &desc, &crate::commands::definitions(&desc), args)? {
        Invocation::Print(text) => {
            print!("{text}");
            Ok(None)
        }
        Invocation::Run(mode, flags) => {
            resolve(&desc, mode, *flags).map(|c| Some(Resolved::Run(Box::new(c))))
        }
        Invocation::Utility(name, matches) => Ok(Some(Resolved::Utility(name, matches))),
    }
}

/// Plans the run, starts its services and runs its mode; `shutdown` stops it gracefully.
pub async fn execute<E: Environment>(
    cfg: ResolvedConfig,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    // Checked before any daemon, server or network is touched.
    let plan = RunPlan::new(&cfg)?;
    for w in &plan.warnings {
        warn!("{w}");
    }
    let Services {
        mut env,
        rt,
        cfg,
        name,
        // Kept until the mode ends: with --testing it is the inference server.
        scripted: _serving,
        cursors,
    } = shutdown
        .unless_requested(Services::<E>::start(cfg, &plan))
        .await??;
    match plan.mode {
        Mode::Process => crate::modes::process::main(&mut env, &rt, &cfg, name, shutdown).await,
        Mode::Evaluate => crate::modes::evaluate::main(&env, &rt, &cfg, name, shutdown).await,
        Mode::Serve => crate::modes::serve::main(env, rt, &cfg, name, cursors, shutdown).await,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_descriptor_limit_is_raised_to_the_hard_limit() {
        // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
        let hard = unsafe {
            let mut limit: libc::rlimit = std::mem::zeroed();
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
            let lowered = libc::rlimit {
                rlim_cur: limit.rlim_max.min(256),
                ..limit
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lowered), 0);
            limit.rlim_max
        };
        assert_eq!(super::raise_descriptor_limit(), hard as u64);
        // SAFETY: as above.
        let now = unsafe {
            let mut limit: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur
        };
        assert_eq!(now, hard);
    }
}
