//! The samples of the last minute and the chart's last ten, and the figures derived from
//! them: rates from the difference of two samples' totals divided by the time between
//! them, percentiles from the difference of two histograms.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use std::time::Instant;

use super::json;
use super::scrape::{Buckets, Totals};

/// What the live rates average over: long enough that a second with no request does not
/// read as a stop, short enough that a change shows within a few refreshes.
pub(super) const RATE_WINDOW: Duration = Duration::from_secs(5);

/// What the latency percentiles and the cache hit ratio are computed over: a percentile
/// of a few seconds' requests jumps with every slow one.
pub(super) const MINUTE_WINDOW: Duration = Duration::from_secs(60);

/// The chart's points, one a sample: ten minutes at one a second.
pub(super) const CHART_POINTS: usize = 600;

/// The samples a [`Figures`] is derived from.
#[derive(Debug, Default)]
pub(super) struct History {
    /// The samples of the last [`MINUTE_WINDOW`] and the one before them, oldest first.
    recent: VecDeque<(Instant, Totals)>,
    /// Requests and errors (5xx) per second between consecutive samples, oldest first.
    chart: VecDeque<(f64, f64)>,
}

/// What the sampler derives from the recorder: everything in `/status.json` except what
/// the plan knows of.
#[derive(Clone, Debug, Default)]
pub(super) struct Figures {
    /// The parts of the document the recorder alone fills in.
    pub(super) status: json::Status,
    /// Open connections by worker index, from the latest sample.
    pub(super) workers: BTreeMap<usize, f64>,
    /// `(tries, failed tries)` per second by upstream label (`host:port`), over the rate
    /// window.
    pub(super) upstreams: BTreeMap<String, (f64, f64)>,
}

impl History {
    /// Adds the sample taken `at`.
    pub(super) fn push(&mut self, at: Instant, totals: Totals) {
        if let Some((before, previous)) = self.recent.back() {
            let seconds = at.saturating_duration_since(*before).as_secs_f64();
            if seconds > 0.0 {
                let rate = |now: f64, then: f64| (now - then).max(0.0) / seconds;
                let requests = rate(sum_requests(&totals), sum_requests(previous));
                let errors = rate(totals.classes[4], previous.classes[4]);
                if self.chart.len() == CHART_POINTS {
                    self.chart.pop_front();
                }
                self.chart.push_back((requests, errors));
            }
        }
        self.recent.push_back((at, totals));
        // Keep one sample at least a window old, the start of the minute's window.
        while self.recent.len() > 2 && at.duration_since(self.recent[1].0) >= MINUTE_WINDOW {
            self.recent.pop_front();
        }
    }

    /// The figures as of the latest sample; all zero before the first.
    pub(super) fn figures(&self) -> Figures {
        let Some((now_at, now)) = self.recent.back() else {
            return Figures::default();
        };
        let (rate_at, then) = self.closest(RATE_WINDOW);
        let (minute_at, minute) = self.closest(MINUTE_WINDOW);
        let rate_seconds = now_at.duration_since(rate_at).as_secs_f64();
        let minute_seconds = now_at.duration_since(minute_at).as_secs_f64();
        let rate = |now: f64, then: f64| {
            if rate_seconds > 0.0 {
                round((now - then).max(0.0) / rate_seconds)
            } else {
                0.0
            }
        };

        let empty = Default::default();
        let routes = now
            .routes
            .iter()
            .map(|(name, route)| {
                let before = then.routes.get(name).unwrap_or(&empty);
                let minute_ago = minute.routes.get(name).unwrap_or(&empty);
                json::Route {
                    name: name.clone(),
                    per_second: rate(route.requests, before.requests),
                    errors_per_second: rate(route.errors, before.errors),
                    total: route.requests,
                    p99_ms: quantile(0.99, &difference(&route.duration, &minute_ago.duration))
                        .map(millis),
                }
            })
            .collect();

        let mut duration = Buckets::new();
        for (name, route) in &now.routes {
            let minute_ago = minute.routes.get(name).map_or(&[][..], |r| &r.duration);
            add(&mut duration, &difference(&route.duration, minute_ago));
        }
        let latency = json::Latency {
            window_seconds: round(minute_seconds),
            count: duration.last().map_or(0.0, |b| b.1),
            p50: quantile(0.5, &duration).map(millis),
            p90: quantile(0.9, &duration).map(millis),
            p99: quantile(0.99, &duration).map(millis),
        };

        let class = |i: usize| rate(now.classes[i], then.classes[i]);
        let (cache_now, cache_then, cache_minute) = (&now.cache, &then.cache, &minute.cache);
        let hit_ratio = |hits: f64, lookups: f64| (lookups > 0.0).then(|| round(hits / lookups));
        let served = |c: &super::scrape::CacheTotals| c.hit + c.stale;
        let lookups = |c: &super::scrape::CacheTotals| c.hit + c.stale + c.revalidated + c.miss;
        let cache = json::Cache {
            hit_ratio: hit_ratio(
                served(cache_now) - served(cache_minute),
                lookups(cache_now) - lookups(cache_minute),
            ),
            hit_ratio_window_seconds: round(minute_seconds),
            hit_ratio_total: hit_ratio(served(cache_now), lookups(cache_now)),
            per_second: json::CacheRates {
                hit: rate(cache_now.hit, cache_then.hit),
                stale: rate(cache_now.stale, cache_then.stale),
                revalidated: rate(cache_now.revalidated, cache_then.revalidated),
                miss: rate(cache_now.miss, cache_then.miss),
                pass: rate(cache_now.pass, cache_then.pass),
            },
        };

        let upstreams = now
            .upstreams
            .iter()
            .map(|(name, upstream)| {
                let before = then.upstreams.get(name).cloned().unwrap_or_default();
                (
                    name.clone(),
                    (
                        rate(upstream.requests, before.requests),
                        rate(upstream.errors, before.errors),
                    ),
                )
            })
            .collect();

        Figures {
            status: json::Status {
                window_seconds: round(rate_seconds),
                requests: json::Requests {
                    per_second: rate(sum_requests(now), sum_requests(then)),
                    errors_per_second: class(4),
                    in_flight: now.in_flight,
                    total: sum_requests(now),
                },
                status_classes: json::StatusClasses {
                    informational: class(0),
                    success: class(1),
                    redirection: class(2),
                    client_error: class(3),
                    server_error: class(4),
                },
                latency_ms: latency,
                routes,
                cache: Some(cache),
                chart: json::Chart {
                    interval_seconds: 1.0,
                    requests_per_second: self.chart.iter().map(|p| round(p.0)).collect(),
                    errors_per_second: self.chart.iter().map(|p| round(p.1)).collect(),
                },
                ..json::Status::default()
            },
            workers: now.workers.clone(),
            upstreams,
        }
    }

    /// The sample taken closest to `window` before the latest (the oldest when none is
    /// that old yet).
    fn closest(&self, window: Duration) -> (Instant, &Totals) {
        let latest = self.recent.back().map(|(at, _)| *at);
        let (at, totals) = self
            .recent
            .iter()
            .min_by_key(|(at, _)| {
                let age = latest.map_or(Duration::ZERO, |l| l.duration_since(*at));
                age.abs_diff(window)
            })
            .expect("called with a sample");
        (*at, totals)
    }
}

/// Requests answered, every route's.
fn sum_requests(totals: &Totals) -> f64 {
    totals.routes.values().map(|r| r.requests).sum()
}

/// `now - then`, bucket by bucket: the observations between two samples. A bucket absent
/// from `then` (the route had none yet) counts from zero.
fn difference(now: &Buckets, then: &[(f64, f64)]) -> Buckets {
    now.iter()
        .map(|&(bound, count)| {
            let before = then.iter().find(|b| b.0 == bound).map_or(0.0, |b| b.1);
            (bound, (count - before).max(0.0))
        })
        .collect()
}

/// Adds `other` to `sum`, bucket by bucket (every route has the same bounds, set once
/// in `run.rs`; a bound only one has is kept in order).
fn add(sum: &mut Buckets, other: &[(f64, f64)]) {
    for &(bound, count) in other {
        match sum.iter_mut().find(|b| b.0 == bound) {
            Some(slot) => slot.1 += count,
            None => sum.push((bound, count)),
        }
    }
    sum.sort_by(|a, b| a.0.total_cmp(&b.0));
}

/// The `q` quantile (0 to 1) of the observations in cumulative `buckets`, in seconds, as
/// Prometheus' `histogram_quantile` computes it: linear within the bucket the rank falls
/// in, from the bound below it (0 for the first); the highest finite bound when it falls
/// in `+Inf`. `None` without observations.
pub(super) fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return Some(lower);
            }
            let within = count - below;
            let share = if within > 0.0 {
                (rank - below) / within
            } else {
                1.0
            };
            return Some(lower + (bound - lower) * share);
        }
        (lower, below) = (bound, count);
    }
    Some(lower)
}

/// Seconds as milliseconds, rounded.
fn millis(seconds: f64) -> f64 {
    round(seconds * 1000.0)
}

/// Three decimals: the page shows fewer, and the document stays short.
pub(super) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::super::scrape::{RouteTotals, parse};
    use super::*;

    /// A rendering with `requests` 200s and `errors` 502s on route `r`, and the
    /// histogram's cumulative counts at 1 ms, 10 ms, 100 ms and `+Inf`.
    fn render(requests: u32, errors: u32, buckets: [u32; 4]) -> String {
        let [a, b, c, d] = buckets;
        format!(
            "scb_http_requests_total{{route=\"r\",method=\"GET\",status=\"200\"}} {requests}\n\
             scb_http_requests_total{{route=\"r\",method=\"GET\",status=\"502\"}} {errors}\n\
             scb_http_request_duration_seconds_bucket{{route=\"r\",le=\"0.001\"}} {a}\n\
             scb_http_request_duration_seconds_bucket{{route=\"r\",le=\"0.01\"}} {b}\n\
             scb_http_request_duration_seconds_bucket{{route=\"r\",le=\"0.1\"}} {c}\n\
             scb_http_request_duration_seconds_bucket{{route=\"r\",le=\"+Inf\"}} {d}\n"
        )
    }

    #[test]
    fn rates_are_the_difference_over_the_window_divided_by_its_length() {
        let start = Instant::now();
        let mut history = History::default();
        // 10 requests a second, 1 of them an error, for 12 seconds.
        for s in 0..=12u32 {
            let at = start + Duration::from_secs(u64::from(s));
            history.push(
                at,
                parse(&render(9 * s, s, [10 * s, 10 * s, 10 * s, 10 * s])),
            );
        }
        let figures = history.figures();
        let status = &figures.status;
        assert_eq!(status.window_seconds, 5.0);
        assert_eq!(status.requests.per_second, 10.0);
        assert_eq!(status.requests.errors_per_second, 1.0);
        assert_eq!(status.requests.total, 120.0);
        assert_eq!(status.status_classes.success, 9.0);
        assert_eq!(status.status_classes.server_error, 1.0);
        assert_eq!(status.routes[0].name, "r");
        assert_eq!(status.routes[0].per_second, 10.0);
        assert_eq!(status.routes[0].errors_per_second, 1.0);
        // Every second a point, none before the first sample's successor.
        assert_eq!(status.chart.requests_per_second, vec![10.0; 12]);
        assert_eq!(status.chart.errors_per_second, vec![1.0; 12]);
    }

    #[test]
    fn a_window_longer_than_the_history_uses_the_oldest_sample() {
        let start = Instant::now();
        let mut history = History::default();
        history.push(start, parse(&render(0, 0, [0; 4])));
        assert_eq!(history.figures().status.requests.per_second, 0.0);
        history.push(start + Duration::from_secs(2), parse(&render(8, 0, [8; 4])));
        let figures = history.figures();
        assert_eq!(figures.status.window_seconds, 2.0);
        assert_eq!(figures.status.requests.per_second, 4.0);
        assert_eq!(figures.status.latency_ms.window_seconds, 2.0);
        assert_eq!(figures.status.latency_ms.count, 8.0);
    }

    #[test]
    fn percentiles_come_from_the_last_minute_of_the_histogram() {
        let start = Instant::now();
        let mut history = History::default();
        // Long ago: a thousand slow requests (over 100 ms), outside the window.
        history.push(start, parse(&render(1000, 0, [0, 0, 0, 1000])));
        // In the last minute: 100 requests, 50 under 1 ms, 40 under 10 ms, 10 under 100 ms.
        for s in 1..=70u32 {
            let n = if s > 10 { 100 } else { 0 };
            let at = start + Duration::from_secs(u64::from(s));
            let (a, b, c) = (n / 2, n / 2 + n * 2 / 5, n);
            history.push(at, parse(&render(1000 + n, 0, [a, b, c, 1000 + n])));
        }
        let latency = history.figures().status.latency_ms;
        assert_eq!(latency.window_seconds, 60.0);
        assert_eq!(latency.count, 100.0);
        // Rank 50 of 100: the top of the first bucket.
        assert_eq!(latency.p50, Some(1.0));
        // Rank 90: the top of the second.
        assert_eq!(latency.p90, Some(10.0));
        // Rank 99: 9 of the third bucket's 10, from 10 ms to 100 ms.
        assert_eq!(latency.p99, Some(91.0));
    }

    #[test]
    fn quantiles_interpolate_within_a_bucket_and_stop_at_the_highest_bound() {
        let buckets = [(0.001, 0.0), (0.002, 10.0), (f64::INFINITY, 10.0)];
        assert_eq!(quantile(0.5, &buckets).map(millis), Some(1.5));
        let slow = [(0.001, 1.0), (0.01, 1.0), (f64::INFINITY, 100.0)];
        assert_eq!(quantile(0.99, &slow), Some(0.01));
        assert_eq!(quantile(0.5, &[(0.001, 0.0), (f64::INFINITY, 0.0)]), None);
        assert_eq!(quantile(0.5, &[]), None);
    }

    #[test]
    fn the_chart_keeps_ten_minutes_and_the_samples_one() {
        let start = Instant::now();
        let mut history = History::default();
        for s in 0..=700u32 {
            let at = start + Duration::from_secs(u64::from(s));
            history.push(at, parse(&render(s, 0, [s; 4])));
        }
        assert_eq!(history.chart.len(), CHART_POINTS);
        assert!(history.recent.len() <= 62, "{}", history.recent.len());
        let oldest = history.recent.front().unwrap().0;
        assert!(start + Duration::from_secs(700) - oldest >= MINUTE_WINDOW);
    }

    #[test]
    fn a_route_that_appears_later_counts_from_zero() {
        let start = Instant::now();
        let mut history = History::default();
        history.push(start, Totals::default());
        let mut later = Totals::default();
        later.routes.insert(
            "new".into(),
            RouteTotals {
                requests: 5.0,
                errors: 0.0,
                duration: vec![(0.001, 5.0), (f64::INFINITY, 5.0)],
            },
        );
        history.push(start + Duration::from_secs(5), later);
        let status = history.figures().status;
        assert_eq!(status.routes[0].per_second, 1.0);
        assert_eq!(status.routes[0].p99_ms, Some(0.99));
    }

    #[test]
    fn the_cache_hit_ratio_counts_stale_answers_as_hits_and_passes_not_at_all() {
        let start = Instant::now();
        let mut history = History::default();
        history.push(start, Totals::default());
        let text = "scb_cache_requests_total{route=\"a\",result=\"hit\"} 6\n\
                    scb_cache_requests_total{route=\"a\",result=\"stale\"} 2\n\
                    scb_cache_requests_total{route=\"a\",result=\"revalidated\"} 1\n\
                    scb_cache_requests_total{route=\"a\",result=\"miss\"} 1\n\
                    scb_cache_requests_total{route=\"a\",result=\"pass\"} 50\n";
        history.push(start + Duration::from_secs(5), parse(text));
        let cache = history.figures().status.cache.unwrap();
        assert_eq!(cache.hit_ratio, Some(0.8));
        assert_eq!(cache.hit_ratio_total, Some(0.8));
        assert_eq!(cache.per_second.pass, 10.0);
        assert_eq!(cache.per_second.hit, 1.2);
    }
}
