//! The starters' gate of a SQLite store: at most one pass per CPU opens
//! the store and takes its slot at a time; the others wait at the gate,
//! asleep in the kernel.
//!
//! When thousands of passes start together (a fleet's cron minute), every
//! one of them opening the store at once kept hundreds of processes ready
//! to run on a few CPUs. A writer then waited for a CPU for seconds in the
//! middle of its turn in the writers' line, every renewal queued behind
//! it, and leases were lost. Behind the gate, the passes that start run
//! on CPUs of their own and are done in a few milliseconds each, so the
//! same starts end sooner and running passes keep renewing meanwhile.
//!
//! The gate is a few byte-range locks (`F_OFD_SETLKW`) past the end of the
//! writers' side file, one per CPU this process may run on: a pass takes a
//! free one, or waits for its own (its pid's), looking for a free one
//! again every `SLICE` (one held by a stopped process must not hold up
//! every pass behind it). The kernel drops a lock whose process dies, so a
//! pass killed at the gate blocks no one. The gate only orders: a pass
//! that finds no side file yet (a new store), may not write it, or waits
//! past `PATIENCE` starts as it would without one, and nothing but the
//! time it waited changes. A stop signal ends the wait (the caller's
//! `stopped`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

/// Where the gate's locks start in the side file: past the renewals board.
const AT: usize = super::board::LEN;

/// How long a pass waits at the gate at most: then it starts without it.
/// Far past the busy timeout: thousands of passes started together take
/// seconds to get through, and going on without the gate is what brings
/// back the overload it exists to prevent.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How long a wait for one place lasts before the others are tried again
/// (and a stop signal looked for).
const SLICE: Duration = Duration::from_millis(500);

/// A place at the gate; dropping it lets the next pass through.
pub struct Gate {
    file: File,
    place: usize,
}

impl Gate {
    /// Wait at most `patience` for a place at the gate of the store at
    /// `store` (created with `mode`), asking `stopped` every `SLICE`
    /// whether to give up. `None` where there is no gate to wait at, or
    /// none was had in time (or `stopped`): the caller goes on without.
    pub fn enter(
        store: &Path,
        mode: u32,
        patience: Duration,
        stopped: &mut dyn FnMut() -> bool,
    ) -> Option<Gate> {
        let deadline = Instant::now() + patience;
        let path = super::writers::path_of(store);
        let file = crate::files::open(None, &path, OFlag::O_RDWR, 0).ok()?;
        let md = file.metadata().ok()?;
        crate::files::judge(&path, &md, crate::files::Kind::Regular, mode).ok()?;
        let places = cpus();
        let fd = file.as_raw_fd();
        let mine = std::process::id() as usize % places;
        loop {
            if let Some(place) = (0..places).find(|&p| lock(fd, p, libc::F_OFD_SETLK)) {
                return Some(Gate { file, place });
            }
            let now = Instant::now();
            if now >= deadline || stopped() {
                return None;
            }
            let until = (now + SLICE).min(deadline);
            if super::writers::wait_until(
                until,
                || lock(fd, mine, libc::F_OFD_SETLKW),
                || lock(fd, mine, libc::F_OFD_SETLK),
            ) {
                return Some(Gate { file, place: mine });
            }
            // Ended before its time: the kernel refused the wait itself
            // (no lock left to wait with), not a place taken.
            if Instant::now() < until {
                return None;
            }
        }
    }
}

/// The CPUs this process may run on (its affinity; one syscall, where
/// the standard library's count also reads the cgroup's files).
fn cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        (libc::CPU_COUNT(&set) as usize).max(1)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // Unlocked, not only closed: a command forked meanwhile shares the
        // descriptor until its exec.
        set(
            self.file.as_raw_fd(),
            self.place,
            libc::F_OFD_SETLK,
            libc::F_UNLCK,
        );
    }
}

/// Take the lock of `place` (`cmd`: `F_OFD_SETLK` or `F_OFD_SETLKW`).
fn lock(fd: libc::c_int, place: usize, cmd: libc::c_int) -> bool {
    set(fd, place, cmd, libc::F_WRLCK)
}

/// One byte past the board per place.
fn set(fd: libc::c_int, place: usize, cmd: libc::c_int, kind: libc::c_int) -> bool {
    super::writers::byte_lock(fd, AT + place, 1, cmd, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The side file of `store`, as the store's first writer makes it.
    fn made(store: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let path = super::super::writers::path_of(store);
        std::fs::File::create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn the_gate_lets_one_pass_per_cpu_through_and_the_next_when_one_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.db");
        let patience = Duration::from_millis(50);
        assert!(
            Gate::enter(&store, 0o600, patience, &mut || false).is_none(),
            "no side file yet: no gate"
        );
        made(&store);
        let cpus = cpus();
        let inside: Vec<Gate> = (0..cpus)
            .map(|_| Gate::enter(&store, 0o600, patience, &mut || false).expect("a free place"))
            .collect();
        let t = Instant::now();
        assert!(
            Gate::enter(&store, 0o600, patience, &mut || false).is_none(),
            "all taken"
        );
        assert!(t.elapsed() >= patience, "it did not wait its patience");
        drop(inside);
        assert!(
            Gate::enter(&store, 0o600, patience, &mut || false).is_some(),
            "freed"
        );
    }

    #[test]
    fn a_waiter_passes_as_soon_as_its_place_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.db");
        made(&store);
        let cpus = cpus();
        let inside: Vec<Gate> = (0..cpus)
            .map(|_| Gate::enter(&store, 0o600, Duration::ZERO, &mut || false).unwrap())
            .collect();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = store.clone();
        let waiter = std::thread::spawn(move || {
            tx.send(()).unwrap();
            Gate::enter(&path, 0o600, Duration::from_secs(20), &mut || false).is_some()
        });
        rx.recv().unwrap();
        drop(inside);
        assert!(waiter.join().unwrap());
    }
}
