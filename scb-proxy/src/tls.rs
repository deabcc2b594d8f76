//! TLS to `https://` upstreams: which roots verify them, what the proxy presents.
//!
//! rustls with the aws-lc-rs provider (the one scb-tls serves with), HTTP/1.1 or h2 in ALPN,
//! the upstream's host name as SNI and as the name its certificate must carry. Roots are
//! the operating system's store (`rustls-native-certs`) unless a CA file is given, as for
//! a private CA. Sessions are resumed from rustls' in-memory cache, and connections are
//! pooled like plain ones.

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
    /// answer in HTTP/1.1 to frames).
    pub(crate) fn connector(&self, alpn: &[u8]) -> Result<TlsConnector, String> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if self.insecure_skip_verify {
            tracing::warn!(
                "proxy: upstream certificates are NOT verified (insecure_skip_verify): anyone on \
                 the path to an https upstream can read and change its traffic"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let mut config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
                .map_err(|e| format!("{}: {e}", cert.display()))?,
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsConnector::from(Arc::new(config)))
    }

    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for cert in read_certs(path)? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(native.certs);
                if added == 0 {
                    return Err(format!(
                        "no usable root certificate in the system's store ({} errors); give a CA file",
                        native.errors.len()
                    ));
                }
            }
        }
        Ok(roots)
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `insecure_skip_verify`: any certificate, but the handshake's signatures still checked
/// (so the peer holds the key of the certificate it sent).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
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
            &self.0.signature_verification_algorithms,
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
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
