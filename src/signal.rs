//! Signalling a pass's processes, and only its processes.
//!
//! The invariant this module keeps: nothing is signalled that is not, at
//! the moment of the signal, the process (or process group) it was checked
//! to be. There are two cases, and this module owns both:
//!
//! - **The wrapper's own command's group.** Its leader is this process's
//!   child, and is not reaped while the group is signalled (the borrow of
//!   `RunningChild` says so: reaping needs it mutably). An unreaped leader
//!   keeps its pid, and so the group id, from being reused, so `killpg`
//!   reaches this pass's group and nobody else's, including a member forked
//!   a moment before; signalling member by member would miss that one.
//! - **Another pass's processes** (`stop-due`). Each process is pinned by a
//!   pidfd first, then checked (start time, group, pass), then signalled
//!   through that pidfd: the check and the signal are about the same
//!   process even if the pid is recycled meanwhile. A group is signalled
//!   member by member in this way; a group id alone is never signalled,
//!   since nothing here keeps it from being reused.
//!
//! pidfds come from `rustix` (already built into jobrun through clap's
//! terminal-size support; nix 0.32 has no pidfd calls), so no raw system
//! call is made here.

use std::os::fd::OwnedFd;

use nix::sys::signal::Signal;

use crate::evidence::{verify_member, OfPass, Verified};
use crate::policy::lease::Proc;
use crate::process::{self, Group, State};
use crate::spawn::RunningChild;

/// Why a recorded process was not signalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotSignalled {
    Gone,
    Reused,
    Failed(String),
}

impl std::fmt::Display for NotSignalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotSignalled::Gone => write!(f, "process is gone"),
            NotSignalled::Reused => {
                write!(f, "pid now belongs to another process (start time differs)")
            }
            NotSignalled::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// A pidfd for `pid`: the process it names cannot change under it.
fn pidfd(pid: i32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

fn pidfd_signal(fd: &OwnedFd, sig: i32) -> Result<(), NotSignalled> {
    let sig = rustix::process::Signal::from_named_raw(sig)
        .ok_or_else(|| NotSignalled::Failed(format!("{sig} is not a signal")))?;
    match rustix::process::pidfd_send_signal(fd, sig) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::SRCH) => Err(NotSignalled::Gone),
        Err(e) => Err(NotSignalled::Failed(std::io::Error::from(e).to_string())),
    }
}

/// Signal a recorded process only if it is still the process that was
/// recorded. A pidfd pins the process first, then its start time is
/// checked, then the signal goes through the same pidfd. The caller has
/// already checked boot and PID namespace. With `dry_run`, everything but
/// the signal.
pub fn signal_verified(p: Proc, sig: i32, dry_run: bool) -> Result<(), NotSignalled> {
    let fd = pidfd(p.pid).ok_or(NotSignalled::Gone)?;
    match process::read(p) {
        State::Running => {}
        State::Reused => return Err(NotSignalled::Reused),
        // Exited, waiting for its parent to reap it: nothing to signal.
        _ => return Err(NotSignalled::Gone),
    }
    if dry_run {
        return Ok(());
    }
    pidfd_signal(&fd, sig)
}

/// Whose members of another pass's process group may be signalled.
#[derive(Debug, Clone, Copy)]
pub enum Members<'a> {
    /// The group's leader is the command of a verified, live wrapper (its
    /// child, by pid, start time and parent): every member is the pass's.
    Led,
    /// Only members of this pass (`evidence::verify_member`: in its group,
    /// inside the wrapper's session, carrying its id): an orphaned group.
    OfPass(OfPass<'a>),
}

/// A pass's process group, as this process may signal it.
pub enum PassGroup<'a> {
    /// The group of this wrapper's own command, led by its unreaped child.
    Own(&'a RunningChild),
    /// Process group `pgid` of a recorded pass: the members `members`
    /// allows, each through a pidfd.
    Recorded { pgid: i32, members: Members<'a> },
}

/// Send `sig` to a pass's process group (see the module note for how each
/// case is kept to the pass). Returns how many signals were sent: one for
/// the own group (one `killpg`), one per member otherwise. With `dry_run`,
/// everything but the signals.
pub fn signal_group(group: PassGroup, sig: i32, dry_run: bool) -> Result<usize, NotSignalled> {
    match group {
        PassGroup::Own(child) => {
            // Reaped: its group id may belong to anyone now.
            let leader = child.leader().ok_or(NotSignalled::Gone)?;
            let sig = Signal::try_from(sig).map_err(|e| NotSignalled::Failed(e.to_string()))?;
            if !dry_run {
                nix::sys::signal::killpg(nix::unistd::Pid::from_raw(leader), sig)
                    .map_err(|e| NotSignalled::Failed(e.to_string()))?;
            }
            Ok(1)
        }
        PassGroup::Recorded { pgid, members } => signal_members(pgid, members, sig, dry_run),
    }
}

/// Signal the running members of process group `pgid` that `members`
/// allows, each through a pidfd taken before it is checked, so that only
/// processes that are in that group (and of that pass) when signalled
/// receive it.
fn signal_members(
    pgid: i32,
    members: Members,
    sig: i32,
    dry_run: bool,
) -> Result<usize, NotSignalled> {
    let allowed = |pid| match members {
        Members::Led => true,
        Members::OfPass(of) => matches!(verify_member(pid, of), Verified::Yes(_)),
    };
    let Group::Runs(running) = process::group(pgid) else {
        return Err(NotSignalled::Gone);
    };
    let mut sent = 0;
    let mut failure = None;
    for pid in running {
        let Some(fd) = pidfd(pid) else { continue };
        match process::stat(pid) {
            Some(s) if s.pgrp == pgid && !s.exited() => {}
            _ => continue,
        }
        if !allowed(pid) {
            continue;
        }
        if dry_run {
            sent += 1;
            continue;
        }
        match pidfd_signal(&fd, sig) {
            Ok(()) => sent += 1,
            Err(NotSignalled::Gone) => {}
            Err(e) => failure = Some(e),
        }
    }
    match (sent, failure) {
        (0, Some(e)) => Err(e),
        (0, None) => Err(NotSignalled::Gone),
        (n, _) => Ok(n),
    }
}
