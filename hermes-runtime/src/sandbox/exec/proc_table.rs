//! The host's process table as `/proc` shows it: one process's `stat` row, the rows of many,
//! and the boot clock its start times are counted in, so a process can be told from a later
//! one that reuses its pid.

/// A `/proc` file in one `read(2)` where it fits 4 KiB. `fs::read` and `read_to_end` cost three
/// system calls more per file (a `statx` and an `lseek` for a size hint `/proc` does not give,
/// and a last read to see the end), and the leftover scan reads dozens of these per rollout.
/// A `/proc` file returns all it has up to the buffer's size in one read, so a short read is
/// its end; a full one is followed by more reads.
pub(crate) fn read_proc(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut bytes = vec![0; 4096];
    let mut len = 0;
    loop {
        let n = file.read(&mut bytes[len..]).ok()?;
        len += n;
        if len < bytes.len() {
            bytes.truncate(len);
            return Some(bytes);
        }
        bytes.resize(bytes.len() * 2, 0);
    }
}

/// The boot clock in `/proc/PID/stat` start-time ticks, exactly as the kernel counts a
/// process's start (its boot-clock nanoseconds divided down to `USER_HZ`): a process started
/// after one reading and before another shows a start time between the two.
pub(crate) fn ticks_now() -> u64 {
    // SAFETY: clock_gettime only writes into the timespec we pass.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts);
        ts
    };
    let nanos = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    nanos / (1_000_000_000 / ticks_per_second()).max(1)
}

/// The boot clock in `/proc/PID/stat` start-time ticks, one second early (so a process
/// started in the same tick is never missed).
pub(crate) fn boot_ticks() -> u64 {
    ticks_now().saturating_sub(ticks_per_second())
}

/// `USER_HZ`, the unit of `/proc/PID/stat` start times.
fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64 }
}

/// One row of `/proc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcessRow {
    pub pid: u32,
    pub ppid: u32,
    pub pgrp: i32,
    pub zombie: bool,
    /// Start time, boot-clock ticks.
    pub started: u64,
}

/// The rows of the processes whose pid passes `wanted`.
pub(crate) fn process_table(wanted: impl Fn(u32) -> bool) -> Vec<ProcessRow> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| wanted(*pid))
        .filter_map(process_row)
        .collect()
}

/// The `/proc/PID/stat` row of `pid`, when that process exists.
pub(crate) fn process_row(pid: u32) -> Option<ProcessRow> {
    // Lossy: a command name is any bytes the agent chose (`./$'\xff' &` must not hide).
    let stat = read_proc(&format!("/proc/{pid}/stat"))?;
    let stat = String::from_utf8_lossy(&stat);
    // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
    let mut fields = stat[stat.rfind(')')? + 2..].split_whitespace();
    let zombie = fields.next()? == "Z";
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 22 of the stat line (the iterator is at field 6).
    let started = fields.nth(16)?.parse().ok()?;
    Some(ProcessRow {
        pid,
        ppid,
        pgrp,
        zombie,
        started,
    })
}
