//! `jobrun history`: recorded passes, newest start first (`--reverse`:
//! oldest first; `--since`, `--outcome` filter), and a duration summary
//! per job (count, mean, p50, p95, max, outcomes) so an operator can choose
//! a max hold from measured pass lengths rather than a guess.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::cli::HistoryArgs;
use crate::cmd::{all_known, open_to_read};
use crate::exit;
use crate::model::{self, HistoryReport, Summary};
use crate::policy::outcome::{Outcome, PassRecord};
use crate::policy::stats::Stats;
use crate::report::{escape, human_ms, utc_ms};
use crate::settings::StoreChoice;
use crate::settings::{self, stored_job_name};
use crate::store::HistoryQuery;

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[i64], p: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

pub fn summarise(job: &str, passes: &[PassRecord]) -> Summary {
    let mut durations: Vec<i64> = passes
        .iter()
        .filter(|p| p.ran())
        .map(|p| p.duration_ms)
        .collect();
    durations.sort_unstable();
    let mut outcomes = BTreeMap::new();
    for p in passes {
        *outcomes.entry(p.outcome.as_str().to_string()).or_insert(0) += 1;
    }
    let count = durations.len();
    Summary {
        job: job.to_string(),
        count,
        mean_ms: if count > 0 {
            durations.iter().sum::<i64>() / count as i64
        } else {
            0
        },
        p50_ms: percentile(&durations, 50),
        p95_ms: percentile(&durations, 95),
        max_ms: durations.last().copied().unwrap_or(0),
        outcomes,
    }
}

/// The summary of a job from its figures (every pass counted; quantiles
/// from the sketch, within 1%) and its counters.
fn summary_of(job: String, s: &Stats, outcomes: BTreeMap<String, usize>) -> Summary {
    Summary {
        job,
        count: s.ran.max(0) as usize,
        mean_ms: s.mean_ms(),
        p50_ms: s.percentile_ms(50),
        p95_ms: s.percentile_ms(95),
        max_ms: s.max_ms,
        outcomes,
    }
}

/// `history --show PASS`: the output kept for the pass, escaped (the
/// store is input), newlines and tabs kept.
fn show(choice: &StoreChoice, pass: &str) -> Result<i32> {
    if !crate::files::valid_pass_id(pass) {
        anyhow::bail!(
            "--show {}: not a pass id (12 hex digits, as the PASS column of history shows)",
            escape(pass)
        );
    }
    let kept = match open_to_read(choice)? {
        Some(mut store) => store.kept_output(pass)?,
        None => None,
    };
    let Some(kept) = kept else {
        crate::say!(
            error,
            "no output kept for pass {pass}: only a pass that ended badly under --output \
             quiet-unless-failed keeps its output (--keep-output), until its history row is \
             pruned or its job forgotten"
        );
        return Ok(exit::INCOMPLETE);
    };
    use std::io::Write;
    let text = crate::report::escape_lines(&kept.output);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.is_empty() && !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(exit::OK)
}

pub fn run(choice: &StoreChoice, a: HistoryArgs) -> Result<i32> {
    if let Some(pass) = &a.show {
        return show(choice, pass);
    }
    let spec = &choice.spec;
    let name = a.name.as_deref().map(stored_job_name).transpose()?;
    let since = a
        .since
        .as_deref()
        .map(|d| settings::duration("--since", d))
        .transpose()?;
    let outcome = a.outcome.as_deref().and_then(Outcome::parse);
    let Some(mut store) = open_to_read(choice)? else {
        // A fresh install: nothing has run yet.
        if a.json {
            let empty = HistoryReport {
                store: spec.display(),
                passes: vec![],
                summary: vec![],
            };
            println!("{}", model::to_json(&empty)?);
        }
        return Ok(if name.is_some() {
            exit::INCOMPLETE
        } else {
            exit::OK
        });
    };
    if !all_known(store.as_mut(), name.as_slice(), spec, "")? {
        return Ok(exit::INCOMPLETE);
    }
    let query = HistoryQuery {
        job: name.clone(),
        since,
        outcome,
        limit: a.limit,
    };
    let (mut passes, summaries) = if since.is_some() || outcome.is_some() {
        // The summary covers every kept pass that matches, as the listing
        // does, but not only the --limit shown: read them once, through
        // the index of the filter.
        let all = store.history(&HistoryQuery {
            limit: u32::MAX / 2,
            ..query
        })?;
        let mut by_job: BTreeMap<&str, Vec<PassRecord>> = BTreeMap::new();
        for p in &all {
            by_job.entry(&p.job).or_default().push(p.clone());
        }
        let summaries = by_job.iter().map(|(j, v)| summarise(j, v)).collect();
        let shown = all.iter().take(a.limit as usize).cloned().collect();
        (shown, summaries)
    } else {
        // Unfiltered, the summary covers every pass the store counted,
        // pruned ones too: one row of figures per job.
        let names = name.as_slice();
        let mut outcomes: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for c in store.counters(names)? {
            *outcomes
                .entry(c.job)
                .or_default()
                .entry(c.outcome)
                .or_default() += c.passes.max(0) as usize;
        }
        let stats = store.stats(names)?;
        let summaries = outcomes
            .into_iter()
            .map(|(job, outcomes)| {
                let figures = stats.get(&job).cloned().unwrap_or_default();
                summary_of(job, &figures, outcomes)
            })
            .collect();
        (store.history(&query)?, summaries)
    };
    if a.reverse {
        passes.reverse();
    }
    let report = HistoryReport {
        store: spec.display(),
        passes,
        summary: summaries,
    };
    if a.json {
        println!("{}", model::to_json(&report)?);
    } else {
        print_table(&report);
    }
    Ok(exit::OK)
}

fn print_table(report: &HistoryReport) {
    println!("store: {}", report.store);
    println!(
        "{:<20} {:<24} {:<12} {:>8} {:>8} {:>5}  {:<12} TOKEN",
        "STARTED", "JOB", "OUTCOME", "WAITED", "DURATION", "EXIT", "PASS"
    );
    for p in &report.passes {
        let code = match (p.exit_code, p.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => format!("sig{s}"),
            _ => "-".into(),
        };
        // A windowed pass's window closes its line.
        let window = p
            .window
            .as_deref()
            .map(|w| format!("  window {}", escape(w)))
            .unwrap_or_default();
        println!(
            "{:<20} {:<24} {:<12} {:>8} {:>8} {:>5}  {:<12} {}{window}",
            utc_ms(p.started_at_ms),
            escape(&p.job),
            p.outcome.as_str(),
            p.waited_ms.map_or_else(|| "-".into(), human_ms),
            human_ms(p.duration_ms),
            code,
            escape(&p.pass_id),
            p.token.map(|t| t.to_string()).unwrap_or_else(|| "-".into())
        );
    }
    println!();
    println!(
        "{:<24} {:>6} {:>8} {:>8} {:>8} {:>8}  OUTCOMES",
        "JOB", "PASSES", "MEAN", "P50", "P95", "MAX"
    );
    for s in &report.summary {
        let outcomes: Vec<String> = s.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        // No pass that ran: no duration to show, not 0.0s.
        let ms = |v: i64| {
            if s.count == 0 {
                "-".to_string()
            } else {
                human_ms(v)
            }
        };
        println!(
            "{:<24} {:>6} {:>8} {:>8} {:>8} {:>8}  {}",
            escape(&s.job),
            s.count,
            ms(s.mean_ms),
            ms(s.p50_ms),
            ms(s.p95_ms),
            ms(s.max_ms),
            outcomes.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(ms: i64, outcome: Outcome) -> PassRecord {
        PassRecord {
            job: "j".into(),
            pass_id: "p".into(),
            token: Some(1),
            slot: Some(0),
            host: "h".into(),
            pid: 1,
            started_at_ms: 0,
            ended_at_ms: ms,
            duration_ms: ms,
            waited_ms: Some(0),
            exit_code: Some(0),
            signal: None,
            outcome,
            freed: None,
            window: None,
        }
    }

    #[test]
    fn summary_uses_passes_that_ran() {
        let mut passes: Vec<PassRecord> = (1..=100).map(|i| pass(i * 10, Outcome::Ok)).collect();
        passes.push(pass(5, Outcome::Skipped));
        let s = summarise("j", &passes);
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ms, 500);
        assert_eq!(s.p95_ms, 950);
        assert_eq!(s.max_ms, 1000);
        assert_eq!(s.mean_ms, 505);
        assert_eq!(s.outcomes["skipped"], 1);
        assert_eq!(s.outcomes["ok"], 100);
    }
}
