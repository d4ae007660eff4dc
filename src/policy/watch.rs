//! What `check` and `metrics` conclude about a job from what the store
//! recorded: when its next attempt is due (declared, or learned from its
//! own history), whether it is late, failing or stuck, and how bad that is
//! by the monitoring-plugins scale. Pure: the commands gather the rows and
//! the evidence, and the time a cron schedule next fires.
//!
//! Learning keeps one promise each way: a job never pages for a gap it has
//! had before (a weekday-only job is not late on Saturday), and a regular
//! job is caught within about two of its intervals.

use serde::{Deserialize, Serialize};

/// The monitoring-plugins scale, worst last: the exit code of `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok,
    Warning,
    Critical,
    Unknown,
}

impl Severity {
    /// The plugin's exit code (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
    pub fn code(self) -> i32 {
        match self {
            Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Critical => 2,
            Severity::Unknown => 3,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Severity::Ok => "OK",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
            Severity::Unknown => "UNKNOWN",
        }
    }
}

/// The cadence a job declared on `run`, stored with the job: the latest
/// declaration wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Declared {
    /// `--every D`.
    Every { interval_ms: i64 },
    /// `--schedule 'CRON'`, in `--tz` or the host's zone.
    Schedule { expr: String, tz: Option<String> },
}

impl Declared {
    /// From the job's stored columns (a writer of the store may have
    /// stored anything: a non-positive interval declares nothing).
    pub fn of(
        every_ms: Option<i64>,
        schedule: Option<String>,
        tz: Option<String>,
    ) -> Option<Declared> {
        match (every_ms, schedule) {
            (_, Some(expr)) => Some(Declared::Schedule { expr, tz }),
            (Some(ms), None) if ms > 0 => Some(Declared::Every { interval_ms: ms }),
            _ => None,
        }
    }

    /// The stored columns: (every_ms, schedule, schedule_tz).
    pub fn columns(&self) -> (Option<i64>, Option<&str>, Option<&str>) {
        match self {
            Declared::Every { interval_ms } => (Some(*interval_ms), None, None),
            Declared::Schedule { expr, tz } => (None, Some(expr), tz.as_deref()),
        }
    }
}

/// The fewest attempts a cadence is learned from.
pub const MIN_ATTEMPTS: usize = 5;
/// How many of the latest attempts (ticks) a cadence is learned from.
pub const LEARN_FROM: usize = 20;
/// How many passes that ran a job needs before its p95 says it is stuck.
pub const MIN_PASSES_FOR_P95: usize = 10;
/// A pass held longer than this many times the job's p95 is stuck.
pub const P95_FACTOR: i64 = 3;

/// One attempt: when the scheduler fired the pass (its wrapper started),
/// and on which host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt<'a> {
    pub at_ms: i64,
    pub host: &'a str,
}

/// Attempts this close to the first of a tick are that tick, whatever the
/// job's gap: hosts firing on the same second, or an operator trying a job
/// by hand a few times, are not a cadence.
pub const SAME_TICK_MS: i64 = 1_000;

/// The ticks among `attempts` (any order): attempts closer to the first of
/// a tick than a tenth of the job's gap (or than `SAME_TICK_MS`) are that
/// tick fired on another host, counted once. The gap is found without knowing the ticks: the
/// largest gap whose tenth at least one gap in `h` reaches, on `h` hosts
/// (at most `h` attempts share a tick, so at least one gap in `h` is a gap
/// between ticks). Ticks come back oldest first.
pub fn ticks(attempts: &[Attempt<'_>]) -> Vec<i64> {
    let mut at: Vec<i64> = attempts.iter().map(|a| a.at_ms).collect();
    at.sort_unstable();
    let mut hosts: Vec<&str> = attempts.iter().map(|a| a.host).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let hosts = hosts.len().max(1);
    let gaps: Vec<i64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let needed = (gaps.len() / hosts).max(1);
    // The longest gap that at least `needed` gaps reach a tenth of.
    let mut sorted = gaps;
    sorted.sort_unstable();
    let gap = sorted
        .iter()
        .copied()
        .filter(|&g| sorted.len() - sorted.partition_point(|&o| o * 10 < g) >= needed)
        .max()
        .unwrap_or(0);
    let mut out: Vec<i64> = Vec::new();
    for t in at {
        match out.last() {
            Some(&first) if (t - first) * 10 < gap || t - first < SAME_TICK_MS => {}
            _ => out.push(t),
        }
    }
    out
}

/// Why a job has no lateness verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "why")]
pub enum NoBasis {
    /// Nothing declared, and too few attempts to learn from.
    TooFewAttempts { attempts: usize, needs: usize },
    /// A declared schedule that never fires again.
    ScheduleNeverFires,
    /// A declared schedule this host cannot read (its zone is not in the
    /// system's zoneinfo here).
    BadSchedule { reason: String },
}

impl std::fmt::Display for NoBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoBasis::TooFewAttempts { attempts, needs } => write!(
                f,
                "no lateness verdict: {attempts} attempt(s) recorded, a cadence is learned from \
                 {needs} (or declare one: run --every or --schedule)"
            ),
            NoBasis::ScheduleNeverFires => {
                write!(f, "no lateness verdict: the schedule never fires again")
            }
            NoBasis::BadSchedule { reason } => write!(f, "no lateness verdict: {reason}"),
        }
    }
}

/// Where the expected time of the next attempt comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Basis {
    /// `--every D` (on `run`, or `check`'s flag).
    Every { interval_ms: i64, by_check: bool },
    /// `--schedule 'CRON'` in a time zone (the host's when none).
    Schedule {
        expr: String,
        tz: Option<String>,
        by_check: bool,
    },
    /// Learned from the job's own history: the largest gap among its
    /// latest ticks, and their median gap (the grace is half of it).
    Learned {
        gap_ms: i64,
        median_ms: i64,
        ticks: usize,
    },
}

/// A learned cadence from the ticks (oldest first), or why there is none.
pub fn learn(ticks: &[i64]) -> Result<Basis, NoBasis> {
    if ticks.len() < MIN_ATTEMPTS {
        return Err(NoBasis::TooFewAttempts {
            attempts: ticks.len(),
            needs: MIN_ATTEMPTS,
        });
    }
    let recent = &ticks[ticks.len().saturating_sub(LEARN_FROM)..];
    let mut gaps: Vec<i64> = recent.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    Ok(Basis::Learned {
        gap_ms: gaps.last().copied().unwrap_or(0),
        median_ms: gaps[gaps.len() / 2],
        ticks: recent.len(),
    })
}

/// When the next attempt is due, and how much lateness is tolerated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub basis: Basis,
    /// The last attempt (store clock, Unix ms).
    pub last_ms: i64,
    /// When the next attempt was due.
    pub due_ms: i64,
    /// The interval after it (the next due time after `due_ms`, less it).
    pub interval_ms: i64,
    pub grace_ms: i64,
}

impl Expectation {
    /// From a basis: `due` is, for a schedule, its next two firings after
    /// the last attempt (the command reads the zone); `grace` overrides
    /// the default (half the interval; half the median gap when learned).
    pub fn new(
        basis: Basis,
        last_ms: i64,
        fires: Option<(i64, i64)>,
        grace_ms: Option<i64>,
    ) -> Option<Expectation> {
        let (due_ms, interval_ms, default_grace) = match &basis {
            Basis::Every { interval_ms, .. } => {
                (last_ms + interval_ms, *interval_ms, interval_ms / 2)
            }
            Basis::Learned {
                gap_ms, median_ms, ..
            } => (last_ms + gap_ms, *median_ms, median_ms / 2),
            Basis::Schedule { .. } => {
                let (due, after) = fires?;
                (due, after - due, (after - due) / 2)
            }
        };
        Some(Expectation {
            basis,
            last_ms,
            due_ms,
            interval_ms,
            grace_ms: grace_ms.unwrap_or(default_grace),
        })
    }
}

/// A lateness threshold: a duration past the due time, or a multiple of
/// the interval (`1.5x`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Ms(i64),
    Intervals(f64),
}

impl Threshold {
    fn ms(self, interval_ms: i64) -> i64 {
        match self {
            Threshold::Ms(ms) => ms,
            Threshold::Intervals(x) => (x * interval_ms as f64) as i64,
        }
    }
}

/// How late a job is: how far past its due time, and how bad.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Late {
    pub overdue_ms: i64,
    pub severity: Severity,
}

/// Whether the job is late at `now_ms`: WARNING once past its due time by
/// more than `warn` (default: the grace), CRITICAL by more than `crit`
/// (default: the grace and one further interval).
pub fn lateness(
    e: &Expectation,
    now_ms: i64,
    warn: Option<Threshold>,
    crit: Option<Threshold>,
) -> Option<Late> {
    let overdue_ms = now_ms - e.due_ms;
    let warn = warn.map_or(e.grace_ms, |t| t.ms(e.interval_ms));
    let crit = crit.map_or(e.grace_ms + e.interval_ms, |t| t.ms(e.interval_ms));
    let severity = if overdue_ms > crit {
        Severity::Critical
    } else if overdue_ms > warn {
        Severity::Warning
    } else {
        return None;
    };
    Some(Late {
        overdue_ms,
        severity,
    })
}

/// Sentry's anti-flap rule over the passes that took a slot, oldest first
/// (`true`: it ended badly): failing once `failures` in a row ended badly,
/// and again ok only after `recover` in a row ended well. The passes in a
/// row that ended badly when failing.
pub fn failing(bad: &[bool], failures: u32, recover: u32) -> Option<usize> {
    let (failures, recover) = (failures.max(1) as usize, recover.max(1) as usize);
    let (mut state, mut bad_run, mut good_run) = (false, 0usize, 0usize);
    for &b in bad {
        if b {
            bad_run += 1;
            good_run = 0;
        } else {
            good_run += 1;
            bad_run = 0;
        }
        if !state && bad_run >= failures {
            state = true;
        } else if state && good_run >= recover {
            state = false;
        }
    }
    state.then_some(bad_run)
}

/// Why a running pass is stuck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stuck {
    /// Held longer than `--max-running`.
    Limit { held_ms: i64, limit_ms: i64 },
    /// Held longer than `P95_FACTOR` times the job's p95.
    P95 { held_ms: i64, p95_ms: i64 },
    /// No `jobrun touch` for longer than its `--max-idle`.
    Idle { idle_ms: i64, max_idle_ms: i64 },
}

/// Whether a pass held `held_ms`, idle `idle` (ms since its last touch or
/// start, and its `--max-idle`), is stuck: past `--max-running`, past its
/// idle limit, or past 3x the p95 of `durations` once there are enough.
pub fn stuck(
    held_ms: i64,
    idle: Option<(i64, i64)>,
    max_running_ms: Option<i64>,
    durations: &[i64],
) -> Option<Stuck> {
    if let Some((idle_ms, max_idle_ms)) = idle {
        if idle_ms > max_idle_ms {
            return Some(Stuck::Idle {
                idle_ms,
                max_idle_ms,
            });
        }
    }
    if let Some(limit_ms) = max_running_ms {
        return (held_ms > limit_ms).then_some(Stuck::Limit { held_ms, limit_ms });
    }
    if durations.len() < MIN_PASSES_FOR_P95 {
        return None;
    }
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let p95_ms = sorted[(95 * sorted.len()).div_ceil(100).max(1) - 1];
    (held_ms > P95_FACTOR * p95_ms.max(1)).then_some(Stuck::P95 { held_ms, p95_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_within_a_second_are_one_tick() {
        let by_hand: Vec<Attempt> = (0..5)
            .map(|i| Attempt {
                at_ms: 1_000_000 + i * 200,
                host: "h",
            })
            .collect();
        assert_eq!(ticks(&by_hand), [1_000_000]);
    }

    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;

    fn on(host: &str, at_ms: i64) -> Attempt<'_> {
        Attempt { at_ms, host }
    }

    #[test]
    fn three_hosts_firing_one_tick_count_once() {
        let mut a = vec![];
        for i in 0..10 {
            let t = i * 5 * MIN;
            a.push(on("web1", t));
            a.push(on("web2", t + 700));
            a.push(on("web3", t + 1_900));
        }
        let t = ticks(&a);
        assert_eq!(t.len(), 10, "{t:?}");
        let Ok(Basis::Learned { gap_ms, .. }) = learn(&t) else {
            panic!()
        };
        // The tick, not the gap between hosts.
        assert!((5 * MIN - 1_900..=5 * MIN + 1_900).contains(&gap_ms));
    }

    #[test]
    fn an_outage_does_not_merge_a_regular_jobs_ticks() {
        let mut a: Vec<Attempt> = (0..20).map(|i| on("h", i * MIN)).collect();
        a.push(on("h", 20 * MIN + DAY));
        assert_eq!(ticks(&a).len(), 21);
    }

    #[test]
    fn a_weekday_job_is_not_late_over_a_weekend_but_a_regular_one_is_caught() {
        // Daily at 09:00, Monday to Friday, for four weeks (day 0 a Monday).
        let starts: Vec<i64> = (0..28)
            .filter(|d| d % 7 < 5)
            .map(|d| d * DAY + 9 * HOUR)
            .collect();
        let basis = learn(&starts).unwrap();
        let last = *starts.last().unwrap(); // Friday of week 4
        let e = Expectation::new(basis, last, None, None).unwrap();
        for now in [last + DAY, last + 2 * DAY, last + 3 * DAY - MIN] {
            assert_eq!(lateness(&e, now, None, None), None, "{now}");
        }
        // Every five minutes: caught within two intervals.
        let starts: Vec<i64> = (0..20).map(|i| i * 5 * MIN).collect();
        let last = *starts.last().unwrap();
        let e = Expectation::new(learn(&starts).unwrap(), last, None, None).unwrap();
        assert_eq!(lateness(&e, last + 7 * MIN, None, None), None);
        let late = lateness(&e, last + 8 * MIN, None, None).unwrap();
        assert_eq!(late.severity, Severity::Warning);
        let late = lateness(&e, last + 13 * MIN, None, None).unwrap();
        assert_eq!(late.severity, Severity::Critical);
    }

    #[test]
    fn too_few_attempts_learn_nothing() {
        assert_eq!(
            learn(&[0, 1, 2, 3]),
            Err(NoBasis::TooFewAttempts {
                attempts: 4,
                needs: 5
            })
        );
    }

    #[test]
    fn lateness_by_a_declared_interval_and_thresholds() {
        let basis = Basis::Every {
            interval_ms: 10 * MIN,
            by_check: false,
        };
        let e = Expectation::new(basis, 0, None, None).unwrap();
        assert_eq!((e.due_ms, e.grace_ms), (10 * MIN, 5 * MIN));
        let sev = |now, w, c| lateness(&e, now, w, c).map(|l| l.severity);
        assert_eq!(sev(15 * MIN, None, None), None);
        assert_eq!(sev(15 * MIN + 1, None, None), Some(Severity::Warning));
        assert_eq!(sev(25 * MIN + 1, None, None), Some(Severity::Critical));
        let w = Some(Threshold::Ms(MIN));
        let c = Some(Threshold::Intervals(0.5));
        assert_eq!(sev(11 * MIN + 1, w, c), Some(Severity::Warning));
        assert_eq!(sev(15 * MIN + 1, w, c), Some(Severity::Critical));
        // A schedule: due at its next firing after the last attempt.
        let basis = Basis::Schedule {
            expr: "0 9 * * *".into(),
            tz: None,
            by_check: false,
        };
        let e = Expectation::new(basis, 0, Some((HOUR, DAY + HOUR)), None).unwrap();
        assert_eq!((e.due_ms, e.interval_ms, e.grace_ms), (HOUR, DAY, DAY / 2));
    }

    #[test]
    fn failing_after_n_recovers_after_m() {
        let f = |s: &str, n, m| failing(&s.chars().map(|c| c == 'x').collect::<Vec<_>>(), n, m);
        assert_eq!(f("oox", 1, 1), Some(1));
        assert_eq!(f("oox", 2, 1), None);
        assert_eq!(f("oxx", 2, 1), Some(2));
        assert_eq!(f("xxo", 2, 1), None);
        // Sentry's anti-flap: one good pass is not yet a recovery.
        assert_eq!(f("xxo", 2, 2), Some(0));
        assert_eq!(f("xxoo", 2, 2), None);
        assert_eq!(f("xxoxoo", 2, 2), None);
        assert_eq!(f("", 1, 1), None);
    }

    #[test]
    fn stuck_by_limit_by_p95_by_idleness() {
        let ten: Vec<i64> = (1..=10).map(|i| i * 1000).collect();
        assert_eq!(stuck(31_000, None, None, &ten[..9]), None, "too few");
        assert_eq!(
            stuck(30_001, None, None, &ten),
            Some(Stuck::P95 {
                held_ms: 30_001,
                p95_ms: 10_000
            })
        );
        assert_eq!(stuck(30_000, None, None, &ten), None);
        // A limit given replaces the p95 rule.
        assert_eq!(stuck(40_000, None, Some(50_000), &ten), None);
        assert!(matches!(
            stuck(50_001, None, Some(50_000), &[]),
            Some(Stuck::Limit { .. })
        ));
        assert!(matches!(
            stuck(1_000, Some((2_001, 2_000)), None, &[]),
            Some(Stuck::Idle { .. })
        ));
        assert_eq!(stuck(1_000, Some((2_000, 2_000)), None, &[]), None);
    }
}
