//! TLS for scb: rustls configured from PEM files, certificates chosen by SNI, ALPN `h2`
//! and `http/1.1`, reload without restart, session resumption.
//!
//! ```no_run
//! use scb_tls::{CertFiles, TlsAcceptor, TlsSettings};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let acceptor = TlsAcceptor::new(TlsSettings::new([
//!     // The first certificate is also the default: clients without SNI or with a name no
//!     // certificate has get it.
//!     CertFiles::new("/etc/scb/example.com.pem", "/etc/scb/example.com.key"),
//!     CertFiles::new("/etc/scb/example.org.pem", "/etc/scb/example.org.key"),
//! ]))?;
//!
//! // scb's server: `Server::builder().listen_secure(addr, acceptor.clone())`; the acceptor
//! // implements `scb_core::server::Handshake`. Anyone else: `accept` a TCP connection.
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8443").await?;
//! let (tcp, _) = listener.accept().await?;
//! let tls = acceptor.accept(tcp).await?;
//! let http2 = scb_tls::protocol(&tls) == scb_core::server::Protocol::Http2;
//!
//! // On SIGHUP: new handshakes get the new files, open connections keep theirs, and a
//! // broken file leaves the old certificates serving.
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
//! - No client certificates, no OCSP stapling.
//!
//! # Crypto provider: aws-lc-rs
//!
//! rustls needs a crypto provider; the two maintained ones are *ring* and *aws-lc-rs*
//! (AWS's fork of BoringSSL). scb-tls uses aws-lc-rs. Measured on the 2-core build box
//! (rustls 0.23.46; ring 0.17.14, aws-lc-rs 1.19.0 / aws-lc-sys 0.47.0; figures are the
//! best of several runs on a shared machine, so read them to ±10%):
//!
//! | | ring | aws-lc-rs |
//! |---|---|---|
//! | cold `cargo build` of rustls + provider, debug | 16 s (16 CPU-s) | 34 s (48 CPU-s) |
//! | same, `opt-level = 3` | 34 s (37 CPU-s) | 53 s (81 CPU-s) |
//! | server CPU per full TLS 1.3 handshake, ECDSA P-256, X25519 | 110 µs | 93 µs |
//! | same, RSA-2048 | 700 µs | 340 µs |
//! | same, TLS 1.2, ECDSA P-256 | 100 µs | 70 µs |
//! | same, TLS 1.3, X25519MLKEM768 (post-quantum hybrid) | not available | 117 µs |
//! | server CPU to seal one 16 KiB record, AES-256-GCM | 2.7 µs | 2.45 µs |
//!
//! (Handshakes and records measured in memory, without sockets, server side only, in an
//! `opt-level = 3` probe crate; not part of this repository.)
//!
//! Why aws-lc-rs, then:
//!
//! - **Post-quantum key exchange.** Chrome and Firefox offer X25519MLKEM768 first; with
//!   aws-lc-rs those connections get it (protection of recorded traffic against a future
//!   quantum computer), with ring they fall back to X25519. This alone decides it for a
//!   server whose job is terminating TLS; it is also rustls' own default provider.
//! - **CPU.** Per record, where a long-lived HTTP/2 connection spends its time, the two are
//!   within 10% (both run BoringSSL-derived AES-GCM assembly). Per handshake aws-lc-rs is
//!   15-30% cheaper with ECDSA and half the cost with RSA-2048, still a common certificate
//!   (certbot issued RSA by default until 2022).
//! - **The cost is build time, once:** +18 s wall, +32 CPU-s on a cold debug build
//!   (aws-lc-sys compiles a large C library), nothing on incremental builds. The toolchain
//!   worry does not hold on the usual targets: for Linux (x86, x86-64, aarch64, arm,
//!   ppc64le), macOS and Windows, aws-lc-sys ships pre-generated sources and bindings and
//!   builds with the `cc` crate and the system C compiler (gcc here; no cmake, clang or Go,
//!   none of which is installed on this box). Other targets and FIPS builds need cmake
//!   (and clang for bindgen); Windows needs NASM, which the `prebuilt-nasm` feature (on
//!   through rustls) supplies.
//! - **Why not ring:** faster and simpler to build (a C compiler is enough everywhere) and
//!   already compiled in this workspace for rcgen and the bench crate's axum peer, but no
//!   post-quantum key exchange and slower handshakes.
//!
//! The provider is named in one place (`config::provider`), never taken from rustls'
//! process-wide default, so a build that also turns on rustls' `ring` feature (the bench
//! crate does) changes nothing here. Switching is that function plus the rustls feature
//! in `Cargo.toml`.
//!
//! # SNI names and validity dates
//!
//! The names in a certificate come from rustls-webpki, the parser rustls itself uses (so
//! no new dependency; x509-parser would have added nom, asn1-rs, der-parser, oid-registry
//! and their proc-macros). webpki does not expose `notBefore`/`notAfter`, so a short
//! DER walk in this crate (`der.rs`, unit-tested) reads them from the leaf webpki has
//! already accepted.

mod acceptor;
mod certs;
mod config;
mod der;
mod error;
mod resolver;
mod settings;

pub use acceptor::{TlsAcceptor, protocol};
pub use certs::CertInfo;
pub use error::TlsError;
pub use settings::{Alpn, CertFiles, TlsSettings};

/// The rustls this crate uses, for code that needs its types (e.g. a `ServerConfig` for
/// another server) without naming a version of its own.
pub use rustls;
/// The tokio-rustls this crate uses ([`TlsAcceptor::accept`] returns its
/// `server::TlsStream`).
pub use tokio_rustls;
