//! Counters and gauges that each thread adds into a shard of its own, summed when read.
//!
//! Why: the exporter's counter is one atomic (and a second for its recency generation)
//! that every worker adds into on every request, so with many workers the cache line
//! travels between cores on each one; the in-flight gauge is written twice a request.
//! Here a worker adds into its own line, uncontended, and [`super::MetricsHandle::render`]
//! sums the shards into the exporter's handles before the exporter renders them: the
//! counts are read only when scraped.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use metrics::{CounterFn, GaugeFn};

/// Cells per shard: a cache-line pair, so that adjacent shards are not prefetched together.
const STRIDE: usize = 128 / std::mem::size_of::<AtomicU64>();

/// This thread's number, handed out in the order threads first record.
pub(super) fn thread_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // A `const` cell, numbered on first use: no lazy-initialisation state to check
        // on every record.
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|shard| {
        if shard.get() == usize::MAX {
            shard.set(NEXT.fetch_add(1, Relaxed) % 64);
        }
        shard.get()
    })
}

/// One cell per shard, each on its own cache lines.
#[derive(Debug)]
struct Cells {
    cells: Box<[AtomicU64]>,
    /// Shard count minus one (a power of two).
    mask: usize,
}

impl Cells {
    fn new(shards: usize, initial: u64) -> Self {
        let shards = shards.clamp(1, 64).next_power_of_two();
        Self {
            cells: (0..shards * STRIDE)
                .map(|_| AtomicU64::new(initial))
                .collect(),
            mask: shards - 1,
        }
    }

    fn mine(&self) -> &AtomicU64 {
        &self.cells[(thread_shard() & self.mask) * STRIDE]
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
        self.0.mine().fetch_add(value, Relaxed);
    }

    fn absolute(&self, value: u64) {
        // Whoever sets a counter absolutely raises it to at least `value`: the difference
        // goes into this thread's shard.
        let current = self.value();
        if value > current {
            self.0.mine().fetch_add(value - current, Relaxed);
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
        add_f64(self.shards.mine(), delta);
    }
}

/// Adds `delta` to the `f64` whose bits `cell` holds. A loop, though the cell is this
/// thread's shard: another thread shares it when there are more threads than shards.
pub(super) fn add_f64(cell: &AtomicU64, delta: f64) {
    let mut current = cell.load(Relaxed);
    while let Err(actual) = cell.compare_exchange_weak(
        current,
        (f64::from_bits(current) + delta).to_bits(),
        Relaxed,
        Relaxed,
    ) {
        current = actual;
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
