//! TLS for scb and for any tokio server: rustls configured from PEM files, certificates
//! chosen by SNI, ALPN `h2` and `http/1.1`, reload without restart, session resumption.
//!
//! With axum, through axum-server (the whole program: `examples/tls_axum.rs`):
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use axum_server::tls_rustls::RustlsConfig;
//! use scb_tls::{CertFiles, TlsAcceptor, TlsSettings};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Every file is read and checked here (key matches certificate, validity dates); an
//! // error names the file. The first certificate is the default: clients without SNI or
//! // with a name no certificate has get it.
//! let acceptor = TlsAcceptor::new(TlsSettings::new([
//!     CertFiles::new("/etc/scb/example.com.pem", "/etc/scb/example.com.key"),
//!     CertFiles::new("/etc/scb/example.org.pem", "/etc/scb/example.org.key"),
//! ]))?;
//! // axum-server takes the acceptor's rustls config as is; `acceptor.reload()` (on SIGHUP,
//! // say) swaps the certificates inside it, so axum-server's listener sees them too.
//! let config = RustlsConfig::from_config(acceptor.server_config());
//! let app = Router::new().route("/", get(|| async { "hello over TLS" }));
//! let addr: std::net::SocketAddr = "127.0.0.1:8443".parse()?;
//! axum_server::bind_rustls(addr, config)
//!     .serve(app.into_make_service())
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! With scb's server, `Server::builder().listen_secure(addr, acceptor)`: the acceptor
//! implements `scb_core::server::Handshake`. With anything else that has a TCP stream:
//!
//! ```no_run
//! # use scb_tls::{CertFiles, TlsAcceptor, TlsSettings};
//! # async fn run(acceptor: TlsAcceptor) -> Result<(), Box<dyn std::error::Error>> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
//! let (tcp, _) = listener.accept().await?;
//! let tls = acceptor.accept(tcp).await?;
//! let http2 = scb_tls::protocol(&tls) == scb_core::server::Protocol::Http2;
//!
//! // New handshakes get the new files, open connections keep theirs, and a broken file
//! // leaves the old certificates serving.
//! if let Err(e) = acceptor.reload() {
//!     eprintln!("TLS reload failed, still serving the previous certificates: {e}");
//! }
//! # let _ = http2;
//! # Ok(())
//! # }
//! ```
//!
//! What is served:
//!
//! - TLS 1.3 and TLS 1.2; for 1.2 only ECDHE key exchange with AEAD ciphers (AES-GCM,
//!   ChaCha20-Poly1305). Nothing older, no CBC, no RSA key exchange.
//! - Certificates: RSA, ECDSA P-256/P-384 and Ed25519 keys, in PKCS#8, SEC1 or PKCS#1 PEM.
//!   Loading checks that each key matches its certificate and that each leaf is within its
//!   validity period; every error names the file ([`TlsError`]).
//! - SNI: by the DNS names of each certificate's subject alternative names (see
//!   [`TlsSettings::cert`]); the first certificate is the default.
//! - ALPN: `h2` then `http/1.1`, or `http/1.1` only ([`Alpn`]).
//! - Resumption: stateless tickets under rotating keys, and a bounded server-side session
//!   cache ([`TlsSettings::session_cache`]). No 0-RTT (early data is replayable).
//! - Client certificates (mutual TLS), required or optional ([`TlsSettings::client_auth`]);
//!   the verified subject reaches each request as a `ClientCertificate` extension.
//! - Certificates from an ACME CA ([`AcmeSettings`]), renewed before they expire.
//! - No OCSP stapling.
//!
//! # Crypto provider: aws-lc-rs
//!
//! rustls needs a crypto provider; scb-tls uses aws-lc-rs rather than *ring*: it offers the
//! post-quantum hybrid X25519MLKEM768 that Chrome and Firefox try first (ring has none),
//! and its handshakes cost less CPU (about 15-30% with ECDSA, half with RSA-2048); per
//! record the two are within 10%. The price is build time once (aws-lc-sys compiles a C
//! library with the system C compiler). The measurements are in `bench/RESULTS.md`
//! ("TLS crypto provider"). The provider is named in one place (`provider.rs`), never
//! taken from rustls' process-wide default, so a build that also turns on rustls' `ring`
//! feature changes nothing here.
//!
//! # SNI names and validity dates
//!
//! The names in a certificate come from rustls-webpki, the parser rustls itself uses (so
//! no new dependency; x509-parser would have added nom, asn1-rs, der-parser, oid-registry
//! and their proc-macros). webpki does not expose `notBefore`/`notAfter`, so a short
//! DER walk in this crate (`der.rs`, unit-tested) reads them from the leaf webpki has
//! already accepted.

mod acceptor;
pub mod acme;
mod certs;
pub mod client;
mod config;
mod der;
mod error;
mod hkdf;
mod provider;
#[cfg(feature = "http3")]
mod quic;
mod resolver;
mod settings;
pub mod tickets;

pub use acceptor::{TlsAcceptor, protocol};
pub use acme::{AcmeChallenge, AcmeError, AcmeSettings, Http01Layer};
pub use certs::{CertFiles, CertInfo};
pub use error::TlsError;
pub use settings::{Alpn, ClientAuth, TlsSettings};
pub use tickets::TicketKeys;

/// The rustls this crate uses, for code that needs its types (e.g. a `ServerConfig` for
/// another server) without naming a version of its own.
pub use rustls;
/// The tokio-rustls this crate uses ([`TlsAcceptor::accept`] returns its
/// `server::TlsStream`).
pub use tokio_rustls;

/// This crate's README examples, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
