//! The fleet store: PostgreSQL, for passes that run on several machines.
//!
//! The same transitions as SQLite (they are written once, in `sql.rs`); what
//! differs is here: expiry is judged on the server's clock so hosts with
//! skewed clocks agree, a job's transitions serialise on its `jobs` row
//! (`SELECT ... FOR UPDATE`), and a dead server cannot hang a caller: every
//! connection has a connect timeout and a statement timeout.

use std::collections::HashMap;
use std::error::Error as _;
use std::time::Duration;

use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, Config, NoTls, Statement};

use super::sql::{Backend, Clock, Conn, SqlStore, Value};
use super::{Result, StoreError};

/// A dead or unreachable server must fail a tick well inside one lease
/// window (the shortest lease is 3 s, the renew interval 1 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);

const SCHEMA_VERSION: i64 = 4;
const SCHEMA: &str = r#"
CREATE TABLE jobs (
    name TEXT PRIMARY KEY,
    next_token BIGINT NOT NULL,
    created_ms BIGINT NOT NULL
);
CREATE TABLE leases (
    job TEXT NOT NULL,
    slot BIGINT NOT NULL,
    token BIGINT NOT NULL,
    pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_ns TEXT NOT NULL,
    wrapper_pid BIGINT NOT NULL,
    wrapper_start BIGINT NOT NULL,
    child_pid BIGINT,
    child_start BIGINT,
    lock_path TEXT,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    slots BIGINT NOT NULL,
    lease_ms BIGINT NOT NULL,
    max_hold_ms BIGINT NOT NULL,
    acquired_ms BIGINT NOT NULL,
    renewed_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (job, slot)
);
CREATE TABLE waiters (
    id BIGSERIAL PRIMARY KEY,
    job TEXT NOT NULL,
    pass_id TEXT NOT NULL,
    host TEXT NOT NULL,
    boot_id TEXT NOT NULL,
    pid_ns TEXT NOT NULL,
    wrapper_pid BIGINT NOT NULL,
    wrapper_start BIGINT NOT NULL,
    child_pid BIGINT,
    child_start BIGINT,
    lock_path TEXT,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    slots BIGINT NOT NULL,
    lease_ms BIGINT NOT NULL,
    arrived_ms BIGINT NOT NULL,
    renewed_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
CREATE INDEX waiters_by_job ON waiters (job, id);
CREATE TABLE pauses (
    job TEXT PRIMARY KEY,
    reason TEXT,
    since_ms BIGINT NOT NULL
);
CREATE TABLE history (
    id BIGSERIAL PRIMARY KEY,
    job TEXT NOT NULL,
    pass_id TEXT NOT NULL,
    token BIGINT,
    slot BIGINT,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    started_ms BIGINT NOT NULL,
    ended_ms BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    exit_code BIGINT,
    signal BIGINT,
    outcome TEXT NOT NULL
);
CREATE INDEX history_by_job ON history (job, id);
"#;

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

/// Query parameters of a connection URL that hold a secret.
const SECRET_PARAMS: &[&str] = &["password", "sslpassword"];

/// `%XX` escapes decoded, as the connection parser decodes query keys.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL as messages show it: without its password, wherever it sits
/// (user info `user:pw@`, or a `password=`/`sslpassword=` query parameter
/// in any case).
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    // The host part starts after the last '@' (a password may hold '@').
    let base = match base.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => base.to_string(),
        },
        None => base.to_string(),
    };
    let Some(query) = query else {
        return format!("{scheme}://{base}");
    };
    let params: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _))
                if SECRET_PARAMS
                    .iter()
                    .any(|s| percent_decoded(k).trim().eq_ignore_ascii_case(s)) =>
            {
                format!("{k}=***")
            }
            _ => kv.to_string(),
        })
        .collect();
    format!("{scheme}://{base}?{}", params.join("&"))
}

/// The secrets in a connection URL (its password wherever it sits), raw
/// and decoded, so that a message quoting one can have it removed.
fn secrets(url: &str) -> Vec<String> {
    let mut out = vec![];
    let Some((_, rest)) = url.split_once("://") else {
        return out;
    };
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    if let Some((userinfo, _)) = base.rsplit_once('@') {
        if let Some((_, pw)) = userinfo.split_once(':') {
            out.push(pw.to_string());
            out.push(percent_decoded(pw));
        }
    }
    for kv in query.split('&') {
        if let Some((k, v)) = kv.split_once('=') {
            if SECRET_PARAMS
                .iter()
                .any(|s| percent_decoded(k).trim().eq_ignore_ascii_case(s))
            {
                out.push(v.to_string());
                out.push(percent_decoded(v));
            }
        }
    }
    // Neither the client nor the server quotes a password; this is a
    // second guard, and a secret of a few characters would turn every
    // occurrence of them in a message into `***`.
    out.retain(|s| s.chars().count() >= 4);
    out
}

/// A message with every secret of `url` in it replaced by `***`.
fn scrub(msg: &str, url: &str) -> String {
    secrets(url)
        .iter()
        .fold(msg.to_string(), |m, s| m.replace(s.as_str(), "***"))
}

/// Connection keywords of libpq's `key=value` strings: a `--db` made of
/// them is such a string, never a file path.
const LIBPQ_KEYWORDS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
    "require_auth",
];

/// Whether `db` looks like a libpq `key=value` connection string
/// (`host=db1 user=jobrun password=...`): it starts with `keyword=`, or it
/// names no directory and one of its words is `keyword=...`.
pub fn looks_like_keyword_string(db: &str) -> bool {
    let is_pair = |word: &str| {
        word.split_once('=').is_some_and(|(k, _)| {
            LIBPQ_KEYWORDS
                .iter()
                .any(|kw| k.trim().eq_ignore_ascii_case(kw))
        })
    };
    let first = db.split_whitespace().next().unwrap_or("");
    // "host = db1" spells the same pair with spaces around '='.
    let spaced = db
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[1].starts_with('=') && is_pair(&format!("{}=", w[0])));
    is_pair(first) || (!db.contains('/') && (db.split_whitespace().any(is_pair) || spaced))
}

pub struct PgBackend {
    client: Client,
    shown: String,
    /// The cluster's system identifier, where the role may read it.
    system_id: String,
    statements: HashMap<String, Statement>,
}

pub type PgStore = SqlStore<PgBackend>;

impl PgStore {
    pub fn open(url: &str) -> Result<PgStore> {
        PgStore::open_opts(url, true)
    }

    /// As `open`; with `create` false, a database without jobrun's schema
    /// is `StoreError::Missing` and is left as it is.
    pub fn open_opts(url: &str, create: bool) -> Result<PgStore> {
        let shown = redact(url);
        let mut config: Config = url.parse().map_err(|e| {
            StoreError::Other(
                shown.clone(),
                scrub(&format!("bad connection string: {e}"), url),
            )
        })?;
        if config.get_ssl_mode() == postgres::config::SslMode::Require {
            return Err(StoreError::Other(
                shown,
                "sslmode=require is not supported by this build (no TLS); use sslmode=disable \
                 or sslmode=prefer"
                    .into(),
            ));
        }
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
        config.application_name("jobrun");
        config.options(&format!(
            "-c statement_timeout={} -c lock_timeout={}",
            STATEMENT_TIMEOUT.as_millis(),
            STATEMENT_TIMEOUT.as_millis()
        ));
        let client = config
            .connect(NoTls)
            .map_err(|e| scrub_err(map_err(&shown, e), url))?;
        let mut backend = PgBackend {
            client,
            shown,
            system_id: String::new(),
            statements: HashMap::new(),
        };
        if !create && backend.version()?.is_none() {
            return Err(StoreError::Missing(backend.shown.clone()));
        }
        backend.migrate()?;
        // pg_control_system() may be closed to a least-privilege role; the
        // schema's stamp alone still tells a re-created store apart.
        backend.system_id = backend
            .client
            .query_one(
                "SELECT system_identifier::text FROM pg_control_system()",
                &[],
            )
            .map(|r| r.get(0))
            .unwrap_or_else(|_| "cluster".into());
        Ok(SqlStore { backend })
    }
}

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
        let mut tx = self.client.transaction().map_err(|e| map_err(&shown, e))?;
        // Two first users racing to create the schema take turns.
        tx.execute("SELECT pg_advisory_xact_lock(4242424242)", &[])
            .map_err(|e| map_err(&shown, e))?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS jobrun_schema (version BIGINT NOT NULL)")
            .map_err(|e| map_err(&shown, e))?;
        let found: Option<i64> = tx
            .query_one("SELECT max(version) FROM jobrun_schema", &[])
            .map_err(|e| map_err(&shown, e))?
            .get(0);
        if found.unwrap_or(0) < 1 {
            tx.batch_execute(SCHEMA).map_err(|e| map_err(&shown, e))?;
            tx.execute("INSERT INTO jobrun_schema (version) VALUES (1)", &[])
                .map_err(|e| map_err(&shown, e))?;
        }
        if found.unwrap_or(0) < 2 {
            tx.batch_execute(SCHEMA_V2)
                .map_err(|e| map_err(&shown, e))?;
            tx.execute("INSERT INTO jobrun_schema (version) VALUES (2)", &[])
                .map_err(|e| map_err(&shown, e))?;
        }
        for (version, step) in [(3i64, SCHEMA_V3), (4i64, SCHEMA_V4)] {
            if found.unwrap_or(0) < version {
                tx.batch_execute(step).map_err(|e| map_err(&shown, e))?;
                tx.execute(
                    "INSERT INTO jobrun_schema (version) VALUES ($1)",
                    &[&version],
                )
                .map_err(|e| map_err(&shown, e))?;
            }
        }
        tx.commit().map_err(|e| map_err(&shown, e))
    }

    /// The schema version, or `None` before the first use.
    fn version(&mut self) -> Result<Option<i64>> {
        let shown = self.shown.clone();
        let exists: bool = self
            .client
            .query_one("SELECT to_regclass('jobrun_schema') IS NOT NULL", &[])
            .map_err(|e| map_err(&shown, e))?
            .get(0);
        if !exists {
            return Ok(None);
        }
        let v: Option<i64> = self
            .client
            .query_one("SELECT max(version) FROM jobrun_schema", &[])
            .map_err(|e| map_err(&shown, e))?
            .get(0);
        Ok(Some(v.unwrap_or(0)))
    }

    fn run<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        let shown = self.shown.clone();
        let mut tx = self.client.transaction().map_err(|e| map_err(&shown, e))?;
        let mut conn = PgTx {
            tx: &mut tx,
            shown: &shown,
            statements: &mut self.statements,
        };
        let out = f(&mut conn)?;
        tx.commit().map_err(|e| map_err(&shown, e))?;
        Ok(out)
    }
}

impl Backend for PgBackend {
    fn identity(&mut self) -> Result<Option<String>> {
        let shown = self.shown.clone();
        let stamp: String = self
            .client
            .query_one("SELECT stamp FROM jobrun_store LIMIT 1", &[])
            .map_err(|e| map_err(&shown, e))?
            .get(0);
        Ok(Some(format!("{}/{stamp}", self.system_id)))
    }

    fn write<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(f)
    }

    fn read<T>(&mut self, f: &mut dyn FnMut(&mut dyn Conn) -> Result<T>) -> Result<T> {
        self.run(f)
    }
}

struct PgTx<'a, 'b> {
    tx: &'a mut postgres::Transaction<'b>,
    shown: &'a str,
    statements: &'a mut HashMap<String, Statement>,
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
    I32(i32),
    Text(String),
}

impl Param {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Param::Null(n) => n,
            Param::I64(i) => i,
            Param::I32(i) => i,
            Param::Text(s) => s,
        }
    }
}

impl PgTx<'_, '_> {
    fn prepare(&mut self, sql: &str, params: &[Value]) -> Result<(Statement, Vec<Param>)> {
        let stmt = match self.statements.get(sql) {
            Some(s) => s.clone(),
            None => {
                let s = self.tx.prepare(sql).map_err(|e| map_err(self.shown, e))?;
                self.statements.insert(sql.to_string(), s.clone());
                s
            }
        };
        let args = stmt
            .params()
            .iter()
            .zip(params)
            .map(|(ty, v)| match (v, ty) {
                (Value::Null, _) => Param::Null(Null),
                (Value::Int(i), t) if *t == Type::INT4 => Param::I32(*i as i32),
                (Value::Int(i), t) if *t == Type::TEXT || *t == Type::VARCHAR => {
                    Param::Text(i.to_string())
                }
                (Value::Int(i), _) => Param::I64(*i),
                (Value::Text(s), _) => Param::Text(s.clone()),
            })
            .collect();
        Ok((stmt, args))
    }
}

impl Conn for PgTx<'_, '_> {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        let (stmt, args) = self.prepare(sql, params)?;
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(Param::as_sql).collect();
        self.tx
            .execute(&stmt, &refs)
            .map_err(|e| map_err(self.shown, e))
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>> {
        let (stmt, args) = self.prepare(sql, params)?;
        let refs: Vec<&(dyn ToSql + Sync)> = args.iter().map(Param::as_sql).collect();
        let rows = self
            .tx
            .query(&stmt, &refs)
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
        let rows = self.query(
            "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint",
            &[],
        )?;
        let now_ms = rows.first().and_then(|r| r.first()).map_or(0, |v| match v {
            Value::Int(i) => *i,
            _ => 0,
        });
        // One clock for a fleet: the server's. Boot clocks are per machine.
        Ok(Clock { now_ms, boot: None })
    }

    fn lock_job(&mut self, job: &str) -> Result<()> {
        self.query(
            "SELECT 1::bigint FROM jobs WHERE name = $1 FOR UPDATE",
            &[job.into()],
        )?;
        Ok(())
    }
}

/// A connection failure's message with the URL's secrets removed, in case
/// the client or the server quoted one.
fn scrub_err(e: StoreError, url: &str) -> StoreError {
    match e {
        StoreError::Unreachable(s, d) => StoreError::Unreachable(s, scrub(&d, url)),
        StoreError::Other(s, d) => StoreError::Other(s, scrub(&d, url)),
        e => e,
    }
}

/// A dropped connection or a shut-down server is `Unreachable` (the renewer
/// reconnects next tick); a timeout or lock wait is `Busy`; anything else is
/// reported as it is.
fn map_err(shown: &str, e: postgres::Error) -> StoreError {
    // One line: the server's message (without its DETAIL and HINT lines),
    // or the client error and its cause.
    let detail = match (e.as_db_error(), e.source()) {
        (Some(db), _) => format!("{}: {}", db.severity(), db.message()),
        (None, Some(src)) if !e.to_string().contains(&src.to_string()) => format!("{e}: {src}"),
        _ => e.to_string(),
    }
    .replace('\n', " ");
    if e.is_closed() {
        return StoreError::Unreachable(shown.into(), detail);
    }
    if let Some(code) = e.code() {
        let c = code.code();
        if c.starts_with("08") || c.starts_with("57P") {
            return StoreError::Unreachable(shown.into(), detail);
        }
        if c == "57014" || c == "55P03" || c == "40001" || c == "40P01" {
            return StoreError::Busy(shown.into());
        }
        return StoreError::Other(shown.into(), detail);
    }
    // No SQLSTATE: an I/O failure, a timeout, a refused connection.
    StoreError::Unreachable(shown.into(), detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://jobrun:s3cret@db1/jobs"),
            "postgres://jobrun:***@db1/jobs"
        );
        assert_eq!(
            redact("postgres://jobrun@db1/jobs"),
            "postgres://jobrun@db1/jobs"
        );
        assert_eq!(
            redact("postgres://jobrun:p@ss@db1/jobs?sslmode=disable&PassWord=s3cret"),
            "postgres://jobrun:***@db1/jobs?sslmode=disable&PassWord=***"
        );
        assert_eq!(
            redact("postgresql://db1/jobs?password=a&sslpassword=b&pass%77ord=c"),
            "postgresql://db1/jobs?password=***&sslpassword=***&pass%77ord=***"
        );
        assert_eq!(
            scrub(
                "auth failed for s3cret and s%40cret",
                "postgres://u:s%40cret@h/d?password=s3cret"
            ),
            "auth failed for *** and ***"
        );
    }

    #[test]
    fn keyword_strings_are_recognised() {
        assert!(looks_like_keyword_string(
            "host=db1 user=jobrun password=s3cret"
        ));
        assert!(looks_like_keyword_string("password=s3cret"));
        assert!(looks_like_keyword_string("dbname = jobs"));
        assert!(looks_like_keyword_string(
            "host=/var/run/postgresql dbname=jobs"
        ));
        assert!(!looks_like_keyword_string("/var/lib/jobrun/jobrun.db"));
        assert!(!looks_like_keyword_string("./state/a=b.db"));
        assert!(!looks_like_keyword_string("jobrun.db"));
        assert!(!looks_like_keyword_string("weird=name.db"));
    }
}
