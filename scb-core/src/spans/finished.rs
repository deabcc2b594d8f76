//! What a finished request's span says, handed to a [`SpanSink`].

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use http::uri::Authority;
use http::{HeaderValue, Method, StatusCode, Uri, Version};

use crate::trace_context::TraceContext;

/// Where finished spans go: an exporter (scb's binary batches them to an OpenTelemetry
/// collector over OTLP), a test's list, a log.
///
/// `export` runs on the worker that served the request, once per sampled request, when
/// its response ends: it must not block or do I/O there, only hand the span to a queue
/// (and drop it, counted, when the queue is full).
pub trait SpanSink: Send + Sync + 'static {
    /// Takes one finished span.
    fn export(&self, span: FinishedSpan);
}

impl<F> SpanSink for F
where
    F: Fn(FinishedSpan) + Send + Sync + 'static,
{
    fn export(&self, span: FinishedSpan) {
        self(span);
    }
}

/// A request's server span, finished: when the response's body ended (or the client left
/// before it did).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FinishedSpan {
    /// This server's span: the trace, the span's own id, the sampling flag and the
    /// `tracestate` carried over from the client.
    pub context: TraceContext,
    /// The client's span this one continues, when the request came with a valid
    /// `traceparent`; `None` for a trace that started here.
    pub parent: Option<[u8; 8]>,
    /// When the request reached the layer.
    pub start: SystemTime,
    /// When the response's body ended, or the service failed.
    pub end: SystemTime,
    /// The request's method.
    pub method: Method,
    /// The request's target as the client sent it (path and query).
    pub uri: Uri,
    /// The `Host` field (the site), if any.
    pub host: Option<HeaderValue>,
    /// `User-Agent`, if any.
    pub user_agent: Option<HeaderValue>,
    /// The peer's address, when the server set `ConnectInfo`.
    pub peer: Option<IpAddr>,
    /// The request's HTTP version.
    pub version: Version,
    /// The route that took the request (its name), when a router noted one.
    pub route: Option<Arc<str>>,
    /// The response's status; `None` when the service failed without one.
    pub status: Option<StatusCode>,
    /// Body bytes sent to the client.
    pub bytes: u64,
    /// Whether the body was sent whole; false when the client left or the body failed.
    pub completed: bool,
    /// The exchange with an upstream, when a proxy or FastCGI gateway made one.
    pub upstream: Option<UpstreamSpan>,
}

/// The exchange with an upstream: a child span of the request's, whose context the
/// upstream was told in `traceparent` (when propagation is on).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpstreamSpan {
    /// The child span's id.
    pub span_id: [u8; 8],
    /// When the first try began.
    pub start: SystemTime,
    /// The upstream that answered (or the last one tried).
    pub address: Option<Authority>,
    /// The upstream's status, when one answered.
    pub status: Option<StatusCode>,
    /// What happened on the way, in order: connections, failed tries, the first byte.
    pub events: Vec<UpstreamEvent>,
}

/// One moment of an upstream exchange.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpstreamEvent {
    /// When it happened.
    pub time: SystemTime,
    /// What it was.
    pub kind: UpstreamEventKind,
}

/// What an [`UpstreamEvent`] was.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamEventKind {
    /// A connection to `address` was ready: a new one (`reused` false, the time is the
    /// end of its connect and handshake) or one from the pool.
    Connected {
        /// The upstream.
        address: Authority,
        /// Whether the connection came from the pool.
        reused: bool,
    },
    /// A try failed and another may follow.
    Retry {
        /// The upstream that failed.
        address: Authority,
        /// Why, as the proxy's error says it.
        error: String,
    },
    /// The upstream's response head arrived.
    FirstByte,
}
