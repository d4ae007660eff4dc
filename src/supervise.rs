//! Spawn the child, forward signals to it, reap it, decide the exit code.
//!
//! One thread owns the child. Signals to the wrapper, the renewer's "lease
//! lost", and the child's exit all arrive as `events::Event`s, and only the
//! owning thread signals or reaps. The child's exit is noticed with
//! `waitid(WNOWAIT)`, which leaves it a zombie until the owner reaps it, so
//! its pid and process group cannot be recycled while the owner might still
//! signal them: the owner ends what is left of the group first and reaps the
//! child last. That is how jobrun avoids zombies and signals to reused pids.

use std::os::unix::process::ExitStatusExt;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use crate::events::{Event, Events};
use crate::exit;
use crate::process::{self, Group};
use crate::report::{Level, Log};
use crate::signal::{signal_group, PassGroup};
use crate::spawn::RunningChild;

/// What to do with the child when the lease is lost (`--on-lost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Keep running: single-flight is a convenience; the fencing token is
    /// the bound.
    Continue,
    /// Stop the child as if the wrapper had received TERM.
    Term,
}

/// How the pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The terminating signal the wrapper received and forwarded, if any.
    pub stopped_by: Option<i32>,
    pub lease_lost: bool,
    /// jobrun had to send KILL after the grace period.
    pub killed: bool,
    /// The command ran past `--timeout` and was told to stop.
    pub timed_out: bool,
}

impl Ended {
    pub fn exit_code(&self) -> i32 {
        exit::from_child(self.code, self.signal)
    }
}

/// What a signal to the wrapper means for the pass, decided here once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalKind {
    /// Stop the pass (TERM, INT, HUP, QUIT): forwarded to the command's
    /// group; before the command runs, it is never started.
    Stop {
        /// KILL the group `--kill-after` later (TERM and INT).
        grace: bool,
    },
    /// Forwarded and nothing more (USR1, USR2).
    ForwardOnly,
}

pub fn classify(sig: i32) -> SignalKind {
    match sig {
        SIGTERM | SIGINT => SignalKind::Stop { grace: true },
        SIGHUP | SIGQUIT => SignalKind::Stop { grace: false },
        _ => SignalKind::ForwardOnly,
    }
}

/// Signal the child's process group; the child is not reaped yet.
fn signal_own(child: &RunningChild, sig: i32) {
    let _ = signal_group(PassGroup::Own(child), sig, false);
}

/// How the owner of the child stops it: the grace period after TERM or
/// INT, what a lost lease means, and the `--timeout` deadline.
#[derive(Debug, Clone, Copy)]
pub struct Stopping {
    pub kill_after: Duration,
    pub on_lost: OnLost,
    /// `--timeout`, counted from the command's start: past it the group
    /// gets TERM, then KILL `kill_after` later.
    pub timeout: Option<(Instant, Duration)>,
}

/// What the owner of the child does once, at `at`, while the child runs
/// (a pass starts its renewer's thread when the first renewal is due).
pub struct Due<'a> {
    pub at: Instant,
    pub run: &'a mut dyn FnMut(),
}

/// Own the child until it is gone: forward signals, stop it when the lease
/// is lost and the policy says so or when it runs past its timeout, KILL it
/// `kill_after` a TERM or INT, reap it, and make sure nothing of its
/// process group is left behind silently. What it does on its own (a KILL, a
/// stop, leftovers ended) it says on `log`, each line prefixed with `label`.
pub fn supervise(
    child: &mut RunningChild,
    events: &Events,
    how: Stopping,
    label: &str,
    log: &Log,
    mut due: Option<Due>,
) -> Ended {
    let Stopping {
        kill_after,
        on_lost,
        timeout,
    } = how;
    let mut stopped_by = None;
    let mut lease_lost = false;
    let mut killed = false;
    let mut timed_out = false;
    let mut kill_at: Option<Instant> = None;
    let start_grace = |kill_at: &mut Option<Instant>| {
        kill_at.get_or_insert_with(|| crate::clock::deadline_after(kill_after));
    };
    loop {
        // The nearest of the KILL after a grace period and the timeout.
        let kill_due = kill_at.filter(|_| !killed);
        let timeout_due = timeout.filter(|_| !timed_out).map(|(at, _)| at);
        let next = [kill_due, timeout_due, due.as_ref().map(|d| d.at)]
            .into_iter()
            .flatten()
            .min();
        let event = match next {
            Some(at) => match events.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout)
                    if due.as_ref().is_some_and(|d| d.at <= Instant::now()) =>
                {
                    if let Some(d) = due.take() {
                        (d.run)();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout) if kill_due.is_some_and(|k| k <= Instant::now()) => {
                    log.line(
                        Level::Warning,
                        format_args!(
                            "{label}: child still running {} after TERM; sending KILL",
                            humantime::format_duration(kill_after)
                        ),
                    );
                    signal_own(child, libc::SIGKILL);
                    killed = true;
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((_, after)) = timeout {
                        log.line(
                            Level::Warning,
                            format_args!(
                                "{label}: timed out after {}; sending TERM",
                                humantime::format_duration(after)
                            ),
                        );
                    }
                    signal_own(child, libc::SIGTERM);
                    timed_out = true;
                    start_grace(&mut kill_at);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => Event::ChildExited,
            },
            None => events.recv(),
        };
        match event {
            Event::Signal(sig) => {
                signal_own(child, sig);
                if let SignalKind::Stop { grace } = classify(sig) {
                    stopped_by.get_or_insert(sig);
                    if grace {
                        start_grace(&mut kill_at);
                    }
                }
            }
            Event::LeaseLost | Event::MaxHold => {
                lease_lost = true;
                if on_lost == OnLost::Term {
                    log.line(
                        Level::Warning,
                        format_args!("{label}: stopping the pass (--on-lost term)"),
                    );
                    signal_own(child, libc::SIGTERM);
                    start_grace(&mut kill_at);
                }
            }
            Event::ChildExited => break,
            Event::Wake => {}
        }
    }
    crate::trace::mark("child");
    // The child has exited but is not reaped: its group id stays ours
    // while what is left of the group is ended, and only then is it reaped.
    end_group_leftovers(child, kill_after, label, log, due);
    // Members that ended last are reaped here, whether or not their
    // SIGCHLD has been read yet.
    if let Some(pgid) = child.leader() {
        process::reap_adopted(pgid);
    }
    crate::events::forget_leader();
    let status = child.wait();
    crate::trace::mark("group");
    Ended {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        stopped_by,
        lease_lost,
        killed,
        timed_out,
    }
}

/// The child's process group outlived its leader: TERM what is left, then
/// KILL after the grace period, so no process of the pass runs on unseen
/// into the next pass. The leader is an unreaped zombie meanwhile, so the
/// group id cannot be reused and `killpg` also reaches a member forked a
/// moment before it. That can take the grace period, longer than a lease:
/// what was due while the child ran (the renewals) starts first.
fn end_group_leftovers(
    child: &RunningChild,
    kill_after: Duration,
    label: &str,
    log: &Log,
    due: Option<Due>,
) {
    let Some(pgid) = child.leader() else {
        return;
    };
    if !group_runs(pgid) {
        return;
    }
    if let Some(d) = due {
        (d.run)();
    }
    log.line(
        Level::Warning,
        format_args!("{label}: the command left processes in its process group; sending TERM"),
    );
    signal_own(child, libc::SIGTERM);
    let deadline = crate::clock::deadline_after(kill_after);
    while Instant::now() < deadline {
        if !group_runs(pgid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    log.line(
        Level::Warning,
        format_args!("{label}: processes of the pass survived TERM; sending KILL"),
    );
    signal_own(child, libc::SIGKILL);
}

/// Whether a process of group `pgid` still runs (zombies, the leader's
/// among them, count as gone, so they never hold the wrapper for the grace
/// period and draw a needless KILL).
fn group_runs(pgid: i32) -> bool {
    process::own_group(pgid) != Group::Empty
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::FORWARDED;
    use signal_hook::consts::signal::{SIGUSR1, SIGUSR2};

    #[test]
    fn signals_are_classified_once() {
        assert_eq!(classify(SIGTERM), SignalKind::Stop { grace: true });
        assert_eq!(classify(SIGINT), SignalKind::Stop { grace: true });
        assert_eq!(classify(SIGHUP), SignalKind::Stop { grace: false });
        assert_eq!(classify(SIGQUIT), SignalKind::Stop { grace: false });
        assert_eq!(classify(SIGUSR1), SignalKind::ForwardOnly);
        assert_eq!(classify(SIGUSR2), SignalKind::ForwardOnly);
        // Every forwarded signal has a meaning.
        assert!(FORWARDED
            .iter()
            .all(|s| classify(*s) != SignalKind::ForwardOnly || [SIGUSR1, SIGUSR2].contains(s)));
    }

    /// The command leaves a process that keeps forking members into its
    /// group, each of them a moment before the next signal: all are ended
    /// while the leader is still an unreaped zombie (so the group id is
    /// ours), and then the leader is reaped.
    #[test]
    fn leftovers_forked_late_are_ended_and_the_leader_reaped_last() {
        use crate::spawn::HeldChild;
        use nix::sys::wait::{waitpid, WaitPidFlag};
        use nix::unistd::Pid;
        let dir = tempfile::tempdir().unwrap();
        let at_term = dir.path().join("at-term");
        let ready = dir.path().join("ready");
        let script = format!(
            "exec 2>/dev/null\n\
             leader=$$\n\
             ( trap 'cat /proc/'$leader'/stat > {at_term}' TERM\n\
               touch {ready}\n\
               while :; do sleep 30 & sleep 0.01; done ) &\n\
             until [ -e {ready} ]; do sleep 0.01; done\n\
             exit 3",
            at_term = at_term.display(),
            ready = ready.display(),
        );
        let argv: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), script.into()];
        let (events, rx) = crate::events::sent_only().unwrap();
        let mut child = HeldChild::fork(&argv, &[], &[], None)
            .unwrap()
            .release(1, 0);
        let pgid = child.id() as i32;
        crate::events::watch_exit(child.id(), events).unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let sink = std::sync::Arc::clone(&lines);
        let log = Log(std::sync::Arc::new(move |_, l: &str| {
            sink.lock().unwrap().push(l.to_string())
        }));
        let ended = supervise(
            &mut child,
            &rx,
            Stopping {
                kill_after: Duration::from_millis(500),
                on_lost: OnLost::Continue,
                timeout: None,
            },
            "t",
            &log,
            None,
        );
        assert_eq!(ended.code, Some(3));
        // Said on the pass's log (stderr in a pass), not on the test's.
        let said = lines.lock().unwrap().clone();
        assert!(
            said.first()
                .is_some_and(|l| l.starts_with("t: the command left processes")),
            "{said:?}"
        );
        // TERM reached the group while the leader was a zombie of ours.
        let stat = std::fs::read_to_string(&at_term).unwrap();
        let stat = process::parse_stat(&stat).unwrap();
        assert_eq!((stat.state, stat.pgrp), ('Z', pgid), "{stat:?}");
        // Every member, however late it was forked, is gone (KILLed members
        // wait a moment for init to reap them: those count as gone).
        let deadline = Instant::now() + Duration::from_secs(5);
        while process::group(pgid) != Group::Empty && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(process::group(pgid), Group::Empty);
        // And no zombie is left: the leader was reaped.
        assert_eq!(
            waitpid(Pid::from_raw(pgid), Some(WaitPidFlag::WNOHANG)),
            Err(nix::errno::Errno::ECHILD)
        );
    }
}
