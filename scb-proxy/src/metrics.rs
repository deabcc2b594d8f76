//! Per-upstream metrics, registered once when the proxy is built.
//!
//! | name | type | labels |
//! |------|------|--------|
//! | `scb_upstream_requests_total` | counter | `upstream` |
//! | `scb_upstream_errors_total` | counter | `upstream`, `kind` |
//! | `scb_upstream_response_seconds` | histogram | `upstream` (to the response head) |
//! | `scb_upstream_healthy` | gauge | `upstream` (1 up, 0 down) |
//!
//! `kind` is `connect`, `connect_timeout`, `response_timeout`, `reset`, `protocol` or `body`. Handles are resolved here, so counting on the
//! request path is an atomic add, never a label lookup.

use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Unit};

/// Requests sent to an upstream (each try counts).
pub const UPSTREAM_REQUESTS_TOTAL: &str = "scb_upstream_requests_total";
/// Failed tries, by kind.
pub const UPSTREAM_ERRORS_TOTAL: &str = "scb_upstream_errors_total";
/// Time from sending a request to the upstream's response head.
pub const UPSTREAM_RESPONSE_SECONDS: &str = "scb_upstream_response_seconds";
/// 1 when the upstream takes requests, 0 while it is skipped.
pub const UPSTREAM_HEALTHY: &str = "scb_upstream_healthy";

/// Describes the metrics above to the installed recorder (units and help text).
pub fn describe() {
    metrics::describe_counter!(
        UPSTREAM_REQUESTS_TOTAL,
        Unit::Count,
        "Requests sent upstream"
    );
    metrics::describe_counter!(UPSTREAM_ERRORS_TOTAL, Unit::Count, "Failed upstream tries");
    metrics::describe_histogram!(
        UPSTREAM_RESPONSE_SECONDS,
        Unit::Seconds,
        "Upstream time to response head"
    );
    metrics::describe_gauge!(UPSTREAM_HEALTHY, "Whether the upstream takes requests");
}

/// Why a try at an upstream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The TCP connect failed (refused, unreachable).
    Connect,
    /// The connect did not finish within `connect_timeout`.
    ConnectTimeout,
    /// No response head within `response_timeout`.
    ResponseTimeout,
    /// The connection broke (reset, closed) before a response head.
    Reset,
    /// The upstream sent something that is not a valid HTTP/1.1 response.
    Protocol,
    /// The response body broke off or stalled after the head was passed on.
    Body,
}

impl ErrorKind {
    const ALL: [Self; 6] = [
        Self::Connect,
        Self::ConnectTimeout,
        Self::ResponseTimeout,
        Self::Reset,
        Self::Protocol,
        Self::Body,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::ConnectTimeout => "connect_timeout",
            Self::ResponseTimeout => "response_timeout",
            Self::Reset => "reset",
            Self::Protocol => "protocol",
            Self::Body => "body",
        }
    }
}

/// One upstream's handles.
#[derive(Debug)]
pub(crate) struct UpstreamMetrics {
    requests: Counter,
    errors: [Counter; ErrorKind::ALL.len()],
    response: Histogram,
    healthy: Gauge,
}

impl UpstreamMetrics {
    pub(crate) fn new(upstream: &str) -> Self {
        let upstream = upstream.to_owned();
        let errors = ErrorKind::ALL.map(|kind| {
            metrics::counter!(
                UPSTREAM_ERRORS_TOTAL,
                "upstream" => upstream.clone(),
                "kind" => kind.name()
            )
        });
        let healthy = metrics::gauge!(UPSTREAM_HEALTHY, "upstream" => upstream.clone());
        healthy.set(1.0);
        Self {
            requests: metrics::counter!(UPSTREAM_REQUESTS_TOTAL, "upstream" => upstream.clone()),
            errors,
            response: metrics::histogram!(UPSTREAM_RESPONSE_SECONDS, "upstream" => upstream),
            healthy,
        }
    }

    pub(crate) fn request(&self) {
        self.requests.increment(1);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].increment(1);
    }

    pub(crate) fn response(&self, elapsed: Duration) {
        self.response.record(elapsed.as_secs_f64());
    }

    pub(crate) fn healthy(&self, up: bool) {
        self.healthy.set(if up { 1.0 } else { 0.0 });
    }
}
