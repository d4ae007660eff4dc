//! The fleet store: PostgreSQL, for passes that run on several machines.
//!
//! The same transitions as SQLite (they are written once, in `sql.rs`); what
//! differs is here: expiry is judged on the server's clock so hosts with
//! skewed clocks agree, a job's transitions serialise on its `jobs` row
//! (`SELECT ... FOR UPDATE`), and a dead server cannot hang a caller: every
//! connection has a connect timeout and a statement timeout.

use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, NoTls, SimpleQueryMessage};

use super::pgconn::{redact, resolve, scrub, url_secrets};
use super::pgerr::{busy_server, map_err, refused, scrub_all};
use super::schema::{self, Dialect, Fit, Marker};
use super::sql::{Backend, ClockOffset, Columns, Conn, Found, Renew, Row, SqlStore, Value};
use super::{Result, StoreError};
use crate::policy::lease::Clock;

/// A dead or unreachable server must fail a tick well inside one lease
/// window (the shortest lease is 3 s, the renew interval 1 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The server's clock in milliseconds: one clock for a fleet.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// The database's identity (`Store::identity`): the cluster's system
/// identifier and the stamp the schema got at creation.
const IDENTITY: &str = "(SELECT system_identifier::text FROM pg_control_system()) || '/' || stamp";

/// The identity where the role may not read the cluster's identifier
/// (pg_control_system() may be closed to a least-privilege role): the
/// stamp alone still tells a re-created store apart.
const STAMP_IDENTITY: &str = "'cluster/' || stamp";

/// The rows a simple query returned, each column as text (`None` for NULL).
fn text_rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

pub struct PgBackend {
    /// See `ClockOffset`: zero but in the in-process store tests.
    pub offset: ClockOffset,
    pub(super) client: Client,
    pub(super) shown: String,
    /// Secrets of the connection (wherever they came from), scrubbed from
    /// every message.
    secrets: Vec<String>,
}

pub type PgStore = SqlStore<PgBackend>;

/// How long a start keeps trying a server that is busy (`busy_server`:
/// "too many clients", or no answer within the connect timeout) before it
/// fails: a fleet starting many passes at once rides out a full server
/// instead of failing them all.
pub const TOO_MANY_CLIENTS_BUDGET: Duration = Duration::from_secs(10);

impl PgStore {
    pub fn open(url: &str) -> Result<PgStore> {
        Self::open_opts(url, true, TOO_MANY_CLIENTS_BUDGET)
    }

    /// Connect, retrying a busy server for at most `budget` with jittered,
    /// growing pauses, and check the schema: with `create`, a database
    /// without jobrun's schema gets it; without, it is
    /// `StoreError::Missing` and is left as it is.
    pub fn open_opts(url: &str, create: bool, budget: Duration) -> Result<PgStore> {
        let mut store = PgStore::connect(url, budget)?;
        store.backend.init(create)?;
        Ok(store)
    }

    /// Only connect, retrying a busy server for at most `budget`: for a
    /// store whose schema this process has already checked.
    pub fn connect(url: &str, budget: Duration) -> Result<PgStore> {
        let shown = redact(url);
        let bad = |e: String| StoreError::Other(shown.clone(), scrub(&e, url));
        let params = resolve(url).map_err(&bad)?;
        let shown = params.shown();
        let mut secrets = params.secrets();
        secrets.extend(url_secrets(url));
        let mut config = super::pgconfig::config(&params).map_err(&bad)?;
        let tls = super::pgtls::connector(&params).map_err(&bad)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // The statement timeout is the server's; a server that vanished
        // from the network cannot enforce it. TCP keepalives and the user
        // timeout make the client give up on a silent peer within ~3 s.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(1));
        config.keepalives_interval(Duration::from_secs(1));
        config.keepalives_retries(2);
        config.tcp_user_timeout(Duration::from_secs(3));
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        let client = loop {
            let got = match &tls {
                Some(tls) => config.connect(tls.clone()),
                None => config.connect(NoTls),
            };
            match got {
                Ok(c) => break c,
                Err(e) => {
                    let busy = busy_server(&e);
                    let err = refused(&shown, e, &secrets, &params);
                    let left = budget.saturating_sub(started.elapsed());
                    if !busy || left.is_zero() {
                        return Err(err);
                    }
                    std::thread::sleep(crate::random::jittered(pause).min(left));
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        };
        Ok(SqlStore {
            backend: PgBackend {
                offset: ClockOffset::default(),
                client,
                shown,
                secrets,
            },
        })
    }
}

/// Statement timeout and lock timeout (2 s each) for the transaction just
/// begun: a dead server or a held row fails a renewal tick well inside the
/// window instead of hanging it. Set per transaction (not per session), so a pooler in transaction mode that
/// hands each transaction another server connection keeps them.
const BEGIN: &str = "BEGIN; SET LOCAL statement_timeout = 2000; SET LOCAL lock_timeout = 2000";

/// A read's transaction: as `BEGIN`, on one snapshot for all its
/// statements, so a listing read in two (kept figures, then the history
/// rows after their mark) never misses a pass committed between them.
const BEGIN_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ; \
     SET LOCAL statement_timeout = 2000; SET LOCAL lock_timeout = 2000";

impl PgBackend {
    /// Create or migrate the schema (`schema::STEPS`), in one transaction
    /// that two first users racing take in turns. Only a store behind this
    /// jobrun is written: one that is current (or newer, within what this
    /// jobrun may read) is only read, so a role with no CREATE privilege
    /// (SELECT, INSERT, UPDATE, DELETE on the tables) works once an owner
    /// has brought the schema up to date.
    fn migrate(&mut self) -> Result<()> {
        let shown = self.shown.clone();
        self.run_tx(&mut |c| {
            c.query(
                "SELECT pg_advisory_xact_lock(4242424242)::text AS locked",
                &[],
            )?;
            c.batch("CREATE TABLE IF NOT EXISTS jobrun_schema (version BIGINT NOT NULL)")?;
            let (version, min_reader) = stored_version(c)?.unwrap_or((0, 0));
            if schema::fit(version, min_reader) == Fit::TooNew {
                return Err(StoreError::TooNew(schema::too_new(&shown, min_reader)));
            }
            for step in schema::after(version) {
                c.batch(&step.sql(Dialect::Postgres))?;
                match schema::marker_of(step.version) {
                    Marker::Legacy(v) => {
                        c.exec(
                            "INSERT INTO jobrun_schema (version) VALUES ($1)",
                            &[v.into()],
                        )?;
                    }
                    Marker::Meta { schema, min_reader } => {
                        let set = schema::set_meta_sql(Dialect::Postgres);
                        c.exec(set, &["schema".into(), schema.into()])?;
                        c.exec(set, &["min_reader".into(), min_reader.into()])?;
                    }
                }
            }
            if version < super::stats::FOLDED_AT {
                super::stats::fold_every_job(c)?;
            }
            Ok(())
        })
    }

    /// Check the schema, creating or migrating it when `create` (an
    /// existing store is always brought forward): one round trip when it
    /// is current, as it is for every pass but the first.
    fn init(&mut self, create: bool) -> Result<()> {
        let read = self
            .simple(
                "SELECT 'legacy' AS key, max(version)::text AS value FROM jobrun_schema \
                 UNION ALL SELECT key, value::text FROM jobrun_meta",
            )
            .ok()
            .map(|rows| {
                let get = |k: &str| {
                    rows.iter()
                        .find(|r| r.first().and_then(|c| c.as_deref()) == Some(k))
                        .and_then(|r| r.get(1).cloned().flatten())
                        .and_then(|v| v.parse::<i64>().ok())
                };
                schema::version_of(
                    get("legacy").unwrap_or(0),
                    Some((get("schema"), get("min_reader"))),
                )
            });
        let found = match read {
            Some(v) => Some(v),
            // No meta table yet (a store of an earlier jobrun), or no store.
            None => self.run_tx(&mut |c| stored_version(c))?,
        };
        match found.map(|(v, min)| (schema::fit(v, min), min)) {
            Some((Fit::Current | Fit::NewerReadable, _)) => Ok(()),
            Some((Fit::TooNew, min)) => Err(StoreError::TooNew(schema::too_new(&self.shown, min))),
            None if !create => Err(StoreError::Missing(self.shown.clone())),
            _ => self.migrate(),
        }
    }

    /// `sql` sent as one simple query, in a transaction with jobrun's
    /// timeouts: one round trip. The text of every row's columns.
    fn simple(
        &mut self,
        sql: &str,
    ) -> std::result::Result<Vec<Vec<Option<String>>>, postgres::Error> {
        match self.client.simple_query(&format!("{BEGIN}; {sql}; COMMIT")) {
            Ok(messages) => Ok(text_rows(&messages)),
            Err(e) => {
                // The transaction is left aborted; end it.
                let _ = self.client.batch_execute("ROLLBACK");
                Err(e)
            }
        }
    }

    fn fail(&self, e: postgres::Error) -> StoreError {
        scrub_all(map_err(&self.shown, e), &self.secrets)
    }

    /// Renew in one round trip: one statement (bound parameters, run in
    /// its own transaction) that reads the database's identity, renews
    /// only while it is `pinned`, and for a waiter whose row is gone counts
    /// its promotion. Its lock wait is bounded like every transaction's
    /// (2 s, set before the row is locked); a renewer that connects for each
    /// tick costs the server a connection and one exchange.
    fn renew_statement(&mut self, renew: &Renew, pinned: &str) -> Result<Found> {
        let identity = if pinned.starts_with("cluster/") {
            STAMP_IDENTITY
        } else {
            IDENTITY
        };
        let next = renew.next_param();
        // statement_timestamp(): one instant for both stamps.
        let now = format!("((extract(epoch from statement_timestamp()) * 1000)::bigint + ${next})");
        let (update, mut params) = renew.update(&now, "NULL");
        params.push(self.offset.ms().into());
        params.push(pinned.into());
        let (promoted, more) = renew
            .promoted(next + 2)
            .map(|(sql, p)| (format!("({sql})"), p))
            .unwrap_or_else(|| ("0".into(), vec![]));
        params.extend(more);
        let sql = format!(
            "WITH timeouts AS MATERIALIZED \
               (SELECT set_config('lock_timeout', '2000', true) AS lock_timeout), \
             store AS MATERIALIZED \
               (SELECT {identity} AS id FROM jobrun_store, timeouts LIMIT 1), \
             renewed AS ({update} AND EXISTS (SELECT 1 FROM store WHERE id = ${pin}) \
               RETURNING 1 AS one) \
             SELECT (SELECT id FROM store) AS identity, \
               (SELECT count(*) FROM renewed) AS renewed, {promoted} AS promoted",
            pin = next + 1
        );
        let args = typed(&params);
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            args.iter().map(|(p, t)| (p.as_sql(), t.clone())).collect();
        let rows = match self.client.query_typed(&sql, &typed) {
            Ok(rows) => rows,
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                return Ok(Found {
                    renewed: false,
                    promoted: false,
                    identity: None,
                })
            }
            Err(e) => return Err(self.fail(e)),
        };
        let row = rows.first().map(row_of);
        Ok(Found {
            identity: row.as_ref().and_then(|r| r.opt_text("identity")),
            renewed: row.as_ref().is_some_and(|r| r.int("renewed") > 0),
            promoted: row.as_ref().is_some_and(|r| r.int("promoted") > 0),
        })
    }

    fn run<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run_tx(&mut |c| f(c))
    }

    /// One transaction: begun with its timeouts, committed when `f`
    /// succeeds, rolled back otherwise.
    fn run_tx<T>(&mut self, f: &mut dyn FnMut(&mut PgTx) -> Result<T>) -> Result<T> {
        self.begun_with(BEGIN, f)
    }

    /// `run_tx`, begun by `begin`.
    fn begun_with<T>(
        &mut self,
        begin: &str,
        f: &mut dyn FnMut(&mut PgTx) -> Result<T>,
    ) -> Result<T> {
        let shown = self.shown.clone();
        let secrets = &self.secrets;
        let fail = |e: postgres::Error| scrub_all(map_err(&shown, e), secrets);
        // The server's clock comes back with the BEGIN, in one round trip.
        let begun = match self
            .client
            .simple_query(&format!("{begin}; SELECT {NOW_MS}::text"))
        {
            Ok(begun) => begun,
            Err(e) => {
                let _ = self.client.batch_execute("ROLLBACK");
                return Err(fail(e));
            }
        };
        let now_ms = text_rows(&begun)
            .into_iter()
            .find_map(|r| r.into_iter().next().flatten())
            .and_then(|v| v.parse().ok());
        let mut conn = PgTx {
            client: &mut self.client,
            shown: &shown,
            now_ms,
            offset: &self.offset,
        };
        match f(&mut conn) {
            Ok(out) => {
                self.client.batch_execute("COMMIT").map_err(fail)?;
                Ok(out)
            }
            Err(e) => {
                let _ = self.client.batch_execute("ROLLBACK");
                Err(scrub_all(e, secrets))
            }
        }
    }
}

/// The stored (version, oldest reader), or `None` before the first use: the
/// old marker, and the meta table once it exists (`schema::version_of`).
fn stored_version(c: &mut dyn Conn) -> Result<Option<(i64, i64)>> {
    let tables = c.query(
        "SELECT (to_regclass('jobrun_schema') IS NOT NULL)::int AS legacy, \
         (to_regclass('jobrun_meta') IS NOT NULL)::int AS meta",
        &[],
    )?;
    let has = |col: &str| tables.first().is_some_and(|r| r.int(col) == 1);
    if !has("legacy") {
        return Ok(None);
    }
    let legacy = c
        .query("SELECT max(version) AS v FROM jobrun_schema", &[])?
        .first()
        .and_then(|r| r.opt_int("v"))
        .unwrap_or(0);
    let meta = if has("meta") {
        let rows = c.query("SELECT key, value FROM jobrun_meta", &[])?;
        let get = |k: &str| {
            rows.iter()
                .find(|r| r.text("key") == k)
                .map(|r| r.int("value"))
        };
        Some((get("schema"), get("min_reader")))
    } else {
        None
    };
    Ok(Some(schema::version_of(legacy, meta)))
}

impl Backend for PgBackend {
    fn identity(&mut self) -> Result<Option<String>> {
        let rows = match self.simple(&format!("SELECT {IDENTITY} FROM jobrun_store LIMIT 1")) {
            Ok(rows) => rows,
            Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => self
                .simple(&format!(
                    "SELECT {STAMP_IDENTITY} FROM jobrun_store LIMIT 1"
                ))
                .map_err(|e| self.fail(e))?,
            Err(e) => return Err(self.fail(e)),
        };
        let found = rows
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().flatten());
        Ok(Some(found.unwrap_or_else(|| "cluster/".into())))
    }

    fn renew(&mut self, renew: &Renew, pinned: Option<&str>) -> Result<Found> {
        self.renew_statement(renew, pinned.unwrap_or_default())
    }

    fn write<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(f)
    }

    fn read<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.begun_with(BEGIN_READ, &mut |c| f(c))
    }
}

/// A row of the server's, with its values as the store reads them (its
/// columns are BIGINT, TEXT and BYTEA; anything else is read as text).
fn row_of(row: &postgres::Row) -> Row {
    let columns = Columns::new(row.columns().iter().map(|c| c.name()));
    let values = row
        .columns()
        .iter()
        .enumerate()
        .map(|(i, col)| {
            let t = col.type_();
            if *t == Type::INT8 {
                row.get::<_, Option<i64>>(i).map_or(Value::Null, Value::Int)
            } else if *t == Type::INT4 {
                row.get::<_, Option<i32>>(i)
                    .map_or(Value::Null, |x| Value::Int(x as i64))
            } else if *t == Type::BYTEA {
                row.get::<_, Option<Vec<u8>>>(i)
                    .map_or(Value::Null, Value::Bytes)
            } else {
                row.get::<_, Option<String>>(i)
                    .map_or(Value::Null, Value::Text)
            }
        })
        .collect();
    Row::new(columns, values)
}

pub struct PgTx<'a> {
    client: &'a mut Client,
    shown: &'a str,
    /// The server's clock when the transaction began.
    now_ms: Option<i64>,
    offset: &'a ClockOffset,
}

/// A NULL of whatever type the statement expects.
#[derive(Debug)]
struct Null;

impl ToSql for Null {
    fn to_sql(
        &self,
        _: &Type,
        _: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        Ok(IsNull::Yes)
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    postgres::types::to_sql_checked!();
}

enum Param {
    Null(Null),
    I64(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Null(n) => n,
            Param::I64(i) => i,
            Param::Text(s) => s,
            Param::Bytes(b) => b,
        }
    }
}

impl PgTx<'_> {
    fn batch(&mut self, sql: &str) -> Result<()> {
        self.client
            .batch_execute(sql)
            .map_err(|e| map_err(self.shown, e))
    }
}

/// Each value with the type it is sent as. jobrun's columns are BIGINT and
/// TEXT; a NULL goes as `unknown`, which the server types from where it
/// stands. No round trip learns a type and nothing is prepared under a
/// name: every statement runs unnamed, as a pooler in transaction mode
/// requires.
fn typed(params: &[Value]) -> Vec<(Param, Type)> {
    params
        .iter()
        .map(|v| match v {
            Value::Null => (Param::Null(Null), Type::UNKNOWN),
            Value::Int(i) => (Param::I64(*i), Type::INT8),
            Value::Text(s) => (Param::Text(s.clone()), Type::TEXT),
            Value::Bytes(b) => (Param::Bytes(b.clone()), Type::BYTEA),
        })
        .collect()
}

impl Conn for PgTx<'_> {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let args = typed(params);
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            args.iter().map(|(p, t)| (p.as_sql(), t.clone())).collect();
        self.client
            .execute_typed(sql, &typed)
            .map_err(|e| map_err(self.shown, e))
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let args = typed(params);
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            args.iter().map(|(p, t)| (p.as_sql(), t.clone())).collect();
        let rows = self
            .client
            .query_typed(sql, &typed)
            .map_err(|e| map_err(self.shown, e))?;
        Ok(rows.iter().map(row_of).collect())
    }

    fn insert_id(&mut self, sql: &str, params: &[Value]) -> Result<Option<i64>> {
        let made = self.query(&format!("{sql} RETURNING id"), params)?;
        Ok(made.first().and_then(|r| r.opt_int("id")))
    }

    fn clock(&mut self) -> Result<Clock> {
        let now_ms = match self.now_ms {
            Some(now) => now,
            None => {
                let rows = self.query(&format!("SELECT {NOW_MS} AS now"), &[])?;
                rows.first().map(|r| r.int("now")).unwrap_or(0)
            }
        };
        // One clock for a fleet: the server's. Boot clocks are per machine.
        Ok(self.offset.apply(Clock { now_ms, boot: None }))
    }

    fn notify_waiters(&mut self, job: &str) -> Result<()> {
        // Transactional: delivered at COMMIT, never for a rolled-back one.
        self.query(
            "SELECT pg_notify('jobrun_release', $1)::text AS notified",
            &[job.into()],
        )?;
        Ok(())
    }

    fn identity(&mut self, pinned: &str) -> Result<Option<String>> {
        // As the renewal reads it: a pin taken without the cluster's
        // identifier is compared on the stamp alone.
        let identity = if pinned.starts_with("cluster/") {
            STAMP_IDENTITY
        } else {
            IDENTITY
        };
        let rows = self.query(
            &format!("SELECT {identity} AS identity FROM jobrun_store LIMIT 1"),
            &[],
        )?;
        Ok(Some(
            rows.first()
                .and_then(|r| r.opt_text("identity"))
                .unwrap_or_else(|| "cluster/".into()),
        ))
    }

    fn lock_job(&mut self, job: &str) -> Result<Option<i64>> {
        let rows = self.query(
            "SELECT next_token FROM jobs WHERE name = $1 FOR UPDATE",
            &[job.into()],
        )?;
        Ok(rows.first().map(|r| r.int("next_token")))
    }
}
