//! Which shard of a sharded metric this thread adds into, and whether it owns it.
//!
//! Why: an atomic read-modify-write (`lock xadd`, `lock cmpxchg`) is a full barrier on
//! x86-64, some twenty cycles each even on a cache line no other core touches, and a request
//! with `[metrics]` on made six of them (a count, the bytes, the histogram's bucket and sum,
//! the in-flight gauge up and down). A thread that owns its shard is the only writer of it,
//! so it adds with a plain load and store; the scrape's loads still see whole values,
//! because each store is one aligned 64-bit write.
//!
//! Ownership: the first 64 threads to record claim a slot each from a process-wide bitmap
//! and give it back when they exit (a thread-local destructor), so a pool that replaces its
//! threads reuses slots. A metric has a fixed number of owned shards (the machine's
//! parallelism) and one shared shard past them: a thread whose slot is beyond a metric's
//! owned shards, or that found no slot free, adds into the shared shard with atomic
//! operations. Correct for any number of threads; uncontended and barrier-free for the
//! workers, which record first and most.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The slots in the bitmap.
const SLOTS: usize = 64;
/// A thread that has not recorded yet.
const UNCLAIMED: usize = usize::MAX;
/// A thread that found no slot free, or is exiting: it adds into shared shards.
const NONE: usize = usize::MAX - 1;

/// Bit `i` set: slot `i` is some live thread's.
static CLAIMED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // A `const` cell without a destructor: readable while other thread-locals are being
    // destroyed, and no lazy-initialisation state to check on every record.
    static SLOT: Cell<usize> = const { Cell::new(UNCLAIMED) };
    // Touched once, when a slot is claimed, so that its destructor gives the slot back.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

/// Gives this thread's slot back when the thread exits.
struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        // Anything this thread records from here on (another thread-local's destructor)
        // goes to the shared shards: the slot may be someone else's in a moment.
        let slot = SLOT.with(|slot| slot.replace(NONE));
        if slot < SLOTS {
            release(&CLAIMED, slot);
        }
    }
}

/// Claims the lowest free slot of `bitmap`. Acquire: a new owner sees every store the
/// slot's previous owner made before releasing it, so it continues from their sum.
fn claim(bitmap: &AtomicU64) -> Option<usize> {
    let mut claimed = bitmap.load(Ordering::Relaxed);
    loop {
        let free = (!claimed).trailing_zeros() as usize;
        if free >= SLOTS {
            return None;
        }
        match bitmap.compare_exchange_weak(
            claimed,
            claimed | 1 << free,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Some(free),
            Err(actual) => claimed = actual,
        }
    }
}

/// Gives `slot` back. Release: pairs with [`claim`]'s Acquire.
fn release(bitmap: &AtomicU64, slot: usize) {
    bitmap.fetch_and(!(1 << slot), Ordering::Release);
}

/// Where the calling thread adds into a metric with `owned` owned shards: the shard's index
/// (`owned` itself for the shared shard past them) and whether this thread owns it.
pub(super) fn shard(owned: usize) -> (usize, bool) {
    let slot = SLOT.with(|slot| {
        if slot.get() == UNCLAIMED {
            slot.set(claim_for_this_thread());
        }
        slot.get()
    });
    if slot < owned {
        (slot, true)
    } else {
        (owned, false)
    }
}

fn claim_for_this_thread() -> usize {
    let Some(slot) = claim(&CLAIMED) else {
        return NONE;
    };
    // Registers the destructor; a thread already tearing its thread-locals down cannot,
    // and must not keep a slot it would never give back.
    if GIVE_BACK.try_with(|_| ()).is_err() {
        release(&CLAIMED, slot);
        return NONE;
    }
    slot
}

/// Adds `value` to `cell`: a plain load and store when this thread owns it, an atomic
/// addition when it is shared.
pub(super) fn add_u64(cell: &AtomicU64, owned: bool, value: u64) {
    if owned {
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(value),
            Ordering::Relaxed,
        );
    } else {
        cell.fetch_add(value, Ordering::Relaxed);
    }
}

/// Adds `delta` to the `f64` whose bits `cell` holds, as [`add_u64`] adds.
pub(super) fn add_f64(cell: &AtomicU64, owned: bool, delta: f64) {
    let sum = |bits: u64| (f64::from_bits(bits) + delta).to_bits();
    if owned {
        cell.store(sum(cell.load(Ordering::Relaxed)), Ordering::Relaxed);
    } else {
        // `fetch_update` is a compare-exchange loop: no atomic float addition on x86-64.
        let _ = cell.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some(sum(bits)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn slots_are_claimed_lowest_first_given_back_and_run_out_at_sixty_four() {
        let bitmap = AtomicU64::new(0);
        assert_eq!(claim(&bitmap), Some(0));
        assert_eq!(claim(&bitmap), Some(1));
        assert_eq!(claim(&bitmap), Some(2));
        release(&bitmap, 1);
        assert_eq!(
            claim(&bitmap),
            Some(1),
            "a slot given back is the next one claimed"
        );
        for expected in 3..64 {
            assert_eq!(claim(&bitmap), Some(expected));
        }
        assert_eq!(claim(&bitmap), None);
        release(&bitmap, 40);
        assert_eq!(claim(&bitmap), Some(40));
    }

    #[test]
    fn a_thread_keeps_its_shard_and_owns_it_only_within_the_owned_count() {
        std::thread::spawn(|| {
            let (index, owned) = shard(64);
            assert!(owned && index < 64);
            assert_eq!(shard(64), (index, true), "the same slot on every record");
            assert_eq!(
                shard(index),
                (index, false),
                "past the owned shards: shared"
            );
            assert_eq!(shard(0), (0, false));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn owners_and_sharers_together_lose_no_addition() {
        // Two owned shards and a shared one, more threads than shards: whichever slots the
        // threads get, every addition is in the sum.
        let cells: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
        let floats: Arc<Vec<AtomicU64>> =
            Arc::new((0..3).map(|_| AtomicU64::new(0f64.to_bits())).collect());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (cells, floats) = (Arc::clone(&cells), Arc::clone(&floats));
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let (index, owned) = shard(2);
                        add_u64(&cells[index], owned, 1);
                        add_f64(&floats[index], owned, 0.5);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let total: u64 = cells.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let float_total: f64 = floats
            .iter()
            .map(|c| f64::from_bits(c.load(Ordering::Relaxed)))
            .sum();
        assert_eq!(total, 80_000);
        assert_eq!(float_total, 40_000.0);
    }
}
