//! The recorder's Prometheus text, read back into the totals the status page derives its
//! figures from.
//!
//! `metrics-exporter-prometheus` 0.18 offers no structured view of its registry (only
//! the text and, behind a feature, protobuf), so the sampler parses the text it renders:
//! only the series named below, every other line skipped after comparing its name.
//! Label values are unescaped as the text format escapes them (`\\`, `\"`, `\n`).

use std::collections::BTreeMap;

use scb_core::metrics::{REQUEST_DURATION_SECONDS, REQUESTS_IN_FLIGHT, REQUESTS_TOTAL};
use scb_core::server::metrics::WORKER_CONNECTIONS_OPEN;
use scb_proxy::cache::CACHE_REQUESTS_TOTAL;
use scb_proxy::metrics::{UPSTREAM_ERRORS_TOTAL, UPSTREAM_REQUESTS_TOTAL};

/// A histogram as cumulative counts: `(upper bound, observations at or below it)`,
/// ascending, `+Inf` last.
pub(super) type Buckets = Vec<(f64, f64)>;

/// What one rendering of the recorder holds that the page needs. Counters are totals
/// since they were registered; the sampler turns two of these into rates.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Totals {
    /// By route label.
    pub(super) routes: BTreeMap<String, RouteTotals>,
    /// Responses by class, `1xx` to `5xx`; a route whose service failed (`status="error"`)
    /// is answered 500, so it counts as `5xx`. Statuses outside 100-599 count nowhere.
    pub(super) classes: [f64; 5],
    /// `scb_http_requests_in_flight`.
    pub(super) in_flight: f64,
    /// `scb_worker_connections_open`, by worker index.
    pub(super) workers: BTreeMap<usize, f64>,
    /// By upstream label (`host:port`).
    pub(super) upstreams: BTreeMap<String, UpstreamTotals>,
    /// `scb_cache_requests_total`, summed over routes.
    pub(super) cache: CacheTotals,
}

/// One route's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RouteTotals {
    /// Responses.
    pub(super) requests: f64,
    /// Of those, 5xx (and `error`).
    pub(super) errors: f64,
    /// `scb_http_request_duration_seconds`.
    pub(super) duration: Buckets,
}

/// One upstream's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct UpstreamTotals {
    /// Tries sent.
    pub(super) requests: f64,
    /// Tries that failed, of any kind.
    pub(super) errors: f64,
}

/// The cache's answers by outcome (see `scb_proxy::cache::metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct CacheTotals {
    pub(super) hit: f64,
    pub(super) stale: f64,
    pub(super) revalidated: f64,
    pub(super) miss: f64,
    pub(super) pass: f64,
}

/// The histogram's bucket series: the exporter appends `_bucket` to the name.
const DURATION_BUCKET: &str = "scb_http_request_duration_seconds_bucket";

/// Reads the series the page needs out of `text`, the recorder's rendering.
pub(super) fn parse(text: &str) -> Totals {
    debug_assert!(DURATION_BUCKET.starts_with(REQUEST_DURATION_SECONDS));
    let mut totals = Totals::default();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(series) = Series::parse(line) else {
            continue;
        };
        match series.name {
            REQUESTS_TOTAL => {
                let route = totals.routes.entry(series.label("route")).or_default();
                route.requests += series.value;
                let status = series.label("status");
                let class = if status == "error" {
                    Some(4)
                } else {
                    status
                        .parse::<u16>()
                        .ok()
                        .filter(|s| (100..600).contains(s))
                        .map(|s| usize::from(s / 100 - 1))
                };
                if let Some(class) = class {
                    totals.classes[class] += series.value;
                    if class == 4 {
                        route.errors += series.value;
                    }
                }
            }
            DURATION_BUCKET => {
                let le = series.label("le");
                let Ok(bound) = le.parse::<f64>() else {
                    continue;
                };
                let route = totals.routes.entry(series.label("route")).or_default();
                route.duration.push((bound, series.value));
            }
            REQUESTS_IN_FLIGHT => totals.in_flight += series.value,
            WORKER_CONNECTIONS_OPEN => {
                if let Ok(worker) = series.label("worker").parse() {
                    *totals.workers.entry(worker).or_default() += series.value;
                }
            }
            UPSTREAM_REQUESTS_TOTAL => {
                let upstream = totals
                    .upstreams
                    .entry(series.label("upstream"))
                    .or_default();
                upstream.requests += series.value;
            }
            UPSTREAM_ERRORS_TOTAL => {
                let upstream = totals
                    .upstreams
                    .entry(series.label("upstream"))
                    .or_default();
                upstream.errors += series.value;
            }
            CACHE_REQUESTS_TOTAL => {
                let cache = &mut totals.cache;
                let slot = match series.label("result").as_str() {
                    "hit" => &mut cache.hit,
                    "stale" => &mut cache.stale,
                    "revalidated" => &mut cache.revalidated,
                    "miss" => &mut cache.miss,
                    "pass" => &mut cache.pass,
                    _ => continue,
                };
                *slot += series.value;
            }
            _ => {}
        }
    }
    for route in totals.routes.values_mut() {
        // The exporter writes them in order; sorted anyway, as the percentiles need.
        route.duration.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    totals
}

/// One sample line: `name{label="value",...} value`.
struct Series<'a> {
    name: &'a str,
    labels: &'a str,
    value: f64,
}

impl<'a> Series<'a> {
    /// `None` for a line that is not a sample, or not one of the series [`parse`] reads
    /// (the name is compared before anything else is looked at).
    fn parse(line: &'a str) -> Option<Self> {
        let name_end = line.find(['{', ' '])?;
        let name = &line[..name_end];
        if !matches!(
            name,
            REQUESTS_TOTAL
                | DURATION_BUCKET
                | REQUESTS_IN_FLIGHT
                | WORKER_CONNECTIONS_OPEN
                | UPSTREAM_REQUESTS_TOTAL
                | UPSTREAM_ERRORS_TOTAL
                | CACHE_REQUESTS_TOTAL
        ) {
            return None;
        }
        let rest = &line[name_end..];
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => {
                let end = labels_end(rest)?;
                (&rest[..end], &rest[end + 1..])
            }
            None => ("", rest),
        };
        // A timestamp may follow the value; the exporter writes none.
        let value = value.split_whitespace().next()?.parse().ok()?;
        Some(Self {
            name,
            labels,
            value,
        })
    }

    /// The value of label `key`, unescaped; empty when absent.
    fn label(&self, key: &str) -> String {
        let mut rest = self.labels;
        while !rest.is_empty() {
            let Some((name, after)) = rest.split_once("=\"") else {
                break;
            };
            let (value, after) = unescape(after);
            if name.trim_start_matches(',') == key {
                return value;
            }
            rest = after;
        }
        String::new()
    }
}

/// Where the label set starting at `s` (just after `{`) ends: the `}` outside quotes.
fn labels_end(s: &str) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

/// A quoted label value that `s` starts with (just after its opening quote), unescaped,
/// and what follows its closing quote.
fn unescape(s: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (value, &s[i + 1..]),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, other)) => value.push(other),
                None => break,
            },
            c => value.push(c),
        }
    }
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDERED: &str = r#"# TYPE scb_http_requests_total counter
scb_http_requests_total{route="static",method="GET",status="200"} 90
scb_http_requests_total{route="static",method="HEAD",status="304"} 5
scb_http_requests_total{route="api \"v2\", {new}",method="GET",status="502"} 3
scb_http_requests_total{route="api \"v2\", {new}",method="POST",status="error"} 1
scb_http_requests_total{route="unmatched",method="other",status="404"} 2
scb_http_requests_total{route="odd",method="GET",status="999"} 7
# TYPE scb_http_requests_in_flight gauge
scb_http_requests_in_flight 4
scb_http_request_duration_seconds_bucket{route="static",le="0.001"} 50
scb_http_request_duration_seconds_bucket{route="static",le="0.01"} 90
scb_http_request_duration_seconds_bucket{route="static",le="+Inf"} 95
scb_http_request_duration_seconds_sum{route="static"} 0.3
scb_http_request_duration_seconds_count{route="static"} 95
scb_worker_connections_open{worker="0"} 3
scb_worker_connections_open{worker="1"} 0
scb_connections_open{listener="127.0.0.1:8080"} 3
scb_upstream_requests_total{upstream="127.0.0.1:9000"} 8
scb_upstream_errors_total{upstream="127.0.0.1:9000",kind="connect"} 3
scb_upstream_errors_total{upstream="127.0.0.1:9000",kind="reset"} 1
scb_cache_requests_total{route="a",result="hit"} 6
scb_cache_requests_total{route="b",result="hit"} 2
scb_cache_requests_total{route="a",result="miss"} 2
scb_cache_requests_total{route="a",result="pass"} 9
"#;

    #[test]
    fn the_series_the_page_needs_are_read_and_summed() {
        let totals = parse(RENDERED);
        let static_ = &totals.routes["static"];
        assert_eq!((static_.requests, static_.errors), (95.0, 0.0));
        assert_eq!(
            static_.duration,
            vec![(0.001, 50.0), (0.01, 90.0), (f64::INFINITY, 95.0)]
        );
        // Quotes, commas and braces inside a value do not end it.
        let api = &totals.routes["api \"v2\", {new}"];
        assert_eq!((api.requests, api.errors), (4.0, 4.0));
        assert_eq!(totals.routes["unmatched"].requests, 2.0);
        // A status no class has is a request, in no class.
        assert_eq!(totals.routes["odd"].requests, 7.0);
        assert_eq!(totals.classes, [0.0, 90.0, 5.0, 2.0, 4.0]);
        assert_eq!(totals.in_flight, 4.0);
        assert_eq!(
            totals.workers.into_iter().collect::<Vec<_>>(),
            vec![(0, 3.0), (1, 0.0)]
        );
        assert_eq!(
            totals.upstreams["127.0.0.1:9000"],
            UpstreamTotals {
                requests: 8.0,
                errors: 4.0
            }
        );
        assert_eq!(
            totals.cache,
            CacheTotals {
                hit: 8.0,
                miss: 2.0,
                pass: 9.0,
                ..CacheTotals::default()
            }
        );
    }

    #[test]
    fn broken_lines_are_skipped() {
        let totals = parse(
            "scb_http_requests_in_flight\n\
             scb_http_requests_in_flight x\n\
             scb_http_requests_total{route=\"a\",status=\"200\" 5\n\
             scb_http_requests_total{route=\"a\",status=\"200\"}\n\
             scb_worker_connections_open{worker=\"x\"} 1\n",
        );
        assert_eq!(totals, Totals::default());
    }

    #[test]
    fn escapes_in_label_values_are_undone() {
        let series =
            Series::parse(r#"scb_http_requests_total{route="a\\b\"c\nd",status="200"} 1"#).unwrap();
        assert_eq!(series.label("route"), "a\\b\"c\nd");
        assert_eq!(series.label("status"), "200");
        assert_eq!(series.label("method"), "");
    }
}
