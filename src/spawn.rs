//! Start the command so that no process of a pass runs before it is on
//! record.
//!
//! The command is forked first and held: the new process puts itself in a
//! process group of its own and blocks on a pipe before exec. Its pid and
//! start time go into the store in the same transaction that takes the slot
//! (or joins the queue); only then does the wrapper write the fencing token
//! down the pipe, and the held process fills it into its environment and
//! execs. If the wrapper dies first, the pipe closes and the held process
//! exits without ever running the command. If the slot is not taken, the
//! wrapper aborts it the same way.
//!
//! Between fork and exec the held process only makes async-signal-safe
//! calls: everything it needs (argv, the environment, the buffers the token
//! is written into) is built before the fork.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{pthread_sigmask, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::{ForkResult, Pid};
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};

use crate::exit;
use crate::policy::lease::Proc;
use crate::process::start_time;

/// Signals the wrapper catches and forwards to its command's process group
/// (see `supervise`). The held process sets each back to its default
/// before it unblocks signals: until exec it would otherwise run the
/// wrapper's handlers and report its own signals as the wrapper's.
pub const FORWARDED: [i32; 6] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Whether jobrun takes a forwarded signal over (handles it, forwards it,
/// and gives the command its default), given whether it was ignored when
/// jobrun started. A signal its caller ignored stays ignored, for jobrun
/// and for the command: HUP under `nohup`, INT and QUIT for a background
/// job of a non-interactive shell. TERM is the one exception: always
/// handled and forwarded, so `stop-due` and systemd can stop the pass.
pub fn takes_over(sig: i32, ignored_at_start: bool) -> bool {
    sig == SIGTERM || !ignored_at_start
}

/// The forwarded signals jobrun takes over (`takes_over`), read from the
/// dispositions it started with. The first call must come before any
/// handler is installed: `supervise::watch_signals` makes it.
pub fn taken_over() -> &'static [i32] {
    static TAKEN: std::sync::OnceLock<Vec<i32>> = std::sync::OnceLock::new();
    TAKEN.get_or_init(|| {
        FORWARDED
            .iter()
            .copied()
            .filter(|&sig| takes_over(sig, ignored_now(sig)))
            .collect()
    })
}

/// Whether `sig` is ignored now, read without changing it.
pub fn ignored_now(sig: i32) -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter; a null new
    // action only reads the disposition.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// What the command finds in its environment: the job's name, its fencing
/// token and its slot (and `process::identity::PASS_ENV`, its pass id).
pub const JOB_ENV: &str = "JOBRUN_JOB";
pub const TOKEN_ENV: &str = "JOBRUN_TOKEN";
pub const SLOT_ENV: &str = "JOBRUN_SLOT";

/// What the wrapper writes to let the held process go: its token, slot
/// and number (`release_numbered`).
const GO_LEN: usize = 20;

/// Room for an i64 in decimal, and for a u32.
const TOKEN_DIGITS: usize = 20;
const SLOT_DIGITS: usize = 10;

/// Exit status of a held process whose wrapper went away or aborted it.
const ABORTED: i32 = exit::JOBRUN_FAILED;

/// A command that could not be started, with the exit code it maps to.
#[derive(Debug)]
pub struct SpawnError {
    pub code: i32,
    pub message: String,
}

/// A forked command waiting for its go.
pub struct HeldChild {
    proc: Proc,
    /// Closed (taken) once the child is released or aborted.
    go: Option<OwnedFd>,
    exec_error: Option<OwnedFd>,
}

/// A command that was let go: it has exec'd, or it failed to and is exiting.
pub struct RunningChild {
    pid: i32,
    exec_error: Option<OwnedFd>,
    reaped: bool,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

fn cstring(bytes: &[u8]) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError {
        code: exit::JOBRUN_FAILED,
        message: "an argument or environment variable contains a NUL byte".into(),
    })
}

/// `NAME=` followed by `width` spaces and a NUL: a buffer the held process
/// writes a number into.
fn placeholder(name: &str, width: usize) -> Vec<u8> {
    let mut v = format!("{name}=").into_bytes();
    v.resize(v.len() + width, b' ');
    v.push(0);
    v
}

/// Write `n` in decimal at `at`, followed by a NUL. Async-signal-safe.
///
/// # Safety
/// `at` must be valid for writes of the digits of `n` and the NUL.
unsafe fn write_decimal(at: *mut u8, mut n: u64) {
    let mut digits = [0u8; TOKEN_DIGITS];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        // SAFETY: the caller guarantees room for `len` digits and a NUL.
        unsafe { *at.add(i) = digits[len - 1 - i] };
    }
    // SAFETY: as above; this is the byte after the last digit.
    unsafe { *at.add(len) = 0 };
}

/// Where exec looks for `cmd`: itself when it names a path, else each
/// directory of `PATH` in turn (`/usr/local/bin:/usr/bin:/bin` when unset).
fn candidates(cmd: &std::ffi::OsStr) -> Result<Vec<CString>, SpawnError> {
    if cmd.as_bytes().contains(&b'/') {
        return Ok(vec![cstring(cmd.as_bytes())?]);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| {
            let dir = if dir.as_os_str().is_empty() {
                std::path::PathBuf::from(".")
            } else {
                dir
            };
            cstring(dir.join(cmd).as_os_str().as_bytes())
        })
        .collect()
}

/// Read exactly `buf.len()` bytes; false on EOF or error. Async-signal-safe.
fn read_exact(fd: impl AsFd, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(fd.as_fd(), &mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
    true
}

/// Everything the held process needs between fork and exec, built before
/// the fork: it may not allocate.
struct Exec<'a> {
    /// Where exec looks for the command, in order.
    paths: &'a [CString],
    /// The signals given back their default: those jobrun took over, and
    /// PIPE (which the wrapper ignores).
    reset: &'a [i32],
    /// NULL-terminated argv and environment.
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The digits of the `JOBRUN_TOKEN=` and `JOBRUN_SLOT=` placeholders.
    token_digits: *mut u8,
    slot_digits: *mut u8,
    /// Where the command's stdout and stderr go when the wrapper captures
    /// them (`--output quiet-unless-failed`): the write end of one pipe, so
    /// both arrive in order.
    output: Option<libc::c_int>,
    /// The digits of the `fork_numbered` placeholder, or null.
    number_digits: *mut u8,
}

/// The held process, from fork to exec: put itself in a process group of
/// its own, give the signals jobrun took over back their default (one its
/// caller ignored stays ignored), wait for the
/// token, write it into the environment, exec. Never returns: exec, or
/// `_exit` with 127 (not found), 126 (cannot execute) or `ABORTED` (the
/// wrapper went away or aborted it), the errno reported down `err_w`.
///
/// # Safety
/// Call only in the child of a `fork`, once, with `exec` built before the
/// fork: its pointers valid, each placeholder with room for its digits and
/// a NUL. Other threads of the wrapper may have held locks (the
/// allocator's among them) at the fork, so everything called here is
/// async-signal-safe and allocates nothing.
unsafe fn become_command(
    go_r: OwnedFd,
    go_w: OwnedFd,
    err_r: OwnedFd,
    err_w: OwnedFd,
    exec: &Exec,
) -> ! {
    let _ = nix::unistd::close(go_w);
    let _ = nix::unistd::close(err_r);
    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
    if let Some(fd) = exec.output {
        // SAFETY: dup2 and fcntl are async-signal-safe. The copies on 1
        // and 2 lose close-on-exec, the original keeps it; were the pipe
        // itself on 1 or 2 (jobrun started with them closed), dup2 would
        // leave that flag, so it is cleared on both.
        unsafe {
            libc::dup2(fd, 1);
            libc::dup2(fd, 2);
            libc::fcntl(1, libc::F_SETFD, 0);
            libc::fcntl(2, libc::F_SETFD, 0);
        }
    }
    for &sig in exec.reset {
        if let Ok(sig) = Signal::try_from(sig) {
            // SAFETY: setting the default disposition installs no handler.
            let _ = unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) };
        }
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    let mut go = [0u8; GO_LEN];
    if !read_exact(&go_r, &mut go) {
        // SAFETY: _exit ends this process without running the wrapper's
        // atexit handlers or flushing its buffers.
        unsafe { libc::_exit(ABORTED) };
    }
    let token = i64::from_le_bytes([go[0], go[1], go[2], go[3], go[4], go[5], go[6], go[7]]);
    let slot = u32::from_le_bytes([go[8], go[9], go[10], go[11]]);
    let number = u64::from_le_bytes([
        go[12], go[13], go[14], go[15], go[16], go[17], go[18], go[19],
    ]);
    // SAFETY: the caller guarantees each placeholder's room.
    unsafe {
        write_decimal(exec.token_digits, token as u64);
        write_decimal(exec.slot_digits, slot as u64);
        if !exec.number_digits.is_null() {
            write_decimal(exec.number_digits, number);
        }
    }
    // As execvp does, but with no fallback to a shell for a file that is
    // not an executable format: that is an error.
    let mut errno = libc::ENOENT;
    for path in exec.paths {
        // SAFETY: NUL-terminated path, NULL-terminated argv and envp of
        // NUL-terminated strings, all alive until exec replaces us.
        unsafe { libc::execve(path.as_ptr(), exec.argv, exec.envp) };
        match Errno::last_raw() {
            libc::ENOENT | libc::ENOTDIR => {}
            libc::EACCES => errno = libc::EACCES,
            other => {
                errno = other;
                break;
            }
        }
    }
    let _ = nix::unistd::write(&err_w, &errno.to_le_bytes());
    // SAFETY: as above.
    unsafe { libc::_exit(exit::of_exec_errno(errno)) }
}

impl HeldChild {
    /// Fork `argv` (run directly, found on PATH like `execvp`) with the
    /// wrapper's environment without the variables `unset` names, plus
    /// `env`, and hold it before exec. The held process later receives
    /// `JOBRUN_TOKEN` and `JOBRUN_SLOT`. With `output`, its stdout and
    /// stderr both go to that descriptor.
    #[cfg(test)]
    pub fn fork(
        argv: &[std::ffi::OsString],
        env: &[(&str, String)],
        unset: &[&str],
        output: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<HeldChild, SpawnError> {
        HeldChild::fork_numbered(argv, env, unset, output, None)
    }

    /// As `fork`, and the held process later also receives `number` (a
    /// variable name) set to the number given to `release_numbered`.
    pub fn fork_numbered(
        argv: &[std::ffi::OsString],
        env: &[(&str, String)],
        unset: &[&str],
        output: Option<std::os::fd::BorrowedFd<'_>>,
        number: Option<&str>,
    ) -> Result<HeldChild, SpawnError> {
        let failed = |what: &str, e: io::Error| SpawnError {
            code: exit::JOBRUN_FAILED,
            message: format!("cannot start the command: {what}: {e}"),
        };
        let args: Vec<CString> = argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let paths = candidates(&argv[0])?;
        let reset: Vec<i32> = taken_over()
            .iter()
            .copied()
            .chain([libc::SIGPIPE])
            .collect();

        let ours = |k: &[u8]| {
            k == TOKEN_ENV.as_bytes()
                || k == SLOT_ENV.as_bytes()
                || number.is_some_and(|n| n.as_bytes() == k)
                || env.iter().any(|(n, _)| n.as_bytes() == k)
                || unset.iter().any(|n| n.as_bytes() == k)
        };
        let mut vars: Vec<Vec<u8>> = Vec::new();
        for (k, v) in std::env::vars_os() {
            if ours(k.as_bytes()) {
                continue;
            }
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            vars.push(cstring(&kv)?.into_bytes_with_nul());
        }
        for (k, v) in env {
            vars.push(cstring(format!("{k}={v}").as_bytes())?.into_bytes_with_nul());
        }
        let token_at = vars.len();
        vars.push(placeholder(TOKEN_ENV, TOKEN_DIGITS));
        vars.push(placeholder(SLOT_ENV, SLOT_DIGITS));
        if let Some(n) = number {
            vars.push(placeholder(n, TOKEN_DIGITS));
        }
        let mut env_ptrs: Vec<*mut libc::c_char> =
            vars.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        env_ptrs.push(std::ptr::null_mut());
        let digits_of = |at: usize, name: &str| {
            // Inside the placeholder: "NAME=" is its first bytes.
            env_ptrs[at].cast::<u8>().wrapping_add(name.len() + 1)
        };
        let exec = Exec {
            paths: &paths,
            reset: &reset,
            argv: arg_ptrs.as_ptr(),
            envp: env_ptrs.as_ptr().cast(),
            token_digits: digits_of(token_at, TOKEN_ENV),
            slot_digits: digits_of(token_at + 1, SLOT_ENV),
            output: output.map(|fd| std::os::fd::AsRawFd::as_raw_fd(&fd)),
            number_digits: number.map_or(std::ptr::null_mut(), |n| digits_of(token_at + 2, n)),
        };

        let (go_r, go_w) = pipe().map_err(|e| failed("pipe", e))?;
        let (err_r, err_w) = pipe().map_err(|e| failed("pipe", e))?;

        // Block every signal across the fork: the new process must not run
        // the wrapper's handlers (they would report its signals as the
        // wrapper's) before it has reset them.
        let mut old = SigSet::empty();
        let _ = pthread_sigmask(
            SigmaskHow::SIG_SETMASK,
            Some(&SigSet::all()),
            Some(&mut old),
        );
        // SAFETY: the child branch runs only `become_command`, which makes
        // only async-signal-safe calls on memory prepared before the fork
        // (`exec` and the pipes) and ends in exec or _exit; nothing it
        // touches can be left locked by another thread of the wrapper.
        let forked = unsafe { nix::unistd::fork() };
        let pid = match forked {
            Ok(ForkResult::Child) => {
                // SAFETY: this is the child of the fork above, and `exec`
                // was built before it (see `become_command`).
                unsafe { become_command(go_r, go_w, err_r, err_w, &exec) }
            }
            Ok(ForkResult::Parent { child }) => Ok(child.as_raw()),
            Err(e) => Err(e),
        };
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        let pid = pid.map_err(|e| failed("fork", e.into()))?;
        // Also from this side, so the group exists before anyone signals it.
        let _ = nix::unistd::setpgid(Pid::from_raw(pid), Pid::from_raw(pid));
        drop(go_r);
        drop(err_w);
        let Some(start) = start_time(pid) else {
            // Our own unreaped child always has a /proc entry; without one
            // it could not be put on record.
            let mut held = HeldChild {
                proc: Proc { pid, start: 0 },
                go: Some(go_w),
                exec_error: Some(err_r),
            };
            held.abort();
            return Err(failed(
                "read its start time",
                io::Error::from(io::ErrorKind::NotFound),
            ));
        };
        Ok(HeldChild {
            proc: Proc { pid, start },
            go: Some(go_w),
            exec_error: Some(err_r),
        })
    }

    /// The held process as evidence: put this on record before `release`.
    pub fn proc(&self) -> Proc {
        self.proc
    }

    /// Let the held process exec the command, with its fencing token.
    #[cfg(test)]
    pub fn release(self, token: i64, slot: u32) -> RunningChild {
        self.release_numbered(token, slot, 0)
    }

    /// As `release`, with the number of a `fork_numbered` placeholder.
    pub fn release_numbered(mut self, token: i64, slot: u32, number: u64) -> RunningChild {
        let mut go = [0u8; GO_LEN];
        go[..8].copy_from_slice(&token.to_le_bytes());
        go[8..12].copy_from_slice(&slot.to_le_bytes());
        go[12..].copy_from_slice(&number.to_le_bytes());
        if let Some(fd) = self.go.take() {
            // A failed write means the held process is gone already; its
            // exit is noticed like any other.
            let _ = nix::unistd::write(&fd, &go);
        }
        RunningChild {
            pid: self.proc.pid,
            exec_error: self.exec_error.take(),
            reaped: false,
        }
    }

    /// The command will not run: close the pipe (the held process exits
    /// without exec), KILL it too (a held process someone stopped would
    /// never read the pipe), and reap it.
    pub fn abort(&mut self) {
        if self.go.take().is_some() {
            // Our own unreaped child: its pid cannot have been reused.
            let _ = nix::sys::signal::kill(Pid::from_raw(self.proc.pid), Signal::SIGKILL);
            reap(self.proc.pid);
        }
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Reap our own child `pid`, waiting for it to exit.
fn reap(pid: i32) -> Option<ExitStatus> {
    loop {
        return match nix::sys::wait::waitpid(Pid::from_raw(pid), None) {
            Err(Errno::EINTR) => continue,
            // The wait status as the kernel reports it: the code in the
            // second byte, or the signal (and 0x80 for a core dump).
            Ok(WaitStatus::Exited(_, code)) => Some(ExitStatus::from_raw((code & 0xff) << 8)),
            Ok(WaitStatus::Signaled(_, sig, core)) => Some(ExitStatus::from_raw(
                sig as i32 | if core { 0x80 } else { 0 },
            )),
            _ => None,
        };
    }
}

impl RunningChild {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// The child's pid, which is its process group's id, while it is not
    /// reaped: until then neither can be reused. Reaping takes the child
    /// mutably, so a caller holding this borrow signals this pass's group
    /// and no other (see `signal::PassGroup::Own`).
    pub fn leader(&self) -> Option<i32> {
        (!self.reaped).then_some(self.pid)
    }

    /// Reap the child (it has exited: the caller was told so).
    pub fn wait(&mut self) -> Option<ExitStatus> {
        if self.reaped {
            return None;
        }
        self.reaped = true;
        reap(self.pid)
    }

    /// Why exec failed, once the child is gone: `None` when the command ran.
    pub fn exec_failure(&self, argv0: &str) -> Option<SpawnError> {
        let mut errno = [0u8; 4];
        let fd = self.exec_error.as_ref()?;
        if !read_exact(fd, &mut errno) {
            return None;
        }
        let e = io::Error::from_raw_os_error(i32::from_le_bytes(errno));
        let code = exit::of_exec_errno(e.raw_os_error().unwrap_or(0));
        let what = if code == exit::NOT_FOUND {
            "command not found".to_string()
        } else {
            format!("cannot execute: {e}")
        };
        Some(SpawnError {
            code,
            message: format!("{argv0}: {what}"),
        })
    }

    /// KILL and reap a child that must not run on (the wrapper cannot
    /// supervise it).
    pub fn kill_and_reap(&mut self) {
        if let Some(pid) = self.leader() {
            // Our own unreaped child: its pid cannot have been reused.
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        self.wait();
    }
}

impl Drop for RunningChild {
    fn drop(&mut self) {
        // Never leave a zombie: a child that was not reaped is ended.
        if !self.reaped {
            self.kill_and_reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ignore the caller set is kept, but TERM's: TERM always stops a
    /// pass.
    #[test]
    fn an_inherited_ignore_is_kept_but_for_term() {
        for sig in FORWARDED {
            assert!(takes_over(sig, false), "{sig}");
            assert_eq!(takes_over(sig, true), sig == SIGTERM, "{sig}");
        }
    }

    #[test]
    fn decimals_are_written_in_place() {
        let mut buf = placeholder("JOBRUN_TOKEN", TOKEN_DIGITS);
        let at = "JOBRUN_TOKEN=".len();
        // SAFETY: the placeholder has room for 20 digits and a NUL at `at`.
        unsafe { write_decimal(buf.as_mut_ptr().add(at), i64::MAX as u64) };
        let s = CString::from_vec_with_nul(buf[..at + 20].to_vec()).unwrap();
        assert_eq!(s.to_str().unwrap(), "JOBRUN_TOKEN=9223372036854775807");
        let mut buf = placeholder("JOBRUN_SLOT", SLOT_DIGITS);
        let at = "JOBRUN_SLOT=".len();
        // SAFETY: the placeholder has room for 10 digits and a NUL at `at`.
        unsafe { write_decimal(buf.as_mut_ptr().add(at), 0) };
        assert_eq!(&buf[..at + 2], b"JOBRUN_SLOT=0\0");
    }

    #[test]
    fn a_held_child_runs_nothing_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let argv: Vec<std::ffi::OsString> = vec![
            "sh".into(),
            "-c".into(),
            format!("echo $JOBRUN_TOKEN/$JOBRUN_SLOT > {}", marker.display()).into(),
        ];
        // Aborted: the command never runs, even when the held process was
        // stopped and cannot read its pipe.
        let held = HeldChild::fork(&argv, &[], &[], None).unwrap();
        assert!(held.proc().start > 0);
        nix::sys::signal::kill(Pid::from_raw(held.proc().pid), Signal::SIGSTOP).unwrap();
        drop(held);
        assert!(!marker.exists());
        // Released: it runs with its token.
        let held = HeldChild::fork(&argv, &[], &[], None).unwrap();
        let mut child = held.release(1_234_567_890_123, 7);
        assert!(child.wait().unwrap().success());
        assert!(child.exec_failure("sh").is_none());
        let text = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(text.trim(), "1234567890123/7");
        // A number of its own, set at release.
        let argv: Vec<std::ffi::OsString> = vec![
            "sh".into(),
            "-c".into(),
            format!("echo $JOBRUN_TOKEN/$TEST_NUMBER > {}", marker.display()).into(),
        ];
        let held = HeldChild::fork_numbered(&argv, &[], &[], None, Some("TEST_NUMBER")).unwrap();
        let mut child = held.release_numbered(5, 0, u64::MAX);
        assert!(child.wait().unwrap().success());
        let text = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(text.trim(), format!("5/{}", u64::MAX));
    }

    #[test]
    fn a_missing_command_is_reported_after_release() {
        let argv = vec![std::ffi::OsString::from("/nonexistent/jobrun-test-command")];
        let mut child = HeldChild::fork(&argv, &[], &[], None)
            .unwrap()
            .release(1, 0);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(exit::NOT_FOUND));
        let e = child.exec_failure(&argv[0].to_string_lossy()).unwrap();
        assert_eq!(e.code, exit::NOT_FOUND);
    }
}
