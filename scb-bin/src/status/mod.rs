//! The status page: `/status` (HTML) and `/status.json` on the metrics listener, never on
//! a public one, with `[status] enabled = true` (which needs `[metrics]`).
//!
//! ```toml
//! [metrics]
//! listen = "127.0.0.1:9090"
//! [status]
//! enabled = true        # http://127.0.0.1:9090/status
//! ```
//!
//! # Where the figures come from
//!
//! Nothing on the request path changes for the page. A thread (`scb-status`, see
//! [`sampler`]) renders the metrics recorder once a second, as a scrape would, reads the
//! series below back out of the text ([`scrape`]), and keeps the samples of the last
//! minute and one chart point a second for ten minutes ([`history`]). Rates are the
//! difference of two samples' totals divided by the time between them.
//!
//! | figure | from |
//! | --- | --- |
//! | requests/s, per route | `scb_http_requests_total`, over the last 5 s |
//! | status classes, 5xx/s | the same, by the first digit of `status`; `status="error"` (the route's service failed, answered 500) is 5xx |
//! | latency p50, p90, p99 | `scb_http_request_duration_seconds` buckets, every route's added, over the last minute, interpolated within a bucket as Prometheus' `histogram_quantile` does; a route's p99 from its own |
//! | in flight | `scb_http_requests_in_flight` |
//! | open connections per worker | `scb_worker_connections_open{worker}` |
//! | upstream sent/s, failed tries/s | `scb_upstream_requests_total` (requests sent: a refused connect is not one), `scb_upstream_errors_total` (failed tries of every kind), by address: every route's tries at it |
//! | upstream up, in flight | the proxy's shared state at the moment of the answer ([`scb_proxy::UpstreamStatus`]): up unless active checks call it down or a passive cool-down runs |
//! | certificates | each TLS listener's acceptor ([`scb_tls::TlsAcceptor::certificates`]): ACME renewals and reloads show at once |
//! | cache hit ratio | `scb_cache_requests_total`: (`hit` + `stale`) / (`hit` + `stale` + `revalidated` + `miss`) over the last minute and since start; `pass` (not cacheable) is no lookup |
//! | chart | requests/s and 5xx/s between consecutive samples, the last 600 |
//!
//! The upstreams, certificates and the worker list come from the plan, so a reload shows
//! its own; the history (and so the chart) carries on across reloads.
//!
//! # `/status.json`
//!
//! One JSON object; rates are per second, rounded to three decimals; `null` where there
//! is nothing to compute from.
//!
//! ```text
//! {
//!   "version": "0.1.0",                 scb's version
//!   "time": "2025-06-01T12:00:00Z",     when this answer was made (UTC)
//!   "window_seconds": 5.0,              what the rates average over (less at start)
//!   "requests": {
//!     "per_second": 120.4,              every route's responses
//!     "errors_per_second": 0.2,         of those, 5xx
//!     "in_flight": 3,                   waiting for their response head
//!     "total": 51234                    since the route's counter was registered
//!   },
//!   "status_classes": { "1xx": 0, "2xx": 118.0, "3xx": 1.2, "4xx": 1.0, "5xx": 0.2 },
//!   "latency_ms": {                     call to response head, all routes
//!     "window_seconds": 60.0, "count": 7203,
//!     "p50": 0.21, "p90": 0.9, "p99": 12.5
//!   },
//!   "routes": [                         by name; `server`, `unmatched`, ... included
//!     { "name": "api", "per_second": 80.0, "errors_per_second": 0.2,
//!       "total": 40000, "p99_ms": 14.0 }
//!   ],
//!   "connections": {
//!     "open": 40,                       TCP and Unix, every worker's (not HTTP/3)
//!     "workers": [ { "worker": 0, "open": 21 }, { "worker": 1, "open": 19 } ]
//!   },
//!   "upstreams": [                      each proxy or FastCGI route's, in config order
//!     { "route": "api", "address": "127.0.0.1:8081", "up": true, "in_flight": 2,
//!       "per_second": 80.0, "errors_per_second": 0.0 }
//!   ],
//!   "certificates": [                   each once, the first to expire first
//!     { "names": ["example.com"], "file": "/etc/scb/site.pem",
//!       "not_before": "2025-05-01T00:00:00Z", "not_after": "2025-07-30T00:00:00Z",
//!       "expires_in_days": 58.5 }        negative once expired
//!   ],
//!   "cache": {                          null when no route has a cache
//!     "hit_ratio": 0.93, "hit_ratio_window_seconds": 60.0, "hit_ratio_total": 0.9,
//!     "per_second": { "hit": 70.0, "stale": 1.0, "revalidated": 0.5, "miss": 4.0,
//!                     "pass": 3.0 }
//!   },
//!   "chart": {                          oldest first, the newest is now
//!     "interval_seconds": 1,
//!     "requests_per_second": [ ... up to 600 ],
//!     "errors_per_second": [ ... up to 600 ]
//!   }
//! }
//! ```
//!
//! # `/status`
//!
//! One HTML document with its style and script inline and nothing else to load (no
//! font, image or script from anywhere), so it works offline and behind any proxy. Its
//! script asks `status.json` every second and updates the figures, the tables and an
//! inline SVG chart, without reloading; without JavaScript it says where the same
//! figures are. Everything from the config (route names, upstream addresses, certificate
//! names) goes into the page as text (`textContent`), never as markup. The answer carries
//! `Content-Security-Policy: default-src 'none'` with the SHA-256 of the page's one
//! script and one style (computed once, from the page as built), `connect-src 'self'`,
//! `img-src data:` (its empty icon) and no frames; both paths answer
//! `Cache-Control: no-store`. Other methods than GET and HEAD get 405.

mod history;
mod json;
mod sampler;
mod scrape;
mod service;

pub(crate) use sampler::{Sampled, start};
pub(crate) use service::{Sources, StatusPage, Upstreams};

/// Where the page is on the metrics listener.
pub(crate) const STATUS_PATH: &str = "/status";
/// Where its figures are.
pub(crate) const STATUS_JSON_PATH: &str = "/status.json";
