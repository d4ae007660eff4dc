//! A connection's settings as the client takes them: `ConnParams`, read
//! the libpq way in `pgconn`, turned into tokio-postgres's `Config`. The
//! one place that knows the client's configuration API; a value it cannot
//! take (a port, an address, a `target_session_attrs`) is refused here.

use super::pgconn::{ConnParams, SslMode};

/// The client's configuration for `params` (TLS apart: `pgtls`).
pub fn config(params: &ConnParams) -> Result<postgres::Config, String> {
    let mut c = postgres::Config::new();
    for h in params.hosts() {
        if h.starts_with('/') {
            c.host_path(&h);
        } else if !h.is_empty() {
            c.host(&h);
        }
    }
    if let Some(a) = params.get("hostaddr") {
        for a in a.split(',') {
            let ip = a
                .trim()
                .parse()
                .map_err(|_| format!("invalid hostaddr {:?}", a.trim()))?;
            c.hostaddr(ip);
        }
        if params.get("host").is_none() {
            // Each address stands for itself (and names its TLS peer).
            for a in a.split(',') {
                c.host(a.trim());
            }
        }
    }
    if let Some(p) = params.get("port") {
        for p in p.split(',') {
            let p = if p.trim().is_empty() {
                "5432"
            } else {
                p.trim()
            };
            c.port(p.parse().map_err(|_| format!("invalid port {p:?}"))?);
        }
    }
    c.user(&params.user());
    c.dbname(&params.dbname());
    if let Some(pw) = params.get("password") {
        c.password(pw);
    }
    if let Some(t) = params.get("connect_timeout") {
        let secs: u64 = t
            .trim()
            .parse()
            .map_err(|_| format!("invalid connect_timeout {t:?}"))?;
        if secs > 0 {
            c.connect_timeout(std::time::Duration::from_secs(secs.max(2)));
        }
    }
    if let Some(o) = params.get("options") {
        c.options(o);
    }
    c.application_name(params.get("application_name").unwrap_or("jobrun"));
    if let Some(t) = params.get("target_session_attrs") {
        c.target_session_attrs(match t {
            "any" => postgres::config::TargetSessionAttrs::Any,
            "read-write" => postgres::config::TargetSessionAttrs::ReadWrite,
            other => return Err(format!("unsupported target_session_attrs {other:?}")),
        });
    }
    if params.get("load_balance_hosts") == Some("random") {
        c.load_balance_hosts(postgres::config::LoadBalanceHosts::Random);
    }
    if params.get("channel_binding") == Some("require") {
        c.channel_binding(postgres::config::ChannelBinding::Require);
    }
    c.ssl_mode(match params.sslmode()? {
        SslMode::Disable => postgres::config::SslMode::Disable,
        SslMode::Allow | SslMode::Prefer => postgres::config::SslMode::Prefer,
        _ => postgres::config::SslMode::Require,
    });
    if params.get("sslnegotiation") == Some("direct") {
        c.ssl_negotiation(postgres::config::SslNegotiation::Direct);
    }
    Ok(c)
}
