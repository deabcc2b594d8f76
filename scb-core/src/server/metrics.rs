//! What the server counts of itself when [`Server::metrics`](super::Server::metrics) is
//! on, through the [`metrics`] facade (install the recorder first):
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | [`CONNECTIONS_OPEN`] `scb_connections_open` | gauge | `listener` |
//! | [`WORKER_CONNECTIONS_OPEN`] `scb_worker_connections_open` | gauge | `worker` |
//! | [`CONNECTIONS_TOTAL`] `scb_connections_total` | counter | `listener` |
//! | [`TLS_HANDSHAKES_TOTAL`] `scb_tls_handshakes_total` | counter | `listener`, `result` |
//!
//! and the server's own answers (a head refused with 400, 408, 413 or 431, before any
//! service saw it) in [`REQUESTS_TOTAL`](crate::metrics::REQUESTS_TOTAL) with
//! `route="server"` ([`SERVER_ROUTE`]), beside those of the routes: every response is
//! counted once.
//!
//! `listener` is the bound address (`127.0.0.1:8443`) or `unix:PATH`; `worker` is the
//! worker's index (`0`, `1`, ...: [`WorkerInfo::index`](crate::connection::WorkerInfo)),
//! so that a worker the kernel hands more than its share of connections shows. Both
//! gauges count TCP and Unix connections from the accept to the close; HTTP/3
//! connections are not among them. `result` is `ok`,
//! `timeout`, or the reason the [`Handshake`](super::Handshake) gives
//! ([`Handshake::failure_reason`](super::Handshake::failure_reason)): a fixed set, so
//! that clients cannot add series.
//!
//! Each handle is registered once per listener and worker, at the listener's first
//! connection on that worker; a connection costs an increment and a decrement of its
//! listener's gauge and of its worker's, and one increment of its counters, no label
//! lookup. A worker's gauge is written by that worker's thread alone, so its cache line
//! never moves between cores.

use std::rc::Rc;

use ::metrics::{Counter, Gauge, SharedString, Unit};

use crate::metrics::MetricsLayer;

/// Gauge of open connections, labelled `listener`.
pub const CONNECTIONS_OPEN: &str = "scb_connections_open";
/// Gauge of open connections, labelled `worker` (its index).
pub const WORKER_CONNECTIONS_OPEN: &str = "scb_worker_connections_open";
/// Counter of accepted connections, labelled `listener`.
pub const CONNECTIONS_TOTAL: &str = "scb_connections_total";
/// Counter of TLS handshakes, labelled `listener` and `result`.
pub const TLS_HANDSHAKES_TOTAL: &str = "scb_tls_handshakes_total";
/// The `route` label of the server's own answers.
pub const SERVER_ROUTE: &str = "server";

/// Registers the units and descriptions of the server's metrics with the installed
/// recorder.
pub fn describe() {
    ::metrics::describe_gauge!(CONNECTIONS_OPEN, Unit::Count, "Open client connections");
    ::metrics::describe_gauge!(
        WORKER_CONNECTIONS_OPEN,
        Unit::Count,
        "Open client connections, by worker"
    );
    ::metrics::describe_counter!(
        CONNECTIONS_TOTAL,
        Unit::Count,
        "Client connections accepted"
    );
    ::metrics::describe_counter!(
        TLS_HANDSHAKES_TOTAL,
        Unit::Count,
        "TLS handshakes, by result: ok, timeout, or why they failed"
    );
}

/// The server's handles: its own answers'.
#[derive(Debug)]
pub(crate) struct ServerMetrics {
    pub(crate) answers: MetricsLayer,
}

impl ServerMetrics {
    /// Registers the handles with the recorder in effect now.
    pub(crate) fn new() -> Self {
        Self {
            answers: MetricsLayer::new(SERVER_ROUTE),
        }
    }
}

/// One listener's handles, on one worker.
#[derive(Debug)]
pub(crate) struct ListenerMetrics {
    listener: SharedString,
    open: Gauge,
    /// The worker's gauge: every listener of one worker holds the same one.
    worker_open: Gauge,
    accepted: Counter,
    handshakes_ok: Counter,
}

impl ListenerMetrics {
    /// The handles of the listener named `listener` (its address, or `unix:PATH`) on the
    /// worker of index `worker`.
    pub(crate) fn new(listener: String, worker: usize) -> Self {
        let listener = SharedString::from(listener);
        Self {
            open: ::metrics::gauge!(CONNECTIONS_OPEN, "listener" => listener.clone()),
            worker_open: ::metrics::gauge!(WORKER_CONNECTIONS_OPEN, "worker" => worker.to_string()),
            accepted: ::metrics::counter!(CONNECTIONS_TOTAL, "listener" => listener.clone()),
            handshakes_ok: ::metrics::counter!(
                TLS_HANDSHAKES_TOTAL,
                "listener" => listener.clone(),
                "result" => "ok",
            ),
            listener,
        }
    }

    /// Counts a connection accepted; it counts as open until the guard is dropped.
    pub(crate) fn accepted(self: &Rc<Self>) -> OpenConnection {
        self.accepted.increment(1);
        self.open.increment(1.0);
        self.worker_open.increment(1.0);
        OpenConnection(Rc::clone(self))
    }

    /// Counts a handshake: `Ok` or why it failed.
    pub(crate) fn handshake(&self, result: Result<(), &'static str>) {
        match result {
            Ok(()) => self.handshakes_ok.increment(1),
            // A failure takes a labelled lookup: rarer, and its reasons are many.
            Err(reason) => ::metrics::counter!(
                TLS_HANDSHAKES_TOTAL,
                "listener" => self.listener.clone(),
                "result" => reason,
            )
            .increment(1),
        }
    }
}

/// An open connection of a listener: its gauges fall when this is dropped. It holds the
/// listener's handles by `Rc` (a connection lives on its worker's thread), so opening one
/// touches no shared reference count.
#[derive(Debug)]
pub(crate) struct OpenConnection(Rc<ListenerMetrics>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.decrement(1.0);
        self.0.worker_open.decrement(1.0);
    }
}
