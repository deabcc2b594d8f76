//! TLS to `https://` upstreams: which roots verify them, what the proxy presents.
//!
//! rustls with the aws-lc-rs provider (the one scb-tls serves with), HTTP/1.1 or h2 in ALPN,
//! the upstream's host name as SNI and as the name its certificate must carry. Roots are
//! the operating system's store (`rustls-native-certs`) unless a CA file is given, as for
//! a private CA. A certificate can also be pinned (its SHA-256), which is how a
//! self-signed upstream is trusted: webpki takes no server's own certificate as a root
//! when it is marked as a CA, as `openssl req -x509` marks it. Sessions are resumed from
//! rustls' in-memory cache, and connections are pooled like plain ones.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, aws_lc_rs};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

/// How the proxy speaks TLS to its `https://` upstreams. Without one, a proxy with such
/// upstreams verifies them against the system's roots and presents no certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    ca_file: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
    insecure_skip_verify: bool,
    pins: Vec<CertificatePin>,
}

/// The SHA-256 of a certificate (its DER bytes), as `openssl x509 -noout -fingerprint
/// -sha256` prints it: 64 hex digits, colons between the bytes or not.
///
/// ```
/// use scb_proxy::CertificatePin;
///
/// let pin: CertificatePin = "FD:23:EC:0F:2E:A8:BD:18:2F:F3:A3:73:F4:22:D5:E4:9F:24:1D:85:8B:FA:85:99:C1:07:2E:60:4A:06:B8:2A"
///     .parse()
///     .unwrap();
/// assert!(pin.to_string().starts_with("FD:23:EC"));
/// assert!("FD:23".parse::<CertificatePin>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertificatePin([u8; 32]);

/// A string that is not a certificate's SHA-256 ([`CertificatePin`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a SHA-256 fingerprint (64 hex digits, colons allowed): {0:?}")]
pub struct InvalidPin(pub String);

impl std::str::FromStr for CertificatePin {
    type Err = InvalidPin;

    fn from_str(s: &str) -> Result<Self, InvalidPin> {
        let hex: Vec<u8> = s.bytes().filter(|&b| b != b':').collect();
        let digit = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
        if hex.len() != 64 {
            return Err(InvalidPin(s.to_owned()));
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(hex.chunks(2)) {
            let (Some(hi), Some(lo)) = (digit(pair[0]), digit(pair[1])) else {
                return Err(InvalidPin(s.to_owned()));
            };
            *byte = hi << 4 | lo;
        }
        Ok(Self(out))
    }
}

impl std::fmt::Display for CertificatePin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02X}")?;
        }
        Ok(())
    }
}

impl CertificatePin {
    /// The pin of `der`, a certificate's DER bytes.
    pub fn of(der: &[u8]) -> Self {
        Self(sha256(der))
    }
}

/// SHA-256 by the provider rustls already has (aws-lc-rs): its TLS 1.3 suites' hash.
fn sha256(data: &[u8]) -> [u8; 32] {
    let hash = aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .map(|suite| suite.common.hash_provider.hash(data))
        .expect("a TLS 1.3 suite");
    let mut out = [0u8; 32];
    out.copy_from_slice(hash.as_ref());
    out
}

/// Which file of an [`UpstreamTls`] an error is about: the config key that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFile {
    /// [`UpstreamTls::ca_file`].
    CaFile,
    /// The certificate chain of [`UpstreamTls::client_cert`].
    ClientCert,
    /// The key of [`UpstreamTls::client_cert`].
    ClientKey,
}

/// Why the TLS client for upstreams could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamTlsError {
    /// A file is unreadable, not PEM, or holds nothing usable.
    #[error("{}: {message}", path.display())]
    File {
        /// Which file.
        file: TlsFile,
        /// Its path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The CA file holds a self-signed certificate for an upstream's own name that is
    /// marked as a CA (what `openssl req -x509` makes): webpki refuses a CA certificate
    /// as the one a server presents, so every request would fail. Its pin works.
    #[error(
        "{}: this is {host}'s own self-signed certificate, marked as a CA: no verifier \
         takes a CA certificate as the one a server presents, so every request would \
         fail; trust exactly this certificate with `pin = \"{pin}\"` instead of `ca_file`",
        path.display()
    )]
    SelfSignedCa {
        /// The CA file.
        path: PathBuf,
        /// The upstream host the certificate names.
        host: String,
        /// The certificate's pin, to write instead.
        pin: CertificatePin,
    },
    /// Pins replace verification by roots: not with a CA file or `insecure_skip_verify`.
    #[error(
        "`pin` trusts exactly the pinned certificates: not with `ca_file` or `insecure_skip_verify`"
    )]
    PinWithRoots,
    /// The system's store has no root rustls can use.
    #[error("no usable root certificate in the system's store ({errors} errors); give a CA file")]
    NoSystemRoots {
        /// The store's errors.
        errors: usize,
    },
    /// rustls refused the configuration.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

impl UpstreamTlsError {
    /// The file the error is about, if any.
    pub fn file(&self) -> Option<TlsFile> {
        match self {
            Self::File { file, .. } => Some(*file),
            Self::SelfSignedCa { .. } => Some(TlsFile::CaFile),
            _ => None,
        }
    }
}

impl UpstreamTls {
    /// The system's roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies upstream certificates against the CAs in this PEM file instead of the
    /// system's. Defaults to the system's roots.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents this certificate chain and key (PEM files) to upstreams that ask for one
    /// (mutual TLS). Defaults to none.
    #[must_use]
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// Trusts exactly the certificates with these SHA-256 pins, instead of any chain to
    /// a root: an upstream's certificate is accepted when its pin is one of these (name,
    /// issuer and dates are not looked at; the handshake's signature still proves the
    /// upstream holds its key). For a self-signed upstream; list two during a rotation.
    /// Not with [`ca_file`](Self::ca_file) or
    /// [`insecure_skip_verify`](Self::insecure_skip_verify). Defaults to none.
    #[must_use]
    pub fn pins(mut self, pins: impl IntoIterator<Item = CertificatePin>) -> Self {
        self.pins = pins.into_iter().collect();
        self
    }

    /// Accepts any certificate an upstream presents: no protection against anyone on
    /// the path. For tests and broken internal setups only; logged as a warning when the
    /// proxy is built. Defaults to false.
    #[must_use]
    pub fn insecure_skip_verify(mut self, skip: bool) -> Self {
        self.insecure_skip_verify = skip;
        self
    }

    /// Whether upstream certificates go unverified ([`insecure_skip_verify`](Self::insecure_skip_verify)).
    pub fn skips_verification(&self) -> bool {
        self.insecure_skip_verify
    }

    /// The connector, files read now, offering `alpn` (`http/1.1`, or `h2` alone for an
    /// HTTP/2 proxy: an upstream that cannot speak it should fail the handshake, not
    /// answer in HTTP/1.1 to frames). `hosts` are the `https://` upstreams' names, to tell
    /// a CA file that is one of their own certificates.
    pub(crate) fn connector(
        &self,
        alpn: &[u8],
        hosts: &[&str],
    ) -> Result<TlsConnector, UpstreamTlsError> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()?;
        let builder = if !self.pins.is_empty() {
            if self.ca_file.is_some() || self.insecure_skip_verify {
                return Err(UpstreamTlsError::PinWithRoots);
            }
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(WithoutRoots {
                    pins: Some(self.pins.clone()),
                    provider,
                }))
        } else if self.insecure_skip_verify {
            tracing::warn!(
                "proxy: upstream certificates are NOT verified (insecure_skip_verify): anyone on \
                 the path to an https upstream can read and change its traffic"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(WithoutRoots {
                    pins: None,
                    provider,
                }))
        } else {
            builder.with_root_certificates(self.roots(hosts)?)
        };
        let mut config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(read_certs(cert, TlsFile::ClientCert)?, read_key(key)?)
                .map_err(|e| UpstreamTlsError::File {
                    file: TlsFile::ClientCert,
                    path: cert.clone(),
                    message: e.to_string(),
                })?,
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsConnector::from(Arc::new(config)))
    }

    fn roots(&self, hosts: &[&str]) -> Result<RootCertStore, UpstreamTlsError> {
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for cert in read_certs(path, TlsFile::CaFile)? {
                    if let Some(host) = own_ca_certificate(&cert, hosts) {
                        return Err(UpstreamTlsError::SelfSignedCa {
                            path: path.clone(),
                            host: host.to_owned(),
                            pin: CertificatePin::of(&cert),
                        });
                    }
                    roots.add(cert).map_err(|e| UpstreamTlsError::File {
                        file: TlsFile::CaFile,
                        path: path.clone(),
                        message: e.to_string(),
                    })?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(native.certs);
                if added == 0 {
                    return Err(UpstreamTlsError::NoSystemRoots {
                        errors: native.errors.len(),
                    });
                }
            }
        }
        Ok(roots)
    }
}

/// The upstream host `cert` is the server certificate of, when it is marked as a CA: such
/// a certificate in a CA file can never verify (webpki: `CaUsedAsEndEntity`). A real CA's
/// certificate names no host, so it is never taken for one.
fn own_ca_certificate<'a>(cert: &CertificateDer<'_>, hosts: &[&'a str]) -> Option<&'a str> {
    let mut alone = RootCertStore::empty();
    alone.add(cert.clone()).ok()?;
    let provider = Arc::new(aws_lc_rs::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(alone), provider)
            .build()
            .ok()?;
    let end_entity = webpki::EndEntityCert::try_from(cert).ok()?;
    hosts.iter().copied().find(|host| {
        let Ok(name) = ServerName::try_from(*host) else {
            return false;
        };
        end_entity.verify_is_valid_for_subject_name(&name).is_ok()
            && matches!(
                verifier.verify_server_cert(cert, &[], &name, &[], UnixTime::now()),
                Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(ref other)))
                    if other.0.downcast_ref::<webpki::Error>()
                        == Some(&webpki::Error::CaUsedAsEndEntity)
            )
    })
}

/// The two ways an upstream certificate is accepted without a CA: by `pin` (its SHA-256
/// must be one of `pins`) or by `insecure_skip_verify` (`pins` is `None`: any certificate).
/// Either way the handshake's signatures are checked with the certificate's key, so the
/// peer holds the key of the certificate it sent.
#[derive(Debug)]
struct WithoutRoots {
    pins: Option<Vec<CertificatePin>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for WithoutRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let accepted = self
            .pins
            .as_ref()
            .is_none_or(|pins| pins.contains(&CertificatePin::of(end_entity)));
        if accepted {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn read_certs(
    path: &Path,
    file: TlsFile,
) -> Result<Vec<CertificateDer<'static>>, UpstreamTlsError> {
    let failed = |message: String| UpstreamTlsError::File {
        file,
        path: path.to_owned(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| failed(e.to_string()))?;
    if certs.is_empty() {
        return Err(failed("no certificate in the file".to_owned()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, UpstreamTlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| UpstreamTlsError::File {
        file: TlsFile::ClientKey,
        path: path.to_owned(),
        message: e.to_string(),
    })
}
