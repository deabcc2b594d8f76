//! The memory tier: stored responses by key, several variants per key (`Vary`), bounded
//! in bytes, with an eviction policy that keeps hot objects through a scan.
//!
//! The map and its eviction are [`quick_cache`]'s: a sharded, weighted cache with the
//! S3-FIFO policy (a new object enters a small probationary queue and is promoted only if
//! it is asked for again; recently evicted keys are remembered, so one that comes back is
//! admitted hot). A crawl or a scan of a million cold URLs passes through the small queue
//! and leaves the hot set alone, where least-recently-used eviction would flush it; the
//! test `a_scan_of_cold_objects_leaves_the_hot_ones_stored` shows it. The weight of a key
//! is the bytes of all its variants.
//!
//! One store serves every worker, so an object is fetched once per server, not once per
//! worker. A hit takes a shard's read lock for the lookup and clones one `Arc`; no lock
//! is held across I/O. Writes (a fill, a refresh, an invalidation, a purge) are
//! serialized by one more lock so that a variant list is never updated from a stale
//! copy and no fill stores across a purge it overlapped.

use std::hash::{Hash, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use http::response::Parts;
use quick_cache::sync::Cache as Map;
use quick_cache::{Equivalent, Lifecycle, OptionsBuilder, Weighter};

use super::key::{Key, KeyRef, Keying, Url};
use super::metrics::CacheMetrics;
use super::policy::Policy;
use super::stored::StoredBody;

/// The URL a stored response was fetched for (host lower-cased, path and query): what a
/// purge names, whatever the key template kept of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) host: Box<str>,
    pub(crate) target: Box<str>,
}

impl Source {
    /// The URL of a request, host lower-cased.
    pub(crate) fn of(url: Url<'_>) -> Self {
        Self {
            host: url.host.to_ascii_lowercase().into(),
            target: url.target.into(),
        }
    }

    /// Whether a purge of `host` (any when `None`) and `target` (exactly, or as a
    /// `prefix`) names it.
    fn matches(&self, host: Option<&str>, target: &str, prefix: bool) -> bool {
        host.is_none_or(|h| self.host.eq_ignore_ascii_case(h))
            && if prefix {
                self.target.starts_with(target)
            } else {
                &*self.target == target
            }
    }
}

/// What a store is built for: its bounds and how its keys are made. A reload keeps the
/// store only when these are unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) max_bytes: u64,
    /// The largest object; shards are sized so that one fits.
    pub(crate) max_object: u64,
    pub(crate) keying: Keying,
}

/// One stored response: its policy (freshness, `Vary`, validators), its head, its whole
/// body and the URL it was fetched for.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
    pub(crate) body: StoredBody,
    pub(crate) source: Source,
    /// Bytes it counts for against the bound.
    size: u64,
}

/// What one stored entry costs besides its body and fields, measured (the test
/// `the_bytes_counted_are_the_bytes_held` in `tests/cache_memory.rs`): the entry, its policy, its key, its place in
/// the map and in its key's variants, and the allocator's rounding.
const ENTRY_OVERHEAD: usize = 768;

/// What one stored field costs besides its name and value: its slot in the head's map
/// (a bucket and an index) and the value's own allocation.
const FIELD_OVERHEAD: usize = 128;

impl Entry {
    pub(crate) fn new(policy: Policy, head: Parts, body: StoredBody, source: Source) -> Self {
        let fields: usize = head
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + FIELD_OVERHEAD)
            .sum();
        let body_len = usize::try_from(body.len()).unwrap_or(usize::MAX);
        let urls = 2 * (source.host.len() + source.target.len());
        let size = (body_len + fields + urls + ENTRY_OVERHEAD) as u64;
        Self {
            policy,
            head,
            body,
            source,
            size,
        }
    }

    /// Bytes it counts for against the bound: the body and an estimate of the rest.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

/// The variants stored under one key, most recent first, and their total size.
#[derive(Debug)]
pub(crate) struct Variants {
    entries: Vec<Arc<Entry>>,
    weight: u64,
}

impl Variants {
    fn new(entries: Vec<Arc<Entry>>) -> Self {
        let weight = entries.iter().map(|e| e.size()).sum();
        Self { entries, weight }
    }

    /// The variants, most recent first.
    pub(crate) fn entries(&self) -> &[Arc<Entry>] {
        &self.entries
    }
}

/// How many variants one key keeps (a `Vary` on a header with many values must not
/// crowd out everything else): the oldest goes first.
const MAX_VARIANTS: usize = 8;

/// A shard smaller than this many of the largest objects would refuse them (an object
/// heavier than a shard's share is never admitted): fewer, larger shards then.
const OBJECTS_PER_SHARD: u64 = 2;

/// The weight of a key: its variants' bytes (never zero: a zero weight is never evicted).
#[derive(Clone, Copy, Debug)]
struct ByBytes;

impl Weighter<Key, Arc<Variants>> for ByBytes {
    fn weight(&self, _: &Key, variants: &Arc<Variants>) -> u64 {
        variants.weight.max(1)
    }
}

/// Counts what the map evicts in the route's metrics.
#[derive(Clone, Debug)]
struct CountEvictions(Arc<Labels>);

impl Lifecycle<Key, Arc<Variants>> for CountEvictions {
    type RequestState = ();

    fn on_evict(&self, (): &mut (), _: Key, _: Arc<Variants>) {
        self.0.metrics().evictions.increment(1);
    }
}

/// The `route` label of a store's metrics, registered on first use (so that a layer
/// relabelled while being built leaves no series behind).
#[derive(Debug)]
struct Labels {
    route: metrics::SharedString,
    metrics: OnceLock<CacheMetrics>,
}

impl Labels {
    fn metrics(&self) -> &CacheMetrics {
        self.metrics
            .get_or_init(|| CacheMetrics::new(self.route.clone()))
    }
}

/// The stored responses, bounded by `max_bytes`.
pub(crate) struct Store {
    shape: Shape,
    /// Bumped by every purge: a fill that began before one does not store (what it
    /// read may be what the purge was for).
    generation: AtomicU64,
    labels: Arc<Labels>,
    /// SipHash with a random key ([`RandomState`]): the keys are the clients' URLs,
    /// chosen to collide if the hash let them.
    map: Map<Key, Arc<Variants>, ByBytes, RandomState, CountEvictions>,
    /// Held by every write, never by a hit.
    writer: Mutex<()>,
    /// Sealed memory files its bodies hold open (`stored.rs`).
    sealed: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shape", &self.shape)
            .field("route", &self.labels.route)
            .field("bytes", &self.map.weight())
            .field("keys", &self.map.len())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store of at most `shape.max_bytes`, its shards sized so that an object of
    /// `shape.max_object` bytes fits in one.
    pub(crate) fn new(shape: Shape, route: metrics::SharedString) -> Self {
        let Shape {
            max_bytes,
            max_object,
            ..
        } = shape;
        let labels = Arc::new(Labels {
            route,
            metrics: OnceLock::new(),
        });
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let mut shards = (cores * 4).next_power_of_two();
        while shards > 1
            && max_bytes / (shards as u64) < max_object.saturating_mul(OBJECTS_PER_SHARD)
        {
            shards /= 2;
        }
        let options = OptionsBuilder::new()
            .shards(shards)
            // For the ghost list (recently evicted keys) and the shards' minimum size:
            // an order of magnitude is enough.
            .estimated_items_capacity(
                usize::try_from(max_bytes / (16 << 10))
                    .unwrap_or(usize::MAX)
                    .clamp(64, 1 << 20),
            )
            .weight_capacity(max_bytes)
            .build()
            .expect("the options set are all valid");
        Self {
            shape,
            generation: AtomicU64::new(0),
            map: Map::with_options(
                options,
                ByBytes,
                RandomState::new(),
                CountEvictions(Arc::clone(&labels)),
            ),
            labels,
            writer: Mutex::new(()),
            sealed: Arc::default(),
        }
    }

    /// The route's cache metrics.
    pub(crate) fn metrics(&self) -> &CacheMetrics {
        self.labels.metrics()
    }

    /// The `route` label of its metrics.
    pub(crate) fn route(&self) -> metrics::SharedString {
        self.labels.route.clone()
    }

    /// What it was built for.
    pub(crate) fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Its count of sealed memory files, for a body being stored.
    pub(crate) fn sealed(&self) -> &Arc<AtomicUsize> {
        &self.sealed
    }

    /// The key of `url`, as this store makes keys.
    pub(crate) fn key<'a>(&self, url: Url<'a>) -> KeyRef<'a> {
        self.shape.keying.key(url)
    }

    fn write(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data of its own: a panic under it leaves nothing torn.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The variants stored under `key`, most recent first; counts as a use, for
    /// eviction.
    pub(crate) fn variants<Q>(&self, key: &Q) -> Option<Arc<Variants>>
    where
        Q: Hash + Equivalent<Key> + ?Sized,
    {
        self.map.get(key)
    }

    /// Stores `entry` under `key`, replacing `replaces` (the variant it revalidated or
    /// refreshed) if given; nothing is stored if a purge came since `generation`. An
    /// entry larger than the whole bound is not stored.
    pub(crate) fn insert_from(
        &self,
        generation: u64,
        key: Key,
        entry: Arc<Entry>,
        replaces: Option<&Arc<Entry>>,
    ) {
        if entry.size() > self.shape.max_bytes {
            return;
        }
        let _writing = self.write();
        // Under the lock a purge takes: no purge falls between the check and the insert.
        if generation != self.generation() {
            return;
        }
        let stored = self.map.peek(&key);
        let mut entries = Vec::with_capacity(
            stored
                .as_ref()
                .map_or(1, |s| s.entries.len() + 1)
                .min(MAX_VARIANTS),
        );
        entries.push(entry);
        if let Some(stored) = stored {
            entries.extend(
                stored
                    .entries
                    .iter()
                    .filter(|v| replaces.is_none_or(|old| !Arc::ptr_eq(v, old)))
                    .take(MAX_VARIANTS - 1)
                    .cloned(),
            );
        }
        self.map.insert(key, Arc::new(Variants::new(entries)));
        self.publish_bytes();
    }

    fn publish_bytes(&self) {
        self.metrics().bytes.set(self.map.weight() as f64);
    }

    /// The purge generation now, for a fill to compare at its end.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Drops the responses fetched for `host` (any host when `None`) whose path and query
    /// are `target` exactly or, with `prefix`, begin with it (every variant of a key one
    /// of whose variants is named); how many were dropped. Fills in progress do not
    /// store. Visits every key: an operator's action, not a request's.
    pub(crate) fn purge(&self, host: Option<&str>, target: &str, prefix: bool) -> usize {
        let _writing = self.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        let dropped = AtomicU64::new(0);
        self.map.retain(|_, variants| {
            let doomed = variants
                .entries
                .iter()
                .any(|e| e.source.matches(host, target, prefix));
            if doomed {
                dropped.fetch_add(variants.entries.len() as u64, Ordering::Relaxed);
            }
            !doomed
        });
        self.publish_bytes();
        usize::try_from(dropped.into_inner()).unwrap_or(usize::MAX)
    }

    /// Drops every variant stored under `key` (after an unsafe method, RFC 9111 4.4).
    pub(crate) fn invalidate(&self, key: &Key) {
        let _writing = self.write();
        if self.map.remove(key).is_some() {
            self.publish_bytes();
        }
    }

    /// Drops `entry` from the variants of `key`, if it is still there.
    pub(crate) fn remove(&self, key: &Key, entry: &Arc<Entry>) {
        let _writing = self.write();
        let Some(stored) = self.map.peek(key) else {
            return;
        };
        if !stored.entries.iter().any(|v| Arc::ptr_eq(v, entry)) {
            return;
        }
        let rest: Vec<_> = stored
            .entries
            .iter()
            .filter(|v| !Arc::ptr_eq(v, entry))
            .cloned()
            .collect();
        if rest.is_empty() {
            self.map.remove(key);
        } else {
            self.map
                .replace(key.clone(), Arc::new(Variants::new(rest)), true)
                .ok();
        }
        self.publish_bytes();
    }

    /// Bytes stored now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.map.weight()
    }
}
