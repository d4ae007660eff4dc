//! What `check` and `metrics` both read and conclude: every job asked for,
//! with its holders judged (through `judge_lease`, the one judge), its
//! queue, the pauses on it and its latest passes, and the verdicts
//! `policy::watch` gives on them, each with its reason in words.

use anyhow::Result;

use crate::cli::CheckArgs;
use crate::cmd::{evidence, judged};
use crate::evidence::Verdict;
use crate::model::{Finding, JobCheck, LatenessBasis};
use crate::policy::lease::{LeaseRow, WaiterRow};
use crate::policy::outcome::{Outcome, Seen, RECENT};
use crate::policy::pause::{self, Pause};
use crate::policy::watch::{
    self, Attempt, Basis, Declared, Expectation, NoBasis, Severity, Stuck, Threshold,
};
use crate::policy::Liveness;
use crate::report::{age_ms, escape, human_ms, utc_ms};
use crate::schedule::Schedule;
use crate::settings::{self, millis_of};
use crate::store::{JobRow, Store, StoreSpec};

/// The verdicts, as `check` counts them and perfdata names them, in the
/// order the summary lists them.
pub const VERDICTS: [&str; 6] = [
    "late",
    "failing",
    "stuck",
    "dead_holder",
    "long_queue",
    "old_pause",
];

/// `check`'s thresholds; those left unset are the job's own, or not
/// checked.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `--every` or `--schedule`: overrides what the job declared.
    pub declared: Option<Declared>,
    pub grace_ms: Option<i64>,
    pub warn: Option<Threshold>,
    pub crit: Option<Threshold>,
    pub failures: u32,
    pub recover: u32,
    pub max_running_ms: Option<i64>,
    pub max_wait_ms: Option<i64>,
    pub max_paused_ms: Option<i64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            declared: None,
            grace_ms: None,
            warn: None,
            crit: None,
            failures: 1,
            recover: 1,
            max_running_ms: None,
            max_wait_ms: None,
            max_paused_ms: None,
        }
    }
}

fn ms_of(flag: &str, v: &Option<String>) -> Result<Option<i64>> {
    v.as_deref()
        .map(|v| settings::duration(flag, v).map(millis_of))
        .transpose()
}

/// A lateness threshold as typed: a duration (`10m`) or a multiple of the
/// interval (`1.5x`).
fn threshold(flag: &str, v: &Option<String>) -> Result<Option<Threshold>> {
    let Some(v) = v.as_deref().map(str::trim) else {
        return Ok(None);
    };
    if let Some(n) = v.strip_suffix(['x', 'X']) {
        return match n.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(Threshold::Intervals(x))),
            _ => anyhow::bail!(
                "{flag} {v}: a multiple of the interval is a number and x, like 1.5x; or give a \
                 duration like 10m"
            ),
        };
    }
    Ok(Some(Threshold::Ms(millis_of(settings::duration(flag, v)?))))
}

impl Limits {
    pub fn of(a: &CheckArgs) -> Result<Limits> {
        Ok(Limits {
            declared: match (&a.every, &a.schedule) {
                (Some(v), _) => Some(Declared::Every {
                    interval_ms: millis_of(settings::every_interval("--every", v)?),
                }),
                (None, Some(expr)) => {
                    Some(settings::schedule("--schedule", expr, a.tz.as_deref())?)
                }
                (None, None) => None,
            },
            grace_ms: ms_of("--grace", &a.grace)?,
            warn: threshold("--warning", &a.warning)?,
            crit: threshold("--critical", &a.critical)?,
            failures: a.failures,
            recover: a.recover,
            max_running_ms: ms_of("--max-running", &a.max_running)?,
            max_wait_ms: ms_of("--max-wait", &a.max_wait)?,
            max_paused_ms: ms_of("--max-paused", &a.max_paused)?,
        })
    }
}

/// What the store recorded about one job, its holders judged.
pub struct Watched {
    pub job: JobRow,
    /// The store's clock when it was read.
    pub now_ms: i64,
    pub leases: Vec<(LeaseRow, Verdict)>,
    /// Its queue, in arrival order.
    pub waiters: Vec<WaiterRow>,
    /// The pauses standing on it.
    pub pauses: Vec<Pause>,
    /// Its latest passes, newest recorded first.
    pub recent: Vec<Seen>,
}

/// Read the named jobs (all when empty) and judge their holders, outside
/// any store transaction.
pub fn gather(store: &mut dyn Store, spec: &StoreSpec, names: &[String]) -> Result<Vec<Watched>> {
    let jobs = store.jobs(names)?;
    let known: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    let leases = judged(store.leases(names)?, &evidence(spec));
    let waiters = store.waiters(names)?;
    let pauses = store.pauses()?;
    let (now_ms, recent) = store.recent(&known, RECENT)?;
    Ok(jobs
        .into_iter()
        .zip(recent)
        .map(|(job, recent)| Watched {
            now_ms,
            leases: leases
                .iter()
                .filter(|(l, _)| l.job == job.name)
                .cloned()
                .collect(),
            waiters: waiters
                .iter()
                .filter(|w| w.job == job.name)
                .cloned()
                .collect(),
            pauses: pause::standing(&pauses, &job.name)
                .into_iter()
                .cloned()
                .collect(),
            recent,
            job,
        })
        .collect())
}

/// When the scheduler fired a recorded pass (`PassRecord::attempted_ms`),
/// and where.
fn attempt_of(p: &Seen) -> Attempt<'_> {
    Attempt {
        at_ms: p.attempted_ms,
        host: &p.host,
    }
}

impl Watched {
    /// Every attempt: recorded passes, skips included, and the passes that
    /// hold or wait now.
    fn attempts(&self) -> Vec<Attempt<'_>> {
        let mut out: Vec<Attempt> = self.recent.iter().map(attempt_of).collect();
        out.extend(self.leases.iter().map(|(l, _)| Attempt {
            at_ms: l.acquired_at_ms,
            host: &l.holder.host,
        }));
        out.extend(self.waiters.iter().map(|w| Attempt {
            at_ms: w.arrived_at_ms,
            host: &w.holder.host,
        }));
        out
    }

    /// The passes that tell whether the job works, oldest first: those
    /// that took a slot and ended ok or badly (an operator's stop tells
    /// neither).
    fn took_slot(&self) -> Vec<&Seen> {
        let mut v: Vec<&Seen> = self
            .recent
            .iter()
            .filter(|p| p.took_slot() && (p.outcome == Outcome::Ok || p.ended_badly()))
            .collect();
        v.reverse();
        v
    }

    /// When the expected start is, on what basis, or why none.
    pub fn expectation(&self, limits: &Limits) -> std::result::Result<Expectation, NoBasis> {
        let ticks = watch::ticks(&self.attempts());
        let basis = match (&limits.declared, &self.job.declared) {
            (Some(d), _) => basis_of(d, true),
            (None, Some(d)) => basis_of(d, false),
            (None, None) => watch::learn(&ticks)?,
        };
        let Some(&last) = ticks.last() else {
            return Err(NoBasis::TooFewAttempts {
                attempts: 0,
                needs: 1,
            });
        };
        let fires = match &basis {
            Basis::Schedule { expr, tz, .. } => {
                let s = Schedule::parse(expr, tz.as_deref())
                    .map_err(|reason| NoBasis::BadSchedule { reason })?;
                // An attempt a little before its firing (a host's clock
                // ahead of the store's) belongs to that firing.
                let (first, second) = s.fires_after(last).ok_or(NoBasis::ScheduleNeverFires)?;
                if (first - last) * 10 < second - first {
                    s.fires_after(first)
                } else {
                    Some((first, second))
                }
            }
            _ => None,
        };
        Expectation::new(basis, last, fires, limits.grace_ms).ok_or(NoBasis::ScheduleNeverFires)
    }
}

/// A declared cadence as a lateness basis.
fn basis_of(d: &Declared, by_check: bool) -> Basis {
    match d {
        Declared::Every { interval_ms } => Basis::Every {
            interval_ms: *interval_ms,
            by_check,
        },
        Declared::Schedule { expr, tz } => Basis::Schedule {
            expr: expr.clone(),
            tz: tz.clone(),
            by_check,
        },
    }
}

/// A basis in words: `every 5m (declared on run)`.
fn basis_words(b: &Basis) -> String {
    match b {
        Basis::Every {
            interval_ms,
            by_check,
        } => format!(
            "runs every {} ({})",
            human_ms(*interval_ms),
            if *by_check {
                "check --every"
            } else {
                "declared on run"
            }
        ),
        Basis::Schedule { expr, tz, by_check } => format!(
            "runs on '{}'{} ({})",
            escape(expr),
            tz.as_deref()
                .map(|t| format!(" in {}", escape(t)))
                .unwrap_or_default(),
            if *by_check {
                "check --schedule"
            } else {
                "declared on run"
            }
        ),
        Basis::Learned {
            gap_ms,
            median_ms,
            ticks,
        } => {
            if *gap_ms <= median_ms + median_ms / 10 {
                format!(
                    "runs every {} (learned from {ticks} starts)",
                    human_ms(*median_ms)
                )
            } else {
                format!(
                    "runs every {}, gaps up to {} (learned from {ticks} starts)",
                    human_ms(*median_ms),
                    human_ms(*gap_ms)
                )
            }
        }
    }
}

fn finding(verdict: &str, severity: Severity, reason: String) -> Finding {
    Finding {
        verdict: verdict.into(),
        severity,
        reason,
    }
}

fn ended_words(p: &Seen, now_ms: i64) -> String {
    let how = match (p.exit_code, p.signal) {
        (_, Some(sig)) => format!(", signal {sig}"),
        (Some(code), None) if p.outcome == Outcome::Failed => format!(", exit {code}"),
        _ => String::new(),
    };
    format!(
        "{}{how}, {} ago",
        p.outcome.as_str(),
        age_ms(now_ms - p.ended_at_ms)
    )
}

/// Judge one job: its verdicts with their reasons, and its lateness basis.
pub fn judge(w: &Watched, limits: &Limits) -> JobCheck {
    judge_on(w, limits, w.expectation(limits))
}

/// `judge`, given the job's `Watched::expectation` under `limits`.
pub fn judge_on(
    w: &Watched,
    limits: &Limits,
    expected: std::result::Result<Expectation, NoBasis>,
) -> JobCheck {
    let now = w.now_ms;
    let mut findings = Vec::new();
    if let Ok(e) = &expected {
        if let Some(late) = watch::lateness(e, now, limits.warn, limits.crit) {
            findings.push(finding(
                "late",
                late.severity,
                format!(
                    "late: last started {} ago, {}, grace {}",
                    age_ms(now - e.last_ms),
                    basis_words(&e.basis),
                    human_ms(e.grace_ms)
                ),
            ));
        }
    }
    let took = w.took_slot();
    let bad: Vec<bool> = took.iter().map(|p| p.ended_badly()).collect();
    if let Some(run) = watch::failing(&bad, limits.failures, limits.recover) {
        let latest = took.last().map(|p| ended_words(p, now)).unwrap_or_default();
        let reason = if run > 0 {
            format!("failing: the last {run} pass(es) that ran ended badly (latest: {latest})")
        } else {
            let good = bad.iter().rev().take_while(|b| !**b).count();
            format!(
                "failing: {good} of the {} ok pass(es) in a row it needs to recover (latest: \
                 {latest})",
                limits.recover
            )
        };
        findings.push(finding("failing", Severity::Critical, reason));
    }
    let durations: Vec<i64> = w
        .recent
        .iter()
        .filter(|p| p.ran())
        .map(|p| p.duration_ms)
        .collect();
    for (l, v) in &w.leases {
        let who = format!(
            "pass {} on {}:{}",
            escape(&l.pass_id),
            escape(&l.holder.host),
            l.holder.wrapper.pid
        );
        if v.liveness == Liveness::Dead {
            findings.push(finding(
                "dead_holder",
                Severity::Warning,
                format!(
                    "dead holder not yet freed: {who}, {}; the next pass or clear-locks frees it",
                    escape(&v.to_string())
                ),
            ));
            continue;
        }
        let reason = match watch::stuck(l.held_ms, l.idle, limits.max_running_ms, &durations) {
            Some(Stuck::Limit { held_ms, limit_ms }) => format!(
                "stuck: {who} has held {}, past --max-running {}",
                human_ms(held_ms),
                human_ms(limit_ms)
            ),
            Some(Stuck::P95 { held_ms, p95_ms }) => format!(
                "stuck: {who} has held {}, over {}x its p95 of {} (from {} passes)",
                human_ms(held_ms),
                watch::P95_FACTOR,
                human_ms(p95_ms),
                durations.len()
            ),
            Some(Stuck::Idle {
                idle_ms,
                max_idle_ms,
            }) => format!(
                "stuck: {who} made no progress (jobrun touch) for {}, past its --max-idle {}",
                human_ms(idle_ms),
                human_ms(max_idle_ms)
            ),
            None => continue,
        };
        findings.push(finding("stuck", Severity::Warning, reason));
    }
    if let (Some(limit), Some(head)) = (limits.max_wait_ms, w.waiters.first()) {
        if head.waited_ms > limit {
            findings.push(finding(
                "long_queue",
                Severity::Warning,
                format!(
                    "long queue: its first waiter has waited {}, past --max-wait {} ({} queued)",
                    human_ms(head.waited_ms),
                    human_ms(limit),
                    w.waiters.len()
                ),
            ));
        }
    }
    if let Some(limit) = limits.max_paused_ms {
        if let Some(p) = w.pauses.iter().min_by_key(|p| p.since_ms) {
            let paused = now - p.since_ms;
            if paused > limit {
                let owner = p
                    .owner
                    .as_deref()
                    .map(|o| format!(" by {}", escape(o)))
                    .unwrap_or_default();
                let reason = p
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({})", escape(r)))
                    .unwrap_or_default();
                findings.push(finding(
                    "old_pause",
                    Severity::Warning,
                    format!(
                        "old pause: paused{owner} {} ago{reason}, past --max-paused {}",
                        age_ms(paused),
                        human_ms(limit)
                    ),
                ));
            }
        }
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let status = findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Ok);
    let lateness = match expected {
        Ok(e) => LatenessBasis {
            last_attempt: Some(utc_ms(e.last_ms)),
            due: Some(utc_ms(e.due_ms)),
            interval_ms: Some(e.interval_ms),
            grace_ms: Some(e.grace_ms),
            basis: Some(e.basis),
            no_verdict: None,
        },
        Err(why) => LatenessBasis {
            basis: None,
            no_verdict: Some(why.to_string()),
            last_attempt: None,
            due: None,
            interval_ms: None,
            grace_ms: None,
        },
    };
    JobCheck {
        name: w.job.name.clone(),
        status,
        findings,
        lateness,
    }
}

/// A job's lateness basis in words, for `check -v`.
pub fn lateness_words(l: &LatenessBasis, now_ms: i64, last_ms: Option<i64>) -> String {
    match (&l.basis, &l.no_verdict) {
        (Some(b), _) => format!(
            "{}, grace {}, last started {} ago",
            basis_words(b),
            human_ms(l.grace_ms.unwrap_or(0)),
            age_ms(now_ms - last_ms.unwrap_or(now_ms))
        ),
        (None, Some(why)) => why.clone(),
        (None, None) => "no lateness verdict".into(),
    }
}
