//! Helpers shared by the integration tests: a test CA and certificates written to a
//! temporary directory (rcgen), an echo server over `TlsAcceptor`, and a tokio-rustls
//! client.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_ED25519, PKCS_RSA_SHA256, SanType,
};
use scb_core::server::{Handshake, Protocol};
use scb_tls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use scb_tls::rustls::client::{Resumption, WebPkiServerVerifier};
use scb_tls::rustls::crypto::{CryptoProvider, aws_lc_rs};
use scb_tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use scb_tls::rustls::{
    self, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    SupportedProtocolVersion,
};
use scb_tls::tokio_rustls::TlsConnector;
use scb_tls::tokio_rustls::client::TlsStream;
use scb_tls::{CertFiles, TlsAcceptor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "scb-tls-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kind and encoding of a leaf's private key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyKind {
    EcdsaP256Pkcs8,
    EcdsaP256Sec1,
    EcdsaP384Pkcs8,
    Ed25519,
    RsaPkcs8,
    RsaPkcs1,
}

/// `notBefore`, `notAfter` of a leaf.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dates {
    /// rcgen's default: 1975 to 4096.
    Valid,
    /// 2020-01-01 to 2021-01-01.
    Expired,
    /// 2090-01-01 to 2091-01-01.
    NotYetValid,
}

/// A test certificate authority (ECDSA P-256) that issues leaves into a directory.
pub(crate) struct Pki {
    pub(crate) dir: TempDir,
    ca_key: KeyPair,
    ca_params: CertificateParams,
    pub(crate) ca_cert: CertificateDer<'static>,
}

impl Pki {
    pub(crate) fn new() -> Self {
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "scb-tls test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_cert = ca_params.self_signed(&ca_key).unwrap().der().clone();
        Self {
            dir: TempDir::new(),
            ca_key,
            ca_params,
            ca_cert,
        }
    }

    /// Issues a certificate for `names` with a new key of `kind`, written as
    /// `<file>.pem` and `<file>.key` in the directory.
    pub(crate) fn leaf(&self, file: &str, names: &[&str], kind: KeyKind) -> CertFiles {
        self.leaf_with(file, names, kind, Dates::Valid)
    }

    pub(crate) fn leaf_with(
        &self,
        file: &str,
        names: &[&str],
        kind: KeyKind,
        dates: Dates,
    ) -> CertFiles {
        let key = new_key(kind);
        let cert = self.issue(names, &key, dates);
        let files = CertFiles::new(
            self.dir.join(&format!("{file}.pem")),
            self.dir.join(&format!("{file}.key")),
        );
        std::fs::write(&files.cert, cert).unwrap();
        std::fs::write(&files.key, key_pem(&key, kind)).unwrap();
        files
    }

    /// A certificate (PEM) for `names` and `key`, signed by the CA.
    pub(crate) fn issue(&self, names: &[&str], key: &KeyPair, dates: Dates) -> String {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        match dates {
            Dates::Valid => {}
            Dates::Expired => {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            Dates::NotYetValid => {
                params.not_before = rcgen::date_time_ymd(2090, 1, 1);
                params.not_after = rcgen::date_time_ymd(2091, 1, 1);
            }
        }
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        params.signed_by(key, &issuer).unwrap().pem()
    }

    /// A client certificate (PEM chain and key) for `cn` with DNS and URI names in
    /// `sans`, signed by the CA.
    pub(crate) fn client_cert(
        &self,
        cn: &str,
        sans: &[&str],
    ) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Example, Inc.");
        params.subject_alt_names = sans
            .iter()
            .map(|name| match name.strip_prefix("uri:") {
                Some(uri) => SanType::URI(uri.try_into().unwrap()),
                None => SanType::DnsName((*name).try_into().unwrap()),
            })
            .collect();
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap().der().clone();
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        (vec![cert], key)
    }

    /// The CA's certificate as a PEM file in the directory.
    pub(crate) fn ca_file(&self) -> PathBuf {
        let path = self.dir.join("ca.pem");
        std::fs::write(&path, pem("CERTIFICATE", &self.ca_cert)).unwrap();
        path
    }

    /// A client trusting this CA.
    pub(crate) fn client(&self) -> ClientBuilder {
        ClientBuilder {
            client_cert: None,
            roots: self.ca_cert.clone(),
            alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
            sni: true,
            resume: false,
            verify_as: None,
            schemes: None,
            suite: None,
        }
    }
}

/// A new key pair. RSA-2048 generation takes about a second in a debug build, so one RSA
/// key is made per test binary and reused.
pub(crate) fn new_key(kind: KeyKind) -> KeyPair {
    static RSA: OnceLock<String> = OnceLock::new();
    match kind {
        KeyKind::EcdsaP256Pkcs8 | KeyKind::EcdsaP256Sec1 => {
            KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap()
        }
        KeyKind::EcdsaP384Pkcs8 => KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap(),
        KeyKind::Ed25519 => KeyPair::generate_for(&PKCS_ED25519).unwrap(),
        KeyKind::RsaPkcs8 | KeyKind::RsaPkcs1 => {
            let pem = RSA.get_or_init(|| {
                KeyPair::generate_for(&PKCS_RSA_SHA256)
                    .unwrap()
                    .serialize_pem()
            });
            KeyPair::from_pem(pem).unwrap()
        }
    }
}

/// The key in the encoding `kind` names. rcgen writes PKCS#8 only; SEC1 and PKCS#1 are
/// the key inside PKCS#8's `privateKey` OCTET STRING (for EC, with the curve added).
pub(crate) fn key_pem(key: &KeyPair, kind: KeyKind) -> String {
    match kind {
        KeyKind::EcdsaP256Sec1 => pem("EC PRIVATE KEY", &sec1_p256(&key.serialize_der())),
        KeyKind::RsaPkcs1 => pem("RSA PRIVATE KEY", pkcs8_inner(&key.serialize_der())),
        _ => key.serialize_pem(),
    }
}

/// PrivateKeyInfo ::= SEQUENCE { version INTEGER, algorithm SEQUENCE, privateKey OCTET STRING, .. }
fn pkcs8_inner(pkcs8: &[u8]) -> &[u8] {
    let mut outer = pkcs8;
    let mut info = der_next(&mut outer, 0x30);
    der_next(&mut info, 0x02);
    der_next(&mut info, 0x30);
    der_next(&mut info, 0x04)
}

/// ECPrivateKey ::= SEQUENCE { version, privateKey OCTET STRING, [0] parameters, [1] publicKey }
/// PKCS#8 leaves out `parameters` (the curve is in its algorithm); SEC1 files carry it.
fn sec1_p256(pkcs8: &[u8]) -> Vec<u8> {
    let mut inner = pkcs8_inner(pkcs8);
    let mut fields = der_next(&mut inner, 0x30);
    let mut body = Vec::new();
    let version = der_next(&mut fields, 0x02);
    body.extend(der(0x02, version));
    let private = der_next(&mut fields, 0x04);
    body.extend(der(0x04, private));
    // prime256v1: 1.2.840.10045.3.1.7
    let curve = der(0x06, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]);
    body.extend(der(0xa0, &curve));
    while !fields.is_empty() {
        let tag = fields[0];
        let value = der_next(&mut fields, tag);
        if tag != 0xa0 {
            body.extend(der(tag, value));
        }
    }
    der(0x30, &body)
}

fn der_next<'a>(input: &mut &'a [u8], tag: u8) -> &'a [u8] {
    assert_eq!(input[0], tag, "unexpected DER tag");
    let (len, header) = match input[1] {
        short @ 0..=0x7f => (usize::from(short), 2),
        0x81 => (usize::from(input[2]), 3),
        0x82 => (usize::from(input[2]) << 8 | usize::from(input[3]), 4),
        other => panic!("unexpected DER length byte {other:#x}"),
    };
    let value = &input[header..header + len];
    *input = &input[header + len..];
    value
}

fn der(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len < 0x100 {
        out.extend([0x81, len as u8]);
    } else {
        out.extend([0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(value);
    out
}

pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// How the server ended each handshake: the protocol `Handshake` reported, or the error.
pub(crate) type Outcomes = mpsc::UnboundedReceiver<Result<Protocol, io::Error>>;

/// Serves `acceptor` on 127.0.0.1: handshakes through `Handshake::handshake` (the hook
/// scb's server calls), reports each outcome, then echoes bytes until the client closes.
pub(crate) async fn serve(acceptor: TlsAcceptor) -> (SocketAddr, Outcomes) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match acceptor.handshake(tcp).await {
                    Ok(secured) => {
                        let _ = tx.send(Ok(secured.protocol));
                        echo(secured.io).await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Copies what it reads back until EOF or an error.
pub(crate) async fn echo(mut io: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin) {
    let mut buf = [0u8; 4096];
    loop {
        match io.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if io.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                let _ = io.flush().await;
            }
        }
    }
}

/// Writes `message` and reads the same bytes back.
pub(crate) async fn round_trip(stream: &mut TlsStream<TcpStream>, message: &[u8]) {
    stream.write_all(message).await.unwrap();
    stream.flush().await.unwrap();
    let mut back = vec![0u8; message.len()];
    stream.read_exact(&mut back).await.unwrap();
    assert_eq!(back, message);
}

/// The DNS names of the certificate the server presented.
pub(crate) fn peer_names(stream: &TlsStream<TcpStream>) -> Vec<String> {
    let leaf = peer_leaf(stream);
    let cert = webpki::EndEntityCert::try_from(&leaf).unwrap();
    cert.valid_dns_names().map(str::to_owned).collect()
}

pub(crate) fn peer_leaf(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

/// The leaf of a PEM certificate file.
pub(crate) fn file_leaf(path: &Path) -> CertificateDer<'static> {
    use scb_tls::rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(path)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
}

fn client_provider() -> Arc<CryptoProvider> {
    Arc::new(aws_lc_rs::default_provider())
}

/// A tokio-rustls client configuration, built step by step.
pub(crate) struct ClientBuilder {
    client_cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    roots: CertificateDer<'static>,
    alpn: Vec<Vec<u8>>,
    versions: Vec<&'static SupportedProtocolVersion>,
    sni: bool,
    resume: bool,
    verify_as: Option<ServerName<'static>>,
    schemes: Option<Vec<SignatureScheme>>,
    suite: Option<rustls::CipherSuite>,
}

impl ClientBuilder {
    /// Presents this certificate when the server asks for one.
    pub(crate) fn cert(
        mut self,
        cert: (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>),
    ) -> Self {
        self.client_cert = Some(cert);
        self
    }

    pub(crate) fn alpn(mut self, protocols: &[&[u8]]) -> Self {
        self.alpn = protocols.iter().map(|p| p.to_vec()).collect();
        self
    }

    pub(crate) fn tls12_only(mut self) -> Self {
        self.versions = vec![&rustls::version::TLS12];
        self
    }

    pub(crate) fn tls13_only(mut self) -> Self {
        self.versions = vec![&rustls::version::TLS13];
        self
    }

    /// Sends no SNI (the name given to `connect` is still what the certificate is
    /// verified against).
    pub(crate) fn no_sni(mut self) -> Self {
        self.sni = false;
        self
    }

    /// Keeps sessions for resumption. Off by default: a resumed handshake carries no
    /// certificate (the client reports the one of the original session), which would hide
    /// what the server serves now.
    pub(crate) fn resume(mut self) -> Self {
        self.resume = true;
        self
    }

    /// Verifies the server's certificate (chain and all) for `name` instead of the name
    /// sent in SNI: to check which certificate a name no certificate has gets.
    pub(crate) fn verify_as(mut self, name: &str) -> Self {
        self.verify_as = Some(ServerName::try_from(name.to_owned()).unwrap());
        self
    }

    /// Offers only these signature schemes (`signature_algorithms`).
    pub(crate) fn schemes(mut self, schemes: &[SignatureScheme]) -> Self {
        self.schemes = Some(schemes.to_vec());
        self
    }

    /// Offers only this cipher suite.
    pub(crate) fn suite(mut self, suite: rustls::CipherSuite) -> Self {
        self.suite = Some(suite);
        self
    }

    pub(crate) fn build(self) -> Arc<ClientConfig> {
        let mut provider = client_provider();
        if let Some(suite) = self.suite {
            let only = CryptoProvider {
                cipher_suites: provider
                    .cipher_suites
                    .iter()
                    .filter(|s| s.suite() == suite)
                    .copied()
                    .collect(),
                ..(*provider).clone()
            };
            assert_eq!(only.cipher_suites.len(), 1, "rustls has {suite:?}");
            provider = Arc::new(only);
        }
        let mut roots = RootCertStore::empty();
        roots.add(self.roots).unwrap();
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .unwrap();
        let verifier = Arc::new(Verifier {
            inner: webpki,
            verify_as: self.verify_as,
            schemes: self.schemes,
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&self.versions)
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match self.client_cert {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = self.alpn;
        config.enable_sni = self.sni;
        if !self.resume {
            config.resumption = Resumption::disabled();
        }
        Arc::new(config)
    }
}

/// rustls' WebPKI verifier, optionally for another name and with fewer signature schemes.
#[derive(Debug)]
struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    verify_as: Option<ServerName<'static>>,
    schemes: Option<Vec<SignatureScheme>>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = self.verify_as.as_ref().unwrap_or(server_name);
        self.inner
            .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes
            .clone()
            .unwrap_or_else(|| self.inner.supported_verify_schemes())
    }
}

/// Connects to `addr` with `config`, sending `name` in SNI (unless the config says not to).
pub(crate) async fn connect(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &str,
) -> io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
}
