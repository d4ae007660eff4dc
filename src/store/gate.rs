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
//! The gate is a few byte-range locks (`F_OFD_SETLK`) past the end of the
//! writers' side file, one per CPU this process may run on: a pass takes a
//! free one, or sleeps on the gate's bell in the board's header
//! (`Board::gate_sleep`) until a pass leaving rings it, then looks again.
//! A leaver wakes one sleeper, not all: thousands of passes waiting in the
//! locks themselves were all woken by every leave, and kept hundreds ready
//! to run on two CPUs, the load the gate exists to prevent. A sleeper also
//! looks again every `SLICE` or so: a leaver that died, or one of an older
//! jobrun, rings no bell, and a place held by a stopped process holds up
//! no one. The kernel drops a lock whose process dies, so a pass killed at
//! the gate blocks no one. The gate only orders: a pass that finds no side
//! file yet (a new store), may not write it or map its board, or waits
//! past `PATIENCE` starts as it would without one, and nothing but the
//! time it waited changes. A stop signal ends the wait (the caller's
//! `stopped`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

use super::board::Board;

/// Where the gate's locks start in the side file: past the renewals board.
const AT: usize = super::board::LEN;

/// How long a pass waits at the gate at most: then it starts without it.
/// Far past the busy timeout: thousands of passes started together take
/// seconds to get through, and going on without the gate is what brings
/// back the overload it exists to prevent.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How long a pass sleeps at most (jittered) before it looks for a free
/// place, and for a stop signal, again.
const SLICE: Duration = Duration::from_millis(500);

/// A place at the gate; dropping it lets the next pass through.
pub struct Gate {
    file: File,
    place: usize,
    /// The board whose gate bell the pass rings as it leaves, if it had
    /// one as it entered.
    board: Option<Board>,
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
        Gate::enter_every(store, mode, patience, SLICE, stopped)
    }

    /// `enter`, looking again every `slice` (jittered) when no bell rings.
    fn enter_every(
        store: &Path,
        mode: u32,
        patience: Duration,
        slice: Duration,
        stopped: &mut dyn FnMut() -> bool,
    ) -> Option<Gate> {
        let deadline = Instant::now() + patience;
        let path = super::writers::path_of(store);
        let file = crate::files::open(None, &path, OFlag::O_RDWR, 0).ok()?;
        let md = file.metadata().ok()?;
        crate::files::judge(&path, &md, crate::files::Kind::Regular, mode).ok()?;
        // The bell is in the board's header. A store none of whose passes
        // renewed has no board yet: the first pass to wait makes it.
        let mut board = Board::map(file.try_clone().ok()?, false);
        let places = cpus();
        let fd = file.as_raw_fd();
        loop {
            let rung = board.as_ref().map(Board::gate_rung);
            if let Some(place) = (0..places).find(|&p| lock(fd, p)) {
                return Some(Gate { file, place, board });
            }
            let now = Instant::now();
            if now >= deadline || stopped() {
                return None;
            }
            match (&board, rung) {
                (Some(board), Some(rung)) => {
                    board.gate_sleep(rung, crate::random::jittered(slice).min(deadline - now))
                }
                // Made, then looked at again before the first sleep.
                _ => board = Some(Board::map(file.try_clone().ok()?, true)?),
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
        // A pass that entered before the store had a board looks for one
        // now: a pass that came to wait since made it.
        let board = self.board.take().or_else(|| {
            let file = self.file.try_clone().ok()?;
            Board::map(file, false)
        });
        if let Some(board) = board {
            board.gate_ring();
        }
    }
}

/// Take the lock of `place` if it is free (never waiting: waiters sleep
/// on the bell).
fn lock(fd: libc::c_int, place: usize) -> bool {
    set(fd, place, libc::F_OFD_SETLK, libc::F_WRLCK)
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

    /// A waiter sleeps until a pass leaving rings the gate's bell: it looks
    /// again on its own only every minute here, so only the bell can let
    /// it through long before its patience ends. The store has no board
    /// yet: the waiter makes it, and the passes inside, which entered
    /// without one, ring it as they leave.
    #[test]
    fn a_waiter_passes_as_soon_as_a_place_is_left() {
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
            // Told each time a look found every place taken: the first
            // before the board is made, the second just before it sleeps.
            let mut tried = || {
                let _ = tx.send(());
                false
            };
            let patience = Duration::from_secs(20);
            Gate::enter_every(&path, 0o600, patience, Duration::from_secs(60), &mut tried)
        });
        rx.recv().unwrap();
        rx.recv().unwrap();
        let left = Instant::now();
        drop(inside);
        let passed = waiter.join().unwrap();
        assert!(passed.is_some());
        assert!(
            left.elapsed() < Duration::from_secs(10),
            "the waiter slept through the bell: {:?}",
            left.elapsed()
        );
    }
}
