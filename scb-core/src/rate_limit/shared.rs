//! A limit counted across a fleet: the bucket lives in a shared store
//! ([`SharedBuckets`], Redis through [`Cluster`](crate::cluster::Cluster) with the
//! `cluster` feature), and each instance keeps a small local allowance so that most
//! requests do not wait for the store.
//!
//! An instance whose allowance for a key is spent asks the store for a batch of tokens
//! (a tenth of the burst, 1 to 64) in one round trip; it spends them locally until they
//! are gone or expire (after a second: what an instance holds unused is lost, which errs
//! toward admitting fewer, never more, since tokens leave the shared bucket when taken).
//! When half a batch is left, the next batch is asked for in the background, so a key in
//! steady use never waits for the store: one call per batch.
//! A refusal is remembered until the store says a token is free again, so a client over
//! its limit costs the store nothing more meanwhile. When the store cannot be reached the
//! request is counted in the local table instead: the limit then holds per instance,
//! never refusing everything and never admitting everything.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rustc_hash::FxHashMap;

use super::local::SHARDS;

/// What a shared store answered: `granted` tokens (0 to the number asked for), and when
/// none was granted, how long until one is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    /// Tokens granted.
    pub granted: u32,
    /// With none granted, the wait until one is free.
    pub wait: Duration,
}

/// The store could not be asked (down, slow, or paused after a failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the shared rate-limit store is unavailable")]
pub struct SharedUnavailable;

/// The future of a [`SharedBuckets::take`].
pub type TakeFuture = Pin<Box<dyn Future<Output = Result<Taken, SharedUnavailable>> + Send>>;

/// A store of GCRA buckets every instance of a fleet counts in.
pub trait SharedBuckets: fmt::Debug + Send + Sync + 'static {
    /// Takes up to `want` tokens from the bucket `key` (a text every instance derives
    /// alike), whose tokens come one per `interval` and which holds at most
    /// `tolerance / interval` of them.
    fn take(&self, key: String, interval: Duration, tolerance: Duration, want: u32) -> TakeFuture;
}

/// What a local allowance decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Spend {
    /// A token of the allowance was spent.
    Admit,
    /// A token was spent, and the allowance runs low: ask for the next batch in the
    /// background.
    AdmitAndRefill,
    /// The store said no a moment ago; this long until a token is free.
    Refuse(Duration),
    /// Nothing left: ask the store.
    Ask,
}

#[derive(Clone, Copy, Debug, Default)]
struct Allowance {
    tokens: u32,
    /// Nanoseconds from the limiter's epoch after which unspent tokens are void.
    tokens_until: u64,
    /// Nanoseconds from the limiter's epoch before which the store has none.
    refused_until: u64,
    /// Nanoseconds from the limiter's epoch until which a background refill is running
    /// (past it, one that never answered is forgotten).
    refilling_until: u64,
}

/// How long a background refill may take before another may start.
const REFILL_TIMEOUT_NS: u64 = 1_000_000_000;

/// Each key's local allowance, sharded as the local table is, and bounded the same way.
pub(super) struct Allowances {
    shards: Box<[Mutex<FxHashMap<u64, Allowance>>]>,
    per_shard: usize,
}

impl fmt::Debug for Allowances {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allowances")
            .field("per_shard", &self.per_shard)
            .finish_non_exhaustive()
    }
}

impl Allowances {
    pub(super) fn new(per_shard: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard,
        }
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, FxHashMap<u64, Allowance>> {
        self.shards[(key >> 60) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Spends a token of `key`'s allowance at `now` if it has one (`batch`: how many a
    /// refill brings).
    pub(super) fn spend(&self, key: u64, now: u64, batch: u32) -> Spend {
        let mut shard = self.shard(key);
        let Some(allowance) = shard.get_mut(&key) else {
            return Spend::Ask;
        };
        if allowance.tokens > 0 && allowance.tokens_until > now {
            allowance.tokens -= 1;
            if allowance.tokens <= batch / 2
                && allowance.refilling_until <= now
                && allowance.refused_until <= now
            {
                allowance.refilling_until = now.saturating_add(REFILL_TIMEOUT_NS);
                return Spend::AdmitAndRefill;
            }
            return Spend::Admit;
        }
        if allowance.refused_until > now {
            return Spend::Refuse(Duration::from_nanos(allowance.refused_until - now));
        }
        Spend::Ask
    }

    /// Records what the store answered for `key` at `now`: `granted` tokens (one of them
    /// spent on the request that asked, when `spent`) valid for `valid`, added to what is
    /// left, or a refusal for `wait`.
    pub(super) fn record(&self, key: u64, now: u64, taken: Taken, valid: Duration, spent: bool) {
        let mut shard = self.shard(key);
        if shard.len() >= self.per_shard && !shard.contains_key(&key) {
            shard.retain(|_, a| a.tokens_until > now || a.refused_until > now);
            if shard.len() >= self.per_shard {
                // Those with something left: forgetting one only makes its key ask again.
                let excess: Vec<u64> = shard.keys().take(shard.len() / 4 + 1).copied().collect();
                for k in excess {
                    shard.remove(&k);
                }
            }
        }
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let allowance = shard.entry(key).or_default();
        allowance.refilling_until = 0;
        if taken.granted > 0 {
            let left = if allowance.tokens_until > now {
                allowance.tokens
            } else {
                0
            };
            allowance.tokens = left + taken.granted - u32::from(spent);
            allowance.tokens_until = now.saturating_add(nanos(valid));
            allowance.refused_until = 0;
        } else {
            // None to be had until `wait`: the tokens left (after a refill) are spent
            // first, then requests are refused without asking.
            if spent {
                allowance.tokens = 0;
            }
            allowance.refused_until = now.saturating_add(nanos(taken.wait));
        }
    }

    /// A background refill got no answer: another may start.
    pub(super) fn refill_failed(&self, key: u64) {
        if let Some(allowance) = self.shard(key).get_mut(&key) {
            allowance.refilling_until = 0;
        }
    }
}

/// How many tokens an instance takes at once for a limit of `burst`: a tenth of it, 1 to
/// 64. Larger batches save round trips (64 keeps a store call under 2% of a busy key's
/// requests); smaller ones keep what one instance holds unused (and so how unevenly a
/// fleet admits, never how much) small.
pub(super) fn batch(burst: u32) -> u32 {
    (burst / 10).clamp(1, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(granted: u32) -> Taken {
        Taken {
            granted,
            wait: Duration::ZERO,
        }
    }

    #[test]
    fn an_allowance_is_spent_then_asked_for_again_and_a_refusal_is_remembered() {
        let a = Allowances::new(4);
        assert_eq!(a.spend(7, 0, 1), Spend::Ask);
        let second = Duration::from_secs(1);
        a.record(7, 0, taken(3), second, true);
        assert_eq!(a.spend(7, 10, 1), Spend::Admit);
        // The last token asks for the next batch in the background.
        assert_eq!(a.spend(7, 20, 1), Spend::AdmitAndRefill);
        assert_eq!(a.spend(7, 30, 1), Spend::Ask);
        // Tokens expire unspent.
        a.record(7, 100, taken(2), second, true);
        assert_eq!(a.spend(7, 100 + 1_000_000_001, 1), Spend::Ask);
        // A refusal holds until the store's wait is over.
        let refused = Taken {
            granted: 0,
            wait: Duration::from_nanos(500),
        };
        a.record(7, 0, refused, second, true);
        assert_eq!(a.spend(7, 200, 1), Spend::Refuse(Duration::from_nanos(300)));
        assert_eq!(a.spend(7, 500, 1), Spend::Ask);
    }

    #[test]
    fn half_a_batch_left_asks_for_the_next_once_and_refills_add_up() {
        let a = Allowances::new(4);
        let second = Duration::from_secs(1);
        a.record(7, 0, taken(8), second, true);
        // 7 left: the spend that leaves half a batch (4) asks for the next.
        for _ in 0..2 {
            assert_eq!(a.spend(7, 10, 8), Spend::Admit);
        }
        assert_eq!(a.spend(7, 10, 8), Spend::AdmitAndRefill);
        // One refill at a time.
        assert_eq!(a.spend(7, 10, 8), Spend::Admit);
        a.record(7, 20, taken(8), second, false);
        // 3 left plus 8: 6 spent before 4 are left.
        for _ in 0..6 {
            assert_eq!(a.spend(7, 30, 8), Spend::Admit);
        }
        assert_eq!(a.spend(7, 30, 8), Spend::AdmitAndRefill);
        // A refill that failed lets the next one start.
        a.refill_failed(7);
        assert_eq!(a.spend(7, 30, 8), Spend::AdmitAndRefill);
    }

    #[test]
    fn the_table_stays_within_its_bound() {
        let a = Allowances::new(4);
        let second = Duration::from_secs(1);
        for key in 0..1000u64 {
            a.record(key, 0, taken(2), second, true);
        }
        let held: usize = a.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= 4 * SHARDS, "{held}");
    }

    #[test]
    fn batches_are_a_tenth_of_the_burst_within_one_and_sixty_four() {
        assert_eq!(batch(1), 1);
        assert_eq!(batch(20), 2);
        assert_eq!(batch(100_000), 64);
    }
}
