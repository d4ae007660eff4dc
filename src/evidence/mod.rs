//! Tri-state evidence: is the recorded holder of a lease alive, dead, or
//! unknown?
//!
//! The invariant this module keeps: absence of evidence is not evidence of
//! death. A pid means something only on the boot and in the PID namespace
//! that recorded it, and only together with its start time, which means
//! something only in the time namespace that read it. "Gone" means no
//! process has that pid and start time; a recorded process that runs but
//! cannot be verified as the pass's is `Unknown`, never gone. Anything this
//! process cannot check directly is `Unknown`, and `Unknown` never frees a
//! slot by itself: the lease expiry decides. What `/proc` says comes from
//! `process`, the holders' kernel locks from `files`; this module only
//! judges. `verify` checks that a running process is the pass's.
//!
//! Probes read `/proc` and take file locks, so callers run them outside any
//! store transaction.

mod containers;
mod verify;

use std::path::PathBuf;

use serde::Serialize;

use crate::files::{probe_lock, Holders, LockProbe};
use crate::policy::lease::{time_ns_of, Holder, Proc};
use crate::policy::Liveness;
use crate::process::{self, Group, Identity, State};

pub use verify::{verify_member, OfPass, Verified};

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
    /// This kernel and PID namespace, another time namespace: the pids are
    /// the same, but their start times read here are offset.
    OtherClock,
}

/// Everything a judgement needs besides the row: who is judging, how far
/// the store reaches, and where holders keep their kernel locks.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub me: Identity,
    pub reach: StoreReach,
    pub lock_dir: Option<Holders>,
    /// The stamp of the PostgreSQL store judged for, when read: the
    /// commands of its passes carry it (`process::identity::STORE_ENV`).
    pub store_id: Option<String>,
}

impl Evidence {
    pub fn new(me: Identity, reach: StoreReach, lock_dir: Option<Holders>) -> Evidence {
        Evidence {
            me,
            reach,
            lock_dir,
            store_id: None,
        }
    }

    /// The kernel lock of pass `pass_id`, if the store keeps them and the
    /// id is one jobrun could have made.
    pub fn lock_of(&self, pass_id: &str) -> Option<PathBuf> {
        self.lock_dir.as_ref()?.lock_of(pass_id)
    }

    /// Whether a holder's pids mean anything to this process: the boot,
    /// PID- and time-namespace gate, in one place. A row that recorded no
    /// time namespace was written in the initial one (`time_ns_of`).
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
        if time_ns_of(holder.time_ns.as_deref()) != time_ns_of(Some(&me.time_ns)) {
            return Sight::OtherClock;
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
            // Start times read here are offset from the holder's: no pid can
            // be checked, and nothing here is "dead"; its kernel lock still
            // says when it lives.
            Sight::OtherClock => {
                let ns = time_ns_of(holder.time_ns.as_deref());
                return match lock.as_deref().map(probe_lock) {
                    Some(LockProbe::Held) => Verdict::new(
                        Liveness::Alive,
                        format!("wrapper holds its lock (time namespace {ns})"),
                    ),
                    _ => Verdict::new(Liveness::Unknown, format!("other time namespace {ns}")),
                };
            }
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

/// The process is alive when a pid with the recorded start time exists,
/// dead when no such process exists, unknown when /proc will not tell.
fn proc_liveness(p: Proc, state: &State) -> (Liveness, String) {
    match state {
        State::Running => (Liveness::Alive, format!("pid {} is running", p.pid)),
        State::Exited => (Liveness::Dead, format!("pid {} has exited", p.pid)),
        State::Gone => (Liveness::Dead, format!("pid {} is gone", p.pid)),
        State::Reused => (
            Liveness::Dead,
            format!("pid {} start time differs (pid reused)", p.pid),
        ),
        State::Unreadable(why) => (
            Liveness::Unknown,
            format!("pid {} cannot be read: {why}", p.pid),
        ),
    }
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
    let state = process::read(w);
    let (wrapper, wrapper_reason) = match &state {
        // The recorded wrapper runs: it is not gone, whatever its command
        // does. Either it is this pass's wrapper, or nothing here says who
        // holds the slot (the lease decides); a queue row that names some
        // other process is a ghost (a waiter has no command that could run
        // on).
        State::Running => {
            return match evidence.verify_wrapper(holder, pass_id) {
                Verified::Yes(why) | Verified::Likely(why) => Verdict::new(Liveness::Alive, why),
                Verified::No(why) if row == Row::Waiter => {
                    Verdict::new(Liveness::Dead, format!("ghost: wrapper {why}"))
                }
                Verified::No(why) => Verdict::new(Liveness::Unknown, format!("wrapper {why}")),
                Verified::Cannot(why) => Verdict::new(Liveness::Unknown, why),
            }
        }
        State::Unreadable(_) if lock.map(probe_lock) == Some(LockProbe::Held) => {
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
    // The pass's processes without its wrapper: orphaned when the wrapper
    // is gone, alive (not orphaned) when /proc hides the wrapper.
    let runs_on = |gone: String, what: String| match wrapper {
        Liveness::Dead => Verdict::orphaned(format!("{gone} but {what}")),
        _ => Verdict::new(Liveness::Alive, format!("{what}; wrapper {wrapper_reason}")),
    };
    let of = OfPass {
        id: pass_id,
        group: child.pid,
        session: holder.session,
    };
    let child_state = process::read(child);
    let (child_live, child_reason) = match &child_state {
        State::Running => match verify_member(child.pid, of) {
            Verified::Yes(_) => {
                return runs_on(
                    format!("wrapper pid {} is gone", w.pid),
                    format!("child pid {} runs on", child.pid),
                )
            }
            Verified::No(why) | Verified::Likely(why) | Verified::Cannot(why) => {
                (Liveness::Unknown, why)
            }
        },
        other => proc_liveness(child, other),
    };
    // The pass is its whole process group, whose id is the child's pid. A
    // group id is not reused while the group has members, so once the
    // child is gone (or exited, unreaped) a process still in that group,
    // in the wrapper's session, that carries the pass's id is of this pass.
    // A pid reused by another process means the group emptied first.
    let group_verdict = match child_state {
        State::Gone | State::Exited => match process::group(child.pid) {
            Group::Runs(members) => match verify::pass_members(of, &members) {
                (ours, _) if !ours.is_empty() => {
                    return runs_on(
                        format!("wrapper pid {} and child pid {} are gone", w.pid, child.pid),
                        format!("pid {} of its process group runs on", ours[0]),
                    )
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

#[cfg(test)]
mod tests {
    use super::verify::verify_lock_holder;
    use super::*;
    use crate::files::HolderLock;
    use crate::process::{start_time, this_process};
    use nix::fcntl::{Flock, FlockArg};
    use std::fs::{self, File};

    fn me() -> Identity {
        Identity::current()
    }

    fn holders(dir: PathBuf) -> Option<Holders> {
        Some(Holders::new(dir, 0o600))
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
            time_ns: Some(me.time_ns),
            session: Some(me.session),
            wrapper,
            child,
        }
    }

    #[test]
    fn a_wrapper_holding_its_pass_lock_is_alive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holders");
        let _lock = HolderLock::take(&path, "0000000000a2", (0o600, 0o700), None).unwrap();
        let evidence = Evidence::new(me(), StoreReach::OneMachine, holders(path));
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

    /// A process of pass 000000000000 (it carries the pass's id), started
    /// as jobrun starts a command (`own_group`: leading its own group
    /// inside this session) or as a `setsid` escapee, once it has exec'd.
    fn carrier(own_group: bool) -> (std::process::Child, Proc) {
        use std::os::unix::process::CommandExt;
        let mut c = if own_group {
            let mut c = std::process::Command::new("sleep");
            c.process_group(0);
            c
        } else {
            let mut c = std::process::Command::new("setsid");
            c.arg("sleep");
            c
        };
        let child = c
            .arg("30")
            .env("JOBRUN_PASS", "000000000000")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Ready once it has exec'd sleep with its environment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let ready = || {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end() == "sleep")
                && std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|e| {
                    e.split(|b| *b == 0)
                        .any(|v| v == b"JOBRUN_PASS=000000000000")
                })
        };
        while !ready() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let p = Proc {
            pid,
            start: start_time(pid).unwrap(),
        };
        (child, p)
    }

    #[test]
    fn orphaned_child_keeps_the_holder_alive() {
        let gone = Proc {
            pid: i32::MAX - 1,
            start: 1,
        };
        let (mut child, command) = carrier(true);
        let v = judge(&holder_of(gone, Some(command)));
        // Recorded in another session than the wrapper's: no member.
        let mut elsewhere = holder_of(gone, Some(command));
        elsewhere.session = Some(me().session + 1);
        let elsewhere = judge(&elsewhere);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(v.liveness, Liveness::Alive, "{v}");
        assert!(v.orphaned);
        assert_eq!(elsewhere.liveness, Liveness::Unknown, "{elsewhere}");
        assert!(!elsewhere.orphaned);
        // A live process without the pass's id is no evidence.
        let v = judge(&holder_of(gone, Some(this_process())));
        assert_eq!(v.liveness, Liveness::Unknown, "{v}");
        let v = judge(&holder_of(gone, Some(gone)));
        assert_eq!(v.liveness, Liveness::Dead, "{v}");
    }

    /// A daemon that left with `setsid` carries the pass's id for life, yet
    /// it is no member of the pass, whatever a row names it.
    #[test]
    fn a_setsid_escapee_is_no_member() {
        let gone = Proc {
            pid: i32::MAX - 1,
            start: 1,
        };
        let (mut daemon, d) = carrier(false);
        let mut forged = holder_of(gone, Some(d));
        let v = judge(&forged);
        forged.session = Some(d.pid);
        let v_own_session = judge(&forged);
        let of = OfPass {
            id: "000000000000",
            group: d.pid,
            session: None,
        };
        let member = verify_member(d.pid, of);
        let _ = daemon.kill();
        let _ = daemon.wait();
        for v in [v, v_own_session] {
            assert_eq!(v.liveness, Liveness::Unknown, "{v}");
            assert!(!v.orphaned, "{v}");
            assert!(
                v.reason.contains("setsid") || v.reason.contains("session"),
                "{v}"
            );
        }
        assert!(matches!(member, Verified::No(_)), "{member:?}");
    }

    /// A wrapper that runs is never "gone": a live process the row names
    /// that is not this pass's wrapper (it holds no lock of this store)
    /// leaves the holder unknown, even when the row's command is a live
    /// member of the pass.
    #[test]
    fn a_running_wrapper_that_cannot_be_verified_is_unknown_not_gone() {
        let dir = tempfile::tempdir().unwrap();
        let evidence = Evidence::new(me(), StoreReach::OneMachine, holders(dir.path().into()));
        let (mut child, command) = carrier(true);
        let v = evidence.judge(&holder_of(this_process(), Some(command)), "000000000000");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(v.liveness, Liveness::Unknown, "{v}");
        assert!(!v.orphaned, "{v}");
        assert!(!v.reason.contains("gone"), "{v}");
    }

    #[test]
    fn a_lock_proves_its_holder_only_when_it_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let holders = dir.path().join("holders");
        let lock = HolderLock::take(&holders, "0000000000b1", (0o600, 0o700), None).unwrap();
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
        let _held = Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap();
        assert!(matches!(verify_lock_holder(&legacy, me), Verified::Yes(_)));
        assert!(!matches!(
            verify_lock_holder(&legacy, other),
            Verified::Yes(_)
        ));
    }

    #[test]
    fn another_pid_namespace_is_judged_by_the_kernel_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holders");
        let evidence = Evidence::new(me(), StoreReach::OneMachine, holders(path.clone()));
        let lock = HolderLock::take(&path, "0000000000a1", (0o600, 0o700), None).unwrap();
        let mut h = holder_of(Proc { pid: 1, start: 1 }, None);
        h.pid_ns = "pid:[1]".into();
        let id = "0000000000a1";
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Alive);
        drop(lock);
        // The file is gone with its holder: no answer, so unknown.
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Unknown);
        // A file left behind unlocked: the wrapper is dead.
        fs::write(path.join(format!("{id}.lock")), b"").unwrap();
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Dead);
        // A FIFO planted under that name is no evidence, and never blocks.
        fs::remove_file(path.join(format!("{id}.lock"))).unwrap();
        nix::unistd::mkfifo(
            &path.join(format!("{id}.lock")),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert_eq!(evidence.judge(&h, id).liveness, Liveness::Unknown);
    }
}
