//! The cache's metrics, per route: answers by outcome, bytes stored, evictions.
//!
//! Handles are registered once, when the layer is built (after the recorder is
//! installed), so counting an answer is an atomic add, not a lookup.

use metrics::{Counter, Gauge, SharedString};

/// Answers by outcome: `result` is `hit`, `stale` (answered stale: while revalidating
/// or because the upstream failed), `revalidated` (a 304 refreshed it), `miss` (stored
/// or not) or `pass` (not cacheable: an unsafe method, a request without a host).
pub const CACHE_REQUESTS_TOTAL: &str = "scb_cache_requests_total";
/// Bytes the store holds (bodies and an estimate of their heads).
pub const CACHE_BYTES: &str = "scb_cache_bytes";
/// Bytes of the records the disk tier holds (with `path`).
pub const CACHE_DISK_BYTES: &str = "scb_cache_disk_bytes";
/// Stored responses evicted to stay within `max_bytes`.
pub const CACHE_EVICTIONS_TOTAL: &str = "scb_cache_evictions_total";

/// One route's handles.
#[derive(Clone, Debug)]
pub(crate) struct CacheMetrics {
    hit: Counter,
    stale: Counter,
    revalidated: Counter,
    miss: Counter,
    pass: Counter,
    pub(crate) bytes: Gauge,
    pub(crate) evictions: Counter,
}

impl CacheMetrics {
    pub(crate) fn new(route: SharedString) -> Self {
        let result = |result: &'static str| metrics::counter!(CACHE_REQUESTS_TOTAL, "route" => route.clone(), "result" => result);
        Self {
            hit: result("hit"),
            stale: result("stale"),
            revalidated: result("revalidated"),
            miss: result("miss"),
            pass: result("pass"),
            bytes: metrics::gauge!(CACHE_BYTES, "route" => route.clone()),
            evictions: metrics::counter!(CACHE_EVICTIONS_TOTAL, "route" => route),
        }
    }

    /// Counts an answer by its `Cache-Status` (what the exchange decided).
    pub(crate) fn count(&self, status: Option<&[u8]>) {
        let Some(status) = status else {
            self.pass.increment(1);
            return;
        };
        let has = |needle: &[u8]| status.windows(needle.len()).any(|w| w == needle);
        let counter = if has(b"detail=stale") {
            &self.stale
        } else if status.starts_with(b"scb; hit") {
            &self.hit
        } else if has(b"fwd-status=304") {
            &self.revalidated
        } else {
            &self.miss
        };
        counter.increment(1);
    }
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    #[test]
    fn answers_are_counted_by_what_their_cache_status_says() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let m = CacheMetrics::new("api".into());
            for status in [
                Some(&b"scb; hit"[..]),
                Some(b"scb; hit"),
                Some(b"scb; hit; detail=stale-while-revalidate"),
                Some(b"scb; fwd=stale; fwd-status=503; detail=stale-if-error"),
                Some(b"scb; fwd=stale; fwd-status=304"),
                Some(b"scb; fwd=uri-miss; stored"),
                None,
            ] {
                m.count(status);
            }
        });
        let mut counts = std::collections::BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<String> = key.key().labels().map(|l| l.value().to_owned()).collect();
            if let DebugValue::Counter(n) = value
                && key.key().name() == CACHE_REQUESTS_TOTAL
            {
                counts.insert(labels[1].clone(), n);
            }
        }
        assert_eq!(counts["hit"], 2);
        assert_eq!(counts["stale"], 2);
        assert_eq!(counts["revalidated"], 1);
        assert_eq!(counts["miss"], 1);
        assert_eq!(counts["pass"], 1);
    }
}
