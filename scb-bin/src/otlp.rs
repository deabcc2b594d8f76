//! `[tracing] otlp`: the process's span exporter, OTLP over HTTP/protobuf.
//!
//! Workers hand finished spans ([`scb_core::spans::FinishedSpan`]) to a bounded queue and
//! go on: a full queue drops the span and counts it (`scb_trace_spans_dropped_total
//! {reason="queue_full"}`), so a collector that is slow or down never makes a request
//! wait. One thread, `scb-otlp`, wakes every [`DRAIN_EVERY`] (not for each span: a
//! wake-up per span was a futex call on the worker), takes what is queued in batches of
//! up to [`BATCH`] spans, writes each batch as the protocol's own message
//! (`opentelemetry-proto`'s `ExportTraceServiceRequest`, encoded by prost) and posts it
//! with `opentelemetry-http`'s hyper client on a current-thread runtime of its own. A
//! batch the collector does not take (an error, a non-2xx answer, [`EXPORT_TIMEOUT`]) is
//! dropped and counted (`reason="export_failed"`); exported spans are counted in
//! `scb_trace_spans_exported_total`.
//!
//! Why not `opentelemetry-otlp`'s exporter (the first version used it): a span went from
//! scb's record to the SDK's `SpanData`, then the SDK grouped the batch by resource and
//! scope and converted every attribute again into the protocol's types, 13,000
//! instructions a span; at 5% sampling that was 640 instructions on every `respond`
//! request, 6% of its cost by itself. Writing the protocol's messages straight from
//! scb's record costs a fraction of it, with the same crate's message types and the
//! same HTTP client.

use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderName, HeaderValue, Uri, Version};
use opentelemetry_http::{Bytes, HttpClient as _};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message as _;
use scb_core::spans::{FinishedSpan, SpanSink, UpstreamEventKind, UpstreamSpan};

/// Spans waiting for the exporter; past this, new ones are dropped (and counted): a
/// second's worth at 40,000 sampled requests a second.
pub(crate) const QUEUE: usize = 8192;
/// The most spans one request to the collector carries.
pub(crate) const BATCH: usize = 512;
/// How often the exporter takes what is queued.
pub(crate) const DRAIN_EVERY: Duration = Duration::from_millis(200);
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
    /// PEM roots for an `https://` collector; `None`: the system's.
    pub(crate) ca_root: Option<PathBuf>,
    /// Sent with every export; the values are marked sensitive, so `Debug` hides them.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
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
/// When the thread or its runtime cannot start.
pub(crate) fn start(plan: &ExportPlan) -> anyhow::Result<OtlpSink> {
    // Plain http needs no roots.
    let roots = if plan.endpoint.scheme() == Some(&http::uri::Scheme::HTTPS) {
        scb_tls::client::roots(plan.ca_root.as_deref())?
    } else {
        scb_tls::rustls::RootCertStore::empty()
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(scb_tls::client::client_config(roots))
        .https_or_http()
        .enable_http1()
        .build();
    let client = opentelemetry_http::hyper::HyperClient::new(connector, EXPORT_TIMEOUT, None);
    let headers = plan.headers.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (queue, spans) = mpsc::sync_channel(QUEUE);
    let endpoint = plan.endpoint.clone();
    let resource = Resource {
        attributes: vec![text("service.name", plan.service_name.clone())],
        ..Resource::default()
    };
    let scope = InstrumentationScope {
        name: "scb".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..InstrumentationScope::default()
    };
    std::thread::Builder::new()
        .name("scb-otlp".into())
        .spawn(move || {
            let export = |batch: Vec<Span>| {
                let count = batch.len() as u64;
                let body = ExportTraceServiceRequest {
                    resource_spans: vec![ResourceSpans {
                        resource: Some(resource.clone()),
                        scope_spans: vec![ScopeSpans {
                            scope: Some(scope.clone()),
                            spans: batch,
                            schema_url: String::new(),
                        }],
                        schema_url: String::new(),
                    }],
                }
                .encode_to_vec();
                let mut request = http::Request::post(endpoint.clone())
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(Bytes::from(body))
                    .expect("a POST to a checked URI");
                request.headers_mut().extend(headers.iter().cloned());
                match runtime.block_on(client.send_bytes(request)) {
                    Ok(res) if res.status().is_success() => {
                        metrics::counter!(EXPORTED).increment(count);
                    }
                    answer => {
                        metrics::counter!(DROPPED, "reason" => "export_failed").increment(count);
                        match answer {
                            Ok(res) => tracing::debug!(status = %res.status(), spans = count, "the OTLP collector refused a batch"),
                            Err(e) => tracing::debug!(error = %e, spans = count, "OTLP export failed"),
                        }
                    }
                }
            };
            loop {
                std::thread::sleep(DRAIN_EVERY);
                let mut batch = Vec::with_capacity(BATCH);
                let open = loop {
                    match spans.try_recv() {
                        Ok(span) => {
                            convert(&span, &mut batch);
                            if batch.len() >= BATCH {
                                export(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
                            }
                        }
                        Err(TryRecvError::Empty) => break true,
                        // Every sink is gone (a reload to another exporter, the end):
                        // what was queued goes out, then the thread ends.
                        Err(TryRecvError::Disconnected) => break false,
                    }
                };
                if !batch.is_empty() {
                    export(batch);
                }
                if !open {
                    return;
                }
            }
        })?;
    Ok(OtlpSink { queue })
}

/// `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`: whether the parent is remote is known.
const HAS_IS_REMOTE: u32 = 0x100;
/// `SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`: the parent is another process's.
const IS_REMOTE: u32 = 0x200;
/// W3C's sampled flag: every exported span is sampled.
const SAMPLED: u32 = 0x01;

/// The attribute `key` with `value`.
fn attribute(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn text(key: &str, value: String) -> KeyValue {
    attribute(key, Value::StringValue(value))
}

fn int(key: &str, value: i64) -> KeyValue {
    attribute(key, Value::IntValue(value))
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn error(message: &str) -> Option<Status> {
    Some(Status {
        message: message.to_owned(),
        code: StatusCode::Error as i32,
    })
}

/// `span` as the protocol's server span (and its upstream's client span), appended to
/// `out`. Attribute names are the HTTP semantic conventions'.
fn convert(span: &FinishedSpan, out: &mut Vec<Span>) {
    let context = &span.context;
    let trace_id = context.trace_id().to_vec();
    let span_id = context.span_id().to_vec();
    let trace_state = context.tracestate().unwrap_or_default().to_owned();
    let method = span.method.as_str();
    let name = match &span.route {
        Some(route) => format!("{method} {route}"),
        None => method.to_owned(),
    };
    let mut attributes = Vec::with_capacity(12);
    attributes.push(text("http.request.method", method.to_owned()));
    attributes.push(text("url.path", span.uri.path().to_owned()));
    if let Some(query) = span.uri.query() {
        attributes.push(text("url.query", query.to_owned()));
    }
    if let Some(host) = span.host.as_ref().and_then(|h| h.to_str().ok()) {
        attributes.push(text("server.address", host.to_owned()));
    }
    if let Some(route) = &span.route {
        attributes.push(text("scb.route", route.to_string()));
    }
    if let Some(peer) = span.peer {
        attributes.push(text("client.address", peer.to_string()));
    }
    attributes.push(text(
        "network.protocol.version",
        protocol(span.version).to_owned(),
    ));
    if let Some(agent) = span.user_agent.as_ref().and_then(|h| h.to_str().ok()) {
        attributes.push(text("user_agent.original", agent.to_owned()));
    }
    if let Some(status) = span.status {
        attributes.push(int("http.response.status_code", i64::from(status.as_u16())));
    }
    attributes.push(int(
        "http.response.body.size",
        i64::try_from(span.bytes).unwrap_or(i64::MAX),
    ));
    // A server span is an error for a 5xx, for no answer, and for a body cut short.
    let status = match span.status {
        None => error("the service failed without a response"),
        Some(s) if s.is_server_error() => {
            attributes.push(text("error.type", s.as_str().to_owned()));
            error("")
        }
        Some(_) if !span.completed => error("the response body did not end"),
        Some(_) => None,
    };
    let end = nanos(span.end);
    if let Some(upstream) = &span.upstream {
        out.push(client_span(
            span,
            upstream,
            &trace_id,
            &span_id,
            &trace_state,
            end,
        ));
    }
    out.push(Span {
        trace_id,
        span_id,
        trace_state,
        parent_span_id: span.parent.map(|p| p.to_vec()).unwrap_or_default(),
        flags: SAMPLED | HAS_IS_REMOTE | if span.parent.is_some() { IS_REMOTE } else { 0 },
        name,
        kind: SpanKind::Server as i32,
        start_time_unix_nano: nanos(span.start),
        end_time_unix_nano: end,
        attributes,
        status,
        ..Span::default()
    });
}

/// The upstream exchange: a client span, child of the server's, from the first try to
/// the end of the response (its body streams through to the client).
fn client_span(
    span: &FinishedSpan,
    upstream: &UpstreamSpan,
    trace_id: &[u8],
    parent: &[u8],
    trace_state: &str,
    end: u64,
) -> Span {
    let mut attributes = vec![text("http.request.method", span.method.as_str().to_owned())];
    if let Some(address) = &upstream.address {
        attributes.push(text("server.address", address.host().to_owned()));
        if let Some(port) = address.port_u16() {
            attributes.push(int("server.port", i64::from(port)));
        }
    }
    if let Some(status) = upstream.status {
        attributes.push(int("http.response.status_code", i64::from(status.as_u16())));
    }
    let events = upstream
        .events
        .iter()
        .filter_map(|event| {
            let (name, attributes) = match &event.kind {
                UpstreamEventKind::Connected { address, reused } => (
                    "connected",
                    vec![
                        text("server.address", address.to_string()),
                        attribute("scb.connection.reused", Value::BoolValue(*reused)),
                    ],
                ),
                UpstreamEventKind::Retry { address, error } => (
                    "retry",
                    vec![
                        text("server.address", address.to_string()),
                        text("error.message", error.clone()),
                    ],
                ),
                UpstreamEventKind::FirstByte => ("first_byte", Vec::new()),
                _ => return None,
            };
            Some(Event {
                time_unix_nano: nanos(event.time),
                name: name.to_owned(),
                attributes,
                dropped_attributes_count: 0,
            })
        })
        .collect();
    let status = match upstream.status {
        None => error("no upstream answered"),
        Some(s) if s.is_server_error() => error(""),
        Some(_) => None,
    };
    let start = nanos(upstream.start);
    Span {
        trace_id: trace_id.to_vec(),
        span_id: upstream.span_id.to_vec(),
        trace_state: trace_state.to_owned(),
        parent_span_id: parent.to_vec(),
        flags: SAMPLED | HAS_IS_REMOTE,
        name: span.method.as_str().to_owned(),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end.max(start),
        attributes,
        events,
        status,
        ..Span::default()
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
