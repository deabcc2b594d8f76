//! Loading a certificate and its key from PEM files, and validating them.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{Error as RustlsError, InconsistentKeys};
use scb_core::connection::ClientCertificate;
use scb_core::date::from_unix_secs;

use crate::der;
use crate::error::TlsError;

/// One certificate: a PEM file with the chain (leaf first, then intermediates) and a PEM
/// file with its private key. Both may be the same file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CertFiles {
    /// The certificate chain, PEM `CERTIFICATE` sections, leaf first.
    pub cert: PathBuf,
    /// The private key: PEM `PRIVATE KEY` (PKCS#8), `EC PRIVATE KEY` (SEC1) or
    /// `RSA PRIVATE KEY` (PKCS#1); RSA, ECDSA (P-256, P-384) or Ed25519.
    pub key: PathBuf,
}

impl CertFiles {
    /// The certificate chain at `cert`, its key at `key`.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
        }
    }
}

/// What one loaded certificate covers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CertInfo {
    /// The certificate file it came from.
    pub cert: PathBuf,
    /// The DNS names of its subject alternative names, lower-case, in certificate order
    /// (wildcards as `*.example.com`). Empty if it has none: then it can only be served as
    /// the default certificate.
    pub names: Vec<String>,
    /// `notBefore` of the leaf.
    pub not_before: SystemTime,
    /// `notAfter` of the leaf.
    pub not_after: SystemTime,
}

/// A certificate ready to serve.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) key: Arc<CertifiedKey>,
    pub(crate) info: CertInfo,
}

/// Loads what ACME just stored, strictly: unlike at start-up, a certificate that does not
/// load (not yet valid by this clock, a key that does not match) is an error, so the one
/// being served stays and the renewal task backs off.
pub(crate) fn load_issued(
    files: &CertFiles,
    provider: &CryptoProvider,
) -> Result<CertInfo, TlsError> {
    load(files, provider, unix_now()).map(|loaded| loaded.info)
}

/// Loads the certificate and key of `files`, checked as at start-up.
pub(crate) fn load_files(files: &CertFiles, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    load(files, provider, unix_now())
}

fn load(files: &CertFiles, provider: &CryptoProvider, now: i64) -> Result<Loaded, TlsError> {
    let cert_path = &files.cert;
    let chain = read_chain(cert_path)?;
    let leaf = &chain[0];

    let parsed = webpki::EndEntityCert::try_from(leaf).map_err(|e| TlsError::BadCertificate {
        path: cert_path.clone(),
        reason: e.to_string(),
    })?;
    let mut names: Vec<String> = Vec::new();
    for name in parsed.valid_dns_names() {
        let name = name.to_ascii_lowercase();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let validity = der::validity(leaf).ok_or_else(|| TlsError::BadCertificate {
        path: cert_path.clone(),
        reason: "no readable validity period".to_owned(),
    })?;
    if now > validity.not_after {
        return Err(TlsError::Expired {
            path: cert_path.clone(),
            not_after: from_unix_secs(validity.not_after),
        });
    }
    if now < validity.not_before {
        return Err(TlsError::NotYetValid {
            path: cert_path.clone(),
            not_before: from_unix_secs(validity.not_before),
        });
    }

    let key_der = read_key(&files.key)?;
    let signing_key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|source| TlsError::UnsupportedKey {
            path: files.key.clone(),
            source,
        })?;
    let key = CertifiedKey::new(chain, signing_key);
    match key.keys_match() {
        // `Unknown`: the key cannot tell its public half (no key of aws-lc-rs is like
        // that); rustls' own `CertifiedKey::from_der` lets it through too.
        Ok(()) | Err(RustlsError::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(RustlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(TlsError::KeyMismatch {
                cert: cert_path.clone(),
                key: files.key.clone(),
            });
        }
        Err(other) => {
            return Err(TlsError::BadCertificate {
                path: cert_path.clone(),
                reason: other.to_string(),
            });
        }
    }

    Ok(Loaded {
        key: Arc::new(key),
        info: CertInfo {
            cert: cert_path.clone(),
            names,
            not_before: from_unix_secs(validity.not_before),
            not_after: from_unix_secs(validity.not_after),
        },
    })
}

/// Every `CERTIFICATE` section of the file, at least one.
pub(crate) fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, &e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(chain)
}

/// The first private key section of the file (PKCS#8, SEC1 or PKCS#1).
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_owned(),
        },
        other => pem_error(path, &other),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn pem_error(path: &Path, error: &pem::Error) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        reason: error.to_string(),
    }
}

/// What a client's certificate says of it: the subject (from this crate's DER walk) and
/// the DNS and URI names webpki reads. Only called on a certificate rustls has verified.
pub(crate) fn client_certificate(der: &CertificateDer<'_>) -> Option<ClientCertificate> {
    let cert = webpki::EndEntityCert::try_from(der).ok()?;
    let subject = der::name(cert.subject())?;
    let sans = cert
        .valid_dns_names()
        .chain(cert.valid_uri_names())
        .filter(|name| name.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .collect();
    Some(ClientCertificate::new(subject, sans))
}

/// [`client_certificate`] from the bare DER, as QUIC connections give it.
#[cfg(feature = "http3")]
pub(crate) fn client_certificate_der(der: &[u8]) -> Option<ClientCertificate> {
    client_certificate(&CertificateDer::from(der))
}

fn unix_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}
