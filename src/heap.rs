//! jobrun's heap: the memory Rust and SQLite allocate, served from a small
//! area of jobrun's own before the C library's `malloc`.
//!
//! A pass compiles its schema and its statements on a fresh connection:
//! some 1,300 allocations, 950 frees and 180 resizes from SQLite, and 600,
//! 700 and 140 from jobrun's own code, most of them small and short-lived.
//! glibc's `malloc` served them at about 150 instructions each (its
//! per-thread cache holds seven blocks of a size and starts empty in every
//! process), a fifth of a pass's instructions. Here a block comes off a free
//! list of its size class, or off the end of the area, in a few dozen.
//!
//! What it keeps:
//! - every block holds at least what was asked, aligned to 8 bytes (SQLite's
//!   requirement, and Rust's for all but a few types: a larger alignment is
//!   `malloc`'s, through `System`);
//! - the area is 1 MiB of zeroed static memory: a page of it is resident
//!   only once used, and it is too small for the kernel to back with a huge
//!   page even where transparent huge pages are always on;
//! - once the area is used up, and for any block over 4 KiB, blocks come
//!   from `malloc` as before, so nothing ever fails for want of this heap.
//!   The large ones are few but most of a pass's bytes where the store
//!   has SQLite's default 4 KiB pages (cached pages of 4.3 KiB, as in
//!   every store an earlier jobrun made): `malloc` fits them closer than
//!   size classes do, and a wrapper's resident memory stays what it was
//!   under `malloc` alone (with blocks to 32 KiB from the area, 80 KiB
//!   more). A store jobrun makes now has 2 KiB pages, cached in blocks of
//!   the area: a renewing wrapper's PSS measured 445 KiB against 464;
//! - a freed block of the area is kept for its size class, not returned:
//!   what a pass allocates again and again (a renewal's every tick) reuses
//!   the same blocks, and the area caps what is kept;
//! - one lock, held for a few instructions, for the wrapper's few threads;
//! - SQLite is given it once, before it starts (`install`, from `main`):
//!   SQLite takes its allocator only then, and refuses it later, keeping
//!   `malloc`. Its blocks carry an 8-byte header (their size, which SQLite
//!   asks for); Rust's carry none (Rust says the size when it frees).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

/// The size of the area blocks are cut from.
const AREA: usize = 1 << 20;
/// A free block starts with the link to the next free block of its class;
/// a block in use by SQLite with its usable size and its class.
const HEADER: usize = 8;
/// Blocks up to this size, header included, come in steps of 8 bytes.
const EXACT: usize = 1024;
/// The largest block, header included, cut from the area.
const LARGEST: usize = 4 << 10;
/// Block sizes 8, 16, 24, ... up to `EXACT`, then four steps per doubling
/// (1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096): past `EXACT`, a
/// block is less than a quarter larger than the request it serves.
const CLASSES: usize = EXACT / 8 + 4 * (LARGEST.trailing_zeros() - EXACT.trailing_zeros()) as usize;
/// The class recorded in a SQLite block that came from `malloc`.
const FROM_MALLOC: u32 = u32::MAX;

/// An area, its free lists and the lock over them. The process has one,
/// `POOL`; the tests make their own.
#[repr(C, align(16))]
struct Pool {
    space: UnsafeCell<[u8; AREA]>,
    /// A lock held for a few instructions at a time (a mutex's calls cost
    /// more than the heap's work); a thread that finds it taken yields.
    locked: AtomicBool,
    state: UnsafeCell<State>,
}

struct State {
    /// How much of the area has been cut into blocks.
    used: usize,
    /// Per class, the offset of its first free block plus one (0: none).
    free: [u32; CLASSES],
}

// SAFETY: the area is only reached through raw pointers to blocks: a block
// in use belongs to the one caller it was given to; `state` (the free
// lists, the end of the used part) only in `with_state`, under `locked`.
unsafe impl Sync for Pool {}

/// All zeroes: an empty area, no free blocks, unlocked.
static POOL: Pool = Pool {
    space: UnsafeCell::new([0; AREA]),
    locked: AtomicBool::new(false),
    state: UnsafeCell::new(State {
        used: 0,
        free: [0; CLASSES],
    }),
};

/// The class of a block of `block` bytes, header included (≤ `LARGEST`).
#[inline(always)]
fn class_of(block: usize) -> usize {
    if block <= EXACT {
        (block - 1) / 8
    } else {
        // 2^e < block <= 2^(e+1); four steps of 2^(e-2) above 2^e.
        let e = (usize::BITS - 1 - (block - 1).leading_zeros()) as usize;
        let step = (block - (1 << e)).div_ceil(1 << (e - 2));
        EXACT / 8 + 4 * (e - EXACT.trailing_zeros() as usize) + step - 1
    }
}

/// The size of a block of `class`, header included.
#[inline(always)]
fn size_of(class: usize) -> usize {
    if class < EXACT / 8 {
        (class + 1) * 8
    } else {
        let j = class - EXACT / 8;
        let e = EXACT.trailing_zeros() as usize + j / 4;
        (1 << e) + (j % 4 + 1) * (1 << (e - 2))
    }
}

/// The class a SQLite request for `n` bytes takes (none past `LARGEST`:
/// `malloc`'s) and what it is given: the class's usable size, or `n`
/// rounded up to 8.
#[inline(always)]
fn sized(n: usize) -> (Option<usize>, usize) {
    if n + HEADER <= LARGEST {
        let class = class_of(n + HEADER);
        (Some(class), size_of(class) - HEADER)
    } else {
        (None, n.next_multiple_of(8))
    }
}

/// What a SQLite request for `n` bytes is given (`sized`).
fn rounded(n: usize) -> usize {
    sized(n).1
}

impl Pool {
    fn base(&self) -> *mut u8 {
        self.space.get().cast()
    }

    #[inline(always)]
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        // SAFETY: the lock is ours until the store below; `f` cannot panic
        // (nothing in the heap's bodies does).
        let r = f(unsafe { &mut *self.state.get() });
        self.locked.store(false, Ordering::Release);
        r
    }

    /// A free block of `class` from the area, or null where it has none left.
    #[inline(always)]
    fn take(&self, class: usize) -> *mut u8 {
        self.with_state(|heap| {
            let first = heap.free[class];
            if first != 0 {
                let block = self.base().wrapping_add(first as usize - 1);
                // SAFETY: a free block of the area starts with its link,
                // written by `give_back` under this lock.
                heap.free[class] = unsafe { block.cast::<u32>().read() };
                return block;
            }
            let size = size_of(class);
            if heap.used + size > AREA {
                return std::ptr::null_mut();
            }
            let block = self.base().wrapping_add(heap.used);
            heap.used += size;
            block
        })
    }

    /// Put a block of the area back on its class's free list.
    ///
    /// # Safety
    /// `block` is a block of this area in use, of `class`, given up by its
    /// owner.
    #[inline(always)]
    unsafe fn give_back(&self, block: *mut u8, class: usize) {
        self.with_state(|heap| {
            // SAFETY: the block is ours again; its header holds the link now.
            unsafe { block.cast::<u32>().write(heap.free[class]) };
            heap.free[class] = (block as usize - self.base() as usize + 1) as u32;
        })
    }

    #[inline(always)]
    fn in_area(&self, p: *mut u8) -> bool {
        (p as usize).wrapping_sub(self.base() as usize) < AREA
    }

    /// Rust's `alloc`.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= 8 && layout.size() <= LARGEST {
            let block = self.take(class_of(layout.size().max(1)));
            if !block.is_null() {
                return block;
            }
        }
        // SAFETY: as the caller promises of `layout`.
        unsafe { System.alloc(layout) }
    }

    /// Rust's `dealloc`.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc`, of a block from this pool's `alloc`.
    #[inline(always)]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if self.in_area(p) {
            // SAFETY: a block of the area, of the class its size gives.
            unsafe { self.give_back(p, class_of(layout.size().max(1))) }
        } else {
            // SAFETY: a block `System` gave.
            unsafe { System.dealloc(p, layout) }
        }
    }

    /// Rust's `realloc`.
    ///
    /// # Safety
    /// As `GlobalAlloc::realloc`, of a block from this pool's `alloc`.
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        if self.in_area(p) {
            if size <= LARGEST && class_of(size.max(1)) == class_of(layout.size().max(1)) {
                return p;
            }
        } else if size > LARGEST {
            // SAFETY: a block `System` gave, staying `System`'s.
            return unsafe { System.realloc(p, layout, size) };
        }
        // SAFETY: `size` with the block's alignment was a valid layout for
        // the caller to ask for.
        let q = unsafe { self.alloc(Layout::from_size_align_unchecked(size, layout.align())) };
        if !q.is_null() {
            // SAFETY: distinct blocks, each holding the bytes copied.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, layout.size().min(size));
                self.dealloc(p, layout);
            }
        }
        q
    }

    /// A SQLite block whose usable size is `rounded(n)`, or null.
    #[inline(always)]
    fn allocate(&self, n: usize) -> *mut u8 {
        let (class, usable) = sized(n.max(1));
        let (mut block, mut class) = match class {
            Some(class) => (self.take(class), class as u32),
            None => (std::ptr::null_mut(), FROM_MALLOC),
        };
        if block.is_null() {
            // SAFETY: plain malloc; null is handed on as SQLite expects.
            block = unsafe { libc::malloc(usable + HEADER) }.cast();
            if block.is_null() {
                return block;
            }
            class = FROM_MALLOC;
        }
        // SAFETY: the block holds `HEADER + usable` bytes, 8-aligned.
        unsafe {
            block.cast::<[u32; 2]>().write([usable as u32, class]);
            block.add(HEADER)
        }
    }

    /// # Safety
    /// `p` was returned by this pool's `allocate` and is not used again.
    #[inline(always)]
    unsafe fn release(&self, p: *mut u8) {
        // SAFETY: as the caller promises.
        let (block, [_, class]) = unsafe { (p.sub(HEADER), header(p)) };
        if class == FROM_MALLOC {
            // SAFETY: a block from malloc.
            unsafe { libc::free(block.cast()) };
        } else {
            // SAFETY: a block of the area, given up.
            unsafe { self.give_back(block, class as usize) };
        }
    }

    /// # Safety
    /// `p` was returned by this pool's `allocate` and not yet released.
    unsafe fn resize(&self, p: *mut u8, n: usize) -> *mut u8 {
        // SAFETY: as the caller promises.
        let old = unsafe { header(p) }[0] as usize;
        if rounded(n.max(1)) == old {
            return p;
        }
        let q = self.allocate(n);
        if !q.is_null() {
            // SAFETY: both blocks hold at least the bytes copied, and are
            // distinct: `p` is still held while `q` is taken.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, old.min(n));
                self.release(p);
            }
        }
        q
    }
}

/// The usable size and class of a SQLite block in use.
///
/// # Safety
/// `p` was returned by `allocate` and not yet released.
unsafe fn header(p: *mut u8) -> [u32; 2] {
    // SAFETY: the header precedes every block handed out.
    unsafe { p.sub(HEADER).cast::<[u32; 2]>().read() }
}

/// Rust's allocator: `#[global_allocator]` in lib.rs.
pub struct Heap;

// SAFETY: a block of the area is handed to one caller at a time and holds
// `layout.size()` bytes at 8-byte alignment; anything else is `System`'s.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller promises.
        unsafe { POOL.alloc(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: as the caller promises; every block is `POOL`'s.
        unsafe { POOL.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        // SAFETY: as the caller promises; every block is `POOL`'s.
        unsafe { POOL.realloc(p, layout, size) }
    }
}

unsafe extern "C" fn x_malloc(n: c_int) -> *mut c_void {
    POOL.allocate(n.max(0) as usize).cast()
}

unsafe extern "C" fn x_free(p: *mut c_void) {
    // SAFETY: SQLite frees only what x_malloc or x_realloc gave it.
    unsafe { POOL.release(p.cast()) }
}

unsafe extern "C" fn x_realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    // SAFETY: SQLite resizes only what it was given, and not null.
    unsafe { POOL.resize(p.cast(), n.max(0) as usize).cast() }
}

unsafe extern "C" fn x_size(p: *mut c_void) -> c_int {
    // SAFETY: SQLite asks only of what it was given.
    let [usable, _] = unsafe { header(p.cast()) };
    usable as c_int
}

unsafe extern "C" fn x_roundup(n: c_int) -> c_int {
    // SQLite asks of at most 0x7fffff00 bytes; past it, `n` as it is.
    c_int::try_from(rounded(n.max(0) as usize)).unwrap_or(n)
}

unsafe extern "C" fn x_init(_: *mut c_void) -> c_int {
    0
}

unsafe extern "C" fn x_shutdown(_: *mut c_void) {}

/// Give SQLite this heap. Called once, from `main` before any thread and
/// before SQLite's first use; where SQLite has started already it keeps
/// `malloc`.
pub(crate) fn install() {
    let methods = rusqlite::ffi::sqlite3_mem_methods {
        xMalloc: Some(x_malloc),
        xFree: Some(x_free),
        xRealloc: Some(x_realloc),
        xSize: Some(x_size),
        xRoundup: Some(x_roundup),
        xInit: Some(x_init),
        xShutdown: Some(x_shutdown),
        pAppData: std::ptr::null_mut(),
    };
    // SAFETY: SQLite copies the methods; no other thread runs yet.
    unsafe { rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MALLOC, &methods) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// A pool of the test's own: what it asserts of the area does not
    /// depend on what the rest of the test binary allocated from `POOL`.
    fn pool() -> Box<Pool> {
        // SAFETY: all zeroes is an empty pool, as `POOL` starts.
        unsafe { Box::<Pool>::new_zeroed().assume_init() }
    }

    #[test]
    fn classes_hold_what_is_asked_and_little_more() {
        assert_eq!(CLASSES, 136);
        assert_eq!(size_of(CLASSES - 1), LARGEST);
        for class in 0..CLASSES {
            assert_eq!(class_of(size_of(class)), class, "class {class}");
            assert_eq!(size_of(class) % 8, 0);
        }
        for block in 1..=LARGEST {
            let size = size_of(class_of(block));
            assert!(size >= block, "{block} given {size}");
            if block <= EXACT {
                assert!(size < block + 8, "{block} given {size}");
            } else {
                assert!(size * 4 < block * 5, "{block} given {size}");
            }
        }
    }

    #[test]
    fn sqlite_blocks_are_reused_keep_their_bytes_and_go_past_the_area() {
        let pool = pool();
        // SAFETY: every block is used only while held, and released once.
        unsafe {
            let a = pool.allocate(100);
            assert_eq!(a as usize % 8, 0);
            assert!(pool.in_area(a));
            assert!(header(a)[0] >= 100);
            a.write_bytes(7, 100);
            assert_eq!(pool.resize(a, 101), a, "same class, same block");
            let b = pool.resize(a, 3000);
            assert!(header(b)[0] >= 3000);
            assert_eq!(std::slice::from_raw_parts(b, 100), &[7; 100][..]);
            assert_eq!(pool.allocate(100), a, "the freed block, first");
            pool.release(a);
            pool.release(b);

            let big = pool.allocate(LARGEST);
            assert_eq!(header(big)[1], FROM_MALLOC);
            assert!(!pool.in_area(big));
            assert_eq!(header(big)[0] as usize, LARGEST);
            big.write_bytes(1, LARGEST);
            let bigger = pool.resize(big, 2 * LARGEST);
            assert_eq!(*bigger.add(LARGEST - 1), 1);
            let small = pool.resize(bigger, 16);
            assert!(pool.in_area(small));
            assert_eq!(std::slice::from_raw_parts(small, 16), &[1; 16][..]);
            pool.release(small);
        }
    }

    #[test]
    fn sqlite_is_told_the_size_it_is_given() {
        // SQLite's own resize compares `xRoundup` of the new size with
        // `xSize` of the block, and uses all `xSize` says it holds.
        // SAFETY: every block is used only while held, and released once.
        unsafe {
            for n in (1..3 * LARGEST as c_int).step_by(7) {
                let p = x_malloc(n);
                let size = x_size(p);
                assert_eq!(size, x_roundup(n), "{n}");
                assert!(size >= n);
                assert_eq!(x_roundup(size), size, "{n}");
                p.cast::<u8>().write_bytes(5, size as usize);
                let q = x_realloc(p, x_roundup(2 * n));
                assert!(x_size(q) >= 2 * n);
                let kept = std::slice::from_raw_parts(q.cast::<u8>(), size as usize);
                assert!(kept.iter().all(|&b| b == 5), "{n}");
                x_free(q);
            }
            assert_eq!(x_roundup(c_int::MAX), c_int::MAX);
        }
    }

    #[test]
    fn rust_values_move_between_classes_and_malloc_intact() {
        let pool = pool();
        let at = |size| Layout::from_size_align(size, 8).unwrap();
        // SAFETY: every block is used only while held, and freed once
        // with the layout it has.
        unsafe {
            let a = pool.alloc(at(24));
            assert!(pool.in_area(a));
            a.write_bytes(9, 24);
            let b = pool.realloc(a, at(24), 100);
            assert_ne!(b, a, "another class");
            assert!(pool.in_area(b));
            assert_eq!(pool.realloc(b, at(100), 101), b, "the same class");
            let c = pool.realloc(b, at(101), 80_000);
            assert!(!pool.in_area(c), "80 KB is malloc's");
            let d = pool.realloc(c, at(80_000), 16);
            assert!(pool.in_area(d));
            assert_eq!(std::slice::from_raw_parts(d, 16), &[9; 16][..]);
            pool.dealloc(d, at(16));

            let wide = Layout::from_size_align(64, 64).unwrap();
            let w = pool.alloc(wide);
            assert!(!pool.in_area(w), "aligned past 8: malloc's");
            assert_eq!(w as usize % 64, 0);
            pool.dealloc(w, wide);
        }
    }

    #[test]
    fn a_used_up_area_hands_over_to_malloc() {
        let pool = pool();
        let blocks = AREA / LARGEST;
        // SAFETY: every block is held until released once, below.
        unsafe {
            let held: Vec<_> = (0..=blocks)
                .map(|_| pool.allocate(LARGEST - HEADER))
                .collect();
            assert!(held[..blocks].iter().all(|&p| pool.in_area(p)));
            assert_eq!(header(held[blocks])[1], FROM_MALLOC);
            for p in held {
                pool.release(p);
            }
        }
    }

    #[test]
    fn threads_share_the_heap_without_losing_a_block() {
        // Four threads at once on a few classes, each holding a handful of
        // blocks marked as its own: a block handed out twice shows as
        // another thread's mark.
        let pool: &'static Pool = Box::leak(pool());
        let start = Arc::new(Barrier::new(4));
        let threads: Vec<_> = (1..=4u8)
            .map(|t| {
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    start.wait();
                    for i in 0..100_000usize {
                        let n = 8 + (i % 5) * 8;
                        let p = pool.allocate(n);
                        // SAFETY: the block holds n bytes and is this
                        // thread's alone.
                        unsafe { p.write_bytes(t, n) };
                        held.push((p, n));
                        if held.len() > 8 {
                            let (p, n) = held.swap_remove(i % held.len());
                            // SAFETY: as above; released once.
                            unsafe {
                                assert!(std::slice::from_raw_parts(p, n).iter().all(|&b| b == t));
                                pool.release(p);
                            }
                        }
                    }
                    for (p, n) in held {
                        // SAFETY: as above.
                        unsafe {
                            assert!(std::slice::from_raw_parts(p, n).iter().all(|&b| b == t));
                            pool.release(p);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
