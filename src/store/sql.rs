//! The store's transitions written once, over a small SQL backend trait that
//! SQLite and PostgreSQL both implement.
//!
//! Every public operation is one transaction. Transitions on a job first
//! lock that job (PostgreSQL: its `jobs` row; SQLite: the immediate
//! transaction already holds the database's write lock), so counting slots,
//! evicting, promoting and taking a token can never interleave with another
//! process doing the same. The clock is the store's: `now_ms` is read inside
//! the transaction from the backend.

use std::time::Duration;

use super::{
    Acquire, AcquireRequest, Attempt, Enqueue, Forget, Held, HistoryQuery, JobRow, PauseInfo,
    Result, Store, StorePin,
};
use crate::policy::lease::{EvictIf, Eviction, Holder, LeaseKey, LeaseRow, Proc, WaiterRow};
use crate::policy::outcome::{Outcome, PassRecord};
use crate::policy::pause::Pause;
use crate::renewer::Renewal;

/// A value crossing the SQL boundary. Both schemas use only 64-bit integers
/// and text, so two variants (and NULL) cover everything.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
}

impl Value {
    fn int(&self) -> i64 {
        match self {
            Value::Int(i) => *i,
            _ => 0,
        }
    }
    fn opt_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
    fn text(&self) -> String {
        match self {
            Value::Text(s) => s.clone(),
            _ => String::new(),
        }
    }
    fn opt_text(&self) -> Option<String> {
        match self {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}
impl From<u32> for Value {
    fn from(i: u32) -> Value {
        Value::Int(i as i64)
    }
}
impl From<i32> for Value {
    fn from(i: i32) -> Value {
        Value::Int(i as i64)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(o: Option<T>) -> Value {
        o.map(Into::into).unwrap_or(Value::Null)
    }
}

/// The store's clock, read once per transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clock {
    /// Wall time in Unix milliseconds: the server's on PostgreSQL, this
    /// host's on SQLite. Shown to operators; judges rows of other boots.
    pub now_ms: i64,
    /// On a one-machine store: this boot's id and its `CLOCK_BOOTTIME` in
    /// milliseconds. Rows recorded on the same boot are aged on it, a clock
    /// that never jumps.
    pub boot: Option<(String, i64)>,
}

impl Clock {
    fn boot_id(&self) -> Value {
        self.boot.as_ref().map(|(id, _)| id.clone()).into()
    }

    fn boot_ms(&self) -> Value {
        self.boot.as_ref().map(|(_, ms)| *ms).into()
    }

    /// The floor of a new fencing token: the wall clock in microseconds.
    /// An earlier store (deleted, re-created, restored from a backup) could
    /// only have handed out a larger token by taking slots faster than one
    /// per microsecond over its whole life.
    fn token_floor(&self) -> i64 {
        self.now_ms.saturating_mul(1000)
    }

    /// Milliseconds since `wall`, or since `boot` when the row was recorded
    /// on this boot.
    fn since(&self, row_boot: &str, wall: i64, boot: Option<i64>) -> i64 {
        match (&self.boot, boot) {
            (Some((id, now)), Some(then)) if id == row_boot => now.saturating_sub(then),
            _ => self.now_ms.saturating_sub(wall),
        }
    }
}

/// SQL that holds when a row's lease has lapsed: on the boot clock for rows
/// of this boot, on the wall clock for the others. `$n`, `$n+1` and `$n+2`
/// are the clock parameters (`clock_params`).
fn lapsed_sql(n: usize) -> String {
    format!(
        "(CASE WHEN boot_id = ${b} AND renewed_boot_ms IS NOT NULL \
         THEN renewed_boot_ms + lease_ms <= ${m} ELSE expires_ms <= ${n} END)",
        b = n + 1,
        m = n + 2
    )
}

/// SQL that holds when a lease is past its max hold, with the same clocks.
fn past_max_hold_sql(n: usize) -> String {
    format!(
        "(CASE WHEN boot_id = ${b} AND acquired_boot_ms IS NOT NULL \
         THEN acquired_boot_ms + max_hold_ms <= ${m} ELSE acquired_ms + max_hold_ms <= ${n} END)",
        b = n + 1,
        m = n + 2
    )
}

/// What `notify_waiters` names when every job may have room (`resume
/// --all`); not a valid job name (it has a control character).
pub const ALL_JOBS: &str = "\u{1}all";

/// One open transaction. Placeholders are `$1`, `$2`, ... in both dialects.
pub trait Conn {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64>;
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>>;
    /// The store's clock.
    fn clock(&mut self) -> Result<Clock>;
    /// Serialise transitions of `job` against every other process.
    fn lock_job(&mut self, job: &str) -> Result<()>;
    /// Tell waiters on every host that `job` may have room now, when this
    /// transaction commits (PostgreSQL: NOTIFY). Waiters poll as well, so
    /// a store without it only wakes them later.
    fn notify_waiters(&mut self, _job: &str) -> Result<()> {
        Ok(())
    }
}

/// A connection that can run a closure inside one transaction.
pub trait Backend: Send {
    /// See `Store::identity`.
    fn identity(&mut self) -> Result<Option<String>>;
    /// A write transaction (SQLite: BEGIN IMMEDIATE).
    fn write<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T>;
    /// A read-only transaction.
    fn read<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T>;
    /// A backend's own way to renew `held` in a database pinned as
    /// `pinned` (see `Store::renew_held`); `None` to use the generic one.
    fn renew_pinned(
        &mut self,
        _held: &Held,
        _lease: Duration,
        _pinned: &str,
    ) -> Option<Result<Renewal>> {
        None
    }
}

/// Version 1 of the schema, written once for both stores: `{int}` is the
/// store's 64-bit integer type and `{serial}` its auto-numbered primary
/// key. Later versions are each store's own migrations.
pub fn schema_v1(int: &str, serial: &str) -> String {
    SCHEMA_V1
        .replace("{holder}", HOLDER_V1)
        .replace("{int}", int)
        .replace("{serial}", serial)
}

const SCHEMA_V1: &str = r#"
CREATE TABLE jobs (
    name TEXT PRIMARY KEY,
    next_token {int} NOT NULL,
    created_ms {int} NOT NULL
);
CREATE TABLE leases (
    job TEXT NOT NULL,
    slot {int} NOT NULL,
    token {int} NOT NULL,
    {holder}
    max_hold_ms {int} NOT NULL,
    acquired_ms {int} NOT NULL,
    renewed_ms {int} NOT NULL,
    expires_ms {int} NOT NULL,
    PRIMARY KEY (job, slot)
);
CREATE TABLE waiters (
    id {serial},
    job TEXT NOT NULL,
    {holder}
    arrived_ms {int} NOT NULL,
    renewed_ms {int} NOT NULL,
    expires_ms {int} NOT NULL
);
CREATE INDEX waiters_by_job ON waiters (job, id);
CREATE TABLE pauses (
    job TEXT PRIMARY KEY,
    reason TEXT,
    since_ms {int} NOT NULL
);
CREATE TABLE history (
    id {serial},
    job TEXT NOT NULL,
    pass_id TEXT NOT NULL,
    token {int},
    slot {int},
    host TEXT NOT NULL,
    pid {int} NOT NULL,
    started_ms {int} NOT NULL,
    ended_ms {int} NOT NULL,
    duration_ms {int} NOT NULL,
    exit_code {int},
    signal {int},
    outcome TEXT NOT NULL
);
CREATE INDEX history_by_job ON history (job, id);
"#;

/// What a lease row and a queue row both record: the pass, who holds or
/// waits, and what it runs.
const HOLDER_V1: &str = "pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_ns TEXT NOT NULL,
    wrapper_pid {int} NOT NULL,
    wrapper_start {int} NOT NULL,
    child_pid {int},
    child_start {int},
    lock_path TEXT,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    slots {int} NOT NULL,
    lease_ms {int} NOT NULL,";

pub struct SqlStore<B: Backend> {
    pub backend: B,
}

const HOLDER_COLS: &str =
    "host, boot_id, pid_ns, wrapper_pid, wrapper_start, child_pid, child_start";
const LEASE_COLS: &str = "job, slot, token, pass_id, host, boot_id, pid_ns, wrapper_pid, \
     wrapper_start, child_pid, child_start, argv, cwd, slots, lease_ms, max_hold_ms, \
     acquired_ms, renewed_ms, expires_ms, acquired_boot_ms, renewed_boot_ms";
const WAITER_COLS: &str = "id, job, pass_id, host, boot_id, pid_ns, wrapper_pid, \
     wrapper_start, child_pid, child_start, argv, cwd, slots, lease_ms, 0, \
     arrived_ms, renewed_ms, expires_ms, renewed_boot_ms";

fn holder_values(h: &Holder) -> Vec<Value> {
    vec![
        h.host.as_str().into(),
        h.boot_id.as_str().into(),
        h.pid_ns.as_str().into(),
        h.wrapper.pid.into(),
        Value::Int(h.wrapper.start as i64),
        h.child.map(|c| c.pid).into(),
        h.child.map(|c| c.start as i64).into(),
    ]
}

fn holder_at(r: &[Value], i: usize) -> Holder {
    let child = match (r[i + 5].opt_int(), r[i + 6].opt_int()) {
        (Some(pid), Some(start)) => Some(Proc {
            pid: pid as i32,
            start: start as u64,
        }),
        _ => None,
    };
    Holder {
        host: r[i].text(),
        boot_id: r[i + 1].text(),
        pid_ns: r[i + 2].text(),
        wrapper: Proc {
            pid: r[i + 3].int() as i32,
            start: r[i + 4].int() as u64,
        },
        child,
    }
}

fn argv_json(argv: &[String]) -> String {
    serde_json::to_string(argv).unwrap_or_else(|_| "[]".into())
}

fn argv_of(v: &Value) -> Vec<String> {
    serde_json::from_str(&v.text()).unwrap_or_default()
}

fn lease_row(r: &[Value], clock: &Clock) -> LeaseRow {
    let holder = holder_at(r, 4);
    let lease_ms = r[14].int();
    let acquired = r[16].int();
    let renewed_ago_ms = clock.since(&holder.boot_id, r[17].int(), r[20].opt_int());
    LeaseRow {
        job: r[0].text(),
        slot: r[1].int() as u32,
        token: r[2].int(),
        pass_id: r[3].text(),
        argv: argv_of(&r[11]),
        cwd: r[12].text(),
        slots: r[13].int() as u32,
        lease_ms,
        max_hold_ms: r[15].int(),
        acquired_at_ms: acquired,
        held_ms: clock.since(&holder.boot_id, acquired, r[19].opt_int()),
        renewed_ago_ms,
        expires_in_ms: lease_ms.saturating_sub(renewed_ago_ms),
        holder,
    }
}

fn waiter_row(r: &[Value], clock: &Clock) -> WaiterRow {
    let holder = holder_at(r, 3);
    let arrived = r[15].int();
    let renewed_ago_ms = clock.since(&holder.boot_id, r[16].int(), r[18].opt_int());
    WaiterRow {
        id: r[0].int(),
        job: r[1].text(),
        pass_id: r[2].text(),
        argv: argv_of(&r[10]),
        cwd: r[11].text(),
        slots: r[12].int() as u32,
        arrived_at_ms: arrived,
        waited_ms: clock.now_ms.saturating_sub(arrived),
        expires_in_ms: r[13].int().saturating_sub(renewed_ago_ms),
        holder,
    }
}

/// `WHERE` fragment selecting the named jobs, or all of them.
fn job_filter(col: &str, jobs: &[String], first: usize) -> (String, Vec<Value>) {
    if jobs.is_empty() {
        return ("1=1".into(), vec![]);
    }
    let marks: Vec<String> = (0..jobs.len()).map(|i| format!("${}", first + i)).collect();
    (
        format!("{col} IN ({})", marks.join(", ")),
        jobs.iter().map(|j| j.as_str().into()).collect(),
    )
}

fn ensure_job(c: &mut dyn Conn, job: &str, clock: &Clock) -> Result<()> {
    c.exec(
        "INSERT INTO jobs (name, next_token, created_ms) VALUES ($1, $3, $2) \
         ON CONFLICT (name) DO NOTHING",
        &[job.into(), clock.now_ms.into(), clock.token_floor().into()],
    )?;
    c.lock_job(job)
}

fn pause_of(c: &mut dyn Conn, job: &str) -> Result<Option<PauseInfo>> {
    let rows = c.query(
        "SELECT job, reason, since_ms, owner FROM pauses WHERE job = $1 OR job = '*' \
         ORDER BY since_ms, owner LIMIT 1",
        &[job.into()],
    )?;
    Ok(rows.first().map(|r| PauseInfo {
        all: r[0].text() == "*",
        reason: r[1].opt_text(),
        since_ms: r[2].int(),
        owner: owner_of(&r[3]),
    }))
}

/// The owner column: '' is a pause without an owner.
fn owner_of(v: &Value) -> Option<String> {
    Some(v.text()).filter(|o| !o.is_empty())
}

fn pause_rows(c: &mut dyn Conn, filter: &str, params: &[Value]) -> Result<Vec<Pause>> {
    let rows = c.query(
        &format!(
            "SELECT job, owner, reason, since_ms FROM pauses WHERE {filter} \
             ORDER BY job, since_ms, owner"
        ),
        params,
    )?;
    Ok(rows
        .iter()
        .map(|r| Pause {
            job: r[0].text(),
            owner: owner_of(&r[1]),
            reason: r[2].opt_text(),
            since_ms: r[3].int(),
        })
        .collect())
}

/// A duration in milliseconds as the store keeps it. Settings bound every
/// duration far below this; the bound only keeps the arithmetic total.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The clock parameters of `lapsed_sql` and `past_max_hold_sql`.
fn clock_params(clock: &Clock) -> [Value; 3] {
    [clock.now_ms.into(), clock.boot_id(), clock.boot_ms()]
}

fn evict_in(c: &mut dyn Conn, job: &str, ev: &Eviction, clock: &Clock) -> Result<bool> {
    let cond = match ev.condition {
        EvictIf::TokenMatches => String::new(),
        EvictIf::Lapsed => format!(" AND {}", lapsed_sql(4)),
        // Past its max hold and lapsed: a live holder stops renewing at its
        // max hold, so the slot is taken only once its lease has run out.
        EvictIf::Forfeited => format!(" AND {} AND {}", lapsed_sql(4), past_max_hold_sql(4)),
    };
    let mut params: Vec<Value> = vec![job.into(), ev.slot.into(), ev.token.into()];
    if ev.condition != EvictIf::TokenMatches {
        params.extend(clock_params(clock));
    }
    let n = c.exec(
        &format!("DELETE FROM leases WHERE job = $1 AND slot = $2 AND token = $3{cond}"),
        &params,
    )?;
    Ok(n > 0)
}

/// Record a pass and prune its job's history to the last `keep` passes.
/// The pass ends now on the store's clock (one clock per store: ages shown
/// later are judged on it), and started its duration before.
fn insert_pass(c: &mut dyn Conn, p: &PassRecord, keep: u32, clock: &Clock) -> Result<()> {
    let ended = clock.now_ms;
    let started = ended.saturating_sub(p.duration_ms.max(0));
    c.exec(
        "INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
             duration_ms, exit_code, signal, outcome, waited_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        &[
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
        ],
    )?;
    c.exec(
        "DELETE FROM history WHERE job = $1 AND id <= \
             (SELECT id FROM history WHERE job = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
        &[p.job.as_str().into(), keep.into()],
    )?;
    Ok(())
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

/// The slot accounting for a job, read inside the transaction.
struct Occupancy {
    held: Vec<u32>,
    /// The smallest `--slots` among live holders, waiters and the asker.
    limit: u32,
    /// Waiter ids in arrival order.
    queue: Vec<i64>,
}

impl Occupancy {
    fn read(c: &mut dyn Conn, job: &str, asked: u32) -> Result<Occupancy> {
        let leases = c.query(
            "SELECT slot, slots FROM leases WHERE job = $1 ORDER BY slot",
            &[job.into()],
        )?;
        let waiters = c.query(
            "SELECT id, slots FROM waiters WHERE job = $1 ORDER BY id",
            &[job.into()],
        )?;
        let limit = leases
            .iter()
            .chain(waiters.iter())
            .map(|r| r[1].int() as u32)
            .chain(std::iter::once(asked))
            .min()
            .unwrap_or(asked)
            .max(1);
        Ok(Occupancy {
            held: leases.iter().map(|r| r[0].int() as u32).collect(),
            limit,
            queue: waiters.iter().map(|r| r[0].int()).collect(),
        })
    }

    fn free(&self) -> usize {
        (self.limit as usize).saturating_sub(self.held.len())
    }

    fn lowest_free_slot(&self) -> u32 {
        (0..).find(|s| !self.held.contains(s)).unwrap_or(0)
    }
}

/// Take the lowest free slot of `occ` for `req`: the job's next token.
fn take_slot(
    c: &mut dyn Conn,
    req: &AcquireRequest,
    occ: &Occupancy,
    clock: &Clock,
) -> Result<Acquire> {
    let slot = occ.lowest_free_slot();
    // Strictly larger than any token before it, in this store or in one
    // this machine had at the same path before (see `Clock::token_floor`).
    let rows = c.query(
        "UPDATE jobs SET next_token = \
         (CASE WHEN next_token > $2 THEN next_token ELSE $2 END) + 1 \
         WHERE name = $1 RETURNING next_token - 1",
        &[req.job.as_str().into(), clock.token_floor().into()],
    )?;
    let token = rows.first().map(|r| r[0].int()).unwrap_or(0);
    let now = clock.now_ms;
    let lease_ms = millis(req.lease);
    let mut params: Vec<Value> = vec![
        req.job.as_str().into(),
        slot.into(),
        token.into(),
        req.pass_id.as_str().into(),
    ];
    params.extend(holder_values(&req.holder));
    params.extend([
        argv_json(&req.argv).into(),
        req.cwd.as_str().into(),
        req.slots.into(),
        lease_ms.into(),
        millis(req.max_hold).into(),
        now.into(),
        now.into(),
        now.saturating_add(lease_ms).into(),
        clock.boot_ms(),
        clock.boot_ms(),
    ]);
    let marks: Vec<String> = (1..=params.len()).map(|i| format!("${i}")).collect();
    c.exec(
        &format!(
            "INSERT INTO leases ({LEASE_COLS}) VALUES ({})",
            marks.join(", ")
        ),
        &params,
    )?;
    Ok(Acquire::Acquired(LeaseKey {
        job: req.job.clone(),
        slot,
        token,
    }))
}

impl<B: Backend> SqlStore<B> {
    /// The rows of `jobs` (all for `ALL_JOBS`) that `cols_from` selects
    /// ("COLUMNS FROM table"), by job and then `order`, each made by `row`
    /// with the store's clock.
    fn rows_of<T>(
        &mut self,
        jobs: &[String],
        cols_from: &str,
        order: &str,
        row: fn(&[Value], &Clock) -> T,
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
            ensure_job(c, &req.job, &clock)?;
            evicted = evict_all(c, &req.job, evict, &clock)?;
            if let Some(p) = pause_of(c, &req.job)? {
                return Ok(Acquire::Paused(p));
            }
            let occ = Occupancy::read(c, &req.job, req.slots)?;
            // A pass that does not wait never jumps the queue.
            if occ.free() <= occ.queue.len() {
                return Ok(Acquire::Full);
            }
            take_slot(c, req, &occ, &clock)
        })?;
        Ok(Attempt { result, evicted })
    }

    fn renew(&mut self, key: &LeaseKey, lease: Duration) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            let n = c.exec(
                "UPDATE leases SET renewed_ms = $4, expires_ms = $5, renewed_boot_ms = $6 \
                 WHERE job = $1 AND slot = $2 AND token = $3",
                &[
                    key.job.as_str().into(),
                    key.slot.into(),
                    key.token.into(),
                    now.into(),
                    now.saturating_add(millis(lease)).into(),
                    clock.boot_ms(),
                ],
            )?;
            Ok(n > 0)
        })
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
            let (filter, params) = job_filter("j.name", jobs, 1);
            // The last pass that took a slot (`Outcome::took_slot`).
            let took_slot: Vec<String> = Outcome::ALL
                .iter()
                .filter(|o| o.took_slot())
                .map(|o| format!("'{}'", o.as_str()))
                .collect();
            let rows = c.query(
                &format!(
                    "SELECT j.name, h.outcome, h.duration_ms, h.ended_ms FROM jobs j \
                     LEFT JOIN history h ON h.id = (SELECT MAX(id) FROM history \
                       WHERE job = j.name AND outcome IN ({})) \
                     WHERE {filter} ORDER BY j.name",
                    took_slot.join(", ")
                ),
                &params,
            )?;
            Ok(rows
                .iter()
                .map(|r| JobRow {
                    name: r[0].text(),
                    last_outcome: r[1].opt_text(),
                    last_duration_ms: r[2].opt_int(),
                    last_ended_ms_ago: r[3].opt_int().map(|e| now - e),
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
                    "SELECT job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
                     duration_ms, exit_code, signal, outcome, waited_ms FROM history WHERE {} \
                     ORDER BY started_ms DESC, id DESC LIMIT $1",
                    conds.join(" AND ")
                ),
                &params,
            )?;
            Ok(rows
                .iter()
                .map(|r| PassRecord {
                    job: r[0].text(),
                    pass_id: r[1].text(),
                    token: r[2].opt_int(),
                    slot: r[3].opt_int().map(|s| s as u32),
                    host: r[4].text(),
                    pid: r[5].int() as i32,
                    started_at_ms: r[6].int(),
                    ended_at_ms: r[7].int(),
                    duration_ms: r[8].int(),
                    exit_code: r[9].opt_int().map(|x| x as i32),
                    signal: r[10].opt_int().map(|x| x as i32),
                    outcome: Outcome::parse(&r[11].text()).unwrap_or(Outcome::Failed),
                    waited_ms: r[12].opt_int(),
                })
                .collect())
        })
    }

    fn forget(&mut self, job: &str) -> Result<Forget> {
        self.backend.write(&mut |c| {
            let known = c.query("SELECT name FROM jobs WHERE name = $1", &[job.into()])?;
            if known.is_empty() {
                return Ok(Forget::Unknown);
            }
            c.lock_job(job)?;
            let count = |c: &mut dyn Conn, table: &str| -> Result<usize> {
                let rows = c.query(
                    &format!("SELECT count(*) FROM {table} WHERE job = $1"),
                    &[job.into()],
                )?;
                Ok(rows.first().map_or(0, |r| r[0].int() as usize))
            };
            let held = count(c, "leases")?;
            if held > 0 {
                return Ok(Forget::Held(held));
            }
            let queued = count(c, "waiters")?;
            if queued > 0 {
                return Ok(Forget::Queued(queued));
            }
            let paused = pause_rows(c, "job = $1 OR job = '*'", &[job.into()])?;
            if !paused.is_empty() {
                return Ok(Forget::Paused(paused));
            }
            // The fencing tokens of a job forgotten and seen again still
            // grow: a new jobs row starts at the clock's floor
            // (`Clock::token_floor`), above every token handed out before.
            c.exec("DELETE FROM history WHERE job = $1", &[job.into()])?;
            c.exec("DELETE FROM jobs WHERE name = $1", &[job.into()])?;
            Ok(Forget::Forgotten)
        })
    }

    fn pause(
        &mut self,
        job: Option<&str>,
        owner: Option<&str>,
        reason: Option<&str>,
    ) -> Result<()> {
        let key = job.unwrap_or("*");
        let owner = owner.unwrap_or("");
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            if job.is_some() {
                ensure_job(c, key, &clock)?;
            }
            c.exec(
                "INSERT INTO pauses (job, owner, reason, since_ms) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (job, owner) DO UPDATE SET reason = excluded.reason",
                &[key.into(), owner.into(), reason.into(), now.into()],
            )?;
            Ok(())
        })
    }

    fn resume(&mut self, job: Option<&str>, owner: Option<&str>) -> Result<u64> {
        let owner = owner.unwrap_or("");
        self.backend.write(&mut |c| {
            let n = match job {
                Some(j) => c.exec(
                    "DELETE FROM pauses WHERE job = $1 AND owner = $2",
                    &[j.into(), owner.into()],
                )?,
                None => c.exec("DELETE FROM pauses WHERE owner = $1", &[owner.into()])?,
            };
            if n > 0 {
                c.notify_waiters(job.unwrap_or(ALL_JOBS))?;
            }
            Ok(n)
        })
    }

    fn pauses(&mut self) -> Result<Vec<Pause>> {
        self.backend.read(&mut |c| pause_rows(c, "1=1", &[]))
    }

    fn enqueue(&mut self, req: &AcquireRequest, coalesce: bool) -> Result<Enqueue> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            ensure_job(c, &req.job, &clock)?;
            let argv = argv_json(&req.argv);
            if coalesce {
                let rows = c.query(
                    "SELECT pass_id FROM waiters WHERE job = $1 AND argv = $2 AND cwd = $3 \
                     ORDER BY id LIMIT 1",
                    &[
                        req.job.as_str().into(),
                        argv.as_str().into(),
                        req.cwd.as_str().into(),
                    ],
                )?;
                if let Some(r) = rows.first() {
                    return Ok(Enqueue::Coalesced(r[0].text()));
                }
            }
            let lease_ms = millis(req.lease);
            let mut params: Vec<Value> = vec![req.job.as_str().into(), req.pass_id.as_str().into()];
            params.extend(holder_values(&req.holder));
            params.extend([
                argv.into(),
                req.cwd.as_str().into(),
                req.slots.into(),
                lease_ms.into(),
                now.into(),
                now.into(),
                now.saturating_add(lease_ms).into(),
                clock.boot_ms(),
            ]);
            let marks: Vec<String> = (1..=params.len()).map(|i| format!("${i}")).collect();
            let rows = c.query(
                &format!(
                    "INSERT INTO waiters (job, pass_id, {HOLDER_COLS}, argv, cwd, slots, \
                     lease_ms, arrived_ms, renewed_ms, expires_ms, renewed_boot_ms) \
                     VALUES ({}) RETURNING id",
                    marks.join(", ")
                ),
                &params,
            )?;
            Ok(Enqueue::Queued(
                rows.first().map(|r| r[0].int()).unwrap_or(0),
            ))
        })
    }

    fn promote(&mut self, id: i64, req: &AcquireRequest, evict: &[Eviction]) -> Result<Attempt> {
        let mut evicted = Vec::new();
        let result = self.backend.write(&mut |c| {
            let clock = c.clock()?;
            ensure_job(c, &req.job, &clock)?;
            evicted = evict_all(c, &req.job, evict, &clock)?;
            let occ = Occupancy::read(c, &req.job, req.slots)?;
            let Some(rank) = occ.queue.iter().position(|w| *w == id) else {
                return Ok(Acquire::Gone);
            };
            if let Some(p) = pause_of(c, &req.job)? {
                return Ok(Acquire::Paused(p));
            }
            if rank >= occ.free() {
                return Ok(Acquire::Behind(rank as u32 + 1));
            }
            c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?;
            take_slot(c, req, &occ, &clock)
        })?;
        Ok(Attempt { result, evicted })
    }

    fn renew_waiter(&mut self, id: i64, lease: Duration) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let now = clock.now_ms;
            let n = c.exec(
                "UPDATE waiters SET renewed_ms = $2, expires_ms = $3, renewed_boot_ms = $4 \
                 WHERE id = $1",
                &[
                    id.into(),
                    now.into(),
                    now.saturating_add(millis(lease)).into(),
                    clock.boot_ms(),
                ],
            )?;
            Ok(n > 0)
        })
    }

    fn remove_waiter(&mut self, id: i64, only_if_lapsed: bool) -> Result<bool> {
        self.backend.write(&mut |c| {
            let clock = c.clock()?;
            let n = if only_if_lapsed {
                let mut params = vec![id.into()];
                params.extend(clock_params(&clock));
                c.exec(
                    &format!("DELETE FROM waiters WHERE id = $1 AND {}", lapsed_sql(2)),
                    &params,
                )?
            } else {
                c.exec("DELETE FROM waiters WHERE id = $1", &[id.into()])?
            };
            Ok(n > 0)
        })
    }

    fn identity(&mut self) -> Result<Option<String>> {
        self.backend.identity()
    }

    fn renew_held(&mut self, held: &Held, lease: Duration, pin: &StorePin) -> Result<Renewal> {
        if let StorePin::Database(pinned) = pin {
            if let Some(renewed) = self.backend.renew_pinned(held, lease, pinned) {
                return renewed;
            }
        }
        if let Err(why) = pin.check(self)? {
            return Ok(Renewal::StoreLost(why));
        }
        let ours = match held {
            Held::Lease(key) => self.renew(key, lease)?,
            Held::Waiter { id, job, pass_id } => {
                self.renew_waiter(*id, lease)? || {
                    // Promoted between two ticks: the row became this
                    // pass's lease, which is not lost; the owner stops
                    // this renewer.
                    let leases = self.leases(std::slice::from_ref(job))?;
                    leases.iter().any(|l| &l.pass_id == pass_id)
                }
            }
        };
        Ok(if ours {
            Renewal::Renewed
        } else {
            Renewal::NotOurs
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
