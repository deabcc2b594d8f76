//! A limit counted across a fleet: the bucket lives in a shared store
//! ([`SharedBuckets`], Redis through [`Cluster`](crate::cluster::Cluster) with the
//! `cluster` feature), and each instance keeps a small local allowance so that most
//! requests do not wait for the store.
//!
//! An instance whose allowance for a key is spent asks the store for a batch of tokens
//! (a tenth of the burst, 1 to 8) in one round trip; it spends them locally until they
//! are gone or expire (after the time the batch stands for at the rate, at most a
//! second: what an instance holds unused is lost, which errs toward admitting fewer).
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
}

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

    /// Spends a token of `key`'s allowance at `now` if it has one.
    pub(super) fn spend(&self, key: u64, now: u64) -> Spend {
        let mut shard = self.shard(key);
        let Some(allowance) = shard.get_mut(&key) else {
            return Spend::Ask;
        };
        if allowance.refused_until > now {
            return Spend::Refuse(Duration::from_nanos(allowance.refused_until - now));
        }
        if allowance.tokens > 0 && allowance.tokens_until > now {
            allowance.tokens -= 1;
            return Spend::Admit;
        }
        Spend::Ask
    }

    /// Records what the store answered for `key` at `now`: `granted` tokens (one spent on
    /// the request that asked) valid for `valid`, or a refusal for `wait`.
    pub(super) fn record(&self, key: u64, now: u64, taken: Taken, valid: Duration) {
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
        if taken.granted > 0 {
            allowance.tokens = taken.granted - 1;
            allowance.tokens_until = now.saturating_add(nanos(valid));
            allowance.refused_until = 0;
        } else {
            allowance.tokens = 0;
            allowance.refused_until = now.saturating_add(nanos(taken.wait));
        }
    }
}

/// How many tokens an instance takes at once for a limit of `burst`: a tenth of it, 1 to
/// 8. Larger batches save round trips; smaller ones keep what one instance holds unused
/// (and so the limit's error across a fleet) small.
pub(super) fn batch(burst: u32) -> u32 {
    (burst / 10).clamp(1, 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowance_is_spent_then_asked_for_again_and_a_refusal_is_remembered() {
        let a = Allowances::new(4);
        assert_eq!(a.spend(7, 0), Spend::Ask);
        let second = Duration::from_secs(1);
        a.record(
            7,
            0,
            Taken {
                granted: 3,
                wait: Duration::ZERO,
            },
            second,
        );
        assert_eq!(a.spend(7, 10), Spend::Admit);
        assert_eq!(a.spend(7, 20), Spend::Admit);
        assert_eq!(a.spend(7, 30), Spend::Ask);
        // Tokens expire unspent.
        a.record(
            7,
            100,
            Taken {
                granted: 2,
                wait: Duration::ZERO,
            },
            second,
        );
        assert_eq!(a.spend(7, 100 + 1_000_000_001), Spend::Ask);
        // A refusal holds until the store's wait is over.
        a.record(
            7,
            0,
            Taken {
                granted: 0,
                wait: Duration::from_nanos(500),
            },
            second,
        );
        assert_eq!(a.spend(7, 200), Spend::Refuse(Duration::from_nanos(300)));
        assert_eq!(a.spend(7, 500), Spend::Ask);
    }

    #[test]
    fn the_table_stays_within_its_bound() {
        let a = Allowances::new(4);
        let second = Duration::from_secs(1);
        for key in 0..1000u64 {
            a.record(
                key,
                0,
                Taken {
                    granted: 2,
                    wait: Duration::ZERO,
                },
                second,
            );
        }
        let held: usize = a.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= 4 * SHARDS, "{held}");
    }

    #[test]
    fn batches_are_a_tenth_of_the_burst_within_one_and_eight() {
        assert_eq!(batch(1), 1);
        assert_eq!(batch(20), 2);
        assert_eq!(batch(1000), 8);
    }
}
