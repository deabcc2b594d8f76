//! Spans: a request's place in a distributed trace (W3C Trace Context), and a server span
//! for each sampled request, handed to a [`SpanSink`] when its response ends.
//!
//! [`SpansLayer`] reads the request's `traceparent` and `tracestate` (strictly: a
//! malformed or repeated `traceparent` starts a trace of its own, never an error), makes
//! this server's span in that trace and puts its [`TraceContext`] in the request's
//! extensions, where the access log's `{trace_id}`, the error pages and the upstream
//! gateways find it: scb-proxy's `ReverseProxy` (HTTP/1.1 and HTTP/2) and `FastCgi`
//! (as `HTTP_TRACEPARENT`) tell their upstream the trace (their `propagate_trace`), a
//! sampled request's as the exchange's own child span (see
//! [`SpanNotes::upstream_exchange`]). The layer itself changes nothing in the request:
//! rewriting `traceparent` here would cost every request a header, most of which go to
//! no upstream.
//!
//! Sampling is parent-based: a request whose parent is sampled is sampled, one whose
//! parent is not is not, and a trace that starts here is sampled with the
//! [`sample_ratio`](SpansLayer::sample_ratio), decided from the trace id (so every
//! ratio-based sampler downstream agrees). Only a sampled request costs more than its ids:
//! [`SpanNotes`] for the layers beneath (the route, the upstream's child span with its
//! connections, failed tries and first byte), and a [`FinishedSpan`] when its body ends.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//!
//! use http::{Request, StatusCode};
//! use scb_core::Body;
//! use scb_core::respond::Respond;
//! use scb_core::spans::{FinishedSpan, SpansLayer};
//! use scb_core::trace_context::TraceContext;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let spans = Arc::new(Mutex::new(Vec::<FinishedSpan>::new()));
//! let sink = Arc::clone(&spans);
//! let svc = ServiceBuilder::new()
//!     .layer(SpansLayer::new(move |span| sink.lock().unwrap().push(span)).sample_ratio(1.0))
//!     .service(Respond::new(StatusCode::OK));
//! let req = Request::builder()
//!     .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
//!     .body(Body::empty())
//!     .unwrap();
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! let spans = spans.lock().unwrap();
//! assert_eq!(spans[0].context.trace_id_hex(), "0af7651916cd43dd8448eb211c80319c");
//! assert_eq!(spans[0].parent, Some([0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]));
//! assert_eq!(spans[0].status, Some(StatusCode::OK));
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::USER_AGENT;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri, Version, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::Body;
use crate::BoxError;
use crate::connection::ConnectInfo;
use crate::trace_context::TraceContext;

mod finished;
mod notes;
#[cfg(test)]
mod tests;

pub use finished::{FinishedSpan, SpanSink, UpstreamEvent, UpstreamEventKind, UpstreamSpan};
pub use notes::SpanNotes;

pub use crate::trace_context::{TRACEPARENT, TRACESTATE};

/// Applies [`Spans`] to a service: see the [module documentation](self).
#[derive(Clone)]
pub struct SpansLayer {
    settings: Arc<Settings>,
}

struct Settings {
    /// `None`: trace context only, no spans recorded.
    sink: Option<Arc<dyn SpanSink>>,
    /// A root trace is sampled when its id's last 8 bytes, as a number, are below this;
    /// `u64::MAX` stands for "always" (a ratio of 1).
    threshold: u64,
}

impl fmt::Debug for SpansLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpansLayer")
            .field("threshold", &self.settings.threshold)
            .finish_non_exhaustive()
    }
}

impl SpansLayer {
    /// Spans go to `sink`; every trace that starts here is sampled until
    /// [`sample_ratio`](Self::sample_ratio) says otherwise.
    pub fn new(sink: impl SpanSink) -> Self {
        Self {
            settings: Arc::new(Settings {
                sink: Some(Arc::new(sink)),
                threshold: u64::MAX,
            }),
        }
    }

    /// Trace context without spans: every request gets its [`TraceContext`] (for logs,
    /// error pages and upstreams, with the client's sampling decision passed on), and
    /// nothing is recorded. Traces starting here are not sampled.
    pub fn context_only() -> Self {
        Self {
            settings: Arc::new(Settings {
                sink: None,
                threshold: 0,
            }),
        }
    }

    /// The share of traces starting here that are sampled, from 0 (none: only requests
    /// whose parent is sampled) to 1 (all). Defaults to 1. Out-of-range values are
    /// clamped; NaN is 0.
    #[must_use]
    pub fn sample_ratio(mut self, ratio: f64) -> Self {
        self.settings_mut().threshold = threshold(ratio);
        self
    }

    fn settings_mut(&mut self) -> &mut Settings {
        Arc::get_mut(&mut self.settings).expect("SpansLayer is configured before it is cloned")
    }
}

impl<S> Layer<S> for SpansLayer {
    type Service = Spans<S>;

    fn layer(&self, inner: S) -> Spans<S> {
        Spans {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

/// The service of [`SpansLayer`].
#[derive(Clone)]
pub struct Spans<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S: fmt::Debug> fmt::Debug for Spans<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spans")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, ReqB> Service<Request<ReqB>> for Spans<S>
where
    S: Service<Request<ReqB>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let settings = &*self.settings;
        let parent = parent(req.headers());
        let span = span_id();
        let context = match &parent {
            Some(parent) => parent.child(span),
            None => {
                let trace = trace_id();
                let sampled = sampled(&trace, settings.threshold);
                TraceContext::new(trace, span, sampled).expect("generated ids are not zero")
            }
        };
        let sink = settings.sink.as_ref().filter(|_| context.sampled());
        let pending = sink.map(|sink| {
            let notes = SpanNotes::new(context.clone());
            req.extensions_mut().insert(notes.clone());
            Box::new(Pending {
                sink: Arc::clone(sink),
                notes,
                parent: parent.map(|p| p.span_id()),
                start: SystemTime::now(),
                method: req.method().clone(),
                uri: req.uri().clone(),
                host: req.headers().get(header::HOST).cloned(),
                user_agent: req.headers().get(USER_AGENT).cloned(),
                peer: req
                    .extensions()
                    .get::<ConnectInfo>()
                    .map(|info| info.remote.ip()),
                version: req.version(),
            })
        });
        req.extensions_mut().insert(context);
        ResponseFuture {
            inner: self.inner.call(req),
            pending,
        }
    }
}

/// The client's context: the one `traceparent` field, valid, with `tracestate` (several
/// fields joined, as the recommendation says); `None` for none, several or a bad one.
fn parent(headers: &HeaderMap) -> Option<TraceContext> {
    let mut fields = headers.get_all(TRACEPARENT).iter();
    let traceparent = fields.next()?.to_str().ok()?;
    if fields.next().is_some() {
        return None;
    }
    let mut states = headers.get_all(TRACESTATE).iter();
    let first = states.next().and_then(|v| v.to_str().ok());
    match states.next() {
        None => TraceContext::parse(traceparent, first),
        Some(_) => {
            let joined = headers
                .get_all(TRACESTATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
                .join(",");
            TraceContext::parse(traceparent, Some(&joined))
        }
    }
}

/// The threshold of [`Settings`] for `ratio`.
fn threshold(ratio: f64) -> u64 {
    if ratio.is_nan() || ratio <= 0.0 {
        0
    } else if ratio >= 1.0 {
        u64::MAX
    } else {
        // Exact enough: the ratio's 53 bits of mantissa over 64 bits of id.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let t = (ratio * 18_446_744_073_709_551_616.0) as u64;
        t
    }
}

fn sampled(trace: &[u8; 16], threshold: u64) -> bool {
    let low = u64::from_be_bytes(trace[8..].try_into().expect("8 bytes"));
    threshold == u64::MAX || low < threshold
}

/// A new span id: random, never zero (an invalid id in W3C Trace Context).
pub(crate) fn span_id() -> [u8; 8] {
    fastrand::u64(1..).to_be_bytes()
}

/// A new trace id: random, never zero.
fn trace_id() -> [u8; 16] {
    fastrand::u128(1..).to_be_bytes()
}

/// A sampled request's span until its response ends.
struct Pending {
    sink: Arc<dyn SpanSink>,
    notes: SpanNotes,
    parent: Option<[u8; 8]>,
    start: SystemTime,
    method: Method,
    uri: Uri,
    host: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    peer: Option<IpAddr>,
    version: Version,
}

impl Pending {
    fn finish(self, status: Option<http::StatusCode>, bytes: u64, completed: bool) {
        let end = SystemTime::now();
        let noted = self.notes.take();
        let context = self.notes.context().clone();
        self.sink.export(FinishedSpan {
            context,
            parent: self.parent,
            start: self.start,
            end,
            method: self.method,
            uri: self.uri,
            host: self.host,
            user_agent: self.user_agent,
            peer: self.peer,
            version: self.version,
            route: noted.route,
            status,
            bytes,
            completed,
            upstream: noted.upstream,
        });
    }
}

pin_project! {
    /// Response future of [`Spans`].
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        pending: Option<Box<Pending>>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("sampled", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let Some(pending) = this.pending.take() else {
            return Poll::Ready(result);
        };
        Poll::Ready(match result {
            Ok(res) if res.body().streams() => {
                let status = res.status();
                Ok(res.map(|body| {
                    Body::new(SpanBody {
                        inner: body,
                        pending: Some(pending),
                        status,
                        bytes: 0,
                    })
                }))
            }
            Ok(res) => {
                // Empty, in memory or a file: its length is known, and the server sends
                // it whole or closes the connection.
                let bytes = res.body().size_hint().exact().unwrap_or(0);
                pending.finish(Some(res.status()), bytes, true);
                Ok(res)
            }
            Err(e) => {
                pending.finish(None, 0, false);
                Err(e)
            }
        })
    }
}

pin_project! {
    /// A sampled response's streamed body: the span ends with it.
    struct SpanBody {
        #[pin]
        inner: Body,
        pending: Option<Box<Pending>>,
        status: http::StatusCode,
        bytes: u64,
    }

    impl PinnedDrop for SpanBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(pending) = this.pending.take() {
                // The client left, or the connection failed, before the end.
                pending.finish(Some(*this.status), *this.bytes, false);
            }
        }
    }
}

impl HttpBody for SpanBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    *this.bytes += data.len() as u64;
                }
                // A server may stop polling at the end the body announces.
                if this.inner.is_end_stream()
                    && let Some(pending) = this.pending.take()
                {
                    pending.finish(Some(*this.status), *this.bytes, true);
                }
            }
            Some(Err(_)) => {
                if let Some(pending) = this.pending.take() {
                    pending.finish(Some(*this.status), *this.bytes, false);
                }
            }
            None => {
                if let Some(pending) = this.pending.take() {
                    pending.finish(Some(*this.status), *this.bytes, true);
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
