//! jobrun's own lines on stderr: one line per event, prefixed so that cron
//! mail and journald show whose line it is.

/// Print one line on stderr: `jobrun: <message>`.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("jobrun: {}", format_args!($($arg)*))
    };
}

/// A duration as an operator reads it: `1.2s`, `4m 3s`, `2h 5m`.
pub fn human_ms(ms: i64) -> String {
    let neg = ms < 0;
    let ms = ms.unsigned_abs();
    let s = if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else if ms < 3_600_000 {
        format!("{}m {}s", ms / 60_000, (ms / 1000) % 60)
    } else if ms < 86_400_000 {
        format!("{}h {}m", ms / 3_600_000, (ms / 60_000) % 60)
    } else {
        format!("{}d {}h", ms / 86_400_000, (ms / 3_600_000) % 24)
    };
    if neg {
        format!("-{s}")
    } else {
        s
    }
}

/// A wall-clock instant in UTC, RFC 3339 to the second.
pub fn utc_ms(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_ms(1234), "1.2s");
        assert_eq!(human_ms(42_000), "42s");
        assert_eq!(human_ms(243_000), "4m 3s");
        assert_eq!(human_ms(7_500_000), "2h 5m");
        assert_eq!(human_ms(-2000), "-2.0s");
    }
}
