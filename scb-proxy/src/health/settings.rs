//! The settings of passive and active health, with their defaults.

use std::time::Duration;

/// Passive health: an upstream whose tries fail `max_fails` times in a row is skipped for
/// `fail_timeout`.
///
/// A failed try is a connect error or timeout, a reset or a response timeout; an invalid
/// response (a malformed or oversized head, a framing scb refuses) is that request's 502
/// and counts only with [`count_invalid_responses`](Self::count_invalid_responses). After
/// the cool-down the upstream gets requests again, and until one of them succeeds a single
/// failure starts the next cool-down (as in nginx). Failures of requests that were already
/// in flight when a cool-down started extend it.
///
/// Marks only steer requests to the other upstreams: they never turn a route into an
/// outage. When every upstream a request has not tried yet is marked down (the only
/// upstream of a route, or all of them), the one whose mark ends first, the least
/// recently failed, is tried anyway, as nginx does for a group of one or a group that is
/// all down, and as Envoy's panic mode does. Metrics and logs still show every failure.
///
/// Defaults to 3 fails and 10 seconds (nginx's defaults are 1 and 10 s; one reset is too
/// little evidence to drop an upstream for ten seconds).
///
/// ```
/// use std::time::Duration;
/// use scb_proxy::PassiveHealth;
///
/// let passive = PassiveHealth::new().max_fails(5).fail_timeout(Duration::from_secs(30));
/// assert!(!passive.count_invalid_responses);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassiveHealth {
    /// Failed tries in a row that start a cool-down; 0 turns passive health off.
    pub max_fails: u32,
    /// How long the upstream is skipped.
    pub fail_timeout: Duration,
    /// Whether an invalid response counts as a failed try.
    pub count_invalid_responses: bool,
}

impl Default for PassiveHealth {
    fn default() -> Self {
        Self::new()
    }
}

impl PassiveHealth {
    /// The defaults: 3 fails, 10 seconds, invalid responses not counted.
    pub const fn new() -> Self {
        Self {
            max_fails: 3,
            fail_timeout: Duration::from_secs(10),
            count_invalid_responses: false,
        }
    }

    /// Failed tries in a row that start a cool-down; 0 turns passive health off.
    /// Defaults to 3.
    pub const fn max_fails(mut self, max_fails: u32) -> Self {
        self.max_fails = max_fails;
        self
    }

    /// How long an upstream is skipped after `max_fails` failed tries. Defaults to 10
    /// seconds.
    pub const fn fail_timeout(mut self, timeout: Duration) -> Self {
        self.fail_timeout = timeout;
        self
    }

    /// Whether an invalid response (malformed or oversized head, refused framing) counts
    /// as a failed try. Defaults to `false`: one bad response is that request's 502, and
    /// an upstream that answers at all is not down.
    pub const fn count_invalid_responses(mut self, count: bool) -> Self {
        self.count_invalid_responses = count;
        self
    }
}

/// Active health: a `GET path` to every upstream every `interval`, on a fresh connection.
///
/// A check passes when a response head with a 2xx or 3xx status arrives within `timeout`,
/// connecting included. An upstream goes down after `fails` failed checks in a row and comes
/// back after `passes` passed checks in a row. Every upstream starts up, and each is checked
/// on its own schedule, so a slow one does not delay the others' checks.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveHealth {
    /// Absolute path (and query) to request, such as `/healthz`.
    pub path: String,
    /// Time between the starts of two checks of an upstream; a check that takes longer
    /// delays the next. Defaults to 5 seconds; at least 1 ms.
    pub interval: Duration,
    /// Longest a check may take, connect included. Defaults to 2 seconds.
    pub timeout: Duration,
    /// Passed checks in a row that bring a down upstream back. Defaults to 2; 0 is taken as 1.
    pub passes: u32,
    /// Failed checks in a row that take an upstream down. Defaults to 2; 0 is taken as 1.
    pub fails: u32,
}

impl ActiveHealth {
    /// Checks `GET path` every 5 seconds with a 2 second timeout; 2 failed checks in a row
    /// take an upstream down, 2 passed ones bring it back.
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            passes: 2,
            fails: 2,
        }
    }

    /// Time between the starts of two checks of an upstream. Defaults to 5 seconds.
    #[must_use]
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Longest a check may take, connect included. Defaults to 2 seconds.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Passed checks in a row that bring a down upstream back. Defaults to 2.
    #[must_use]
    pub fn passes(mut self, passes: u32) -> Self {
        self.passes = passes;
        self
    }

    /// Failed checks in a row that take an upstream down. Defaults to 2.
    #[must_use]
    pub fn fails(mut self, fails: u32) -> Self {
        self.fails = fails;
        self
    }
}
