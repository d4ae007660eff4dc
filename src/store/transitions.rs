//! Every transition of the store, written once for both backends: each is
//! one transaction that reads the rows it needs, asks the core what they
//! mean, and writes with a compare-and-set on what it read.
//!
//! Transitions on a job first lock that job (PostgreSQL: its `jobs` row;
//! SQLite: the immediate transaction already holds the database's write
//! lock), so counting slots, evicting, promoting and drawing a token never
//! interleave with another process doing the same. The clock is the
//! store's, read inside the transaction.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rows::{
    argv_json, holder_values, lease_row, pause_row, waiter_row, window_row, HOLDER_COLS,
    LEASE_COLS, PAUSE_COLS, WAITER_COLS, WINDOW_COLS,
};
use super::sql::{marks, millis, Backend, Conn, Renew, RenewTarget, SqlStore, Value};
use super::stats::{forget_stats, read_stats};
use super::steps::{
    claim_window, declare, end_window, ensure_job, evict_all, evict_in, find_window, insert_pass,
    job_filter, meta, occupancy, pause_of, pauses_on, pinned_file, prune_output, still_pinned,
    take_slot, waiters_of, WindowFound, FORGOTTEN_TOKENS,
};
use super::{
    Acquire, AcquireRequest, Attempt, Claimed, Counter, Enqueue, Forget, Held, HistoryQuery,
    JobRow, Keep, Released, Result, Store, StorePin, Touch, ALL_JOBS,
};
use crate::policy::coalesce::{self, Invocation};
use crate::policy::containers::Engine;
use crate::policy::lease::{Clock, Eviction, LeaseKey, LeaseRow, WaiterDecision, WaiterRow};
use crate::policy::outcome::{PassRecord, Seen};
use crate::policy::pause::{self, Pause, PauseScope};
use crate::policy::slots::Turn;
use crate::policy::stats::Stats;
use crate::policy::window::WindowRow;
use crate::renewer::Renewal;

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
        pass: Option<(&PassRecord, Keep)>,
        pin: &StorePin,
    ) -> Result<Released> {
        pinned_file(pin)?;
        self.backend.copy_back_long();
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
                insert_pass(c, p, Some(keep), clock.now_ms, n == 0)?;
            }
            if n == 0 {
                return Ok(Released::NotOurs);
            }
            c.notify_waiters(&key.job)?;
            let queued = c.query(
                "SELECT 1 AS queued FROM waiters WHERE job = $1 LIMIT 1",
                &[key.job.as_str().into()],
            )?;
            Ok(Released::Freed {
                queued: !queued.is_empty(),
            })
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
        self.read_jobs(jobs)
    }

    fn record_pass(&mut self, p: &PassRecord, keep: Keep, pin: &StorePin) -> Result<()> {
        pinned_file(pin)?;
        self.backend.write(&mut |c| {
            still_pinned(c, pin)?;
            let clock = c.clock()?;
            ensure_job(c, &p.job, &clock)?;
            insert_pass(c, p, Some(keep), clock.now_ms, true)
        })
    }

    fn history(&mut self, q: &HistoryQuery) -> Result<Vec<PassRecord>> {
        self.read_history(q)
    }

    fn counters(&mut self, jobs: &[String]) -> Result<Vec<Counter>> {
        self.read_counters(jobs)
    }

    fn stats(&mut self, jobs: &[String]) -> Result<BTreeMap<String, Stats>> {
        self.backend.read(&mut |c| read_stats(c, jobs))
    }

    fn recent(&mut self, jobs: &[String], per_job: usize) -> Result<(i64, Vec<Vec<Seen>>)> {
        self.read_recent(jobs, per_job)
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
            forget_stats(c, job)?;
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
                c.lock_job(job.text_ref("job"))?;
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
            insert_pass(c, &pass, None, pass.ended_at_ms, true)?;
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

    fn during_command(&mut self) {
        self.backend.copy_back_long()
    }

    fn leave(&mut self) {
        self.backend.leave()
    }

    fn serve_one_pass(&mut self) {
        self.backend.serve_one_pass()
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
