//! The crypto provider and the rustls `ServerConfig` built around the resolver.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::crypto::aws_lc_rs::{self, cipher_suite, kx_group};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, version};

use crate::certs::{self, CertInfo};
use crate::error::TlsError;
use crate::resolver::Resolver;
use crate::settings::{Alpn, TlsSettings};

/// The cipher suites, chosen here rather than taken from the provider's defaults so that
/// the list is visible and does not change under us with a rustls upgrade.
///
/// TLS 1.3: its three suites. TLS 1.2: only ECDHE key exchange (forward secrecy) with AEAD
/// ciphers (AES-GCM, ChaCha20-Poly1305). rustls implements nothing else for TLS 1.2 (no
/// CBC, no static-RSA or DHE key exchange), so this is also the whole TLS 1.2 set; TLS 1.0
/// and 1.1 do not exist in rustls. AES-128 comes first, as in Mozilla's "intermediate"
/// profile, though rustls follows the client's order among these (`ignore_client_order`
/// is off): a client without AES instructions puts ChaCha20 first and gets it.
static CIPHER_SUITES: &[SupportedCipherSuite] = &[
    cipher_suite::TLS13_AES_128_GCM_SHA256,
    cipher_suite::TLS13_AES_256_GCM_SHA384,
    cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// The provider every config of this crate uses: aws-lc-rs (why: the crate docs) with the
/// suites above and the key exchange groups X25519MLKEM768 (post-quantum hybrid, TLS 1.3
/// only), X25519, P-256 and P-384. rustls picks the first group in the client's order that
/// is in this list, so a client that prefers the hybrid (current Chrome and Firefox) gets it.
///
/// Named explicitly rather than through rustls' process-wide default, so that another
/// crate in the same build turning on rustls' `ring` feature changes nothing here.
pub(crate) fn provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: CIPHER_SUITES.to_vec(),
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ],
        ..aws_lc_rs::default_provider()
    }
}

/// The verifier of client certificates, when the settings ask for them: webpki's, with the
/// CA file's certificates as the only trust anchors.
pub(crate) fn client_verifier(
    settings: &TlsSettings,
    provider: Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
    let Some(auth) = &settings.client_auth else {
        return Ok(None);
    };
    let refused = |reason: String| TlsError::ClientCa {
        path: auth.ca.clone(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for cert in certs::read_chain(&auth.ca)? {
        roots.add(cert).map_err(|e| refused(e.to_string()))?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = if auth.required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder
        .build()
        .map(Some)
        .map_err(|e| refused(e.to_string()))
}

/// The server config: TLS 1.3 and 1.2, client certificates as the settings say, certificates from
/// `resolver`, ALPN as set, rotating session tickets and a bounded session cache.
pub(crate) fn server_config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<Resolver>,
    settings: &TlsSettings,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])?;
    let builder = match client_verifier(settings, provider)? {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = match settings.alpn {
        Alpn::H2AndHttp1 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Alpn::Http1Only => vec![b"http/1.1".to_vec()],
    };
    if settings.acme.is_some() {
        // Last, so that no ordinary client picks it; without it in the list rustls would
        // refuse a validation's handshake (no protocol in common).
        config
            .alpn_protocols
            .push(crate::acme::ACME_TLS_ALPN.to_vec());
    }
    // Stateless resumption: tickets (AES-256 + HMAC-SHA256) under a random key replaced every
    // 6 hours; the previous key still decrypts, so a ticket lives 12 hours. The keys live in
    // this process only: a restart invalidates every ticket, a reload none.
    config.ticketer = aws_lc_rs::Ticketer::new()?;
    // For TLS 1.2 clients that resume by session id rather than by ticket.
    config.session_storage = if settings.session_cache == 0 {
        Arc::new(NoServerSessionStorage {})
    } else {
        ServerSessionMemoryCache::new(settings.session_cache)
    };
    Ok(config)
}

impl TlsSettings {
    /// Loads and validates every file, as [`TlsAcceptor::new`](crate::TlsAcceptor::new)
    /// does, without building a server: for `scb check`. Returns what each certificate
    /// covers, in order.
    ///
    /// # Errors
    ///
    /// The first problem found, naming its file: unreadable or missing, not PEM, no
    /// certificate, no or unsupported key, a key that does not match its certificate,
    /// a certificate expired or not yet valid.
    pub fn check(&self) -> Result<Vec<CertInfo>, TlsError> {
        let provider = provider();
        let loaded = certs::load_all(self, &provider)?;
        client_verifier(self, Arc::new(provider))?;
        Ok(loaded.into_iter().map(|cert| cert.info).collect())
    }
}
