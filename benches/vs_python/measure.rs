//! Runs one framework process to its end and measures it: its own CPU (user + system, from
//! `/proc/PID/stat` while it is a zombie: exited, not yet reaped), its total CPU including
//! every child it reaped (the tools' shells and commands; `wait4` rusage), wall time, and
//! peak RSS (`ru_maxrss`; the tool children are far smaller than either framework).

use std::process::Command;
use std::time::{Duration, Instant};

/// What one process cost.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    /// User + system time of the process itself (clock-tick resolution).
    pub own: Duration,
    /// The system (kernel) part of `own`. The kernel splits a process's exact run time
    /// between user and system by sampling at clock ticks, so the split is an estimate
    /// where the sum is not.
    pub own_system: Duration,
    /// User + system time of the process and its reaped children.
    pub total: Duration,
    /// Spawn to exit.
    pub wall: Duration,
    /// Peak resident set size, MB.
    pub rss_mb: f64,
}

/// Runs `cmd` (stdio as set by the caller) and measures it; fails when it exits unsuccessfully.
pub fn run(cmd: &mut Command) -> anyhow::Result<Cost> {
    let started = Instant::now();
    let child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    wait_exited(pid)?;
    let wall = started.elapsed();
    let (own, own_system) = own_cpu(pid)?;
    let (status, usage) = reap(pid)?;
    anyhow::ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed (wait status {status:#x})"
    );
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(Cost {
        own,
        own_system,
        total: tv(usage.ru_utime) + tv(usage.ru_stime),
        wall,
        rss_mb: usage.ru_maxrss as f64 / 1024.0,
    })
}

/// Waits until `pid` has exited, leaving it a zombie so `/proc/PID/stat` can still be read.
fn wait_exited(pid: libc::pid_t) -> std::io::Result<()> {
    loop {
        // SAFETY: waitid only writes into the siginfo we pass.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// User + system time of the zombie `pid` itself (fields 14 and 15 of its stat line), and
/// the system time alone.
fn own_cpu(pid: libc::pid_t) -> anyhow::Result<(Duration, Duration)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // After the command name: state is field 3, utime 14, stime 15.
    let ticks = |field: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(field - 3)
            .ok_or_else(|| anyhow::anyhow!("short stat line: {stat}"))?
            .parse()?)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let time = |ticks: u64| Duration::from_nanos(ticks * 1_000_000_000 / hz);
    let (user, system) = (ticks(14)?, ticks(15)?);
    Ok((time(user + system), time(system)))
}

/// Reaps `pid`: its wait status and rusage (itself plus the children it reaped).
fn reap(pid: libc::pid_t) -> std::io::Result<(libc::c_int, libc::rusage)> {
    // SAFETY: wait4 only writes into the status and rusage we pass.
    unsafe {
        let mut status = 0;
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::wait4(pid, &mut status, 0, &mut usage) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((status, usage))
    }
}
