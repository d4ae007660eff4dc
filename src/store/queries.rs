//! The read-only queries behind `Store`'s listings (jobs, history,
//! counters, recent passes), moved out of `transitions.rs` to keep it under
//! the 600-line rule; the trait's methods there call these.

use super::rows::{pass_record, PASS_COLS};
use super::sql::{millis, Backend, SqlStore, Value};
use super::stats::read_seen;
use super::steps::{job_filter, UNCOUNTED};
use super::{Counter, HistoryQuery, JobRow, Result};
use crate::policy::lease::Clock;
use crate::policy::outcome::{Outcome, PassRecord, Seen};
use crate::policy::watch::Declared;

impl<B: Backend> SqlStore<B> {
    /// The rows of `jobs` (all when empty) that `cols_from` selects
    /// ("COLUMNS FROM table"), by job and then `order`, each made by `row`
    /// with the store's clock.
    pub(super) fn rows_of<T>(
        &mut self,
        jobs: &[String],
        cols_from: &str,
        order: &str,
        row: fn(&super::sql::Row, &Clock) -> T,
    ) -> Result<Vec<T>> {
        self.backend.read(&mut |c| {
            let clock = c.clock()?;
            let (filter, params) = job_filter("job", jobs, 1);
            let rows = c.query(
                &format!("SELECT {cols_from} WHERE {filter} ORDER BY job, {order}"),
                &params,
            )?;
            Ok(rows.iter().map(|r| row(r, &clock)).collect())
        })
    }

    /// `Store::jobs`.
    pub(super) fn read_jobs(&mut self, jobs: &[String]) -> Result<Vec<JobRow>> {
        self.backend.read(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            let (filter, params) = job_filter("j.name", jobs, 1);
            // The last pass that took a slot: the passes that did carry
            // their token.
            let rows = c.query(
                &format!(
                    "SELECT j.name AS name, h.outcome AS outcome, h.duration_ms AS duration_ms, \
                     h.ended_ms AS ended_ms, a.outcome AS attempt, a.ended_ms AS attempt_ended, \
                     j.every_ms AS every_ms, j.schedule AS schedule, j.schedule_tz AS tz \
                     FROM jobs j \
                     LEFT JOIN history h ON h.id = (SELECT MAX(id) FROM history \
                       WHERE job = j.name AND token IS NOT NULL) \
                     LEFT JOIN history a ON a.id = (SELECT MAX(id) FROM history \
                       WHERE job = j.name) \
                     WHERE {filter} ORDER BY j.name"
                ),
                &params,
            )?;
            Ok(rows
                .iter()
                .map(|r| JobRow {
                    name: r.text("name"),
                    last_outcome: r.opt_text("outcome"),
                    last_duration_ms: r.opt_int("duration_ms"),
                    last_ended_ms_ago: r.opt_int("ended_ms").map(|e| now - e),
                    attempt_outcome: r.opt_text("attempt"),
                    attempt_ended_ms_ago: r.opt_int("attempt_ended").map(|e| now - e),
                    declared: Declared::of(
                        r.opt_int("every_ms"),
                        r.opt_text("schedule"),
                        r.opt_text("tz"),
                    ),
                })
                .collect())
        })
    }

    /// `Store::history`.
    pub(super) fn read_history(&mut self, q: &HistoryQuery) -> Result<Vec<PassRecord>> {
        self.backend.read(&mut |c| {
            let clock = c.clock()?;
            let mut conds = vec!["1=1".to_string()];
            let mut params: Vec<Value> = vec![q.limit.into()];
            if let Some(j) = &q.job {
                params.push(j.as_str().into());
                conds.push(format!("job = ${}", params.len()));
            }
            if let Some(since) = q.since {
                params.push(clock.now_ms.saturating_sub(millis(since)).into());
                conds.push(format!("started_ms >= ${}", params.len()));
            }
            if let Some(o) = q.outcome {
                params.push(o.as_str().into());
                let mut cond = format!("outcome = ${}", params.len());
                // An earlier jobrun sharing the store still writes its old name.
                if o == Outcome::WaitExpired {
                    params.push(Outcome::WAIT_EXPIRED_BEFORE.into());
                    cond = format!("({cond} OR outcome = ${})", params.len());
                }
                conds.push(cond);
            }
            let rows = c.query(
                &format!(
                    "SELECT {PASS_COLS} FROM history WHERE {} \
                     ORDER BY started_ms DESC, id DESC LIMIT $1",
                    conds.join(" AND ")
                ),
                &params,
            )?;
            Ok(rows.iter().map(pass_record).collect())
        })
    }

    /// `Store::counters`.
    pub(super) fn read_counters(&mut self, jobs: &[String]) -> Result<Vec<Counter>> {
        self.backend.read(&mut |c| {
            let (filter, params) = job_filter("j.name", jobs, 1);
            let rows = c.query(
                &format!(
                    "SELECT k.job AS job, k.outcome AS outcome, k.passes AS n \
                     FROM job_counters k JOIN jobs j ON j.name = k.job WHERE {filter} \
                     UNION ALL \
                     SELECT j.name AS job, h.outcome AS outcome, count(*) AS n \
                     FROM jobs j JOIN history h ON {UNCOUNTED} \
                     WHERE {filter} GROUP BY j.name, h.outcome"
                ),
                &params,
            )?;
            let mut sums = std::collections::BTreeMap::<(String, String), i64>::new();
            for r in &rows {
                let outcome = Outcome::counted_name(r.text_ref("outcome")).to_string();
                *sums.entry((r.text("job"), outcome)).or_default() += r.int("n");
            }
            Ok(sums
                .into_iter()
                .map(|((job, outcome), passes)| Counter {
                    job,
                    outcome,
                    passes,
                })
                .collect())
        })
    }

    /// `Store::recent`.
    pub(super) fn read_recent(
        &mut self,
        jobs: &[String],
        per_job: usize,
    ) -> Result<(i64, Vec<Vec<Seen>>)> {
        self.backend.read(&mut |c| {
            let now = c.clock()?.now_ms;
            Ok((now, read_seen(c, jobs, per_job)?))
        })
    }
}
