//! What the disk tier holds: for each key, the records of its variants, bounded by the
//! bytes of their files.
//!
//! The index is in memory (about 100 bytes and the URL twice per record) and is rebuilt
//! from the records' heads when the tier starts. Its eviction is the memory tier's
//! (S3-FIFO, [`quick_cache`]): a record asked for once leaves before one asked for
//! again. Only the writer thread changes it, so that its changes and the files' stay in
//! the order the store made them; requests only read it.

use std::hash::Hash;
use std::sync::Arc;

use quick_cache::sync::Cache as Map;
use quick_cache::{Equivalent, Lifecycle, Weighter};

use crate::cache::key::{ByDigest, Key, Source};

/// One record on disk.
#[derive(Clone, Debug)]
pub(crate) struct Ref {
    /// Its file's name (as 16 hexadecimal digits) and its entry's id.
    pub(crate) id: u64,
    /// Its file's length.
    pub(crate) size: u64,
    /// The URL it was fetched for, for a purge.
    pub(crate) source: Source,
}

/// The records of one key's variants.
pub(crate) type Refs = Arc<[Ref]>;

#[derive(Clone, Copy, Debug)]
struct ByFileBytes;

impl Weighter<Key, Refs> for ByFileBytes {
    fn weight(&self, _: &Key, refs: &Refs) -> u64 {
        refs.iter().map(|r| r.size).sum::<u64>().max(1)
    }
}

/// Collects the ids of the records the map evicts, for the writer to remove their files
/// once the map's lock is released.
#[derive(Clone, Copy, Debug)]
struct CollectEvicted;

impl Lifecycle<Key, Refs> for CollectEvicted {
    type RequestState = Vec<u64>;

    fn on_evict(&self, evicted: &mut Vec<u64>, _: Key, refs: Refs) {
        evicted.extend(refs.iter().map(|r| r.id));
    }
}

/// The records on disk, by key, within the tier's bound.
pub(crate) struct Index {
    map: Map<Key, Refs, ByFileBytes, ByDigest, CollectEvicted>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("bytes", &self.map.weight())
            .field("keys", &self.map.len())
            .finish()
    }
}

impl Index {
    /// An index of at most `max_bytes` of files, each of at most `max_object` bytes (and
    /// a head).
    pub(crate) fn new(max_bytes: u64, max_object: u64) -> Self {
        let options = crate::cache::sizing::options(max_bytes, max_object);
        Self {
            map: Map::with_options(options, ByFileBytes, ByDigest, CollectEvicted),
        }
    }

    /// The records of `key`'s variants.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Refs>
    where
        Q: Hash + Equivalent<Key> + ?Sized,
    {
        self.map.get(key)
    }

    /// Sets the records of `key`; returns the ids of the records it evicted to stay
    /// within its bound (possibly these, if they are larger than it allows).
    pub(crate) fn set(&self, key: Key, refs: Vec<Ref>) -> Vec<u64> {
        let mut evicted = Vec::new();
        if refs.is_empty() {
            self.map.remove(&key);
        } else {
            self.map
                .insert_with_lifecycle(key, refs.into(), &mut evicted);
        }
        evicted
    }

    /// Removes `key`'s records and returns them.
    pub(crate) fn remove(&self, key: &Key) -> Option<Refs> {
        self.map.remove(key).map(|(_, refs)| refs)
    }

    /// Removes every key with a record `doomed` names; returns the removed records' ids.
    pub(crate) fn remove_where(&self, doomed: impl Fn(&Ref) -> bool) -> Vec<u64> {
        let removed = std::sync::Mutex::new(Vec::new());
        self.map.retain(|_, refs| {
            let keep = !refs.iter().any(&doomed);
            if !keep {
                removed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(refs.iter().map(|r| r.id));
            }
            keep
        });
        removed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The ids of the records of every key with a record `doomed` names (what
    /// [`remove_where`](Self::remove_where) would remove now).
    pub(crate) fn ids_where(&self, doomed: impl Fn(&Ref) -> bool) -> Vec<u64> {
        self.map
            .iter()
            .filter(|(_, refs)| refs.iter().any(&doomed))
            .flat_map(|(_, refs)| refs.iter().map(|r| r.id).collect::<Vec<_>>())
            .collect()
    }

    /// Bytes of files indexed.
    pub(crate) fn bytes(&self) -> u64 {
        self.map.weight()
    }
}
