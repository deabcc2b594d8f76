//! The rustls `ServerConfig` built around the resolver.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, version};

use crate::certs::{self, CertInfo};
use crate::error::TlsError;
use crate::provider::provider;
use crate::resolver::Resolver;
use crate::settings::{Alpn, TlsSettings};

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
    if settings.acme.is_some() || settings.on_demand.is_some() {
        // Last, so that no ordinary client picks it; without it in the list rustls would
        // refuse a validation's handshake (no protocol in common).
        config
            .alpn_protocols
            .push(crate::acme::ACME_TLS_ALPN.to_vec());
    }
    // Stateless resumption: tickets under keys rotated every 6 hours (crate::tickets), the
    // process's set when given (every listener, or the fleet, resumes the others'
    // tickets), else this listener's own. A restart of a lone instance invalidates every
    // ticket, a reload none.
    config.ticketer = match &settings.tickets {
        Some(keys) => Arc::clone(&keys.0) as Arc<dyn rustls::server::ProducesTickets>,
        None => crate::TicketKeys::local(crate::tickets::DEFAULT_PERIOD)
            .map_err(|_| TlsError::Rustls(rustls::Error::FailedToGetRandomBytes))?,
    };
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
        let loaded = self.load_certs(&provider)?;
        client_verifier(self, Arc::new(provider))?;
        Ok(loaded.into_iter().map(|cert| cert.info).collect())
    }
}
