//! The small SQL layer the store's transitions are written on, once, for
//! SQLite and PostgreSQL: values, rows read by column name, one open
//! transaction (`Conn`) and a connection that runs closures inside one
//! (`Backend`).
//!
//! Stores keep rows, not policy: a transition reads the rows it needs inside
//! its transaction, asks the core (`crate::policy`) what they mean, and
//! writes with a compare-and-set on what it read. No rule is written in SQL.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::Result;
use crate::policy::lease::Clock;
use crate::renewer::Renewal;

/// A value crossing the SQL boundary. Both schemas use 64-bit integers and
/// text, and bytes for a pass's kept output (BLOB, BYTEA).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Value {
        Value::Bytes(b.to_vec())
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

/// The column names of one result, shared by its rows.
#[derive(Debug)]
pub struct Columns(HashMap<String, usize>);

impl Columns {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Rc<Columns> {
        Rc::new(Columns(
            names
                .into_iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), i))
                .collect(),
        ))
    }
}

/// One row of a result, read by column name. A column the statement did
/// not select reads as NULL: the readers below say what a NULL means.
#[derive(Debug, Clone)]
pub struct Row {
    columns: Rc<Columns>,
    values: Vec<Value>,
}

impl Row {
    pub fn new(columns: Rc<Columns>, values: Vec<Value>) -> Row {
        Row { columns, values }
    }

    fn get(&self, col: &str) -> &Value {
        debug_assert!(self.columns.0.contains_key(col), "no column {col}");
        self.columns
            .0
            .get(col)
            .and_then(|i| self.values.get(*i))
            .unwrap_or(&Value::Null)
    }

    /// An integer column; 0 for NULL (columns read with `int` are NOT NULL).
    pub fn int(&self, col: &str) -> i64 {
        self.opt_int(col).unwrap_or(0)
    }

    pub fn opt_int(&self, col: &str) -> Option<i64> {
        match self.get(col) {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A text column; empty for NULL.
    pub fn text(&self, col: &str) -> String {
        self.text_ref(col).to_owned()
    }

    /// `text`, borrowed from the row.
    pub fn text_ref(&self, col: &str) -> &str {
        match self.get(col) {
            Value::Text(s) => s,
            _ => "",
        }
    }

    pub fn opt_text(&self, col: &str) -> Option<String> {
        match self.get(col) {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// A bytes column; empty for NULL.
    pub fn bytes(&self, col: &str) -> Vec<u8> {
        match self.get(col) {
            Value::Bytes(b) => b.clone(),
            Value::Text(s) => s.clone().into_bytes(),
            _ => Vec::new(),
        }
    }
}

/// A test seam: milliseconds added to the store's clock (wall and boot
/// alike) in every transaction of a store opened with it. Zero outside the
/// in-process store tests, which move time forward without waiting.
#[derive(Debug, Clone, Default)]
pub struct ClockOffset(Arc<AtomicI64>);

impl ClockOffset {
    pub fn ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Move the store's clock forward by `d`.
    #[cfg(test)]
    pub fn advance(&self, d: Duration) {
        self.0
            .fetch_add(d.as_millis() as i64, std::sync::atomic::Ordering::SeqCst);
    }

    /// Move the store's clock back by `d`.
    #[cfg(test)]
    pub fn advance_back(&self, d: Duration) {
        self.0
            .fetch_sub(d.as_millis() as i64, std::sync::atomic::Ordering::SeqCst);
    }

    /// `clock` moved by the offset.
    pub fn apply(&self, mut clock: Clock) -> Clock {
        let off = self.ms();
        clock.now_ms = clock.now_ms.saturating_add(off);
        if let Some((_, boot)) = clock.boot.as_mut() {
            *boot = boot.saturating_add(off);
        }
        clock
    }
}

/// One open transaction. Placeholders are `$1`, `$2`, ... in both dialects.
pub trait Conn {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64>;
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>>;
    /// Run `sql`, an INSERT of one row into a table keyed by `id`, and
    /// give the row's id (`None`: no row was made).
    fn insert_id(&mut self, sql: &str, params: &[Value]) -> Result<Option<i64>>;
    /// The store's clock.
    fn clock(&mut self) -> Result<Clock>;
    /// Serialise transitions of `job` against every other process, and
    /// read its fencing-token counter (`None`: the store has no such job).
    fn lock_job(&mut self, job: &str) -> Result<Option<i64>>;
    /// Tell waiters on every host that `job` may have room now, when this
    /// transaction commits (PostgreSQL: NOTIFY). Waiters poll as well, so
    /// a store without it only wakes them later.
    fn notify_waiters(&mut self, _job: &str) -> Result<()> {
        Ok(())
    }
    /// The database's identity as this transaction sees it, read the way
    /// `pinned` was (`Store::identity`); `None` where the file itself is
    /// the identity (SQLite: `StorePin::check_file`).
    fn identity(&mut self, _pinned: &str) -> Result<Option<String>> {
        Ok(None)
    }
}

/// A renewal as both stores run it: the compare-and-set on the row a
/// holder owns, and for a waiter whether it was promoted meanwhile. The
/// SQL is written once (`sql()`); how it runs differs: SQLite in one write
/// transaction, PostgreSQL as one statement in one round trip, with the
/// store's identity checked in the same statement.
#[derive(Debug, Clone)]
pub struct Renew {
    pub held: RenewTarget,
    pub lease_ms: i64,
}

#[derive(Debug, Clone)]
pub enum RenewTarget {
    Lease {
        job: String,
        slot: u32,
        token: i64,
    },
    Waiter {
        id: i64,
        job: String,
        pass_id: String,
    },
}

/// What a renewal found: the decider (`Found::renewal`) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The row was ours and is renewed.
    pub renewed: bool,
    /// (A waiter) its row became this pass's lease between two ticks.
    pub promoted: bool,
    /// The identity of the database renewed in, where the store has one
    /// (PostgreSQL); `None` once its tables are gone.
    pub identity: Option<String>,
}

impl Found {
    /// What a renewal found means, decided once for both stores: the store
    /// is still the pinned one (where it has an identity), then the row was
    /// ours, or (a waiter) it became our lease between two ticks, which is
    /// not a loss: the owner stops this renewer.
    pub fn renewal(&self, pinned: Option<&str>) -> Renewal {
        if let Some(pinned) = pinned {
            match &self.identity {
                None => {
                    return Renewal::StoreLost("jobrun's tables are gone from the database".into())
                }
                Some(now) if now != pinned => {
                    return Renewal::StoreLost(super::StorePin::another_database(now, pinned))
                }
                Some(_) => {}
            }
        }
        if self.renewed || self.promoted {
            Renewal::Renewed
        } else {
            Renewal::NotOurs
        }
    }
}

impl Renew {
    /// The compare-and-set update and its parameters: the row's key as
    /// `$1..`, the lease as the next. `now` and `boot` are the dialect's
    /// expressions for the new renewal stamps; their own parameters, if
    /// any, number from `next_param()`.
    pub fn update(&self, now: &str, boot: &str) -> (String, Vec<Value>) {
        let (table, cas, mut params): (_, _, Vec<Value>) = match &self.held {
            RenewTarget::Lease { job, slot, token } => (
                "leases",
                "job = $1 AND slot = $2 AND token = $3",
                vec![job.as_str().into(), (*slot).into(), (*token).into()],
            ),
            RenewTarget::Waiter { id, .. } => ("waiters", "id = $1", vec![(*id).into()]),
        };
        let lease = params.len() + 1;
        params.push(self.lease_ms.into());
        // expires_ms is written for jobruns that still read it; this one
        // ages rows by their renewal stamp and lease (`Ages::of`).
        let sql = format!(
            "UPDATE {table} SET renewed_ms = {now}, expires_ms = {now} + ${lease}, \
             renewed_boot_ms = {boot} WHERE {cas}"
        );
        (sql, params)
    }

    /// The number of the first parameter after `update`'s own.
    pub fn next_param(&self) -> usize {
        match self.held {
            RenewTarget::Lease { .. } => 5,
            RenewTarget::Waiter { .. } => 3,
        }
    }

    /// For a waiter: a query counting its promotion (`promoted`), with its
    /// parameters at `$first` and `$first+1`.
    pub fn promoted(&self, first: usize) -> Option<(String, Vec<Value>)> {
        let RenewTarget::Waiter { job, pass_id, .. } = &self.held else {
            return None;
        };
        Some((
            format!(
                "SELECT count(*) AS promoted FROM leases WHERE job = ${} AND pass_id = ${}",
                first,
                first + 1
            ),
            vec![job.as_str().into(), pass_id.as_str().into()],
        ))
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
    /// Run `renew` in the database whose identity was pinned as `pinned`
    /// (`None` where the file is the identity).
    fn renew(&mut self, renew: &Renew, pinned: Option<&str>) -> Result<Found>;
    /// See `Store::set_patience`.
    fn set_patience(&mut self, _patience: std::time::Duration) {}
    /// See `Store::allow_checkpoints`.
    fn allow_checkpoints(&mut self) {}
    /// See `Store::tidy`.
    fn tidy(&mut self) {}
    /// A long log copied back (SQLite): while the pass's command runs
    /// (`Store::during_command`), and just before a release's write, so
    /// that the write starts it over (`sqlite::CHECKPOINT_BYTES`).
    fn copy_back_long(&mut self) {}
    /// See `Store::leave`.
    fn leave(&mut self) {}
    /// See `Store::serve_one_pass`.
    fn serve_one_pass(&mut self) {}
}

/// A store over one backend.
pub struct SqlStore<B: Backend> {
    pub backend: B,
}

/// A duration in milliseconds as the store keeps it. Settings bound every
/// duration far below this; the bound only keeps the arithmetic total.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `$first, $first+1, ...` for `n` values, written into one string: a
/// text per value, joined, cost a pass 1% of its instructions (its lease
/// and its history row name 43 values).
pub fn marks(first: usize, n: usize) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(n * 5);
    for i in first..first + n {
        let sep = if i > first { ", " } else { "" };
        // Writing into a String cannot fail.
        let _ = write!(out, "{sep}${i}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_number_each_value_from_the_first() {
        assert_eq!(marks(1, 0), "");
        assert_eq!(marks(1, 1), "$1");
        assert_eq!(marks(8, 4), "$8, $9, $10, $11");
        assert_eq!(marks(99, 2), "$99, $100");
        let many = marks(1, 1000);
        assert!(many.starts_with("$1, $2, ") && many.ends_with(", $999, $1000"));
        assert_eq!(many.split(", ").count(), 1000);
    }

    #[test]
    fn what_a_renewal_found_decides_its_result() {
        let found = |renewed, promoted, identity: Option<&str>| Found {
            renewed,
            promoted,
            identity: identity.map(str::to_string),
        };
        let lost = |r: Renewal| matches!(r, Renewal::StoreLost(_));
        // A file store has no identity to check.
        assert_eq!(found(true, false, None).renewal(None), Renewal::Renewed);
        assert_eq!(found(false, true, None).renewal(None), Renewal::Renewed);
        assert_eq!(found(false, false, None).renewal(None), Renewal::NotOurs);
        // A database: the one pinned, another, or one without jobrun's tables.
        let pin = Some("db/1");
        assert_eq!(found(true, false, pin).renewal(pin), Renewal::Renewed);
        assert_eq!(found(false, false, pin).renewal(pin), Renewal::NotOurs);
        assert!(lost(found(true, false, Some("db/2")).renewal(pin)));
        assert!(lost(found(false, false, None).renewal(pin)));
    }
}
