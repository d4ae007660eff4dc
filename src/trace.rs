//! Where the time of one pass goes, for `scripts/bench.sh phases`: with
//! `JOBRUN_TRACE_PHASES` set (to anything; the benchmark sets the moment it
//! spawned jobrun), each phase of a pass is marked as it ends and the marks
//! are printed on stderr at exit, one `jobrun-phase NAME NANOSECONDS` line
//! each (`CLOCK_MONOTONIC`). Unset, a mark costs one load of a flag.

use std::sync::{Mutex, OnceLock};

pub const TRACE_ENV: &str = "JOBRUN_TRACE_PHASES";

static ON: OnceLock<bool> = OnceLock::new();
static MARKS: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

fn on() -> bool {
    *ON.get_or_init(|| std::env::var_os(TRACE_ENV).is_some())
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The phase `name` ends now.
pub fn mark(name: &'static str) {
    if on() {
        if let Ok(mut m) = MARKS.lock() {
            m.push((name, monotonic_ns()));
        }
    }
}

/// Print the marks (once, at exit).
pub fn print() {
    if !on() {
        return;
    }
    let marks = MARKS.lock().map(|m| m.clone()).unwrap_or_default();
    let text: String = marks
        .iter()
        .map(|(name, at)| format!("jobrun-phase {name} {at}\n"))
        .collect();
    use std::io::Write;
    let _ = std::io::stderr().write_all(text.as_bytes());
}
