//! What the server knows about a request's connection and worker, as plain values: the
//! request extensions [`ConnectInfo`], [`TlsInfo`] and [`ClientCertificate`], and the
//! [`WorkerInfo`] a worker's `make_service` is given.
//!
//! They live here, not in [`server`](crate::server), so that the layers that read them
//! (access log, client address, allow and deny, rate limits, the proxy's
//! `X-Forwarded-*`) depend on these values and not on the server runtime: the layers sit
//! below `server/`, and work the same under any server that inserts the extensions (in
//! axum, say, from its own `ConnectInfo`). `scb_core::server` re-exports them.

use std::net::SocketAddr;
use std::sync::Arc;

/// The peer and local addresses of the connection a request came in on.
///
/// The server inserts it into every request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectInfo {
    /// The client's address.
    pub remote: SocketAddr,
    /// The address of the listener that accepted the connection.
    pub local: SocketAddr,
    /// Whether the connection is secured (a listener added with
    /// [`Server::listen_secure`](crate::server::Server::listen_secure)): `https` rather than `http`.
    pub secure: bool,
}

impl ConnectInfo {
    /// The `remote` of a connection to a Unix-socket listener: `127.0.0.1` port 0. A
    /// Unix-socket peer is on this machine, as a loopback one is, and the layers that key
    /// on the client's address (access log, `X-Forwarded-For`, rate limits, allow and
    /// deny) treat it as such; behind a local front proxy, trusting `127.0.0.1` takes the
    /// client from its `X-Forwarded-For`.
    pub const UNIX_PEER: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);
    /// The `local` of a connection to a Unix-socket listener: `0.0.0.0` port 0, which no
    /// TCP listener has.
    pub const UNIX_LOCAL: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);
}

/// The TLS session of a secured connection: the protocol version and cipher suite its
/// handshake agreed on, by the names rustls and IANA give them (`TLSv1.3`,
/// `TLS13_AES_128_GCM_SHA256`). In the extensions of every request of the connection,
/// beside [`ConnectInfo`], when the [`Handshake`](crate::server::Handshake) told it; plain
/// connections have none (nothing is inserted: an extension costs the map a slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TlsInfo {
    /// The protocol version: `TLSv1.2` or `TLSv1.3`.
    pub version: &'static str,
    /// The cipher suite, e.g. `TLS13_AES_128_GCM_SHA256`; `None` where the TLS stack does
    /// not tell it (HTTP/3: quinn keeps its session's suite to itself).
    pub cipher: Option<&'static str>,
}

impl TlsInfo {
    /// A session of `version` with `cipher`.
    pub const fn new(version: &'static str, cipher: Option<&'static str>) -> Self {
        Self { version, cipher }
    }
}

/// The certificate a client presented on a listener that asks for one (mutual TLS),
/// verified against the listener's client CA: in the extensions of every request of the
/// connection, beside [`ConnectInfo`]. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate(Arc<CertificateNames>);

#[derive(Debug, PartialEq, Eq)]
struct CertificateNames {
    subject: String,
    sans: Vec<String>,
}

impl ClientCertificate {
    /// A certificate with `subject` (RFC 4514 text, `CN=alice,O=Example`) and subject
    /// alternative names `sans` (DNS names, URIs, e-mail addresses, IP addresses).
    pub fn new(subject: impl Into<String>, sans: Vec<String>) -> Self {
        Self(Arc::new(CertificateNames {
            subject: subject.into(),
            sans,
        }))
    }

    /// The subject, as RFC 4514 text.
    pub fn subject(&self) -> &str {
        &self.0.subject
    }

    /// The subject alternative names.
    pub fn sans(&self) -> &[String] {
        &self.0.sans
    }
}

/// What a worker tells `make_service` about itself.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The worker's index, `0..workers`.
    pub index: usize,
    /// How many workers the server runs.
    pub workers: usize,
}
