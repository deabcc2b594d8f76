//! Reverse proxy for scb: a tower service that forwards requests to upstream HTTP/1.1
//! servers.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use scb_proxy::{ActiveHealth, Balance, ReverseProxy, Upstream};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let proxy = ReverseProxy::builder([
//!     Upstream::new("127.0.0.1:8081")?,
//!     Upstream::new("127.0.0.1:8082")?.weight(2),
//! ])
//! .balance(Balance::LeastConn)
//! .connect_timeout(Duration::from_secs(2))
//! .response_timeout(Duration::from_secs(30))
//! .active_health(ActiveHealth::new("/healthz"))
//! .build()?;
//! // An axum app: `Router::new().nest_service("/api", proxy)`.
//! # let _ = proxy;
//! # Ok(())
//! # }
//! ```
//!
//! [`ReverseProxyLayer`] puts the proxy in front of another service for the requests under
//! a path prefix.
//!
//! What it does, and where:
//!
//! - **Pools**: keep-alive connections per upstream, per worker
//!   ([`ReverseProxy::with_own_pool`]), `TCP_NODELAY`, bounded and expiring, a stale
//!   connection told apart from a failed request.
//! - **Balancing** ([`Balance`]): round robin (weighted), least connections, power of two
//!   random choices, rendezvous hashing on a header or the client address.
//! - **Health** ([`PassiveHealth`], [`ActiveHealth`]): failing upstreams are skipped; when
//!   none is left the client gets 502 at once.
//! - **Retries**: a failed connect moves to the next upstream; an idempotent request
//!   without a body that failed on a reused connection before any response byte is sent
//!   once more; nothing whose body went out is ever replayed. Tries and their total time
//!   are bounded.
//! - **Errors** ([`ProxyError`]): connect failures, resets and invalid responses are 502,
//!   timeouts 504, a body over `max_body` 413; each with a short text body (scb's
//!   request-id layer, when it is in the stack, adds the id header as to any response).
//! - **Headers**: hop-by-hop fields stripped both ways, `X-Forwarded-For/-Proto/-Host`
//!   with [`TrustedProxies`], `Host` kept by default.
//! - **Upgrades**: a WebSocket handshake answered 101 joins the two connections.
//! - **Metrics** per upstream: see [`metrics`].
//! - **Forward auth** ([`forward_auth`]): a layer that asks an auth service (Authelia,
//!   authentik, oauth2-proxy) about each request through a proxy of its own, as nginx's
//!   `auth_request` and Caddy's `forward_auth`.
//!
//! The client's address (for `X-Forwarded-For` and hashing) is read from scb's
//! [`ConnectInfo`](scb_core::connection::ConnectInfo) request extension, which scb's server
//! sets; elsewhere insert a [`ClientIp`] (in axum, from its own `ConnectInfo`; see
//! `examples/proxy_axum.rs`).

mod balance;
mod body;
mod builder;
pub mod cache;
mod client;
mod error;
pub mod fastcgi;
mod forward;
pub mod forward_auth;
mod health;
pub mod layer;
pub mod metrics;
mod probe;
mod service;
mod settings;
mod tls;
mod upstream;

pub use balance::{Balance, HashKey};
pub use builder::{BuildError, ReverseProxyBuilder};
pub use error::{InvalidResponse, ProxyError};
pub use forward::{InvalidNetwork, TrustedProxies};
pub use health::{ActiveHealth, PassiveHealth};
pub use layer::{ReverseProxyLayer, ReverseProxyOr};
pub use service::{CLIENT_CERT_SAN, CLIENT_CERT_SUBJECT, ClientIp, ResponseFuture, ReverseProxy};
pub use settings::{ProxyHeader, ProxySettings, UpstreamProtocol};
pub use tls::{CertificatePin, InvalidPin, TlsFile, UpstreamTls, UpstreamTlsError};
pub use upstream::{InvalidUpstream, Upstream, UpstreamStatus};

/// This crate's README examples, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
