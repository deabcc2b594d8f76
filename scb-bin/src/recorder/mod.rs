//! The `metrics` recorder `scb` installs: the Prometheus exporter's, with scb's own
//! storage for what requests write.
//!
//! Counters and gauges are [`sharded`]: each thread adds into a cache line of its own,
//! and [`MetricsHandle::render`] sums them into the exporter's handles just before the
//! exporter renders, so that they are read only when scraped. A histogram whose name has
//! buckets here is a [`BucketHistogram`]: its record counts into the bucket at once,
//! where the exporter's queues the observation until an upkeep or scrape (see
//! [`histogram`] for what that cost); `render` appends those histograms to the
//! exporter's text in the exporter's own format (its `formatting` helpers), so a scrape
//! reads the same series under the same names.

mod histogram;
mod sharded;
mod slot;

use std::collections::HashMap;
use std::num::NonZero;
use std::sync::{Arc, Mutex, PoisonError};

use indexmap::IndexMap;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::formatting::{
    sanitize_metric_name, write_help_line, write_metric_line, write_type_line,
};
use metrics_exporter_prometheus::{
    LabelSet, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use self::histogram::BucketHistogram;
use self::sharded::{ShardedCounter, ShardedGauge};

/// The exporter's recorder, with scb's storage for counters, gauges and the histograms
/// whose names have buckets.
#[derive(Debug)]
pub(crate) struct MetricsRecorder {
    prometheus: PrometheusRecorder,
    storage: Arc<Storage>,
}

/// Renders what a [`MetricsRecorder`] holds; cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct MetricsHandle {
    prometheus: PrometheusHandle,
    storage: Arc<Storage>,
}

/// What scb keeps of the metrics itself: shared by the recorder and its handles.
#[derive(Debug)]
struct Storage {
    /// Metric name -> its bucket bounds, ascending and finite.
    bounds: HashMap<String, Box<[f64]>>,
    /// Owned shards per counter, gauge and histogram ([`slot`]): one per worker at the
    /// machine's parallelism, and a few for the threads that record beside the workers
    /// (the main and control threads), which may claim a slot before a worker does.
    shards: usize,
    /// Every series registered, by key: registering a key again (a reload building its
    /// routes anew) continues the same counts, as a Prometheus counter must.
    series: Mutex<HashMap<Key, Arc<BucketHistogram>>>,
    descriptions: Mutex<HashMap<String, SharedString>>,
    /// Every counter and gauge, beside the exporter's handle its sum is written into.
    counters: Mutex<HashMap<Key, (Arc<ShardedCounter>, Counter)>>,
    gauges: Mutex<HashMap<Key, (Arc<ShardedGauge>, Gauge)>>,
}

impl MetricsRecorder {
    /// A recorder counting histograms named in `buckets` into those bounds (sorted,
    /// deduplicated, non-finite ones dropped); other histograms are the exporter's.
    pub(crate) fn new(buckets: &[(&str, &[f64])]) -> Self {
        let bounds = buckets
            .iter()
            .map(|(name, bounds)| {
                let mut bounds: Vec<f64> =
                    bounds.iter().copied().filter(|b| b.is_finite()).collect();
                bounds.sort_by(f64::total_cmp);
                bounds.dedup();
                ((*name).to_owned(), bounds.into_boxed_slice())
            })
            .collect();
        Self {
            prometheus: PrometheusBuilder::new().build_recorder(),
            storage: Arc::new(Storage {
                bounds,
                shards: std::thread::available_parallelism().map_or(1, NonZero::get) + 4,
                series: Mutex::default(),
                descriptions: Mutex::default(),
                counters: Mutex::default(),
                gauges: Mutex::default(),
            }),
        }
    }

    /// The handle that renders this recorder's metrics.
    pub(crate) fn handle(&self) -> MetricsHandle {
        MetricsHandle {
            prometheus: self.prometheus.handle(),
            storage: Arc::clone(&self.storage),
        }
    }
}

impl Recorder for MetricsRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.prometheus.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.storage.bounds.contains_key(key.as_str()) {
            lock(&self.storage.descriptions)
                .entry(key.as_str().to_owned())
                .or_insert(description);
        } else {
            self.prometheus.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let shards = self.storage.shards;
        Counter::from_arc(registered(&self.storage.counters, key, || {
            (
                Arc::new(ShardedCounter::new(shards)),
                self.prometheus.register_counter(key, metadata),
            )
        }))
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let shards = self.storage.shards;
        Gauge::from_arc(registered(&self.storage.gauges, key, || {
            (
                Arc::new(ShardedGauge::new(shards)),
                self.prometheus.register_gauge(key, metadata),
            )
        }))
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let Some(bounds) = self.storage.bounds.get(key.name()) else {
            return self.prometheus.register_histogram(key, metadata);
        };
        let series = lock(&self.storage.series)
            .entry(key.clone())
            .or_insert_with(|| Arc::new(BucketHistogram::new(bounds, self.storage.shards)))
            .clone();
        Histogram::from_arc(series)
    }
}

impl MetricsHandle {
    /// Every metric in the Prometheus text format: the exporter's, then scb's histograms,
    /// sorted by name and labels.
    pub(crate) fn render(&self) -> String {
        self.storage.sum_into_the_exporter();
        let mut text = self.prometheus.render();
        self.storage.render_into(&mut text);
        text
    }

    /// Drains the exporter's queued observations (of the histograms that are not scb's)
    /// into their summaries, bounding the memory they hold between scrapes.
    pub(crate) fn run_upkeep(&self) {
        self.prometheus.run_upkeep();
    }
}

impl Storage {
    /// Writes each counter's and gauge's sum over its shards into the exporter's handle.
    fn sum_into_the_exporter(&self) {
        for (counter, exporters) in lock(&self.counters).values() {
            exporters.absolute(counter.value());
        }
        for (gauge, exporters) in lock(&self.gauges).values() {
            exporters.set(gauge.value());
        }
    }

    fn render_into(&self, text: &mut String) {
        let mut series: Vec<(String, LabelSet, histogram::Snapshot)> = lock(&self.series)
            .iter()
            .map(|(key, histogram)| {
                (
                    sanitize_metric_name(key.name()),
                    LabelSet::from_key_and_global(key, &IndexMap::new()),
                    histogram.snapshot(),
                )
            })
            .collect();
        series.sort_by(|a, b| {
            (&a.0, a.1.to_strings().collect::<Vec<_>>())
                .cmp(&(&b.0, b.1.to_strings().collect::<Vec<_>>()))
        });
        let descriptions = lock(&self.descriptions);
        let mut previous: Option<&str> = None;
        for (name, labels, snapshot) in &series {
            if previous != Some(name.as_str()) {
                if previous.is_some() {
                    text.push('\n');
                }
                if let Some(description) = descriptions.get(name) {
                    write_help_line(text, name, None, None, description);
                }
                write_type_line(text, name, None, None, "histogram");
                previous = Some(name);
            }
            for (bound, count) in &snapshot.buckets {
                write_metric_line(
                    text,
                    name,
                    Some("bucket"),
                    labels,
                    Some(("le", bound)),
                    count,
                    None,
                );
            }
            write_metric_line(
                text,
                name,
                Some("bucket"),
                labels,
                Some(("le", "+Inf")),
                snapshot.count,
                None,
            );
            write_metric_line::<&str, f64>(
                text,
                name,
                Some("sum"),
                labels,
                None,
                snapshot.sum,
                None,
            );
            write_metric_line::<&str, u64>(
                text,
                name,
                Some("count"),
                labels,
                None,
                snapshot.count,
                None,
            );
        }
        if previous.is_some() {
            text.push('\n');
        }
    }
}

/// The sharded handle of `key` in `map`, made with the exporter's beside it the first time
/// `key` is registered.
fn registered<T, E>(
    map: &Mutex<HashMap<Key, (Arc<T>, E)>>,
    key: &Key,
    make: impl FnOnce() -> (Arc<T>, E),
) -> Arc<T> {
    Arc::clone(&lock(map).entry(key.clone()).or_insert_with(make).0)
}

/// A poisoned map is still a consistent map: every writer inserts whole entries.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> MetricsRecorder {
        MetricsRecorder::new(&[("scb_test_seconds", &[0.001, 0.01, 0.1])])
    }

    /// Asserts that `ours` renders the lines the exporter's `exporters` renders (as sets:
    /// the exporter orders series by hash), and returns our text.
    fn renders_as(ours: &MetricsRecorder, exporters: &PrometheusRecorder) -> String {
        let expected = exporters.handle().render();
        let rendered = ours.handle().render();
        let mut expected: Vec<&str> = expected.lines().collect();
        let mut rendered_lines: Vec<&str> = rendered.lines().collect();
        expected.sort_unstable();
        rendered_lines.sort_unstable();
        assert_eq!(rendered_lines, expected, "{rendered}");
        rendered
    }

    #[test]
    fn a_bucketed_histogram_renders_as_the_exporter_renders_one() {
        let ours = recorder();
        let exporters = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full("scb_test_seconds".to_owned()),
                &[0.001, 0.01, 0.1],
            )
            .unwrap()
            .build_recorder();
        for recorder in [&ours as &dyn Recorder, &exporters] {
            metrics::with_local_recorder(recorder, || {
                metrics::describe_histogram!("scb_test_seconds", "Time taken");
                for (route, value) in [("a", 0.0005), ("a", 0.05), ("b", 1.0), ("a", 0.01)] {
                    metrics::histogram!("scb_test_seconds", "route" => route).record(value);
                }
            });
        }
        let rendered = renders_as(&ours, &exporters);
        assert!(rendered.contains("scb_test_seconds_bucket{route=\"a\",le=\"0.01\"} 2\n"));
    }

    #[test]
    fn counters_and_gauges_render_as_the_exporter_renders_them() {
        let ours = recorder();
        let exporters = PrometheusBuilder::new().build_recorder();
        for recorder in [&ours as &dyn Recorder, &exporters] {
            metrics::with_local_recorder(recorder, || {
                metrics::describe_counter!("scb_test_total", "Things");
                metrics::counter!("scb_test_total", "route" => "a").increment(3);
                metrics::counter!("scb_test_total", "route" => "a").increment(4);
                metrics::counter!("scb_test_total", "route" => "b").absolute(9);
                let in_flight = metrics::gauge!("scb_test_in_flight");
                in_flight.increment(5.0);
                in_flight.decrement(2.0);
                metrics::gauge!("scb_test_info", "version" => "1").set(1.0);
            });
        }
        let rendered = renders_as(&ours, &exporters);
        assert!(
            rendered.contains("scb_test_total{route=\"a\"} 7\n"),
            "{rendered}"
        );
        assert!(rendered.contains("scb_test_in_flight 3\n"), "{rendered}");
    }

    #[test]
    fn a_key_registered_again_continues_its_counts_and_other_histograms_stay_the_exporters() {
        let recorder = recorder();
        metrics::with_local_recorder(&recorder, || {
            metrics::histogram!("scb_test_seconds", "route" => "a").record(0.5);
            metrics::histogram!("scb_test_seconds", "route" => "a").record(0.5);
            metrics::histogram!("scb_other_seconds").record(0.5);
        });
        let text = recorder.handle().render();
        assert!(
            text.contains("scb_test_seconds_count{route=\"a\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE scb_other_seconds summary\n"),
            "{text}"
        );
    }
}
