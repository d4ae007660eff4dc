//! jobrun's own lines on stderr: one line per event, prefixed so that cron
//! mail and journald show whose line it is.
//!
//! Text read from the store (pause reasons, hosts, commands, pass ids, job
//! names) was written by whoever can write the store: it goes through
//! `escape` before it is shown, so a row can neither forge a line of its own
//! nor drive the operator's terminal.

/// Print one line on stderr at a level: `say!(warning, "...")`, written
/// `jobrun: <message>`. Every line jobrun writes has one of the levels
/// `error`, `warning`, `notice`, `info`; when stderr is the journal the line
/// carries its sd-daemon(3) prefix (`<4>` for a warning), so
/// `journalctl -p warning` finds lost leases and forced evictions. A lost
/// stderr (a closed pipe, a full disk) loses the line and nothing else: a
/// pass must never die, or leave its child unsupervised, because nobody
/// reads its messages.
#[macro_export]
macro_rules! say {
    (error, $($arg:tt)*) => {
        $crate::report::line($crate::report::Level::Error, format_args!($($arg)*))
    };
    (warning, $($arg:tt)*) => {
        $crate::report::line($crate::report::Level::Warning, format_args!($($arg)*))
    };
    (notice, $($arg:tt)*) => {
        $crate::report::line($crate::report::Level::Notice, format_args!($($arg)*))
    };
    (info, $($arg:tt)*) => {
        $crate::report::line($crate::report::Level::Info, format_args!($($arg)*))
    };
}

/// How much a line of jobrun's matters, as syslog(3) ranks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// jobrun could not do what it was asked (exit 125, a command that
    /// could not start, a pass it could not record).
    Error = 3,
    /// Something an operator should look at: a lost lease, an eviction, a
    /// holder alive past its lease, a KILL, a failing hook.
    Warning = 4,
    /// A normal event worth a line: a skipped pass, a pause, a new store.
    Notice = 5,
    /// Detail: what a command looked at.
    Info = 6,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::Error, Level::Warning, Level::Notice, Level::Info];

    /// The sd-daemon(3) and syslog(3) priority.
    pub fn priority(self) -> u8 {
        self as u8
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Notice => "notice",
            Level::Info => "info",
        }
    }

    /// What the level is used for, for the man pages.
    pub fn meaning(self) -> &'static str {
        match self {
            Level::Error => {
                "jobrun could not do what it was asked: bad usage or settings, a store it \
                 cannot use, a command that could not start, a pass it could not record."
            }
            Level::Warning => {
                "Something to look at: a lost lease, a holder freed or evicted (a forced \
                 clear-locks too), a holder alive past its lease, a command KILLed, a hook \
                 that failed or timed out."
            }
            Level::Notice => {
                "A normal event worth a line: a skipped or coalesced pass, a pause or \
                 resume, a new store, a slot taken after an eviction."
            }
            Level::Info => "Detail: what a command found (no jobs yet, nothing to lift).",
        }
    }
}

/// The variable systemd sets to "DEVICE:INODE" of the stream it connects
/// to a service's stdout and stderr.
pub const JOURNAL_ENV: &str = "JOURNAL_STREAM";

/// Whether `journal_stream` (JOURNAL_STREAM's value) names the file whose
/// device and inode are `dev` and `ino`: only then is that file the journal.
/// A child inherits the variable with stderr pointing elsewhere (a pipe, a
/// file), so the variable alone proves nothing.
pub fn names_stream(journal_stream: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = journal_stream.trim().split_once(':') else {
        return false;
    };
    matches!((d.parse::<u64>(), i.parse::<u64>()), (Ok(d), Ok(i)) if d == dev && i == ino)
}

/// Stderr is the journal: JOURNAL_STREAM names it (looked at once).
pub fn stderr_is_journal() -> bool {
    static IS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IS.get_or_init(|| {
        let Some(stream) = std::env::var_os(JOURNAL_ENV) else {
            return false;
        };
        let Ok(st) = nix::sys::stat::fstat(std::io::stderr()) else {
            return false;
        };
        names_stream(&stream.to_string_lossy(), st.st_dev, st.st_ino)
    })
}

/// One line as `say!` writes it: with the level's `<N>` prefix when stderr
/// is the journal.
pub fn format_line(level: Level, journal: bool, message: std::fmt::Arguments) -> String {
    if journal {
        format!("<{}>jobrun: {message}\n", level.priority())
    } else {
        format!("jobrun: {message}\n")
    }
}

/// Write one line of jobrun's on stderr (see `say!`), in one write.
pub fn line(level: Level, message: std::fmt::Arguments) {
    use std::io::Write as _;
    let text = format_line(level, stderr_is_journal(), message);
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Where a thread of a pass says what happened (the renewer, the owner of
/// the child): the pass's stderr (`Log::stderr`), or whatever a test keeps
/// to read back, so that unit tests print nothing of their own.
#[derive(Clone)]
pub struct Log(pub(crate) std::sync::Arc<LogFn>);

/// What takes each line of a `Log`, with its level.
pub(crate) type LogFn = dyn Fn(Level, &str) + Send + Sync;

impl Log {
    /// Each line on stderr as jobrun's own (`jobrun: ...`), at its level.
    pub fn stderr() -> Log {
        Log(std::sync::Arc::new(|level, l| {
            line(level, format_args!("{l}"))
        }))
    }

    /// Say one line at `level`.
    pub fn line(&self, level: Level, l: std::fmt::Arguments) {
        (self.0)(level, &l.to_string());
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
    fn journal_stream_must_name_stderr() {
        assert!(names_stream("8:1234", 8, 1234));
        assert!(!names_stream("8:1234", 8, 1235));
        assert!(!names_stream("9:1234", 8, 1234));
        assert!(!names_stream("", 8, 1234));
        assert!(!names_stream("8", 8, 1234));
        assert!(!names_stream("x:y", 8, 1234));
        let f = |level, journal| format_line(level, journal, format_args!("j: {}", 1));
        assert_eq!(f(Level::Warning, true), "<4>jobrun: j: 1\n");
        assert_eq!(f(Level::Error, true), "<3>jobrun: j: 1\n");
        assert_eq!(f(Level::Notice, true), "<5>jobrun: j: 1\n");
        assert_eq!(f(Level::Info, true), "<6>jobrun: j: 1\n");
        assert_eq!(f(Level::Warning, false), "jobrun: j: 1\n");
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
