//! [`AccessNotes`]: how the layers beneath the access log tell it what only they know.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::StatusCode;
use http::uri::Authority;

use super::record::Record;

/// What layers beneath the access log tell it about a request: the route that took it
/// (the [`Router`](crate::router::Router) that chose it) and the upstream that answered,
/// with its status and time (scb-proxy's `ReverseProxy` and `FastCgi`). A request extension that [`AccessLog`](super::AccessLog)
/// adds when it records, and only then.
///
/// It holds the request's record itself, so that it costs the access log one allocation
/// it already made (the record) plus the extension's, and no response extension: a
/// layer writes into the record, which the access log finishes when the response head is
/// ready. Cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct AccessNotes(Arc<Mutex<Option<Record>>>);

impl AccessNotes {
    pub(super) fn new(record: Record) -> Self {
        Self(Arc::new(Mutex::new(Some(record))))
    }

    /// Notes the route that took the request (a later call, from a router nested
    /// deeper, replaces it: the innermost route is the most specific).
    pub fn route(&self, name: &Arc<str>) {
        self.with(|record| record.route = Some(Arc::clone(name)));
    }

    /// Notes the upstream that was tried last when none answered (see
    /// [`upstream_response`](Self::upstream_response) for one that did).
    pub fn upstream(&self, addr: &Authority) {
        self.with(|record| record.upstream = Some(addr.clone()));
    }

    /// Notes the upstream that answered, the status it answered with and how long that
    /// took (to its response head; the access log's `upstream_time_ms`), in one call: the
    /// notes are taken once per request.
    pub fn upstream_response(&self, addr: &Authority, status: StatusCode, time: Duration) {
        self.with(|record| {
            record.upstream = Some(addr.clone());
            record.upstream_status = Some(status);
            record.upstream_time = Some(time);
        });
    }

    /// The record, taken out once the response head is ready; notes that come later are
    /// dropped.
    pub(super) fn take(&self) -> Option<Record> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn with(&self, f: impl FnOnce(&mut Record)) {
        // A panic while the lock was held left a whole record: a note is still safe.
        if let Some(record) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            f(record);
        }
    }
}
