//! [`SpanNotes`]: how the layers beneath tell a sampled request's span what only they know.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use http::StatusCode;
use http::uri::Authority;

use super::finished::{UpstreamEvent, UpstreamEventKind, UpstreamSpan};
use crate::trace_context::TraceContext;

/// What the router and the upstream gateways beneath [`Spans`](super::Spans) tell a
/// sampled request's span: the route, and the exchange with an upstream (its child span,
/// its connections, failed tries and first byte). A request extension that `Spans` adds
/// for sampled requests only, so an unsampled request pays one failed extension lookup in
/// each layer that would note something.
///
/// Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct SpanNotes(Arc<Inner>);

struct Inner {
    context: TraceContext,
    notes: Mutex<Noted>,
}

#[derive(Default)]
pub(super) struct Noted {
    pub(super) route: Option<Arc<str>>,
    pub(super) upstream: Option<UpstreamSpan>,
}

impl fmt::Debug for SpanNotes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanNotes")
            .field("context", &self.0.context)
            .finish_non_exhaustive()
    }
}

impl SpanNotes {
    pub(super) fn new(context: TraceContext) -> Self {
        Self(Arc::new(Inner {
            context,
            notes: Mutex::new(Noted::default()),
        }))
    }

    /// This server's span: the context a gateway beneath tells its upstream when it
    /// makes no exchange span of its own.
    pub fn context(&self) -> &TraceContext {
        &self.0.context
    }

    /// Notes the route that took the request (a later call, from a router nested deeper,
    /// replaces it).
    pub fn route(&self, name: &Arc<str>) {
        self.with(|noted| noted.route = Some(Arc::clone(name)));
    }

    /// Starts the upstream exchange's child span (once: a second call, from a gateway
    /// behind another, continues the first) and returns its context, what the upstream
    /// is told in `traceparent`.
    pub fn upstream_exchange(&self) -> TraceContext {
        let span_id = self.with(|noted| {
            noted
                .upstream
                .get_or_insert_with(|| UpstreamSpan {
                    span_id: super::span_id(),
                    start: SystemTime::now(),
                    address: None,
                    status: None,
                    events: Vec::new(),
                })
                .span_id
        });
        self.0.context.child(span_id)
    }

    /// Notes that a connection to `address` is ready (`reused`: from the pool).
    pub fn upstream_connected(&self, address: &Authority, reused: bool) {
        self.event(UpstreamEventKind::Connected {
            address: address.clone(),
            reused,
        });
    }

    /// Notes a failed try at `address`, which another may follow.
    pub fn upstream_retry(&self, address: &Authority, error: &dyn fmt::Display) {
        self.event(UpstreamEventKind::Retry {
            address: address.clone(),
            error: error.to_string(),
        });
    }

    /// Notes the upstream that answered and its status, when its head arrived.
    pub fn upstream_response(&self, address: &Authority, status: StatusCode) {
        let time = SystemTime::now();
        self.with(|noted| {
            if let Some(upstream) = &mut noted.upstream {
                upstream.address = Some(address.clone());
                upstream.status = Some(status);
                upstream.events.push(UpstreamEvent {
                    time,
                    kind: UpstreamEventKind::FirstByte,
                });
            }
        });
    }

    /// Notes the upstream tried last when none answered.
    pub fn upstream_failed(&self, address: &Authority) {
        self.with(|noted| {
            if let Some(upstream) = &mut noted.upstream {
                upstream.address = Some(address.clone());
            }
        });
    }

    fn event(&self, kind: UpstreamEventKind) {
        let time = SystemTime::now();
        self.with(|noted| {
            if let Some(upstream) = &mut noted.upstream {
                upstream.events.push(UpstreamEvent { time, kind });
            }
        });
    }

    /// What was noted, taken out when the span finishes.
    pub(super) fn take(&self) -> Noted {
        std::mem::take(&mut *self.0.notes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn with<T>(&self, f: impl FnOnce(&mut Noted) -> T) -> T {
        // A panic while the lock was held left whole notes: a note is still safe.
        f(&mut self.0.notes.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
