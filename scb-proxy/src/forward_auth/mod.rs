//! Forward authentication: an auth service (Authelia, authentik, oauth2-proxy, ...)
//! decides on each request before the inner service sees it, as nginx's `auth_request`
//! and Caddy's `forward_auth` do.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use http::{HeaderName, StatusCode};
//! use scb_core::respond::Respond;
//! use scb_proxy::Upstream;
//! use scb_proxy::forward_auth::ForwardAuthLayer;
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let auth = ForwardAuthLayer::builder([Upstream::new("127.0.0.1:9091")?], "/api/verify")
//!     .copy_headers([
//!         HeaderName::from_static("remote-user"),
//!         HeaderName::from_static("remote-groups"),
//!     ])
//!     .response_timeout(Duration::from_secs(5))
//!     .build()?;
//! // Under scb's per-core server, each worker takes `auth.with_own_pool()`.
//! let app = ServiceBuilder::new()
//!     .layer(auth)
//!     .service(Respond::new(StatusCode::OK).body("private\n"));
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! What a request goes through, and why:
//!
//! - **The client's claims go first.** Every `copy_headers` field the client sent is
//!   removed before anything else, pass or not: neither the auth service nor the inner
//!   service ever sees a `Remote-User` the client wrote.
//! - **The subrequest** is `GET` to the configured `uri` (its own query kept) with no body,
//!   as Caddy's: the verify endpoints of Authelia, authentik and oauth2-proxy expect `GET`,
//!   and the original's body must stay unread for the inner service. It carries the
//!   original's fields (`Cookie`, `Authorization`, ...) except the hop-by-hop ones and those
//!   that frame a body (`Content-Length`, `Transfer-Encoding`, `Expect`), and says what the
//!   request was: `X-Forwarded-Method` and `X-Forwarded-Uri` (path and query as received
//!   here), always set by scb, whatever the client sent; `X-Forwarded-For`, `-Proto` and
//!   `-Host` by the proxy's own rule, the one every proxied request follows
//!   ([`TrustedProxies`](crate::TrustedProxies)): set from this connection (`https` on a
//!   secure one) and the request's `Host` or HTTP/2 `:authority`, replacing the client's,
//!   or kept from a trusted proxy in front, so that behind a TLS-terminating balancer the
//!   auth service sees `https` and builds its login redirects with it, as with Caddy's
//!   `trusted_proxies`. The extensions the proxy reads come along (`ConnectInfo`,
//!   [`ClientIp`](crate::ClientIp), the request [`Id`](scb_core::request_id::Id), a
//!   `ClientCertificate`); the access log's notes do not, so the log names the upstream
//!   that served the request, not the auth service.
//! - **Through a [`ReverseProxy`](crate::ReverseProxy)** built for the auth upstreams:
//!   pools (one per worker with [`with_own_pool`](ForwardAuthLayer::with_own_pool)),
//!   timeouts, retries of failed connects, balancing, passive and active health, `https://`
//!   and Unix-socket upstreams, HTTP/2, all as for any proxied request.
//! - **A 2xx answer** lets the request through: the answer's values of the `copy_headers`
//!   fields (every value, in order) are added to it, and it goes to the inner service with
//!   its body untouched, never read or buffered. The answer's other fields are dropped, as
//!   nginx and Caddy drop them: they describe the answer (its `Set-Cookie` included), which
//!   the client never sees. Its body is read and thrown away, up to 64 KiB, so that its
//!   connection goes back to the pool.
//! - **Any other answer** goes back to the client as it came, status, fields (a 401's
//!   `WWW-Authenticate`, a 302's `Location`, `Set-Cookie`) and body (streamed), and the
//!   inner service is never called. A 3xx is a refusal, not a pass: it is how an auth
//!   service sends a browser to its login page.
//! - **No answer** is a refusal too, never a pass: the proxy's own 502 (refused, reset,
//!   no healthy upstream) or 504 (timeout) goes to the client, and a warning is logged
//!   with the request id (besides the proxy's per-try lines and upstream metrics).
//!
//! The inner service is called only after the check, so the response future holds it (the
//! one `poll_ready` readied; the service keeps a clone, tower's usual swap) and the
//! request meanwhile. The check itself is boxed, as [`ReverseProxy`](crate::ReverseProxy)'s
//! own future is: it is the proxy's request loop, an `async fn` with no nameable type.

mod check;
mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::{ForwardAuthBuilder, ForwardAuthLayer};
pub use service::ForwardAuth;

#[cfg(test)]
mod tests;
