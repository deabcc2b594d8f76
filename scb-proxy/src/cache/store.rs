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

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use http::response::Parts;
use quick_cache::sync::Cache as Map;
use quick_cache::{Equivalent, Lifecycle, Weighter};

use super::disk::{Disk, DiskShape, Job, Loaded, Written};
use super::key::{ByDigest, Key, KeyRef, Keying, Source, Url};
use super::metrics::CacheMetrics;
use super::policy::{Policy, copy_head};
use super::stored::StoredBody;

/// What a store is built for: its bounds and how its keys are made. A reload keeps the
/// store only when these are unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) max_bytes: u64,
    /// The largest object; shards are sized so that one fits.
    pub(crate) max_object: u64,
    pub(crate) keying: Keying,
    /// Where its disk tier is, if it has one.
    pub(crate) disk: Option<DiskShape>,
}

/// One stored response: its policy (freshness, `Vary`, validators), its head, its whole
/// body and the URL it was fetched for.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
    pub(crate) body: StoredBody,
    pub(crate) source: Source,
    /// Unique in the store; its record's name on disk.
    pub(crate) id: u64,
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
        Self::with_id(fastrand::u64(..), policy, head, body, source)
    }

    /// An entry with the id it had (read back from disk, or given a body there).
    fn with_id(id: u64, policy: Policy, head: Parts, body: StoredBody, source: Source) -> Self {
        let fields: usize = head
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + FIELD_OVERHEAD)
            .sum();
        // A body in a file on disk is the page cache's, bounded by the disk tier.
        let body_len = usize::try_from(body.held()).unwrap_or(usize::MAX);
        let urls = 2 * (source.host.len() + source.target.len());
        let size = (body_len + fields + urls + ENTRY_OVERHEAD) as u64;
        Self {
            policy,
            head,
            body,
            source,
            id,
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
    /// Hashed by the keys' digests (SipHash with a random key, taken once per key): the
    /// keys are the clients' URLs, chosen to collide if the hash let them.
    map: Map<Key, Arc<Variants>, ByBytes, ByDigest, CountEvictions>,
    /// Held by every write, never by a hit.
    writer: Mutex<()>,
    /// Sealed memory files and disk records its bodies hold open (`stored.rs`).
    sealed: Arc<AtomicUsize>,
    disk: Option<Disk>,
    /// Bumped by every removal (an invalidation, a purge, a variant dropped), under the
    /// writer lock: a read of the disk tier that overlapped one puts nothing back.
    epoch: AtomicU64,
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
        let options = super::sizing::options(max_bytes, max_object);
        let sealed = Arc::default();
        let disk = shape
            .disk
            .clone()
            .map(|disk| Disk::new(disk, max_object, Arc::clone(&sealed), labels.route.clone()));
        Self {
            shape,
            generation: AtomicU64::new(0),
            map: Map::with_options(
                options,
                ByBytes,
                ByDigest,
                CountEvictions(Arc::clone(&labels)),
            ),
            labels,
            writer: Mutex::new(()),
            sealed,
            disk,
            epoch: AtomicU64::new(0),
        }
    }

    /// Starts its disk tier, if it has one (once; the layer does it when it is applied).
    pub(crate) fn start(self: &Arc<Self>) {
        let Some(disk) = &self.disk else {
            return;
        };
        let store = Arc::downgrade(self);
        disk.start(
            self.route(),
            Box::new(move |key, id, body| {
                if let Some(store) = store.upgrade() {
                    store.rebody(key, id, body);
                }
            }),
        );
    }

    /// Its disk tier.
    pub(crate) fn disk(&self) -> Option<&Disk> {
        self.disk.as_ref()
    }

    /// The variants of `key` read back from the disk tier into memory, if it holds any
    /// (and nothing removed them meanwhile).
    pub(crate) async fn from_disk(self: &Arc<Self>, key: &Key) -> Option<Arc<Variants>> {
        let disk = self.disk.as_ref()?;
        let epoch = self.epoch.load(Ordering::Acquire);
        let refs = disk.refs(key, epoch)?;
        let store = Arc::clone(self);
        let read_key = key.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let disk = store.disk.as_ref().expect("checked above");
            disk.load(&read_key, &refs, epoch)
        })
        .await
        .ok()?;
        self.restore(key, epoch, loaded)
    }

    /// Puts `loaded` into memory under `key`, unless a removal came since `epoch`; if a
    /// fill stored the key meanwhile, its variants are kept instead.
    fn restore(&self, key: &Key, epoch: u64, loaded: Vec<Loaded>) -> Option<Arc<Variants>> {
        if loaded.is_empty() {
            return None;
        }
        let _writing = self.write();
        if self.epoch.load(Ordering::Acquire) != epoch {
            return None;
        }
        if let Some(stored) = self.map.peek(key) {
            return Some(stored);
        }
        let entries = loaded
            .into_iter()
            .map(|l| {
                Arc::new(Entry::with_id(
                    l.id,
                    l.meta.policy,
                    l.meta.head,
                    l.body,
                    l.meta.source,
                ))
            })
            .collect();
        let variants = Arc::new(Variants::new(entries));
        self.map.insert(key.clone(), Arc::clone(&variants));
        self.publish_bytes();
        Some(variants)
    }

    /// Gives entry `id` of `key` its body on disk, if it is still stored.
    fn rebody(&self, key: &Key, id: u64, body: StoredBody) {
        let _writing = self.write();
        let Some(stored) = self.map.peek(key) else {
            return;
        };
        let Some(at) = stored.entries.iter().position(|e| e.id == id) else {
            return;
        };
        let old = &stored.entries[at];
        let moved = Entry::with_id(
            id,
            old.policy.clone(),
            copy_head(&old.head),
            body,
            old.source.clone(),
        );
        let mut entries = stored.entries.clone();
        entries[at] = Arc::new(moved);
        self.map
            .replace(key.clone(), Arc::new(Variants::new(entries)), true)
            .ok();
        self.publish_bytes();
    }

    /// Bumps the removal epoch (under the writer lock) and returns the new one.
    fn next_epoch(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::AcqRel) + 1
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

    /// The URL `url` a response stored under `key` (made by [`Store::key`]) is fetched
    /// for, sharing the key's strings where the key is the URL.
    pub(crate) fn source(&self, url: Url<'_>, key: &Key) -> Source {
        Source::keyed(&self.shape.keying, url, key)
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
                .min(super::sizing::MAX_VARIANTS),
        );
        entries.push(entry);
        if let Some(stored) = stored {
            entries.extend(
                stored
                    .entries
                    .iter()
                    .filter(|v| replaces.is_none_or(|old| !Arc::ptr_eq(v, old)))
                    .take(super::sizing::MAX_VARIANTS - 1)
                    .cloned(),
            );
        }
        if let Some(disk) = &self.disk {
            let keep = entries.iter().skip(1).map(|e| e.id).collect();
            let entry = &entries[0];
            disk.write(Written {
                key: key.clone(),
                id: entry.id,
                source: entry.source.clone(),
                policy: entry.policy.clone(),
                head: copy_head(&entry.head),
                body: entry.body.clone(),
                keep,
                queued: 0,
            });
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
        let dropped = Mutex::new(Vec::new());
        self.map.retain(|_, variants| {
            let doomed = variants
                .entries
                .iter()
                .any(|e| e.source.matches(host, target, prefix));
            if doomed {
                dropped
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(variants.entries.iter().map(|e| e.id));
            }
            !doomed
        });
        self.publish_bytes();
        let mut dropped = dropped.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(disk) = &self.disk {
            // What is on disk only counts too.
            dropped.extend(disk.purged_ids(host, target, prefix));
            dropped.sort_unstable();
            dropped.dedup();
            disk.send(Job::Purge {
                host: host.map(Into::into),
                target: target.into(),
                prefix,
                epoch: self.next_epoch(),
            });
        }
        dropped.len()
    }

    /// Drops every variant stored under `key` (after an unsafe method, RFC 9111 4.4).
    pub(crate) fn invalidate(&self, key: &Key) {
        let _writing = self.write();
        if self.map.remove(key).is_some() {
            self.publish_bytes();
        }
        if let Some(disk) = &self.disk {
            disk.send(Job::Forget {
                key: key.clone(),
                epoch: self.next_epoch(),
            });
        }
    }

    /// Drops `entry` from the variants of `key`, if it is still there.
    pub(crate) fn remove(&self, key: &Key, entry: &Arc<Entry>) {
        let _writing = self.write();
        if let Some(disk) = &self.disk {
            disk.send(Job::Drop {
                key: key.clone(),
                id: entry.id,
                epoch: self.next_epoch(),
            });
        }
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
