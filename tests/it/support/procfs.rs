//! This machine as jobrun reads it, for tests that forge rows naming real
//! processes: a process's start time and session from `/proc`, the host,
//! boot and PID namespace a row records, and the wall clock in ms.

use std::fs;
use std::time::{SystemTime, UNIX_EPOCH};

/// Field `n` (0-based, counted after the command name) of `/proc/PID/stat`.
fn stat_field(pid: i32, n: usize) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(n)
        .unwrap()
        .parse()
        .unwrap()
}

/// The start time of `pid`, in clock ticks since boot.
pub fn start_of(pid: i32) -> u64 {
    stat_field(pid, 19)
}

/// The session of `pid`.
pub fn session_of(pid: i32) -> i32 {
    stat_field(pid, 3) as i32
}

/// The parent of `pid`.
pub fn parent_of(pid: i32) -> i32 {
    stat_field(pid, 1) as i32
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// This machine as jobrun records it (host, boot id, PID namespace), so
/// that forged rows are judged by their pids.
pub fn here() -> (String, String, String) {
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string();
    let ns = fs::read_link("/proc/self/ns/pid")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    (host, boot, ns)
}
