//! A histogram that counts into fixed buckets as it records, one set of counters per shard
//! of threads.
//!
//! Why not the exporter's: `metrics-exporter-prometheus` 0.18 keeps every observation (the
//! value and a clock reading, 16 bytes) in a lock-free queue until its upkeep or a scrape
//! sorts them into buckets. At 100,000 requests a second that is 8 MB of samples between
//! two 5-second upkeeps, a clock read and an epoch pin per request, and the sorting on
//! the control thread: the 8-12 MiB and several percent of CPU that `[metrics]` cost
//! (bench/RESULTS.md, issue 25). Buckets known in advance need none of it: a record is a
//! scan of 16 bounds and two uncontended additions, and memory is fixed.
//!
//! Shards: each thread adds into the counters of its own shard ([`super::slot`]: a plain
//! load and store when the thread owns it), so workers on different cores do not pull one
//! cache line between them on every request. A scrape sums the shards.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::slot::{add_f64, add_u64, shard};

use metrics::HistogramFn;

/// Counters per shard: a cache-line pair apart, so that adjacent shards' lines are not
/// prefetched together (128 bytes, as crossbeam's `CachePadded` on x86-64).
const STRIDE_ALIGN: usize = 128 / std::mem::size_of::<AtomicU64>();

/// A histogram with fixed, ascending, finite upper bounds; values above the last fall in
/// `+Inf` only.
#[derive(Debug)]
pub(crate) struct BucketHistogram {
    bounds: Box<[f64]>,
    /// `owned + 1` runs of `stride` counters (the owned shards, then the shared one): per
    /// bound the observations at or below it and above the previous one, then those above
    /// every bound, then the sum's bits.
    cells: Box<[AtomicU64]>,
    stride: usize,
    owned: usize,
}

/// What a scrape reads: cumulative counts per bound, the total and the sum.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Snapshot {
    /// `(bound, observations at or below it)`, ascending.
    pub(crate) buckets: Vec<(f64, u64)>,
    pub(crate) count: u64,
    pub(crate) sum: f64,
}

impl BucketHistogram {
    /// A histogram with `bounds` (ascending and finite: [`super::MetricsRecorder`] checks),
    /// `owned` sets of counters for the threads that own a shard and one for the others.
    pub(crate) fn new(bounds: &[f64], owned: usize) -> Self {
        let owned = owned.clamp(1, 64);
        let stride = (bounds.len() + 2).next_multiple_of(STRIDE_ALIGN);
        Self {
            bounds: bounds.into(),
            cells: (0..(owned + 1) * stride)
                .map(|_| AtomicU64::new(0))
                .collect(),
            stride,
            owned,
        }
    }

    fn shard(&self, index: usize) -> &[AtomicU64] {
        let start = index * self.stride;
        &self.cells[start..start + self.bounds.len() + 2]
    }

    /// The counts summed over the shards. Taken while others record, a snapshot may see
    /// an observation in its bucket and not yet in the sum (or the other way round); each
    /// counter only grows, so no figure ever goes back.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let bounds = self.bounds.len();
        let mut per_bucket = vec![0u64; bounds + 1];
        let mut sum = 0.0;
        for shard in 0..=self.owned {
            let cells = self.shard(shard);
            for (total, cell) in per_bucket.iter_mut().zip(cells) {
                *total += cell.load(Relaxed);
            }
            sum += f64::from_bits(cells[bounds + 1].load(Relaxed));
        }
        let mut running = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(&per_bucket)
            .map(|(bound, n)| {
                running += n;
                (*bound, running)
            })
            .collect();
        Snapshot {
            buckets,
            count: running + per_bucket[bounds],
            sum,
        }
    }
}

impl HistogramFn for BucketHistogram {
    fn record(&self, value: f64) {
        let (index, owned) = shard(self.owned);
        let cells = self.shard(index);
        // The first bound at or above the value, scanned from the smallest: most requests
        // take less than the first bound or two, where the scan stops at once and a binary
        // search of 16 always makes four probes (37 instructions a record under callgrind).
        // NaN is at or below no bound: it lands in +Inf only (and makes the sum NaN), as in
        // the exporter's own histogram.
        let bucket = self
            .bounds
            .iter()
            .position(|bound| *bound >= value)
            .unwrap_or(self.bounds.len());
        add_u64(&cells[bucket], owned, 1);
        add_f64(&cells[self.bounds.len() + 1], owned, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_cumulative_and_values_above_every_bound_count_only_in_the_total() {
        let histogram = BucketHistogram::new(&[0.1, 1.0, 10.0], 4);
        for value in [0.05, 0.1, 0.5, 2.0, 20.0, 30.0] {
            histogram.record(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.buckets, vec![(0.1, 2), (1.0, 3), (10.0, 4)]);
        assert_eq!(snapshot.count, 6);
        assert!((snapshot.sum - 52.65).abs() < 1e-9, "{}", snapshot.sum);
    }

    #[test]
    fn threads_in_different_shards_add_up() {
        let histogram = std::sync::Arc::new(BucketHistogram::new(&[1.0], 2));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let histogram = std::sync::Arc::clone(&histogram);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        histogram.record(0.5);
                        histogram.record(2.0);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.buckets, vec![(1.0, 8000)]);
        assert_eq!(snapshot.count, 16_000);
        assert_eq!(snapshot.sum, 20_000.0);
    }

    #[test]
    fn nan_counts_above_every_bound() {
        let histogram = BucketHistogram::new(&[1.0], 1);
        histogram.record(f64::NAN);
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.buckets, vec![(1.0, 0)]);
        assert_eq!(snapshot.count, 1);
        assert!(snapshot.sum.is_nan());
    }
}
