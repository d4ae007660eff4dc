//! libpq's conventions for naming a PostgreSQL server, so a fleet can reuse
//! the connection strings, environment and `.pgpass` its other tools use.
//!
//! A `--db` is a URL (`postgres://` or `postgresql://`) or a `key=value`
//! string; keywords it leaves out come from `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, `PGPASSWORD`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`,
//! `PGSSLKEY`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`, then libpq's defaults; a
//! missing password comes from `PGPASSFILE` or `~/.pgpass`.
//!
//! Everything jobrun knows of connection strings is here, once: the
//! keywords, which of them are secrets, and one reader of URLs, which both
//! the parser and the redaction of a URL that does not parse use.
//! Invariant: no message made here quotes a password, and neither
//! `shown()` nor `redact()` ever holds one.
//!
//! A build without the PostgreSQL store (`store::elsewhere`) still names
//! such a store, redacts it and keeps its password from the command: it
//! uses the reading, not the connecting.
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::pgpass;

/// Keywords whose values are secrets.
const SECRET_KEYS: &[&str] = &["password", "sslpassword"];

/// What jobrun makes of a libpq keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Read from the string, else from this environment variable.
    Env(&'static str),
    /// Read from the string only.
    Plain,
    /// libpq's, not jobrun's: a string with it is refused, but it still
    /// marks a `--db` as a `key=value` string, never a file path.
    Refused,
}

/// libpq's connection keywords, and what jobrun makes of each.
const KEYWORDS: &[(&str, Use)] = &[
    ("host", Use::Env("PGHOST")),
    ("hostaddr", Use::Env("PGHOSTADDR")),
    ("port", Use::Env("PGPORT")),
    ("dbname", Use::Env("PGDATABASE")),
    ("user", Use::Env("PGUSER")),
    ("password", Use::Env("PGPASSWORD")),
    ("passfile", Use::Env("PGPASSFILE")),
    ("connect_timeout", Use::Env("PGCONNECT_TIMEOUT")),
    ("application_name", Use::Env("PGAPPNAME")),
    ("fallback_application_name", Use::Plain),
    ("options", Use::Env("PGOPTIONS")),
    ("sslmode", Use::Env("PGSSLMODE")),
    ("sslrootcert", Use::Env("PGSSLROOTCERT")),
    ("sslcert", Use::Env("PGSSLCERT")),
    ("sslkey", Use::Env("PGSSLKEY")),
    ("sslpassword", Use::Plain),
    ("sslnegotiation", Use::Env("PGSSLNEGOTIATION")),
    ("sslsni", Use::Env("PGSSLSNI")),
    ("target_session_attrs", Use::Env("PGTARGETSESSIONATTRS")),
    ("load_balance_hosts", Use::Env("PGLOADBALANCEHOSTS")),
    ("keepalives", Use::Plain),
    ("keepalives_idle", Use::Plain),
    ("keepalives_interval", Use::Plain),
    ("keepalives_count", Use::Plain),
    ("tcp_user_timeout", Use::Plain),
    ("channel_binding", Use::Env("PGCHANNELBINDING")),
    ("client_encoding", Use::Env("PGCLIENTENCODING")),
    ("gssencmode", Use::Env("PGGSSENCMODE")),
    ("replication", Use::Refused),
    ("requiressl", Use::Refused),
    ("sslcompression", Use::Refused),
    ("sslcertmode", Use::Refused),
    ("sslcrl", Use::Refused),
    ("sslcrldir", Use::Refused),
    ("requirepeer", Use::Refused),
    ("ssl_min_protocol_version", Use::Refused),
    ("ssl_max_protocol_version", Use::Refused),
    ("krbsrvname", Use::Refused),
    ("gsslib", Use::Refused),
    ("gssdelegation", Use::Refused),
    ("service", Use::Refused),
    ("require_auth", Use::Refused),
];

/// Whether `key` (as written in a URL: percent-encoded, any case) names a
/// secret.
fn is_secret_key(key: &str) -> bool {
    let key = percent_decoded(key);
    SECRET_KEYS
        .iter()
        .any(|s| key.trim().eq_ignore_ascii_case(s))
}

/// Where libpq puts its server socket on Debian.
pub const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// Plain first, TLS if the server insists: jobrun treats it as `prefer`
    /// (TLS when offered, plain otherwise), which never sends less.
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "invalid sslmode {other:?}: use disable, allow, prefer, require, verify-ca or \
                     verify-full"
                ))
            }
        })
    }
}

/// A connection's settings, by libpq keyword.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnParams {
    map: BTreeMap<String, String>,
}

impl ConnParams {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn set(&mut self, key: &str, value: String) -> Result<(), String> {
        let key = key.trim();
        let known = KEYWORDS
            .iter()
            .any(|(k, u)| *k == key && *u != Use::Refused)
            || (key == "ssl" && matches!(value.as_str(), "true" | "1"));
        if key == "ssl" {
            // The JDBC spelling some URLs carry: ssl=true is sslmode=require.
            if known {
                self.map.insert("sslmode".into(), "require".into());
            }
            return Ok(());
        }
        if !known {
            // The value is not quoted: it may be a misplaced secret.
            return Err(format!("invalid connection option {:?}", key));
        }
        self.map.insert(key.to_string(), value);
        Ok(())
    }

    /// Parse a `--db` value: a URL or a `key=value` string. Errors never
    /// quote a value.
    pub fn parse(s: &str) -> Result<ConnParams, String> {
        match Url::split(s) {
            Some(url) if matches!(url.scheme, "postgres" | "postgresql") => parse_url(&url),
            _ => parse_keywords(s),
        }
    }

    /// Fill what the string left out from libpq's environment variables.
    pub fn with_env(mut self, env: &dyn Fn(&str) -> Option<String>) -> ConnParams {
        for (key, how) in KEYWORDS {
            if let Use::Env(var) = how {
                if self.get(key).is_none() {
                    if let Some(v) = env(var).filter(|v| !v.is_empty()) {
                        self.map.insert(key.to_string(), v);
                    }
                }
            }
        }
        self
    }

    pub fn sslmode(&self) -> Result<SslMode, String> {
        SslMode::parse(self.get("sslmode").unwrap_or("prefer"))
    }

    /// The hosts: host names, IP addresses, or socket directories.
    pub fn hosts(&self) -> Vec<String> {
        match self.get("host") {
            Some(h) => h.split(',').map(|s| s.trim().to_string()).collect(),
            None if self.get("hostaddr").is_some() => vec![],
            None => vec![DEFAULT_SOCKET_DIR.to_string()],
        }
    }

    /// The user: `user`, else the operating-system user.
    pub fn user(&self) -> String {
        self.get("user").map(str::to_string).unwrap_or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.name)
                .unwrap_or_else(|| "postgres".into())
        })
    }

    pub fn dbname(&self) -> String {
        self.get("dbname")
            .map(str::to_string)
            .unwrap_or_else(|| self.user())
    }

    /// The secrets this connection carries, to scrub from any message.
    pub fn secrets(&self) -> Vec<String> {
        SECRET_KEYS
            .iter()
            .filter_map(|k| self.get(k))
            .filter(|s| s.chars().count() >= 4)
            .map(str::to_string)
            .collect()
    }

    /// The connection as messages show it: a URL without any password.
    pub fn shown(&self) -> String {
        let hosts = self.hosts();
        let port = self
            .get("port")
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        let mut host_part = String::new();
        let mut query = vec![];
        match hosts.first() {
            Some(h) if h.starts_with('/') => query.push(format!("host={h}")),
            Some(_) => host_part = format!("{}{port}", hosts.join(",")),
            None => {}
        }
        if hosts.first().is_some_and(|h| h.starts_with('/')) && !port.is_empty() {
            query.push(format!("port={}", &port[1..]));
        }
        if let Some(a) = self.get("hostaddr") {
            query.push(format!("hostaddr={a}"));
        }
        if let Some(m) = self.get("sslmode") {
            query.push(format!("sslmode={m}"));
        }
        let user = self
            .get("user")
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let db = self.get("dbname").unwrap_or("");
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        format!("postgres://{user}{host_part}/{db}{q}")
    }

    /// The password: the string's or `PGPASSWORD`, else the password file's
    /// entry for the first host. A password file readable by group or
    /// others is not used, as libpq does, and `warn` says so.
    pub fn resolve_password(&mut self, home: Option<&Path>, warn: &mut dyn FnMut(String)) {
        if self.get("password").is_some() {
            return;
        }
        let file = match self.get("passfile") {
            Some(p) => PathBuf::from(p),
            None => match home {
                Some(h) => h.join(".pgpass"),
                None => return,
            },
        };
        let host = self.hosts().into_iter().next().unwrap_or_default();
        // libpq matches a socket directory with the entry "localhost".
        let host = if host.starts_with('/') || host.is_empty() {
            "localhost".to_string()
        } else {
            host
        };
        let port = self
            .get("port")
            .and_then(|p| p.split(',').next())
            .unwrap_or("5432")
            .to_string();
        let want = [host, port, self.dbname(), self.user()];
        if let Some(pw) = pgpass::password(&file, &want, warn) {
            self.map.insert("password".into(), pw);
        }
    }
}

/// Whether `db` looks like a libpq `key=value` connection string
/// (`host=db1 user=jobrun password=...`): it starts with `keyword=`, or it
/// names no directory and one of its words is `keyword=...`.
pub fn looks_like_keyword_string(db: &str) -> bool {
    let is_pair = |word: &str| {
        word.split_once('=').is_some_and(|(k, _)| {
            KEYWORDS
                .iter()
                .any(|(kw, _)| k.trim().eq_ignore_ascii_case(kw))
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

/// A connection's settings, resolved the way libpq resolves them: the
/// string, then `PG*` variables, then `.pgpass` for a missing password.
pub fn resolve(db: &str) -> Result<ConnParams, String> {
    let mut params = ConnParams::parse(db)?.with_env(&|k| std::env::var(k).ok());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    // Once per process: a renewer reconnecting each tick says it once.
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    params.resolve_password(home.as_deref(), &mut |line| {
        if !WARNED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            crate::say!(warning, "{line}");
        }
    });
    Ok(params)
}

/// The connection as messages show it: a URL naming the server, user and
/// database (with what `PG*` variables add), never a password. A URL that
/// does not parse is shown as written, its secrets replaced by `***`; a
/// `key=value` string that does not parse is not shown at all.
pub fn redact(db: &str) -> String {
    match ConnParams::parse(db) {
        Ok(p) => p.with_env(&|k| std::env::var(k).ok()).shown(),
        Err(_) => match Url::split(db) {
            Some(url) => url.redacted(),
            None => "(a key=value connection string, not shown: it may hold a password)".into(),
        },
    }
}

/// Whether a `--db` value carries a password (or a client key's
/// passphrase), as a URL or a `key=value` string. Such a value is not
/// handed on: `JOBRUN_DB` holding one is removed from the command's
/// environment.
pub fn holds_password(db: &str) -> bool {
    match ConnParams::parse(db) {
        Ok(p) => SECRET_KEYS.iter().any(|k| p.get(k).is_some()),
        // One that does not parse may still carry one.
        Err(_) => {
            Url::split(db).is_some_and(|u| !u.secrets().is_empty())
                || (looks_like_keyword_string(db)
                    && db
                        .split_whitespace()
                        .filter_map(|w| w.split_once('='))
                        .any(|(k, _)| is_secret_key(k)))
        }
    }
}

/// The secrets written in `db` if it is a URL (its password wherever it
/// sits), raw and decoded, so that a message quoting one can have it
/// removed. Neither the client nor the server quotes a password; this is a
/// second guard, and a secret of a few characters would turn every
/// occurrence of them in a message into `***`.
pub fn url_secrets(db: &str) -> Vec<String> {
    let mut out = Url::split(db).map(|u| u.secrets()).unwrap_or_default();
    out.retain(|s| s.chars().count() >= 4);
    out
}

/// A message with every secret written in `db` replaced by `***`.
pub fn scrub(msg: &str, db: &str) -> String {
    url_secrets(db)
        .iter()
        .fold(msg.to_string(), |m, s| m.replace(s.as_str(), "***"))
}

/// `%XX` escapes decoded.
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

/// A URL as written, cut into its parts, nothing decoded:
/// `scheme://[user[:password]@][host][:port][,...][/dbname][?key=value&...]`.
/// The user and password run to the last `@` before the query, so a
/// password holding `@` or `/` is never read as a host or a database.
struct Url<'a> {
    scheme: &'a str,
    /// `user[:password]`.
    userinfo: Option<&'a str>,
    /// The hosts and ports, then `/dbname`.
    location: &'a str,
    /// The `key=value` pairs joined by `&`.
    query: Option<&'a str>,
}

impl<'a> Url<'a> {
    /// `None` for a string without `://`.
    fn split(s: &'a str) -> Option<Url<'a>> {
        let (scheme, rest) = s.split_once("://")?;
        let (base, query) = match rest.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (rest, None),
        };
        let (userinfo, location) = match base.rsplit_once('@') {
            Some((userinfo, location)) => (Some(userinfo), location),
            None => (None, base),
        };
        Some(Url {
            scheme,
            userinfo,
            location,
            query,
        })
    }

    /// The user, and the password if there is one.
    fn credentials(&self) -> Option<(&'a str, Option<&'a str>)> {
        self.userinfo.map(|u| match u.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (u, None),
        })
    }

    /// The query's pairs as written, empty ones included.
    fn pairs(&self) -> impl Iterator<Item = &'a str> {
        self.query.into_iter().flat_map(|q| q.split('&'))
    }

    /// The secrets written in the URL (its password and the values of its
    /// secret parameters, however spelled), raw and decoded.
    fn secrets(&self) -> Vec<String> {
        let password = self.credentials().and_then(|(_, pw)| pw);
        let params = self
            .pairs()
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| is_secret_key(k))
            .map(|(_, v)| v);
        password
            .into_iter()
            .chain(params)
            .flat_map(|s| [s.to_string(), percent_decoded(s)])
            .collect()
    }

    /// The URL as written, with `***` for its password and for the value
    /// of each secret parameter: for a URL that does not parse.
    fn redacted(&self) -> String {
        let base = match self.credentials() {
            Some((user, Some(_))) => format!("{user}:***@{}", self.location),
            Some((user, None)) => format!("{user}@{}", self.location),
            None => self.location.to_string(),
        };
        if self.query.is_none() {
            return format!("{}://{base}", self.scheme);
        }
        let pairs: Vec<String> = self
            .pairs()
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if is_secret_key(k) => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        format!("{}://{base}?{}", self.scheme, pairs.join("&"))
    }
}

/// The settings a URL names. Errors never quote a password.
fn parse_url(url: &Url) -> Result<ConnParams, String> {
    let mut p = ConnParams::default();
    if let Some((user, password)) = url.credentials() {
        // libpq ends the user info at the first '/'; so a password with an
        // unencoded '/' would be read as a host, a port and a database,
        // and shown as such. Which one was meant cannot be known.
        if url.userinfo.is_some_and(|u| u.contains('/')) {
            return Err(
                "invalid URL: '/' before '@': write a '/' in the password as %2F, an \
                        '@' in the database name as %40"
                    .into(),
            );
        }
        p.set("user", percent_decoded(user))?;
        if let Some(pw) = password {
            p.set("password", percent_decoded(pw))?;
        }
    }
    let (hostports, db) = url.location.split_once('/').unwrap_or((url.location, ""));
    if !hostports.is_empty() {
        let mut hosts = vec![];
        let mut ports = vec![];
        for hp in hostports.split(',') {
            let (h, port) = if let Some(v6) = hp.strip_prefix('[') {
                let (h, after) = v6
                    .split_once(']')
                    .ok_or("invalid URL: unterminated [ in the host")?;
                (h.to_string(), after.strip_prefix(':').unwrap_or(""))
            } else {
                match hp.rsplit_once(':') {
                    Some((h, port)) => (percent_decoded(h), port),
                    None => (percent_decoded(hp), ""),
                }
            };
            hosts.push(h);
            ports.push(port.to_string());
        }
        if hosts.iter().any(|h| !h.is_empty()) {
            p.set("host", hosts.join(","))?;
        }
        if ports.iter().any(|x| !x.is_empty()) {
            p.set("port", ports.join(","))?;
        }
    }
    if !db.is_empty() {
        p.set("dbname", percent_decoded(db))?;
    }
    for kv in url.pairs().filter(|kv| !kv.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("invalid URL parameter {:?}: no '='", percent_decoded(kv)))?;
        p.set(&percent_decoded(k), percent_decoded(v))?;
    }
    Ok(p)
}

/// `key = value ...`, values optionally single-quoted with `\'` and `\\`.
fn parse_keywords(s: &str) -> Result<ConnParams, String> {
    let mut p = ConnParams::default();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!(
                "missing \"=\" after {key:?} in the connection string"
            ));
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err("unterminated quoted value in the connection string".into()),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        p.set(&key, value)?;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(s: &str) -> ConnParams {
        ConnParams::parse(s).unwrap()
    }

    #[test]
    fn urls_and_keyword_strings_name_the_same_server() {
        let a = parsed("postgresql://jobrun:s%40cret@db1:6432/jobs?sslmode=verify-full");
        let b = parsed(
            "host=db1 port=6432 user=jobrun password='s@cret' dbname = jobs sslmode=verify-full",
        );
        assert_eq!(a, b);
        assert_eq!(a.get("password"), Some("s@cret"));
        assert_eq!(
            a.shown(),
            "postgres://jobrun@db1:6432/jobs?sslmode=verify-full"
        );
        let s = parsed("postgres:///jobs?host=/tmp");
        assert_eq!(s.hosts(), vec!["/tmp".to_string()]);
        assert_eq!(s.shown(), "postgres:///jobs?host=/tmp");
        let s = parsed("postgres://%2Fvar%2Frun%2Fpostgresql/jobs");
        assert_eq!(s.hosts(), vec!["/var/run/postgresql".to_string()]);
        assert_eq!(parsed("host='a b' user='it\\'s'").get("user"), Some("it's"));
        assert_eq!(parsed("postgres://[::1]:5433/d").get("host"), Some("::1"));
    }

    #[test]
    fn a_password_is_found_wherever_it_is_written() {
        for db in [
            "postgres://jobrun:pw@db1/jobs",
            "postgresql://jobrun@db1/jobs?password=pw",
            "host=db1 user=jobrun password=pw",
            "host=db1 sslpassword=pw",
            // Strings that do not parse still carry one.
            "postgres://jobrun:pw@db1/jobs?bogus=1",
            "host=db1 password='pw",
        ] {
            assert!(holds_password(db), "{db}");
        }
        for db in [
            "/var/lib/jobrun/jobrun.db",
            "/srv/password=1/jobrun.db",
            "postgres://jobrun@db1/jobs",
            "host=db1 user=jobrun sslmode=verify-full",
            "postgres:///jobs?host=/run/postgresql",
        ] {
            assert!(!holds_password(db), "{db}");
        }
    }

    #[test]
    fn bad_strings_are_refused_without_quoting_values() {
        let e = ConnParams::parse("host=db1 pasword=hunter2pw").unwrap_err();
        assert!(e.contains("pasword") && !e.contains("hunter2pw"), "{e}");
        let e = ConnParams::parse("password='hunter2pw").unwrap_err();
        assert!(!e.contains("hunter2pw"), "{e}");
        let e = parsed("sslmode=hunter").sslmode().unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
    }

    #[test]
    fn the_environment_fills_what_the_string_leaves_out() {
        let env = |k: &str| match k {
            "PGHOST" => Some("envhost".to_string()),
            "PGUSER" => Some("envuser".to_string()),
            "PGSSLMODE" => Some("require".to_string()),
            "PGPASSWORD" => Some("envsecret".to_string()),
            _ => None,
        };
        let p = parsed("user=mine dbname=jobs").with_env(&env);
        assert_eq!(p.get("host"), Some("envhost"));
        assert_eq!(p.get("user"), Some("mine"));
        assert_eq!(p.sslmode().unwrap(), SslMode::Require);
        assert_eq!(p.secrets(), vec!["envsecret".to_string()]);
        assert!(!p.shown().contains("envsecret"));
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://jobrun:s3cret@db1/jobs"),
            "postgres://jobrun@db1/jobs"
        );
        assert_eq!(
            redact("postgres://jobrun:p@ss@db1/jobs?sslmode=disable&PassWord=s3cret"),
            "postgres://jobrun:***@db1/jobs?sslmode=disable&PassWord=***"
        );
        assert_eq!(
            redact("postgresql://db1/jobs?password=a&sslpassword=b&sslmode=require"),
            "postgres://db1/jobs?sslmode=require"
        );
        assert_eq!(
            redact("host=db1 user=jobrun password='it''s a secret' dbname=jobs"),
            "(a key=value connection string, not shown: it may hold a password)"
        );
        assert_eq!(
            redact("host=db1 user=jobrun password=s3cret dbname=jobs"),
            "postgres://jobrun@db1/jobs"
        );
        assert_eq!(
            Url::split("postgresql://db1/jobs?password=a&sslpassword=b&pass%77ord=c")
                .unwrap()
                .redacted(),
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
    fn a_password_with_a_slash_is_refused_and_never_shown() {
        // libpq would read "pa/ss" as port "pa" and database "ss@db1/jobs".
        for url in [
            "postgres://jobrun:pa/ss@db1/jobs",
            "postgres://jobrun:12/ss@db1:5432/jobs?sslmode=require",
            "postgres://db1/jobs@x",
        ] {
            let e = ConnParams::parse(url).unwrap_err();
            assert!(e.contains("%2F") && !e.contains("ss@"), "{e}");
            let shown = redact(url);
            assert!(
                !shown.contains("pa/ss") && !shown.contains("12/ss"),
                "{shown}"
            );
        }
        assert_eq!(
            redact("postgres://jobrun:pa/ss@db1/jobs"),
            "postgres://jobrun:***@db1/jobs"
        );
        assert_eq!(
            url_secrets("postgres://jobrun:pa%2Fss@db1/jobs"),
            vec!["pa%2Fss".to_string(), "pa/ss".to_string()]
        );
        assert_eq!(
            parsed("postgres://jobrun:pa%2Fss@db1/jobs").get("password"),
            Some("pa/ss")
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

    #[test]
    fn libpq_keywords_jobrun_does_not_use_are_refused_but_recognised() {
        assert!(looks_like_keyword_string("service=fleet"));
        let e = ConnParams::parse("service=fleet").unwrap_err();
        assert_eq!(e, "invalid connection option \"service\"");
        assert!(ConnParams::parse("postgres://db1/jobs?sslcrl=x").is_err());
    }
}
