//! [`TlsError`]: why certificates could not be loaded.

use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use scb_core::date::UtcTime;

/// Why a [`TlsSettings`](crate::TlsSettings) could not be loaded (at start-up, by
/// [`TlsSettings::check`](crate::TlsSettings::check) or by a
/// [`reload`](crate::TlsAcceptor::reload)).
///
/// Every variant about a file names its path, so the message alone tells an operator
/// which file to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The settings list no certificate.
    #[error("no certificate configured")]
    NoCertificates,

    /// A file could not be read (missing, a directory, no permission).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// A file is not valid PEM (a broken section, bad base64).
    #[error("{}: not valid PEM: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A certificate file holds no `CERTIFICATE` section.
    #[error("{}: no certificate in the file", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },

    /// The first certificate of a file (the leaf) could not be parsed as X.509.
    #[error("{}: not a usable X.509 certificate: {reason}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },

    /// A key file holds no private key scb can read.
    #[error(
        "{}: no private key in the file (expected PEM `PRIVATE KEY` (PKCS#8), `EC PRIVATE KEY` \
         (SEC1) or `RSA PRIVATE KEY` (PKCS#1); encrypted keys are not supported)",
        path.display()
    )]
    NoKey {
        /// The file.
        path: PathBuf,
    },

    /// A key file holds a private key of a type or size the crypto provider cannot sign with.
    #[error("{}: unsupported private key: {source}", path.display())]
    UnsupportedKey {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },

    /// The private key is not the key of the certificate.
    #[error("{}: the private key does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },

    /// The certificate's `notAfter` is in the past.
    #[error("{}: certificate expired on {}", path.display(), UtcTime::from(*not_after))]
    Expired {
        /// The certificate file.
        path: PathBuf,
        /// `notAfter`; the message writes it as `2025-01-31 23:59:59 UTC`.
        not_after: SystemTime,
    },

    /// The certificate's `notBefore` is in the future.
    #[error("{}: certificate not valid before {}", path.display(), UtcTime::from(*not_before))]
    NotYetValid {
        /// The certificate file.
        path: PathBuf,
        /// `notBefore`; the message writes it as `2025-01-31 23:59:59 UTC`.
        not_before: SystemTime,
    },

    /// The client CA file of a mutual-TLS listener holds no certificate rustls accepts as
    /// a trust anchor.
    #[error("{}: not a usable client CA: {reason}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// rustls refused the configuration (not expected with the settings this crate makes).
    #[error("cannot set up TLS: {0}")]
    Rustls(#[from] rustls::Error),

    /// The TLS configuration cannot secure QUIC (it lacks the TLS 1.3 suite QUIC's
    /// initial packets need). Feature `http3`.
    #[cfg(feature = "http3")]
    #[error("the TLS configuration cannot serve QUIC: {0}")]
    Quic(#[from] scb_core::server::quinn::crypto::rustls::NoInitialCipherSuite),
}
