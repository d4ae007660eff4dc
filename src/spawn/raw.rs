//! How the held process is started, and the system calls it makes.
//!
//! On x86_64 and aarch64 the held process shares the wrapper's memory
//! until it execs (`start`: `clone` with `CLONE_VM`, as `posix_spawn` and
//! `vfork` do): no page table is copied and no page of the wrapper is
//! copied on write while the take transaction runs, which made a fork the
//! dearest step of a short pass. The held process runs on a stack of its
//! own (`Stack`), reads only what was built for it before it started, and
//! is never waited on to exec: the wrapper goes on with its transaction
//! meanwhile. Sharing memory, it also shares the C library's `errno` of
//! the thread that started it, which every C library wrapper writes when a
//! call fails; so the held process makes each system call here, by the
//! instruction, and reads its error from the value returned, and the
//! wrapper's `errno` is never touched by it.
//!
//! Elsewhere the held process is forked (its memory its own), and these
//! calls go through `libc::syscall` (its signals through the C library).
//! It is forked too on kernels before 5.16, under Valgrind, and where a
//! sandbox refuses a process that shares memory (`start`, `forks`).

use std::io;

use libc::{c_int, c_long, c_void};

/// An error number, as the kernel returns it negated.
pub type Errno = c_int;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn syscall4(n: c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a system call and arguments that are
    // valid for it; the kernel clobbers rcx and r11 and nothing else.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
unsafe fn syscall4(n: c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes a system call and arguments that are
    // valid for it; the kernel returns in x0 and clobbers nothing else.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// Where the held process can share the wrapper's memory: where its
/// system calls are made by the instruction.
const SHARES_MEMORY: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn syscall4(n: c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: as the caller's; the held process is forked here, so the
    // errno written is its own.
    let r = unsafe { libc::syscall(n, a, b, c, d) };
    if r < 0 {
        -(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as isize)
    } else {
        r as isize
    }
}

fn result(r: isize) -> Result<usize, Errno> {
    if (-4095..0).contains(&r) {
        Err(-r as Errno)
    } else {
        Ok(r as usize)
    }
}

/// Fill `buf` from `fd` (`read(2)`, retried when interrupted); false on
/// end of file or an error.
pub fn read_exact(fd: c_int, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        let rest = &mut buf[got..];
        // SAFETY: `rest` is valid for writes of its length.
        let r = unsafe {
            syscall4(
                libc::SYS_read,
                fd as usize,
                rest.as_mut_ptr() as usize,
                rest.len(),
                0,
            )
        };
        match result(r) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(libc::EINTR) => continue,
            Err(_) => return false,
        }
    }
    true
}

/// `write(2)`, once.
pub fn write(fd: c_int, buf: &[u8]) -> Result<usize, Errno> {
    // SAFETY: `buf` is valid for reads of its length.
    result(unsafe {
        syscall4(
            libc::SYS_write,
            fd as usize,
            buf.as_ptr() as usize,
            buf.len(),
            0,
        )
    })
}

/// `close(2)` of a descriptor this process will not use again.
pub fn close(fd: c_int) {
    // SAFETY: closing a descriptor touches no memory.
    let _ = unsafe { syscall4(libc::SYS_close, fd as usize, 0, 0, 0) };
}

/// Put this process in a process group of its own (`setpgid(0, 0)`).
pub fn own_group() {
    // SAFETY: touches no memory.
    let _ = unsafe { syscall4(libc::SYS_setpgid, 0, 0, 0, 0) };
}

/// Make `target` a copy of `fd` that survives exec.
pub fn dup_onto(fd: c_int, target: c_int) {
    if fd != target {
        // SAFETY: touches no memory; flags 0 leaves the copy without
        // close-on-exec.
        let _ = unsafe { syscall4(libc::SYS_dup3, fd as usize, target as usize, 0, 0) };
    } else {
        // SAFETY: as above; the descriptor itself loses close-on-exec.
        let _ = unsafe { syscall4(libc::SYS_fcntl, fd as usize, libc::F_SETFD as usize, 0, 0) };
    }
}

/// Whether the held process gives `sig`, whose disposition here is
/// `handler`, its default before exec: it has a handler (the wrapper's
/// code, which must not run there), or it is PIPE (the wrapper ignores it;
/// a command expects it). What is ignored stays ignored, as exec would
/// keep it.
fn back_to_default(sig: c_int, handler: usize) -> bool {
    sig == libc::SIGPIPE || (handler != libc::SIG_DFL && handler != libc::SIG_IGN)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub use kernel_signals::{default_handled_signals, unblock_all};
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub use libc_signals::{default_handled_signals, unblock_all};

/// Signal dispositions and the mask by the instruction, where the held
/// process shares memory.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod kernel_signals {
    use super::{back_to_default, result, syscall4};
    use libc::c_int;

    /// The kernel's `struct sigaction` (x86_64 and aarch64 alike, and the
    /// generic layout): handler, flags, restorer, mask.
    #[repr(C)]
    #[derive(Default)]
    struct KernelSigaction {
        handler: usize,
        flags: usize,
        restorer: usize,
        mask: u64,
    }

    /// The kernel's signals are 1 to 64, with a mask of 8 bytes.
    const NSIG: c_int = 64;
    const SIGSET_BYTES: usize = 8;

    /// Give every signal its default where `back_to_default` says so.
    pub fn default_handled_signals() {
        for sig in 1..=NSIG {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old = KernelSigaction::default();
            // SAFETY: a null new action only reads the old one into `old`.
            let r = unsafe {
                syscall4(
                    libc::SYS_rt_sigaction,
                    sig as usize,
                    0,
                    &mut old as *mut KernelSigaction as usize,
                    SIGSET_BYTES,
                )
            };
            // One that cannot be read counts as having no handler.
            let handler = if result(r).is_ok() {
                old.handler
            } else {
                libc::SIG_DFL
            };
            if back_to_default(sig, handler) {
                let default = KernelSigaction::default();
                // SAFETY: the default disposition installs no handler.
                let _ = unsafe {
                    syscall4(
                        libc::SYS_rt_sigaction,
                        sig as usize,
                        &default as *const KernelSigaction as usize,
                        0,
                        SIGSET_BYTES,
                    )
                };
            }
        }
    }

    /// Unblock every signal (the mask exec hands the command).
    pub fn unblock_all() {
        let empty: u64 = 0;
        // SAFETY: reads the 8-byte mask `empty`; no old mask is written.
        let _ = unsafe {
            syscall4(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK as usize,
                &empty as *const u64 as usize,
                0,
                SIGSET_BYTES,
            )
        };
    }
}

/// The same through the C library, for a forked held process (its errno
/// its own), on architectures whose kernel structures differ.
#[cfg_attr(any(target_arch = "x86_64", target_arch = "aarch64"), allow(dead_code))]
mod libc_signals {
    /// As `kernel_signals::default_handled_signals`.
    pub fn default_handled_signals() {
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            // SAFETY: a zeroed sigaction is a valid out-parameter; a null
            // new action only reads the old one.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
                continue;
            }
            if super::back_to_default(sig, old.sa_sigaction) {
                // SAFETY: the default disposition installs no handler.
                unsafe { libc::signal(sig, libc::SIG_DFL) };
            }
        }
    }

    /// As `kernel_signals::unblock_all`.
    pub fn unblock_all() {
        // SAFETY: a zeroed sigset_t emptied by sigemptyset is a valid set;
        // no old mask is written.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        }
    }
}

/// `execve(2)`: returns only if it failed, with why.
///
/// # Safety
/// `path` must be NUL-terminated, `argv` and `envp` NULL-terminated arrays
/// of NUL-terminated strings.
pub unsafe fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> Errno {
    // SAFETY: the caller's guarantee.
    let r = unsafe {
        syscall4(
            libc::SYS_execve,
            path as usize,
            argv as usize,
            envp as usize,
            0,
        )
    };
    result(r).err().unwrap_or(libc::EIO)
}

/// End this process with `code` (`_exit`).
pub fn exit(code: c_int) -> ! {
    loop {
        // SAFETY: touches no memory; does not return.
        let _ = unsafe { syscall4(libc::SYS_exit_group, code as usize, 0, 0, 0) };
    }
}

/// The stack the held process runs on while it shares the wrapper's
/// memory, with a guard page below it. Unmapped when dropped: drop it only
/// once the held process is reaped.
pub struct Stack {
    base: *mut c_void,
    len: usize,
}

/// Room for the held process's few frames (debug builds included); pages
/// it never touches cost nothing.
const STACK_BYTES: usize = 128 * 1024;

impl Stack {
    pub fn new() -> io::Result<Stack> {
        // SAFETY: sysconf reads a constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = STACK_BYTES + page;
        // SAFETY: a new private anonymous mapping, owned by the Stack.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made: the guard.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    fn top(&self) -> *mut c_void {
        self.base.cast::<u8>().wrapping_add(self.len).cast()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, used by no one any more (the
        // caller's duty: the held process is reaped).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Start a process that runs `main(arg)` and never returns from it, its
/// exit reported by SIGCHLD: on `stack`, sharing this process's memory,
/// where the calls above are made by the instruction; forked elsewhere, or
/// where such a process cannot be made (below). Its pid.
///
/// # Safety
/// `main` may only make the calls of this module and touch memory that
/// stays valid and unchanged by this process until it is reaped: `arg`,
/// what it points to, and `stack`. Every signal must be blocked across
/// the call, so that no handler of this process runs in the new one
/// before `default_handled_signals`.
pub unsafe fn start(
    main: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
    stack: &Stack,
) -> io::Result<i32> {
    if shares_memory() {
        // SAFETY: the caller's guarantee; the stack is ours and unused.
        let pid = unsafe { libc::clone(main, stack.top(), libc::CLONE_VM | libc::SIGCHLD, arg) };
        if pid >= 0 {
            return Ok(pid);
        }
        let e = io::Error::last_os_error();
        // A sandbox that refuses such a process (seccomp): forked instead.
        if !matches!(
            e.raw_os_error(),
            Some(libc::EINVAL | libc::ENOSYS | libc::EPERM)
        ) {
            return Err(e);
        }
    }
    // SAFETY: in the child, `main` makes only this module's calls (the
    // caller's guarantee), which are async-signal-safe, and never returns.
    match unsafe { libc::fork() } {
        0 => {
            main(arg);
            exit(127)
        }
        -1 => Err(io::Error::last_os_error()),
        pid => Ok(pid),
    }
}

/// Whether a held process started now shares the wrapper's memory.
pub fn shares_memory() -> bool {
    SHARES_MEMORY && !forks()
}

/// Whether the held process is forked even where it could share memory:
/// under Valgrind (its preload library in `LD_PRELOAD`), which ends a
/// program that makes a process sharing its memory but not its threads;
/// and on kernels before 5.16, where a process that dumps core takes every
/// process sharing its memory down with it (a QUIT sent to a held process
/// would kill its wrapper unrecorded).
fn forks() -> bool {
    #[cfg(test)]
    if FORK_IN_TESTS.with(|f| f.get()) {
        return true;
    }
    static OLD_KERNEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let old_kernel = *OLD_KERNEL
        .get_or_init(|| !kernel_release().is_some_and(|r| release_at_least(&r, (5, 16))));
    old_kernel
        || std::env::var_os("LD_PRELOAD").is_some_and(|p| {
            p.as_encoded_bytes()
                .windows(11)
                .any(|w| w == b"/vgpreload_")
        })
}

/// The running kernel's release (`uname -r`).
fn kernel_release() -> Option<String> {
    // SAFETY: a zeroed utsname is a valid out-parameter for uname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is valid for writes.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // SAFETY: uname NUL-terminates the release.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    Some(release.to_string_lossy().into_owned())
}

/// Whether a kernel release ("6.1.0-18-amd64") is `at_least` (major,
/// minor); one that does not read as a version is not.
fn release_at_least(release: &str, at_least: (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    match (major, minor) {
        (Some(major), Some(minor)) => (major, minor) >= at_least,
        _ => false,
    }
}

#[cfg(test)]
thread_local! {
    /// A test forks the held processes it starts on its thread while this
    /// is set: both ways run the same held process.
    pub static FORK_IN_TESTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_from_5_16_on_share_memory() {
        assert!(release_at_least("6.18.44-fc-v669", (5, 16)));
        assert!(release_at_least("5.16.0", (5, 16)));
        assert!(release_at_least("10.0", (5, 16)));
        assert!(!release_at_least("5.15.0-91-generic", (5, 16)));
        assert!(!release_at_least("4.18.0-513.el8.x86_64", (5, 16)));
        assert!(!release_at_least("", (5, 16)));
        assert!(!release_at_least("six", (5, 16)));
    }
}
