//! The clocks jobrun reads, in one place.
//!
//! Wall time (Unix milliseconds) is what operators read and what a fleet
//! store compares on its server. It can jump, so on a one-machine store the
//! age of a lease recorded on this boot is measured on `CLOCK_BOOTTIME`,
//! which never steps and keeps counting through suspend: a wall-clock step
//! on one process can then never make it judge another's lease lapsed.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Environment variable that skews this process's wall clock: a seam for
/// tests that need a host whose clock is off (`1h` or `-1h`). It moves the
/// wall clock only, never the boot clock.
pub const SKEW_ENV: &str = "JOBRUN_CLOCK_SKEW";

/// The longest any other duration may be (`--max-hold`, `--wait`,
/// `--kill-after`, stop-due's `--wait` and `--kill-after`): 100 years, far
/// inside what the store's millisecond integers and the clocks hold.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// The largest skew accepted (100 years).
const MAX_SKEW_MS: i64 = 100 * 31_557_600_000;

/// `JOBRUN_CLOCK_SKEW` parsed: `Ok(0)` when unset, an error that shows a
/// valid value when it is not a duration (with an optional `-`) of at most
/// 100 years. jobrun checks it at startup (`check_skew`), so a bad value
/// fails like any other bad duration instead of being ignored.
pub fn parse_skew() -> Result<i64, String> {
    let Some(raw) = std::env::var_os(SKEW_ENV) else {
        return Ok(0);
    };
    let s = raw.to_string_lossy();
    let (sign, body) = match s.trim().strip_prefix('-') {
        Some(rest) => (-1, rest.to_string()),
        None => (1, s.trim().to_string()),
    };
    humantime::parse_duration(&body)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .filter(|ms| *ms <= MAX_SKEW_MS)
        .map(|ms| sign * ms)
        .ok_or_else(|| {
            format!(
                "invalid {SKEW_ENV} '{}': expected a duration of at most 100 years, with an \
                 optional '-', like 90s, -5m or 1h 30m",
                crate::report::escape(&s)
            )
        })
}

/// Refuse a bad `JOBRUN_CLOCK_SKEW` before anything is done.
pub fn check_skew() -> anyhow::Result<()> {
    parse_skew().map(|_| ()).map_err(anyhow::Error::msg)
}

/// Milliseconds to add to the wall clock (`JOBRUN_CLOCK_SKEW`), read once
/// per process: the wall clock is read in every store transaction.
pub fn skew_ms() -> i64 {
    static SKEW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *SKEW.get_or_init(|| parse_skew().unwrap_or(0))
}

/// This host's wall clock, in Unix milliseconds.
pub fn now_ms() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    ms.saturating_add(skew_ms())
}

/// Milliseconds since this machine booted (`CLOCK_BOOTTIME`).
pub fn boot_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec / 1_000_000)
}

/// The instant `d` from now. Settings bound every duration to 100 years,
/// which the monotonic clock always holds; were one larger, it is capped
/// there rather than overflowing.
pub fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(MAX_DURATION))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_ms();
        let b = boot_ms();
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn deadlines_never_overflow() {
        let far = deadline_after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(365 * 86_400));
    }
}
