//! The renewals board of a SQLite store: the body of the writers' side
//! file (`writers`), where a pass's renewal is asked for and then written
//! by whichever writer has the line's turn first, in one transaction with
//! that writer's own write and every other renewal asked meanwhile.
//!
//! One write transaction per renewal made SQLite the limit of a store
//! shared by thousands of passes: each transaction takes and drops a
//! handful of locks on the store's `-shm`, and the kernel checks each
//! against the lock of every open connection, so the cost of a renewal
//! grew with the number of passes and a fleet's with its square. On the
//! board most renewals cost their pass a turn in the line and no
//! transaction: its request was written in the turn before its own.
//!
//! A renewer claims a place once (a byte-range lock, `F_OFD_SETLK`, held
//! while its pass lives), writes its request there with the renewal's
//! stamps (its own clock, read as it asks), and waits in line. A writer in
//! its turn takes the requests of the same store and boot clock, renews
//! each with its requester's stamps (the same compare-and-set its pass
//! would run), commits, and answers each. The renewal is the one its pass
//! would have written itself the instant it asked: a pass that dies or
//! stops after asking holds its lease no longer than if it had renewed
//! then, so no writer needs to check that the requester still lives.
//!
//! A place's state word carries a sequence number: an answer or a
//! take-back reaches only the request it was taken for, never a later one
//! of the same place. A request a writer took and never answered (it died
//! in its turn, its transaction rolled back) is not retried by anyone; its
//! pass counts that tick as failed and asks again next tick.
//!
//! The board is as trusted as the store: the side file is judged and made
//! like the store's other files, and what a request asks for is only the
//! compare-and-set its pass could run itself.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Places on the board; past them, renewers write their own.
const PLACES: usize = 8192;
/// The header: a hint where to look for a free place, how far places have
/// been used, the layout's mark (a board of another layout is not used),
/// and the starters' gate's bell.
const HINT: usize = 0;
const HIGH: usize = 4;
const MARK: usize = 8;
/// The word a pass leaving the starters' gate (`gate`) rings, so that one
/// pass sleeping on it wakes to take the place: one, not all. Thousands
/// of passes waiting in the gate's kernel locks were all woken by every
/// leave, and so kept hundreds ready to run on a few CPUs.
const GATE_BELL: usize = 12;
const LAYOUT: u32 = 0x6a72_6231;
/// A state word per place.
const STATES: usize = 64;
/// Requests, a block each place.
const BODIES: usize = 36 * 1024;
const BODY: usize = 512;
/// The side file's size once it holds a board.
pub const LEN: usize = BODIES + PLACES * BODY;

/// A request's fields: lengths, slot, token, lease, the two stamps, then
/// the key and the job's name.
const KEY_AT: usize = 40;
const KEY_MAX: usize = 160;
const JOB_AT: usize = KEY_AT + KEY_MAX;
const JOB_MAX: usize = BODY - JOB_AT;

/// A state word: the kind in its low bits, the place's sequence number
/// above them.
const KIND_BITS: u32 = 3;
const IDLE: u32 = 0;
/// Its owner is writing a request: no writer may read it.
const WRITING: u32 = 1;
const ASKED: u32 = 2;
const TAKEN: u32 = 3;
const RENEWED: u32 = 4;
const NOT_OURS: u32 = 5;

fn kind(word: u32) -> u32 {
    word & ((1 << KIND_BITS) - 1)
}

fn seq(word: u32) -> u32 {
    word >> KIND_BITS
}

fn word(seq: u32, kind: u32) -> u32 {
    (seq << KIND_BITS) | kind
}

/// The byte locked while a process grows the side file to hold a board
/// (`grown`): a lock, not data.
const GROWING: usize = 0;
/// How long a process waits at most for another to grow the file.
const GROW_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Looking for a free place gives up after this many tries.
const TRIES: usize = 256;

/// One renewal asked for on the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub job: String,
    pub slot: u32,
    pub token: i64,
    pub lease_ms: i64,
    /// The renewal's stamps, read from the requester's clock as it asked.
    pub now_ms: i64,
    pub boot_ms: i64,
    /// The store file and the clock the stamps are on
    /// (`SqliteBackend::board_key`): only a writer of the same store on the
    /// same clock takes it.
    pub key: String,
}

/// A request on the board: its place and sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub place: usize,
    seq: u32,
}

/// What became of a request its owner withdrew.
#[derive(Debug, PartialEq, Eq)]
pub enum Withdrawn {
    /// Nobody took it: the owner renews by itself.
    Yes,
    /// Answered: renewed (`true`) or not ours.
    Answer(bool),
    /// A writer took it and has not answered.
    Taken,
}

/// A request taken in a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub asked: Asked,
    pub req: Request,
}

/// The board, mapped from the side file.
pub struct Board {
    file: File,
    base: *mut u8,
    /// This process's place, once claimed (`usize::MAX` before).
    mine: AtomicUsize,
}

// SAFETY: the mapping is shared memory reached only through atomics and
// copies; the board owns it until dropped.
unsafe impl Send for Board {}
// SAFETY: as for Send: every access goes through atomics or copies.
unsafe impl Sync for Board {}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Board").field("file", &self.file).finish()
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // What this process asked and nobody wrote is withdrawn with its
        // place: a request given back by a writer whose transaction failed
        // must not be written once its pass asks again elsewhere.
        let mine = self.mine.load(Ordering::Relaxed);
        if mine != usize::MAX {
            self.next(mine, IDLE);
        }
        // SAFETY: mapped by `map` with this length, and unmapped once.
        unsafe { libc::munmap(self.base.cast(), LEN) };
    }
}

impl Board {
    /// Map the board of the side file `file` (opened for writing and
    /// judged), growing the file to hold one if `grow`. `None` when it
    /// cannot be mapped, holds no board and `grow` is false, or holds a
    /// board of another layout.
    pub fn map(file: File, grow: bool) -> Option<Board> {
        let len = file.metadata().ok()?.len();
        if len < LEN as u64 && !(grow && grown(&file)) {
            return None;
        }
        // SAFETY: a fresh shared mapping of a file at least LEN long.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let board = Board {
            file,
            base: base.cast(),
            mine: AtomicUsize::new(usize::MAX),
        };
        let mark = board.word(MARK);
        let _ = mark.compare_exchange(0, LAYOUT, Ordering::AcqRel, Ordering::Acquire);
        (mark.load(Ordering::Acquire) == LAYOUT).then_some(board)
    }

    /// How often the gate's bell has rung: read before a pass looks for a
    /// free place at the gate, then slept on (`gate_sleep`), so that a
    /// ring between the two is not missed.
    pub fn gate_rung(&self) -> u32 {
        self.word(GATE_BELL).load(Ordering::Acquire)
    }

    /// Sleep until the gate's bell rings past `seen`, or at most `left`.
    pub fn gate_sleep(&self, seen: u32, left: std::time::Duration) {
        futex_wait(self.word(GATE_BELL), seen, left);
    }

    /// Ring the gate's bell: one sleeper wakes.
    pub fn gate_ring(&self) {
        let word = self.word(GATE_BELL);
        word.fetch_add(1, Ordering::AcqRel);
        futex_wake(word, 1);
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at + 4 <= BODIES && at.is_multiple_of(4));
        // SAFETY: inside the mapping, aligned, and only used atomically.
        unsafe { &*(self.base.add(at) as *const AtomicU32) }
    }

    fn state(&self, place: usize) -> &AtomicU32 {
        self.word(STATES + 4 * place)
    }

    /// Set `place`'s state to `kind` under the next sequence number, and
    /// return it: whatever a writer holds of an earlier request of the
    /// place no longer matches.
    fn next(&self, place: usize, kind: u32) -> u32 {
        let mut now = self.state(place).load(Ordering::Acquire);
        loop {
            let next = seq(now).wrapping_add(1) & (u32::MAX >> KIND_BITS);
            match self.state(place).compare_exchange(
                now,
                word(next, kind),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return next,
                Err(seen) => now = seen,
            }
        }
    }

    /// This process's place: claimed once, held until the board is
    /// dropped (or the process ends). `None` when the board is full.
    pub fn mine(&self) -> Option<usize> {
        let mine = self.mine.load(Ordering::Relaxed);
        if mine != usize::MAX {
            return Some(mine);
        }
        let start = self.word(HINT).fetch_add(1, Ordering::Relaxed) as usize;
        for k in 0..TRIES {
            let place = (start + k) % PLACES;
            let claimed = super::writers::byte_lock(
                self.file.as_raw_fd(),
                BODIES + place * BODY,
                BODY,
                libc::F_OFD_SETLK,
                libc::F_WRLCK,
            );
            if claimed {
                // A request its last owner left is no longer anyone's.
                self.next(place, IDLE);
                self.word(HIGH)
                    .fetch_max(place as u32 + 1, Ordering::Relaxed);
                self.mine.store(place, Ordering::Relaxed);
                return Some(place);
            }
        }
        None
    }

    /// Ask for `req` at `place` (this process's). `None` when it does not
    /// fit on the board.
    pub fn ask(&self, place: usize, req: &Request) -> Option<Asked> {
        let (key, job) = (req.key.as_bytes(), req.job.as_bytes());
        if key.len() > KEY_MAX || job.len() > JOB_MAX {
            return None;
        }
        let mut body = [0u8; BODY];
        body[0..2].copy_from_slice(&(key.len() as u16).to_ne_bytes());
        body[2..4].copy_from_slice(&(job.len() as u16).to_ne_bytes());
        body[4..8].copy_from_slice(&req.slot.to_ne_bytes());
        body[8..16].copy_from_slice(&req.token.to_ne_bytes());
        body[16..24].copy_from_slice(&req.lease_ms.to_ne_bytes());
        body[24..32].copy_from_slice(&req.now_ms.to_ne_bytes());
        body[32..40].copy_from_slice(&req.boot_ms.to_ne_bytes());
        body[KEY_AT..KEY_AT + key.len()].copy_from_slice(key);
        body[JOB_AT..JOB_AT + job.len()].copy_from_slice(job);
        let seq = self.next(place, WRITING);
        // Its owner alone writes it; a writer reading it meanwhile finds
        // the state changed after its copy and drops what it read (`take`).
        self.copy(place, &mut body, true);
        self.state(place).store(word(seq, ASKED), Ordering::Release);
        Some(Asked { place, seq })
    }

    /// Copy `place`'s body to (`write`) or from the mapping, a word at a
    /// time: another process may be writing it meanwhile.
    fn copy(&self, place: usize, body: &mut [u8; BODY], write: bool) {
        for (i, chunk) in body.chunks_exact_mut(8).enumerate() {
            // SAFETY: inside the mapping (place < PLACES), and aligned:
            // the mapping is page-aligned, BODIES and BODY are multiples of
            // eight.
            unsafe {
                let at = self.base.add(BODIES + place * BODY + 8 * i).cast::<u64>();
                if write {
                    let word = u64::from_ne_bytes(chunk.try_into().unwrap_or_default());
                    std::ptr::write_volatile(at, word);
                } else {
                    chunk.copy_from_slice(&std::ptr::read_volatile(at).to_ne_bytes());
                }
            }
        }
    }

    fn read(&self, place: usize) -> Option<Request> {
        // What is read is checked for a torn copy by the caller.
        let mut body = [0u8; BODY];
        self.copy(place, &mut body, false);
        let key_len = u16::from_ne_bytes([body[0], body[1]]) as usize;
        let job_len = u16::from_ne_bytes([body[2], body[3]]) as usize;
        if key_len > KEY_MAX || job_len > JOB_MAX {
            return None;
        }
        let int = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[at..at + 8]);
            i64::from_ne_bytes(b)
        };
        Some(Request {
            slot: u32::from_ne_bytes(body[4..8].try_into().ok()?),
            token: int(8),
            lease_ms: int(16),
            now_ms: int(24),
            boot_ms: int(32),
            key: std::str::from_utf8(&body[KEY_AT..KEY_AT + key_len])
                .ok()?
                .to_owned(),
            job: std::str::from_utf8(&body[JOB_AT..JOB_AT + job_len])
                .ok()?
                .to_owned(),
        })
    }

    /// The answer to `asked`, if it has one.
    pub fn answer_to(&self, asked: Asked) -> Option<bool> {
        let now = self.state(asked.place).load(Ordering::Acquire);
        match (seq(now) == asked.seq, kind(now)) {
            (true, RENEWED) => Some(true),
            (true, NOT_OURS) => Some(false),
            _ => None,
        }
    }

    /// Take back `asked`.
    pub fn withdraw(&self, asked: Asked) -> Withdrawn {
        let state = self.state(asked.place);
        let from = word(asked.seq, ASKED);
        match state.compare_exchange(
            from,
            word(asked.seq, IDLE),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Withdrawn::Yes,
            Err(now) if seq(now) == asked.seq && kind(now) == TAKEN => Withdrawn::Taken,
            Err(_) => match self.answer_to(asked) {
                Some(answer) => Withdrawn::Answer(answer),
                None => Withdrawn::Yes,
            },
        }
    }

    /// In a turn of the line: take the requests stamped on `key`, at most
    /// `limit`. A request on another key, one that cannot be read, or one
    /// whose renewal would already be past (its stamp plus its lease is
    /// before `boot_ms`, this writer's boot clock, on the same clock) is
    /// left for its owner: such a request is never written.
    pub fn take(&self, key: &str, boot_ms: i64, limit: usize) -> Vec<Taken> {
        let high = (self.word(HIGH).load(Ordering::Relaxed) as usize).min(PLACES);
        let mut out = Vec::new();
        for place in 0..high {
            if out.len() >= limit {
                break;
            }
            let state = self.state(place);
            let was = state.load(Ordering::Acquire);
            if kind(was) != ASKED {
                continue;
            }
            // Read first, and taken only if it is still the request read
            // (its owner may ask again meanwhile): a request left alone is
            // never seen taken by its owner.
            let req = match self.read(place) {
                Some(req)
                    if req.key == key
                        && req.lease_ms > 0
                        && req.boot_ms.saturating_add(req.lease_ms) > boot_ms =>
                {
                    req
                }
                _ => continue,
            };
            let taken = word(seq(was), TAKEN);
            if state
                .compare_exchange(was, taken, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let asked = Asked {
                place,
                seq: seq(was),
            };
            out.push(Taken { asked, req });
        }
        out
    }

    /// The requests waiting to be taken (for tests).
    #[cfg(test)]
    pub fn asked(&self) -> Vec<Request> {
        let high = (self.word(HIGH).load(Ordering::Relaxed) as usize).min(PLACES);
        (0..high)
            .filter(|p| kind(self.state(*p).load(Ordering::Acquire)) == ASKED)
            .filter_map(|p| self.read(p))
            .collect()
    }

    /// After the commit: answer each taken request (renewed or not). A
    /// place whose owner has since asked again is not answered. Its owner
    /// is woken by `wake`, once the turn is given up.
    pub fn answer(&self, answers: &[(Asked, bool)]) {
        for &(asked, renewed) in answers {
            self.untake(asked, if renewed { RENEWED } else { NOT_OURS });
        }
    }

    /// Wake the owners of the places answered.
    pub fn wake(&self, answers: &[(Asked, bool)]) {
        for (asked, _) in answers {
            futex_wake(self.state(asked.place), i32::MAX);
        }
    }

    /// Wait until `asked` is answered, or `until`: the answer, or `None`
    /// (not answered by then, or withdrawn).
    pub fn wait(&self, asked: Asked, until: std::time::Instant) -> Option<bool> {
        let state = self.state(asked.place);
        loop {
            if let Some(answer) = self.answer_to(asked) {
                return Some(answer);
            }
            let now = state.load(Ordering::Acquire);
            if seq(now) != asked.seq || !matches!(kind(now), ASKED | TAKEN) {
                return self.answer_to(asked);
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            futex_wait(state, now, left);
        }
    }

    /// The transaction failed: give the taken requests back.
    pub fn give_back(&self, taken: &[Taken]) {
        for t in taken {
            self.untake(t.asked, ASKED);
        }
    }

    /// A taken request becomes `to`, unless its place changed meanwhile.
    fn untake(&self, asked: Asked, to: u32) {
        let _ = self.state(asked.place).compare_exchange(
            word(asked.seq, TAKEN),
            word(asked.seq, to),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// Grow the side file `file` to hold a board: zeros written up to `LEN`,
/// never cut. Whether it holds one now.
///
/// Written, not merely allocated (`posix_fallocate`): a page of a sparse
/// file first written through the mapping on a full disk would kill the
/// process (SIGBUS) instead of failing, and blocks only allocated are
/// unwritten extents that the filesystem converts, under its journal, as
/// the board's dirty pages are first written back. Thousands of passes
/// then waited in page faults on the board at once, a writer with them in
/// its turn, about 30 s (the kernel's dirty expiry) after they started,
/// and every lease was lost.
///
/// Under a byte-range lock, so that zeros are never written over a board
/// another process has begun to use: a process that finds the file being
/// grown waits for the grower (thousands of passes may start on a new
/// store together), at most `GROW_WAIT` (the grower may be stopped), then
/// finds it grown, or goes on without a board.
fn grown(file: &File) -> bool {
    use std::os::unix::fs::FileExt;
    let fd = file.as_raw_fd();
    let lock = |cmd, kind| super::writers::byte_lock(fd, GROWING, 1, cmd, kind);
    let deadline = std::time::Instant::now() + GROW_WAIT;
    let locked = super::writers::wait_until(
        deadline,
        || lock(libc::F_OFD_SETLKW, libc::F_WRLCK),
        || lock(libc::F_OFD_SETLK, libc::F_WRLCK),
    );
    if !locked {
        return false;
    }
    let zeros = &GROW_ZEROS;
    let grown = file.metadata().is_ok_and(|md| {
        let mut at = md.len();
        while at < LEN as u64 {
            let n = (LEN as u64 - at).min(zeros.len() as u64);
            if file.write_all_at(&zeros[..n as usize], at).is_err() {
                return false;
            }
            at += n;
        }
        true
    });
    lock(libc::F_OFD_SETLK, libc::F_UNLCK);
    grown
}

/// What `grown` writes, in zero-filled static memory: as a local array its
/// 64 KiB were on the stack of every pass that maps a board, each page
/// touched on the way in (eleven page faults), grown or not.
static GROW_ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Sleep while `word` holds `now`, at most `left` (or until woken).
fn futex_wait(word: &AtomicU32, now: u32, left: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: left.as_secs() as libc::time_t,
        tv_nsec: left.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a shared futex on a word of the mapping, with a timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            now,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

/// Wake at most `n` of those who sleep on `word`.
fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: as above.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The side file in `dir`, through a descriptor of its own (as each
    /// process opens it).
    fn side_file(dir: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("s.db-writers"))
            .unwrap()
    }

    /// A board in `dir`, mapped through a descriptor of its own.
    fn board(dir: &std::path::Path) -> Board {
        Board::map(side_file(dir), true).expect("a board")
    }

    fn request(job: &str, key: &str) -> Request {
        Request {
            job: job.into(),
            slot: 0,
            token: 7,
            lease_ms: 3000,
            now_ms: 1_000_000,
            boot_ms: 50_000,
            key: key.into(),
        }
    }

    #[test]
    fn a_request_is_taken_once_and_answered_to_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let (owner, writer) = (board(dir.path()), board(dir.path()));
        let place = owner.mine().unwrap();
        assert_ne!(writer.mine(), Some(place), "one owner per place");
        let asked = owner.ask(place, &request("feeds.poll", "k")).unwrap();
        assert_eq!(owner.answer_to(asked), None);
        let taken = writer.take("k", 50_000, 10);
        assert_eq!(
            taken,
            [Taken {
                asked,
                req: request("feeds.poll", "k")
            }]
        );
        assert!(writer.take("k", 50_000, 10).is_empty(), "taken once");
        assert_eq!(owner.withdraw(asked), Withdrawn::Taken);
        writer.answer(&[(asked, true)]);
        assert_eq!(owner.answer_to(asked), Some(true));
        assert_eq!(owner.withdraw(asked), Withdrawn::Answer(true));
        let again = owner.ask(place, &request("feeds.poll", "k")).unwrap();
        let taken = writer.take("k", 50_000, 10);
        writer.answer(&[(taken[0].asked, false)]);
        assert_eq!(owner.answer_to(again), Some(false));
    }

    #[test]
    fn another_stores_or_clocks_request_a_stale_one_and_a_garbled_one_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (owner, writer) = (board(dir.path()), board(dir.path()));
        let place = owner.mine().unwrap();
        let asked = owner.ask(place, &request("j", "other store")).unwrap();
        assert!(writer.take("k", 50_000, 10).is_empty());
        assert_eq!(owner.withdraw(asked), Withdrawn::Yes, "still the owner's");
        // Its stamp and lease are past on the writer's clock: a renewal
        // would lapse at once.
        let asked = owner.ask(place, &request("j", "k")).unwrap();
        assert!(writer.take("k", 53_000, 10).is_empty());
        assert_eq!(writer.take("k", 52_999, 10).len(), 1);
        writer.give_back(&writer.take("k", 0, 10));
        assert_eq!(owner.withdraw(asked), Withdrawn::Taken);
        // A body whose lengths run past its place.
        let asked = owner.ask(place, &request("j", "k")).unwrap();
        // SAFETY: the first bytes of this place's body, in the mapping.
        unsafe { *owner.base.add(BODIES + place * BODY) = 0xff };
        assert!(writer.take("k", 50_000, 10).is_empty());
        assert_eq!(owner.withdraw(asked), Withdrawn::Yes);
        // Too long to be asked at all.
        assert!(owner
            .ask(place, &request(&"x".repeat(JOB_MAX + 1), "k"))
            .is_none());
    }

    #[test]
    fn an_answer_reaches_only_the_request_it_was_taken_for() {
        let dir = tempfile::tempdir().unwrap();
        let (owner, writer) = (board(dir.path()), board(dir.path()));
        let place = owner.mine().unwrap();
        let first = owner.ask(place, &request("j", "k")).unwrap();
        let taken = writer.take("k", 50_000, 10);
        // The owner gave up waiting and asks again: the late answer to its
        // first request is not an answer to this one.
        let second = owner.ask(place, &request("j", "k")).unwrap();
        writer.answer(&[(taken[0].asked, true)]);
        assert_eq!(owner.answer_to(second), None);
        assert_eq!(owner.answer_to(first), None);
        assert_eq!(owner.withdraw(second), Withdrawn::Yes);
        // Given back after a failed transaction, it is asked again.
        let third = owner.ask(place, &request("j", "k")).unwrap();
        let taken = writer.take("k", 50_000, 10);
        writer.give_back(&taken);
        let taken = writer.take("k", 50_000, 10);
        assert_eq!(taken.len(), 1);
        // Its answer is its own, never an earlier request's.
        writer.answer(&[(taken[0].asked, true)]);
        assert_eq!(owner.answer_to(third), Some(true));
        assert_eq!(owner.answer_to(first), None);
    }

    #[test]
    fn a_request_given_back_is_withdrawn_with_its_board() {
        let dir = tempfile::tempdir().unwrap();
        let (owner, writer) = (board(dir.path()), board(dir.path()));
        let place = owner.mine().unwrap();
        let asked = owner.ask(place, &request("j", "k")).unwrap();
        let taken = writer.take("k", 50_000, 10);
        assert_eq!(owner.withdraw(asked), Withdrawn::Taken);
        // The owner's tick failed and it closes its store; the writer's
        // transaction then fails and gives the request back: nobody may
        // write it once its pass asks again elsewhere.
        drop(owner);
        writer.give_back(&taken);
        assert!(writer.take("k", 50_000, 10).is_empty());
    }

    #[test]
    fn a_board_of_another_layout_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let first = board(dir.path());
        first.word(MARK).store(LAYOUT + 1, Ordering::Release);
        assert!(Board::map(side_file(dir.path()), true).is_none());
    }

    #[test]
    fn a_place_left_by_a_process_that_ended_is_claimed_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let writer = board(dir.path());
        let owner = board(dir.path());
        let place = owner.mine().unwrap();
        let _ = owner.ask(place, &request("j", "k")).unwrap();
        // Its process ends: the kernel drops its place; the next owner's
        // claim withdraws what it left.
        drop(owner);
        writer.word(HINT).store(place as u32, Ordering::Relaxed);
        let next = board(dir.path());
        assert_eq!(next.mine(), Some(place), "the place is free again");
        assert!(writer.take("k", 50_000, 10).is_empty());
    }

    /// The board's blocks are written, not merely allocated: none of its
    /// extents is unwritten (`FIEMAP_EXTENT_UNWRITTEN`), so its first
    /// write-back converts nothing under the filesystem's journal. Where
    /// the filesystem does not map extents (tmpfs), there is nothing to
    /// convert either.
    #[test]
    fn a_board_is_grown_with_its_zeros_written() {
        const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
        const FIEMAP_FLAG_SYNC: u32 = 1;
        const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
        const EXTENTS: usize = 64;
        let dir = tempfile::tempdir().unwrap();
        let b = board(dir.path());
        assert_eq!(b.file.metadata().unwrap().len(), LEN as u64);
        // struct fiemap (32 bytes), then EXTENTS struct fiemap_extent (56
        // bytes each: flags at 40).
        let mut buf = vec![0u64; (32 + 56 * EXTENTS) / 8];
        buf[1] = LEN as u64;
        let bytes = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: the buffer holds the header and EXTENTS extents.
        unsafe {
            bytes.add(16).cast::<u32>().write(FIEMAP_FLAG_SYNC);
            bytes.add(24).cast::<u32>().write(EXTENTS as u32);
        }
        // SAFETY: FS_IOC_FIEMAP fills the buffer it is given.
        let r = unsafe { libc::ioctl(b.file.as_raw_fd(), FS_IOC_FIEMAP, bytes) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
            return;
        }
        // SAFETY: read back within the buffer the kernel filled.
        let mapped = unsafe { bytes.add(20).cast::<u32>().read() } as usize;
        assert!(mapped > 0, "no extent mapped");
        for i in 0..mapped.min(EXTENTS) {
            // SAFETY: as above.
            let flags = unsafe { bytes.add(32 + 56 * i + 40).cast::<u32>().read() };
            assert_eq!(
                flags & FIEMAP_EXTENT_UNWRITTEN,
                0,
                "extent {i} is unwritten"
            );
        }
    }

    /// Two processes never grow the file at once: one that finds it being
    /// grown waits for the grower, and past its wait goes on without a
    /// board, having written nothing.
    #[test]
    fn a_side_file_being_grown_is_left_to_its_grower() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db-writers");
        let open = || side_file(dir.path());
        let grower = open();
        grower.set_len(4096).unwrap();
        let fd = grower.as_raw_fd();
        assert!(super::super::writers::byte_lock(
            fd,
            GROWING,
            1,
            libc::F_OFD_SETLK,
            libc::F_WRLCK
        ));
        assert!(Board::map(open(), true).is_none());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
        super::super::writers::byte_lock(fd, GROWING, 1, libc::F_OFD_SETLK, libc::F_UNLCK);
        assert!(
            Board::map(open(), true).is_some(),
            "grown once the lock is left"
        );
    }
}
