//! `jobrun check`: a monitoring plugin by the monitoring-plugins
//! conventions. The first line is the summary with perfdata, then one line
//! per job that is not OK, worst first; the exit code is the worst verdict
//! (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN). Anything that keeps it from
//! judging (bad usage, an unknown NAME, a missing or unreadable store) is
//! UNKNOWN, never jobrun's usual 125: a monitoring system reads 125 as
//! "unknown plugin state" anyway, and pages on the wrong line.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::cli::CheckArgs;
use crate::cmd::closest;
use crate::cmd::watch::{gather, judge_on, lateness_words, Limits, VERDICTS};
use crate::model::{self, CheckReport, JobCheck};
use crate::policy::watch::Severity;
use crate::report::escape;
use crate::settings::{stored_job_names, StoreChoice};
use crate::store::StoreError;

/// The first line of an answer that could not judge: `JOBRUN UNKNOWN -
/// why`, and the exit code.
pub fn unknown(why: &str) -> i32 {
    println!("JOBRUN UNKNOWN - {}", why.replace('|', "/"));
    Severity::Unknown.code()
}

pub fn run(choice: &StoreChoice, a: CheckArgs) -> i32 {
    match answer(choice, &a) {
        Ok(code) => code,
        Err(e) => unknown(&format!("{e:#}")),
    }
}

/// The summary line: the worst status, the verdicts counted, perfdata.
fn summary(status: Severity, counts: &BTreeMap<String, usize>) -> String {
    let words: Vec<String> = VERDICTS
        .iter()
        .filter_map(|v| {
            let n = counts.get(*v).copied().unwrap_or(0);
            (n > 0).then(|| format!("{n} {}", v.replace('_', " ")))
        })
        .collect();
    let jobs = counts.get("jobs").copied().unwrap_or(0);
    let text = if words.is_empty() {
        format!("{jobs} job(s) checked")
    } else {
        words.join(", ")
    };
    let perf: Vec<String> = VERDICTS
        .iter()
        .chain(std::iter::once(&"jobs"))
        .map(|v| format!("'{v}'={};;;0", counts.get(*v).copied().unwrap_or(0)))
        .collect();
    format!("JOBRUN {} - {text} | {}", status.word(), perf.join(" "))
}

fn answer(choice: &StoreChoice, a: &CheckArgs) -> Result<i32> {
    let names = stored_job_names(&a.names)?;
    let limits = Limits::of(a)?;
    let spec = &choice.spec;
    let mut store = match spec.open_existing() {
        Ok(s) => s,
        Err(StoreError::Missing(at)) => {
            return Ok(unknown(&format!(
                "no store at {at}: nothing has run with it (pass --db or JOBRUN_DB to name the \
                 store the passes use)"
            )))
        }
        Err(e) => return Ok(unknown(&e.to_string())),
    };
    if !names.is_empty() {
        let known: Vec<String> = store.jobs(&[])?.into_iter().map(|j| j.name).collect();
        if let Some(n) = names.iter().find(|n| !known.contains(n)) {
            let meant = closest(n, &known)
                .map(|k| format!("; did you mean `{}`?", escape(k)))
                .unwrap_or_default();
            return Ok(unknown(&format!(
                "{}: store {} does not know this job{meant}",
                escape(n),
                spec.display()
            )));
        }
    }
    let watched = gather(store.as_mut(), spec, &names)?;
    let mut jobs: Vec<(JobCheck, i64, Option<i64>)> = watched
        .iter()
        .map(|w| {
            let expected = w.expectation(&limits);
            let last = expected.as_ref().ok().map(|e| e.last_ms);
            (judge_on(w, &limits, expected), w.now_ms, last)
        })
        .collect();
    jobs.sort_by(|a, b| b.0.status.cmp(&a.0.status).then(a.0.name.cmp(&b.0.name)));
    let mut counts: BTreeMap<String, usize> = VERDICTS.iter().map(|v| (v.to_string(), 0)).collect();
    counts.insert("jobs".into(), jobs.len());
    for (j, ..) in &jobs {
        let mut seen: Vec<&str> = j.findings.iter().map(|f| f.verdict.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        for v in seen {
            *counts.entry(v.to_string()).or_default() += 1;
        }
    }
    let status = jobs
        .iter()
        .map(|(j, ..)| j.status)
        .max()
        .unwrap_or(Severity::Ok);
    let line = summary(status, &counts);
    if a.json {
        let report = CheckReport {
            store: spec.display(),
            status,
            code: status.code(),
            summary: line,
            counts,
            jobs: jobs.into_iter().map(|(j, ..)| j).collect(),
        };
        println!("{}", model::to_json(&report)?);
        return Ok(status.code());
    }
    println!("{line}");
    for (j, now, last) in &jobs {
        if !j.findings.is_empty() {
            let reasons: Vec<&str> = j.findings.iter().map(|f| f.reason.as_str()).collect();
            println!("{}: {}", escape(&j.name), reasons.join("; "));
        }
        if a.verbose {
            println!(
                "{}: {}: {}",
                escape(&j.name),
                if j.findings.is_empty() {
                    "OK"
                } else {
                    "lateness"
                },
                lateness_words(&j.lateness, *now, *last)
            );
        }
    }
    Ok(status.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_codes_are_the_exit_table() {
        use crate::exit;
        assert_eq!(Severity::Ok.code(), exit::OK);
        assert_eq!(Severity::Warning.code(), exit::INCOMPLETE);
        assert_eq!(Severity::Critical.code(), exit::CHECK_CRITICAL);
        assert_eq!(Severity::Unknown.code(), exit::CHECK_UNKNOWN);
    }

    #[test]
    fn the_summary_counts_the_verdicts_with_perfdata() {
        let mut counts: BTreeMap<String, usize> =
            VERDICTS.iter().map(|v| (v.to_string(), 0)).collect();
        counts.insert("jobs".into(), 3);
        assert_eq!(
            summary(Severity::Ok, &counts),
            "JOBRUN OK - 3 job(s) checked | 'late'=0;;;0 'failing'=0;;;0 'stuck'=0;;;0 \
             'dead_holder'=0;;;0 'long_queue'=0;;;0 'old_pause'=0;;;0 'jobs'=3;;;0"
        );
        counts.insert("late".into(), 1);
        counts.insert("failing".into(), 1);
        let line = summary(Severity::Critical, &counts);
        assert!(
            line.starts_with("JOBRUN CRITICAL - 1 late, 1 failing | 'late'=1;;;0 'failing'=1;;;0"),
            "{line}"
        );
    }
}
