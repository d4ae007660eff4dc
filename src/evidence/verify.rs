//! Whether a running process is what a row says it is: that pass's jobrun
//! wrapper, or a member of that pass's process group.
//!
//! A row is not proof: anyone who can write the store can name any pid.
//! Before a recorded process is trusted as alive or signalled it is checked
//! against what only the real pass has: the kernel lock its wrapper holds
//! (one-machine stores), the jobrun binary and its command as its child
//! (fleet stores), the pass id in its environment (members).

use std::io::Read;
use std::path::Path;

use super::Evidence;
use crate::files::{open_lock, still_held};
use crate::policy::lease::{Holder, Proc};
use crate::process::identity::PASS_ENV;
use crate::process::{self, State};

/// Whether a running process is what a row says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// It is: the reason says how this was checked.
    Yes(String),
    /// Very likely (a fleet store's wrapper whose command is still held):
    /// evidence of life, never a reason to signal.
    Likely(String),
    /// It is not: the row names another process (a forged or stale row).
    No(String),
    /// This process cannot tell (another user's process, /proc hidden).
    Cannot(String),
}

impl Evidence {
    /// Whether the recorded wrapper (a running process) is the wrapper of
    /// pass `pass_id`, and not merely some process, or another pass's
    /// jobrun.
    ///
    /// On a one-machine store every wrapper holds its pass's kernel lock
    /// for its whole life: the pid must be seen holding it in /proc/locks.
    /// On a fleet store (no lock files here) the wrapper must run jobrun and
    /// its recorded command must be its child carrying the pass's id; a
    /// command still held before exec (a queued pass) makes it `Likely`:
    /// enough to keep a slot, never enough to signal.
    pub fn verify_wrapper(&self, holder: &Holder, pass_id: &str) -> Verified {
        let pid = holder.wrapper.pid;
        if process::read(holder.wrapper) != State::Running {
            return Verified::No(format!("pid {pid} is not the recorded running process"));
        }
        if self.lock_dir.is_some() {
            let Some(lock) = self.lock_of(pass_id) else {
                return Verified::No("its pass id names no lock of this store".into());
            };
            return verify_lock_holder(&lock, holder.wrapper);
        }
        match process::runs_jobrun(pid) {
            Some(true) => {}
            Some(false) => return Verified::No(format!("pid {pid} is not a jobrun process")),
            None => return Verified::Cannot(format!("pid {pid} cannot be inspected")),
        }
        let Some(child) = holder.child else {
            return Verified::Cannot(format!("pid {pid} runs jobrun; no command is recorded"));
        };
        match process::stat(child.pid) {
            Some(s) if s.start == child.start && s.ppid == pid && !s.exited() => {}
            _ => {
                return Verified::No(format!(
                    "pid {pid} runs jobrun, but the recorded command is not its running child"
                ))
            }
        }
        match verify_member(child.pid, pass_id) {
            Verified::Yes(_) => Verified::Yes(format!(
                "pid {pid} is running jobrun for this pass (its command carries the pass's id)"
            )),
            Verified::No(_) if process::runs_jobrun(child.pid) == Some(true) => Verified::Likely(
                format!("pid {pid} is running jobrun; its command is held before exec"),
            ),
            other => other,
        }
    }
}

/// Whether the kernel lock at `lock` is held by `wrapper`: the lock is
/// held, the file names the wrapper (pid and start time: a wrapper writes
/// them when it takes the lock) and belongs to the wrapper's user (a
/// writer of a shared holders directory cannot make a file of another
/// user's). A lock file of an earlier jobrun names nobody: for those,
/// /proc/locks says who holds it (read only then: reading it stalls every
/// file lock on the machine for a moment).
pub(super) fn verify_lock_holder(lock: &Path, wrapper: Proc) -> Verified {
    use std::os::unix::fs::MetadataExt;
    let pid = wrapper.pid;
    let Some(file) = open_lock(None, lock) else {
        // A lock file this user may not read (another member's, in a group
        // store made before its files carried the group) says nothing
        // either way.
        if std::fs::symlink_metadata(lock).is_ok_and(|md| md.is_file()) {
            return Verified::Cannot(format!(
                "the pass's lock {} cannot be read by this user",
                lock.display()
            ));
        }
        return Verified::No("the pass's lock is missing".into());
    };
    let Some(file) = still_held(file) else {
        return Verified::No(format!(
            "pid {pid} does not hold the pass's lock (it is free)"
        ));
    };
    let mut text = String::new();
    let _ = (&file).take(64).read_to_string(&mut text);
    let named: Option<(i32, u64)> = {
        let mut f = text.split_whitespace();
        match (f.next().map(str::parse), f.next().map(str::parse)) {
            (Some(Ok(p)), Some(Ok(s))) => Some((p, s)),
            _ => None,
        }
    };
    let meta = file.metadata().ok();
    match named {
        Some(named) if named != (wrapper.pid, wrapper.start) => Verified::No(format!(
            "the pass's lock is held by another process, not pid {pid}"
        )),
        Some(_) => {
            let owner = meta.map(|m| m.uid());
            if owner.is_some() && owner == process::uid_of(pid) {
                Verified::Yes(format!("pid {pid} is running and holds the pass's lock"))
            } else {
                Verified::No(format!("the pass's lock is not a file of pid {pid}'s user"))
            }
        }
        None => {
            let id = meta.map(|m| (m.dev(), m.ino()));
            for _ in 0..3 {
                let holders = id.and_then(|(dev, ino)| process::flock_holders(dev, ino));
                if holders.is_some_and(|h| h.contains(&pid)) {
                    return Verified::Yes(format!(
                        "pid {pid} is running and holds the pass's lock"
                    ));
                }
            }
            Verified::Cannot(format!(
                "the pass's lock is held, but not seen held by pid {pid}"
            ))
        }
    }
}

/// Whether running process `pid` belongs to pass `pass_id`: the command and
/// what it starts carry `JOBRUN_PASS` in their environment.
pub fn verify_member(pid: i32, pass_id: &str) -> Verified {
    match process::environment_has(pid, &format!("{PASS_ENV}={pass_id}")) {
        Some(true) => Verified::Yes(format!("pid {pid} carries the pass's id")),
        Some(false) => Verified::No(format!("pid {pid} is not of this pass")),
        None => Verified::Cannot(format!("pid {pid} cannot be inspected")),
    }
}

/// The running members of a group that belong to pass `pass_id`, and
/// whether any member could not be inspected.
pub(super) fn pass_members(pass_id: &str, members: &[i32]) -> (Vec<i32>, bool) {
    let mut ours = vec![];
    let mut unsure = false;
    for &m in members {
        match verify_member(m, pass_id) {
            Verified::Yes(_) => ours.push(m),
            Verified::No(_) => {}
            Verified::Likely(_) | Verified::Cannot(_) => unsure = true,
        }
    }
    (ours, unsure)
}
