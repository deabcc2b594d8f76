//! [`TlsAcceptor::http3`]: the same certificates, client verification and session
//! tickets for QUIC handshakes.

use std::sync::Arc;

use scb_core::server::Http3;
use scb_core::server::quinn;

use crate::acceptor::TlsAcceptor;
use crate::error::TlsError;

impl TlsAcceptor {
    /// The QUIC configuration for an HTTP/3 listener beside this acceptor's TCP one
    /// (scb-core's `ListenOptions::http3`): a copy of [`server_config`](Self::server_config)
    /// with ALPN `h3` only, sharing its certificate resolver (SNI, and every
    /// [`reload`](Self::reload) or ACME renewal applies to QUIC handshakes too), its client
    /// certificate verifier, its ticket keys and its session cache. QUIC runs TLS 1.3 only.
    ///
    /// 0-RTT stays off (`max_early_data_size` 0): early data can be replayed by anyone who
    /// saw it, and scb has no replay cache, so every request waits for the handshake.
    ///
    /// # Errors
    ///
    /// [`TlsError::Quic`] if the provider lacks the TLS 1.3 suite QUIC needs (the one
    /// scb-tls builds with has it).
    pub fn http3(&self) -> Result<Http3, TlsError> {
        let mut config = (*self.server_config()).clone();
        config.alpn_protocols = vec![b"h3".to_vec()];
        config.max_early_data_size = 0;
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(config))?;
        let server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        Ok(Http3::new(server).client_certificates(crate::certs::client_certificate_der))
    }
}
