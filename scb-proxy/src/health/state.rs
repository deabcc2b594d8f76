//! [`Health`]: what every worker knows about one upstream's health, in atomics.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{ActiveHealth, PassiveHealth};
use crate::metrics::UpstreamMetrics;

/// The instant that [`nanos`] maps to [`AT_BASE`]: the first one converted.
pub(super) static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Where [`BASE`] sits on the `u64` nanosecond scale: instants up to 146 years before it
/// (taken before the first conversion, such as a `now` a caller captured early) convert
/// exactly instead of being clamped, 146 years after it fit too, and 0 stays before all.
pub(super) const AT_BASE: u64 = 1 << 62;

/// `at` as nanoseconds for an atomic.
pub(super) fn nanos(at: Instant) -> u64 {
    let to_u64 = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    match at.checked_duration_since(*BASE) {
        Some(after) => AT_BASE.saturating_add(to_u64(after)),
        None => AT_BASE.saturating_sub(to_u64(*BASE - at)),
    }
}

/// The health of one upstream.
#[derive(Debug)]
pub(crate) struct Health {
    /// The active checks' verdict; stays true without active checks.
    active_up: AtomicBool,
    /// Checks in a row that disagree with `active_up`; written by the upstream's checker only.
    streak: AtomicU32,
    /// Failed tries in a row (passive), saturating.
    fails: AtomicU32,
    /// End of the passive cool-down, as [`nanos`]; a past time (such as 0) means none.
    cool_down_until: AtomicU64,
    /// Whether a cool-down started and has not been seen to end. The end of a cool-down is
    /// the clock passing a time, not an event, so this is what lets the gauge go back to 1
    /// (and the caller log it) exactly once.
    cooling: AtomicBool,
}

impl Health {
    /// Up, with no failures.
    pub(crate) fn new() -> Self {
        Self {
            active_up: AtomicBool::new(true),
            streak: AtomicU32::new(0),
            fails: AtomicU32::new(0),
            cool_down_until: AtomicU64::new(0),
            cooling: AtomicBool::new(false),
        }
    }

    /// Whether the upstream takes requests at `now`: actively up and not in a passive
    /// cool-down.
    pub(crate) fn is_available(&self, now: Instant) -> bool {
        self.active_up.load(Ordering::Relaxed)
            && nanos(now) >= self.cool_down_until.load(Ordering::Relaxed)
    }

    /// When the passive cool-down ends, as [`nanos`]; in the past when there is none.
    /// Ordering upstreams by it orders them by their last failure.
    pub(crate) fn marked_until(&self) -> u64 {
        self.cool_down_until.load(Ordering::Relaxed)
    }

    /// A try got a response head: the passive failure count starts over.
    ///
    /// Returns true when this ended a cool-down that had run out and the upstream is up
    /// again (the gauge is back at 1), for the caller to log.
    pub(crate) fn record_success(&self, metrics: &UpstreamMetrics) -> bool {
        // Every response goes through here; a write only when needed keeps the cache line
        // shared between workers instead of bouncing it on every request.
        if self.fails.load(Ordering::Relaxed) != 0 {
            self.fails.store(0, Ordering::Relaxed);
        }
        // A success during a cool-down (a request sent before it started) does not end it:
        // the gauge says whether the upstream is skipped, and it still is.
        self.cooling.load(Ordering::Relaxed) && self.settle(Instant::now(), metrics)
    }

    /// A try failed at `now`. The `policy.max_fails`-th failure in a row starts a cool-down
    /// of `policy.fail_timeout`; until a success resets the count, every further failure
    /// (re)starts one.
    ///
    /// Returns true when this started a cool-down (the gauge went to 0), for the caller to
    /// log; false for failures below the count and for ones extending a cool-down.
    pub(crate) fn record_failure(
        &self,
        now: Instant,
        policy: &PassiveHealth,
        metrics: &UpstreamMetrics,
    ) -> bool {
        if policy.max_fails == 0 {
            return false;
        }
        let before = self
            .fails
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            })
            .unwrap_or_else(|n| n);
        if before.saturating_add(1) < policy.max_fails {
            return false;
        }
        let timeout = u64::try_from(policy.fail_timeout.as_nanos()).unwrap_or(u64::MAX);
        self.cool_down_until
            .fetch_max(nanos(now).saturating_add(timeout), Ordering::SeqCst);
        let started = !self.cooling.swap(true, Ordering::SeqCst);
        if started {
            metrics.healthy(false);
        }
        started
    }

    /// Notes that a cool-down has run out by `now`: the gauge goes back to the active state.
    /// Returns true when this brought the upstream back.
    pub(crate) fn settle(&self, now: Instant, metrics: &UpstreamMetrics) -> bool {
        if !self.cooling.load(Ordering::Relaxed)
            || nanos(now) < self.cool_down_until.load(Ordering::SeqCst)
            || !self.cooling.swap(false, Ordering::SeqCst)
        {
            return false;
        }
        if nanos(now) < self.cool_down_until.load(Ordering::SeqCst) {
            // A failure started a new cool-down between the check and the swap; it saw
            // `cooling` still set and left the gauge at 0, so this is still that cool-down.
            self.cooling.store(true, Ordering::SeqCst);
            return false;
        }
        let up = self.active_up.load(Ordering::Relaxed);
        metrics.healthy(up);
        up
    }

    /// Counts one active check. Returns the new state when this check changed it.
    pub(crate) fn record_check(
        &self,
        passed: bool,
        now: Instant,
        config: &ActiveHealth,
        metrics: &UpstreamMetrics,
    ) -> Option<bool> {
        let up = self.active_up.load(Ordering::Relaxed);
        if passed == up {
            self.streak.store(0, Ordering::Relaxed);
            return None;
        }
        let streak = self.streak.load(Ordering::Relaxed) + 1;
        let needed = if up { config.fails } else { config.passes };
        if streak < needed.max(1) {
            self.streak.store(streak, Ordering::Relaxed);
            return None;
        }
        self.streak.store(0, Ordering::Relaxed);
        self.active_up.store(passed, Ordering::Relaxed);
        metrics.healthy(passed && nanos(now) >= self.cool_down_until.load(Ordering::SeqCst));
        Some(passed)
    }
}
