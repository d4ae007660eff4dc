//! Every transition of the store, written once for both backends: each is
//! one transaction that reads the rows it needs, asks the core what they
//! mean, and writes with a compare-and-set on what it read.
//!
//! Transitions on a job first lock that job (PostgreSQL: its `jobs` row;
//! SQLite: the immediate transaction already holds the database's write
//! lock), so counting slots, evicting, promoting and drawing a token never
//! interleave with another process doing the same. The clock is the
//! store's, read inside the transaction.

use std::time::Duration;

use super::rows::{
    argv_json, holder_values, lease_row, pass_record, pause_row, waiter_row, HOLDER_COLS,
    LEASE_COLS, PASS_COLS, PAUSE_COLS, WAITER_COLS,
};
use super::sql::{marks, millis, Backend, Conn, Renew, RenewTarget, SqlStore, Value};
use super::{
    Acquire, AcquireRequest, Attempt, Enqueue, Forget, Held, HistoryQuery, JobRow, PauseInfo,
    Result, Store, StoreError, StorePin, ALL_JOBS,
};
use crate::policy::coalesce::{self, Invocation};
use crate::policy::lease::{self, Clock, Eviction, LeaseKey, LeaseRow, WaiterDecision, WaiterRow};
use crate::policy::outcome::{Outcome, PassRecord};
use crate::policy::pause::{self, Pause, PauseScope};
use crate::policy::slots::{Occupancy, Turn};
use crate::renewer::Renewal;

/// `WHERE` fragment selecting the named jobs, or all of them.
fn job_filter(col: &str, jobs: &[String], first: usize) -> (String, Vec<Value>) {
    if jobs.is_empty() {
        return ("1=1".into(), vec![]);
    }
    (
        format!("{col} IN ({})", marks(first, jobs.len())),
        jobs.iter().map(|j| j.as_str().into()).collect(),
    )
}

/// The meta key under which the store keeps the largest fencing-token
/// counter of every job forgotten from it.
const FORGOTTEN_TOKENS: &str = "forgotten_tokens";

fn meta(c: &mut dyn Conn, key: &str) -> Result<Option<i64>> {
    let rows = c.query(
        "SELECT value FROM jobrun_meta WHERE key = $1",
        &[key.into()],
    )?;
    Ok(rows.first().map(|r| r.int("value")))
}

/// Lock the job's row, creating it first if the store does not know the
/// job yet: its fencing-token counter, as it stands.
fn ensure_job(c: &mut dyn Conn, job: &str, clock: &Clock) -> Result<i64> {
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

/// Every pause that could hold `job` back: its own and those on all jobs.
fn pauses_on(c: &mut dyn Conn, job: &str) -> Result<Vec<Pause>> {
    let rows = c.query(
        &format!("SELECT {PAUSE_COLS} FROM pauses WHERE job = $1 OR job = $2"),
        &[job.into(), PauseScope::ALL_KEY.into()],
    )?;
    Ok(rows.iter().map(pause_row).collect())
}

/// The pause holding `job` back, if one stands (the core picks it).
fn pause_of(c: &mut dyn Conn, job: &str) -> Result<Option<PauseInfo>> {
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
fn occupancy(c: &mut dyn Conn, job: &str, asked: Option<u32>) -> Result<Occupancy> {
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
fn lease_in(c: &mut dyn Conn, job: &str, slot: u32, clock: &Clock) -> Result<Option<LeaseRow>> {
    let rows = c.query(
        &format!("SELECT {LEASE_COLS} FROM leases WHERE job = $1 AND slot = $2"),
        &[job.into(), slot.into()],
    )?;
    Ok(rows.first().map(|r| lease_row(r, clock)))
}

/// Apply one eviction decided outside the transaction, if the core says it
/// still holds for the row as read now; remove the row with a
/// compare-and-set on what was read. Whether a row was removed.
fn evict_in(c: &mut dyn Conn, job: &str, ev: &Eviction, clock: &Clock) -> Result<bool> {
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
    Ok(n > 0)
}

/// Apply the evictions whose conditions still hold; return those that
/// removed a row.
fn evict_all(
    c: &mut dyn Conn,
    job: &str,
    evict: &[Eviction],
    clock: &Clock,
) -> Result<Vec<Eviction>> {
    let mut done = Vec::new();
    for ev in evict {
        if evict_in(c, job, ev, clock)? {
            done.push(ev.clone());
        }
    }
    Ok(done)
}

/// Record a pass and prune its job's history to the last `keep` passes.
/// The pass ends now on the store's clock (one clock per store: ages shown
/// later are judged on it), and started its duration before.
fn insert_pass(c: &mut dyn Conn, p: &PassRecord, keep: u32, clock: &Clock) -> Result<()> {
    let ended = clock.now_ms;
    let started = ended.saturating_sub(p.duration_ms.max(0));
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
    ];
    c.exec(
        &format!(
            "INSERT INTO history ({PASS_COLS}) VALUES ({})",
            marks(1, values.len())
        ),
        &values,
    )?;
    c.exec(
        "DELETE FROM history WHERE job = $1 AND id <= \
             (SELECT id FROM history WHERE job = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        &[p.job.as_str().into(), keep.into()],
    )?;
    Ok(())
}

/// Take the lowest free slot of `occ` for `req`, under the job's next
/// fencing token (`lease::draw_token`), drawn from `counter` as read under
/// the job's lock.
fn take_slot(
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
fn waiters_of(c: &mut dyn Conn, job: &str, clock: &Clock) -> Result<Vec<WaiterRow>> {
    let rows = c.query(
        &format!("SELECT {WAITER_COLS} FROM waiters WHERE job = $1 ORDER BY id"),
        &[job.into()],
    )?;
    Ok(rows.iter().map(|r| waiter_row(r, clock)).collect())
}

impl<B: Backend> SqlStore<B> {
    /// The rows of `jobs` (all when empty) that `cols_from` selects
    /// ("COLUMNS FROM table"), by job and then `order`, each made by `row`
    /// with the store's clock.
    fn rows_of<T>(
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
}

impl<B: Backend> Store for SqlStore<B> {
    fn acquire(&mut self, req: &AcquireRequest, evict: &[Eviction]) -> Result<Attempt> {
        let mut evicted = Vec::new();
        let result = self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let counter = ensure_job(c, &req.job, &clock)?;
            evicted = evict_all(c, &req.job, evict, &clock)?;
            if let Some(p) = pause_of(c, &req.job)? {
                return Ok(Acquire::Paused(p));
            }
            let occ = occupancy(c, &req.job, Some(req.slots))?;
            if !occ.room_past_the_queue() {
                return Ok(Acquire::Full);
            }
            take_slot(c, req, &occ, &clock, counter)
        })?;
        Ok(Attempt { result, evicted })
    }

    fn release(&mut self, key: &LeaseKey, pass: Option<(&PassRecord, u32)>) -> Result<bool> {
        self.backend.write(&mut |c| {
            let n = c.exec(
                "DELETE FROM leases WHERE job = $1 AND slot = $2 AND token = $3",
                &[key.job.as_str().into(), key.slot.into(), key.token.into()],
            )?;
            if let Some((p, keep)) = pass {
                let clock = c.clock()?;
                insert_pass(c, p, keep, &clock)?;
            }
            if n > 0 {
                c.notify_waiters(&key.job)?;
            }
            Ok(n > 0)
        })
    }

    fn evict(&mut self, job: &str, ev: &Eviction) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            c.lock_job(job)?;
            let gone = evict_in(c, job, ev, &clock)?;
            if gone {
                c.notify_waiters(job)?;
            }
            Ok(gone)
        })
    }

    fn leases(&mut self, jobs: &[String]) -> Result<Vec<LeaseRow>> {
        self.rows_of(
            jobs,
            &format!("{LEASE_COLS} FROM leases"),
            "slot",
            lease_row,
        )
    }

    fn jobs(&mut self, jobs: &[String]) -> Result<Vec<JobRow>> {
        self.backend.read(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            let (filter, mut params) = job_filter("j.name", jobs, 1);
            // The last pass that took a slot (`Outcome::took_slot`).
            let took_slot: Vec<&str> = Outcome::ALL
                .iter()
                .filter(|o| o.took_slot())
                .map(|o| o.as_str())
                .collect();
            let first = params.len() + 1;
            params.extend(took_slot.iter().map(|o| Value::from(*o)));
            let rows = c.query(
                &format!(
                    "SELECT j.name AS name, h.outcome AS outcome, h.duration_ms AS duration_ms, \
                     h.ended_ms AS ended_ms FROM jobs j \
                     LEFT JOIN history h ON h.id = (SELECT MAX(id) FROM history \
                       WHERE job = j.name AND outcome IN ({})) \
                     WHERE {filter} ORDER BY j.name",
                    marks(first, took_slot.len())
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
                })
                .collect())
        })
    }

    fn record_pass(&mut self, p: &PassRecord, keep: u32) -> Result<()> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            ensure_job(c, &p.job, &clock)?;
            insert_pass(c, p, keep, &clock)
        })
    }

    fn history(&mut self, q: &HistoryQuery) -> Result<Vec<PassRecord>> {
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
                conds.push(format!("outcome = ${}", params.len()));
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

    fn forget(&mut self, job: &str) -> Result<Forget> {
        self.backend.write(&mut |c| {
            let Some(counter) = c.lock_job(job)? else {
                return Ok(Forget::Unknown);
            };
            let count = |c: &mut dyn Conn, table: &str| -> Result<usize> {
                let rows = c.query(
                    &format!("SELECT count(*) AS n FROM {table} WHERE job = $1"),
                    &[job.into()],
                )?;
                Ok(rows.first().map_or(0, |r| r.int("n") as usize))
            };
            let held = count(c, "leases")?;
            if held > 0 {
                return Ok(Forget::Held(held));
            }
            let queued = count(c, "waiters")?;
            if queued > 0 {
                return Ok(Forget::Queued(queued));
            }
            let pauses = pauses_on(c, job)?;
            let paused: Vec<Pause> = pause::standing(&pauses, job).into_iter().cloned().collect();
            if !paused.is_empty() {
                return Ok(Forget::Paused(paused));
            }
            // The fencing tokens of a job forgotten and seen again still
            // grow: the store keeps the largest counter it forgot, and a
            // new job starts above it (`lease::first_counter`).
            let kept = meta(c, FORGOTTEN_TOKENS)?.unwrap_or(0).max(counter);
            c.exec(
                "INSERT INTO jobrun_meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[FORGOTTEN_TOKENS.into(), kept.into()],
            )?;
            c.exec("DELETE FROM history WHERE job = $1", &[job.into()])?;
            c.exec("DELETE FROM jobs WHERE name = $1", &[job.into()])?;
            Ok(Forget::Forgotten)
        })
    }

    fn pause(
        &mut self,
        scope: &PauseScope,
        owner: Option<&str>,
        reason: Option<&str>,
    ) -> Result<()> {
        let owner = owner.unwrap_or("");
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            if let PauseScope::Job(job) = scope {
                ensure_job(c, job, &clock)?;
            }
            c.exec(
                "INSERT INTO pauses (job, owner, reason, since_ms) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (job, owner) DO UPDATE SET reason = excluded.reason",
                &[
                    scope.key().into(),
                    owner.into(),
                    reason.into(),
                    clock.now_ms.into(),
                ],
            )?;
            Ok(())
        })
    }

    fn resume(&mut self, scope: Option<&PauseScope>, owner: Option<&str>) -> Result<u64> {
        let owner = owner.unwrap_or("");
        self.backend.write(&mut |c| {
            let n = match scope {
                Some(s) => c.exec(
                    "DELETE FROM pauses WHERE job = $1 AND owner = $2",
                    &[s.key().into(), owner.into()],
                )?,
                None => c.exec("DELETE FROM pauses WHERE owner = $1", &[owner.into()])?,
            };
            if n > 0 {
                let woken = match scope {
                    Some(PauseScope::Job(job)) => job.as_str(),
                    _ => ALL_JOBS,
                };
                c.notify_waiters(woken)?;
            }
            Ok(n)
        })
    }

    fn pauses(&mut self) -> Result<Vec<Pause>> {
        self.backend.read(&mut |c| {
            let rows = c.query(
                &format!("SELECT {PAUSE_COLS} FROM pauses ORDER BY job, since_ms, owner"),
                &[],
            )?;
            Ok(rows.iter().map(pause_row).collect())
        })
    }

    fn enqueue(&mut self, req: &AcquireRequest, coalesce: Option<bool>) -> Result<Enqueue> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            ensure_job(c, &req.job, &clock)?;
            if let Some(exact) = coalesce {
                let queued = waiters_of(c, &req.job, &clock)?;
                let me = Invocation {
                    argv: &req.argv,
                    cwd: &req.cwd,
                    exact,
                };
                if let Some(w) = coalesce::joins(&queued, me) {
                    return Ok(Enqueue::Coalesced(w.pass_id.clone()));
                }
            }
            let lease_ms = millis(req.lease);
            let mut values: Vec<Value> = vec![req.job.as_str().into(), req.pass_id.as_str().into()];
            values.extend(holder_values(&req.holder));
            values.extend([
                argv_json(&req.argv).into(),
                req.cwd.as_str().into(),
                req.slots.into(),
                lease_ms.into(),
                now.into(),
                now.into(),
                now.saturating_add(lease_ms).into(),
                clock.boot_ms().into(),
            ]);
            let rows = c.query(
                &format!(
                    "INSERT INTO waiters (job, pass_id, {HOLDER_COLS}, argv, cwd, slots, \
                     lease_ms, arrived_ms, renewed_ms, expires_ms, renewed_boot_ms) \
                     VALUES ({}) RETURNING id",
                    marks(1, values.len())
                ),
                &values,
            )?;
            Ok(Enqueue::Queued(
                rows.first().map(|r| r.int("id")).unwrap_or(0),
            ))
        })
    }

    fn promote(&mut self, id: i64, req: &AcquireRequest, evict: &[Eviction]) -> Result<Attempt> {
        let mut evicted = Vec::new();
        let result = self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let counter = ensure_job(c, &req.job, &clock)?;
            evicted = evict_all(c, &req.job, evict, &clock)?;
            let occ = occupancy(c, &req.job, Some(req.slots))?;
            let turn = occ.turn_of(id);
            if turn == Turn::Gone {
                return Ok(Acquire::Gone);
            }
            if let Some(p) = pause_of(c, &req.job)? {
                return Ok(Acquire::Paused(p));
            }
            if let Turn::Behind(position) = turn {
                return Ok(Acquire::Behind(position));
            }
            c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?;
            take_slot(c, req, &occ, &clock, counter)
        })?;
        Ok(Attempt { result, evicted })
    }

    fn remove_waiter(&mut self, id: i64, decision: WaiterDecision) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let rows = c.query(
                &format!("SELECT {WAITER_COLS} FROM waiters WHERE id = $1"),
                &[id.into()],
            )?;
            let Some(row) = rows.first().map(|r| waiter_row(r, &clock)) else {
                return Ok(false);
            };
            if !decision.still_holds(&row) {
                return Ok(false);
            }
            // Removed because it lapsed: only as read (a renewal in between
            // shows it alive). Its own departure, or a dead waiter: as is.
            let n = match decision {
                WaiterDecision::Remove {
                    only_if_lapsed: true,
                } => c.exec(
                    "DELETE FROM waiters WHERE id = $1 AND renewed_ms = $2",
                    &[id.into(), row.stamps.renewed_ms.into()],
                )?,
                _ => c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?,
            };
            Ok(n > 0)
        })
    }

    fn identity(&mut self) -> Result<Option<String>> {
        self.backend.identity()
    }

    fn renew_held(&mut self, held: &Held, lease: Duration, pin: &StorePin) -> Result<Renewal> {
        // A file store's pin is checked without a connection: a renewal
        // must never go to a new file at the pinned path.
        if let Err(why) = pin.check_file() {
            return Ok(Renewal::StoreLost(why));
        }
        let renew = Renew {
            held: match held {
                Held::Lease(k) => RenewTarget::Lease {
                    job: k.job.clone(),
                    slot: k.slot,
                    token: k.token,
                },
                Held::Waiter { id, job, pass_id } => RenewTarget::Waiter {
                    id: *id,
                    job: job.clone(),
                    pass_id: pass_id.clone(),
                },
            },
            lease_ms: millis(lease),
        };
        let pinned = pin.database();
        let found = self.backend.renew(&renew, pinned)?;
        Ok(found.renewal(pinned))
    }

    fn waiters(&mut self, jobs: &[String]) -> Result<Vec<WaiterRow>> {
        self.rows_of(
            jobs,
            &format!("{WAITER_COLS} FROM waiters"),
            "id",
            waiter_row,
        )
    }
}
