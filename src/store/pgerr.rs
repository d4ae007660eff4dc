//! What a PostgreSQL failure means to jobrun, and what to tell the user.
//!
//! Every client error becomes a `StoreError` whose kind decides what the
//! caller does next (`Unreachable` and `Busy` are retried, the rest
//! reported), with the connection's secrets scrubbed from its text. A
//! failed connection that the user can fix gets a hint in their terms.
//! Errors are told apart by their types wherever the client exposes them
//! (SQLSTATE codes, rustls's certificate errors, I/O error kinds); only two
//! client errors that have no type of their own are matched by their text.

use std::error::Error;
use std::io;

use postgres::error::SqlState;
use rustls::CertificateError;

use super::pgconn::ConnParams;
use super::StoreError;

/// What the caller does with a failure that carries a SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// The connection is gone or the server is going away: reconnect.
    Unreachable,
    /// A timeout or a lock wait: try again.
    Busy,
    /// Anything else: report it.
    Other,
}

fn class_of(code: &SqlState) -> Class {
    // Class 08 (connection exception) and 57P (operator intervention:
    // shutdown, crash, not accepting connections now, database dropped).
    let c = code.code();
    if c.starts_with("08") || c.starts_with("57P") {
        return Class::Unreachable;
    }
    let busy = [
        SqlState::QUERY_CANCELED,
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
    ];
    if busy.contains(code) {
        Class::Busy
    } else {
        Class::Other
    }
}

/// A dropped connection or a shut-down server is `Unreachable` (the renewer
/// reconnects next tick); a timeout or lock wait is `Busy`; anything else is
/// reported as it is.
pub fn map_err(shown: &str, e: postgres::Error) -> StoreError {
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
    match e.code().map(class_of) {
        Some(Class::Unreachable) => StoreError::Unreachable(shown.into(), detail),
        Some(Class::Busy) => StoreError::Busy(shown.into()),
        Some(Class::Other) => StoreError::Other(shown.into(), detail),
        // No SQLSTATE: an I/O failure, a timeout, a refused connection.
        None => StoreError::Unreachable(shown.into(), detail),
    }
}

/// A message with `secrets` removed, in case the client or the server
/// quoted one.
pub fn scrub_all(e: StoreError, secrets: &[String]) -> StoreError {
    let clean = |d: String| {
        secrets
            .iter()
            .filter(|s| s.chars().count() >= 4)
            .fold(d, |m, s| m.replace(s.as_str(), "***"))
    };
    match e {
        StoreError::Unreachable(s, d) => StoreError::Unreachable(s, clean(d)),
        StoreError::Other(s, d) => StoreError::Other(s, clean(d)),
        e => e,
    }
}

/// A server too busy to take a connection now: full ("too many clients"),
/// or not answering within the connect timeout (a pooler whose listen
/// queue overflows under a fleet's start). Worth another try within the
/// budget; anything else (refused, bad password, no such database) fails at
/// once.
pub fn busy_server(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS) || timed_out(e)
}

/// Whether the cause of `e` is an I/O timeout.
fn timed_out(e: &(dyn Error + 'static)) -> bool {
    e.source()
        .and_then(|s| s.downcast_ref::<io::Error>())
        .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
}

/// `e` and its causes, outermost first. An `io::Error`'s own `source()`
/// skips the error it wraps (a rustls error arrives inside one), so the
/// walk steps into it.
fn causes<'a>(e: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(e), |&e: &&'a (dyn Error + 'static)| {
        match e.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => e.source(),
        }
    })
}

/// A failed connection the user can fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// The server answered the TLS request with "no".
    NoTls,
    /// The certificate's chain leads to no CA in `sslrootcert`.
    UnknownCa,
    /// The certificate does not name the host.
    WrongName,
    /// The certificate has expired.
    Expired,
    /// The server asked for a password and there was none.
    NoPassword,
}

/// The hint for a failed connection, from its chain of causes: rustls's
/// certificate errors by type; the client's refusals that have no type
/// (its cause is a bare message) by that message.
pub fn hint_of(e: &(dyn Error + 'static)) -> Option<Hint> {
    causes(e).find_map(|cause| {
        if let Some(rustls::Error::InvalidCertificate(cert)) = cause.downcast_ref() {
            return match cert {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    Some(Hint::UnknownCa)
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Some(Hint::WrongName),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    Some(Hint::Expired)
                }
                _ => None,
            };
        }
        // tokio-postgres's own words (connect_tls.rs, connect_raw.rs).
        match cause.to_string().as_str() {
            "server does not support TLS" => Some(Hint::NoTls),
            "password missing" => Some(Hint::NoPassword),
            _ => None,
        }
    })
}

/// `e` (already scrubbed) said in the user's terms when `hint` names what
/// went wrong: which `sslmode` check failed, or where a password is looked
/// for. Such a failure is not retried: it is `Other`.
pub fn clarify(e: StoreError, hint: Option<Hint>, params: &ConnParams) -> StoreError {
    let Some(hint) = hint else {
        return e;
    };
    let said = |d: &str| -> String {
        let mode = params.get("sslmode").unwrap_or("prefer");
        let root = params.get("sslrootcert").unwrap_or("the system CA bundle");
        match hint {
            Hint::NoTls => format!("the server does not offer TLS, and sslmode={mode} requires it"),
            Hint::UnknownCa => format!(
                "TLS: the server's certificate is not signed by a CA in {root} (sslmode={mode})"
            ),
            Hint::WrongName => format!(
                "TLS: the server's certificate is not valid for host {} (sslmode={mode}): {d}",
                params.hosts().join(",")
            ),
            Hint::NoPassword => "the server asks for a password and none was given (in the \
                                 connection string, PGPASSWORD, or the password file PGPASSFILE \
                                 or ~/.pgpass)"
                .into(),
            Hint::Expired => format!("TLS: the server's certificate has expired: {d}"),
        }
    };
    match e {
        StoreError::Unreachable(s, d) | StoreError::Other(s, d) => StoreError::Other(s, said(&d)),
        e => e,
    }
}

/// A failed connection as the user sees it: mapped, scrubbed of
/// `secrets`, and clarified.
pub fn refused(
    shown: &str,
    e: postgres::Error,
    secrets: &[String],
    params: &ConnParams,
) -> StoreError {
    let hint = hint_of(&e);
    clarify(scrub_all(map_err(shown, e), secrets), hint, params)
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::time::Duration;

    use rustls::pki_types::{ServerName, UnixTime};

    use super::*;

    /// An error with a cause, as the client makes them ("error performing
    /// TLS handshake" over the connector's `io::Error`).
    #[derive(Debug)]
    struct Client(&'static str, Box<dyn Error + Send + Sync>);

    impl fmt::Display for Client {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Client {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.1)
        }
    }

    /// A rustls certificate error the way it reaches the client: inside
    /// the `io::Error` of the TLS stream, under the client's TLS error.
    fn handshake(cert: CertificateError) -> Client {
        let io = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(cert),
        );
        Client("error performing TLS handshake", Box::new(io))
    }

    fn unix(secs: u64) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(secs))
    }

    #[test]
    fn certificate_errors_are_told_apart_by_type() {
        let name = ServerName::try_from("localhost").unwrap().to_owned();
        let table = [
            (CertificateError::UnknownIssuer, Some(Hint::UnknownCa)),
            (CertificateError::BadSignature, Some(Hint::UnknownCa)),
            (CertificateError::NotValidForName, Some(Hint::WrongName)),
            (
                CertificateError::NotValidForNameContext {
                    expected: name,
                    presented: vec!["db1".into()],
                },
                Some(Hint::WrongName),
            ),
            (CertificateError::Expired, Some(Hint::Expired)),
            (
                CertificateError::ExpiredContext {
                    time: unix(200),
                    not_after: unix(100),
                },
                Some(Hint::Expired),
            ),
            (CertificateError::Revoked, None),
            (CertificateError::NotValidYet, None),
        ];
        for (cert, want) in table {
            let seen = format!("{cert:?}");
            assert_eq!(hint_of(&handshake(cert)), want, "{seen}");
        }
        // The io::Error alone, and the rustls error alone, are found too.
        let io = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(hint_of(&io), Some(Hint::UnknownCa));
        let bare = rustls::Error::InvalidCertificate(CertificateError::Expired);
        assert_eq!(hint_of(&bare), Some(Hint::Expired));
        // Another TLS failure has no hint.
        let other = Client(
            "error performing TLS handshake",
            Box::new(io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::DecryptError,
            )),
        );
        assert_eq!(hint_of(&other), None);
    }

    #[test]
    fn refusals_without_a_type_are_told_apart_by_their_words() {
        let tls = Client(
            "error performing TLS handshake",
            "server does not support TLS".into(),
        );
        assert_eq!(hint_of(&tls), Some(Hint::NoTls));
        let pw = Client("invalid configuration", "password missing".into());
        assert_eq!(hint_of(&pw), Some(Hint::NoPassword));
        // Only the client's own cause, word for word.
        let quoted = Client(
            "db error",
            "FATAL: role \"password missing\" does not exist".into(),
        );
        assert_eq!(hint_of(&quoted), None);
        let refused = Client(
            "error connecting to server",
            Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)),
        );
        assert_eq!(hint_of(&refused), None);
    }

    #[test]
    fn hints_say_what_to_fix() {
        let params = ConnParams::parse(
            "postgres://db1,db2/jobs?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        )
        .unwrap();
        let d = "error performing TLS handshake: invalid peer certificate: NotValidForName";
        let said = |h| {
            clarify(
                StoreError::Unreachable("S".into(), d.into()),
                Some(h),
                &params,
            )
            .to_string()
        };
        assert_eq!(
            said(Hint::NoTls),
            "store S: the server does not offer TLS, and sslmode=verify-full requires it"
        );
        assert_eq!(
            said(Hint::UnknownCa),
            "store S: TLS: the server's certificate is not signed by a CA in /etc/ca.pem \
             (sslmode=verify-full)"
        );
        assert_eq!(
            said(Hint::WrongName),
            format!(
                "store S: TLS: the server's certificate is not valid for host db1,db2 \
                 (sslmode=verify-full): {d}"
            )
        );
        assert_eq!(
            said(Hint::Expired),
            format!("store S: TLS: the server's certificate has expired: {d}")
        );
        assert!(said(Hint::NoPassword).contains("PGPASSFILE or ~/.pgpass"));
        // Without a hint the error is left as it is, and stays retryable.
        let e = clarify(StoreError::Unreachable("S".into(), d.into()), None, &params);
        assert!(e.is_transient());
        let defaults = ConnParams::parse("host=db1").unwrap();
        let e = clarify(
            StoreError::Other("S".into(), d.into()),
            Some(Hint::UnknownCa),
            &defaults,
        );
        assert!(e
            .to_string()
            .contains("a CA in the system CA bundle (sslmode=prefer)"));
    }

    #[test]
    fn sqlstates_decide_retry_or_report() {
        let table = [
            (SqlState::CONNECTION_FAILURE, Class::Unreachable),
            (SqlState::CONNECTION_EXCEPTION, Class::Unreachable),
            (SqlState::ADMIN_SHUTDOWN, Class::Unreachable),
            (SqlState::CRASH_SHUTDOWN, Class::Unreachable),
            (SqlState::CANNOT_CONNECT_NOW, Class::Unreachable),
            (SqlState::QUERY_CANCELED, Class::Busy),
            (SqlState::LOCK_NOT_AVAILABLE, Class::Busy),
            (SqlState::T_R_SERIALIZATION_FAILURE, Class::Busy),
            (SqlState::T_R_DEADLOCK_DETECTED, Class::Busy),
            (SqlState::TOO_MANY_CONNECTIONS, Class::Other),
            (SqlState::UNDEFINED_TABLE, Class::Other),
            (SqlState::INSUFFICIENT_PRIVILEGE, Class::Other),
        ];
        for (code, want) in table {
            assert_eq!(class_of(&code), want, "{}", code.code());
        }
    }

    #[test]
    fn a_connect_timeout_is_a_busy_server() {
        let slow = Client(
            "error connecting to server",
            Box::new(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection timed out",
            )),
        );
        assert!(timed_out(&slow));
        let refused = Client(
            "error connecting to server",
            Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)),
        );
        assert!(!timed_out(&refused));
    }

    #[test]
    fn secrets_are_scrubbed_from_details_only() {
        let secrets = vec!["hunter2pw".to_string(), "abc".to_string()];
        let e = scrub_all(
            StoreError::Other("S".into(), "no hunter2pw for abc".into()),
            &secrets,
        );
        assert_eq!(e.to_string(), "store S: no *** for abc");
    }
}
