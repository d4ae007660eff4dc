//! Tri-state evidence: is the recorded holder of a lease alive, dead, or
//! unknown?
//!
//! The invariant this module keeps: absence of evidence is not evidence of
//! death. A pid means something only on the boot and in the PID namespace
//! that recorded it, and only together with its start time. Anything this
//! process cannot check directly is `Unknown`, and `Unknown` never frees a
//! slot by itself: the lease expiry decides.
//!
//! Probes read `/proc` and take file locks, so callers run them outside any
//! store transaction.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::policy::lease::{Holder, Proc};
use crate::policy::Liveness;

/// Who and where this process is, as far as evidence goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub host: String,
    pub boot_id: String,
    pub pid_ns: String,
}

/// Environment variables that override the recorded host identity. They
/// exist for containers whose host name is not stable and for tests that
/// need a second machine; they change the inputs, never the rules.
pub const HOST_ENV: &str = "JOBRUN_HOST";
pub const BOOT_ID_ENV: &str = "JOBRUN_BOOT_ID";

impl Identity {
    /// This machine's boot id (or `JOBRUN_BOOT_ID`).
    pub fn boot_id() -> String {
        std::env::var(BOOT_ID_ENV)
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| {
                fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            })
    }

    pub fn current() -> Identity {
        let host = std::env::var(HOST_ENV)
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| {
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| "unknown-host".into())
            });
        let boot_id = Identity::boot_id();
        let pid_ns = fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        Identity {
            host,
            boot_id,
            pid_ns,
        }
    }
}

/// What one read of `/proc/PID/stat` says: state letter, parent, process
/// group and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub start: u64,
}

impl Stat {
    /// Exited, waiting for its parent to reap it.
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parse `/proc/PID/stat`. The command name (field 2) may contain spaces
/// and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let start = fields.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        start,
    })
}

/// `/proc/PID/stat` of `pid`, parsed; `None` when it cannot be read.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of `pid` in clock ticks since boot, or `None` when no
/// such process exists (or `/proc` cannot tell).
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start)
}

/// This process as evidence.
pub fn this_process() -> Proc {
    let pid = std::process::id() as i32;
    Proc {
        pid,
        start: start_time(pid).unwrap_or(0),
    }
}

/// The processes of group `pgid` that have not exited, as far as `/proc`
/// shows them, and whether any exited member (a zombie) was seen. `None`
/// when `/proc` cannot be listed. Each listed process is asked its group
/// with getpgid(2) first, a system call that formats nothing: only the few
/// in `pgid` have their `stat` read, so a scan costs little more than
/// listing `/proc`, however many processes the machine runs (the wrapper
/// scans once at the end of every pass).
fn group_scan(pgid: i32) -> Option<(Vec<i32>, bool)> {
    use nix::unistd::{getpgid, Pid};
    let mut live = vec![];
    let mut zombies = false;
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if getpgid(Some(Pid::from_raw(pid))).is_ok_and(|g| g.as_raw() != pgid) {
            continue;
        }
        match stat(pid) {
            Some(s) if s.pgrp == pgid && s.exited() => zombies = true,
            Some(s) if s.pgrp == pgid => live.push(pid),
            _ => {}
        }
    }
    live.sort_unstable();
    Some((live, zombies))
}

/// What is left of process group `pgid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Group {
    /// Members that have not exited, lowest pid first.
    Runs(Vec<i32>),
    /// No member runs (exited members waiting to be reaped count as gone).
    Empty,
    /// The kernel says the group has members this process cannot see.
    Hidden,
}

/// Whether a process of group `pgid` still runs. Members that have exited
/// but wait for a slow init to reap them count as gone.
pub fn group(pgid: i32) -> Group {
    // Signal 0 delivers nothing: it asks whether any member exists, without
    // reading every process's /proc entry.
    // SAFETY: kill(2) with signal 0.
    let exists = unsafe { libc::kill(-pgid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    if !exists {
        return Group::Empty;
    }
    let scan = group_scan(pgid);
    if let Some((live, _)) = &scan {
        if !live.is_empty() {
            return Group::Runs(live.clone());
        }
    }
    match scan {
        Some((_, true)) => Group::Empty,
        _ => Group::Hidden,
    }
}

/// A judgement with the reason an operator reads, for example
/// `dead: pid 4242 start time differs (pid reused)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub liveness: Liveness,
    pub reason: String,
    /// The wrapper is dead but the child, or another process of the pass's
    /// group, lives on: the pass is orphaned.
    pub orphaned: bool,
}

impl Verdict {
    fn new(liveness: Liveness, reason: impl Into<String>) -> Verdict {
        Verdict {
            liveness,
            reason: reason.into(),
            orphaned: false,
        }
    }

    fn orphaned(reason: String) -> Verdict {
        Verdict {
            liveness: Liveness::Alive,
            reason,
            orphaned: true,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.liveness.as_str(), self.reason)
    }
}

/// Whether the store is shared by one machine only (SQLite) or by several
/// (PostgreSQL). On a one-machine store a change of boot id means the
/// holder's processes are gone; on a shared store it may be another machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreReach {
    OneMachine,
    Fleet,
}

/// What a holder's pids are to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sight {
    /// Same boot and PID namespace: pids and start times can be checked.
    Pids,
    /// This machine, an earlier boot (one-machine stores only).
    PreviousBoot,
    /// Another machine (or a boot this process cannot place).
    OtherHost,
    /// This kernel, another PID namespace (a container).
    OtherNamespace,
}

/// Everything a judgement needs besides the row: who is judging, how far
/// the store reaches, and where holders keep their kernel locks.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub me: Identity,
    pub reach: StoreReach,
    pub lock_dir: Option<PathBuf>,
}

impl Evidence {
    pub fn new(me: Identity, reach: StoreReach, lock_dir: Option<PathBuf>) -> Evidence {
        Evidence {
            me,
            reach,
            lock_dir,
        }
    }

    /// The kernel lock of pass `pass_id`, if the store keeps them and the
    /// id is one jobrun could have made.
    pub fn lock_of(&self, pass_id: &str) -> Option<PathBuf> {
        let dir = self.lock_dir.as_ref()?;
        valid_pass_id(pass_id).then(|| dir.join(format!("{pass_id}.lock")))
    }

    /// Whether a holder's pids mean anything to this process: the boot and
    /// PID-namespace gate, in one place.
    pub fn sight(&self, holder: &Holder) -> Sight {
        let me = &self.me;
        if holder.boot_id != me.boot_id {
            if self.reach == StoreReach::OneMachine && holder.host == me.host {
                return Sight::PreviousBoot;
            }
            return Sight::OtherHost;
        }
        if holder.pid_ns != me.pid_ns {
            return Sight::OtherNamespace;
        }
        Sight::Pids
    }

    /// Judge the recorded holder of pass `pass_id` from this process's
    /// point of view.
    pub fn judge(&self, holder: &Holder, pass_id: &str) -> Verdict {
        let lock = self.lock_of(pass_id);
        match self.sight(holder) {
            Sight::PreviousBoot => {
                return Verdict::new(Liveness::Dead, "recorded on a previous boot")
            }
            Sight::OtherHost => {
                return Verdict::new(Liveness::Unknown, format!("other host {}", holder.host))
            }
            Sight::Pids => return judge_by_pids(self, holder, pass_id, Row::Lease),
            Sight::OtherNamespace => {}
        }
        // Same kernel, another PID namespace (a container): the pids mean
        // nothing here, but the wrapper's kernel lock does.
        match lock.as_deref().map(probe_lock) {
            Some(LockProbe::Held) => Verdict::new(
                Liveness::Alive,
                format!("wrapper holds its lock (pid namespace {})", holder.pid_ns),
            ),
            Some(LockProbe::Free) if holder.child.is_none() => Verdict::new(
                Liveness::Dead,
                "wrapper's lock is free and no child was started",
            ),
            Some(LockProbe::Free) => Verdict::new(
                Liveness::Unknown,
                format!(
                    "wrapper's lock is free; child pid {} is in another pid namespace",
                    holder.child.map(|c| c.pid).unwrap_or_default()
                ),
            ),
            _ => Verdict::new(
                Liveness::Unknown,
                format!("other pid namespace {}", holder.pid_ns),
            ),
        }
    }
}

impl Evidence {
    /// Judge a queued pass's holder: as `judge`, except that a row whose
    /// recorded wrapper is a live process that is not that pass's jobrun
    /// wrapper is a ghost (dead): a waiter has no command that could run on.
    pub fn judge_waiter(&self, holder: &Holder, pass_id: &str) -> Verdict {
        match self.sight(holder) {
            Sight::Pids => judge_by_pids(self, holder, pass_id, Row::Waiter),
            _ => self.judge(holder, pass_id),
        }
    }
}

/// A pass id as jobrun makes them: 12 lowercase hex digits. Anything else
/// read from a row names no file.
pub fn valid_pass_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What `/proc` says of a recorded process.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ProcState {
    Running,
    /// Exited, not yet reaped: its pid (and group id) are not reusable yet.
    Exited,
    Gone,
    /// The pid now belongs to another process.
    Reused,
    /// It may exist, but this process cannot read it (hidepid, EACCES).
    Unreadable(String),
}

fn read_proc(p: Proc) -> ProcState {
    match fs::read_to_string(format!("/proc/{}/stat", p.pid)) {
        Ok(text) => match parse_stat(&text) {
            Some(s) if s.start != p.start => ProcState::Reused,
            Some(s) if s.exited() => ProcState::Exited,
            Some(_) => ProcState::Running,
            None => ProcState::Unreadable("unparsable /proc stat".into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // /proc mounted with hidepid=2 hides other users' processes;
            // the kernel still answers whether the pid exists. Signal 0
            // delivers nothing: it only asks.
            match nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid), None) {
                Err(nix::errno::Errno::ESRCH) => ProcState::Gone,
                _ => ProcState::Unreadable("hidden in /proc".into()),
            }
        }
        Err(e) => ProcState::Unreadable(e.to_string()),
    }
}

/// The process is alive when a pid with the recorded start time exists,
/// dead when no such process exists, unknown when /proc will not tell.
fn proc_liveness(p: Proc, state: &ProcState) -> (Liveness, String) {
    match state {
        ProcState::Running => (Liveness::Alive, format!("pid {} is running", p.pid)),
        ProcState::Exited => (Liveness::Dead, format!("pid {} has exited", p.pid)),
        ProcState::Gone => (Liveness::Dead, format!("pid {} is gone", p.pid)),
        ProcState::Reused => (
            Liveness::Dead,
            format!("pid {} start time differs (pid reused)", p.pid),
        ),
        ProcState::Unreadable(why) => (
            Liveness::Unknown,
            format!("pid {} cannot be read: {why}", p.pid),
        ),
    }
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

/// Whether `pid` runs a jobrun binary: its executable is named `jobrun`
/// (or `jobrun-*`), or is the very file this process runs. Where the
/// executable cannot be read (another user's process, without root), its
/// command name says the same. `None` when neither can be read.
fn runs_jobrun(pid: i32) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let named = |name: &str| name == "jobrun" || name.starts_with("jobrun-");
    let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else {
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(named(comm.trim_end()));
    };
    let name = exe.file_name()?.to_string_lossy().into_owned();
    if named(name.trim_end_matches(" (deleted)")) {
        return Some(true);
    }
    let theirs = fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    let ours = fs::metadata("/proc/self/exe").ok()?;
    Some(theirs.dev() == ours.dev() && theirs.ino() == ours.ino())
}

/// The pids that hold an flock on the file at `path`, from `/proc/locks`.
/// `None` when the file or `/proc/locks` cannot be read.
fn flock_holders(path: &Path) -> Option<Vec<i32>> {
    use std::os::unix::fs::MetadataExt;
    let file = open_regular(None, path, libc::O_RDONLY)?;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = fs::read_to_string("/proc/locks").ok()?;
    Some(
        locks
            .lines()
            .filter(|l| !l.contains("->"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&id.as_str()))
                    .then(|| f.get(4)?.parse().ok())
                    .flatten()
            })
            .collect(),
    )
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
        if read_proc(holder.wrapper) != ProcState::Running {
            return Verified::No(format!("pid {pid} is not the recorded running process"));
        }
        if self.lock_dir.is_some() {
            let Some(lock) = self.lock_of(pass_id) else {
                return Verified::No("its pass id names no lock of this store".into());
            };
            return verify_lock_holder(&lock, holder.wrapper);
        }
        match runs_jobrun(pid) {
            Some(true) => {}
            Some(false) => return Verified::No(format!("pid {pid} is not a jobrun process")),
            None => return Verified::Cannot(format!("pid {pid} cannot be inspected")),
        }
        let Some(child) = holder.child else {
            return Verified::Cannot(format!("pid {pid} runs jobrun; no command is recorded"));
        };
        match stat(child.pid) {
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
            Verified::No(_) if runs_jobrun(child.pid) == Some(true) => Verified::Likely(format!(
                "pid {pid} is running jobrun; its command is held before exec"
            )),
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
fn verify_lock_holder(lock: &Path, wrapper: Proc) -> Verified {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let pid = wrapper.pid;
    let Some(mut file) = open_regular(None, lock, libc::O_RDONLY) else {
        return Verified::No("the pass's lock is missing".into());
    };
    // SAFETY: flock on an fd we own; dropped with the file.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        return Verified::No(format!(
            "pid {pid} does not hold the pass's lock (it is free)"
        ));
    }
    let mut text = String::new();
    let _ = (&mut file).take(64).read_to_string(&mut text);
    let named: Option<(i32, u64)> = {
        let mut f = text.split_whitespace();
        match (f.next().map(str::parse), f.next().map(str::parse)) {
            (Some(Ok(p)), Some(Ok(s))) => Some((p, s)),
            _ => None,
        }
    };
    match named {
        Some(named) if named != (wrapper.pid, wrapper.start) => Verified::No(format!(
            "the pass's lock is held by another process, not pid {pid}"
        )),
        Some(_) => {
            let owner = file.metadata().map(|m| m.uid()).ok();
            let runs_as = fs::metadata(format!("/proc/{pid}")).map(|m| m.uid()).ok();
            if owner.is_some() && owner == runs_as {
                Verified::Yes(format!("pid {pid} is running and holds the pass's lock"))
            } else {
                Verified::No(format!("the pass's lock is not a file of pid {pid}'s user"))
            }
        }
        None => {
            for _ in 0..3 {
                if flock_holders(lock).is_some_and(|h| h.contains(&pid)) {
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
    let mark = format!("JOBRUN_PASS={pass_id}");
    match fs::read(format!("/proc/{pid}/environ")) {
        Ok(env) if env.split(|b| *b == 0).any(|v| v == mark.as_bytes()) => {
            Verified::Yes(format!("pid {pid} carries the pass's id"))
        }
        Ok(_) => Verified::No(format!("pid {pid} is not of this pass")),
        Err(_) => Verified::Cannot(format!("pid {pid} cannot be inspected")),
    }
}

/// The running members of group `pgid` that belong to pass `pass_id`, and
/// whether any member could not be inspected.
fn pass_members(pass_id: &str, members: &[i32]) -> (Vec<i32>, bool) {
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

/// Which kind of row a holder was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    Lease,
    Waiter,
}

fn judge_by_pids(evidence: &Evidence, holder: &Holder, pass_id: &str, row: Row) -> Verdict {
    let lock = evidence.lock_of(pass_id);
    let lock = lock.as_deref();
    let w = holder.wrapper;
    let state = read_proc(w);
    let (wrapper, wrapper_reason) = match &state {
        ProcState::Running => match evidence.verify_wrapper(holder, pass_id) {
            Verified::Yes(why) | Verified::Likely(why) => {
                return Verdict::new(Liveness::Alive, why)
            }
            // A live process that is not this pass's wrapper: the row does
            // not say who holds the slot; a queue row that names one is a
            // ghost (a waiter has no command that could run on).
            Verified::No(why) if row == Row::Waiter => {
                return Verdict::new(Liveness::Dead, format!("ghost: wrapper {why}"))
            }
            Verified::No(why) => (Liveness::Unknown, format!("wrapper {why}")),
            Verified::Cannot(why) => (Liveness::Unknown, format!("wrapper {why}")),
        },
        ProcState::Unreadable(_) if lock.map(probe_lock) == Some(LockProbe::Held) => {
            // /proc hides it, but the kernel lock is held: a second opinion.
            return Verdict::new(
                Liveness::Alive,
                format!("wrapper pid {} holds its lock", w.pid),
            );
        }
        other => proc_liveness(w, other),
    };
    let Some(child) = holder.child else {
        return Verdict::new(wrapper, wrapper_reason);
    };
    let child_state = read_proc(child);
    let (child_live, child_reason) = match &child_state {
        ProcState::Running => match verify_member(child.pid, pass_id) {
            Verified::Yes(_) => {
                return Verdict::orphaned(format!(
                    "wrapper pid {} is gone but child pid {} runs on",
                    w.pid, child.pid
                ))
            }
            Verified::No(why) | Verified::Likely(why) | Verified::Cannot(why) => {
                (Liveness::Unknown, why)
            }
        },
        other => proc_liveness(child, other),
    };
    // The pass is its whole process group, whose id is the child's pid. A
    // group id is not reused while the group has members, so once the
    // child is gone (or exited, unreaped) a process still in that group
    // that carries the pass's id is of this pass. A pid reused by another
    // process means the group emptied first.
    let group_verdict = match child_state {
        ProcState::Gone | ProcState::Exited => match group(child.pid) {
            Group::Runs(members) => match pass_members(pass_id, &members) {
                (ours, _) if !ours.is_empty() => {
                    return Verdict::orphaned(format!(
                        "wrapper pid {} and child pid {} are gone but pid {} of its process \
                         group runs on",
                        w.pid, child.pid, ours[0]
                    ))
                }
                (_, true) => Some(format!(
                    "process group {} has members this process cannot inspect",
                    child.pid
                )),
                (_, false) => Some(format!(
                    "process group {} runs processes that are not of this pass",
                    child.pid
                )),
            },
            Group::Hidden => Some(format!(
                "process group {} has members this process cannot see",
                child.pid
            )),
            Group::Empty => None,
        },
        _ => None,
    };
    match (wrapper, child_live, group_verdict) {
        (_, _, Some(why)) => Verdict::new(Liveness::Unknown, why),
        (Liveness::Dead, Liveness::Dead, None) => Verdict::new(
            Liveness::Dead,
            format!("{wrapper_reason}; child {child_reason}"),
        ),
        (Liveness::Dead, _, None) => Verdict::new(Liveness::Unknown, child_reason),
        _ => Verdict::new(Liveness::Unknown, wrapper_reason),
    }
}

/// What probing a holder's lock file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockProbe {
    Held,
    Free,
    Missing,
}

/// Open a file beside the store without following a symlink and without
/// blocking (a FIFO planted there opens at once and is refused below), and
/// only when it is a regular file.
fn open_regular(dir: Option<&File>, path: &Path, flags: i32) -> Option<File> {
    use std::ffi::CString;
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let flags = flags | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fd = match dir {
        Some(d) => {
            let name = CString::new(path.file_name()?.as_bytes()).ok()?;
            // SAFETY: openat with a NUL-terminated name and a dir fd we own.
            unsafe { libc::openat(d.as_raw_fd(), name.as_ptr(), flags, 0o600) }
        }
        None => {
            let name = CString::new(path.as_os_str().as_bytes()).ok()?;
            // SAFETY: open with a NUL-terminated path.
            unsafe { libc::open(name.as_ptr(), flags, 0o600) }
        }
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh fd we own.
    let file = unsafe { File::from_raw_fd(fd) };
    file.metadata().ok()?.is_file().then_some(file)
}

/// Probe a holder's lock file: held means its wrapper lives. The probe takes
/// a shared lock for an instant and drops it, so it never blocks the holder.
pub fn probe_lock(path: &Path) -> LockProbe {
    let Some(file) = open_regular(None, path, libc::O_RDONLY) else {
        return LockProbe::Missing;
    };
    // SAFETY: flock on an fd we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if rc == 0 {
        LockProbe::Free
    } else {
        LockProbe::Held
    }
}

/// Remove the lock file of a pass that is gone, if nothing holds it: the
/// file is locked while removed, so a live holder's file is never touched.
/// Only a regular file of this user in the store's holders directory, named
/// for a valid pass id, is ever unlinked; a row names nothing here.
pub fn remove_stale_lock(lock_dir: &Path, pass_id: &str) {
    use std::os::unix::fs::MetadataExt;
    if !valid_pass_id(pass_id) {
        return;
    }
    let Ok(dir) = open_dir(lock_dir) else { return };
    let name = format!("{pass_id}.lock");
    let Some(file) = open_regular(Some(&dir), Path::new(&name), libc::O_RDONLY) else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return;
    }
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        let _ = nix::unistd::unlinkat(&dir, name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
}

/// Open the holders directory without following a symlink, and only if it
/// is a directory owned by this user or root that others cannot write
/// beyond `dir_mode`.
fn open_dir(dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "{}: {e} (it must be a directory, not a symlink)",
                    dir.display()
                ),
            )
        })?;
    let meta = file.metadata()?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {}, neither this user nor root; refusing it",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    Ok(file)
}

/// The lock a live wrapper holds on its file beside the store. The file is
/// opened close-on-exec, so the command does not inherit the lock: it proves
/// the wrapper alive, nothing else. Dropping it unlocks and removes the file.
pub struct HolderLock {
    dir: File,
    name: String,
    file: File,
}

impl HolderLock {
    /// Create and lock `<dir>/<pass_id>.lock`, with the store's file and
    /// directory modes. The directory is created if missing, and refused if
    /// it is a symlink, not a directory, owned by another user (not root),
    /// or writable by others beyond the configured mode.
    pub fn take(dir: &Path, pass_id: &str, modes: (u32, u32)) -> std::io::Result<HolderLock> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        if !valid_pass_id(pass_id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid pass id {pass_id:?}"),
            ));
        }
        match fs::DirBuilder::new().mode(modes.1).create(dir) {
            Ok(()) => {
                // Past the umask: other users sharing the store probe these.
                let d = open_dir(dir)?;
                d.set_permissions(fs::Permissions::from_mode(modes.1))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let d = open_dir(dir)?;
        let mode = d.metadata()?.mode() & 0o7777;
        if mode & 0o022 & !modes.1 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} has mode {mode:04o}: writable by others than --db-mode allows; \
                     refusing it",
                    dir.display()
                ),
            ));
        }
        let name = format!("{pass_id}.lock");
        let cname = std::ffi::CString::new(name.as_str()).expect("hex has no NUL");
        // A fresh name: a file already there was not made by this pass.
        // SAFETY: openat with a NUL-terminated name and a dir fd we own.
        let fd = unsafe {
            libc::openat(
                d.as_raw_fd(),
                cname.as_ptr(),
                libc::O_RDWR
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_CLOEXEC,
                modes.0 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd we own.
        let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        file.set_permissions(fs::Permissions::from_mode(modes.0))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Who holds it, for a judge to compare with the row: read, never
        // trusted alone (the file must also be held, and be its holder's).
        let me = this_process();
        (&file).write_all(format!("{} {}\n", me.pid, me.start).as_bytes())?;
        Ok(HolderLock { dir: d, name, file })
    }
}

impl Drop for HolderLock {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // Unlink only the entry that is still our file.
        let ours = self.file.metadata().ok().map(|m| (m.dev(), m.ino()));
        let there = nix::sys::stat::fstatat(
            &self.dir,
            self.name.as_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()
        .map(|s| (s.st_dev, s.st_ino));
        if ours.is_some() && ours == there {
            let _ = nix::unistd::unlinkat(
                &self.dir,
                self.name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Identity {
        Identity::current()
    }

    fn judge(h: &Holder) -> Verdict {
        Evidence::new(me(), StoreReach::OneMachine, None).judge(h, "000000000000")
    }

    fn holder_of(wrapper: Proc, child: Option<Proc>) -> Holder {
        let me = me();
        Holder {
            host: me.host,
            boot_id: me.boot_id,
            pid_ns: me.pid_ns,
            wrapper,
            child,
        }
    }

    #[test]
    fn stat_parses_names_with_spaces_and_parens() {
        let stat = "42 (a (b) c) S 1 40 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        let s = parse_stat(stat).unwrap();
        assert_eq!((s.state, s.ppid, s.pgrp, s.start), ('S', 1, 40, 98765));
    }

    #[test]
    fn a_wrapper_holding_its_pass_lock_is_alive() {
        let dir = tempfile::tempdir().unwrap();
        let holders = dir.path().join("holders");
        let _lock = HolderLock::take(&holders, "0000000000a2", (0o600, 0o700)).unwrap();
        let evidence = Evidence::new(me(), StoreReach::OneMachine, Some(holders));
        let v = evidence.judge(&holder_of(this_process(), None), "0000000000a2");
        assert_eq!(v.liveness, Liveness::Alive, "{v}");
        // The same live process named under another pass id is no evidence.
        let v = evidence.judge(&holder_of(this_process(), None), "0000000000a3");
        assert_eq!(v.liveness, Liveness::Unknown, "{v}");
    }

    #[test]
    fn a_reused_pid_is_dead() {
        let mut p = this_process();
        p.start += 1;
        let v = judge(&holder_of(p, None));
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
        assert!(v.reason.contains("start time differs"), "{v}");
    }

    #[test]
    fn a_previous_boot_is_dead_on_one_machine_and_unknown_on_a_fleet() {
        let mut h = holder_of(this_process(), None);
        h.boot_id = "an-earlier-boot".into();
        let v = judge(&h);
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
        let v = Evidence::new(me(), StoreReach::Fleet, None).judge(&h, "000000000000");
        assert_eq!(v.liveness, Liveness::Unknown, "{v}");
    }

    #[test]
    fn another_host_is_unknown() {
        let mut h = holder_of(this_process(), None);
        h.host = "web2".into();
        h.boot_id = "web2-boot".into();
        let v = judge(&h);
        assert_eq!(v.liveness, Liveness::Unknown);
        assert_eq!(v.reason, "other host web2");
    }

    #[test]
    fn orphaned_child_keeps_the_holder_alive() {
        let gone = Proc {
            pid: i32::MAX - 1,
            start: 1,
        };
        // A command of pass 000000000000 runs on: it carries the pass's id.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("JOBRUN_PASS", "000000000000")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Ready once it has exec'd with its environment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while verify_member(pid, "000000000000")
            != Verified::Yes(format!("pid {pid} carries the pass's id"))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let command = Proc {
            pid,
            start: start_time(pid).unwrap(),
        };
        let v = judge(&holder_of(gone, Some(command)));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(v.liveness, Liveness::Alive, "{v}");
        assert!(v.orphaned);
        // A live process without the pass's id is no evidence.
        let v = judge(&holder_of(gone, Some(this_process())));
        assert_eq!(v.liveness, Liveness::Unknown, "{v}");
        let v = judge(&holder_of(gone, Some(gone)));
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
    }

    #[test]
    fn a_lock_proves_its_holder_only_when_it_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let holders = dir.path().join("holders");
        let lock = HolderLock::take(&holders, "0000000000b1", (0o600, 0o700)).unwrap();
        let path = holders.join("0000000000b1.lock");
        let me = this_process();
        assert!(matches!(verify_lock_holder(&path, me), Verified::Yes(_)));
        let other = Proc { pid: 1, start: 1 };
        assert!(matches!(verify_lock_holder(&path, other), Verified::No(_)));
        drop(lock);
        // A lock file an earlier jobrun left (it names nobody), held by this
        // process: /proc/locks says who holds it.
        let legacy = holders.join("0000000000b2.lock");
        let file = File::create(&legacy).unwrap();
        assert!(matches!(verify_lock_holder(&legacy, me), Verified::No(_)));
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert!(matches!(verify_lock_holder(&legacy, me), Verified::Yes(_)));
        assert!(!matches!(
            verify_lock_holder(&legacy, other),
            Verified::Yes(_)
        ));
    }

    #[test]
    fn pass_ids_name_files_only_in_jobruns_format() {
        assert!(valid_pass_id("0123456789ab"));
        for bad in [
            "",
            "0123456789a",
            "0123456789AB",
            "../../etc/pw",
            "0123456789ab/",
        ] {
            assert!(!valid_pass_id(bad), "{bad}");
        }
    }

    #[test]
    fn another_pid_namespace_is_judged_by_the_kernel_lock() {
        let dir = tempfile::tempdir().unwrap();
        let holders = dir.path().join("holders");
        let evidence = Evidence::new(me(), StoreReach::OneMachine, Some(holders.clone()));
        let lock = HolderLock::take(&holders, "0000000000a1", (0o600, 0o700)).unwrap();
        let mut h = holder_of(Proc { pid: 1, start: 1 }, None);
        h.pid_ns = "pid:[1]".into();
        let id = "0000000000a1";
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Alive);
        drop(lock);
        // The file is gone with its holder: no answer, so unknown.
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Unknown);
        // A file left behind unlocked: the wrapper is dead.
        fs::write(holders.join(format!("{id}.lock")), b"").unwrap();
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Dead);
        // A FIFO planted under that name is no evidence, and never blocks.
        fs::remove_file(holders.join(format!("{id}.lock"))).unwrap();
        nix::unistd::mkfifo(
            &holders.join(format!("{id}.lock")),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Unknown);
    }
}

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
fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor we own.
    Some(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

fn pidfd_signal(fd: &std::os::fd::OwnedFd, sig: i32) -> Result<(), NotSignalled> {
    // SAFETY: pidfd_send_signal on a pidfd we own, with no siginfo.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ESRCH) {
            NotSignalled::Gone
        } else {
            NotSignalled::Failed(e.to_string())
        });
    }
    Ok(())
}

/// Signal a recorded process only if it is still the process that was
/// recorded. A pidfd pins the process first, then its start time is
/// checked, then the signal goes through the same pidfd: the check and the
/// signal are about the same process even if the pid is recycled meanwhile.
/// The caller has already checked boot and PID namespace.
pub fn signal_verified(p: Proc, sig: i32, dry_run: bool) -> Result<(), NotSignalled> {
    let fd = pidfd(p.pid).ok_or(NotSignalled::Gone)?;
    match read_proc(p) {
        ProcState::Running => {}
        ProcState::Reused => return Err(NotSignalled::Reused),
        // Exited, waiting for its parent to reap it: nothing to signal.
        _ => return Err(NotSignalled::Gone),
    }
    if dry_run {
        return Ok(());
    }
    pidfd_signal(&fd, sig)
}

/// Whose members of a process group may be signalled.
#[derive(Debug, Clone, Copy)]
pub enum Members<'a> {
    /// The group's leader is the command of a verified, live wrapper (its
    /// child, by pid, start time and parent): every member is the pass's.
    Led,
    /// Only members that carry this pass id (an orphaned group).
    OfPass(&'a str),
}

/// Signal the running members of process group `pgid` that `members`
/// allows, each through a pidfd taken before it is checked, so that only
/// processes that are in that group (and of that pass) when signalled
/// receive it. Returns how many were signalled.
pub fn signal_group_verified(
    pgid: i32,
    members: Members,
    sig: i32,
    dry_run: bool,
) -> Result<usize, NotSignalled> {
    let allowed = |pid| match members {
        Members::Led => true,
        Members::OfPass(pass_id) => matches!(verify_member(pid, pass_id), Verified::Yes(_)),
    };
    let Group::Runs(members) = group(pgid) else {
        return Err(NotSignalled::Gone);
    };
    let mut sent = 0;
    let mut failure = None;
    for pid in members {
        let Some(fd) = pidfd(pid) else { continue };
        match stat(pid) {
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
