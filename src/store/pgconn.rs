//! libpq's conventions for naming a PostgreSQL server, so a fleet can reuse
//! the connection strings, environment and `.pgpass` its other tools use.
//!
//! A `--db` is a URL (`postgres://` or `postgresql://`) or a `key=value`
//! string; keywords it leaves out come from `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, `PGPASSWORD`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`,
//! `PGSSLKEY`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`, then libpq's defaults; a
//! missing password comes from `PGPASSFILE` or `~/.pgpass`. Invariant: no
//! message made here quotes a password, and `shown()` never holds one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Keywords whose values are secrets.
const SECRET_KEYS: &[&str] = &["password", "sslpassword"];

/// The keywords jobrun understands, and the environment variable of each.
const KEYWORDS: &[(&str, Option<&str>)] = &[
    ("host", Some("PGHOST")),
    ("hostaddr", Some("PGHOSTADDR")),
    ("port", Some("PGPORT")),
    ("dbname", Some("PGDATABASE")),
    ("user", Some("PGUSER")),
    ("password", Some("PGPASSWORD")),
    ("passfile", Some("PGPASSFILE")),
    ("connect_timeout", Some("PGCONNECT_TIMEOUT")),
    ("application_name", Some("PGAPPNAME")),
    ("fallback_application_name", None),
    ("options", Some("PGOPTIONS")),
    ("sslmode", Some("PGSSLMODE")),
    ("sslrootcert", Some("PGSSLROOTCERT")),
    ("sslcert", Some("PGSSLCERT")),
    ("sslkey", Some("PGSSLKEY")),
    ("sslpassword", None),
    ("sslnegotiation", Some("PGSSLNEGOTIATION")),
    ("sslsni", Some("PGSSLSNI")),
    ("target_session_attrs", Some("PGTARGETSESSIONATTRS")),
    ("load_balance_hosts", Some("PGLOADBALANCEHOSTS")),
    ("keepalives", None),
    ("keepalives_idle", None),
    ("keepalives_interval", None),
    ("keepalives_count", None),
    ("tcp_user_timeout", None),
    ("channel_binding", Some("PGCHANNELBINDING")),
    ("client_encoding", Some("PGCLIENTENCODING")),
    ("gssencmode", Some("PGGSSENCMODE")),
];

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
        let known = KEYWORDS.iter().any(|(k, _)| *k == key)
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
        if let Some(rest) = s
            .strip_prefix("postgresql://")
            .or_else(|| s.strip_prefix("postgres://"))
        {
            parse_url(rest)
        } else {
            parse_keywords(s)
        }
    }

    /// Fill what the string left out from libpq's environment variables.
    pub fn with_env(mut self, env: &dyn Fn(&str) -> Option<String>) -> ConnParams {
        for (key, var) in KEYWORDS {
            if let Some(var) = var {
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
        let Ok(meta) = std::fs::metadata(&file) else {
            return;
        };
        {
            use std::os::unix::fs::PermissionsExt;
            if !meta.is_file() {
                return;
            }
            if meta.permissions().mode() & 0o077 != 0 {
                warn(format!(
                    "warning: password file {} has group or world access (mode {:04o}); it is \
                     not used: chmod 0600 it",
                    file.display(),
                    meta.permissions().mode() & 0o7777
                ));
                return;
            }
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            return;
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
        if let Some(pw) = pgpass_lookup(&text, &want) {
            self.map.insert("password".into(), pw);
        }
    }

    /// The `tokio_postgres` configuration for these settings (TLS apart).
    pub fn config(&self) -> Result<postgres::Config, String> {
        let mut c = postgres::Config::new();
        for h in self.hosts() {
            if h.starts_with('/') {
                c.host_path(&h);
            } else if !h.is_empty() {
                c.host(&h);
            }
        }
        if let Some(a) = self.get("hostaddr") {
            for a in a.split(',') {
                let ip = a
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid hostaddr {:?}", a.trim()))?;
                c.hostaddr(ip);
            }
            if self.get("host").is_none() {
                // Each address stands for itself (and names its TLS peer).
                for a in a.split(',') {
                    c.host(a.trim());
                }
            }
        }
        if let Some(p) = self.get("port") {
            for p in p.split(',') {
                let p = if p.trim().is_empty() {
                    "5432"
                } else {
                    p.trim()
                };
                c.port(p.parse().map_err(|_| format!("invalid port {p:?}"))?);
            }
        }
        c.user(&self.user());
        c.dbname(&self.dbname());
        if let Some(pw) = self.get("password") {
            c.password(pw);
        }
        if let Some(t) = self.get("connect_timeout") {
            let secs: u64 = t
                .trim()
                .parse()
                .map_err(|_| format!("invalid connect_timeout {t:?}"))?;
            if secs > 0 {
                c.connect_timeout(std::time::Duration::from_secs(secs.max(2)));
            }
        }
        if let Some(o) = self.get("options") {
            c.options(o);
        }
        c.application_name(self.get("application_name").unwrap_or("jobrun"));
        if let Some(t) = self.get("target_session_attrs") {
            c.target_session_attrs(match t {
                "any" => postgres::config::TargetSessionAttrs::Any,
                "read-write" => postgres::config::TargetSessionAttrs::ReadWrite,
                other => return Err(format!("unsupported target_session_attrs {other:?}")),
            });
        }
        if self.get("load_balance_hosts") == Some("random") {
            c.load_balance_hosts(postgres::config::LoadBalanceHosts::Random);
        }
        if self.get("channel_binding") == Some("require") {
            c.channel_binding(postgres::config::ChannelBinding::Require);
        }
        c.ssl_mode(match self.sslmode()? {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        if self.get("sslnegotiation") == Some("direct") {
            c.ssl_negotiation(postgres::config::SslNegotiation::Direct);
        }
        Ok(c)
    }
}

/// The password of the first `.pgpass` line matching `want` (host, port,
/// database, user; `*` matches anything; `\:` and `\\` are escapes).
fn pgpass_lookup(text: &str, want: &[String; 4]) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = vec![String::new()];
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        fields.last_mut()?.push(n);
                    }
                }
                ':' if fields.len() < 5 => fields.push(String::new()),
                c => fields.last_mut()?.push(c),
            }
        }
        if fields.len() != 5 {
            continue;
        }
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

/// `%XX` escapes decoded.
pub fn percent_decoded(s: &str) -> String {
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

/// `[user[:password]@][host][:port][,...][/dbname][?key=value&...]`.
fn parse_url(rest: &str) -> Result<ConnParams, String> {
    let mut p = ConnParams::default();
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (netloc, db) = base.split_once('/').unwrap_or((base, ""));
    let hostports = match netloc.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            match userinfo.split_once(':') {
                Some((u, pw)) => {
                    p.set("user", percent_decoded(u))?;
                    p.set("password", percent_decoded(pw))?;
                }
                None => p.set("user", percent_decoded(userinfo))?,
            }
            hosts
        }
        None => netloc,
    };
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
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
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
    fn pgpass_lines_match_like_libpq() {
        let text = "# comment\ndb1:5432:*:jobrun:first\n*:*:jobs:*:a\\:b\\\\c\n";
        let want = |h: &str, d: &str, u: &str| {
            [
                h.to_string(),
                "5432".to_string(),
                d.to_string(),
                u.to_string(),
            ]
        };
        assert_eq!(
            pgpass_lookup(text, &want("db1", "x", "jobrun")).as_deref(),
            Some("first")
        );
        assert_eq!(
            pgpass_lookup(text, &want("db2", "jobs", "u")).as_deref(),
            Some("a:b\\c")
        );
        assert_eq!(pgpass_lookup(text, &want("db2", "other", "u")), None);
    }
}
