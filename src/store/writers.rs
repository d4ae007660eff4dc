//! The writers' line of a SQLite store: a kernel lock on a side file
//! (`<store>-writers`) that every write transaction of this jobrun takes
//! before `BEGIN IMMEDIATE` and drops after its `COMMIT`.
//!
//! SQLite's own write lock cannot be waited on: a writer that finds it
//! taken naps and tries again, so with thousands of passes renewing
//! through one file the lock was mostly free while its waiters slept,
//! and waiters that woke kept thousands of processes busy trying. Waiting
//! in the kernel instead hands a freed lock to the next writer at once,
//! and a waiter costs nothing while it waits.
//!
//! It only orders jobrun's writers: SQLite's lock still guards every
//! write, so an earlier jobrun that ignores the file, the `sqlite3` shell,
//! or a process that could not open the file, stays correct beside it. A
//! process killed in its turn loses its kernel lock with it. Readers never
//! take it.
//!
//! A wait has a deadline (a renewal must give up before its lease lapses):
//! `flock` blocks until the lock is ours or a signal interrupts it, so a
//! per-thread timer (`timer_create`, `SIGEV_THREAD_ID`) sends this thread
//! `TURN_SIGNAL`, caught by a handler that does nothing and installed
//! without `SA_RESTART`, at the deadline and every few milliseconds after
//! it, until the wait ends (a signal sent just before the wait began is
//! followed by another). Polling with short naps instead would bring back
//! the sleepers this line exists to remove. Where the handler cannot be
//! installed (the signal's disposition is not the default), waits poll.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

use super::board::Board;

/// The side file's suffix, beside the store file as `-wal` and `-shm`.
pub const WRITERS_SUFFIX: &str = "-writers";

/// The path of the writers' line of the store at `store`.
pub fn path_of(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(WRITERS_SUFFIX);
    PathBuf::from(p)
}

/// How often the timer repeats once the deadline has passed.
const REPEAT: Duration = Duration::from_millis(5);

/// The nap of a poll, where no timer can end a wait.
const POLL_NAP: Duration = Duration::from_millis(1);

/// The signal that ends a wait at its deadline: a real-time signal, never
/// one a pass forwards to its command.
fn turn_signal() -> libc::c_int {
    libc::SIGRTMIN() + 5
}

extern "C" fn nothing(_: libc::c_int) {}

/// Unblock the timer's signal in this thread: a mask handed down by the
/// caller may block it, and a wait would then never end at its deadline.
fn unblock_turn_signal() {
    // SAFETY: a sigset_t filled by sigemptyset/sigaddset; pthread_sigmask
    // only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, turn_signal());
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Install the do-nothing handler once, where the signal has its default
/// disposition (an ignored signal would stay ignored for the command).
fn timers_usable() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is a valid out-parameter, and a
        // handler that does nothing is async-signal-safe.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(turn_signal(), std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                return false;
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut new.sa_mask);
            new.sa_flags = 0;
            libc::sigaction(turn_signal(), &new, std::ptr::null_mut()) == 0
        }
    })
}

/// The store's writers' line, opened with the store.
#[derive(Debug)]
pub struct Writers {
    file: File,
    /// The renewals board in the same file, once mapped (`board`).
    board: OnceLock<Board>,
    /// How many turns this line gave (for tests that a step takes none).
    #[cfg(test)]
    pub(super) turns: std::sync::atomic::AtomicUsize,
}

/// This connection's turn to write; dropping it lets the next writer in.
pub struct Turn<'a>(&'a File);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // SAFETY: the descriptor is open while the borrowed file is.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Writers {
    /// Open the line of the store at `store`, creating it as the store's
    /// other files are made: never through a symlink, `mode` past the
    /// umask, the store's group for a group store, and as root the store
    /// file's owner. It is judged like the store (`files::judge`): a file
    /// refused is one line naming it. `Ok(None)` where the caller may not
    /// create or open it (a user who only reads the store): its writes, if
    /// any, are ordered by SQLite alone.
    pub fn open(
        store: &Path,
        owner: &std::fs::Metadata,
        mode: u32,
    ) -> Result<Option<Writers>, String> {
        use std::os::unix::fs::MetadataExt;
        let path = path_of(store);
        // Opened for writing where it may be, for its renewals board; a
        // user who may only read it still waits in line.
        let made = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL;
        let (file, created) = match crate::files::open(None, &path, made, mode) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                match crate::files::open(None, &path, OFlag::O_RDWR, 0).or_else(|e| {
                    match e.raw_os_error() {
                        Some(libc::EACCES | libc::EPERM | libc::EROFS) => {
                            crate::files::open(None, &path, OFlag::O_RDONLY, 0)
                        }
                        _ => Err(e),
                    }
                }) {
                    Ok(f) => (f, false),
                    Err(e) => return Self::unusable(&path, e, mode),
                }
            }
            Err(e) => return Self::unusable(&path, e, mode),
        };
        if created {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
            let group = (mode & 0o020 != 0).then(|| owner.gid());
            if nix::unistd::geteuid().is_root() && owner.uid() != 0 {
                let uid = nix::unistd::Uid::from_raw(owner.uid());
                let gid = group.map(nix::unistd::Gid::from_raw);
                nix::unistd::fchown(&file, Some(uid), gid)
                    .map_err(|e| format!("cannot give {} its owner: {e}", path.display()))?;
            } else {
                crate::files::give_group(&file, group)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let md = file
            .metadata()
            .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
        crate::files::judge(&path, &md, crate::files::Kind::Regular, mode)?;
        Ok(Some(Writers {
            file,
            board: OnceLock::new(),
            #[cfg(test)]
            turns: Default::default(),
        }))
    }

    /// A line that cannot be opened: refused when something other than a
    /// regular file is in its place, left aside when the caller may not
    /// make or open it.
    fn unusable(path: &Path, e: std::io::Error, mode: u32) -> Result<Option<Writers>, String> {
        if let Ok(md) = std::fs::symlink_metadata(path) {
            crate::files::judge(path, &md, crate::files::Kind::Regular, mode)?;
        }
        match e.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => Ok(None),
            _ => Err(crate::files::open_failure(path, &e)),
        }
    }

    /// The renewals board in this file: made (the file grown) if `make`,
    /// else only where one already is. `None` where this user cannot
    /// write the file or map it.
    pub fn board(&self, make: bool) -> Option<&Board> {
        if let Some(board) = self.board.get() {
            return Some(board);
        }
        if !make && self.file.metadata().ok()?.len() < super::board::LEN as u64 {
            return None;
        }
        let board = Board::map(self.file.try_clone().ok()?, make)?;
        Some(self.board.get_or_init(|| board))
    }

    /// Wait in line until `deadline`: the turn, or `None` once the
    /// deadline has passed.
    pub fn turn(&self, deadline: Instant) -> Option<Turn<'_>> {
        let turn = self.free().or_else(|| self.wait(deadline));
        self.count(&turn);
        turn
    }

    /// The turn if nobody has it now, without waiting at all.
    pub fn try_turn(&self) -> Option<Turn<'_>> {
        let turn = self.free();
        self.count(&turn);
        turn
    }

    fn free(&self) -> Option<Turn<'_>> {
        // SAFETY: flock on a descriptor this line owns.
        let free = unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        (free == 0).then_some(Turn(&self.file))
    }

    #[cfg(test)]
    fn count(&self, turn: &Option<Turn<'_>>) {
        if turn.is_some() {
            self.turns
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[cfg(not(test))]
    fn count(&self, _turn: &Option<Turn<'_>>) {}

    fn wait(&self, deadline: Instant) -> Option<Turn<'_>> {
        let fd = self.file.as_raw_fd();
        let got = wait_until(
            deadline,
            // SAFETY: flock on a descriptor this line owns; a signal
            // interrupts the wait.
            || unsafe { libc::flock(fd, libc::LOCK_EX) } == 0,
            || self.free().map(std::mem::forget).is_some(),
        );
        got.then_some(Turn(&self.file))
    }
}

/// Wait in a kernel lock until `deadline`: `lock` blocks until the lock is
/// had (`true`) or a signal interrupts it (`false`, with `EINTR`), and the
/// timer's signal interrupts it at the deadline. Where no timer can be
/// used, `try_lock` (without blocking) is tried every millisecond instead.
/// Whether the lock was had.
pub(super) fn wait_until(
    deadline: Instant,
    mut lock: impl FnMut() -> bool,
    mut try_lock: impl FnMut() -> bool,
) -> bool {
    let timer = match timers_usable() {
        true => {
            unblock_turn_signal();
            Timer::until(deadline)
        }
        false => None,
    };
    let Some(timer) = timer else {
        loop {
            if try_lock() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(crate::random::jittered(POLL_NAP));
        }
    };
    let got = loop {
        if lock() {
            break true;
        }
        let interrupted = std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
        if !interrupted || Instant::now() >= deadline {
            break false;
        }
    };
    drop(timer);
    got
}

/// Set a byte-range lock of `kind` (`F_WRLCK`, `F_UNLCK`) on `len` bytes
/// at `start` of the side file `fd` with `cmd` (`F_OFD_SETLK`, or
/// `F_OFD_SETLKW` to wait): the lock of the open file description, which
/// the kernel drops when its last descriptor closes. Whether it was set.
pub(super) fn byte_lock(
    fd: libc::c_int,
    start: usize,
    len: usize,
    cmd: libc::c_int,
    kind: libc::c_int,
) -> bool {
    // SAFETY: a zeroed flock is valid; fcntl reads it.
    unsafe {
        let mut fl: libc::flock = std::mem::zeroed();
        fl.l_type = kind as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = start as libc::off_t;
        fl.l_len = len as libc::off_t;
        libc::fcntl(fd, cmd, &mut fl) == 0
    }
}

/// A timer that signals this thread at a deadline and every `REPEAT` after
/// it, until dropped.
struct Timer(libc::timer_t);

impl Timer {
    fn until(deadline: Instant) -> Option<Timer> {
        let left = deadline.saturating_duration_since(Instant::now());
        // A timer armed with zero is disarmed: a deadline passed fires now.
        let left = left.max(Duration::from_micros(1));
        let spec = |d: Duration| libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a zeroed sigevent is valid; its fields are set below and
        // name this thread, which outlives the timer (dropped in `turn`).
        unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = turn_signal();
            ev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as libc::pid_t;
            let mut id: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id) != 0 {
                return None;
            }
            let when = libc::itimerspec {
                it_interval: spec(REPEAT),
                it_value: spec(left),
            };
            if libc::timer_settime(id, 0, &when, std::ptr::null_mut()) != 0 {
                libc::timer_delete(id);
                return None;
            }
            Some(Timer(id))
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: the timer was created by `until` and is deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(dir: &Path) -> Writers {
        let store = dir.join("s.db");
        let owner = File::create(&store).unwrap().metadata().unwrap();
        Writers::open(&store, &owner, 0o600).unwrap().unwrap()
    }

    #[test]
    fn a_turn_is_one_writer_at_a_time_and_a_wait_ends_at_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (line(dir.path()), line(dir.path()));
        let held = a.turn(Instant::now()).expect("a free line is ours at once");
        let t = Instant::now();
        assert!(b.turn(t + Duration::from_millis(80)).is_none());
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(80) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        drop(held);
        assert!(b.turn(Instant::now()).is_some(), "freed: the next one's");
    }

    #[test]
    fn a_freed_turn_is_handed_to_the_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let a = line(dir.path());
        let path = dir.path().to_path_buf();
        let held = a.turn(Instant::now()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let b = line(&path);
            tx.send(()).unwrap();
            let got = b.turn(Instant::now() + Duration::from_secs(20)).is_some();
            got
        });
        rx.recv().unwrap();
        drop(held);
        assert!(waiter.join().unwrap());
    }
}
