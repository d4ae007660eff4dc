//! `jobrun metrics`: every job's figures in the Prometheus text exposition
//! format, by its naming rules, for a scrape or node_exporter's textfile
//! collector. Label values are escaped as the format requires (job names
//! come from the store, and the store is input); samples carry no
//! timestamps (the textfile collector refuses a file that has them).
//! `--textfile` replaces the file whole: a temporary file in the same
//! directory, renamed over it, so a reader never sees half of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::MetricsArgs;
use crate::cmd::watch::{gather, judge, Limits, Watched};
use crate::policy::stats::Stats;
use crate::settings::StoreChoice;
use crate::store::{Counter, Store, StoreSpec};

/// The variable that makes `run` refresh a textfile after each pass.
pub const TEXTFILE_ENV: &str = "JOBRUN_METRICS_TEXTFILE";

/// A label value as the exposition format writes it: backslash, double
/// quote and line feed escaped.
pub fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Unix milliseconds as seconds, to the millisecond.
fn seconds(ms: i64) -> String {
    format!(
        "{}{}.{:03}",
        if ms < 0 { "-" } else { "" },
        ms.unsigned_abs() / 1000,
        ms.unsigned_abs() % 1000
    )
}

/// One metric family: its help, its type, its samples (labels, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, String)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: String, value: String) {
        self.samples.push((labels, value));
    }
}

/// The exposition of `watched` (and their counters and figures).
fn exposition(
    watched: &[Watched],
    counters: &[Counter],
    stats: &BTreeMap<String, Stats>,
) -> String {
    let limits = Limits::default();
    let mut start = Family::new(
        "jobrun_last_start_timestamp_seconds",
        "gauge",
        "When the job's latest pass that took a slot started (Unix time).",
    );
    let mut success = Family::new(
        "jobrun_last_success_timestamp_seconds",
        "gauge",
        "When the job's latest pass that ended ok ended (Unix time).",
    );
    let mut failure = Family::new(
        "jobrun_last_failure_timestamp_seconds",
        "gauge",
        "When the job's latest pass that ended badly ended (Unix time).",
    );
    let mut duration = Family::new(
        "jobrun_last_duration_seconds",
        "gauge",
        "How long the command of the job's latest pass that ran it ran.",
    );
    let mut passes = Family::new(
        "jobrun_passes_total",
        "counter",
        "Passes of the job by outcome, since the store first saw it (pruning history never \
         lowers it).",
    );
    let mut running = Family::new("jobrun_running", "gauge", "Slots of the job held now.");
    let mut queue = Family::new(
        "jobrun_queue_length",
        "gauge",
        "Passes of the job waiting for a slot.",
    );
    let mut paused = Family::new(
        "jobrun_paused",
        "gauge",
        "1 while a pause stands on the job.",
    );
    let mut interval = Family::new(
        "jobrun_expected_interval_seconds",
        "gauge",
        "The interval check expects between the job's starts (declared or learned).",
    );
    let mut status = Family::new(
        "jobrun_check_status",
        "gauge",
        "What jobrun check says of the job with its defaults: 0 OK, 1 WARNING, 2 CRITICAL.",
    );
    let none = Stats::default();
    for w in watched {
        let job = format!("job=\"{}\"", label_value(&w.job.name));
        // The job's figures count every pass recorded, pruned ones too.
        let figures = stats.get(&w.job.name).unwrap_or(&none);
        let held_since = w.leases.iter().map(|(l, _)| l.acquired_at_ms).max();
        if let Some(at) = held_since.max(figures.last_start_ms) {
            start.add(job.clone(), seconds(at));
        }
        if let Some(at) = figures.last_success_ms {
            success.add(job.clone(), seconds(at));
        }
        if let Some(at) = figures.last_failure_ms {
            failure.add(job.clone(), seconds(at));
        }
        if let Some(ms) = figures.last_duration_ms {
            duration.add(job.clone(), seconds(ms));
        }
        running.add(job.clone(), w.leases.len().to_string());
        queue.add(job.clone(), w.waiters.len().to_string());
        paused.add(job.clone(), u8::from(!w.pauses.is_empty()).to_string());
        let judged = judge(w, &limits);
        if let Some(ms) = judged.lateness.interval_ms {
            interval.add(job.clone(), seconds(ms));
        }
        status.add(job, judged.status.code().to_string());
    }
    for k in counters {
        passes.add(
            format!(
                "job=\"{}\",outcome=\"{}\"",
                label_value(&k.job),
                label_value(&k.outcome)
            ),
            k.passes.to_string(),
        );
    }
    let mut out = String::new();
    for f in [
        start, success, failure, duration, passes, running, queue, paused, interval, status,
    ] {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value) in &f.samples {
            let _ = writeln!(out, "{}{{{labels}}} {value}", f.name);
        }
    }
    out
}

/// Every job's exposition, read from `store`.
fn render(store: &mut dyn Store, spec: &StoreSpec) -> Result<String> {
    let watched = gather(store, spec, &[])?;
    let counters = store.counters(&[])?;
    let stats = store.stats(&[])?;
    Ok(exposition(&watched, &counters, &stats))
}

/// Replace `path` with `text` whole: a new file beside it, renamed over
/// it. Readable by all (node_exporter runs as its own user): metrics name
/// jobs, never secrets.
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("--textfile {}: not a file name", path.display()))?;
    // Not ending in .prom: the collector never reads the file half-written.
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("cannot write the metrics to {}: {e}", path.display())
    })
}

pub fn run(choice: &StoreChoice, a: MetricsArgs) -> Result<i32> {
    let text = match choice.spec.open_existing() {
        Ok(mut store) => render(store.as_mut(), &choice.spec)?,
        // A fresh install, before the first pass: no jobs, no figures, and
        // nothing for cron to mail every minute.
        Err(crate::store::StoreError::Missing(_)) if !choice.explicit => String::new(),
        Err(e) => return Err(e.into()),
    };
    match &a.textfile {
        Some(path) => write_textfile(path, &text)?,
        None => print!("{text}"),
    }
    Ok(crate::exit::OK)
}

/// After a pass: refresh the textfile `JOBRUN_METRICS_TEXTFILE` names, if
/// it names one. A failure is said and changes nothing of the pass.
pub fn refresh_after_pass(spec: &StoreSpec) {
    let Some(path) = std::env::var_os(TEXTFILE_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let done = spec
        .open_existing()
        .map_err(anyhow::Error::from)
        .and_then(|mut s| render(s.as_mut(), spec))
        .and_then(|text| write_textfile(&path, &text));
    if let Err(e) = done {
        crate::say!(warning, "{TEXTFILE_ENV}: {e:#}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(label_value("a\nb"), "a\\nb");
        assert_eq!(label_value("feeds.poll:2026"), "feeds.poll:2026");
    }

    #[test]
    fn seconds_keep_the_milliseconds() {
        assert_eq!(seconds(1_700_000_000_123), "1700000000.123");
        assert_eq!(seconds(5), "0.005");
        assert_eq!(seconds(-1500), "-1.500");
    }
}
