//! The process groups a local sandbox's commands run in, kept as kill targets that stay safe.
//!
//! A process-group id is a pid number, and the kernel hands that number out again once
//! nothing of the group is left (`pid_max` is often 32768: under load that takes seconds).
//! Signalling a recorded id after that signals a stranger's group — another sandbox's shell,
//! or any process of the host. So a group is kept only while something of it lives (pruned
//! after every command), and a recorded group whose leader pid now belongs to a process started
//! at another time is someone else's and is dropped before anything is signalled.
//!
//! When a leader started is known without reading `/proc`: the boot clock is read before the
//! command is started ([`ticks_now`]) and again when its group is recorded, and the kernel
//! stamps the leader's start between the two. A pid is handed out again only after the whole
//! pid range went round, which takes far longer than that window: a process with the leader's
//! pid whose start lies in the window is the leader. (Reading the leader's `/proc/PID/stat`
//! at every start instead would wait on a process that is still in its `execve`.)

use std::sync::Mutex;

use super::proc_table::{process_row, ticks_now};

/// The live process groups of one sandbox.
#[derive(Debug, Default)]
pub(crate) struct ProcessGroups {
    groups: Mutex<Vec<Group>>,
}

/// One recorded group: its id and the boot-clock ticks its leader started between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Group {
    pgid: i32,
    leader_started: (u64, u64),
}

impl Group {
    /// True while the id still names this group: something of it lives, and a process with the
    /// leader's pid, if there is one, is the leader itself.
    fn is_ours(&self) -> bool {
        // SAFETY: kill(2) with signal 0 only checks that the group exists and may be signalled.
        if unsafe { libc::kill(-self.pgid, 0) } != 0 {
            return false;
        }
        let (from, to) = self.leader_started;
        match process_row(self.pgid as u32) {
            Some(leader) => (from..=to).contains(&leader.started),
            // The leader is gone and its members hold the id: nobody else can have it.
            None => true,
        }
    }
}

impl ProcessGroups {
    /// Records the group `pgid`, whose leader was started after the boot clock read
    /// `started_after` ([`ticks_now`]) and before this call.
    pub fn add(&self, pgid: i32, started_after: u64) {
        self.lock().push(Group {
            pgid,
            leader_started: (started_after, ticks_now()),
        });
    }

    /// Forgets the groups nothing is left of.
    pub fn prune(&self) {
        self.lock().retain(Group::is_ours);
    }

    /// The ids of the groups still ours.
    pub fn current(&self) -> Vec<i32> {
        let mut groups = self.lock();
        groups.retain(Group::is_ours);
        groups.iter().map(|g| g.pgid).collect()
    }

    /// SIGKILLs every group still ours and forgets them all.
    pub fn kill_all(&self) {
        let groups = std::mem::take(&mut *self.lock());
        for group in groups.iter().filter(|g| g.is_ours()) {
            kill_group(group.pgid);
        }
    }

    /// SIGKILLs every group still ours but those in `spared` (groups of the processes a task
    /// lets outlive the agent phase), which stay recorded for a later [`Self::kill_all`].
    pub fn kill_all_except(&self, spared: &[i32]) {
        let mut groups = self.lock();
        groups.retain(Group::is_ours);
        groups.retain(|group| {
            let keep = spared.contains(&group.pgid);
            if !keep {
                kill_group(group.pgid);
            }
            keep
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Group>> {
        self.groups.lock().expect("lock poisoned")
    }
}

/// SIGKILLs the process group `pgid` (callers make sure the id is still theirs).
pub(crate) fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    /// A `sleep` leading its own process group: a stranger as far as a sandbox is concerned.
    fn group_leader(seconds: &str) -> Child {
        Command::new("sleep")
            .arg(seconds)
            .process_group(0)
            .spawn()
            .expect("sleep")
    }

    fn alive(child: &mut Child) -> bool {
        child.try_wait().expect("try_wait").is_none()
    }

    #[test]
    fn a_group_nothing_is_left_of_is_forgotten() {
        let groups = ProcessGroups::default();
        let before = ticks_now();
        let mut done = group_leader("0");
        groups.add(done.id() as i32, before);
        let before = ticks_now();
        let mut running = group_leader("30");
        groups.add(running.id() as i32, before);
        done.wait().expect("wait");
        groups.prune();
        assert_eq!(groups.current(), vec![running.id() as i32]);
        groups.kill_all();
        running.wait().expect("wait");
        assert!(groups.current().is_empty());
    }

    #[test]
    fn an_id_now_leading_a_strangers_group_is_never_signalled() {
        // What a reused id looks like: a live group whose leader started at another time than
        // the one recorded.
        let mut stranger = group_leader("30");
        let groups = ProcessGroups::default();
        let started = process_row(stranger.id())
            .expect("the stranger's stat")
            .started;
        // Windows that end before it started, and that begin after.
        groups.lock().push(Group {
            pgid: stranger.id() as i32,
            leader_started: (0, started.saturating_sub(1)),
        });
        groups.lock().push(Group {
            pgid: stranger.id() as i32,
            leader_started: (started + 1, u64::MAX),
        });
        assert!(groups.current().is_empty());
        groups.lock().push(Group {
            pgid: stranger.id() as i32,
            leader_started: (0, started.saturating_sub(1)),
        });
        groups.kill_all();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(alive(&mut stranger), "a stranger's group was killed");
        stranger.kill().expect("kill");
        stranger.wait().expect("wait");
    }

    #[test]
    fn members_left_after_their_leader_are_still_killed() {
        // A command that started a daemon and exited: the daemon keeps the group's id.
        let leader = Command::new("bash")
            .args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"])
            .process_group(0)
            .output()
            .expect("bash");
        let daemon: i32 = String::from_utf8_lossy(&leader.stdout)
            .trim()
            .parse()
            .expect("daemon pid");
        let row = process_row(daemon as u32).expect("daemon stat");
        assert!(
            !row.zombie,
            "the daemon must outlive its leader for this test"
        );
        let pgid = row.pgrp;
        let groups = ProcessGroups::default();
        groups.lock().push(Group {
            pgid,
            leader_started: (0, 0),
        });
        assert_eq!(groups.current(), vec![pgid]);
        groups.kill_all();
        let gone = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            process_row(daemon as u32).is_none_or(|row| row.zombie)
        });
        assert!(gone, "the daemon left by the group's leader survived");
    }
}
