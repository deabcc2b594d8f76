//! The hand-off to hyper: HTTP/2 (h2c with prior knowledge, and TLS connections whose
//! ALPN chose `h2`) and HTTP/1.1 connections after an upgrade or CONNECT.
//!
//! hyper runs on the worker's own thread: its HTTP/2 stream tasks are spawned with
//! `spawn_local`, so services need not be `Send`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::Either;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tower::Service;

use std::sync::{Arc, Mutex};

use super::Peer;
use super::body::BodyError;
use super::h1::DISCARD_MAX;
use super::{ConnCtx, call_service, error_response};
use crate::server::io::{Activity, TimedIo};
use crate::{Body, BoxError};

/// Spawns hyper's HTTP/2 stream tasks on the current worker thread.
#[derive(Clone, Copy, Debug)]
struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: Future + 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

pub(crate) async fn serve_h2<I, S, B>(io: I, peer: Peer, svc: S, ctx: &Rc<ConnCtx>)
where
    I: AsyncRead + AsyncWrite + Unpin + 'static,
    S: Service<Request<Body>, Response = Response<B>> + Clone + 'static,
    S::Error: Into<BoxError>,
    S::Future: 'static,
    B: http_body::Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    let limits = &ctx.limits;
    let max_header_list = u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX);
    let activity = Activity::new();
    let io = TimedIo::new(io, limits.send_timeout, activity.clone());
    let conn = hyper::server::conn::http2::Builder::new(LocalExec)
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_header_list_size(max_header_list)
        .initial_stream_window_size(limits.h2_stream_window)
        .initial_connection_window_size(limits.h2_connection_window)
        .max_pending_accept_reset_streams(limits.h2_max_pending_reset_streams)
        .max_local_error_reset_streams(limits.h2_max_local_error_reset_streams)
        .serve_connection(TokioIo::new(io), adapter(svc, peer.clone(), ctx));
    let mut conn = pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = until_idle_or_shutdown(&activity, ctx) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(peer = %peer.info.remote, error = %e, "HTTP/2 connection ended with an error");
    }
}

pub(crate) async fn serve_h1<I, S, B>(io: I, peer: Peer, svc: S, ctx: &Rc<ConnCtx>)
where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    S: Service<Request<Body>, Response = Response<B>> + Clone + 'static,
    S::Error: Into<BoxError>,
    S::Future: 'static,
    B: http_body::Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    let limits = &ctx.limits;
    let activity = Activity::new();
    let io = TimedIo::new(io, limits.send_timeout, activity.clone());
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers)
        .serve_connection(TokioIo::new(io), adapter(svc, peer.clone(), ctx))
        .with_upgrades();
    let mut conn = pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = until_idle_or_shutdown(&activity, ctx) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(peer = %peer.info.remote, error = %e, "HTTP/1.1 connection ended with an error");
    }
}

/// Resolves when the server shuts down, or when no byte has moved on the connection for
/// the keep-alive timeout. Either way the connection is then closed gracefully: hyper
/// finishes the requests in flight (an HTTP/2 client gets GOAWAY) and accepts no more.
async fn until_idle_or_shutdown(activity: &Activity, ctx: &ConnCtx) {
    let idle = async {
        loop {
            let deadline = activity.last() + ctx.limits.keep_alive_timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    tokio::select! {
        () = idle => tracing::debug!("closing an idle connection"),
        () = ctx.shutdown.fired() => {}
    }
}

type AdapterBody<B> = Either<B, Body>;

/// Turns a tower service over `Request<Body>` into the hyper service hyper wants.
fn adapter<S, B>(
    svc: S,
    peer: Peer,
    ctx: &Rc<ConnCtx>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<AdapterBody<B>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<AdapterBody<B>>, Infallible>> + 'static,
> + 'static
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + 'static,
    S::Error: Into<BoxError>,
    S::Future: 'static,
    B: http_body::Body<Data = Bytes> + 'static,
    B::Error: Into<BoxError>,
{
    let ctx = Rc::clone(ctx);
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let mut svc = svc.clone();
        let ctx = Rc::clone(&ctx);
        let peer = peer.clone();
        async move {
            let limits = &ctx.limits;
            let deadline = Instant::now() + limits.body_read_timeout;
            let mut unread = None;
            let mut req = req.map(|body| {
                if body.is_end_stream() {
                    Body::empty()
                } else {
                    let slot = Arc::new(Mutex::new(None));
                    unread = Some(Arc::clone(&slot));
                    Body::new(LimitedBody::new(
                        body,
                        deadline,
                        limits.max_body_bytes,
                        slot,
                    ))
                }
            });
            if !has_valid_authority(&req) {
                let res = error_response(
                    StatusCode::BAD_REQUEST,
                    "invalid host",
                    &ctx.request_id_header,
                    false,
                );
                return Ok(res.map(Either::Right));
            }
            peer.stamp(&mut req);
            let res = match call_service(&mut svc, req).await {
                Ok(res) => res.map(Either::Left),
                Err(failed) => failed.response(&ctx.request_id_header).map(Either::Right),
            };
            if let Some(slot) = unread {
                let rest = slot.lock().ok().and_then(|mut rest| rest.take());
                if let Some(rest) = rest {
                    drain(rest, deadline).await;
                }
            }
            Ok(res)
        }
    })
}

/// Reads what a service left of its request body, at most [`DISCARD_MAX`] bytes by the
/// body deadline, before the response goes out (the HTTP/1.1 driver does the same after
/// its response).
///
/// On HTTP/2 this is what makes the stream's verdict deterministic: a response sent while
/// the client is still sending ends the stream with `RST_STREAM(NO_ERROR)`, and whatever
/// the client sends after that (a DATA frame longer than its Content-Length, trailers
/// with pseudo-headers, frames after its own RST_STREAM) is ignored, as RFC 9113 §5.1
/// allows for a closed stream; read first, each of those is the stream or connection
/// error RFC 9113 §8.1.1 and §5.1 require. h2spec failed those cases in some runs and
/// passed them in others, by which frame arrived first. Beyond the bound the response
/// goes out at once, as before.
async fn drain(mut body: Incoming, deadline: Instant) {
    use http_body_util::BodyExt as _;
    let mut read = 0u64;
    let reading = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return };
            if let Some(data) = frame.data_ref() {
                read += data.len() as u64;
                if read > DISCARD_MAX {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, reading).await;
}

/// Whether the request's authority (HTTP/2 `:authority`, an absolute-form target) and
/// every `Host` field are `host [":" port]` (see [`crate::http1::is_valid_host`]): the
/// same check the HTTP/1.1 driver makes, so that no transport lets an invalid Host reach
/// redirects, forwarded headers or logs.
fn has_valid_authority<B>(req: &Request<B>) -> bool {
    req.uri()
        .authority()
        .is_none_or(|a| crate::http1::is_valid_host(a.as_str().as_bytes()))
        && req
            .headers()
            .get_all(http::header::HOST)
            .iter()
            .all(|v| crate::http1::is_valid_host(v.as_bytes()))
}

pin_project_lite::pin_project! {
    /// hyper's request body with the body-read deadline and size limit applied. Dropped
    /// before its end, it leaves the rest in `unread` for [`drain`].
    struct LimitedBody {
        inner: Option<Incoming>,
        #[pin]
        deadline: tokio::time::Sleep,
        received: u64,
        max: u64,
        unread: Arc<Mutex<Option<Incoming>>>,
    }

    impl PinnedDrop for LimitedBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(rest) = this.inner.take().filter(|rest| !rest.is_end_stream())
                && *this.received <= *this.max
                && let Ok(mut unread) = this.unread.lock()
            {
                *unread = Some(rest);
            }
        }
    }
}

impl LimitedBody {
    fn new(
        inner: Incoming,
        deadline: Instant,
        max: u64,
        unread: Arc<Mutex<Option<Incoming>>>,
    ) -> Self {
        Self {
            inner: Some(inner),
            deadline: tokio::time::sleep_until(deadline),
            received: 0,
            max,
            unread,
        }
    }
}

impl http_body::Body for LimitedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(frame) = Pin::new(inner).poll_frame(cx) {
            if let Some(Ok(frame)) = &frame
                && let Some(data) = frame.data_ref()
            {
                *this.received += data.len() as u64;
                if *this.received > *this.max {
                    return Poll::Ready(Some(Err(BodyError::TooLarge.into())));
                }
            }
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if this.deadline.poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyError::Timeout.into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}
