//! The open-file cache: what a lookup beneath the root found under each name, kept per
//! worker thread so that a hit takes no lock and touches no other core's memory.
//!
//! [`OpenFileCache`] is the public description of it (sizes and the revalidation window);
//! the cache itself lives in thread-local storage, one per [`ServeStatic`] and thread,
//! created on the thread's first request. On scb's runtime that is one cache per worker;
//! inside axum on a multi-threaded runtime, one per runtime thread that serves files.
//!
//! [`ServeStatic`]: crate::ServeStatic

pub(crate) mod table;

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The settings of [`ServeStatic`](crate::ServeStatic)'s open-file cache: how many names
/// it remembers, how many bytes of small files it holds, and how long an entry is
/// trusted before one `stat` checks it again.
///
/// Each worker thread keeps its own cache within these bounds (so the memory it may take
/// is the bounds times the worker threads). An entry holds what the lookup of one name
/// found: for a file, the open descriptor (files over 128 KiB, sent with `sendfile`) or
/// its bytes (files up to 128 KiB, read once and shared by every response), its
/// validators and header values already rendered, and its precompressed sidecars (or
/// that there are none); for a directory or a missing name, just that. Names that found
/// nothing are kept apart, in a table of their own, so that a scan of random paths cannot
/// push the site's files out.
///
/// A file changed on disk may be served in its old version until its entry's window
/// ends, whole (the bytes of a small file are a copy; a large file rewritten in place
/// mid-window ends its response early and the connection is closed, never mixed); after
/// the window the next request sees the new version, and a deleted file is no longer
/// served.
///
/// ```
/// use std::time::Duration;
/// use scb_static::{OpenFileCache, ServeStatic};
///
/// # fn main() -> Result<(), scb_static::BuildError> {
/// let files = ServeStatic::builder(std::env::temp_dir())
///     .cache(
///         OpenFileCache::new()
///             .entries(50_000)
///             .max_bytes(128 << 20)
///             .revalidate(Duration::from_millis(500)),
///     )
///     .build()?;
/// # let _ = files;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFileCache {
    pub(crate) entries: usize,
    pub(crate) max_bytes: usize,
    pub(crate) negative_entries: usize,
    pub(crate) revalidate: Duration,
}

impl Default for OpenFileCache {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenFileCache {
    /// The default settings (see each setter).
    pub const fn new() -> Self {
        Self {
            entries: 10_000,
            max_bytes: 32 << 20,
            negative_entries: 1_000,
            revalidate: Duration::from_secs(1),
        }
    }

    /// How many names that found something (a file, a directory) each worker remembers.
    /// Defaults to 10,000: nginx's users set `open_file_cache max=` in that range, and it
    /// holds a typical site whole.
    pub fn entries(mut self, entries: usize) -> Self {
        self.entries = entries;
        self
    }

    /// How many bytes the entries of each worker may take: the bytes of the small files
    /// they hold plus an estimate of each entry's own size. Defaults to 32 MiB.
    pub fn max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// How many names that found nothing (404s) each worker remembers, apart from
    /// [`entries`](Self::entries). Defaults to 1,000.
    pub fn negative_entries(mut self, entries: usize) -> Self {
        self.negative_entries = entries;
        self
    }

    /// How long an entry is served without a look at the file system; after it, the next
    /// request for the name makes one `stat` of the name (and of each sidecar name), and
    /// looks the name up again only if something changed. Zero checks on every request.
    /// Defaults to 1 second (nginx's `open_file_cache_valid` is 60 s by default).
    pub fn revalidate(mut self, window: Duration) -> Self {
        self.revalidate = window;
        self
    }
}

/// Identifies one service's caches across threads, and tells the threads when the
/// service is gone so that they can drop its cache (and close its descriptors).
#[derive(Debug)]
pub(crate) struct Owner {
    id: u64,
    alive: Arc<()>,
}

impl Owner {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
        }
    }
}

/// One service's cache on this thread.
struct Held {
    id: u64,
    alive: Weak<()>,
    cache: Box<dyn Any>,
}

thread_local! {
    static CACHES: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's cache of `owner`, made with `make` on first use. `None` when
/// the thread is shutting down and its storage is gone, or when called from within `f`.
///
/// The caches of services that were dropped are dropped here too, when a new one is
/// made: a thread that keeps serving sheds them at the next new service; one that stops
/// serving sheds them when it exits.
pub(crate) fn with_thread_cache<V: 'static, R>(
    owner: &Owner,
    make: impl FnOnce() -> V,
    f: impl FnOnce(&mut V) -> R,
) -> Option<R> {
    CACHES
        .try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            let i = match caches.iter().position(|held| held.id == owner.id) {
                Some(i) => i,
                None => {
                    caches.retain(|held| held.alive.strong_count() > 0);
                    caches.push(Held {
                        id: owner.id,
                        alive: Arc::downgrade(&owner.alive),
                        cache: Box::new(make()),
                    });
                    caches.len() - 1
                }
            };
            caches[i].cache.downcast_mut::<V>().map(f)
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_owner_has_its_own_cache_per_thread() {
        let a = Owner::new();
        let b = Owner::new();
        with_thread_cache(&a, || 0u32, |n| *n += 1);
        with_thread_cache(&a, || 0u32, |n| *n += 1);
        with_thread_cache(&b, || 10u32, |n| *n += 1);
        assert_eq!(with_thread_cache(&a, || 0u32, |n| *n), Some(2));
        assert_eq!(with_thread_cache(&b, || 0u32, |n| *n), Some(11));
        let other = std::thread::spawn(move || with_thread_cache(&a, || 100u32, |n| *n))
            .join()
            .unwrap();
        assert_eq!(other, Some(100));
    }

    #[test]
    fn the_cache_of_a_dropped_owner_is_dropped_when_another_is_made() {
        let token = Arc::new(());
        let a = Owner::new();
        with_thread_cache(&a, || Arc::clone(&token), |_| ());
        assert_eq!(Arc::strong_count(&token), 2);
        drop(a);
        let b = Owner::new();
        with_thread_cache(&b, || 0u8, |_| ());
        assert_eq!(Arc::strong_count(&token), 1);
    }

    #[test]
    fn a_nested_call_gets_none_instead_of_a_panic() {
        let a = Owner::new();
        let inner = with_thread_cache(&a, || 0u8, |_| with_thread_cache(&a, || 0u8, |_| ()));
        assert_eq!(inner, Some(None));
    }
}
