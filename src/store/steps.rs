//! The steps the store's transitions are made of, each inside the
//! transaction its caller opened: lock a job and read its token counter,
//! read its pauses and slot accounting, evict with a compare-and-set on the
//! row as read, draw a token and take a slot, record a pass.

use std::collections::BTreeMap;

use super::rows::{
    argv_json, holder_values, lease_row, pause_row, waiter_row, window_row, LEASE_COLS, PASS_COLS,
    PAUSE_COLS, WAITER_COLS, WINDOW_COLS,
};
use super::sql::{marks, millis, Conn, Value};
use super::stats::{add_stats, fold_inserted, fold_stats, keep_seen};
use super::{Acquire, AcquireRequest, Keep, PauseInfo, Result, StoreError, StorePin};
use crate::policy::containers::Engine;
use crate::policy::lease::{self, Clock, Eviction, LeaseKey, LeaseRow, WaiterRow};
use crate::policy::outcome::{Outcome, PassRecord};
use crate::policy::pause::{self, Pause, PauseScope};
use crate::policy::slots::Occupancy;
use crate::policy::stats::{Part, Stats};
use crate::policy::window::{self, Claim, WindowAsk, WindowRow};

/// `WHERE` fragment selecting the named jobs, or all of them.
pub fn job_filter(col: &str, jobs: &[String], first: usize) -> (String, Vec<Value>) {
    if jobs.is_empty() {
        return ("1=1".into(), vec![]);
    }
    (
        format!("{col} IN ({})", marks(first, jobs.len())),
        jobs.iter().map(|j| j.as_str().into()).collect(),
    )
}

/// A pass writes only into the store it started with: the file `pin`
/// names is still at its path (checked before a connection is used).
pub fn pinned_file(pin: &StorePin) -> Result<()> {
    pin.check_file().map_err(StoreError::NotPinned)
}

/// A pass writes only into the store it started with: the database this
/// transaction sees is the one `pin` names (PostgreSQL: a database or
/// schema dropped and re-created under the pass has another identity).
pub fn still_pinned(c: &mut dyn Conn, pin: &StorePin) -> Result<()> {
    let Some(pinned) = pin.database() else {
        return Ok(());
    };
    match c.identity(pinned)? {
        Some(now) if now != pinned => Err(StoreError::NotPinned(StorePin::another_database(
            &now, pinned,
        ))),
        _ => Ok(()),
    }
}

/// The meta key under which the store keeps the largest fencing-token
/// counter of every job forgotten from it.
pub const FORGOTTEN_TOKENS: &str = "forgotten_tokens";

pub fn meta(c: &mut dyn Conn, key: &str) -> Result<Option<i64>> {
    let rows = c.query(
        "SELECT value FROM jobrun_meta WHERE key = $1",
        &[key.into()],
    )?;
    Ok(rows.first().map(|r| r.int("value")))
}

/// Lock the job's row, creating it first if the store does not know the
/// job yet: its fencing-token counter, as it stands.
pub fn ensure_job(c: &mut dyn Conn, job: &str, clock: &Clock) -> Result<i64> {
    if let Some(counter) = c.lock_job(job)? {
        return Ok(counter);
    }
    let start = lease::first_counter(clock.token_floor(), meta(c, FORGOTTEN_TOKENS)?);
    c.exec(
        "INSERT INTO jobs (name, next_token, created_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO NOTHING",
        &[job.into(), start.into(), clock.now_ms.into()],
    )?;
    Ok(c.lock_job(job)?.unwrap_or(start))
}

/// Store the cadence the pass declared with its job, replacing whatever
/// was declared before (the latest declaration wins); nothing when it
/// declared none.
pub fn declare(c: &mut dyn Conn, req: &AcquireRequest) -> Result<()> {
    let Some(d) = &req.declared else {
        return Ok(());
    };
    let (every, schedule, tz) = d.columns();
    c.exec(
        "UPDATE jobs SET every_ms = $2, schedule = $3, schedule_tz = $4 WHERE name = $1",
        &[
            req.job.as_str().into(),
            every.into(),
            schedule.into(),
            tz.into(),
        ],
    )?;
    Ok(())
}

/// Every pause that could hold `job` back: its own and those on all jobs.
pub fn pauses_on(c: &mut dyn Conn, job: &str) -> Result<Vec<Pause>> {
    let rows = c.query(
        &format!("SELECT {PAUSE_COLS} FROM pauses WHERE job IN ($1, $2)"),
        &[job.into(), PauseScope::ALL_KEY.into()],
    )?;
    Ok(rows.iter().map(pause_row).collect())
}

/// The pause holding `job` back, if one stands (the core picks it).
pub fn pause_of(c: &mut dyn Conn, job: &str) -> Result<Option<PauseInfo>> {
    let pauses = pauses_on(c, job)?;
    Ok(pause::holding_back(&pauses, job).map(|p| PauseInfo {
        all: p.is_all(),
        owner: p.owner.clone(),
        reason: p.reason.clone(),
        since_ms: p.since_ms,
    }))
}

/// The job's slot accounting, read inside the transaction; `asked` is the
/// asker's own `--slots` (the core decides which count binds).
pub fn occupancy(c: &mut dyn Conn, job: &str, asked: Option<u32>) -> Result<Occupancy> {
    let held = c.query(
        "SELECT slot, slots FROM leases WHERE job = $1 ORDER BY slot",
        &[job.into()],
    )?;
    let queue = c.query(
        "SELECT id, slots FROM waiters WHERE job = $1 ORDER BY id",
        &[job.into()],
    )?;
    let count = |r: &super::sql::Row| u32::try_from(r.int("slots")).unwrap_or(0);
    Ok(Occupancy::of(
        held.iter()
            .map(|r| (u32::try_from(r.int("slot")).unwrap_or(u32::MAX), count(r))),
        queue.iter().map(|r| (r.int("id"), count(r))),
        asked,
    ))
}

/// The lease rows of `job` in slot `slot`, as read now.
pub fn lease_in(c: &mut dyn Conn, job: &str, slot: u32, clock: &Clock) -> Result<Option<LeaseRow>> {
    let rows = c.query(
        &format!("SELECT {LEASE_COLS} FROM leases WHERE job = $1 AND slot = $2"),
        &[job.into(), slot.into()],
    )?;
    Ok(rows.first().map(|r| lease_row(r, clock)))
}

/// Apply one eviction decided outside the transaction, if the core says it
/// still holds for the row as read now; remove the row with a
/// compare-and-set on what was read, and record the pass it freed as
/// `abandoned`, by `by`, in the same transaction. Whether a row was
/// removed.
pub fn evict_in(
    c: &mut dyn Conn,
    job: &str,
    ev: &Eviction,
    clock: &Clock,
    by: &str,
) -> Result<bool> {
    let Some(row) = lease_in(c, job, ev.slot, clock)? else {
        return Ok(false);
    };
    if !ev.still_holds(&row) {
        return Ok(false);
    }
    let n = c.exec(
        "DELETE FROM leases WHERE job = $1 AND slot = $2 AND token = $3 AND renewed_ms = $4",
        &[
            job.into(),
            row.slot.into(),
            row.token.into(),
            row.stamps.renewed_ms.into(),
        ],
    )?;
    if n == 0 {
        return Ok(false);
    }
    let evidence = ev.evidence.as_deref();
    let mut pass = PassRecord::abandoned_holder(&row, ev.reason, evidence, by, clock.now_ms);
    pass.window = end_window(c, &pass, clock)?;
    insert_pass(c, &pass, None, pass.ended_at_ms, true)?;
    Ok(true)
}

/// The window `pass` claimed, if it claimed one and it is still its
/// latest claim: its end recorded there with the pass's outcome (which
/// lets the window be claimed again unless it is `ok`). Returns the key.
pub fn end_window(c: &mut dyn Conn, pass: &PassRecord, clock: &Clock) -> Result<Option<String>> {
    let rows = c.query(
        &format!("SELECT {WINDOW_COLS} FROM windows WHERE job = $1 AND pass_id = $2"),
        &[pass.job.as_str().into(), pass.pass_id.as_str().into()],
    )?;
    let Some(w) = rows.first().map(window_row) else {
        return Ok(None);
    };
    c.exec(
        "UPDATE windows SET outcome = $4, ended_ms = $5 \
         WHERE job = $1 AND window_key = $2 AND pass_id = $3",
        &[
            w.job.as_str().into(),
            w.key.as_str().into(),
            w.pass_id.as_str().into(),
            pass.outcome.as_str().into(),
            clock.now_ms.into(),
        ],
    )?;
    Ok(Some(w.key))
}

/// The row of window `key` of `job`, as read now.
pub fn window_of(c: &mut dyn Conn, job: &str, key: &str) -> Result<Option<WindowRow>> {
    let rows = c.query(
        &format!("SELECT {WINDOW_COLS} FROM windows WHERE job = $1 AND window_key = $2"),
        &[job.into(), key.into()],
    )?;
    Ok(rows.first().map(window_row))
}

/// What a windowed pass found before it took a slot: the window it may
/// claim (its key, the attempt and the row as read), or why it skips.
pub enum WindowFound {
    Claim {
        key: String,
        attempt: u32,
        row: Option<WindowRow>,
    },
    Skip(Acquire),
}

/// Read the window `ask` names at the store's clock and ask the core
/// whether it may be claimed.
pub fn find_window(
    c: &mut dyn Conn,
    job: &str,
    ask: &WindowAsk,
    clock: &Clock,
) -> Result<WindowFound> {
    let key = ask.spec.key_at(clock.now_ms);
    let row = window_of(c, job, &key)?;
    Ok(match (window::claim(row.as_ref(), ask.attempts), row) {
        (Claim::Done, Some(r)) => WindowFound::Skip(Acquire::WindowDone(r)),
        (Claim::GivenUp, Some(r)) => WindowFound::Skip(Acquire::WindowGivenUp(r)),
        (Claim::Take { attempt }, row) => WindowFound::Claim { key, attempt, row },
        // The core skips only a window it was shown.
        (_, None) => WindowFound::Claim {
            key,
            attempt: 1,
            row: None,
        },
    })
}

/// Claim window `key` for `req`'s pass (attempt `attempt`): a new row when
/// it was never claimed, else the row as read (compare-and-set on its
/// attempts), never an upsert. Inside the transaction that took the slot.
pub fn claim_window(
    c: &mut dyn Conn,
    req: &AcquireRequest,
    found: (&str, u32, Option<&WindowRow>),
    max_attempts: u32,
    clock: &Clock,
) -> Result<()> {
    let (key, attempt, row) = found;
    let values: Vec<Value> = vec![
        req.job.as_str().into(),
        key.into(),
        attempt.into(),
        max_attempts.into(),
        req.pass_id.as_str().into(),
        req.holder.host.as_str().into(),
        clock.now_ms.into(),
    ];
    let n = match row {
        None => c.exec(
            &format!(
                "INSERT INTO windows (job, window_key, attempts, max_attempts, pass_id, host, \
                 claimed_ms) VALUES ({})",
                marks(1, values.len())
            ),
            &values,
        )?,
        Some(r) => c.exec(
            "UPDATE windows SET attempts = $3, max_attempts = $4, pass_id = $5, host = $6, \
             claimed_ms = $7, ended_ms = NULL, outcome = NULL \
             WHERE job = $1 AND window_key = $2 AND attempts = $8 AND pass_id = $9",
            &[values, vec![r.attempts.into(), r.pass_id.as_str().into()]].concat(),
        )?,
    };
    if n != 1 {
        return Err(StoreError::Other(
            req.job.clone(),
            format!("window {key} changed while it was being claimed"),
        ));
    }
    Ok(())
}

/// Apply the evictions whose conditions still hold; return those that
/// removed a row.
pub fn evict_all(
    c: &mut dyn Conn,
    job: &str,
    evict: &[Eviction],
    clock: &Clock,
    by: &str,
) -> Result<Vec<Eviction>> {
    let mut done = Vec::new();
    for ev in evict {
        if evict_in(c, job, ev, clock, by)? {
            done.push(ev.clone());
        }
    }
    Ok(done)
}

/// Record a pass ended at `ended` (store clock), and prune its job's history
/// to the last `keep` passes when given. A pass already recorded as
/// abandoned (by whoever freed it) is updated to how it really ended, never
/// recorded twice: one history row per pass. `freed_by_another`: whether
/// someone else may have freed the pass's row (and recorded it so); a
/// pass that gives back the lease row it still held was freed by no one.
///
/// The job's counters count the pass in the same transaction, under the
/// job's lock (`fold_counters`); a pass that was counted as abandoned and
/// reaches its own end is counted again by how it ended (a counter never
/// goes down).
pub fn insert_pass(
    c: &mut dyn Conn,
    p: &PassRecord,
    keep: Option<Keep>,
    ended: i64,
    freed_by_another: bool,
) -> Result<()> {
    // Under the job's lock, rows are numbered and counted in turn: a row
    // another writer numbered earlier is never left behind the mark.
    let known = c.lock_job(&p.job)?.is_some();
    // A row about to be updated in place is counted first as it stands
    // (abandoned), then again by how it ended; a row inserted is counted
    // with the rows before it, after it is written.
    if known && freed_by_another {
        fold_counters(c, &p.job)?;
    }
    // The figures fold every row after their mark once the row is written;
    // a row updated in place (an abandoned pass reaching its own end) was
    // folded as abandoned and is added again by how it ended.

    let started = if p.outcome == Outcome::Abandoned {
        p.started_at_ms
    } else {
        ended.saturating_sub(p.duration_ms.max(0))
    };
    let (reason, by, evidence) = match &p.freed {
        Some(f) => (
            Some(f.reason.as_str()),
            Some(f.by.as_str()),
            f.evidence.as_deref(),
        ),
        None => (None, None, None),
    };
    let values: Vec<Value> = vec![
        p.job.as_str().into(),
        p.pass_id.as_str().into(),
        p.token.into(),
        p.slot.into(),
        p.host.as_str().into(),
        p.pid.into(),
        started.into(),
        ended.into(),
        p.duration_ms.into(),
        p.exit_code.into(),
        p.signal.into(),
        p.outcome.as_str().into(),
        p.waited_ms.into(),
        reason.into(),
        by.into(),
        evidence.into(),
        p.window.as_deref().into(),
    ];
    let updated = if freed_by_another {
        c.exec(
            "UPDATE history SET token = $3, slot = $4, host = $5, pid = $6, started_ms = $7, \
             ended_ms = $8, duration_ms = $9, exit_code = $10, signal = $11, outcome = $12, \
             waited_ms = $13, window_key = COALESCE($14, window_key) \
             WHERE job = $1 AND pass_id = $2 AND outcome = 'abandoned'",
            &[&values[..13], &values[16..]].concat(),
        )?
    } else {
        0
    };
    // As the row holds it: on the store's clock.
    let row = PassRecord {
        started_at_ms: started,
        ended_at_ms: ended,
        ..p.clone()
    };
    if updated == 0 {
        let id = c.insert_id(
            &format!(
                "INSERT INTO history ({PASS_COLS}) VALUES ({})",
                marks(1, values.len())
            ),
            &values,
        )?;
        if known {
            fold_inserted(c, &p.job, id, &row)?;
        }
    } else if known {
        count_passes(c, &p.job, p.outcome.as_str(), 1)?;
        fold_stats(c, &p.job)?;
        let mut one = Stats::default();
        one.add(Part::of(&row));
        add_stats(c, &p.job, &one)?;
        let id = c.query(
            "SELECT id FROM history WHERE job = $1 AND pass_id = $2",
            &[p.job.as_str().into(), p.pass_id.as_str().into()],
        )?;
        if let Some(id) = id.first().map(|r| r.int("id")) {
            keep_seen(c, &p.job, vec![row.seen(id)])?;
        }
    }
    if let Some(keep) = keep {
        prune(c, &p.job, keep, ended)?;
    }
    Ok(())
}

/// Prune the job's history to its last `keep.passes` rows and, with an
/// age limit, to the rows that ended within it of `now` (store clock);
/// the pass just recorded always stays. Called after the job's rows were
/// folded into its counters and figures, which pruning never lowers.
fn prune(c: &mut dyn Conn, job: &str, keep: Keep, now: i64) -> Result<()> {
    let mut pruned = c.exec(
        "DELETE FROM history WHERE job = $1 AND id <= \
             (SELECT id FROM history WHERE job = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        &[job.into(), keep.passes.into()],
    )?;
    if let Some(age) = keep.age {
        pruned += c.exec(
            "DELETE FROM history WHERE job = $1 AND ended_ms < $2 \
             AND id < (SELECT MAX(id) FROM history WHERE job = $1)",
            &[job.into(), now.saturating_sub(millis(age)).into()],
        )?;
    }
    // Output is kept only for passes in history (`prune_output`): none
    // went unless a row did. (What a jobrun that predates kept output left
    // behind goes with the next row pruned.)
    if pruned > 0 {
        prune_output(c, Some(job))?;
    }
    Ok(())
}

/// Remove the kept output of passes no longer in history (of `job`, or of
/// every job): pruned, forgotten, or pruned by a jobrun that predates kept
/// output.
pub fn prune_output(c: &mut dyn Conn, job: Option<&str>) -> Result<u64> {
    let gone = "NOT EXISTS (SELECT 1 FROM history h WHERE h.pass_id = pass_output.pass_id)";
    match job {
        Some(j) => c.exec(
            &format!("DELETE FROM pass_output WHERE job = $1 AND {gone}"),
            &[j.into()],
        ),
        None => c.exec(&format!("DELETE FROM pass_output WHERE {gone}"), &[]),
    }
}

/// Take the lowest free slot of `occ` for `req`, under the job's next
/// fencing token (`lease::draw_token`), drawn from `counter` as read under
/// the job's lock.
pub fn take_slot(
    c: &mut dyn Conn,
    req: &AcquireRequest,
    occ: &Occupancy,
    clock: &Clock,
    counter: i64,
) -> Result<Acquire> {
    let slot = occ.lowest_free_slot();
    let Some((token, next)) = lease::draw_token(counter, clock.token_floor()) else {
        return Err(StoreError::TokensExhausted(req.job.clone(), counter));
    };
    c.exec(
        "UPDATE jobs SET next_token = $2 WHERE name = $1 AND next_token = $3",
        &[req.job.as_str().into(), next.into(), counter.into()],
    )?;
    let now = clock.now_ms;
    let lease_ms = millis(req.lease);
    let mut values: Vec<Value> = vec![
        req.job.as_str().into(),
        slot.into(),
        token.into(),
        req.pass_id.as_str().into(),
    ];
    values.extend(holder_values(&req.holder));
    values.extend([
        argv_json(&req.argv).into(),
        req.cwd.as_str().into(),
        req.slots.into(),
        lease_ms.into(),
        millis(req.max_hold).into(),
        now.into(),
        now.into(),
        now.saturating_add(lease_ms).into(),
        clock.boot_ms().into(),
        clock.boot_ms().into(),
        req.containers.map(Engine::as_str).into(),
        req.max_idle.map(millis).into(),
        Value::Null,
    ]);
    c.exec(
        &format!(
            "INSERT INTO leases ({LEASE_COLS}) VALUES ({})",
            marks(1, values.len())
        ),
        &values,
    )?;
    Ok(Acquire::Acquired(LeaseKey {
        job: req.job.clone(),
        slot,
        token,
    }))
}

/// The queue rows of `job` as read now, in arrival order.
pub fn waiters_of(c: &mut dyn Conn, job: &str, clock: &Clock) -> Result<Vec<WaiterRow>> {
    let rows = c.query(
        &format!("SELECT {WAITER_COLS} FROM waiters WHERE job = $1 ORDER BY id"),
        &[job.into()],
    )?;
    Ok(rows.iter().map(|r| waiter_row(r, clock)).collect())
}

/// Which history rows (`h`) of a job (its `jobs` row, `j`) its counters
/// do not hold yet: those after its mark. Writers fold them in
/// (`fold_counters`); readers add them to what the counters hold.
pub const UNCOUNTED: &str = "h.job = j.name AND h.id > COALESCE(j.counted_id, 0)";

/// Count the job's history rows recorded after its mark (`jobs.counted_id`)
/// into its counters, and move the mark past them (`count_rows`, the one
/// place history becomes counters; `stats::fold_rows` is the one place it
/// becomes figures). Called under the job's lock by every writer of a
/// history row, before its row is pruned; rows an earlier jobrun recorded
/// without counting them are folded in by the next writer.
pub fn fold_counters(c: &mut dyn Conn, job: &str) -> Result<()> {
    // The mark and the rows after it by one statement: no row for a job
    // not known, one without an id where none is new. Counted here by
    // outcome, not by the statement: a GROUP BY took a sort to compile
    // into every pass, for the one row a pass adds.
    let found = c.query(
        &format!(
            "SELECT j.counted_id AS mark, h.id AS id, h.outcome AS outcome \
             FROM jobs j LEFT JOIN history h ON {UNCOUNTED} WHERE j.name = $1"
        ),
        &[job.into()],
    )?;
    let Some(mark) = found.first().map(|r| r.opt_int("mark").unwrap_or(0)) else {
        return Ok(());
    };
    let rows: Vec<(i64, &str)> = found
        .iter()
        .filter_map(|r| Some((r.opt_int("id")?, r.text_ref("outcome"))))
        .collect();
    count_rows(c, job, mark, &rows)
}

/// Count `rows` (the job's history rows after its counters' `mark`, each
/// id and outcome as read) into its counters, and move the mark past them.
pub fn count_rows(c: &mut dyn Conn, job: &str, mark: i64, rows: &[(i64, &str)]) -> Result<()> {
    let mut by_outcome: BTreeMap<&str, i64> = BTreeMap::new();
    let mut top = mark;
    for &(id, outcome) in rows {
        *by_outcome.entry(outcome).or_default() += 1;
        top = top.max(id);
    }
    for (outcome, n) in by_outcome {
        count_passes(c, job, outcome, n)?;
    }
    if top > mark {
        c.exec(
            "UPDATE jobs SET counted_id = $2 WHERE name = $1",
            &[job.into(), top.into()],
        )?;
    }
    Ok(())
}

/// Add `n` passes ended `outcome` to the job's counter, under the name
/// this jobrun gives the outcome (an earlier jobrun's `timed-out` rows are
/// `wait-expired`).
fn count_passes(c: &mut dyn Conn, job: &str, outcome: &str, n: i64) -> Result<()> {
    let outcome = Outcome::counted_name(outcome);
    c.exec(
        "INSERT INTO job_counters (job, outcome, passes) VALUES ($1, $2, $3) \
         ON CONFLICT (job, outcome) DO UPDATE SET passes = job_counters.passes + excluded.passes",
        &[job.into(), outcome.into(), n.into()],
    )?;
    Ok(())
}
