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
use super::sql::{Backend, Clock, Conn, SqlStore, Value};
use super::{Held, Result, StoreError, StorePin};
use crate::renewer::Renewal;

/// A dead or unreachable server must fail a tick well inside one lease
/// window (the shortest lease is 3 s, the renew interval 1 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

const SCHEMA_VERSION: i64 = 4;
/// Version 2: lock files are named by pass id, never by a row; rows carry
/// boot-clock stamps (used by one-machine stores, kept for one schema); the
/// store gets the stamp that tells it from a re-created one.
const SCHEMA_V2: &str = r#"
ALTER TABLE leases DROP COLUMN lock_path;
ALTER TABLE waiters DROP COLUMN lock_path;
ALTER TABLE leases ADD COLUMN acquired_boot_ms BIGINT;
ALTER TABLE leases ADD COLUMN renewed_boot_ms BIGINT;
ALTER TABLE waiters ADD COLUMN renewed_boot_ms BIGINT;
CREATE TABLE jobrun_store (stamp TEXT NOT NULL);
INSERT INTO jobrun_store (stamp)
    VALUES (md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text));
"#;

/// Version 3: a pass's wait before its command started, apart from its
/// duration.
const SCHEMA_V3: &str = r#"
ALTER TABLE history ADD COLUMN waited_ms BIGINT;
"#;

/// Version 4: pauses have an owner ('' for none): a job is paused while any
/// owner's pause stands, and each owner lifts only its own.
const SCHEMA_V4: &str = r#"
ALTER TABLE pauses ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE pauses DROP CONSTRAINT pauses_pkey;
ALTER TABLE pauses ADD PRIMARY KEY (job, owner);
"#;

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

/// `s` as an SQL string literal. The escape-string form reads the same
/// whatever the server's `standard_conforming_strings`.
fn literal(s: &str) -> String {
    format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

pub struct PgBackend {
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
                    std::thread::sleep(jittered(pause).min(left));
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        };
        Ok(SqlStore {
            backend: PgBackend {
                client,
                shown,
                secrets,
            },
        })
    }
}

/// `base` scaled by a random factor in [0.5, 1.5): passes that met a full
/// server together do not come back together.
fn jittered(base: Duration) -> Duration {
    let mut b = [0u8; 2];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    let r = u16::from_le_bytes(b) as u32;
    base / 2 + base * r / 65_536
}

/// Statement timeout and lock timeout (2 s each) for the transaction just
/// begun: a dead server or a held row fails a renewal tick well inside the
/// window instead of hanging it. Set per transaction (not per session), so a pooler in transaction mode that
/// hands each transaction another server connection keeps them.
const BEGIN: &str = "BEGIN; SET LOCAL statement_timeout = 2000; SET LOCAL lock_timeout = 2000";

impl PgBackend {
    /// Create the schema on first use. A store already at this version is
    /// only read, so a role with no CREATE privilege (SELECT, INSERT,
    /// UPDATE, DELETE on the tables) works once an owner has created it.
    fn migrate(&mut self) -> Result<()> {
        let shown = self.shown.clone();
        let found = self.version()?;
        if found == Some(SCHEMA_VERSION) {
            return Ok(());
        }
        if let Some(found) = found.filter(|v| *v > SCHEMA_VERSION) {
            return Err(StoreError::NewerSchema {
                path: shown,
                found,
                known: SCHEMA_VERSION,
            });
        }
        self.run_tx(&mut |c| {
            // Two first users racing to create the schema take turns.
            c.query("SELECT pg_advisory_xact_lock(4242424242)::text", &[])?;
            c.batch("CREATE TABLE IF NOT EXISTS jobrun_schema (version BIGINT NOT NULL)")?;
            let found = c
                .query("SELECT max(version) FROM jobrun_schema", &[])?
                .first()
                .and_then(|r| r.first().and_then(int_of))
                .unwrap_or(0);
            if found < 1 {
                c.batch(&super::sql::schema_v1("BIGINT", "BIGSERIAL PRIMARY KEY"))?;
                c.batch("INSERT INTO jobrun_schema (version) VALUES (1)")?;
            }
            for (version, step) in [(2, SCHEMA_V2), (3, SCHEMA_V3), (4, SCHEMA_V4)] {
                if found < version {
                    c.batch(step)?;
                    c.batch(&format!(
                        "INSERT INTO jobrun_schema (version) VALUES ({version})"
                    ))?;
                }
            }
            Ok(())
        })
    }

    /// Check the schema, creating or migrating it when `create`: one round
    /// trip when it is current, as it is for every pass but the first.
    fn init(&mut self, create: bool) -> Result<()> {
        let current = self
            .simple("SELECT max(version)::text FROM jobrun_schema")
            .ok()
            .and_then(|rows| rows.into_iter().next())
            .and_then(|r| r.into_iter().next().flatten())
            .and_then(|v| v.parse::<i64>().ok())
            == Some(SCHEMA_VERSION);
        if current {
            return Ok(());
        }
        if !create && self.version()?.is_none() {
            return Err(StoreError::Missing(self.shown.clone()));
        }
        self.migrate()
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

    /// Renew `held` in one round trip, in one transaction that also reads
    /// the database's identity and renews only while it is `pinned`: a
    /// renewer that connects for each tick costs the server a connection
    /// and one exchange.
    fn renew_in_one_trip(&mut self, held: &Held, lease: Duration, pinned: &str) -> Result<Renewal> {
        let identity = if pinned.starts_with("cluster/") {
            STAMP_IDENTITY
        } else {
            IDENTITY
        };
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let set = format!(
            "SET renewed_ms = c.now, expires_ms = c.now + {lease_ms}, renewed_boot_ms = NULL \
             FROM (SELECT {NOW_MS} AS now) c"
        );
        let ours = format!(
            "EXISTS (SELECT 1 FROM jobrun_store WHERE {identity} = {}) RETURNING 'renewed'",
            literal(pinned)
        );
        let renew = match held {
            Held::Lease(k) => format!(
                "UPDATE leases {set} WHERE job = {} AND slot = {} AND token = {} AND {ours}",
                literal(&k.job),
                k.slot,
                k.token
            ),
            // Promoted between two ticks, the row became this pass's
            // lease, which is not lost: its owner stops this renewer.
            Held::Waiter { id, job, pass_id } => format!(
                "UPDATE waiters {set} WHERE id = {id} AND {ours}; \
                 SELECT 'promoted' FROM leases WHERE job = {} AND pass_id = {}",
                literal(job),
                literal(pass_id)
            ),
        };
        let rows = match self.simple(&format!(
            "SELECT 'store', {identity} FROM jobrun_store LIMIT 1; {renew}"
        )) {
            Ok(rows) => rows,
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => {
                return Ok(Renewal::StoreLost(
                    "jobrun's tables are gone from the database".into(),
                ))
            }
            Err(e) => return Err(self.fail(e)),
        };
        let tagged = |tag: &str| {
            rows.iter()
                .find(|r| r.first().and_then(|c| c.as_deref()) == Some(tag))
        };
        let now = tagged("store")
            .and_then(|r| r.get(1).cloned().flatten())
            .unwrap_or_default();
        if now != pinned {
            return Ok(Renewal::StoreLost(StorePin::another_database(&now, pinned)));
        }
        Ok(if tagged("renewed").or(tagged("promoted")).is_some() {
            Renewal::Renewed
        } else {
            Renewal::NotOurs
        })
    }

    /// The schema version, or `None` before the first use.
    fn version(&mut self) -> Result<Option<i64>> {
        self.run(&mut |c| {
            let exists = c
                .query(
                    "SELECT (to_regclass('jobrun_schema') IS NOT NULL)::int",
                    &[],
                )?
                .first()
                .and_then(|r| r.first().and_then(int_of))
                == Some(1);
            if !exists {
                return Ok(None);
            }
            let v = c
                .query("SELECT max(version) FROM jobrun_schema", &[])?
                .first()
                .and_then(|r| r.first().and_then(int_of));
            Ok(Some(v.unwrap_or(0)))
        })
    }

    fn run<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run_tx(&mut |c| f(c))
    }

    /// One transaction: begun with its timeouts, committed when `f`
    /// succeeds, rolled back otherwise.
    fn run_tx<T>(&mut self, f: &mut dyn FnMut(&mut PgTx) -> Result<T>) -> Result<T> {
        let shown = self.shown.clone();
        let secrets = &self.secrets;
        let fail = |e: postgres::Error| scrub_all(map_err(&shown, e), secrets);
        // The server's clock comes back with the BEGIN, in one round trip.
        let begun = match self
            .client
            .simple_query(&format!("{BEGIN}; SELECT {NOW_MS}::text"))
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

    fn renew_pinned(
        &mut self,
        held: &Held,
        lease: Duration,
        pinned: &str,
    ) -> Option<Result<Renewal>> {
        Some(self.renew_in_one_trip(held, lease, pinned))
    }

    fn write<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(f)
    }

    fn read<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(f)
    }
}

fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

pub struct PgTx<'a> {
    client: &'a mut Client,
    shown: &'a str,
    /// The server's clock when the transaction began.
    now_ms: Option<i64>,
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
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Null(n) => n,
            Param::I64(i) => i,
            Param::Text(s) => s,
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

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>> {
        let args = typed(params);
        let typed: Vec<(&(dyn ToSql + Sync), Type)> =
            args.iter().map(|(p, t)| (p.as_sql(), t.clone())).collect();
        let rows = self
            .client
            .query_typed(sql, &typed)
            .map_err(|e| map_err(self.shown, e))?;
        Ok(rows
            .iter()
            .map(|row| {
                row.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, col)| {
                        let t = col.type_();
                        if *t == Type::INT8 {
                            row.get::<_, Option<i64>>(i).map_or(Value::Null, Value::Int)
                        } else if *t == Type::INT4 {
                            row.get::<_, Option<i32>>(i)
                                .map_or(Value::Null, |x| Value::Int(x as i64))
                        } else {
                            row.get::<_, Option<String>>(i)
                                .map_or(Value::Null, Value::Text)
                        }
                    })
                    .collect()
            })
            .collect())
    }

    fn clock(&mut self) -> Result<Clock> {
        let now_ms = match self.now_ms {
            Some(now) => now,
            None => {
                let rows = self.query(&format!("SELECT {NOW_MS}"), &[])?;
                rows.first()
                    .and_then(|r| r.first())
                    .and_then(int_of)
                    .unwrap_or(0)
            }
        };
        // One clock for a fleet: the server's. Boot clocks are per machine.
        Ok(Clock { now_ms, boot: None })
    }

    fn notify_waiters(&mut self, job: &str) -> Result<()> {
        // Transactional: delivered at COMMIT, never for a rolled-back one.
        self.query(
            "SELECT pg_notify('jobrun_release', $1)::text",
            &[job.into()],
        )?;
        Ok(())
    }

    fn lock_job(&mut self, job: &str) -> Result<()> {
        self.query(
            "SELECT 1::bigint FROM jobs WHERE name = $1 FOR UPDATE",
            &[job.into()],
        )?;
        Ok(())
    }
}
