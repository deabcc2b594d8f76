//! Collapsed forwarding: while one request fetches or revalidates a key, the others for
//! that key wait for it and then answer from what it stored, so a popular object that
//! expires costs one upstream request, not one per client.
//!
//! A waiter is bounded (the layer's `collapse_timeout`) and then goes upstream itself; so
//! does every waiter when the fill ends without storing anything (the answer could not be
//! stored, or its body failed). A key whose answer could not be stored is marked to pass
//! for a while ([`PASS_FOR`]): its requests go upstream at once instead of queueing
//! behind each other for an answer that will not be shared (what Varnish calls
//! hit-for-miss).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

use super::key::{ByDigest, Key};

/// How long a key whose answer could not be stored goes upstream without collapsing.
pub(crate) const PASS_FOR: Duration = Duration::from_secs(10);

/// Past this many slots, expired pass marks are swept before a new one is added, and a
/// new one is not added if none had expired: a scan of uncacheable URLs cannot grow the
/// map without bound.
const MAX_SLOTS: usize = 16 * 1024;

/// The fills in progress and the keys that pass, shared by every worker.
#[derive(Debug, Default)]
pub(crate) struct Fills {
    slots: Mutex<HashMap<Key, Slot, ByDigest>>,
    next_id: AtomicU64,
}

#[derive(Debug)]
enum Slot {
    /// A request is fetching the key: wait on this for it to end.
    Filling { id: u64, done: Arc<Notify> },
    /// The key's answer could not be stored; until then, do not wait for it.
    Pass { until: Instant },
}

/// What a request that found nothing usable does.
#[derive(Debug)]
pub(crate) enum Join {
    /// Fetch it; the others wait until the guard is dropped.
    Lead(FillGuard),
    /// Wait for another request's fill ([`Follower::wait`]), then look again.
    Follow(Follower),
    /// Go upstream without collapsing: the key does not cache.
    Pass,
}

/// Held by the request filling a key; dropping it ends the fill and wakes the waiters.
#[derive(Debug)]
pub(crate) struct FillGuard {
    fills: Arc<Fills>,
    key: Key,
    id: u64,
    /// Notified when the guard is dropped, after the slot is gone. A `Notify` rather
    /// than a `watch` channel: a miss makes one of these, and a channel's state (eight
    /// `Notify`s to wake many waiters) cost about 800 instructions to make and drop.
    done: Arc<Notify>,
}

/// A request waiting for another's fill: made under the fills' lock while the fill is
/// in progress, so the leader's notification, sent after it removes the slot under the
/// same lock, always comes after it and reaches it (a `Notified` hears every
/// `notify_waiters` from the moment it is made, polled or not).
#[derive(Debug)]
pub(crate) struct Follower(OwnedNotified);

impl Follower {
    /// Waits until the fill ends or `timeout` passes, whichever is first.
    pub(crate) async fn wait(self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.0).await;
    }
}

impl Fills {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Slot, ByDigest>> {
        // Every change is one insert or remove: a panic leaves a consistent map.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leads the fill of `key`, follows the one in progress, or passes.
    pub(crate) fn join(self: &Arc<Self>, key: &Key) -> Join {
        let mut slots = self.lock();
        // One hash of the key for the look and the insert.
        let slot = match slots.entry(key.clone()) {
            Entry::Occupied(slot) => match slot.get() {
                Slot::Filling { done, .. } => {
                    return Join::Follow(Follower(Arc::clone(done).notified_owned()));
                }
                Slot::Pass { until } if *until > Instant::now() => return Join::Pass,
                Slot::Pass { .. } => slot.into_mut(),
            },
            Entry::Vacant(vacant) => vacant.insert(Slot::Pass {
                until: Instant::now(),
            }),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let done = Arc::new(Notify::new());
        *slot = Slot::Filling {
            id,
            done: Arc::clone(&done),
        };
        Join::Lead(FillGuard {
            fills: Arc::clone(self),
            key: key.clone(),
            id,
            done,
        })
    }

    /// How many keys are being filled or pass now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl FillGuard {
    /// Ends the fill, marking the key to pass for [`PASS_FOR`]: its answer could not be
    /// stored, so the next requests should not wait for one another.
    pub(crate) fn pass(self) {
        let mut slots = self.fills.lock();
        if matches!(slots.get(&self.key), Some(Slot::Filling { id, .. }) if *id == self.id) {
            let now = Instant::now();
            if slots.len() > MAX_SLOTS {
                slots.retain(|_, slot| !matches!(slot, Slot::Pass { until } if *until <= now));
            }
            if slots.len() > MAX_SLOTS {
                slots.remove(&self.key);
                return;
            }
            slots.insert(
                self.key.clone(),
                Slot::Pass {
                    until: now + PASS_FOR,
                },
            );
        }
        // Dropped after the lock is released: the waiters wake to the pass mark.
        drop(slots);
    }
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        let mut slots = self.fills.lock();
        // One hash in the usual case: the slot is this fill's, and goes.
        if let Some(slot) = slots.remove(&self.key)
            && !matches!(slot, Slot::Filling { id, .. } if id == self.id)
        {
            slots.insert(self.key.clone(), slot);
        }
        drop(slots);
        self.done.notify_waiters();
    }
}
