//! Start the command so that no process of a pass runs before it is on
//! record.
//!
//! The command is started first and held: the new process puts itself in a
//! process group of its own and blocks on a pipe before exec. Its pid and
//! start time go into the store in the same transaction that takes the slot
//! (or joins the queue); only then does the wrapper write the fencing token
//! down the pipe, and the held process fills it into its environment and
//! execs. If the wrapper dies first, the pipe closes and the held process
//! exits without ever running the command. If the slot is not taken, the
//! wrapper aborts it the same way.
//!
//! Between its start and exec the held process makes raw system calls
//! only (`raw`: it may share the wrapper's memory): everything it needs
//! (argv, the environment, the buffers the token is written into) is built
//! before it starts, and kept until it is reaped.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};

use crate::exit;
use crate::policy::lease::Proc;
use crate::process::start_time;

mod raw;

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
/// handler is installed: `events::watch_signals` makes it.
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

/// A held command waiting for its go.
pub struct HeldChild {
    proc: Proc,
    /// Closed (taken) once the child is released or aborted.
    go: Option<OwnedFd>,
    exec_error: Option<OwnedFd>,
    /// What the held process runs on: freed only once it is reaped.
    launch: Option<Box<Launch>>,
}

/// A command that was let go: it has exec'd, or it failed to and is exiting.
pub struct RunningChild {
    pid: i32,
    exec_error: Option<OwnedFd>,
    reaped: bool,
    /// What it ran on until exec: freed only once it is reaped.
    _launch: Option<Box<Launch>>,
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

/// Everything the held process needs between its start and exec, built
/// before it starts and left unchanged by the wrapper until it is reaped:
/// the held process may share this memory (`raw::start`), and allocates
/// nothing.
struct Exec {
    /// Where exec looks for the command, in order.
    paths: Vec<CString>,
    /// The arguments and the environment, and the NULL-terminated arrays
    /// of pointers to them that exec takes.
    args: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    vars: Vec<Vec<u8>>,
    envp: Vec<*const libc::c_char>,
    /// The digits of the `JOBRUN_TOKEN=` and `JOBRUN_SLOT=` placeholders.
    token_digits: *mut u8,
    slot_digits: *mut u8,
    /// The digits of the `fork_numbered` placeholder, or null.
    number_digits: *mut u8,
    /// Where the command's stdout and stderr go when the wrapper captures
    /// them (`--output quiet-unless-failed`): the write end of one pipe, so
    /// both arrive in order.
    output: Option<libc::c_int>,
    /// The pipes' ends, as the held process finds them: it reads its go
    /// on `go_r`, reports a failed exec on `err_w`, and closes the others.
    go_r: libc::c_int,
    go_w: libc::c_int,
    err_r: libc::c_int,
    err_w: libc::c_int,
}

/// What a held process runs on until it is reaped: its `Exec` and its
/// stack. Dropped only after the process is reaped (the owners' `Drop`
/// reaps first).
struct Launch {
    exec: Exec,
    _stack: raw::Stack,
}

/// The held process's first function (`raw::start`).
extern "C" fn held_main(exec: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `start` passes the `Exec` of its `Launch`, valid and
    // unchanged until this process is reaped.
    unsafe { become_command(&*exec.cast::<Exec>()) }
}

/// The held process, from its start to exec: put itself in a process
/// group of its own, give every signal the wrapper handles back its
/// default (one its caller ignored stays ignored), wait for the token,
/// write it into the environment, exec. Never returns: exec, or `_exit`
/// with 127 (not found), 126 (cannot execute) or `ABORTED` (the wrapper
/// went away or aborted it), the errno reported down `err_w`.
///
/// # Safety
/// Call only in the held process, once, with `exec` built before it
/// started: its pointers valid, each placeholder with room for its digits
/// and a NUL. It makes only `raw`'s system calls (it may share the
/// wrapper's memory and its `errno`) and allocates nothing.
unsafe fn become_command(exec: &Exec) -> ! {
    raw::close(exec.go_w);
    raw::close(exec.err_r);
    raw::own_group();
    if let Some(fd) = exec.output {
        // The copies on 1 and 2 lose close-on-exec, the original keeps it
        // (were the pipe itself on 1 or 2, jobrun started with them
        // closed, that one loses it).
        raw::dup_onto(fd, 1);
        raw::dup_onto(fd, 2);
    }
    raw::default_handled_signals();
    raw::unblock_all();
    let mut go = [0u8; GO_LEN];
    if !raw::read_exact(exec.go_r, &mut go) {
        // The wrapper went away or aborted it.
        raw::exit(ABORTED);
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
    for path in &exec.paths {
        // SAFETY: NUL-terminated path, NULL-terminated argv and envp of
        // NUL-terminated strings, all alive until exec replaces us.
        match unsafe { raw::execve(path.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr()) } {
            libc::ENOENT | libc::ENOTDIR => {}
            libc::EACCES => errno = libc::EACCES,
            other => {
                errno = other;
                break;
            }
        }
    }
    let _ = raw::write(exec.err_w, &errno.to_le_bytes());
    raw::exit(exit::of_exec_errno(errno))
}

impl HeldChild {
    /// Start `argv` (run directly, found on PATH like `execvp`) with the
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
        let paths = candidates(&argv[0])?;

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

        let (go_r, go_w) = pipe().map_err(|e| failed("pipe", e))?;
        let (err_r, err_w) = pipe().map_err(|e| failed("pipe", e))?;
        let stack = raw::Stack::new().map_err(|e| failed("stack", e))?;
        let mut launch = Box::new(Launch {
            exec: Exec {
                paths,
                args,
                argv: Vec::new(),
                vars,
                envp: Vec::new(),
                token_digits: std::ptr::null_mut(),
                slot_digits: std::ptr::null_mut(),
                number_digits: std::ptr::null_mut(),
                output: output.map(|fd| fd.as_raw_fd()),
                go_r: go_r.as_raw_fd(),
                go_w: go_w.as_raw_fd(),
                err_r: err_r.as_raw_fd(),
                err_w: err_w.as_raw_fd(),
            },
            _stack: stack,
        });
        // The pointers into the buffers, taken where they stay: the
        // buffers themselves never move again.
        let exec = &mut launch.exec;
        exec.argv = exec.args.iter().map(|a| a.as_ptr()).collect();
        exec.argv.push(std::ptr::null());
        // Inside each placeholder: "NAME=" is its first bytes.
        let digits_of = |v: &mut Vec<u8>, name: &str| v.as_mut_ptr().wrapping_add(name.len() + 1);
        exec.token_digits = digits_of(&mut exec.vars[token_at], TOKEN_ENV);
        exec.slot_digits = digits_of(&mut exec.vars[token_at + 1], SLOT_ENV);
        if let Some(n) = number {
            exec.number_digits = digits_of(&mut exec.vars[token_at + 2], n);
        }
        exec.envp = exec.vars.iter().map(|v| v.as_ptr().cast()).collect();
        exec.envp.push(std::ptr::null());

        // Block every signal across the start: the new process must not
        // run the wrapper's handlers (they would report its signals as the
        // wrapper's) before it has reset them.
        let mut old = SigSet::empty();
        let _ = pthread_sigmask(
            SigmaskHow::SIG_SETMASK,
            Some(&SigSet::all()),
            Some(&mut old),
        );
        let arg: *mut Exec = &mut launch.exec;
        // SAFETY: `held_main` makes only `raw`'s calls and touches only the
        // `Launch` (its `Exec` and stack), which nothing changes and which
        // lives until the process is reaped (`HeldChild` and
        // `RunningChild` hold it and reap before they drop it); every
        // signal is blocked.
        let started = unsafe { raw::start(held_main, arg.cast(), &launch._stack) };
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        let pid = started.map_err(|e| failed("start", e))?;
        // Also from this side, so the group exists before anyone signals it.
        let _ = nix::unistd::setpgid(Pid::from_raw(pid), Pid::from_raw(pid));
        drop(go_r);
        drop(err_w);
        let mut held = HeldChild {
            proc: Proc { pid, start: 0 },
            go: Some(go_w),
            exec_error: Some(err_r),
            launch: Some(launch),
        };
        let Some(start) = start_time(pid) else {
            // Our own unreaped child always has a /proc entry; without one
            // it could not be put on record.
            held.abort();
            return Err(failed(
                "read its start time",
                io::Error::from(io::ErrorKind::NotFound),
            ));
        };
        held.proc.start = start;
        Ok(held)
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
            _launch: self.launch.take(),
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
        if !raw::read_exact(fd.as_raw_fd(), &mut errno) {
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
    use nix::sys::wait::WaitPidFlag;

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

    /// `sh -c SCRIPT`, as a held command's argv.
    fn sh(script: String) -> Vec<std::ffi::OsString> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    /// The token as the wrapper's copy of the environment holds it.
    fn token_in_wrapper(child: &RunningChild) -> String {
        let launch = child._launch.as_ref().unwrap();
        let var = launch
            .exec
            .vars
            .iter()
            .find(|v| v.starts_with(b"JOBRUN_TOKEN="));
        let var = std::ffi::CStr::from_bytes_until_nul(var.unwrap()).unwrap();
        var.to_str().unwrap()["JOBRUN_TOKEN=".len()..]
            .trim()
            .to_string()
    }

    /// Where it can, the held process shares the wrapper's memory (the
    /// token it writes lands in the wrapper's copy); forked, it runs the
    /// same and writes its own copy.
    #[test]
    fn the_held_process_shares_memory_where_it_can_and_is_forked_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let argv = sh(format!("echo $JOBRUN_TOKEN > {}", marker.display()));
        let run = |token: i64| {
            let mut child = HeldChild::fork(&argv, &[], &[], None)
                .unwrap()
                .release(token, 0);
            assert!(child.wait().unwrap().success());
            let seen = std::fs::read_to_string(&marker).unwrap();
            assert_eq!(seen.trim(), token.to_string());
            token_in_wrapper(&child)
        };
        let shared = run(42);
        assert_eq!(shared == "42", raw::shares_memory(), "{shared:?}");
        raw::FORK_IN_TESTS.with(|f| f.set(true));
        let forked = run(43);
        raw::FORK_IN_TESTS.with(|f| f.set(false));
        assert_eq!(forked, "", "a forked process wrote the wrapper's memory");
    }

    #[test]
    fn a_held_child_runs_nothing_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let argv = sh(format!(
            "echo $JOBRUN_TOKEN/$JOBRUN_SLOT > {}",
            marker.display()
        ));
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
        let argv = sh(format!(
            "echo $JOBRUN_TOKEN/$TEST_NUMBER > {}",
            marker.display()
        ));
        let held = HeldChild::fork_numbered(&argv, &[], &[], None, Some("TEST_NUMBER")).unwrap();
        let mut child = held.release_numbered(5, 0, u64::MAX);
        assert!(child.wait().unwrap().success());
        let text = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(text.trim(), format!("5/{}", u64::MAX));
    }

    /// The held process runs none of the wrapper's handlers, even while
    /// it shares the wrapper's memory: a signal it gets before exec has
    /// its default action there, and the wrapper's handler never hears of
    /// it.
    #[test]
    fn a_held_process_runs_none_of_the_wrappers_handlers() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let heard = Arc::new(AtomicBool::new(false));
        let id = signal_hook::flag::register(SIGUSR1, Arc::clone(&heard)).unwrap();
        let argv = vec![std::ffi::OsString::from("true")];
        let held = HeldChild::fork(&argv, &[], &[], None).unwrap();
        let pid = Pid::from_raw(held.proc().pid);
        nix::sys::signal::kill(pid, Signal::SIGUSR1).unwrap();
        // It ends by the signal (a handler would have let it wait on).
        let how = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let ended = loop {
            match nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), how) {
                Ok(WaitStatus::StillAlive) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Ok(WaitStatus::StillAlive) => break None,
                other => break Some(other),
            }
        };
        signal_hook::low_level::unregister(id);
        assert!(!heard.load(Ordering::SeqCst));
        let Some(ended) = ended else {
            drop(held);
            panic!("the held process did not end by the signal");
        };
        assert!(
            matches!(ended, Ok(WaitStatus::Signaled(_, Signal::SIGUSR1, _))),
            "{ended:?}"
        );
        let status = reap(pid.as_raw()).unwrap();
        assert_eq!(status.signal(), Some(SIGUSR1), "{status:?}");
        // Reaped already: nothing is left to abort.
        std::mem::forget(held);
    }

    /// A failed exec is read from the system call's return value: the
    /// errno of the thread that started the held process (which it may
    /// share) is left as it was.
    #[test]
    fn a_failed_exec_leaves_the_wrappers_errno_alone() {
        let argv = vec![std::ffi::OsString::from("/nonexistent/jobrun-test-command")];
        let held = HeldChild::fork(&argv, &[], &[], None).unwrap();
        Errno::set_raw(1234);
        let mut child = held.release(1, 0);
        let status = child.wait().unwrap();
        assert_eq!(Errno::last_raw(), 1234);
        assert_eq!(status.code(), Some(exit::NOT_FOUND));
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
