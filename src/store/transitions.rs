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
    argv_json, holder_values, lease_row, pass_record, pause_row, waiter_row, window_row,
    HOLDER_COLS, LEASE_COLS, PASS_COLS, PAUSE_COLS, WAITER_COLS, WINDOW_COLS,
};
use super::sql::{marks, millis, Backend, Conn, Renew, RenewTarget, SqlStore, Value};
use super::steps::{
    claim_window, declare, end_window, ensure_job, evict_all, evict_in, find_window, insert_pass,
    job_filter, meta, occupancy, pause_of, pauses_on, pinned_file, prune_output, still_pinned,
    take_slot, waiters_of, WindowFound, FORGOTTEN_TOKENS,
};
use super::{
    Acquire, AcquireRequest, Attempt, Claimed, Counter, Enqueue, Forget, Held, HistoryQuery,
    JobRow, Result, Store, StorePin, Touch, ALL_JOBS,
};
use crate::policy::coalesce::{self, Invocation};
use crate::policy::containers::Engine;
use crate::policy::lease::{Clock, Eviction, LeaseKey, LeaseRow, WaiterDecision, WaiterRow};
use crate::policy::outcome::{Outcome, PassRecord};
use crate::policy::pause::{self, Pause, PauseScope};
use crate::policy::slots::Turn;
use crate::policy::watch::Declared;
use crate::policy::window::WindowRow;
use crate::renewer::Renewal;

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

/// Claim the window `found` names for `req`'s pass, in the transaction
/// that just took its slot.
fn claim_found(
    c: &mut dyn Conn,
    req: &AcquireRequest,
    found: Option<WindowFound>,
    clock: &Clock,
) -> Result<Option<Claimed>> {
    let (Some(WindowFound::Claim { key, attempt, row }), Some(ask)) = (found, &req.window) else {
        return Ok(None);
    };
    claim_window(c, req, (&key, attempt, row.as_ref()), ask.attempts, clock)?;
    Ok(Some(Claimed { key, attempt }))
}

impl<B: Backend> Store for SqlStore<B> {
    fn acquire(&mut self, req: &AcquireRequest, evict: &[Eviction]) -> Result<Attempt> {
        let mut evicted = Vec::new();
        let mut claimed = None;
        let result = self.backend.write(&mut |c| {
            claimed = None;
            let clock = c.clock()?;
            let counter = ensure_job(c, &req.job, &clock)?;
            declare(c, req)?;
            evicted = evict_all(c, &req.job, evict, &clock, &req.by())?;
            if let Some(p) = pause_of(c, &req.job)? {
                return Ok(Acquire::Paused(p));
            }
            let found = match &req.window {
                Some(ask) => match find_window(c, &req.job, ask, &clock)? {
                    WindowFound::Skip(why) => return Ok(why),
                    found => Some(found),
                },
                None => None,
            };
            let occ = occupancy(c, &req.job, Some(req.slots))?;
            if !occ.room_past_the_queue() {
                return Ok(Acquire::Full);
            }
            let got = take_slot(c, req, &occ, &clock, counter)?;
            claimed = claim_found(c, req, found, &clock)?;
            Ok(got)
        })?;
        Ok(Attempt {
            result,
            evicted,
            claimed,
        })
    }

    fn release(
        &mut self,
        key: &LeaseKey,
        pass: Option<(&PassRecord, u32)>,
        pin: &StorePin,
    ) -> Result<bool> {
        pinned_file(pin)?;
        self.backend.write(&mut |c| {
            still_pinned(c, pin)?;
            // The job first, then its rows, as every transition takes them.
            c.lock_job(&key.job)?;
            let n = c.exec(
                "DELETE FROM leases WHERE job = $1 AND slot = $2 AND token = $3",
                &[key.job.as_str().into(), key.slot.into(), key.token.into()],
            )?;
            if let Some((p, keep)) = pass {
                let clock = c.clock()?;
                if p.window.is_some() {
                    end_window(c, p, &clock)?;
                }
                insert_pass(c, p, Some(keep), clock.now_ms)?;
            }
            if n > 0 {
                c.notify_waiters(&key.job)?;
            }
            Ok(n > 0)
        })
    }

    fn evict(&mut self, job: &str, ev: &Eviction, by: &str) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            c.lock_job(job)?;
            let gone = evict_in(c, job, ev, &clock, by)?;
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

    fn record_pass(&mut self, p: &PassRecord, keep: u32, pin: &StorePin) -> Result<()> {
        pinned_file(pin)?;
        self.backend.write(&mut |c| {
            still_pinned(c, pin)?;
            let clock = c.clock()?;
            ensure_job(c, &p.job, &clock)?;
            insert_pass(c, p, Some(keep), clock.now_ms)
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

    fn counters(&mut self, jobs: &[String]) -> Result<Vec<Counter>> {
        self.backend.read(&mut |c| {
            let (filter, params) = job_filter("j.name", jobs, 1);
            let rows = c.query(
                &format!(
                    "SELECT k.job AS job, k.outcome AS outcome, k.passes AS n \
                     FROM job_counters k JOIN jobs j ON j.name = k.job WHERE {filter} \
                     UNION ALL \
                     SELECT j.name AS job, h.outcome AS outcome, count(*) AS n \
                     FROM jobs j JOIN history h \
                     ON h.job = j.name AND h.id > COALESCE(j.counted_id, 0) \
                     WHERE {filter} GROUP BY j.name, h.outcome"
                ),
                &params,
            )?;
            let mut sums = std::collections::BTreeMap::<(String, String), i64>::new();
            for r in &rows {
                let outcome = r.text("outcome");
                let outcome =
                    Outcome::parse(&outcome).map_or(outcome.clone(), |o| o.as_str().into());
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

    fn recent(&mut self, jobs: &[String], per_job: u32) -> Result<(i64, Vec<PassRecord>)> {
        self.backend.read(&mut |c| {
            let now = c.clock()?.now_ms;
            let mut out = Vec::new();
            for job in jobs {
                let rows = c.query(
                    &format!(
                        "SELECT {PASS_COLS} FROM history WHERE job = $1 ORDER BY id DESC LIMIT $2"
                    ),
                    &[job.as_str().into(), per_job.into()],
                )?;
                out.extend(rows.iter().map(pass_record));
            }
            Ok((now, out))
        })
    }

    fn touch(&mut self, job: &str, pass_id: &str, token: i64) -> Result<Touch> {
        self.backend.write(&mut |c| {
            let now = c.clock()?.now_ms;
            let n = c.exec(
                "UPDATE leases SET touched_ms = $4 WHERE job = $1 AND pass_id = $2 AND token = $3",
                &[job.into(), pass_id.into(), token.into(), now.into()],
            )?;
            if n > 0 {
                return Ok(Touch::Touched);
            }
            let rows = c.query(
                "SELECT token FROM leases WHERE job = $1 AND pass_id = $2",
                &[job.into(), pass_id.into()],
            )?;
            Ok(match rows.first() {
                Some(r) => Touch::StaleToken(r.int("token")),
                None => Touch::NotHeld,
            })
        })
    }

    fn progress(&mut self, key: &LeaseKey) -> Result<Option<i64>> {
        self.backend.read(&mut |c| {
            let rows = c.query(
                "SELECT touched_ms FROM leases WHERE job = $1 AND slot = $2 AND token = $3",
                &[key.job.as_str().into(), key.slot.into(), key.token.into()],
            )?;
            Ok(rows.first().and_then(|r| r.opt_int("touched_ms")))
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
            c.exec("DELETE FROM pass_output WHERE job = $1", &[job.into()])?;
            c.exec("DELETE FROM windows WHERE job = $1", &[job.into()])?;
            c.exec("DELETE FROM job_counters WHERE job = $1", &[job.into()])?;
            c.exec("DELETE FROM jobs WHERE name = $1", &[job.into()])?;
            Ok(Forget::Forgotten)
        })
    }

    fn keep_output(&mut self, job: &str, pass_id: &str, output: &[u8], total: u64) -> Result<()> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            c.exec(
                "INSERT INTO pass_output (pass_id, job, kept_ms, size, output) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (pass_id) DO UPDATE SET \
                 job = excluded.job, kept_ms = excluded.kept_ms, size = excluded.size, \
                 output = excluded.output",
                &[
                    pass_id.into(),
                    job.into(),
                    clock.now_ms.into(),
                    (output.len() as i64).into(),
                    output.into(),
                ],
            )?;
            prune_output(c, None)?;
            // The newest first (by the store's clock, then by history's
            // order): what the cap leaves room for stays.
            let rows = c.query(
                "SELECT o.pass_id, o.size FROM pass_output o \
                 LEFT JOIN history h ON h.pass_id = o.pass_id \
                 ORDER BY o.kept_ms DESC, h.id DESC",
                &[],
            )?;
            let mut held: u64 = 0;
            for r in rows {
                held = held.saturating_add(r.int("size").max(0) as u64);
                if held > total {
                    c.exec(
                        "DELETE FROM pass_output WHERE pass_id = $1",
                        &[r.text("pass_id").into()],
                    )?;
                }
            }
            Ok(())
        })
    }

    fn kept_output(&mut self, pass_id: &str) -> Result<Option<super::KeptOutput>> {
        self.backend.read(&mut |c| {
            let rows = c.query(
                "SELECT output FROM pass_output WHERE pass_id = $1",
                &[pass_id.into()],
            )?;
            Ok(rows.first().map(|r| super::KeptOutput {
                output: r.bytes("output"),
            }))
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
            declare(c, req)?;
            if let Some(exact) = coalesce {
                let queued = waiters_of(c, &req.job, &clock)?;
                let me = Invocation {
                    argv: &req.argv,
                    cwd: &req.cwd,
                    exact,
                    containers: req.containers,
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
                req.containers.map(Engine::as_str).into(),
            ]);
            let rows = c.query(
                &format!(
                    "INSERT INTO waiters (job, pass_id, {HOLDER_COLS}, argv, cwd, slots, \
                     lease_ms, arrived_ms, renewed_ms, expires_ms, renewed_boot_ms, \
                     containers) VALUES ({}) RETURNING id",
                    marks(1, values.len())
                ),
                &values,
            )?;
            Ok(Enqueue::Queued(
                rows.first().map(|r| r.int("id")).unwrap_or(0),
            ))
        })
    }

    fn promote(
        &mut self,
        id: i64,
        req: &AcquireRequest,
        evict: &[Eviction],
        pin: &StorePin,
    ) -> Result<Attempt> {
        pinned_file(pin)?;
        let mut evicted = Vec::new();
        let mut claimed = None;
        let result = self.backend.write(&mut |c| {
            still_pinned(c, pin)?;
            claimed = None;
            let clock = c.clock()?;
            let counter = ensure_job(c, &req.job, &clock)?;
            evicted = evict_all(c, &req.job, evict, &clock, &req.by())?;
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
            // Its turn: a window done meanwhile ends the waiter (it leaves
            // the queue itself).
            let found = match &req.window {
                Some(ask) => match find_window(c, &req.job, ask, &clock)? {
                    WindowFound::Skip(why) => return Ok(why),
                    found => Some(found),
                },
                None => None,
            };
            c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?;
            let got = take_slot(c, req, &occ, &clock, counter)?;
            claimed = claim_found(c, req, found, &clock)?;
            Ok(got)
        })?;
        Ok(Attempt {
            result,
            evicted,
            claimed,
        })
    }

    fn depart(&mut self, id: i64, pin: &StorePin) -> Result<bool> {
        pinned_file(pin)?;
        self.backend.write(&mut |c| {
            still_pinned(c, pin)?;
            let n = c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?;
            Ok(n > 0)
        })
    }

    fn remove_ghost(&mut self, id: i64, decision: WaiterDecision, by: &str) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            // The job first, then its rows, as every transition takes them.
            let job = c.query("SELECT job FROM waiters WHERE id = $1", &[id.into()])?;
            if let Some(job) = job.first() {
                c.lock_job(&job.text("job"))?;
            }
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
            // shows it alive); a dead one as it is.
            let n = match decision {
                WaiterDecision::Remove {
                    only_if_lapsed: true,
                } => c.exec(
                    "DELETE FROM waiters WHERE id = $1 AND renewed_ms = $2",
                    &[id.into(), row.stamps.renewed_ms.into()],
                )?,
                _ => c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?,
            };
            if n == 0 {
                return Ok(false);
            }
            let pass = PassRecord::abandoned_waiter(&row, decision.reason(), by, clock.now_ms);
            insert_pass(c, &pass, None, pass.ended_at_ms)?;
            Ok(true)
        })
    }

    fn identity(&mut self) -> Result<Option<String>> {
        self.backend.identity()
    }

    fn set_patience(&mut self, patience: Duration) {
        self.backend.set_patience(patience)
    }

    fn allow_checkpoints(&mut self) {
        self.backend.allow_checkpoints()
    }

    fn tidy(&mut self) {
        self.backend.tidy()
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

    fn windows(&mut self, jobs: &[String]) -> Result<Vec<WindowRow>> {
        self.backend.read(&mut |c| {
            let (filter, params) = job_filter("w.job", jobs, 1);
            let rows = c.query(
                &format!(
                    "SELECT {WINDOW_COLS} FROM windows w WHERE {filter} AND w.claimed_ms = \
                     (SELECT MAX(claimed_ms) FROM windows x WHERE x.job = w.job) \
                     ORDER BY w.job, w.window_key"
                ),
                &params,
            )?;
            let mut latest: Vec<WindowRow> = rows.iter().map(window_row).collect();
            latest.dedup_by(|a, b| a.job == b.job);
            Ok(latest)
        })
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
