//! A bounded map from names to values, for one thread: at most `max_entries` values and
//! `max_bytes` of their weights, the least recently used of a small random sample evicted
//! when a new value needs room.
//!
//! Why sampled and not exact LRU: exact LRU needs a linked list through the entries and a
//! pointer update on every hit; sampling five slots at eviction time (as Redis does) keeps
//! a hit to one hash lookup and one counter store, and evicts nearly as well. The slots are
//! a dense `Vec`, so a random sample is five indexings and a removal is a `swap_remove`.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

/// How many slots an eviction looks at.
const SAMPLE: usize = 5;

/// A bounded, single-threaded map with sampled-LRU eviction.
#[derive(Debug)]
pub(crate) struct Table<V> {
    /// Name to slot index. The key is shared with the slot, which needs it to find its
    /// index entry again when it is moved or evicted.
    index: HashMap<Rc<str>, usize>,
    slots: Vec<Slot<V>>,
    max_entries: usize,
    max_bytes: usize,
    bytes: usize,
    /// Bumped on every hit: a slot's `used` is the tick of its last hit.
    tick: u64,
}

/// One cached value.
#[derive(Debug)]
pub(crate) struct Slot<V> {
    key: Rc<str>,
    /// The value.
    pub(crate) value: V,
    /// When the value was last known to be current.
    pub(crate) validated: Instant,
    used: u64,
    weight: usize,
}

impl<V> Table<V> {
    /// An empty table holding at most `max_entries` values weighing `max_bytes` in all.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            index: HashMap::new(),
            slots: Vec::new(),
            max_entries,
            max_bytes,
            bytes: 0,
            tick: 0,
        }
    }

    /// The slot of `key`, counted as a use.
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Slot<V>> {
        let &i = self.index.get(key)?;
        self.tick += 1;
        let slot = &mut self.slots[i];
        slot.used = self.tick;
        Some(slot)
    }

    /// Stores `value` under `key` (replacing any value there), validated at `now`,
    /// evicting others until it fits. A value heavier than the whole table is not stored;
    /// the result says whether it was.
    pub(crate) fn insert(&mut self, key: &str, value: V, weight: usize, now: Instant) -> bool {
        self.remove(key);
        if self.max_entries == 0 || weight > self.max_bytes {
            return false;
        }
        while self.slots.len() >= self.max_entries || self.bytes + weight > self.max_bytes {
            self.evict_one();
        }
        self.tick += 1;
        let key: Rc<str> = Rc::from(key);
        self.index.insert(Rc::clone(&key), self.slots.len());
        self.slots.push(Slot {
            key,
            value,
            validated: now,
            used: self.tick,
            weight,
        });
        self.bytes += weight;
        true
    }

    /// Removes the value of `key`, if any.
    pub(crate) fn remove(&mut self, key: &str) -> Option<V> {
        let i = self.index.remove(key)?;
        Some(self.take(i))
    }

    /// How many values are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The sum of the stored values' weights.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Evicts the least recently used of up to [`SAMPLE`] slots, spread evenly around the
    /// table from a random start. The sampled slots are distinct: drawn independently, all
    /// five could land on one slot (1 in 4,096 with eight slots), and that slot, the most
    /// recently used one included, was evicted.
    fn evict_one(&mut self) {
        let len = self.slots.len();
        if len == 0 {
            return;
        }
        let n = SAMPLE.min(len);
        let start = fastrand::usize(..len);
        let victim = (0..n)
            .map(|k| (start + k * len / n) % len)
            .min_by_key(|&i| self.slots[i].used)
            .unwrap_or(0);
        self.index.remove(&self.slots[victim].key);
        self.take(victim);
    }

    /// Takes slot `i` out (its index entry already removed), moving the last slot into
    /// its place.
    fn take(&mut self, i: usize) -> V {
        let slot = self.slots.swap_remove(i);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(Rc::clone(&moved.key), i);
        }
        self.bytes -= slot.weight;
        slot.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn values_are_found_by_name_and_replaced() {
        let mut t = Table::new(10, 1000);
        assert!(t.insert("a", 1, 10, now()));
        assert!(t.insert("b", 2, 10, now()));
        assert_eq!(t.get_mut("a").map(|s| s.value), Some(1));
        assert!(t.insert("a", 3, 30, now()));
        assert_eq!(t.get_mut("a").map(|s| s.value), Some(3));
        assert_eq!(t.len(), 2);
        assert_eq!(t.bytes(), 40);
        assert_eq!(t.remove("b"), Some(2));
        assert!(t.get_mut("b").is_none());
        assert_eq!(t.bytes(), 30);
    }

    #[test]
    fn the_entry_bound_holds_and_a_recently_used_value_survives() {
        let mut t = Table::new(8, usize::MAX);
        t.insert("hot", 0, 1, now());
        for i in 0..1000 {
            t.insert(&format!("cold{i}"), i, 1, now());
            // Used after every insert: always the most recent, never the sample's minimum.
            assert!(t.get_mut("hot").is_some(), "evicted after {i} inserts");
            assert!(t.len() <= 8);
        }
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn with_no_more_slots_than_the_sample_the_least_recently_used_goes() {
        let mut t = Table::new(3, usize::MAX);
        for (key, value) in [("a", 1), ("b", 2), ("c", 3)] {
            t.insert(key, value, 1, now());
        }
        assert!(t.get_mut("a").is_some());
        assert!(t.get_mut("c").is_some());
        t.insert("d", 4, 1, now());
        assert!(t.get_mut("b").is_none());
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn the_byte_bound_evicts_until_a_value_fits_and_refuses_what_never_can() {
        let mut t = Table::new(100, 100);
        for i in 0..10 {
            t.insert(&format!("k{i}"), i, 10, now());
        }
        assert_eq!(t.bytes(), 100);
        assert!(t.insert("big", 99, 60, now()));
        assert!(t.bytes() <= 100);
        assert!(t.get_mut("big").is_some());
        assert!(!t.insert("huge", 0, 101, now()));
        assert!(t.get_mut("huge").is_none());
    }

    #[test]
    fn a_table_of_no_entries_stores_nothing() {
        let mut t = Table::new(0, 100);
        assert!(!t.insert("a", 1, 1, now()));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn the_index_stays_consistent_through_random_operations() {
        let mut t = Table::new(16, 200);
        let mut model = std::collections::HashMap::new();
        fastrand::seed(7);
        for step in 0..20_000u32 {
            let key = format!("k{}", fastrand::u8(..40));
            match fastrand::u8(..3) {
                0 => {
                    let weight = fastrand::usize(1..30);
                    t.insert(&key, step, weight, now());
                    model.insert(key.clone(), step);
                }
                1 => {
                    t.remove(&key);
                    model.remove(&key);
                }
                _ => {
                    if let Some(slot) = t.get_mut(&key) {
                        // Whatever the table still holds is what was stored last.
                        assert_eq!(model.get(&key), Some(&slot.value));
                    }
                }
            }
            assert!(t.len() <= 16 && t.bytes() <= 200);
            assert_eq!(t.bytes(), t.slots.iter().map(|s| s.weight).sum::<usize>());
            for (i, slot) in t.slots.iter().enumerate() {
                assert_eq!(t.index.get(&slot.key), Some(&i));
            }
            assert_eq!(t.index.len(), t.slots.len());
        }
    }
}
