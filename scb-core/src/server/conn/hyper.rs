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
use http::{Method, Request, Response, StatusCode, header};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::Either;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use std::sync::{Arc, Mutex};

use super::Peer;
use super::body::BodyError;
use super::body::DISCARD_MAX;
use super::service::{ConnService, ResponseBody};
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
    S: ConnService<B>,
    B: ResponseBody,
{
    let limits = &ctx.limits;
    let max_header_list = u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX);
    let activity = Activity::new();
    let io = TimedIo::new(io, limits.send_timeout, activity.clone());
    let conn = hyper::server::conn::http2::Builder::new(LocalExec)
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_header_list_size(max_header_list)
        .initial_stream_window_size(stream_window(limits))
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
    S: ConnService<B>,
    B: ResponseBody,
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

/// The initial HTTP/2 stream window: [`Limits::h2_stream_window`](crate::server::Limits),
/// but never more than the largest body a request may have. A client may send a whole
/// window before it reads the answer; with a 1 MiB window and a 100 KiB limit it sent
/// ten times what could ever be taken before its 413 arrived (nginx advertises 64 KiB).
fn stream_window(limits: &crate::server::Limits) -> u32 {
    u32::try_from(limits.max_body_bytes).map_or(limits.h2_stream_window, |max| {
        limits.h2_stream_window.min(max.max(MIN_STREAM_WINDOW))
    })
}

/// The smallest initial stream window [`stream_window`] advertises: HTTP/2's own default
/// (RFC 9113 §6.9.2), so that a tiny body limit does not make every upload crawl.
const MIN_STREAM_WINDOW: u32 = 65_535;

type AdapterBody<B> = HoldingRequest<Either<B, Body>>;

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
    S: ConnService<B>,
    B: ResponseBody,
{
    let ctx = Rc::clone(ctx);
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let mut svc = svc.clone();
        let ctx = Rc::clone(&ctx);
        let peer = peer.clone();
        // Boxed: hyper spawns each stream's future as a task of its own and moves it
        // several times on the way (into the stream's state, the task's cell, out again on
        // completion); this future holds the whole service stack's future, kilobytes, where
        // a box is a pointer.
        Box::pin(async move {
            let limits = &ctx.limits;
            let deadline = Instant::now() + limits.body_read_timeout;
            let head = req.method() == Method::HEAD;
            // A declared length over the limit is refused before the service sees it, as
            // the HTTP/1.1 driver refuses it; hyper has checked that the length is valid.
            if req.body().size_hint().lower() > limits.max_body_bytes {
                let res = error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large",
                    &ctx.request_id_header,
                    false,
                );
                ctx.count_answer(Some(req.method()), &res);
                return Ok(finish(res.map(Either::Right), head, Some(req.into_body())));
            }
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
                ctx.count_answer(Some(req.method()), &res);
                return Ok(finish(res.map(Either::Right), head, None));
            }
            peer.stamp(&mut req);
            let res = match call_service(&mut svc, req).await {
                Ok(res) => res.map(Either::Left),
                Err(failed) => failed.response(&ctx.request_id_header).map(Either::Right),
            };
            let rest = unread.and_then(|slot| slot.lock().ok().and_then(|mut rest| rest.take()));
            let rest = match rest {
                // A refused body (over the limit, or answered 413) is not read: the
                // answer goes out at once.
                Some(rest) if !rest.refused && res.status() != StatusCode::PAYLOAD_TOO_LARGE => {
                    drain(rest.body, deadline).await
                }
                rest => rest.map(|rest| rest.body),
            };
            Ok(finish(res, head, rest))
        })
    })
}

/// The response as it goes to hyper: a HEAD response without its body, and the unread
/// rest of the request's body held until the response has been sent.
///
/// HEAD: hyper's HTTP/2 server sends whatever body the service made, after a HEADERS
/// frame without END_STREAM, and clients refuse DATA on a HEAD stream (curl and nghttp2
/// reset it with PROTOCOL_ERROR). The body is dropped here, its exact size kept as the
/// `Content-Length` a GET would get, so HEADERS carries END_STREAM. Over HTTP/1.1 (an
/// upgraded connection) hyper omits the body itself; the same answer suits it.
///
/// The request body: dropped before the response is sent, an unfinished one makes h2
/// reset the stream with CANCEL, and the client may never read the answer (a 413 to an
/// upload larger than the limit). Held until the response's last frame, its drop resets
/// with NO_ERROR, which RFC 9113 §8.1 prescribes for a response sent before the request
/// ended, and clients read the response first.
fn finish<B>(
    res: Response<Either<B, Body>>,
    head: bool,
    rest: Option<Incoming>,
) -> Response<AdapterBody<B>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let res = if head {
        let (mut parts, body) = res.into_parts();
        let bodiless = parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        // As hyper writes a GET's head: a length for a body that is not empty at once.
        if let Some(len) = body.size_hint().exact()
            && !body.is_end_stream()
            && !bodiless
            && !parts.headers.contains_key(header::CONTENT_LENGTH)
        {
            parts.headers.insert(header::CONTENT_LENGTH, len.into());
        }
        Response::from_parts(parts, Either::Right(Body::empty()))
    } else {
        res
    };
    res.map(|inner| HoldingRequest {
        inner,
        request: rest,
    })
}

pin_project_lite::pin_project! {
    /// A response body with what is left of its request's body, let go when the response
    /// is done with (see [`finish`] and [`linger`]).
    struct HoldingRequest<B> {
        #[pin]
        inner: B,
        request: Option<Incoming>,
    }

    impl<B> PinnedDrop for HoldingRequest<B> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(request) = this.project().request.take() {
                linger(request);
            }
        }
    }
}

/// How long the rest of a request's body is held after its response, waiting for the
/// client's next frame before the stream is reset (see [`linger`]).
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// Resets the stream of an unfinished request body with NO_ERROR once the client has sent
/// its next frame, or after [`LINGER`].
///
/// Reset at once, a client that has sent only its request head loses the response: curl
/// 7.88 (Debian 12's) takes the reset of a stream whose upload has not started as a
/// failed transfer, without reading the 413 it received with it. Once it has sent a
/// frame of its body it reads the answer and stops sending ("HTTP error before end of
/// send"), as it does with nginx, whose answer races the client's first DATA frame. The
/// wait costs a task on this rare path only (an answer before the end of its request's
/// body), bounded by [`LINGER`]; the flow-control window bounds what the client sends
/// meanwhile.
fn linger(mut request: Incoming) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        use http_body_util::BodyExt as _;
        let _ = tokio::time::timeout(LINGER, request.frame()).await;
    });
}

impl<B: http_body::Body> http_body::Body for HoldingRequest<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
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
/// goes out at once; what is left unread comes back, to be held until the response
/// has been sent (see [`finish`]).
async fn drain(mut body: Incoming, deadline: Instant) -> Option<Incoming> {
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
    (!body.is_end_stream()).then_some(body)
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
    /// before its end, it leaves the rest in `unread`, for [`drain`] and [`finish`].
    struct LimitedBody {
        inner: Option<Incoming>,
        #[pin]
        deadline: tokio::time::Sleep,
        received: u64,
        max: u64,
        unread: Arc<Mutex<Option<Unread>>>,
    }

    impl PinnedDrop for LimitedBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(rest) = this.inner.take().filter(|rest| !rest.is_end_stream())
                && let Ok(mut unread) = this.unread.lock()
            {
                *unread = Some(Unread {
                    body: rest,
                    refused: *this.received > *this.max,
                });
            }
        }
    }
}

/// What a service left of its request's body.
struct Unread {
    body: Incoming,
    /// Past the size limit: not worth reading, only holding (see [`finish`]).
    refused: bool,
}

impl LimitedBody {
    fn new(
        inner: Incoming,
        deadline: Instant,
        max: u64,
        unread: Arc<Mutex<Option<Unread>>>,
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
