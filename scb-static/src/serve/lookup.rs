//! Where a request's [`Entry`]s come from: the worker's open-file cache, or the file
//! system directly.
//!
//! On the worker, with the cache on, a name is looked up in the thread's [`FileCache`]; a
//! hit costs a hash lookup (and, once per window, one `stat` per name the entry probed);
//! a miss is resolved inline from the kernel's caches and kept. When anything would wait
//! for the disk, the request is decided again on the blocking pool by a [`Resolver`]
//! that records what it resolved, and those entries join the worker's cache when the
//! response comes back to the worker: the blocking pool's threads never hold a cache.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::config::Config;
use super::entry::{Entry, WouldBlock};
use crate::OpenFileCache;
use crate::cache::table::Table;
use crate::encoding::Candidates;
use crate::sys::Mode;

/// One service's open-file cache on one thread.
#[derive(Debug)]
pub(crate) struct FileCache {
    /// Names that found a file or a directory.
    files: Table<Rc<Entry>>,
    /// Names that found nothing, bounded on their own.
    misses: Table<Rc<Entry>>,
    revalidate: Duration,
}

/// What a negative entry counts for: it holds no file, and its table is bounded by count.
const NEGATIVE_WEIGHT: usize = 1;

impl FileCache {
    pub(crate) fn new(settings: &OpenFileCache) -> Self {
        Self {
            files: Table::new(settings.entries, settings.max_bytes),
            misses: Table::new(settings.negative_entries, usize::MAX),
            revalidate: settings.revalidate,
        }
    }

    /// The entry of `rel`: cached and still within its window, or checked with one `stat`
    /// per probed name when the window has passed, or resolved now (inline, from the
    /// kernel's caches) and kept.
    fn get(&mut self, config: &Config, rel: &str, now: Instant) -> Result<Rc<Entry>, WouldBlock> {
        for table in [&mut self.files, &mut self.misses] {
            let Some(slot) = table.get_mut(rel) else {
                continue;
            };
            if now.saturating_duration_since(slot.validated) < self.revalidate {
                return Ok(Rc::clone(&slot.value));
            }
            if slot.value.unchanged(&config.root, rel) {
                slot.validated = now;
                return Ok(Rc::clone(&slot.value));
            }
            table.remove(rel);
            break;
        }
        let entry = Rc::new(Entry::resolve(
            config,
            rel,
            &config.precompressed,
            Mode::Cached,
            true,
        )?);
        self.insert(rel, Rc::clone(&entry), now);
        Ok(entry)
    }

    /// Keeps `entry` as the entry of `rel`, validated at `now`, in the table its kind
    /// belongs to (and out of the other).
    pub(crate) fn insert(&mut self, rel: &str, entry: Rc<Entry>, now: Instant) {
        if !entry.is_cacheable() {
            return;
        }
        if entry.is_negative() {
            self.files.remove(rel);
            self.misses.insert(rel, entry, NEGATIVE_WEIGHT, now);
        } else {
            self.misses.remove(rel);
            let weight = entry.weight(rel);
            self.files.insert(rel, entry, weight, now);
        }
    }

    /// How many names each table holds: (found something, found nothing).
    #[cfg(test)]
    pub(crate) fn lens(&self) -> (usize, usize) {
        (self.files.len(), self.misses.len())
    }
}

/// Gives a request the entries of the names it looks up.
#[derive(Debug)]
pub(crate) enum Resolver<'c> {
    /// On the worker, through the thread's cache.
    Cached {
        cache: &'c mut FileCache,
        /// Read once per request, on first use.
        now: Option<Instant>,
    },
    /// From the file system each time: the cache is off, or this is the blocking pool.
    Direct {
        mode: Mode,
        /// With `Some`, every entry resolved is recorded (with all of its sidecars) to be
        /// added to the worker's cache afterwards.
        record: Option<Vec<(String, Rc<Entry>)>>,
    },
}

impl<'c> Resolver<'c> {
    /// Through `cache`, on the worker.
    pub(crate) fn cached(cache: &'c mut FileCache) -> Self {
        Self::Cached { cache, now: None }
    }

    /// From the file system in `mode`; with `record`, keeping what was resolved for
    /// [`into_recorded`](Self::into_recorded).
    pub(crate) fn direct(mode: Mode, record: bool) -> Self {
        Self::Direct {
            mode,
            record: record.then(Vec::new),
        }
    }

    /// Whether lookups may wait for the disk.
    pub(crate) fn mode(&self) -> Mode {
        match self {
            Self::Cached { .. } => Mode::Cached,
            Self::Direct { mode, .. } => *mode,
        }
    }

    /// The entry of `rel`, for a request whose `Accept-Encoding` allows `candidates`.
    ///
    /// # Errors
    ///
    /// [`WouldBlock`] on the worker when a lookup or read would wait for the disk.
    pub(crate) fn entry(
        &mut self,
        config: &Config,
        rel: &str,
        candidates: &Candidates,
    ) -> Result<Rc<Entry>, WouldBlock> {
        match self {
            Self::Cached { cache, now } => {
                let now = *now.get_or_insert_with(Instant::now);
                cache.get(config, rel, now)
            }
            Self::Direct { mode, record } => {
                // Uncached, only the sidecars this client could take are opened; an SPA
                // fallback needs to know of every sidecar, and so does an entry that will
                // be cached for every client.
                let codings = if record.is_some() || config.fallback.is_some() {
                    &config.precompressed[..]
                } else {
                    candidates.codings()
                };
                let track = record.is_some();
                let entry = Rc::new(Entry::resolve(config, rel, codings, *mode, track)?);
                if let Some(record) = record {
                    record.push((rel.to_owned(), Rc::clone(&entry)));
                }
                Ok(entry)
            }
        }
    }

    /// The entries recorded by a [`direct`](Self::direct) resolver with `record`, once
    /// the response no longer borrows them.
    pub(crate) fn into_recorded(self) -> Vec<(String, Entry)> {
        match self {
            Self::Direct {
                record: Some(record),
                ..
            } => record
                .into_iter()
                .filter_map(|(rel, entry)| Some((rel, Rc::into_inner(entry)?)))
                .collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
