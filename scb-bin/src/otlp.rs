//! `[tracing] otlp`: the process's span exporter, OpenTelemetry's OTLP over HTTP/protobuf.
//!
//! Workers hand finished spans ([`scb_core::spans::FinishedSpan`]) to a bounded queue and
//! go on: a full queue drops the span and counts it (`scb_trace_spans_dropped_total
//! {reason="queue_full"}`), so a collector that is slow or down never makes a request
//! wait. One thread, `scb-otlp`, takes them in batches (up to [`BATCH`] spans, or what
//! came within [`FLUSH_EVERY`]), turns them into `opentelemetry_sdk`'s `SpanData` there
//! (off the workers) and posts each batch with `opentelemetry-otlp`'s exporter, on a
//! current-thread runtime of its own; a batch the collector does not take is dropped and
//! counted (`reason="export_failed"`), and exported ones are counted too
//! (`scb_trace_spans_exported_total`).
//!
//! Why not the SDK's `BatchSpanProcessor`: it would take `SpanData` on the worker (the
//! conversion, a dozen attributes, on the request path), and it counts the spans it drops
//! only in a log line at shutdown; operators need the count as a metric while it happens.
//! The queue and the loop here are that processor's, minus what scb does not use.

use std::borrow::Cow;
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use http::{Uri, Version};
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use scb_core::spans::{FinishedSpan, SpanSink, UpstreamEventKind, UpstreamSpan};

/// Spans waiting for the exporter; past this, new ones are dropped (and counted).
pub(crate) const QUEUE: usize = 4096;
/// The most spans one request to the collector carries.
pub(crate) const BATCH: usize = 512;
/// How long a span waits at most for its batch to fill.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long one post to the collector may take (connect included) before the batch is
/// given up.
pub(crate) const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Spans dropped, by reason.
pub(crate) const DROPPED: &str = "scb_trace_spans_dropped_total";
/// Spans the collector took.
pub(crate) const EXPORTED: &str = "scb_trace_spans_exported_total";

/// Where and as whom spans are exported: what a reload compares to keep the exporter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExportPlan {
    /// The collector's traces endpoint (`.../v1/traces`).
    pub(crate) endpoint: Uri,
    /// `service.name` of every span.
    pub(crate) service_name: String,
}

/// The workers' end of the exporter: a [`SpanSink`]. When the last clone is dropped (a
/// reload to other settings, the process's end), the thread exports what is queued and
/// stops.
#[derive(Clone, Debug)]
pub(crate) struct OtlpSink {
    queue: SyncSender<FinishedSpan>,
}

impl SpanSink for OtlpSink {
    fn export(&self, span: FinishedSpan) {
        match self.queue.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                metrics::counter!(DROPPED, "reason" => "queue_full").increment(1);
            }
            // The thread is gone (it only stops when every sink is): nothing to count.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// Starts the exporter thread for `plan`.
///
/// # Errors
///
/// When the exporter cannot be built or the thread cannot start.
pub(crate) fn start(plan: &ExportPlan) -> anyhow::Result<OtlpSink> {
    let client =
        opentelemetry_http::hyper::HyperClient::with_default_connector(EXPORT_TIMEOUT, None);
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(plan.endpoint.to_string())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(client)
        // A batch that fails is dropped and counted: spans are worth less than keeping
        // the queue moving while the collector is away.
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
        .build()?;
    exporter.set_resource(
        &Resource::builder_empty()
            .with_service_name(plan.service_name.clone())
            .build(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (queue, spans) = mpsc::sync_channel(QUEUE);
    let scope = InstrumentationScope::builder("scb")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    std::thread::Builder::new()
        .name("scb-otlp".into())
        .spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                let deadline = Instant::now() + FLUSH_EVERY;
                let mut open = true;
                while batch.len() < BATCH {
                    match spans.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(span) => convert(&span, &scope, &mut batch),
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
                if !batch.is_empty() {
                    let spans = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                    let count = spans.len() as u64;
                    match runtime.block_on(exporter.export(spans)) {
                        Ok(()) => metrics::counter!(EXPORTED).increment(count),
                        Err(e) => {
                            metrics::counter!(DROPPED, "reason" => "export_failed")
                                .increment(count);
                            tracing::debug!(error = %e, spans = count, "OTLP export failed");
                        }
                    }
                }
                if !open {
                    return;
                }
            }
        })?;
    Ok(OtlpSink { queue })
}

/// `span` as OpenTelemetry's server span (and its upstream's client span), appended to
/// `out`. Attribute names are the HTTP semantic conventions'.
fn convert(span: &FinishedSpan, scope: &InstrumentationScope, out: &mut Vec<SpanData>) {
    let context = &span.context;
    let trace_id = TraceId::from_bytes(context.trace_id());
    let span_id = SpanId::from_bytes(context.span_id());
    let state = context
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let flags = TraceFlags::SAMPLED;
    let method = span.method.as_str();
    let name = match &span.route {
        Some(route) => format!("{method} {route}"),
        None => method.to_owned(),
    };
    let mut attributes = Vec::with_capacity(12);
    attributes.push(KeyValue::new("http.request.method", method.to_owned()));
    attributes.push(KeyValue::new("url.path", span.uri.path().to_owned()));
    if let Some(query) = span.uri.query() {
        attributes.push(KeyValue::new("url.query", query.to_owned()));
    }
    if let Some(host) = span.host.as_ref().and_then(|h| h.to_str().ok()) {
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    if let Some(route) = &span.route {
        attributes.push(KeyValue::new("scb.route", route.to_string()));
    }
    if let Some(peer) = span.peer {
        attributes.push(KeyValue::new("client.address", peer.to_string()));
    }
    attributes.push(KeyValue::new(
        "network.protocol.version",
        protocol(span.version),
    ));
    if let Some(agent) = span.user_agent.as_ref().and_then(|h| h.to_str().ok()) {
        attributes.push(KeyValue::new("user_agent.original", agent.to_owned()));
    }
    if let Some(status) = span.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
    }
    attributes.push(KeyValue::new(
        "http.response.body.size",
        i64::try_from(span.bytes).unwrap_or(i64::MAX),
    ));
    // A server span is an error for a 5xx, for no answer, and for a body cut short.
    let status = match span.status {
        None => Status::error("the service failed without a response"),
        Some(s) if s.is_server_error() => Status::error(""),
        Some(_) if !span.completed => Status::error("the response body did not end"),
        Some(_) => Status::Unset,
    };
    if let Some(s) = span.status.filter(|s| s.is_server_error()) {
        attributes.push(KeyValue::new("error.type", s.as_str().to_owned()));
    }
    out.push(SpanData {
        span_context: SpanContext::new(trace_id, span_id, flags, false, state.clone()),
        parent_span_id: span.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: span.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(name),
        start_time: span.start,
        end_time: span.end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    });
    if let Some(upstream) = &span.upstream {
        out.push(client_span(span, upstream, trace_id, span_id, state, scope));
    }
}

/// The upstream exchange: a client span, child of the server's, from the first try to
/// the end of the response (its body streams through to the client).
fn client_span(
    span: &FinishedSpan,
    upstream: &UpstreamSpan,
    trace_id: TraceId,
    parent: SpanId,
    state: TraceState,
    scope: &InstrumentationScope,
) -> SpanData {
    let mut attributes = vec![KeyValue::new(
        "http.request.method",
        span.method.as_str().to_owned(),
    )];
    if let Some(address) = &upstream.address {
        attributes.push(KeyValue::new("server.address", address.host().to_owned()));
        if let Some(port) = address.port_u16() {
            attributes.push(KeyValue::new("server.port", i64::from(port)));
        }
    }
    if let Some(status) = upstream.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
    }
    let mut events = SpanEvents::default();
    for event in &upstream.events {
        let (name, attributes) = match &event.kind {
            UpstreamEventKind::Connected { address, reused } => (
                "connected",
                vec![
                    KeyValue::new("server.address", address.to_string()),
                    KeyValue::new("scb.connection.reused", *reused),
                ],
            ),
            UpstreamEventKind::Retry { address, error } => (
                "retry",
                vec![
                    KeyValue::new("server.address", address.to_string()),
                    KeyValue::new("error.message", error.clone()),
                ],
            ),
            UpstreamEventKind::FirstByte => ("first_byte", Vec::new()),
            _ => continue,
        };
        events
            .events
            .push(Event::new(name, event.time, attributes, 0));
    }
    let status = match upstream.status {
        None => Status::error("no upstream answered"),
        Some(s) if s.is_server_error() => Status::error(""),
        Some(_) => Status::Unset,
    };
    SpanData {
        span_context: SpanContext::new(
            trace_id,
            SpanId::from_bytes(upstream.span_id),
            TraceFlags::SAMPLED,
            false,
            state,
        ),
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name: Cow::Owned(span.method.as_str().to_owned()),
        start_time: upstream.start,
        end_time: span.end.max(upstream.start),
        attributes,
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}
