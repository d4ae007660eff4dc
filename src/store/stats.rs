//! The rows behind a job's figures (`policy::stats`): `job_stats`, one per
//! job, with the mark of the last history row folded into it and its
//! duration sketch (JSON pairs of bucket and passes). Writers fold history into them
//! under the job's lock, in the transaction that writes the history row;
//! readers add the rows after the mark themselves, so a figure is never
//! behind what history holds (rows an earlier jobrun wrote without folding
//! them, or a job not folded since the store learned to keep figures).

use std::collections::BTreeMap;

use super::rows::{pass_record, PASS_COLS};
use super::seen_text;
use super::sql::{Conn, Row};
use super::steps::{count_rows, fold_counters, job_filter};
use super::Result;
use crate::policy::outcome::{PassRecord, Seen, RECENT};
use crate::policy::stats::{Part, Stats};

const STATS_COLS: &str = "job, counted_id, ran, sum_ms, max_ms, last_duration_ms, \
     last_start_ms, last_success_ms, last_failure_ms, durations";

/// The sketch as stored: `[[bucket, passes], ...]`. One that does not read
/// (written by someone else) is empty: the figures it held are lost, never
/// made up.
fn sketch_text(buckets: &BTreeMap<i64, i64>) -> String {
    let pairs: Vec<[i64; 2]> = buckets.iter().map(|(b, n)| [*b, *n]).collect();
    serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".into())
}

fn sketch_of(text: &str) -> BTreeMap<i64, i64> {
    seen_text::pairs(text)
        .map(|pairs| pairs.into_iter().map(|[b, n]| (b, n)).collect())
        .unwrap_or_default()
}

fn stats_row(r: &Row) -> Stats {
    Stats {
        ran: r.int("ran"),
        sum_ms: r.int("sum_ms"),
        max_ms: r.int("max_ms"),
        last_duration_ms: r.opt_int("last_duration_ms"),
        last_start_ms: r.opt_int("last_start_ms"),
        last_success_ms: r.opt_int("last_success_ms"),
        last_failure_ms: r.opt_int("last_failure_ms"),
        buckets: sketch_of(r.text_ref("durations")),
    }
}

/// A job's figures as stored and their mark (`None`: no row yet), and its
/// latest passes as kept (`None`: none yet, or not its own that read).
struct Stored {
    stats: Stats,
    mark: Option<i64>,
    kept: Option<Kept>,
}

impl Stored {
    /// The mark the job's rows are folded from: the latest passes' where
    /// they are its own, else the figures'.
    fn from(&self) -> i64 {
        self.kept
            .as_ref()
            .map_or(self.mark.unwrap_or(0), |k| k.upto)
    }
}

/// The columns `stored_of` reads, of `job_stats s` and `job_recent r`: a
/// literal, so that the statements naming them are literals too.
macro_rules! stored_cols {
    () => {
        "s.*, r.upto AS upto, r.seen AS seen"
    };
}

/// Read both by one statement: a release reads them in turn.
fn stored(c: &mut dyn Conn, job: &str) -> Result<Stored> {
    let found = c.query(
        concat!(
            "SELECT ",
            stored_cols!(),
            " FROM job_stats s LEFT JOIN job_recent r ON r.job = s.job WHERE s.job = $1"
        ),
        &[job.into()],
    )?;
    Ok(stored_of(found.first()))
}

/// The job's figures and latest passes as a row holds them (`s.*` of
/// `job_stats`, `upto` and `seen` of `job_recent`): none where the row
/// holds no figures.
fn stored_of(r: Option<&Row>) -> Stored {
    match r.filter(|r| r.opt_text("job").is_some()) {
        Some(r) => Stored {
            stats: stats_row(r),
            mark: Some(r.int("counted_id")),
            kept: r
                .opt_int("upto")
                .and_then(|_| kept_of(r))
                .map(|(text, upto)| Kept {
                    text: text.to_owned(),
                    upto,
                }),
        },
        None => Stored {
            stats: Stats::default(),
            mark: None,
            kept: None,
        },
    }
}

/// Fold the job's history rows after its marks into its figures and its
/// latest passes, and move the marks past them. The two marks differ when
/// a jobrun older than the latest passes folded figures alone: rows only
/// the figures hold are still added to the latest passes. Kept ones that
/// are not the job's own (`ours`) are made again from its history. Called
/// under the job's lock.
pub fn fold_stats(c: &mut dyn Conn, job: &str) -> Result<()> {
    let stored = stored(c, job)?;
    let from = stored.from();
    let rows = c.query(
        &format!("SELECT id, {PASS_COLS} FROM history WHERE job = $1 AND id > $2 ORDER BY id"),
        &[job.into(), from.into()],
    )?;
    let rows: Vec<(i64, PassRecord)> = rows.iter().map(|r| (r.int("id"), pass_record(r))).collect();
    fold_rows(c, job, stored, &rows)
}

/// Fold a history row just inserted, `id` as `row` records it, into the
/// job's counters and figures: what `fold_counters` and `fold_stats` do,
/// by one read where it is the only row after the counters' mark and the
/// figures fold from that same mark (`Stored::from`), as every release
/// leaves them; by those two otherwise, and where the store did not say
/// which row it made (`id` is `None`). Their three reads of the marks and
/// the row took a tenth of a pass's instructions, most of it compiling
/// them. Called under the job's lock.
pub fn fold_inserted(c: &mut dyn Conn, job: &str, id: Option<i64>, row: &PassRecord) -> Result<()> {
    let only = match id {
        Some(id) => only_after_marks(c, job, id)?,
        None => None,
    };
    let Some((id, counted, stored)) = only else {
        fold_counters(c, job)?;
        return fold_stats(c, job);
    };
    count_rows(c, job, counted, &[(id, row.outcome.as_str())])?;
    fold_rows(c, job, stored, &[(id, row.clone())])
}

/// The counters' mark and the figures as read, where row `id` is the one
/// row `fold_counters` and `fold_stats` would read: after the counters'
/// mark one row, `id`, and the figures folding from the same mark.
fn only_after_marks(c: &mut dyn Conn, job: &str, id: i64) -> Result<Option<(i64, i64, Stored)>> {
    let found = c.query(
        concat!(
            "SELECT j.counted_id AS counters_mark, ",
            stored_cols!(),
            ", (SELECT COUNT(*) FROM history h WHERE h.job = $1 \
             AND h.id > COALESCE(j.counted_id, 0)) AS after \
             FROM jobs j LEFT JOIN job_stats s ON s.job = j.name \
             LEFT JOIN job_recent r ON r.job = j.name WHERE j.name = $1"
        ),
        &[job.into()],
    )?;
    Ok(found.first().and_then(|r| {
        let counted = r.opt_int("counters_mark").unwrap_or(0);
        let stored = stored_of(Some(r));
        let only = r.int("after") == 1 && id > counted && stored.from() == counted;
        only.then_some((id, counted, stored))
    }))
}

/// Fold `rows` (the job's history rows after the mark `stored` folds from,
/// `Stored::from`, in order, as history holds them) into the figures and
/// latest passes `stored`, and move their marks past them.
fn fold_rows(
    c: &mut dyn Conn,
    job: &str,
    stored: Stored,
    rows: &[(i64, PassRecord)],
) -> Result<()> {
    let Stored {
        stats,
        mark: had,
        kept,
    } = stored;
    let mark = had.unwrap_or(0);
    let Some(top) = rows.last().map(|(id, _)| *id) else {
        return Ok(());
    };
    let mut delta = Stats::default();
    let mut seen = Vec::with_capacity(rows.len());
    for (id, p) in rows {
        if *id > mark {
            delta.add(Part::of(p));
        }
        if kept.is_some() {
            seen.push(p.seen(*id));
        }
    }
    if top > mark {
        save(c, job, stats, had, &delta, Some(top))?;
    }
    // The rows after the mark go after every kept pass: added to the
    // text as it stands, unless it cannot be (`seen_text::append`).
    if let Some(text) = kept
        .as_ref()
        .and_then(|k| seen_text::append(&k.text, &seen))
    {
        return put_text(c, job, text, top, true);
    }
    let held = kept.is_some();
    let kept = match kept.and_then(|k| k.seen()) {
        Some(mut k) => {
            for s in seen {
                Seen::keep(&mut k, s);
            }
            k
        }
        None => latest_seen(c, job, RECENT)?,
    };
    put_seen(c, job, &kept, top, held)
}

/// A job's latest passes as kept, oldest first, and the last history row
/// folded into them.
struct Kept {
    text: String,
    upto: i64,
}

impl Kept {
    /// The passes the text holds (`None`: it does not read).
    fn seen(&self) -> Option<Vec<Seen>> {
        seen_text::read(&self.text)
    }
}

/// Whether latest passes kept up to `upto` are the job's own, its figures
/// folded up to `counted`: their writers move both marks together (an
/// earlier jobrun moves the figures' alone), so a mark past the figures'
/// was left by a job of the same name that an earlier jobrun forgot, or
/// written by someone else. A job without figures has none of its own.
fn ours(upto: i64, counted: i64) -> bool {
    upto <= counted
}

/// Kept latest passes as read beside the job's figures, their text as the
/// row holds it and their mark: `None` unless they are the job's own
/// (`ours`); whether they read is seen when they are (`seen_text::read`).
fn kept_of(r: &Row) -> Option<(&str, i64)> {
    let upto = r.int("upto");
    ours(upto, r.int("counted_id")).then(|| (r.text_ref("seen"), upto))
}

/// The job's latest passes as kept, and their mark (`None`: no row yet,
/// or not its own that read).
fn kept_seen(c: &mut dyn Conn, job: &str) -> Result<Option<(Vec<Seen>, i64)>> {
    Ok(stored(c, job)?.kept.and_then(|k| Some((k.seen()?, k.upto))))
}

fn put_seen(c: &mut dyn Conn, job: &str, seen: &[Seen], upto: i64, held: bool) -> Result<()> {
    put_text(c, job, seen_text::write(seen), upto, held)
}

/// Write the job's latest passes: over the row read in this transaction
/// where `held` (an UPDATE compiles in half what the upsert does, and
/// every release writes them), whether or not one stands otherwise.
fn put_text(c: &mut dyn Conn, job: &str, text: String, upto: i64, held: bool) -> Result<()> {
    let values = [job.into(), upto.into(), text.into()];
    if held {
        c.exec(
            "UPDATE job_recent SET upto = $2, seen = $3 WHERE job = $1",
            &values,
        )?;
    } else {
        c.exec(
            "INSERT INTO job_recent (job, upto, seen) VALUES ($1, $2, $3) \
             ON CONFLICT (job) DO UPDATE SET upto = excluded.upto, seen = excluded.seen",
            &values,
        )?;
    }
    Ok(())
}

/// Put `seen` (one row updated in place, already folded) into the job's
/// latest passes. A job without them (or with ones that do not read)
/// gets them from its kept history, which holds the row. Called under
/// the job's lock.
pub fn keep_seen(c: &mut dyn Conn, job: &str, seen: Vec<Seen>) -> Result<()> {
    match kept_seen(c, job)? {
        Some((mut kept, upto)) => {
            for s in seen {
                Seen::keep(&mut kept, s);
            }
            put_seen(c, job, &kept, upto, true)
        }
        None => {
            let seen = latest_seen(c, job, RECENT)?;
            let top = seen.last().map_or(0, |s| s.id);
            put_seen(c, job, &seen, top, false)
        }
    }
}

/// The job's last `n` history rows as `Seen`, oldest first.
fn latest_seen(c: &mut dyn Conn, job: &str, n: usize) -> Result<Vec<Seen>> {
    let rows = c.query(
        &format!("SELECT id, {PASS_COLS} FROM history WHERE job = $1 ORDER BY id DESC LIMIT $2"),
        &[job.into(), (n as i64).into()],
    )?;
    Ok(rows
        .iter()
        .rev()
        .map(|r| pass_record(r).seen(r.int("id")))
        .collect())
}

/// The last `n` passes of each named job (newest first, one list per job
/// in the order named): the kept ones with the history rows after them,
/// or, for a job without kept ones of its own that read (`kept_of`), its
/// history rows.
pub fn read_seen(c: &mut dyn Conn, jobs: &[String], n: usize) -> Result<Vec<Vec<Seen>>> {
    let (filter, params) = job_filter("j.name", jobs, 1);
    let mut kept: BTreeMap<String, Vec<Seen>> = BTreeMap::new();
    for r in c.query(
        &format!(
            "SELECT j.name AS job, r.upto AS upto, r.seen AS seen, \
             s.counted_id AS counted_id FROM jobs j \
             JOIN job_stats s ON s.job = j.name JOIN job_recent r ON r.job = j.name \
             WHERE {filter}"
        ),
        &params,
    )? {
        if let Some(seen) = kept_of(&r).and_then(|(text, _)| seen_text::read(text)) {
            kept.insert(r.text("job"), seen);
        }
    }
    let cols: Vec<String> = PASS_COLS
        .split(',')
        .map(|c| format!("h.{0} AS {0}", c.trim()))
        .collect();
    let after = c.query(
        &format!(
            "SELECT h.id AS id, {} FROM jobs j JOIN job_stats s ON s.job = j.name \
             JOIN job_recent r ON r.job = j.name \
             CROSS JOIN history h WHERE h.job = j.name AND h.id > r.upto \
             AND {filter} ORDER BY h.id",
            cols.join(", ")
        ),
        &params,
    )?;
    for r in &after {
        let p = pass_record(r);
        if let Some(k) = kept.get_mut(&p.job) {
            Seen::keep(k, p.seen(r.int("id")));
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        let mut seen = match kept.remove(job) {
            Some(k) => k,
            None => latest_seen(c, job, n)?,
        };
        seen.drain(..seen.len().saturating_sub(n));
        seen.reverse();
        out.push(seen);
    }
    Ok(out)
}

/// Add `delta` (passes counted after those the job's figures hold, every
/// row up to its mark folded) to the job's figures. Called under the
/// job's lock.
pub fn add_stats(c: &mut dyn Conn, job: &str, delta: &Stats) -> Result<()> {
    let Stored { stats, mark, .. } = stored(c, job)?;
    save(c, job, stats, mark, delta, None)
}

/// Write `stats` (as read, with its mark) with `delta` added, the mark
/// moved to `top` when given.
fn save(
    c: &mut dyn Conn,
    job: &str,
    mut stats: Stats,
    mark: Option<i64>,
    delta: &Stats,
    top: Option<i64>,
) -> Result<()> {
    stats.merge(delta);
    let counted = mark.max(top).unwrap_or(0);
    let values = [
        job.into(),
        counted.into(),
        stats.ran.into(),
        stats.sum_ms.into(),
        stats.max_ms.into(),
        stats.last_duration_ms.into(),
        stats.last_start_ms.into(),
        stats.last_success_ms.into(),
        stats.last_failure_ms.into(),
        sketch_text(&stats.buckets).into(),
    ];
    if mark.is_some() {
        c.exec(
            "UPDATE job_stats SET counted_id = $2, ran = $3, sum_ms = $4, max_ms = $5, \
             last_duration_ms = $6, last_start_ms = $7, last_success_ms = $8, \
             last_failure_ms = $9, durations = $10 WHERE job = $1",
            &values,
        )?;
    } else {
        c.exec(
            &format!(
                "INSERT INTO job_stats ({STATS_COLS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            &values,
        )?;
    }
    Ok(())
}

/// The figures of the named jobs the store knows (all when empty), the
/// history rows after each job's mark added.
pub fn read_stats(c: &mut dyn Conn, jobs: &[String]) -> Result<BTreeMap<String, Stats>> {
    let (filter, params) = job_filter("j.name", jobs, 1);
    let mut out: BTreeMap<String, Stats> = BTreeMap::new();
    for r in c.query(
        &format!(
            "SELECT s.job AS job, s.counted_id AS counted_id, s.ran AS ran, s.sum_ms AS sum_ms, \
             s.max_ms AS max_ms, s.last_duration_ms AS last_duration_ms, \
             s.last_start_ms AS last_start_ms, s.last_success_ms AS last_success_ms, \
             s.last_failure_ms AS last_failure_ms, s.durations AS durations \
             FROM job_stats s JOIN jobs j ON j.name = s.job WHERE {filter}"
        ),
        &params,
    )? {
        out.insert(r.text("job"), stats_row(&r));
    }
    let cols: Vec<String> = PASS_COLS
        .split(',')
        .map(|c| format!("h.{0} AS {0}", c.trim()))
        .collect();
    let after = c.query(
        &format!(
            "SELECT {} FROM jobs j LEFT JOIN job_stats s ON s.job = j.name \
             CROSS JOIN history h WHERE h.job = j.name AND h.id > COALESCE(s.counted_id, 0) \
             AND {filter} ORDER BY h.id",
            cols.join(", ")
        ),
        &params,
    )?;
    for r in &after {
        let p = pass_record(r);
        let mut one = Stats::default();
        one.add(Part::of(&p));
        out.entry(p.job).or_default().merge(&one);
    }
    Ok(out)
}

/// The schema step that brings a store's figures and latest passes in line
/// with its history when it is migrated to it (`fold_every_job`).
pub const FOLDED_AT: i64 = 13;

/// Fold every job's history into its figures and latest passes, in the
/// transaction that migrates a store of an earlier jobrun past
/// `FOLDED_AT`: once, so that readers never add up a whole history, and
/// a job that never runs again is as quick to read as one that does.
pub fn fold_every_job(c: &mut dyn Conn) -> Result<()> {
    let jobs = c.query("SELECT name FROM jobs ORDER BY name", &[])?;
    for j in &jobs {
        let job = j.text("name");
        // As every writer of history folds: under the job's lock.
        c.lock_job(&job)?;
        fold_stats(c, &job)?;
        if kept_seen(c, &job)?.is_none() {
            keep_seen(c, &job, Vec::new())?;
        }
    }
    Ok(())
}

/// Forget the job's figures and latest passes (`forget`).
pub fn forget_stats(c: &mut dyn Conn, job: &str) -> Result<()> {
    c.exec("DELETE FROM job_stats WHERE job = $1", &[job.into()])?;
    c.exec("DELETE FROM job_recent WHERE job = $1", &[job.into()])?;
    Ok(())
}
