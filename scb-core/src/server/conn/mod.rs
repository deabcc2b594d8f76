//! Connection drivers: scb's own HTTP/1.1 driver, and the hand-off to hyper for HTTP/2
//! prior knowledge and upgrades.

mod body;
mod encode;

pub use body::BodyError;
mod h1;
pub(crate) mod head;
mod hyper;
#[cfg(feature = "http3")]
mod quic;
#[cfg(feature = "http3")]
pub(crate) use quic::serve_quic;
mod service;
pub(crate) use service::{ConnService, ResponseBody};

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use tower::Service;

use super::io;
use super::lazy_tcp::LazyTcpStream;
use super::shutdown::Trigger;
use super::{ClientCertificate, ConnectInfo, Handshake, Limits, Protocol, TlsInfo};
use crate::{Body, BoxError};

/// Who a connection is with: what every request of it carries in its extensions.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    pub(crate) info: ConnectInfo,
    pub(crate) cert: Option<ClientCertificate>,
    pub(crate) tls: Option<TlsInfo>,
}

impl Peer {
    pub(crate) fn plain(info: ConnectInfo) -> Self {
        Self {
            info,
            cert: None,
            tls: None,
        }
    }

    /// Puts the connection's facts into a request's extensions: what a plain connection
    /// lacks is not inserted at all (each insert takes a slot of the map, which grows past
    /// three).
    pub(crate) fn stamp<B>(&self, req: &mut Request<B>) {
        let extensions = req.extensions_mut();
        extensions.insert(self.info);
        if let Some(tls) = self.tls {
            extensions.insert(tls);
        }
        if let Some(cert) = &self.cert {
            extensions.insert(cert.clone());
        }
    }
}

/// What every connection of one worker shares.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    pub(crate) limits: Limits,
    pub(crate) request_id_header: HeaderName,
    pub(crate) shutdown: Trigger,
    /// What the server counts of itself; `None` when off.
    pub(crate) metrics: Option<std::sync::Arc<super::metrics::ServerMetrics>>,
}

impl ConnCtx {
    /// Counts one of the server's own answers (see [`super::metrics`]).
    pub(crate) fn count_answer(&self, method: Option<&http::Method>, res: &Response<Body>) {
        if let Some(metrics) = &self.metrics {
            metrics.answers.record(method, res);
        }
    }
}

/// Serves one accepted plain connection until it closes: TCP, or a Unix socket (whose
/// peer is [`ConnectInfo::UNIX_PEER`], a local client to the access log,
/// `X-Forwarded-For` and client-address keys).
///
/// The service is lent to the drivers under it, never moved into their futures (a value
/// moved into an awaited future keeps its old place too), and the peer is made before the
/// `async` block rather than in an `async fn` (whose future holds its arguments, then the
/// body's copies of them); the same in [`serve_tcp`] and [`h1::serve`]. Every idle
/// connection holds this future: for `serve_tcp` with scb's service (312 bytes) it was
/// 1,912 bytes plus a 544-byte task, and is 1,000 bytes plus a 56-byte
/// task (measured with `size_of_val` on a release build).
pub(crate) fn serve<T, S, B>(
    stream: T,
    remote: SocketAddr,
    local: SocketAddr,
    mut svc: S,
    ctx: Rc<ConnCtx>,
) -> impl Future<Output = ()> + 'static
where
    T: io::Transport + Send + 'static,
    S: ConnService<B>,
    B: ResponseBody,
{
    let peer = Peer::plain(ConnectInfo {
        remote,
        local,
        secure: false,
    });
    async move {
        let start = Start::New { detect_h2: true };
        serve_h1(stream, start, false, &peer, &mut svc, &ctx).await;
    }
}

/// What a TCP connection of a listener needs of the listener's options.
pub(crate) struct TcpOptions {
    /// The handshake of a secure listener.
    pub(crate) secure: Option<super::Secure>,
    /// The PROXY header expected first, if the listener expects one.
    pub(crate) proxy_protocol: Option<std::sync::Arc<super::ProxyProtocol>>,
    /// The listener's handshake counters, when metrics are on.
    pub(crate) listener: Option<Rc<super::metrics::ListenerMetrics>>,
}

/// A plain HTTP/1.1 keep-alive connection between requests on a crowded worker, handed to
/// the worker to wait for its next request without a task of its own: the socket, who it
/// is with (the PROXY header's client included) and the settings it started with. Served
/// again by [`resume`].
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) stream: LazyTcpStream,
    pub(crate) info: ConnectInfo,
    pub(crate) ctx: Rc<ConnCtx>,
    /// When it is to be closed if no request comes first.
    pub(crate) keep_alive_until: tokio::time::Instant,
}

/// Serves one accepted TCP connection until it closes or is parked: its PROXY header if
/// the listener expects one, its handshake on a secure listener, then HTTP. A plain
/// HTTP/1.1 connection that goes idle on a crowded worker is returned to be parked
/// ([`Parked`]; a TLS connection waits in its task, on its socket, its session's keys and
/// state being most of what it holds).
///
/// The service lives once in this future, lent to the drivers under it (see [`serve`]);
/// the caller boxes the future where it is made, so that spawning it moves a pointer.
pub(crate) fn serve_tcp<S, B>(
    mut stream: LazyTcpStream,
    remote: SocketAddr,
    local: SocketAddr,
    options: TcpOptions,
    mut svc: S,
    ctx: Rc<ConnCtx>,
) -> impl Future<Output = Option<Parked>> + 'static
where
    S: ConnService<B>,
    B: ResponseBody,
{
    // Made before the `async` block, which then holds the addresses once.
    let mut peer = Peer::plain(ConnectInfo {
        remote,
        local,
        secure: false,
    });
    async move {
        if let Some(config) = &options.proxy_protocol {
            // Boxed: its buffer and timer would otherwise be part of every connection's
            // future.
            let proxy = peer.info.remote;
            let read = Box::pin(read_proxy_header(&mut stream, proxy, config, &ctx));
            match read.await {
                Some(client) => peer.info.remote = client,
                None => return None,
            }
        }
        match &options.secure {
            None => {
                let start = Start::New { detect_h2: true };
                let idle = serve_h1(stream, start, true, &peer, &mut svc, &ctx).await?;
                Some(Parked {
                    stream: idle.io,
                    info: peer.info,
                    ctx,
                    keep_alive_until: idle.keep_alive_until,
                })
            }
            // Boxed: the handshake's state would make every plain connection's future
            // as large as a secure one's.
            Some(secure) => {
                // The handshake runs on tokio's stream: it waits for the client's
                // flights, so the socket joins the reactor anyway.
                let stream = match stream.into_registered() {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!(peer = %peer.info.remote, error = %e, "could not register");
                        return None;
                    }
                };
                let listener = options.listener.as_deref();
                let (remote, local) = (peer.info.remote, peer.info.local);
                Box::pin(serve_secure(
                    stream, remote, local, &*secure.0, listener, &mut svc, &ctx,
                ))
                .await;
                None
            }
        }
    }
}

/// Serves a [`Parked`] connection whose socket has become readable, as [`serve_tcp`]
/// serves a new one (and returns it again if it goes idle again).
pub(crate) fn resume<S, B>(parked: Parked, mut svc: S) -> impl Future<Output = Option<Parked>>
where
    S: ConnService<B>,
    B: ResponseBody,
{
    let Parked {
        stream, info, ctx, ..
    } = parked;
    let peer = Peer::plain(info);
    async move {
        let idle = serve_h1(stream, Start::Resumed, true, &peer, &mut svc, &ctx).await?;
        Some(Parked {
            stream: idle.io,
            info: peer.info,
            ctx,
            keep_alive_until: idle.keep_alive_until,
        })
    }
}

/// Reads the PROXY header a listener with `config` expects, within the header-read
/// timeout and giving way to shutdown; the client's address, or `None` (logged and
/// counted) when the connection is to be closed.
pub(crate) async fn read_proxy_header(
    stream: &mut LazyTcpStream,
    peer: SocketAddr,
    config: &super::ProxyProtocol,
    ctx: &ConnCtx,
) -> Option<SocketAddr> {
    let read = super::proxy_protocol::read(stream, peer, config);
    let outcome = tokio::select! {
        biased;
        () = ctx.shutdown.fired() => return None,
        r = tokio::time::timeout(ctx.limits.header_read_timeout, read) => r,
    };
    match outcome {
        Ok(Ok(client)) => Some(client),
        Ok(Err(refused)) => {
            refused.record(peer);
            None
        }
        Err(_) => {
            super::proxy_protocol::Refused::TimedOut.record(peer);
            None
        }
    }
}

/// HTTP/1.1 through scb's driver, on any transport, then hyper for what leaves it (h2c,
/// an upgrade).
pub(crate) use h1::{Start, serve as serve_h1};

/// Serves one connection of a secure listener: the handshake (bounded by the handshake
/// timeout), then HTTP/2 through hyper or HTTP/1.1 through scb's driver, as ALPN chose.
pub(crate) async fn serve_secure<S, B>(
    stream: tokio::net::TcpStream,
    remote: SocketAddr,
    local: SocketAddr,
    handshake: &dyn Handshake,
    listener: Option<&super::metrics::ListenerMetrics>,
    svc: &mut S,
    ctx: &Rc<ConnCtx>,
) where
    S: ConnService<B>,
    B: ResponseBody,
{
    // Nagle off from the start: a handshake's flights and the tickets after it are
    // several writes, and any of them held for an acknowledgement is a round trip lost.
    let _ = stream.set_nodelay(true);
    let handshaking = handshake.handshake(stream);
    let secured = tokio::select! {
        biased;
        () = ctx.shutdown.fired() => return,
        r = tokio::time::timeout(ctx.limits.handshake_timeout, handshaking) => r,
    };
    let secured = match secured {
        Ok(Ok(secured)) => {
            if let Some(listener) = listener {
                listener.handshake(Ok(()));
            }
            secured
        }
        Ok(Err(e)) => {
            tracing::debug!(peer = %remote, error = %e, "handshake failed");
            if let Some(listener) = listener {
                listener.handshake(Err(handshake.failure_reason(&e)));
            }
            return;
        }
        Err(_) => {
            tracing::debug!(peer = %remote, "handshake timed out");
            if let Some(listener) = listener {
                listener.handshake(Err("timeout"));
            }
            return;
        }
    };
    let peer = Peer {
        info: ConnectInfo {
            remote,
            local,
            secure: true,
        },
        cert: secured.client,
        tls: secured.tls,
    };
    match secured.protocol {
        // Boxed, as in `serve_h1`: the HTTP/1.1 connections' futures stay small.
        Protocol::Http2 => Box::pin(hyper::serve_h2(secured.io, peer, svc.clone(), ctx)).await,
        Protocol::Http1 => {
            let io = io::SecureStream {
                io: secured.io,
                socket: secured.socket,
            };
            let start = Start::New { detect_h2: false };
            serve_h1(io, start, false, &peer, svc, ctx).await;
        }
    }
}

/// Calls the service, turning a panic (in `call` or in the future) or a service error
/// into the [`Failed`] answer, logged here, so that the driver answers it and the worker
/// goes on.
pub(crate) fn call_service<S, B>(svc: &mut S, req: Request<Body>) -> CallService<'_, S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
{
    CallService {
        svc,
        state: CallState::Ready { req: Some(req) },
    }
}

pin_project_lite::pin_project! {
    /// The future of [`call_service`], written out by hand: the service's future is moved
    /// once, into this future's place, and polled there. An `async` block with
    /// `catch_unwind` around the call and around the future moved the service's future
    /// (hundreds of bytes, the whole stack's) four times per request.
    pub(crate) struct CallService<'a, S>
    where
        S: Service<Request<Body>>,
    {
        svc: &'a mut S,
        #[pin]
        state: CallState<S::Future>,
    }
}

pin_project_lite::pin_project! {
    #[project = CallStateProj]
    enum CallState<F> {
        Ready { req: Option<Request<Body>> },
        Running { #[pin] future: F },
        Done,
    }
}

impl<S, B> Future for CallService<'_, S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
{
    type Output = Result<Response<B>, Failed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                CallStateProj::Ready { req } => {
                    if let Err(e) = ready!(this.svc.poll_ready(cx)) {
                        let e = e.into();
                        tracing::error!(error = %e, "service not ready");
                        this.state.set(CallState::Done);
                        return Poll::Ready(Err(Failed::of(&e)));
                    }
                    let Some(req) = req.take() else {
                        return Poll::Ready(Err(Failed::PANICKED));
                    };
                    let svc = &mut **this.svc;
                    let state = &mut this.state;
                    // The future is put in its place inside the closure: returned through
                    // `catch_unwind` it was moved twice more (the whole stack's future).
                    let called = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        state.set(CallState::Running {
                            future: svc.call(req),
                        });
                    }));
                    if let Err(panic) = called {
                        log_panic(&*panic);
                        this.state.set(CallState::Done);
                        return Poll::Ready(Err(Failed::PANICKED));
                    }
                }
                CallStateProj::Running { future } => {
                    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
                    let result = match polled {
                        Ok(Poll::Pending) => return Poll::Pending,
                        Ok(Poll::Ready(Ok(res))) => Ok(res),
                        Ok(Poll::Ready(Err(e))) => {
                            let e = e.into();
                            tracing::error!(error = %e, "service failed");
                            Err(Failed::of(&e))
                        }
                        Err(panic) => {
                            log_panic(&*panic);
                            Err(Failed::PANICKED)
                        }
                    };
                    // Dropped now: after a panic it is not polled again.
                    this.state.set(CallState::Done);
                    return Poll::Ready(result);
                }
                CallStateProj::Done => return Poll::Ready(Err(Failed::PANICKED)),
            }
        }
    }
}

/// The answer for a service that failed instead of answering: the one place a service's
/// error becomes a status. tower's own errors say what happened (a `Timeout` layer's
/// deadline passed: 504; a `LoadShed` layer shed the request: 503); anything else, and a
/// panic, is 500.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub(crate) status: StatusCode,
    pub(crate) reason: &'static str,
}

impl Failed {
    const PANICKED: Self = Self {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        reason: "the request handler failed",
    };

    fn of(error: &BoxError) -> Self {
        if error.is::<tower::timeout::error::Elapsed>() {
            Self {
                status: StatusCode::GATEWAY_TIMEOUT,
                reason: "the request handler timed out",
            }
        } else if error.is::<tower::load_shed::error::Overloaded>() {
            Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                reason: "the request handler is overloaded",
            }
        } else {
            Self::PANICKED
        }
    }

    /// The answer, as the server's own.
    pub(crate) fn response(self, request_id_header: &HeaderName) -> Response<Body> {
        error_response(self.status, self.reason, request_id_header, false)
    }
}

fn log_panic(panic: &(dyn std::any::Any + Send)) {
    let msg = crate::catch_panic::panic_message(panic);
    tracing::error!(panic = msg, "request handler panicked; answered 500");
}

/// A response the server makes itself: a short plain-text body, a fresh request id, and
/// `Connection: close` unless the connection can go on.
pub(crate) fn error_response(
    status: StatusCode,
    reason: &str,
    request_id_header: &HeaderName,
    close: bool,
) -> Response<Body> {
    let mut res = Response::new(Body::from(format!(
        "{}: {reason}\n",
        status.canonical_reason().unwrap_or("error")
    )));
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(request_id_header.clone(), crate::request_id::generate());
    if close {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    res
}
