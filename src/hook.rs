//! The operator's hooks (`--on-start`, `--on-success`, `--on-failure`): one
//! shell line each, run by `/bin/sh -c` with the pass in its environment,
//! so that a healthchecks or Cronitor ping is one `curl` line.
//!
//! A hook is the operator's and never the pass's: it runs in a process
//! group of its own, bounded by `--hook-timeout` (its group is KILLed past
//! it, and what it left in its group is KILLed when its shell ends), it is
//! always reaped, and whatever becomes of it is logged and changes neither
//! the pass's exit code nor its outcome. The start hook runs beside the
//! command and never delays it; the end hooks run once the slot is given
//! back, so a slow hook never holds the job.

use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::policy::outcome::Outcome;
use crate::say;

/// What a hook finds in its environment, besides `JOBRUN_JOB`,
/// `JOBRUN_TOKEN`, `JOBRUN_SLOT` and `JOBRUN_PASS`.
pub const OUTCOME_ENV: &str = "JOBRUN_OUTCOME";
pub const EXIT_CODE_ENV: &str = "JOBRUN_EXIT_CODE";
pub const DURATION_ENV: &str = "JOBRUN_DURATION_MS";
/// The failure hook's, when the output was captured: the spool's path.
pub const OUTPUT_FILE_ENV: &str = "JOBRUN_OUTPUT_FILE";

/// The variables that set the hooks: a hook never sees them, so a hook
/// that runs `jobrun run` does not fire hooks of its own in turn.
pub const HOOK_VARS: [&str; 3] = ["JOBRUN_ON_START", "JOBRUN_ON_SUCCESS", "JOBRUN_ON_FAILURE"];

/// The shell every hook line is given to.
const SHELL: &str = "/bin/sh";

/// How often a running hook is looked at.
const POLL: Duration = Duration::from_millis(10);

/// The hooks of a pass, as the operator set them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    pub on_start: Option<String>,
    pub on_success: Option<String>,
    pub on_failure: Option<String>,
    pub timeout: Duration,
}

/// Which hook: its flag names it in log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Start,
    Success,
    Failure,
}

impl Which {
    pub fn flag(self) -> &'static str {
        match self {
            Which::Start => "--on-start",
            Which::Success => "--on-success",
            Which::Failure => "--on-failure",
        }
    }

    /// The end hook a pass with `outcome` fires: `--on-success` after an
    /// ok pass, `--on-failure` after one that ended badly, none after any
    /// other (a pass stopped by the operator).
    pub fn after(outcome: Outcome) -> Option<Which> {
        if outcome == Outcome::Ok {
            Some(Which::Success)
        } else if outcome.ended_badly() {
            Some(Which::Failure)
        } else {
            None
        }
    }
}

impl Hooks {
    fn line(&self, which: Which) -> Option<&str> {
        match which {
            Which::Start => self.on_start.as_deref(),
            Which::Success => self.on_success.as_deref(),
            Which::Failure => self.on_failure.as_deref(),
        }
        .filter(|l| !l.trim().is_empty())
    }
}

/// The pass a hook is about.
#[derive(Debug, Clone)]
pub struct PassVars {
    pub job: String,
    pub pass_id: String,
    pub token: i64,
    pub slot: u32,
    /// Variables of jobrun's environment the hook does not inherit (as the
    /// command does not: a password in `JOBRUN_DB`).
    pub withheld: &'static [&'static str],
}

/// How the pass ended, for an end hook.
#[derive(Debug, Clone)]
pub struct EndVars {
    pub outcome: Outcome,
    pub exit_code: i32,
    pub duration_ms: i64,
    /// The captured output's spool (`--output quiet-unless-failed`), while
    /// it still exists: the failure hook gets it in `OUTPUT_FILE_ENV`.
    pub output_file: Option<std::path::PathBuf>,
}

/// A start hook running beside the command, watched by a thread of its own.
pub struct StartHook(JoinHandle<()>);

impl StartHook {
    /// Start `--on-start`, if set, on a thread of its own: the command it
    /// runs beside is already released and is not kept waiting.
    pub fn spawn(hooks: &Hooks, pass: &PassVars) -> Option<StartHook> {
        let line = hooks.line(Which::Start)?.to_string();
        let (timeout, pass) = (hooks.timeout, pass.clone());
        std::thread::Builder::new()
            .name("jobrun-hook".into())
            .spawn(move || run(Which::Start, &line, &pass, None, timeout))
            .ok()
            .map(StartHook)
    }

    /// Wait until the start hook is done (it is bounded by its timeout).
    pub fn join(self) {
        let _ = self.0.join();
    }
}

/// Run the end hook a pass that ended as `end` fires, if set, to its end:
/// bounded by the timeout, logged, never changing anything of the pass.
pub fn run_end(hooks: &Hooks, pass: &PassVars, end: EndVars) {
    let Some(which) = Which::after(end.outcome) else {
        return;
    };
    if let Some(line) = hooks.line(which) {
        let end = EndVars {
            output_file: end.output_file.filter(|_| which == Which::Failure),
            ..end
        };
        run(which, line, pass, Some(end), hooks.timeout);
    }
}

/// The hook's command: `/bin/sh -c LINE` in a process group of its own,
/// stdin from /dev/null, stdout and stderr to jobrun's stderr (a hook's
/// output is never mixed into the command's output).
fn command(line: &str, pass: &PassVars, end: Option<EndVars>) -> Command {
    let mut c = Command::new(SHELL);
    c.arg("-c").arg(line).process_group(0).stdin(Stdio::null());
    if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
        if let Ok(again) = fd.try_clone() {
            c.stdout(Stdio::from(fd)).stderr(Stdio::from(again));
        }
    }
    for var in HOOK_VARS
        .iter()
        .chain(&[OUTCOME_ENV, EXIT_CODE_ENV, DURATION_ENV, OUTPUT_FILE_ENV])
        .chain(pass.withheld)
    {
        c.env_remove(var);
    }
    c.env(crate::spawn::JOB_ENV, &pass.job)
        .env(crate::process::identity::PASS_ENV, &pass.pass_id)
        .env(crate::spawn::TOKEN_ENV, pass.token.to_string())
        .env(crate::spawn::SLOT_ENV, pass.slot.to_string());
    if let Some(end) = end {
        c.env(OUTCOME_ENV, end.outcome.as_str())
            .env(EXIT_CODE_ENV, end.exit_code.to_string())
            .env(DURATION_ENV, end.duration_ms.to_string());
        if let Some(path) = &end.output_file {
            c.env(OUTPUT_FILE_ENV, path);
        }
    }
    c
}

/// Run one hook to its end and log what went wrong with it.
fn run(which: Which, line: &str, pass: &PassVars, end: Option<EndVars>, timeout: Duration) {
    let label = format!("{}: {} hook", pass.job, which.flag());
    let (child, _helper) = match crate::process::spawn_helper(&mut command(line, pass, end)) {
        Ok(c) => c,
        Err(e) => {
            say!(warning, "{label} could not start: {e}");
            return;
        }
    };
    match finish(child, Instant::now() + timeout) {
        Finish::Exited(0) => {}
        Finish::Exited(code) => say!(warning, "{label} exited with code {code}"),
        Finish::Signalled(sig) => say!(warning, "{label} died of signal {sig}"),
        Finish::TimedOut => say!(
            warning,
            "{label} still ran after --hook-timeout {}; killed its process group",
            humantime::format_duration(timeout)
        ),
        Finish::Lost(e) => say!(warning, "{label}: cannot wait for it: {e}"),
    }
}

/// How a hook ended.
#[derive(Debug, PartialEq, Eq)]
enum Finish {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    Lost(String),
}

/// Wait for the hook's shell until `deadline`, without reaping it: while
/// it is unreaped its group id cannot be reused, so the KILL to its group
/// (past the deadline, or to what it left behind) reaches its processes
/// only. Then reap it.
fn finish(mut child: Child, deadline: Instant) -> Finish {
    let pid = Pid::from_raw(child.id() as i32);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    let timed_out = loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) if Instant::now() >= deadline => break true,
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {
                std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())))
            }
            Ok(_) => break false,
            Err(e) => return Finish::Lost(e.to_string()),
        }
    };
    // SAFETY: killpg(2) on the group of our own unreaped child.
    unsafe {
        libc::killpg(pid.as_raw(), libc::SIGKILL);
    }
    match child.wait() {
        _ if timed_out => Finish::TimedOut,
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => Finish::Exited(code),
            (_, Some(sig)) => Finish::Signalled(sig),
            _ => Finish::Lost("no exit status".into()),
        },
        Err(e) => Finish::Lost(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_hooks_follow_the_outcome() {
        assert_eq!(Which::after(Outcome::Ok), Some(Which::Success));
        for o in [
            Outcome::Failed,
            Outcome::Killed,
            Outcome::LostLease,
            Outcome::SpawnFailed,
            Outcome::Timeout,
        ] {
            assert_eq!(Which::after(o), Some(Which::Failure), "{o:?}");
        }
        for o in [
            Outcome::Stopped,
            Outcome::Skipped,
            Outcome::Coalesced,
            Outcome::WaitExpired,
            Outcome::Done,
        ] {
            assert_eq!(Which::after(o), None, "{o:?}");
        }
    }

    #[test]
    fn a_hook_past_its_deadline_is_killed_and_reaped() {
        let pass = PassVars {
            job: "j".into(),
            pass_id: "p".into(),
            token: 1,
            slot: 0,
            withheld: &[],
        };
        let child = command("sleep 30", &pass, None).spawn().unwrap();
        let pid = child.id() as i32;
        let at = Instant::now();
        assert_eq!(
            finish(child, Instant::now() + Duration::from_millis(100)),
            Finish::TimedOut
        );
        assert!(at.elapsed() < Duration::from_secs(10));
        // Reaped: the pid is gone, not a zombie.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        let child = command("exit 3", &pass, None).spawn().unwrap();
        assert_eq!(
            finish(child, Instant::now() + Duration::from_secs(10)),
            Finish::Exited(3)
        );
    }
}
