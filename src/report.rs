//! jobrun's own lines on stderr: one line per event, prefixed so that cron
//! mail and journald show whose line it is.
//!
//! Text read from the store (pause reasons, hosts, commands, pass ids, job
//! names) was written by whoever can write the store: it goes through
//! `escape` before it is shown, so a row can neither forge a line of its own
//! nor drive the operator's terminal.

/// Print one line on stderr: `jobrun: <message>`. A lost stderr (a closed
/// pipe, a full disk) loses the line and nothing else: a pass must never die,
/// or leave its child unsupervised, because nobody reads its messages.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "jobrun: {}", format_args!($($arg)*));
    }};
}

/// Where a thread of a pass says what happened (the renewer, the owner of
/// the child): the pass's stderr (`Log::stderr`), or whatever a test keeps
/// to read back, so that unit tests print nothing of their own.
#[derive(Clone)]
pub struct Log(pub(crate) std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl Log {
    /// Each line on stderr as jobrun's own (`jobrun: ...`).
    pub fn stderr() -> Log {
        Log(std::sync::Arc::new(|line| say!("{line}")))
    }

    /// Say one line.
    pub fn line(&self, line: std::fmt::Arguments) {
        (self.0)(&line.to_string());
    }
}

/// Text from the store as one visible line: control characters (C0, DEL,
/// C1), ESC, and every character a name may not hold because it cannot be
/// seen for what it is (`policy::names::hidden`: bidi, zero-width and other
/// default-ignorable, unassigned and private-use code points) become
/// escapes (`\n`, `\t`, `\r`, `\e`, `\u{202e}`); everything else is kept
/// as it is.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        escape_char(&mut out, c);
    }
    out
}

fn escape_char(out: &mut String, c: char) {
    use std::fmt::Write;
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{1b}' => out.push_str("\\e"),
        c if c.is_control() || crate::policy::names::hidden(c).is_some() => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// A command's output from the store, as lines to read: escaped as
/// `escape` does, except that newlines and tabs stay, and each byte that is
/// not UTF-8 becomes `\xNN`.
pub fn escape_lines(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' | '\t' => out.push(c),
                c => escape_char(&mut out, c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
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

/// An age ("renewed 4s ago"): never negative. A renewal stamped ahead of
/// this host's clock (another host's clock runs fast) is shown as just now.
pub fn age_ms(ms: i64) -> String {
    human_ms(ms.max(0))
}

/// When a lease expires, as a short column: `in 4m 3s`, or `12s ago` once
/// it has expired; never a negative figure.
pub fn expiry_ms(expires_in_ms: i64) -> String {
    if expires_in_ms > 0 {
        format!("in {}", human_ms(expires_in_ms))
    } else {
        format!("{} ago", human_ms(-expires_in_ms))
    }
}

/// When a lease expires, as words: `expires in 4m 3s` or `expired 12s ago`.
pub fn expiry_words(expires_in_ms: i64) -> String {
    if expires_in_ms > 0 {
        format!("expires in {}", human_ms(expires_in_ms))
    } else {
        format!("expired {} ago", human_ms(-expires_in_ms))
    }
}

/// A wall-clock instant in UTC, RFC 3339 to the second. An instant RFC 3339
/// cannot write (before 1970, from year 10000 on: a forged or broken row)
/// is shown as its raw milliseconds, never a panic.
pub fn utc_ms(ms: i64) -> String {
    use std::fmt::Write;
    let t = u64::try_from(ms)
        .ok()
        .and_then(|ms| std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms)));
    let mut out = String::new();
    match t {
        Some(t) if write!(out, "{}", humantime::format_rfc3339_seconds(t)).is_ok() => out,
        _ => format!("@{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_its_lines_and_tabs_and_escapes_the_rest() {
        let raw = b"ok\tdone\n\x1b[31mred\r\x00\xff\xe2\x80\xaeend\n";
        assert_eq!(
            escape_lines(raw),
            "ok\tdone\n\\e[31mred\\r\\u{0}\\xff\\u{202e}end\n"
        );
    }

    #[test]
    fn instants_rfc3339_cannot_write_are_shown_raw() {
        assert_eq!(utc_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_ms(300_000_000_000_000), "@300000000000000ms");
        assert_eq!(utc_ms(-5), "@-5ms");
        assert_eq!(utc_ms(i64::MAX), format!("@{}ms", i64::MAX));
    }

    #[test]
    fn store_text_is_shown_as_one_visible_line() {
        assert_eq!(escape("feeds.poll"), "feeds.poll");
        assert_eq!(escape("a\nFAKE: x\u{1b}[2J"), "a\\nFAKE: x\\e[2J");
        assert_eq!(escape("a\u{202e}b\u{200b}"), "a\\u{202e}b\\u{200b}");
        assert_eq!(escape("\u{7f}\u{9b}\r\t"), "\\u{7f}\\u{9b}\\r\\t");
        assert_eq!(escape("café ✓"), "café ✓");
        // Invisible, unassigned and private-use code points too.
        assert_eq!(
            escape("deploy\u{fe00}\u{ad}\u{e0001}\u{378}\u{e000}"),
            "deploy\\u{fe00}\\u{ad}\\u{e0001}\\u{378}\\u{e000}"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_ms(1234), "1.2s");
        assert_eq!(human_ms(42_000), "42s");
        assert_eq!(human_ms(243_000), "4m 3s");
        assert_eq!(human_ms(7_500_000), "2h 5m");
        assert_eq!(human_ms(-2000), "-2.0s");
        assert_eq!(age_ms(-3_598_000), "0.0s");
        assert_eq!(expiry_ms(243_000), "in 4m 3s");
        assert_eq!(expiry_ms(-12_000), "12s ago");
        assert_eq!(expiry_words(-12_000), "expired 12s ago");
        assert_eq!(expiry_words(5_000), "expires in 5.0s");
    }
}
