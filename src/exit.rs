//! Every exit code jobrun can return, in one place.
//!
//! jobrun follows the `env`/`timeout` convention so a cron line or a systemd
//! unit can tell jobrun's own failures from the child's: the child's code
//! passes through unchanged, a signal death becomes 128+N, and 125-127 are
//! reserved for jobrun itself and for a command that could not be started.

/// The pass ran and its child exited 0; or an operator command succeeded.
pub const OK: i32 = 0;
/// Default code when the job's slot is held or the job is paused
/// (`-E/--conflict-exit-code` changes it, like `flock -E`).
pub const CONFLICT_DEFAULT: i32 = 0;
/// An operator command found something it could not finish (for example
/// `stop-due --wait` ran out of time with locks still held).
pub const INCOMPLETE: i32 = 1;
/// The command ran past `--timeout` and was stopped (as `timeout(1)`).
pub const TIMEOUT: i32 = 124;
/// jobrun itself failed: bad usage, bad settings, an unusable store.
pub const JOBRUN_FAILED: i32 = 125;
/// The command exists but could not be executed (permissions, bad format).
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found.
pub const NOT_FOUND: i32 = 127;
/// `check`, a monitoring plugin: a CRITICAL verdict (1 is its WARNING).
pub const CHECK_CRITICAL: i32 = 2;
/// `check` could not judge (UNKNOWN), its bad usage included.
pub const CHECK_UNKNOWN: i32 = 3;
/// Base for "the child died of signal N": exit 128+N.
pub const SIGNAL_BASE: i32 = 128;

/// What an exit status stands for, as `--help` and the man pages list it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// A code of its own, one of the constants above.
    Code(i32),
    /// The command's own exit code, passed through.
    Child,
    /// `SIGNAL_BASE` + N: the command died of signal N.
    Signal,
    /// The conflict code: `-E`, `CONFLICT_DEFAULT` unless given.
    Conflict,
    /// The code of a pass that joined a queued one: `--coalesced-exit-code`.
    Coalesced,
}

impl Status {
    /// The status as a reader looks it up: `125`, `128+N`, ...
    pub fn label(self) -> String {
        match self {
            Status::Code(c) => c.to_string(),
            Status::Child => "the command's own code".into(),
            Status::Signal => format!("{SIGNAL_BASE}+N"),
            Status::Conflict => format!("the conflict code (-E, default {CONFLICT_DEFAULT})"),
            Status::Coalesced => "the coalesced code (--coalesced-exit-code)".into(),
        }
    }
}

/// Every exit status, each with when it happens: the one list `--help`
/// and the man pages print.
pub const TABLE: [(Status, &str); 12] = [
    (Status::Child, "the command ran and exited"),
    (
        Status::Signal,
        "the command died of signal N (143 of TERM, 137 of KILL)",
    ),
    (
        Status::Conflict,
        "the job is held or paused, or --wait ran out",
    ),
    (
        Status::Coalesced,
        "the pass joined an identical queued pass (--coalesce)",
    ),
    (
        Status::Code(OK),
        "an operator command did what it was asked",
    ),
    (
        Status::Code(INCOMPLETE),
        "an operator command could not do all it was asked, or check found a WARNING: status \
         or history was given a job the store never saw (history --show: a pass with no \
         kept output), forget refused a job that is not free, stop-due could \
         not signal a pass or its --wait ran out with locks still held",
    ),
    (
        Status::Code(TIMEOUT),
        "the command ran past --timeout and was stopped (whatever it exited with then)",
    ),
    (
        Status::Code(JOBRUN_FAILED),
        "jobrun itself failed: bad usage or settings, an unusable store (also when a \
         command other than run or pause names a store that does not exist)",
    ),
    (
        Status::Code(CANNOT_EXECUTE),
        "the command exists but cannot be executed",
    ),
    (Status::Code(NOT_FOUND), "the command was not found"),
    (
        Status::Code(CHECK_CRITICAL),
        "check found a CRITICAL verdict (a monitoring plugin's code)",
    ),
    (
        Status::Code(CHECK_UNKNOWN),
        "check could not judge (UNKNOWN): its bad usage, a NAME the store never saw, a \
         missing or unreadable store",
    ),
];

/// Operator commands leave SIGPIPE at its default, as `ls` does.
pub const BROKEN_PIPE: &str = "An operator command whose output reader went away is ended by \
     SIGPIPE, as ls is (141 in the shell).";

/// `Exit status: X when ...; Y when ...`, for `--help`.
pub fn summary() -> String {
    let each: Vec<String> = TABLE
        .iter()
        .map(|(s, when)| format!("{} when {when}", s.label()))
        .collect();
    format!("Exit status: {}. {BROKEN_PIPE}", each.join("; "))
}

/// Exit code for a child that ended with `code`, or died of `signal`.
pub fn from_child(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (Some(c), _) => c,
        (None, Some(s)) => of_signal(s),
        (None, None) => JOBRUN_FAILED,
    }
}

/// Exit code of a pass ended by signal `sig`: 128+N, as a shell reports a
/// command killed by it.
pub const fn of_signal(sig: i32) -> i32 {
    SIGNAL_BASE + sig
}

/// Exit code of a command that could not be executed, from exec's errno:
/// not found (ENOENT, ENOTDIR) is 127, anything else 126. A `const fn` of
/// integers: the forked child calls it between fork and exec.
pub const fn of_exec_errno(errno: i32) -> i32 {
    if errno == libc::ENOENT || errno == libc::ENOTDIR {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_death_is_128_plus_n() {
        assert_eq!(from_child(None, Some(15)), 143);
        assert_eq!(from_child(None, Some(9)), 137);
        assert_eq!(from_child(Some(3), None), 3);
        assert_eq!(of_signal(libc::SIGHUP), 129);
    }

    #[test]
    fn exec_failures_are_126_or_127() {
        assert_eq!(of_exec_errno(libc::ENOENT), 127);
        assert_eq!(of_exec_errno(libc::ENOTDIR), 127);
        assert_eq!(of_exec_errno(libc::EACCES), 126);
        assert_eq!(of_exec_errno(libc::ENOEXEC), 126);
    }
}
