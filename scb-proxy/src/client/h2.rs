//! HTTP/2 to upstreams (`protocol = "h2"` over TLS, `"h2c"` in the clear): one multiplexed
//! connection per upstream and worker, shared by every request of that worker.
//!
//! Why hyper's HTTP/2 client when HTTP/1.1 has scb's own ([`crate::client`]): what scb's
//! HTTP/1.1 client saves, a task per connection and a channel hop per request, is the shape
//! of a multiplexed protocol. Frames for every stream arrive on one socket, with flow
//! control and HPACK state shared between them, so something must read that socket for all
//! of them; `h2` (which scb's server already runs on) does that and has the protocol right.
//!
//! A connection is made when a worker first needs one and kept while the upstream keeps it
//! open. Requests that arrive while it is being made wait for it rather than each making
//! their own; when making it fails, every one of them gets that failure at once and moves
//! to another upstream (rather than trying a connect of its own in turn). Beyond the upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`, requests wait in
//! hyper until a stream ends. A connection that went away (GOAWAY, a reset, a keep-alive
//! PING unanswered for [`KEEP_ALIVE`]) is replaced at the next request.
//!
//! No PROXY protocol header is sent on these connections: a multiplexed connection carries
//! many clients, and the builder refuses the combination.

use std::io;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use scb_core::Body;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;

use crate::client::Stream;
use crate::error::ProxyError;
use crate::upstream::Upstream;

/// How long a connection may go without a frame before a PING asks whether the upstream is
/// still there, and how long the answer may take before the connection is closed.
/// Without it an upstream that vanished (no FIN, no RST) would hold every request until
/// its `response_timeout`.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// One worker's connections, indexed like the upstream list.
#[derive(Debug)]
pub(crate) struct Multiplexed {
    slots: Box<[Mutex<Slot>]>,
    connect_timeout: Duration,
}

/// One upstream's connection, and how the last attempt to make one ended.
#[derive(Debug, Default)]
struct Slot {
    send: Option<SendRequest<Body>>,
    /// When the last connect failed, and why: whoever waited for that attempt gets its
    /// verdict and moves to another upstream, instead of queueing a connect of its own
    /// behind the lock (one `connect_timeout` each, against a black hole).
    failed: Option<(Instant, Failure)>,
}

#[derive(Clone, Copy, Debug)]
enum Failure {
    Timeout,
    Refused(io::ErrorKind),
}

/// A handle on a connection, and whether the connection carried requests before this one.
pub(crate) struct Sender {
    pub(crate) send: SendRequest<Body>,
    pub(crate) reused: bool,
}

impl Multiplexed {
    pub(crate) fn new(upstreams: usize, connect_timeout: Duration) -> Self {
        Self {
            slots: (0..upstreams).map(|_| Mutex::default()).collect(),
            connect_timeout,
        }
    }

    /// The connection to upstream `index`, made now if there is none open.
    pub(crate) async fn sender(
        &self,
        index: usize,
        upstream: &Upstream,
        tls: Option<&TlsConnector>,
    ) -> Result<Sender, ProxyError> {
        let asked = Instant::now();
        // Held across the connect: whoever comes meanwhile gets this connection, or the
        // verdict of this attempt.
        let mut slot = self.slots[index].lock().await;
        if let Some(send) = slot.send.as_ref().filter(|send| !send.is_closed()) {
            return Ok(Sender {
                send: send.clone(),
                reused: true,
            });
        }
        if let Some((at, failure)) = slot.failed
            && at >= asked
        {
            return Err(match failure {
                Failure::Timeout => ProxyError::ConnectTimeout,
                Failure::Refused(kind) => ProxyError::Connect(io::Error::new(
                    kind,
                    "connecting failed for the request before this one",
                )),
            });
        }
        slot.send = None;
        let made = tokio::time::timeout(self.connect_timeout, connect(upstream, tls))
            .await
            .map_err(|_| ProxyError::ConnectTimeout)
            .and_then(|made| made);
        match made {
            Ok(send) => {
                slot.send = Some(send.clone());
                slot.failed = None;
                Ok(Sender {
                    send,
                    reused: false,
                })
            }
            Err(e) => {
                let failure = match &e {
                    ProxyError::ConnectTimeout => Failure::Timeout,
                    ProxyError::Connect(io) => Failure::Refused(io.kind()),
                    _ => Failure::Refused(io::ErrorKind::Other),
                };
                slot.failed = Some((Instant::now(), failure));
                Err(e)
            }
        }
    }
}

/// A new HTTP/2 connection to `upstream`, its reading task spawned on the current runtime
/// (under scb's server, the worker's own).
pub(crate) async fn connect(
    upstream: &Upstream,
    tls: Option<&TlsConnector>,
) -> Result<SendRequest<Body>, ProxyError> {
    let stream = Stream::connect(upstream, tls, None)
        .await
        .map_err(ProxyError::Connect)?;
    if upstream.tls && stream.alpn() != Some(b"h2") {
        return Err(ProxyError::Connect(io::Error::other(
            "the upstream did not agree to HTTP/2 in the TLS handshake (ALPN)",
        )));
    }
    let (send, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE)
        .keep_alive_timeout(KEEP_ALIVE)
        // Idle too: a connection to an upstream that vanished is found out before a
        // request is sent on it.
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ProxyError::Connect(io::Error::other(e)))?;
    let name = upstream.to_string();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(upstream = %name, error = %e, "HTTP/2 upstream connection ended");
        }
    });
    Ok(send)
}

/// Sends `request`; when it failed before any of it went out, hands it back with the
/// error, so that it can be sent elsewhere.
pub(crate) async fn send(
    send: &mut SendRequest<Body>,
    request: Request<Body>,
) -> Result<Response<Incoming>, (Option<Request<Body>>, hyper::Error)> {
    send.try_send_request(request).await.map_err(|mut e| {
        let request = e.take_message();
        (request, e.into_error())
    })
}

/// Turns a request prepared for HTTP/1.1 (origin-form target, a `Host` field) into one for
/// HTTP/2: the scheme and `authority` in the target (`:scheme`, `:authority`), no `Host`
/// (RFC 9113 §8.3.1).
///
/// `authority` is the client's host; when it is not one (an empty `Host`), `fallback`,
/// the upstream's own.
pub(crate) fn address(
    request: &mut Request<Body>,
    scheme: Scheme,
    authority: &HeaderValue,
    fallback: &Authority,
) {
    request.headers_mut().remove(header::HOST);
    let mut parts = std::mem::take(request.uri_mut()).into_parts();
    parts.scheme = Some(scheme);
    parts.authority = Some(
        Authority::try_from(authority.as_bytes())
            .ok()
            .filter(|a| !a.host().is_empty())
            .unwrap_or_else(|| fallback.clone()),
    );
    let path = parts
        .path_and_query
        .take()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    parts.path_and_query = Some(path.clone());
    // A scheme, an authority and a path always make a URI; the fallback keeps the path.
    *request.uri_mut() = Uri::from_parts(parts).unwrap_or_else(|_| Uri::from(path));
    *request.version_mut() = Version::HTTP_2;
}
