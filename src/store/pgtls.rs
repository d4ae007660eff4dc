//! TLS to the PostgreSQL server, on rustls, with libpq's `sslmode` meanings.
//!
//! `prefer` and `require` encrypt without checking the certificate (as
//! libpq does, unless `sslrootcert` is given: then `require` checks the
//! chain like `verify-ca`); `verify-ca` checks the chain against
//! `sslrootcert` (default: the system's CA bundle), `verify-full` the chain
//! and the host name. Whether TLS happens at all (`prefer` falls back to
//! plain text when the server has none, the others refuse such a server) is
//! the connection's `ssl_mode`, set in `pgconn`.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls::{Error, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::pgconn::{ConnParams, SslMode};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What the connection checks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// The TLS connector for `params`, or `None` for `sslmode=disable`.
pub fn connector(params: &ConnParams) -> Result<Option<MakeRustlsConnect>, String> {
    let mode = params.sslmode()?;
    let rootcert = params.get("sslrootcert");
    let check = match mode {
        SslMode::Disable => return Ok(None),
        SslMode::Allow | SslMode::Prefer => Check::Nothing,
        SslMode::Require if rootcert == Some("system") => {
            return Err(
                "sslmode=require with sslrootcert=system is refused (as libpq does): use \
                 sslmode=verify-full"
                    .into(),
            )
        }
        SslMode::Require if rootcert.is_some() => Check::Chain,
        SslMode::Require => Check::Nothing,
        SslMode::VerifyCa => Check::Chain,
        SslMode::VerifyFull => Check::ChainAndName,
    };
    let provider = provider();
    let webpki = match check {
        Check::Nothing => None,
        Check::Chain | Check::ChainAndName => Some(
            WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(rootcert)?),
                provider.clone(),
            )
            .build()
            .map_err(|e| format!("cannot use the CA certificates: {e}"))?,
        ),
    };
    let verifier = Arc::new(Verifier {
        check,
        provider: provider.clone(),
        webpki,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match client_identity(params)? {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("cannot use the client certificate (sslcert/sslkey): {e}"))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// `sslrootcert`: a PEM file, or (unset, or `system`) the system's bundle.
fn roots(rootcert: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match rootcert {
        Some(path) if path != "system" => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read sslrootcert {path}: {e}"))?;
            for c in certs {
                let c = c.map_err(|e| format!("cannot read sslrootcert {path}: {e}"))?;
                roots
                    .add(c)
                    .map_err(|e| format!("bad certificate in sslrootcert {path}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("sslrootcert {path} holds no certificate"));
            }
        }
        _ => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(
                    "no system CA certificates found for sslmode=verify-ca/verify-full: set \
                     sslrootcert to the server's CA file"
                        .into(),
                );
            }
        }
    }
    Ok(roots)
}

/// `sslcert` and `sslkey` (defaults: `~/.postgresql/postgresql.crt` and
/// `.key` when both exist). A key readable by group or others is refused,
/// as libpq refuses it.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn client_identity(params: &ConnParams) -> Result<Option<Identity>, String> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let default = |name: &str| {
        home.as_ref()
            .map(|h| h.join(".postgresql").join(name))
            .filter(|p| p.exists())
            .map(|p| p.to_string_lossy().into_owned())
    };
    let (cert, key) = match (params.get("sslcert"), params.get("sslkey")) {
        (Some(c), Some(k)) => (c.to_string(), k.to_string()),
        (Some(_), None) | (None, Some(_)) => {
            return Err("sslcert and sslkey go together: give both".into())
        }
        (None, None) => match (default("postgresql.crt"), default("postgresql.key")) {
            (Some(c), Some(k)) => (c, k),
            _ => return Ok(None),
        },
    };
    if params.get("sslpassword").is_some() {
        return Err(
            "an encrypted sslkey (sslpassword) is not supported: decrypt the key file".into(),
        );
    }
    check_key_mode(Path::new(&key))?;
    let certs = CertificateDer::pem_file_iter(&cert)
        .map_err(|e| format!("cannot read sslcert {cert}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot read sslcert {cert}: {e}"))?;
    let key =
        PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("cannot read sslkey {key}: {e}"))?;
    Ok(Some((certs, key)))
}

fn check_key_mode(key: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let md =
        std::fs::metadata(key).map_err(|e| format!("cannot read sslkey {}: {e}", key.display()))?;
    // libpq: u=rw (0600) or less when the user owns it, u=rw,g=r (0640)
    // when root does.
    let allowed = if md.uid() == 0 { 0o640 } else { 0o600 };
    if md.mode() & 0o777 & !allowed != 0 {
        return Err(format!(
            "sslkey {} has mode {:04o}: it must be 0600 or less (0640 if owned by root)",
            key.display(),
            md.mode() & 0o777
        ));
    }
    Ok(())
}

/// A `ServerCertVerifier` method that checks a handshake signature with the
/// provider's algorithms, by rustls's function of the same name.
macro_rules! handshake_signature {
    ($name:ident) => {
        fn $name(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            $name(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }
    };
}

/// The server's certificate checked as `check` says. Handshake signatures
/// are always verified, with the provider's algorithms.
#[derive(Debug)]
struct Verifier {
    check: Check,
    provider: Arc<CryptoProvider>,
    /// The chain (and name) check; `None` for `Check::Nothing`.
    webpki: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let Some(webpki) = &self.webpki else {
            // `prefer`/`require`: encryption against eavesdropping, no
            // check of who answers (libpq's meaning).
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            // `verify-ca`: the chain must lead to a trusted CA; the name is
            // not checked. webpki checks the chain before the name, so a
            // name error means the chain passed.
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    handshake_signature!(verify_tls12_signature);
    handshake_signature!(verify_tls13_signature);

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
