//! A cron schedule a job declares (`run --schedule 'CRON' --tz ZONE`) and
//! when it fires, correct across daylight-saving changes. The pattern is
//! crontab(5)'s five fields (croner); the zone comes from the system's
//! zoneinfo (jiff), never from a time-zone database built into jobrun:
//! binary size and memory are measured goals.

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// A parsed schedule in its zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    tz: TimeZone,
}

/// What a valid schedule looks like, for error messages.
const EXAMPLE: &str = "five crontab fields, like '*/5 * * * *' or '0 9 * * 1-5'";

impl Schedule {
    /// Parse `expr` (five crontab fields) in zone `tz` (an IANA name from
    /// the system's zoneinfo; the host's zone when `None`).
    pub fn parse(expr: &str, tz: Option<&str>) -> Result<Schedule, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr.trim())
            .map_err(|e| format!("'{expr}' is not a cron schedule ({e}): give {EXAMPLE}"))?;
        let tz = match tz {
            Some(name) => TimeZone::get(name).map_err(|_| {
                format!(
                    "time zone '{name}' is not in this system's zoneinfo (/usr/share/zoneinfo): \
                     give a name like Europe/Berlin or UTC"
                )
            })?,
            None => TimeZone::system(),
        };
        Ok(Schedule { cron, tz })
    }

    /// The first firing after `after_ms` (Unix ms), and the one after it.
    pub fn fires_after(&self, after_ms: i64) -> Option<(i64, i64)> {
        let at = Timestamp::from_millisecond(after_ms).ok()?;
        let from = Zoned::new(at, self.tz.clone());
        let first = self.cron.find_next_occurrence(&from, false).ok()?;
        let second = self.cron.find_next_occurrence(&first, false).ok()?;
        Some((
            first.timestamp().as_millisecond(),
            second.timestamp().as_millisecond(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn fires_by_the_zones_wall_clock_across_a_dst_change() {
        let s = Schedule::parse("0 9 * * *", Some("America/New_York")).unwrap();
        // 9:00 EST is 14:00 UTC; the clocks go forward on 8 March 2026, and
        // 9:00 EDT is 13:00 UTC.
        let (first, second) = s.fires_after(ms("2026-03-07T14:00:00Z")).unwrap();
        assert_eq!(first, ms("2026-03-08T13:00:00Z"));
        assert_eq!(second, ms("2026-03-09T13:00:00Z"));
        let s = Schedule::parse("*/5 * * * *", Some("UTC")).unwrap();
        assert_eq!(
            s.fires_after(ms("2026-03-07T14:01:00Z")),
            Some((ms("2026-03-07T14:05:00Z"), ms("2026-03-07T14:10:00Z")))
        );
    }

    #[test]
    fn bad_schedules_and_zones_say_what_is_wanted() {
        let e = Schedule::parse("every day", None).unwrap_err();
        assert!(e.contains("five crontab fields"), "{e}");
        let e = Schedule::parse("0 9 * * *", Some("Mars/Olympus")).unwrap_err();
        assert!(e.contains("not in this system's zoneinfo"), "{e}");
        assert!(Schedule::parse("0 0 * * * *", None).is_err(), "seconds");
    }
}
