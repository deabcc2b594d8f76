//! [`TlsAcceptor`]: the handshake, over the certificates a reload can replace.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use rustls::ServerConfig;
use scb_core::server::{Handshake, HandshakeFuture, Protocol, Secured, TlsInfo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::Accept;
use tokio_rustls::server::TlsStream;

use crate::acme::on_demand::OnDemand;
use crate::acme::{ACME_TLS_ALPN, Challenges};
use crate::certs::CertInfo;
use crate::config;
use crate::error::TlsError;
use crate::resolver::{CertSet, Resolver};
use crate::settings::TlsSettings;

/// Runs TLS handshakes with the certificates of a [`TlsSettings`], and reloads them.
///
/// Cheap to clone (one `Arc`); every clone shares the certificates, the session-ticket
/// keys and the session cache, so one acceptor serves every worker of a process and a
/// ticket issued by one worker resumes on another.
#[derive(Clone)]
pub struct TlsAcceptor {
    inner: Arc<Inner>,
}

struct Inner {
    settings: TlsSettings,
    resolver: Arc<Resolver>,
    config: Arc<ServerConfig>,
    acceptor: tokio_rustls::TlsAcceptor,
    /// Serialises reloads, so that two racing ones cannot install an older read last.
    reloading: Mutex<()>,
    /// An ACME listener's pending challenge answers.
    challenges: Option<Arc<Challenges>>,
    /// An on-demand listener's certificates and orders.
    on_demand: Option<Arc<OnDemand>>,
}

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAcceptor")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl TlsAcceptor {
    /// Loads and validates every certificate of `settings` and builds the server.
    ///
    /// Reads the files synchronously: call it at start-up (or from a blocking context).
    ///
    /// # Errors
    ///
    /// The first problem found, naming its file (see [`TlsError`]): unreadable or missing,
    /// not PEM, no certificate, no or unsupported key, a key that does not match its
    /// certificate, a certificate expired or not yet valid.
    pub fn new(settings: TlsSettings) -> Result<Self, TlsError> {
        let provider = Arc::new(crate::provider::provider());
        let set = CertSet::new(settings.load_certs(&provider)?);
        let challenges = (settings.acme.is_some() || settings.on_demand.is_some())
            .then(|| Arc::new(Challenges::default()));
        let on_demand = settings
            .on_demand
            .as_ref()
            .zip(challenges.as_ref())
            .map(|(s, c)| Arc::new(OnDemand::load(s.clone(), Arc::clone(c))));
        let resolver = Arc::new(Resolver::new(set, challenges.clone(), on_demand.clone()));
        let config = Arc::new(config::server_config(
            provider,
            Arc::clone(&resolver),
            &settings,
        )?);
        Ok(Self {
            inner: Arc::new(Inner {
                acceptor: tokio_rustls::TlsAcceptor::from(Arc::clone(&config)),
                settings,
                resolver,
                config,
                reloading: Mutex::new(()),
                challenges,
                on_demand,
            }),
        })
    }

    /// For an ACME listener ([`TlsSettings::acme`]), the task that obtains its
    /// certificate and renews it, forever: spawn it once per process (on any runtime),
    /// and abort it when the acceptor is replaced. `None` for other listeners.
    pub fn acme_task(
        &self,
    ) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>> {
        if let Some(on_demand) = &self.inner.on_demand {
            return Some(Box::pin(Arc::clone(on_demand).renew_forever()));
        }
        let settings = self.inner.settings.acme.clone()?;
        let challenges = self.inner.challenges.clone()?;
        Some(Box::pin(crate::acme::run(
            self.clone(),
            settings,
            challenges,
        )))
    }

    /// An ACME listener's pending challenge answers.
    pub(crate) fn challenges(&self) -> Option<Arc<Challenges>> {
        self.inner.challenges.clone()
    }

    /// Re-reads every certificate and key file of the settings and, if all of them are
    /// good, serves them to every handshake from now on.
    ///
    /// Connections already open are untouched: each keeps the session it negotiated.
    /// Session tickets issued before stay valid. It applies to everything using this
    /// acceptor, including an axum-server listener built from
    /// [`server_config`](Self::server_config) (the certificates are swapped inside that
    /// same config).
    ///
    /// Reads the files synchronously; from async code, call it in `spawn_blocking` (or from
    /// the signal-handling thread).
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new). On error nothing changes: the certificates loaded before keep
    /// serving. Logging the error is the caller's business.
    pub fn reload(&self) -> Result<(), TlsError> {
        let _serial = self
            .inner
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let loaded = self
            .inner
            .settings
            .load_certs(self.inner.config.crypto_provider())?;
        self.inner.resolver.replace(CertSet::new(loaded));
        Ok(())
    }

    /// What the certificates being served cover, in the order of the settings (an
    /// on-demand listener's: those obtained so far).
    pub fn certificates(&self) -> Vec<CertInfo> {
        match &self.inner.on_demand {
            Some(on_demand) => on_demand.infos(),
            None => self.inner.resolver.current().infos(),
        }
    }

    /// The settings this acceptor loads from.
    pub fn settings(&self) -> &TlsSettings {
        &self.inner.settings
    }

    /// The rustls server configuration, for servers that take one (axum-server's
    /// `RustlsConfig::from_config`, hyper-based servers of your own). Its certificates
    /// follow [`reload`](Self::reload).
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.inner.config)
    }

    /// Runs the server side of a TLS handshake on `io` (usually a `TcpStream`).
    ///
    /// The future has no timeout of its own; bound it (scb's server applies its handshake
    /// timeout). The protocol ALPN chose is on the stream:
    /// `stream.get_ref().1.alpn_protocol()`.
    pub fn accept<IO>(&self, io: IO) -> Accept<IO>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        self.inner.acceptor.accept(io)
    }
}

/// The hook scb's server runs on each connection of a `listen_secure` listener: the
/// handshake, then HTTP/2 if ALPN chose `h2`, HTTP/1.1 otherwise (`http/1.1` or no ALPN).
impl Handshake for TlsAcceptor {
    fn handshake(&self, tcp: TcpStream) -> HandshakeFuture {
        if let Some(on_demand) = self.inner.on_demand.clone() {
            return on_demand_handshake(tcp, on_demand, Arc::clone(&self.inner.config));
        }
        let accept = self.accept(tcp);
        Box::pin(async move { secured(accept.await?) })
    }

    fn failure_reason(&self, error: &std::io::Error) -> &'static str {
        failure_reason(error)
    }
}

/// An on-demand listener's handshake: the ClientHello read first, then, for a name
/// without a certificate (and not a CA's validation), the certificate obtained while the
/// handshake waits; then the handshake, whose resolver finds it (or refuses with an
/// alert, when none could be had).
fn on_demand_handshake(
    tcp: TcpStream,
    on_demand: Arc<OnDemand>,
    config: Arc<ServerConfig>,
) -> HandshakeFuture {
    Box::pin(async move {
        let start =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
        let hello = start.client_hello();
        let validation = hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN));
        let name = hello.server_name().map(str::to_owned);
        if !validation
            && let Some(name) = name
            && let Err(why) = on_demand.obtain(&name).await
        {
            tracing::debug!(sni = %name, reason = %why, "TLS handshake refused: no on-demand certificate");
        }
        secured(start.into_stream(config).await?)
    })
}

/// What a finished handshake gives the server: the stream, the protocol ALPN chose, and
/// the client's certificate. A TLS-ALPN-01 validation ends there.
fn secured(stream: TlsStream<TcpStream>) -> std::io::Result<Secured> {
    if stream.get_ref().1.alpn_protocol() == Some(ACME_TLS_ALPN) {
        // A CA validating a TLS-ALPN-01 challenge: the handshake was the answer, and no
        // HTTP follows (RFC 8737 §3).
        return Err(std::io::Error::other(AcmeValidationAnswered));
    }
    let protocol = protocol(&stream);
    let session = stream.get_ref().1;
    let client = session
        .peer_certificates()
        .and_then(<[_]>::first)
        .and_then(crate::certs::client_certificate);
    let tls = tls_info(session);
    let mut secured = Secured::new(Box::new(stream), protocol)
        .client(client)
        .socket(tcp_under);
    if let Some(tls) = tls {
        secured = secured.tls(tls);
    }
    Ok(secured)
}

/// The TCP socket under a TLS stream of [`secured`]'s: tokio-rustls' read returns
/// `Pending` only when the session holds no plaintext, as [`Secured::socket`] requires.
fn tcp_under(io: &dyn std::any::Any) -> Option<&TcpStream> {
    io.downcast_ref::<TlsStream<TcpStream>>()
        .map(|stream| stream.get_ref().0)
}

/// The version and cipher suite a finished handshake agreed on, by the names log readers
/// know: the version as OpenSSL and nginx write it (`TLSv1.3`), the suite by its IANA
/// name (`TLS13_AES_128_GCM_SHA256`, rustls' name for it).
fn tls_info(session: &rustls::ServerConnection) -> Option<TlsInfo> {
    let version = match session.protocol_version()? {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        // rustls speaks no other; the enum has more for what peers may send.
        other => other.as_str().unwrap_or("unknown"),
    };
    let cipher = session
        .negotiated_cipher_suite()
        .and_then(|suite| suite.suite().as_str());
    Some(TlsInfo::new(version, cipher))
}

/// The end of a TLS-ALPN-01 validation's connection: the handshake was the answer.
#[derive(Debug, thiserror::Error)]
#[error("ACME TLS-ALPN-01 validation answered")]
struct AcmeValidationAnswered;

/// Why a handshake failed, in a few words fit for a metric label: what the client did
/// or lacked, not rustls' every variant.
fn failure_reason(error: &std::io::Error) -> &'static str {
    let Some(inner) = error.get_ref() else {
        return match error.kind() {
            // The client closed the connection mid-handshake (a scanner, or a client
            // that refused the certificate without an alert).
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe => "closed",
            _ => "io",
        };
    };
    if inner.is::<AcmeValidationAnswered>() {
        return "acme_validation";
    }
    let Some(tls) = inner.downcast_ref::<rustls::Error>() else {
        return "error";
    };
    match tls {
        // No version, cipher suite, group or signature scheme in common.
        rustls::Error::PeerIncompatible(_) => "incompatible",
        rustls::Error::AlertReceived(_) => "alert_received",
        rustls::Error::NoCertificatesPresented => "no_client_certificate",
        rustls::Error::InvalidCertificate(_) => "bad_client_certificate",
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::PeerMisbehaved(_)
        | rustls::Error::DecryptError => "protocol",
        _ => "error",
    }
}

/// The protocol ALPN agreed on for `stream`.
pub fn protocol<IO>(stream: &TlsStream<IO>) -> Protocol {
    match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::Http2,
        _ => Protocol::Http1,
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::{AcmeValidationAnswered, failure_reason};

    #[test]
    fn handshake_failures_are_named_by_what_the_client_did() {
        let tls = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let cases = [
            (
                tls(rustls::Error::PeerIncompatible(
                    rustls::PeerIncompatible::NoCipherSuitesInCommon,
                )),
                "incompatible",
            ),
            (
                tls(rustls::Error::AlertReceived(
                    rustls::AlertDescription::BadCertificate,
                )),
                "alert_received",
            ),
            (
                tls(rustls::Error::NoCertificatesPresented),
                "no_client_certificate",
            ),
            (
                tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::Expired,
                )),
                "bad_client_certificate",
            ),
            (tls(rustls::Error::DecryptError), "protocol"),
            (tls(rustls::Error::General("x".into())), "error"),
            (io::Error::from(io::ErrorKind::UnexpectedEof), "closed"),
            (io::Error::from(io::ErrorKind::TimedOut), "io"),
            (io::Error::other(AcmeValidationAnswered), "acme_validation"),
        ];
        for (error, reason) in cases {
            assert_eq!(failure_reason(&error), reason, "{error:?}");
        }
    }
}
