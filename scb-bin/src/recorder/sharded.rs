//! Counters and gauges that each thread adds into a shard of its own, summed when read.
//!
//! Why: the exporter's counter is one atomic (and a second for its recency generation)
//! that every worker adds into on every request, so with many workers the cache line
//! travels between cores on each one; the in-flight gauge is written twice a request.
//! Here a worker adds into its own line, uncontended and without an atomic
//! read-modify-write when it owns the shard ([`super::slot`]), and [`super::MetricsHandle::render`]
//! sums the shards into the exporter's handles before the exporter renders them: the
//! counts are read only when scraped.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics::{CounterFn, GaugeFn};

use super::slot::{add_f64, add_u64, shard};

/// Cells per shard: a cache-line pair, so that adjacent shards are not prefetched together.
const STRIDE: usize = 128 / std::mem::size_of::<AtomicU64>();

/// One cell per shard, each on its own cache lines: `owned` shards, then the shared one.
#[derive(Debug)]
struct Cells {
    cells: Box<[AtomicU64]>,
    owned: usize,
}

impl Cells {
    fn new(owned: usize, initial: u64) -> Self {
        let owned = owned.clamp(1, 64);
        Self {
            cells: (0..(owned + 1) * STRIDE)
                .map(|_| AtomicU64::new(initial))
                .collect(),
            owned,
        }
    }

    /// This thread's cell, and whether this thread owns it.
    fn mine(&self) -> (&AtomicU64, bool) {
        let (index, owned) = shard(self.owned);
        (&self.cells[index * STRIDE], owned)
    }

    fn each(&self) -> impl Iterator<Item = &AtomicU64> {
        self.cells.iter().step_by(STRIDE)
    }
}

/// A monotonic counter.
#[derive(Debug)]
pub(crate) struct ShardedCounter(Cells);

impl ShardedCounter {
    pub(crate) fn new(shards: usize) -> Self {
        Self(Cells::new(shards, 0))
    }

    /// The total over the shards.
    pub(crate) fn value(&self) -> u64 {
        self.0.each().map(|cell| cell.load(Relaxed)).sum()
    }
}

impl CounterFn for ShardedCounter {
    fn increment(&self, value: u64) {
        let (cell, owned) = self.0.mine();
        add_u64(cell, owned, value);
    }

    fn absolute(&self, value: u64) {
        // Whoever sets a counter absolutely raises it to at least `value`: the difference
        // goes into this thread's shard.
        let current = self.value();
        if value > current {
            self.increment(value - current);
        }
    }
}

/// A gauge: a base that `set` writes and the increments and decrements of each shard.
///
/// A gauge is either set (a value read from elsewhere) or moved up and down (open
/// connections, requests in flight); `set` on a gauge that is also moved makes the base
/// the value wanted minus the shards' sum at that moment, exact when nothing moves it at
/// the same time.
#[derive(Debug)]
pub(crate) struct ShardedGauge {
    base: AtomicU64,
    shards: Cells,
}

impl ShardedGauge {
    pub(crate) fn new(shards: usize) -> Self {
        Self {
            base: AtomicU64::new(0f64.to_bits()),
            shards: Cells::new(shards, 0f64.to_bits()),
        }
    }

    fn moved(&self) -> f64 {
        self.shards
            .each()
            .map(|cell| f64::from_bits(cell.load(Relaxed)))
            .sum()
    }

    /// The base plus every shard's movement.
    pub(crate) fn value(&self) -> f64 {
        f64::from_bits(self.base.load(Relaxed)) + self.moved()
    }

    fn add(&self, delta: f64) {
        let (cell, owned) = self.shards.mine();
        add_f64(cell, owned, delta);
    }
}

impl GaugeFn for ShardedGauge {
    fn increment(&self, value: f64) {
        self.add(value);
    }

    fn decrement(&self, value: f64) {
        self.add(-value);
    }

    fn set(&self, value: f64) {
        self.base.store((value - self.moved()).to_bits(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn threads_add_into_their_shards_and_the_reader_sums_them() {
        let counter = Arc::new(ShardedCounter::new(2));
        let gauge = Arc::new(ShardedGauge::new(2));
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let (counter, gauge) = (Arc::clone(&counter), Arc::clone(&gauge));
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        counter.increment(2);
                        gauge.increment(1.0);
                    }
                    for _ in 0..400 {
                        gauge.decrement(1.0);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(counter.value(), 12_000);
        assert_eq!(gauge.value(), 3_600.0);
    }

    #[test]
    fn absolute_raises_a_counter_and_never_lowers_it_and_set_overrides_the_movement() {
        let counter = ShardedCounter::new(4);
        counter.increment(5);
        counter.absolute(3);
        assert_eq!(counter.value(), 5);
        counter.absolute(9);
        assert_eq!(counter.value(), 9);

        let gauge = ShardedGauge::new(4);
        gauge.increment(4.0);
        gauge.set(10.0);
        assert_eq!(gauge.value(), 10.0);
        gauge.decrement(1.5);
        assert_eq!(gauge.value(), 8.5);
    }
}
