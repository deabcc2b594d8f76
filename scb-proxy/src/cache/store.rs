//! The memory tier: stored responses by key, several variants per key (`Vary`), bounded
//! in bytes, the least recently used evicted first.
//!
//! One store serves every worker (a `Mutex` around a map), so an object is fetched once
//! per server, not once per worker. The lock is held for map operations only, never
//! across I/O: a hit clones an `Arc` to its entry and lets go.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::metrics::CacheMetrics;
use super::policy::Policy;
use bytes::Bytes;
use http::response::Parts;

/// What a response is stored under: the scheme, the host and the path with its query
/// (the method is always GET: HEAD is answered from a stored GET).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// `https` rather than `http`: the two are different URIs, and may be answered
    /// differently (a redirect to https on one, the page on the other).
    pub(crate) secure: bool,
    pub(crate) host: Box<str>,
    pub(crate) target: Box<str>,
}

/// One stored response: its policy (freshness, `Vary`, validators), its head and its
/// whole body.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) policy: Policy,
    pub(crate) head: Parts,
    pub(crate) body: Bytes,
    /// When it was last used, on the store's clock.
    used: AtomicU64,
}

impl Entry {
    pub(crate) fn new(policy: Policy, head: Parts, body: Bytes) -> Self {
        Self {
            policy,
            head,
            body,
            used: AtomicU64::new(0),
        }
    }

    /// Bytes it counts for against the bound: the body and an estimate of the head.
    fn size(&self) -> u64 {
        let head: usize = self
            .head
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 32)
            .sum();
        (self.body.len() + head + 512) as u64
    }
}

/// The stored responses, bounded by `max_bytes`.
#[derive(Debug)]
pub(crate) struct Store {
    max_bytes: u64,
    /// Bumped by every purge: a fill that began before one does not store (what it
    /// read may be what the purge was for).
    generation: AtomicU64,
    /// The `route` label of its metrics, registered on first use (so that a layer
    /// relabelled while being built leaves no series behind).
    route: metrics::SharedString,
    metrics: std::sync::OnceLock<CacheMetrics>,
    inner: Mutex<Inner>,
    clock: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Key, Vec<Arc<Entry>>>,
    bytes: u64,
}

/// How many variants one key keeps (a `Vary` on a header with many values must not
/// crowd out everything else): the oldest goes first.
const MAX_VARIANTS: usize = 8;

impl Store {
    pub(crate) fn new(max_bytes: u64, route: metrics::SharedString) -> Self {
        Self {
            max_bytes,
            generation: AtomicU64::new(0),
            route,
            metrics: std::sync::OnceLock::new(),
            inner: Mutex::default(),
            clock: AtomicU64::new(0),
        }
    }

    /// The route's cache metrics.
    pub(crate) fn metrics(&self) -> &CacheMetrics {
        self.metrics
            .get_or_init(|| CacheMetrics::new(self.route.clone()))
    }

    /// The bound it was built with.
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent map: every change is one
        // insert or remove.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The variants stored under `key`, most recent first.
    pub(crate) fn variants(&self, key: &Key) -> Vec<Arc<Entry>> {
        self.lock().entries.get(key).cloned().unwrap_or_default()
    }

    /// Marks `entry` used now, for eviction.
    pub(crate) fn touch(&self, entry: &Entry) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        entry.used.store(now, Ordering::Relaxed);
    }

    /// Stores `entry` under `key`, replacing `replaces` (the variant it revalidated or
    /// refreshed) if given, and evicts the least recently used until the bound holds.
    /// An entry larger than the whole bound is not stored.
    /// With `generation`, nothing is stored if a purge came since.
    fn insert_checked(
        &self,
        generation: Option<u64>,
        key: Key,
        entry: Arc<Entry>,
        replaces: Option<&Arc<Entry>>,
    ) {
        let size = entry.size();
        if size > self.max_bytes {
            return;
        }
        self.touch(&entry);
        let mut inner = self.lock();
        // Under the lock a purge takes: no purge falls between the check and the insert.
        if generation.is_some_and(|g| g != self.generation()) {
            return;
        }
        let variants = inner.entries.entry(key).or_default();
        let mut freed = 0;
        if let Some(old) = replaces
            && let Some(at) = variants.iter().position(|v| Arc::ptr_eq(v, old))
        {
            freed += variants.remove(at).size();
        }
        variants.insert(0, entry);
        if variants.len() > MAX_VARIANTS
            && let Some(oldest) = variants.pop()
        {
            freed += oldest.size();
        }
        inner.bytes = inner.bytes + size - freed;
        while inner.bytes > self.max_bytes {
            let Some((key, at)) = inner
                .entries
                .iter()
                .flat_map(|(key, variants)| {
                    variants
                        .iter()
                        .enumerate()
                        .map(move |(at, v)| (v.used.load(Ordering::Relaxed), key, at))
                })
                .min_by_key(|(used, _, _)| *used)
                .map(|(_, key, at)| (key.clone(), at))
            else {
                break;
            };
            self.remove_at(&mut inner, &key, at);
            self.metrics().evictions.increment(1);
        }
        self.metrics().bytes.set(inner.bytes as f64);
    }

    /// The purge generation now, for a fill to compare at its end.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Stores `entry` under `key` (see `insert_checked`), unless a purge came since
    /// `generation`.
    pub(crate) fn insert_from(
        &self,
        generation: u64,
        key: Key,
        entry: Arc<Entry>,
        replaces: Option<&Arc<Entry>>,
    ) {
        self.insert_checked(Some(generation), key, entry, replaces);
    }

    /// Drops the responses of `host` (any host when `None`) whose path and query are
    /// `target` exactly or, with `prefix`, begin with it; how many were dropped. Fills in
    /// progress do not store. Scans the store under its lock: an operator's action, not
    /// a request's.
    pub(crate) fn purge(&self, host: Option<&str>, target: &str, prefix: bool) -> usize {
        let mut inner = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        let doomed: Vec<Key> = inner
            .entries
            .keys()
            .filter(|key| host.is_none_or(|h| key.host.eq_ignore_ascii_case(h)))
            .filter(|key| {
                if prefix {
                    key.target.starts_with(target)
                } else {
                    &*key.target == target
                }
            })
            .cloned()
            .collect();
        let mut dropped = 0;
        for key in doomed {
            if let Some(variants) = inner.entries.remove(&key) {
                dropped += variants.len();
                inner.bytes -= variants.iter().map(|v| v.size()).sum::<u64>();
            }
        }
        self.metrics().bytes.set(inner.bytes as f64);
        dropped
    }

    /// Drops every variant stored under `key` (after an unsafe method, RFC 9111 4.4).
    pub(crate) fn invalidate(&self, key: &Key) {
        let mut inner = self.lock();
        if let Some(variants) = inner.entries.remove(key) {
            let freed: u64 = variants.iter().map(|v| v.size()).sum();
            inner.bytes -= freed;
            self.metrics().bytes.set(inner.bytes as f64);
        }
    }

    /// Drops `entry` from the variants of `key`, if it is still there.
    pub(crate) fn remove(&self, key: &Key, entry: &Arc<Entry>) {
        let mut inner = self.lock();
        let at = inner
            .entries
            .get(key)
            .and_then(|variants| variants.iter().position(|v| Arc::ptr_eq(v, entry)));
        if let Some(at) = at {
            self.remove_at(&mut inner, key, at);
        }
    }

    fn remove_at(&self, inner: &mut Inner, key: &Key, at: usize) {
        if let Some(variants) = inner.entries.get_mut(key) {
            let gone = variants.remove(at);
            inner.bytes -= gone.size();
            self.metrics().bytes.set(inner.bytes as f64);
            if variants.is_empty() {
                inner.entries.remove(key);
            }
        }
    }

    /// Bytes stored now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}
