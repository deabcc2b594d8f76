//! How a bounded map of stored responses is laid out: its shards sized so that the
//! largest object fits in one (an object heavier than a shard's share is never
//! admitted). The memory tier and the disk tier's index are both laid out so.

use quick_cache::{Options, OptionsBuilder};

/// How many variants one key keeps (a `Vary` on a header with many values must not
/// crowd out everything else): the oldest goes first.
pub(crate) const MAX_VARIANTS: usize = 8;

/// A shard smaller than this many of the largest objects would refuse them: fewer,
/// larger shards then.
const OBJECTS_PER_SHARD: u64 = 2;

/// The options of a map of at most `max_bytes` holding objects of up to `max_object`.
pub(crate) fn options(max_bytes: u64, max_object: u64) -> Options {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut shards = (cores * 4).next_power_of_two();
    while shards > 1 && max_bytes / (shards as u64) < max_object.saturating_mul(OBJECTS_PER_SHARD) {
        shards /= 2;
    }
    OptionsBuilder::new()
        .shards(shards)
        // For the ghost list (recently evicted keys) and the shards' minimum size: an
        // order of magnitude is enough.
        .estimated_items_capacity(
            usize::try_from(max_bytes / (16 << 10))
                .unwrap_or(usize::MAX)
                .clamp(64, 1 << 20),
        )
        .weight_capacity(max_bytes)
        .build()
        .expect("the options set are all valid")
}
