//! Whether a running process is what a row says it is: that pass's jobrun
//! wrapper, or a member of that pass's process group.
//!
//! A row is not proof: anyone who can write the store can name any pid.
//! Before a recorded process is trusted as alive or signalled it is checked
//! against what only the real pass has: the kernel lock its wrapper holds
//! (one-machine stores), the jobrun binary and its command as its child
//! (fleet stores), and for members where the kernel says they sit (the
//! pass's process group, inside the wrapper's session, never a session
//! leader's group: `policy::member`) besides the pass id in their
//! environment, which a process that escaped with `setsid` carries too.

use std::io::Read;
use std::path::Path;

use super::Evidence;
use crate::files::{open_lock, still_held};
use crate::policy::lease::{Holder, Proc};
use crate::policy::member::{membership, Membership, Seat};
use crate::process::identity::{PASS_ENV, STORE_ENV};
use crate::process::{self, State};

/// What a member of a pass must match: the pass's id, its process group
/// (the command's pid) and, where the row recorded it, the wrapper's
/// session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfPass<'a> {
    pub id: &'a str,
    pub group: i32,
    pub session: Option<i32>,
}

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
            return match verify_lock_holder(&lock, holder.wrapper) {
                // No file at all (a tmp cleaner, a member of a group store
                // removed it): a running jobrun there may well be the
                // wrapper, so it is not known to be another process.
                Verified::No(_) if std::fs::symlink_metadata(&lock).is_err() => {
                    match process::runs_jobrun(pid) {
                        Some(false) => Verified::No(format!("pid {pid} is not a jobrun process")),
                        _ => Verified::Cannot(format!(
                            "lock file missing; wrapper pid {pid} running"
                        )),
                    }
                }
                other => other,
            };
        }
        match process::runs_jobrun(pid) {
            Some(true) => {}
            Some(false) => return Verified::No(format!("pid {pid} is not a jobrun process")),
            None => return Verified::Cannot(format!("wrapper pid {pid} cannot be inspected")),
        }
        let Some(child) = holder.child else {
            return Verified::Cannot(format!(
                "wrapper pid {pid} runs jobrun; no command is recorded"
            ));
        };
        match process::stat(child.pid) {
            Some(s) if s.start == child.start && s.ppid == pid && !s.exited() => {}
            _ => {
                return Verified::No(format!(
                    "pid {pid} runs jobrun, but the recorded command is not its running child"
                ))
            }
        }
        // The command sits in the wrapper's session: the live wrapper's,
        // which a row cannot name.
        let of = OfPass {
            id: pass_id,
            group: child.pid,
            session: process::stat(pid).map(|s| s.session).or(holder.session),
        };
        match verify_member(child.pid, of) {
            Verified::Yes(_) => match self.of_another_store(child.pid) {
                Some(why) => Verified::No(format!("pid {pid} runs jobrun, but {why}")),
                None => Verified::Yes(format!(
                    "pid {pid} is running jobrun for this pass (its command carries the pass's \
                     id)"
                )),
            },
            Verified::No(_) if process::runs_jobrun(child.pid) == Some(true) => Verified::Likely(
                format!("pid {pid} is running jobrun; its command is held before exec"),
            ),
            other => other,
        }
    }

    /// Why the command `pid` is of a pass of another PostgreSQL store than
    /// the one judged for, if it is: it carries another store's stamp. A
    /// command of a jobrun that gave none carries none, and is taken as of
    /// this store, as before.
    fn of_another_store(&self, pid: i32) -> Option<String> {
        let ours = self.store_id.as_deref()?;
        match process::environment_var(pid, STORE_ENV)? {
            Some(theirs) if theirs != ours.as_bytes() => Some(format!(
                "its command holds a slot of another store ({STORE_ENV} differs)"
            )),
            _ => None,
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
                "the pass's lock is held, but not seen held by wrapper pid {pid}"
            ))
        }
    }
}

/// Whether running process `pid` is a member of the pass `of`: where the
/// kernel says it sits (its group and session, by `policy::member`), and
/// the pass's id in its environment (the command and what it starts carry
/// `JOBRUN_PASS`).
pub fn verify_member(pid: i32, of: OfPass) -> Verified {
    let Some(s) = process::stat(pid) else {
        return Verified::Cannot(format!("pid {pid} cannot be inspected"));
    };
    let seat = Seat {
        pgid: s.pgrp,
        session: s.session,
    };
    let carries = process::environment_has(pid, &format!("{PASS_ENV}={}", of.id));
    match membership(of.group, of.session, seat, carries) {
        Membership::Member => Verified::Yes(format!("pid {pid} carries the pass's id")),
        Membership::Outside(why) => Verified::No(format!("pid {pid} {why}")),
        Membership::Cannot => Verified::Cannot(format!("pid {pid} cannot be inspected")),
    }
}

/// The running members of the pass's group (`members`) that belong to the
/// pass `of`, and whether any member could not be inspected.
pub(super) fn pass_members(of: OfPass, members: &[i32]) -> (Vec<i32>, bool) {
    let mut ours = vec![];
    let mut unsure = false;
    for &m in members {
        match verify_member(m, of) {
            Verified::Yes(_) => ours.push(m),
            Verified::No(_) => {}
            Verified::Likely(_) | Verified::Cannot(_) => unsure = true,
        }
    }
    (ours, unsure)
}
