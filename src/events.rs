//! Where a pass's events arrive: signals to the wrapper, the child's exit,
//! the renewer's "lease lost", and a queued pass's wake-ups.
//!
//! They are all read on the thread that owns the pass, and no thread is
//! started to watch for them. A signal's handler only marks it and rings a
//! bell (signal-hook's self-pipe, a socket pair); the child's exit is a
//! SIGCHLD among them. Threads that exist anyway (the renewer, once its
//! first renewal is due; a waiter's wake-up watchers) send on a channel
//! and ring the same bell. The owner waits in `poll` on the bell and reads
//! what rang it. A pass whose command ends before its first renewal runs
//! on one thread from start to end: a second thread would cost every
//! later `munmap` and `fork` of the pass a cross-CPU TLB flush.

use std::cell::RefCell;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SendError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
use nix::sys::time::TimeSpec;
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use signal_hook::consts::signal::SIGCHLD;
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;

use crate::process;
use crate::spawn::{ignored_now, taken_over};

/// Everything the owner of the child reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Signal(i32),
    /// The child has exited (not yet reaped).
    ChildExited,
    /// The renewer lost the lease.
    LeaseLost,
    /// The renewer reached the max hold.
    MaxHold,
    /// A release on this machine may have freed a slot (queue only).
    Wake,
}

/// The child whose exit is noticed on SIGCHLD (0: none), and whether
/// SIGCHLD is caught at all.
static WATCHED: AtomicI32 = AtomicI32::new(0);
/// The leader of the child's group until it is reaped (0: none): on
/// SIGCHLD, the orphans of its group this process adopted are reaped
/// (`process::reap_adopted`).
static LEADER: AtomicI32 = AtomicI32::new(0);
static ON_SIGCHLD: AtomicBool = AtomicBool::new(false);

/// The sending side, for the threads of a pass: what it sends, it also
/// rings the owner's bell with.
#[derive(Clone)]
pub struct EventSender {
    tx: Sender<Event>,
    bell: Arc<UnixStream>,
}

impl EventSender {
    pub fn send(&self, event: Event) -> Result<(), SendError<Event>> {
        self.tx.send(event)?;
        // Non-blocking: a full bell is ringing already.
        let _ = (&*self.bell).write(&[0]);
        Ok(())
    }
}

/// The receiving side, read by the thread that owns the pass.
pub struct Events {
    rx: Receiver<Event>,
    /// Where the signals read from the bell are put in line.
    tx: EventSender,
    /// The bell's read end, and the signals caught.
    signals: RefCell<SignalDelivery<UnixStream, SignalOnly>>,
}

/// Catch the forwarded signals jobrun takes over (`spawn::takes_over`: all
/// but one its caller ignored, TERM always), and SIGCHLD unless the
/// caller ignored it (the command then inherits that unchanged, and its
/// exit is waited for by a thread of its own, `watch_exit`). Call this
/// before spawning anything: a signal that arrives early is then an event,
/// not fatal, and because the handlers are real handlers (not SIG_IGN),
/// exec resets them to default in the child.
pub fn watch_signals() -> io::Result<(EventSender, Events)> {
    // Read what the caller ignored before any handler replaces it.
    let mut taken = taken_over().to_vec();
    if !ignored_now(SIGCHLD) {
        ON_SIGCHLD.store(true, Ordering::SeqCst);
        taken.push(SIGCHLD);
    }
    let events = channel(&taken)?;
    // A caller may hand down a mask that blocks them: their handlers would
    // never run (a child's exit unseen, TERM left pending). Unblocked once
    // the handlers are in place, so one pending already is an event too.
    // The command gets an empty mask anyway (`spawn`).
    unblock(&taken);
    Ok(events)
}

/// Events with no signal caught: only what is sent.
#[cfg(test)]
pub fn sent_only() -> io::Result<(EventSender, Events)> {
    channel(&[])
}

fn channel(signals: &[i32]) -> io::Result<(EventSender, Events)> {
    let (read, write) = UnixStream::pair()?;
    read.set_nonblocking(true)?;
    write.set_nonblocking(true)?;
    let bell = Arc::new(write.try_clone()?);
    let signals = SignalDelivery::with_pipe(read, write, SignalOnly, signals)?;
    let (tx, rx) = mpsc::channel();
    let sender = EventSender { tx, bell };
    let events = Events {
        rx,
        tx: sender.clone(),
        signals: RefCell::new(signals),
    };
    Ok((sender, events))
}

impl Events {
    /// Put the signals caught since the last look in line. SIGCHLD is not
    /// an event of its own: the watched child's exit is, once.
    fn take_signals(&self) {
        let mut signals = self.signals.borrow_mut();
        for sig in signals.pending() {
            match sig {
                SIGCHLD => notice_exit(&self.tx, true),
                _ => {
                    let _ = self.tx.tx.send(Event::Signal(sig));
                }
            }
        }
    }

    pub fn try_recv(&self) -> Result<Event, TryRecvError> {
        self.take_signals();
        self.rx.try_recv()
    }

    /// Every event in line now.
    pub fn try_iter(&self) -> impl Iterator<Item = Event> + '_ {
        std::iter::from_fn(|| self.try_recv().ok())
    }

    /// The next event, waiting up to `timeout` for it. It never reports a
    /// disconnection: the events hold a sender of their own.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Ok(e) = self.try_recv() {
                return Ok(e);
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            self.wait_for_bell(deadline.map(|_| left));
        }
    }

    /// The next event, waiting as long as it takes.
    pub fn recv(&self) -> Event {
        loop {
            if let Ok(e) = self.try_recv() {
                return e;
            }
            self.wait_for_bell(None);
        }
    }

    /// Wait until the bell rings, `left` passes (`None`: no limit), or a
    /// signal interrupts the wait.
    fn wait_for_bell(&self, left: Option<Duration>) {
        let signals = self.signals.borrow();
        let mut fds = [PollFd::new(signals.get_read().as_fd(), PollFlags::POLLIN)];
        let left = left.map(TimeSpec::from_duration);
        // EINTR is a signal caught: the next look reads it.
        let _ = nix::poll::ppoll(&mut fds, left, None);
    }
}

/// Unblock `signals` in the calling thread (and the threads it starts
/// after).
fn unblock(signals: &[i32]) {
    let mut set = SigSet::empty();
    for sig in signals.iter().filter_map(|&s| Signal::try_from(s).ok()) {
        set.add(sig);
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&set), None);
}

/// On SIGCHLD (and once when the watch starts): if the watched child has
/// exited, say so on `events`, exactly once. Otherwise, on SIGCHLD
/// (`reap`), reap the orphans this process adopted that have ended (when
/// the child has exited, its owner reaps them once the group is ended, so
/// a pass's usual end lists no children here).
fn notice_exit(events: &EventSender, reap: bool) {
    let pid = WATCHED.load(Ordering::SeqCst);
    if pid != 0 && exited(pid) {
        if WATCHED
            .compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            let _ = events.send(Event::ChildExited);
        }
        return;
    }
    let leader = LEADER.load(Ordering::SeqCst);
    if reap && leader != 0 {
        process::reap_adopted(leader);
    }
}

/// Whether child `pid` has exited, without reaping it (no longer our child
/// counts as exited, as a blocking wait would end).
fn exited(pid: i32) -> bool {
    let how = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    loop {
        match waitid(Id::Pid(Pid::from_raw(pid)), how) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(WaitStatus::StillAlive) => return false,
            _ => return true,
        }
    }
}

/// Notice the child's exit without reaping it, and say so on `events`: on
/// SIGCHLD when it is caught, else from a thread that waits for it.
pub fn watch_exit(pid: u32, events: EventSender) -> io::Result<()> {
    if ON_SIGCHLD.load(Ordering::SeqCst) {
        LEADER.store(pid as i32, Ordering::SeqCst);
        WATCHED.store(pid as i32, Ordering::SeqCst);
        // It may have exited before it was watched.
        notice_exit(&events, false);
        return Ok(());
    }
    std::thread::Builder::new()
        .name("jobrun-child".into())
        .spawn(move || {
            let exited = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            while let Err(nix::errno::Errno::EINTR) =
                waitid(Id::Pid(Pid::from_raw(pid as i32)), exited)
            {}
            let _ = events.send(Event::ChildExited);
        })?;
    Ok(())
}

/// The child's group has no leader of ours any more (it is about to be
/// reaped): orphans are no longer reaped on SIGCHLD for it.
pub fn forget_leader() {
    LEADER.store(0, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use signal_hook::consts::signal::SIGUSR2;

    /// What another thread sends wakes the owner at once, however long
    /// it was ready to wait.
    #[test]
    fn a_send_from_another_thread_wakes_the_waiting_owner() {
        let (sender, events) = sent_only().unwrap();
        let (ready_tx, ready) = mpsc::channel();
        let t = std::thread::spawn(move || {
            ready.recv().unwrap();
            sender.send(Event::LeaseLost).unwrap();
        });
        let asked = Instant::now();
        ready_tx.send(()).unwrap();
        assert_eq!(
            events.recv_timeout(Duration::from_secs(60)),
            Ok(Event::LeaseLost)
        );
        assert!(asked.elapsed() < Duration::from_secs(30));
        t.join().unwrap();
        // Nothing more: a wait with nothing sent ends at its timeout.
        assert_eq!(
            events.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
    }

    /// A signal caught while the owner waits is an event, read on the
    /// owner's thread: no thread is started for it.
    #[test]
    fn a_caught_signal_wakes_the_waiting_owner() {
        let (_sender, events) = channel(&[SIGUSR2]).unwrap();
        let pid = std::process::id();
        let t = std::thread::spawn(move || {
            nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGUSR2).unwrap();
        });
        let asked = Instant::now();
        assert_eq!(
            events.recv_timeout(Duration::from_secs(60)),
            Ok(Event::Signal(SIGUSR2))
        );
        assert!(asked.elapsed() < Duration::from_secs(30));
        t.join().unwrap();
    }
}
