//! The hook a TLS implementation plugs into: [`Handshake`] turns an accepted TCP
//! connection into the stream HTTP is spoken on.
//!
//! scb-core names no TLS library (the dependency runs the other way: `scb-tls` implements
//! this trait with rustls). A listener added with
//! [`Server::listen_secure`](super::Server::listen_secure) runs the handshake on the
//! worker, bounded by [`Limits::handshake_timeout`](super::Limits::handshake_timeout),
//! then serves HTTP/2 (hyper) when ALPN chose `h2` and HTTP/1.1 (scb's own driver, as on
//! plain listeners) otherwise. There is no `sendfile` through TLS: file bodies are read
//! and encrypted.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream HTTP can be spoken on, of whatever type the handshake produced.
pub trait SecureIo: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// The stream as `Any`, for [`Secured::socket`] to find the socket under it.
    fn as_any(&self) -> &dyn Any;
}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> SecureIo for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Finds the TCP socket under a secured stream (given as [`SecureIo::as_any`]).
pub type SocketOf = for<'a> fn(&'a dyn Any) -> Option<&'a TcpStream>;

/// The protocol the handshake agreed on (ALPN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/2 (`h2`).
    Http2,
    /// HTTP/1.1 (`http/1.1`, or no ALPN at all).
    Http1,
}

/// A finished handshake. Built with [`Secured::new`], so that what a handshake can tell
/// the server may grow without breaking implementations.
#[non_exhaustive]
pub struct Secured {
    /// The stream to speak HTTP on.
    pub io: Box<dyn SecureIo>,
    /// What ALPN chose.
    pub protocol: Protocol,
    /// The client's verified certificate, when the listener asks for one and the client
    /// gave it: every request of the connection carries it.
    pub client: Option<super::ClientCertificate>,
    /// The session's version and cipher suite: every request of the connection carries
    /// them.
    pub tls: Option<super::TlsInfo>,
    /// How to find the TCP socket under `io` (see [`Secured::socket`]).
    pub socket: Option<SocketOf>,
}

impl Secured {
    /// `io`, speaking `protocol`, with no client certificate and no session facts.
    pub fn new(io: Box<dyn SecureIo>, protocol: Protocol) -> Self {
        Self {
            io,
            protocol,
            client: None,
            tls: None,
            socket: None,
        }
    }

    /// How to find the TCP socket under `io`, so that an idle HTTP/1.1 connection on a
    /// crowded worker can wait for the socket's readiness holding no buffer (as a plain
    /// connection does). Give it only when a read of `io` that returns `Pending` leaves
    /// no decrypted byte inside `io`, so that nothing is waiting that the socket's
    /// readiness would not show: true of rustls through tokio-rustls, whose read returns
    /// `Pending` only when the session has no plaintext and the socket had nothing.
    #[must_use]
    pub fn socket(mut self, socket: SocketOf) -> Self {
        self.socket = Some(socket);
        self
    }

    /// The client's verified certificate.
    #[must_use]
    pub fn client(mut self, client: Option<super::ClientCertificate>) -> Self {
        self.client = client;
        self
    }

    /// The session's version and cipher suite, for the access log.
    #[must_use]
    pub fn tls(mut self, tls: super::TlsInfo) -> Self {
        self.tls = Some(tls);
        self
    }
}

impl fmt::Debug for Secured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secured")
            .field("protocol", &self.protocol)
            .field("client", &self.client)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// The future of a [`Handshake`].
pub type HandshakeFuture = Pin<Box<dyn Future<Output = io::Result<Secured>> + Send>>;

/// Turns an accepted TCP connection into a secured stream (a TLS handshake).
///
/// One value serves every worker (`Send + Sync`); it may change what later handshakes
/// use (a certificate reload) while earlier connections keep what they got.
pub trait Handshake: Send + Sync + 'static {
    /// Runs the handshake on `tcp`. The server bounds it with its handshake timeout.
    fn handshake(&self, tcp: TcpStream) -> HandshakeFuture;

    /// A short name for why a handshake failed with `error`: the `result` label of
    /// [`TLS_HANDSHAKES_TOTAL`](super::metrics::TLS_HANDSHAKES_TOTAL). Keep to a fixed
    /// set of names, so that clients cannot add series. Defaults to `error`.
    fn failure_reason(&self, error: &io::Error) -> &'static str {
        let _ = error;
        "error"
    }
}
