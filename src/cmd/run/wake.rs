//! Wake files: each waiter queued on this machine listens on a FIFO of its
//! own, named by its pass id, and a pass that frees a slot writes one byte
//! to the FIFOs of only the waiters that can now be promoted, head first
//! (one per free slot). A waiter promoted while slots are still free wakes
//! the next ones. Waking every waiter at every release made them all open
//! the store at once: a queue of 200 took 4-5 times its work to drain.
//! A FIFO costs one descriptor, where an inotify instance per waiter ran
//! into the kernel's per-user limit (128 by default) in a long queue.
//!
//! Where they live: SQLite, `<store>.holders/<pass id>.wake`, beside the
//! holders' lock files; PostgreSQL (not tied to a file),
//! `$XDG_RUNTIME_DIR/jobrun-postgres.wake.d/` when that is an absolute
//! directory owned by the caller with mode 0700, otherwise
//! `<tmp>/jobrun-<uid>/wake.d/` in a 0700 directory jobrun creates and
//! checks. Only waiters of the same user are woken there; others poll.
//!
//! They are a module of their own because they are files others may plant. A
//! path is only ever made from a pass id of the right form; a wake file is
//! opened without following a symlink and without blocking (a FIFO with no
//! reader fails at once), and written only when `files::judge` allows it as
//! a FIFO (owned by the caller or root or, for a group-shared store, by its
//! group); anything else is left untouched. Nothing depends on them for
//! correctness (waiters also poll with a bounded interval), so a refused
//! wake file costs one warning line and prompt wake-ups, never a pass or a
//! wait.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use crate::events::{Event, EventSender};
use crate::files::{self, valid_pass_id, Kind};
use crate::policy::slots::Occupancy;
use crate::say;
use crate::store::{StoreHandle, StoreSpec};

/// A waiter's wake FIFO: `<pass id>.wake` in the directory below.
pub const WAKE_SUFFIX: &str = ".wake";
/// A PostgreSQL store's wake directory in `$XDG_RUNTIME_DIR`.
pub const RUNTIME_WAKE_DIR: &str = "jobrun-postgres.wake.d";
/// Without a usable `$XDG_RUNTIME_DIR`: `<tmp>/jobrun-<uid>/wake.d`.
pub const TMP_DIR_PREFIX: &str = "jobrun-";
pub const TMP_WAKE_DIR: &str = "wake.d";

/// The directory of the wake files of `spec`, made ready.
pub fn dir(spec: &StoreSpec) -> Result<PathBuf, String> {
    if let Some(holders) = spec.lock_dir() {
        return Ok(holders);
    }
    if let Some(runtime) = files::runtime_dir() {
        let d = runtime.join(RUNTIME_WAKE_DIR);
        files::private_dir(&d)?;
        return Ok(d);
    }
    let uid = nix::unistd::geteuid();
    let base = std::env::temp_dir().join(format!("{TMP_DIR_PREFIX}{uid}"));
    files::private_dir(&base)?;
    let d = base.join(TMP_WAKE_DIR);
    files::private_dir(&d)?;
    Ok(d)
}

/// The wake file of the waiter of pass `pass_id`: `None` unless the pass
/// id has the form jobrun gives (it is read from the store).
pub fn file_of(dir: &Path, pass_id: &str) -> Option<PathBuf> {
    valid_pass_id(pass_id).then(|| dir.join(format!("{pass_id}{WAKE_SUFFIX}")))
}

/// Whether a wake FIFO's metadata makes it ours to use (`files::judge`).
fn usable_fifo(spec: &StoreSpec, path: &Path, md: &std::fs::Metadata) -> bool {
    files::judge(path, md, Kind::Fifo, spec.modes().0).is_ok()
}

fn open_fifo(path: &Path, flags: OFlag) -> std::io::Result<File> {
    files::open(None, path, flags, 0)
}

/// A waiter's own wake FIFO, listened to until it is dropped; then it is
/// removed (unless something else has taken its place) and its listening
/// thread told to end.
pub struct WakeWatch {
    path: PathBuf,
    /// Our own writing end: keeps the FIFO from reporting end-of-file
    /// between releasers, and ends the listener.
    keep: File,
}

/// The byte a releaser writes, and the one that ends the listener.
const WAKE: u8 = b'w';
const DONE: u8 = b'q';

impl Drop for WakeWatch {
    fn drop(&mut self) {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ours), Ok(there)) = (self.keep.metadata(), std::fs::symlink_metadata(&self.path))
        {
            if ours.dev() == there.dev() && ours.ino() == there.ino() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        let _ = self.keep.write_all(&[DONE]);
    }
}

/// Create the wake FIFO of the waiter of pass `pass_id` and forward each
/// wake-up written to it to `events` as `Event::Wake`, through a thread
/// blocked in poll(2). `None` (after one warning line) when there is no
/// usable wake file: the waiter then polls.
pub fn watch(spec: &StoreSpec, pass_id: &str, events: EventSender) -> Option<WakeWatch> {
    let made = dir(spec)
        .and_then(|d| file_of(&d, pass_id).ok_or_else(|| format!("invalid pass id {pass_id:?}")))
        .and_then(|p| listen(spec, &p).map(|ends| (p, ends)));
    let (path, (read, keep)) = match made {
        Ok(x) => x,
        Err(why) => {
            say!(
                warning,
                "warning: not using a wake file (this waiter falls back to polling): {why}"
            );
            return None;
        }
    };
    let guard = WakeWatch { path, keep };
    std::thread::Builder::new()
        .name("jobrun-wake".into())
        .spawn(move || listen_loop(read, events))
        .ok()?;
    Some(guard)
}

/// Make the FIFO (never over anything already there) and open both ends.
fn listen(spec: &StoreSpec, path: &Path) -> Result<(File, File), String> {
    use nix::sys::stat::Mode;
    let mode = spec.modes().0;
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(mode as libc::mode_t))
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    // A FIFO made but not listened to is removed: nothing is left behind.
    let ends = open_ends(spec, path, mode);
    if ends.is_err() {
        let _ = std::fs::remove_file(path);
    }
    ends
}

/// Open both ends of a FIFO just made, and give it the store's group and
/// mode.
fn open_ends(spec: &StoreSpec, path: &Path, mode: u32) -> Result<(File, File), String> {
    use nix::sys::stat::{fchmod, Mode};
    let read = open_fifo(path, OFlag::O_RDONLY).map_err(|e| files::open_failure(path, &e))?;
    let keep = open_fifo(path, OFlag::O_WRONLY).map_err(|e| files::open_failure(path, &e))?;
    // The store's group and its mode past the umask: a group-shared
    // store's releasers (any member, root) write to it.
    files::give_group(&read, spec.group()).map_err(|e| format!("{}: {e}", path.display()))?;
    let _ = fchmod(&read, Mode::from_bits_truncate(mode as libc::mode_t));
    Ok((read, keep))
}

fn listen_loop(read: File, events: EventSender) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::io::Read;
    use std::os::fd::AsFd;
    let mut read = read;
    let mut buf = [0u8; 64];
    loop {
        let mut fds = [PollFd::new(read.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let mut woken = false;
        loop {
            match read.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if buf[..n].contains(&DONE) {
                        return;
                    }
                    woken = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        if woken && events.send(Event::Wake).is_err() {
            return;
        }
    }
}

/// Wake the waiters of `job` that can be promoted now: the first in line,
/// one per free slot (the smallest `--slots` among holders and waiters
/// binds, as in promotion). A waiter without a wake file here (queued on
/// another machine, or whose file was refused) is not woken: it polls.
pub fn wake_next(handle: &mut StoreHandle, job: &str) {
    let spec = handle.spec().clone();
    let Ok(store) = handle.get() else {
        return;
    };
    let jobs = [job.to_string()];
    let Ok(waiters) = store.waiters(&jobs) else {
        return;
    };
    if waiters.is_empty() {
        return;
    }
    let Ok(leases) = store.leases(&jobs) else {
        return;
    };
    // The same count as promotion (`Occupancy`): the smallest `--slots`
    // binds, never below one.
    let free = Occupancy::of(
        leases.iter().map(|l| (l.slot, l.slots)),
        waiters.iter().map(|w| (w.id, w.slots)),
        None,
    )
    .free();
    if free == 0 {
        return;
    }
    let Ok(dir) = dir(&spec) else {
        return;
    };
    // A waiter that is not listening here (queued on another machine, or
    // dead: a ghost) is passed over for the next, so a ghost at the head
    // does not leave the queue to its polls; a few at most.
    let mut woken = 0;
    for w in waiters.iter().take(free + MAX_PASSED_OVER) {
        if touch(&spec, &dir, &w.pass_id) {
            woken += 1;
            if woken == free {
                break;
            }
        }
    }
}

/// Remove the wake FIFO of a waiter judged dead (a ghost removed from the
/// queue): only a FIFO that is ours to use, and only when nobody listens on
/// it any more.
pub fn remove_stale(spec: &StoreSpec, pass_id: &str) {
    let Ok(dir) = dir(spec) else {
        return;
    };
    let Some(path) = file_of(&dir, pass_id) else {
        return;
    };
    let Ok(md) = std::fs::symlink_metadata(&path) else {
        return;
    };
    if !usable_fifo(spec, &path, &md) {
        return;
    }
    // A FIFO with a reader refuses nothing: opening it succeeds. ENXIO
    // means no reader is left.
    match open_fifo(&path, OFlag::O_WRONLY) {
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            let _ = std::fs::remove_file(&path);
        }
        _ => {}
    }
}

/// How many waiters not listening here a release passes over.
const MAX_PASSED_OVER: usize = 4;

/// Wake one waiter through its FIFO, if it is here, listening, and ours
/// to use: whether it was woken. Never blocks: a FIFO nobody reads fails
/// to open at once, a full one already holds a wake-up.
fn touch(spec: &StoreSpec, dir: &Path, pass_id: &str) -> bool {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let Some(path) = file_of(dir, pass_id) else {
        return false;
    };
    // Judged before it is opened (opening a planted device could act on
    // it), and again through the descriptor (it may have been replaced).
    let Ok(before) = std::fs::symlink_metadata(&path) else {
        return false;
    };
    if !usable_fifo(spec, &path, &before) {
        return false;
    }
    let Ok(mut fifo) = open_fifo(&path, OFlag::O_WRONLY) else {
        return false;
    };
    match fifo.metadata() {
        Ok(md)
            if md.ino() == before.ino()
                && md.dev() == before.dev()
                && usable_fifo(spec, &path, &md) =>
        {
            match fifo.write_all(&[WAKE]) {
                Ok(_) => true,
                // Full: a wake-up is already waiting to be read.
                Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
            }
        }
        _ => false,
    }
}
