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
use std::os::fd::AsRawFd;
use std::path::Path;

use serde::Serialize;

use crate::lease::{Holder, Proc};

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
        let boot_id = std::env::var(BOOT_ID_ENV)
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| {
                fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            });
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

/// The start time of `pid` in clock ticks since boot, or `None` when no
/// such process exists (or `/proc` cannot tell).
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Field 22 of `/proc/PID/stat`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    parse_stat(stat).map(|(_, start)| start)
}

/// Fields 3 (the state letter) and 22 (the start time) of `/proc/PID/stat`.
/// The command name (field 2) may contain spaces and parentheses, so
/// fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// This process as evidence.
pub fn this_process() -> Proc {
    let pid = std::process::id() as i32;
    Proc {
        pid,
        start: start_time(pid).unwrap_or(0),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    Alive,
    Dead,
    Unknown,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "alive",
            Liveness::Dead => "dead",
            Liveness::Unknown => "unknown",
        }
    }
}

/// A judgement with the reason an operator reads, for example
/// `dead: pid 4242 start time differs (pid reused)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub liveness: Liveness,
    pub reason: String,
    /// The wrapper is dead but the child lives on: the pass is orphaned.
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

/// Judge a recorded holder from this process's point of view.
pub fn judge(holder: &Holder, me: &Identity, reach: StoreReach) -> Verdict {
    if holder.boot_id != me.boot_id {
        if reach == StoreReach::OneMachine && holder.host == me.host {
            return Verdict::new(Liveness::Dead, "recorded on a previous boot");
        }
        return Verdict::new(Liveness::Unknown, format!("other host {}", holder.host));
    }
    if holder.pid_ns == me.pid_ns {
        return judge_by_pids(holder);
    }
    // Same kernel, another PID namespace (a container): the pids mean
    // nothing here, but the wrapper's kernel lock does.
    match holder.lock_path.as_deref().map(probe_lock) {
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

/// What `/proc` says of a pid, from one read of its stat file.
enum ProcRead {
    Gone,
    /// It exists; `exited` when it is a zombie waiting to be reaped.
    Present {
        start: u64,
        exited: bool,
    },
    /// It may exist, but this process cannot read it (hidepid, EACCES).
    Unreadable(String),
}

fn read_proc(pid: i32) -> ProcRead {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => match parse_stat(&stat) {
            Some((state, start)) => ProcRead::Present {
                start,
                exited: matches!(state, 'Z' | 'X'),
            },
            None => ProcRead::Unreadable("unparsable /proc stat".into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // /proc mounted with hidepid=2 hides other users' processes;
            // the kernel still answers whether the pid exists. Signal 0
            // delivers nothing: it only asks.
            match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
                Err(nix::errno::Errno::ESRCH) => ProcRead::Gone,
                _ => ProcRead::Unreadable("hidden in /proc".into()),
            }
        }
        Err(e) => ProcRead::Unreadable(e.to_string()),
    }
}

/// The process is alive when a pid with the recorded start time exists,
/// dead when no such process exists, unknown when /proc will not tell.
fn proc_liveness(p: Proc) -> (Liveness, String) {
    let (start, exited) = match read_proc(p.pid) {
        ProcRead::Gone => return (Liveness::Dead, format!("pid {} is gone", p.pid)),
        ProcRead::Unreadable(why) => {
            return (
                Liveness::Unknown,
                format!("pid {} cannot be read: {why}", p.pid),
            )
        }
        ProcRead::Present { start, exited } => (start, exited),
    };
    if start != p.start {
        return (
            Liveness::Dead,
            format!("pid {} start time differs (pid reused)", p.pid),
        );
    }
    // An unreaped zombie has exited; its parent just has not waited yet.
    if exited {
        return (Liveness::Dead, format!("pid {} has exited", p.pid));
    }
    (Liveness::Alive, format!("pid {} is running", p.pid))
}

fn judge_by_pids(holder: &Holder) -> Verdict {
    let (mut wrapper, mut wrapper_reason) = proc_liveness(holder.wrapper);
    // The kernel lock is a second opinion on the wrapper: a held lock proves
    // it alive even if /proc is hidden from us.
    if wrapper != Liveness::Alive {
        if let Some(LockProbe::Held) = holder.lock_path.as_deref().map(probe_lock) {
            wrapper = Liveness::Alive;
            wrapper_reason = format!("wrapper pid {} holds its lock", holder.wrapper.pid);
        }
    }
    let child = holder.child.map(proc_liveness);
    match (wrapper, child) {
        (Liveness::Alive, _) => Verdict::new(Liveness::Alive, wrapper_reason),
        (_, Some((Liveness::Alive, _))) => {
            let mut v = Verdict::new(
                Liveness::Alive,
                format!(
                    "wrapper pid {} is gone but child pid {} runs on",
                    holder.wrapper.pid,
                    holder.child.map(|c| c.pid).unwrap_or_default()
                ),
            );
            v.orphaned = true;
            v
        }
        (Liveness::Dead, None) => Verdict::new(Liveness::Dead, wrapper_reason),
        (Liveness::Dead, Some((Liveness::Dead, child_reason))) => Verdict::new(
            Liveness::Dead,
            format!("{wrapper_reason}; child {child_reason}"),
        ),
        _ => Verdict::new(Liveness::Unknown, wrapper_reason),
    }
}

/// What probing a holder's kernel lock file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockProbe {
    Held,
    Free,
    Missing,
}

/// Probe a holder's lock file: held means its wrapper lives. The probe takes
/// a shared lock for an instant and drops it, so it never blocks the holder.
pub fn probe_lock(path: &str) -> LockProbe {
    let Ok(file) = OpenOptions::new().read(true).open(path) else {
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

/// Remove the lock file of a holder that is gone, if nothing holds it: the
/// file is locked while removed, so a live holder's file is never touched.
pub fn remove_stale_lock(path: &str) {
    let Ok(file) = OpenOptions::new().read(true).open(path) else {
        return;
    };
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        let _ = fs::remove_file(path);
    }
}

/// The lock a live wrapper holds on its file beside the store. The file is
/// opened close-on-exec, so the child does not inherit the lock: it proves
/// the wrapper alive, nothing else. Dropping it unlocks and removes the file.
pub struct HolderLock {
    path: std::path::PathBuf,
    _file: File,
}

impl HolderLock {
    /// Create and lock `<dir>/<pass_id>.lock`, with the store's file and
    /// directory modes.
    pub fn take(dir: &Path, pass_id: &str, modes: (u32, u32)) -> std::io::Result<HolderLock> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        if !dir.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(modes.1)
                .create(dir)?;
            // Past the umask: other users sharing the store probe these locks.
            fs::set_permissions(dir, fs::Permissions::from_mode(modes.1))?;
        }
        let path = dir.join(format!("{pass_id}.lock"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(modes.0)
            .open(&path)?;
        file.set_permissions(fs::Permissions::from_mode(modes.0))?;
        // SAFETY: flock on an fd we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(HolderLock { path, _file: file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HolderLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Identity {
        Identity::current()
    }

    fn holder_of(wrapper: Proc, child: Option<Proc>) -> Holder {
        let me = me();
        Holder {
            host: me.host,
            boot_id: me.boot_id,
            pid_ns: me.pid_ns,
            wrapper,
            child,
            lock_path: None,
        }
    }

    #[test]
    fn start_time_parses_names_with_spaces_and_parens() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        assert_eq!(parse_start_time(stat), Some(98765));
    }

    #[test]
    fn this_process_is_alive() {
        let v = judge(
            &holder_of(this_process(), None),
            &me(),
            StoreReach::OneMachine,
        );
        assert_eq!(v.liveness, Liveness::Alive, "{v}");
    }

    #[test]
    fn a_reused_pid_is_dead() {
        let mut p = this_process();
        p.start += 1;
        let v = judge(&holder_of(p, None), &me(), StoreReach::OneMachine);
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
        assert!(v.reason.contains("start time differs"), "{v}");
    }

    #[test]
    fn a_previous_boot_is_dead_on_one_machine_and_unknown_on_a_fleet() {
        let mut h = holder_of(this_process(), None);
        h.boot_id = "an-earlier-boot".into();
        let v = judge(&h, &me(), StoreReach::OneMachine);
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
        let v = judge(&h, &me(), StoreReach::Fleet);
        assert_eq!(v.liveness, Liveness::Unknown, "{v}");
    }

    #[test]
    fn another_host_is_unknown() {
        let mut h = holder_of(this_process(), None);
        h.host = "web2".into();
        h.boot_id = "web2-boot".into();
        let v = judge(&h, &me(), StoreReach::OneMachine);
        assert_eq!(v.liveness, Liveness::Unknown);
        assert_eq!(v.reason, "other host web2");
    }

    #[test]
    fn orphaned_child_keeps_the_holder_alive() {
        let gone = Proc {
            pid: i32::MAX - 1,
            start: 1,
        };
        let v = judge(
            &holder_of(gone, Some(this_process())),
            &me(),
            StoreReach::OneMachine,
        );
        assert_eq!(v.liveness, Liveness::Alive, "{v}");
        assert!(v.orphaned);
        let v = judge(&holder_of(gone, Some(gone)), &me(), StoreReach::OneMachine);
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
    }

    #[test]
    fn another_pid_namespace_is_judged_by_the_kernel_lock() {
        let dir = tempfile::tempdir().unwrap();
        let lock = HolderLock::take(dir.path(), "p1", (0o600, 0o700)).unwrap();
        let mut h = holder_of(Proc { pid: 1, start: 1 }, None);
        h.pid_ns = "pid:[1]".into();
        h.lock_path = Some(lock.path().to_string_lossy().into_owned());
        assert_eq!(
            judge(&h, &me(), StoreReach::OneMachine).liveness,
            Liveness::Alive
        );
        let path = lock.path().to_path_buf();
        drop(lock);
        // The file is gone with its holder: no answer, so unknown.
        assert_eq!(
            judge(&h, &me(), StoreReach::OneMachine).liveness,
            Liveness::Unknown
        );
        // A file left behind unlocked: the wrapper is dead.
        fs::write(&path, b"").unwrap();
        assert_eq!(
            judge(&h, &me(), StoreReach::OneMachine).liveness,
            Liveness::Dead
        );
    }
}

/// What to do with a held lease, given its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Free(crate::lease::Eviction),
}

/// The evidence rules in one place. An unattended caller (`run`, a waiter)
/// passes `force = false`; only `clear-locks --force` passes true.
/// Dead frees at once; unknown frees once the lease has lapsed; alive frees
/// only when forced or past its own max hold.
pub fn decide(lease: &crate::lease::LeaseRow, verdict: &Verdict, force: bool) -> Decision {
    use crate::lease::{EvictIf, Eviction};
    let evict = |condition| {
        Decision::Free(Eviction {
            slot: lease.slot,
            token: lease.token,
            condition,
        })
    };
    match verdict.liveness {
        Liveness::Dead => evict(EvictIf::TokenMatches),
        _ if force => evict(EvictIf::TokenMatches),
        _ if lease.forfeited() => evict(EvictIf::Forfeited),
        Liveness::Unknown if lease.lapsed() => evict(EvictIf::Lapsed),
        _ => Decision::Keep,
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

/// Signal a recorded process only if it is still the process that was
/// recorded. A pidfd pins the process first, then its start time is
/// checked, then the signal goes through the same pidfd: the check and the
/// signal are about the same process even if the pid is recycled meanwhile.
/// The caller has already checked boot and PID namespace.
pub fn signal_verified(p: Proc, sig: i32, dry_run: bool) -> Result<(), NotSignalled> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) };
    if fd < 0 {
        return Err(NotSignalled::Gone);
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    match read_proc(p.pid) {
        ProcRead::Gone | ProcRead::Unreadable(_) => return Err(NotSignalled::Gone),
        ProcRead::Present { start, .. } if start != p.start => return Err(NotSignalled::Reused),
        // Exited, waiting for its parent to reap it: nothing to signal.
        ProcRead::Present { exited: true, .. } => return Err(NotSignalled::Gone),
        ProcRead::Present { .. } => {}
    }
    if dry_run {
        return Ok(());
    }
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
