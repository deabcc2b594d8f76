//! Upstream health: passive (failures seen by requests) and active (periodic `GET` checks).
//!
//! An upstream takes requests while it is actively up (always, without active checks) and
//! not in a passive cool-down. Both states are atomics in [`UpstreamState`], shared by all
//! workers, so one worker's failures steer the others' requests away too.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use http::uri::{Authority, PathAndQuery};
use http::{Method, Request, StatusCode, header};
use scb_core::Body;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::client::{Connection, SendError};
use crate::metrics::UpstreamMetrics;
use crate::upstream::UpstreamState;

/// Shortest active check interval: `tokio::time::interval` panics on zero, and checking more
/// often than every millisecond would be a load test, not a health check.
const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Longest response head a check reads.
const CHECK_MAX_HEAD: usize = 64 * 1024;

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
}

/// The instant that [`nanos`] maps to [`AT_BASE`]: the first one converted.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Where [`BASE`] sits on the `u64` nanosecond scale: instants up to 146 years before it
/// (taken before the first conversion, such as a `now` a caller captured early) convert
/// exactly instead of being clamped, 146 years after it fit too, and 0 stays before all.
const AT_BASE: u64 = 1 << 62;

/// `at` as nanoseconds for an atomic.
fn nanos(at: Instant) -> u64 {
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
    fn settle(&self, now: Instant, metrics: &UpstreamMetrics) -> bool {
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
    fn record_check(
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

/// Runs active checks of all `upstreams` until dropped: one task per upstream, so a slow
/// upstream delays only its own checks. Dropping (aborting) this future stops them all.
///
/// Returns at once, checking nothing, when `config.path` is not an absolute path (logged as
/// an error) or there are no upstreams.
pub(crate) async fn run_active(upstreams: Arc<[UpstreamState]>, config: ActiveHealth) {
    let path = config
        .path
        .parse::<PathAndQuery>()
        .ok()
        .filter(|path| path.as_str().starts_with('/'));
    let Some(path) = path else {
        tracing::error!(path = %config.path, "active health checks off: not an absolute path");
        return;
    };
    let config = Arc::new(config);
    // A JoinSet aborts its tasks when dropped, so they end with this future.
    let mut checkers = JoinSet::new();
    for index in 0..upstreams.len() {
        checkers.spawn(check_forever(
            Arc::clone(&upstreams),
            index,
            path.clone(),
            Arc::clone(&config),
        ));
    }
    while let Some(done) = checkers.join_next().await {
        if let Err(e) = done {
            tracing::error!(error = %e, "an active health checker ended");
        }
    }
}

async fn check_forever(
    upstreams: Arc<[UpstreamState]>,
    index: usize,
    path: PathAndQuery,
    config: Arc<ActiveHealth>,
) {
    let state = &upstreams[index];
    let mut ticks = tokio::time::interval(config.interval.max(MIN_INTERVAL));
    // After a check that overran the interval, wait a full interval rather than firing the
    // missed checks back to back at an upstream that is already slow.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let result = check(&state.upstream.authority, &path, config.timeout).await;
        let now = Instant::now();
        match (
            state
                .health
                .record_check(result.is_ok(), now, &config, &state.metrics),
            &result,
        ) {
            (Some(true), _) => tracing::info!(
                upstream = %state.upstream,
                passes = config.passes,
                "upstream up: passed its health checks"
            ),
            (Some(false), Err(e)) => tracing::warn!(
                upstream = %state.upstream,
                fails = config.fails,
                error = %e,
                "upstream down: failed its health checks"
            ),
            (_, Err(e)) => {
                tracing::debug!(upstream = %state.upstream, error = %e, "health check failed");
            }
            (_, Ok(())) => {}
        }
        // Without traffic nothing else would notice a passive cool-down running out.
        if state.health.settle(now, &state.metrics) {
            tracing::info!(upstream = %state.upstream, "upstream up: cool-down over");
        }
    }
}

/// Why an active check failed.
#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error("no response head within {0:?}")]
    Timeout(Duration),
    #[error("connect failed: {0}")]
    Connect(std::io::Error),
    #[error("request failed: {0}")]
    Http(SendError),
    #[error("request could not be built: {0}")]
    Request(http::Error),
    #[error("status {0}")]
    Status(StatusCode),
}

/// One check: `GET path` on a new connection, passed by a 2xx or 3xx head within `timeout`.
async fn check(
    authority: &Authority,
    path: &PathAndQuery,
    timeout: Duration,
) -> Result<(), CheckError> {
    let status = tokio::time::timeout(timeout, head(authority, path))
        .await
        .map_err(|_| CheckError::Timeout(timeout))??;
    if status.is_success() || status.is_redirection() {
        Ok(())
    } else {
        Err(CheckError::Status(status))
    }
}

async fn head(authority: &Authority, path: &PathAndQuery) -> Result<StatusCode, CheckError> {
    let stream = TcpStream::connect(authority.as_str())
        .await
        .map_err(CheckError::Connect)?;
    let mut request = Request::builder()
        .method(Method::GET)
        .uri(path.clone())
        .header(header::HOST, authority.as_str())
        .header(header::USER_AGENT, "scb-health-check")
        .header(header::CONNECTION, "close")
        .body(Body::empty())
        .map_err(CheckError::Request)?;
    // The body is not read: the connection is dropped (closed) once the head is in.
    let head = Connection::new(stream, CHECK_MAX_HEAD)
        .send(&mut request)
        .await
        .map_err(CheckError::Http)?;
    Ok(head.parts.status)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::metrics::UPSTREAM_HEALTHY;
    use crate::upstream::Upstream;

    fn state(addr: &str) -> UpstreamState {
        UpstreamState::new(Upstream::new(addr).unwrap())
    }

    const POLICY: PassiveHealth = PassiveHealth::new();

    /// The health gauge's value set since the last snapshot, or 0 when none was set: the
    /// debugging recorder resets values when read.
    fn healthy_gauge(snapshotter: &Snapshotter, upstream: &str) -> f64 {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .find_map(|(key, _, _, value)| {
                let key = key.key();
                let ours = key.name() == UPSTREAM_HEALTHY
                    && key
                        .labels()
                        .any(|l| l.key() == "upstream" && l.value() == upstream);
                match value {
                    DebugValue::Gauge(v) if ours => Some(v.0),
                    _ => None,
                }
            })
            .expect("the gauge is registered")
    }

    #[test]
    fn defaults_are_as_documented() {
        assert_eq!(PassiveHealth::default(), POLICY);
        let active = ActiveHealth::new("/healthz");
        assert_eq!(active.path, "/healthz");
        assert_eq!(active.interval, Duration::from_secs(5));
        assert_eq!(active.timeout, Duration::from_secs(2));
        assert_eq!((active.passes, active.fails), (2, 2));
        let health = Health::new();
        assert!(health.is_available(Instant::now()));
    }

    #[test]
    fn passive_failures_below_max_fails_keep_the_upstream_available() {
        let s = state("10.0.0.1:80");
        let now = Instant::now();
        assert!(!s.health.record_failure(now, &POLICY, &s.metrics));
        assert!(!s.health.record_failure(now, &POLICY, &s.metrics));
        assert!(s.health.is_available(now));
    }

    #[test]
    fn passive_max_fails_in_a_row_skip_the_upstream_for_fail_timeout() {
        let s = state("10.0.0.1:80");
        let now = Instant::now();
        for _ in 0..2 {
            s.health.record_failure(now, &POLICY, &s.metrics);
        }
        assert!(s.health.record_failure(now, &POLICY, &s.metrics));
        assert!(!s.health.is_available(now));
        let almost = now + POLICY.fail_timeout - Duration::from_nanos(1);
        assert!(!s.health.is_available(almost));
        assert!(s.health.is_available(now + POLICY.fail_timeout));
    }

    #[test]
    fn instants_convert_exactly_on_both_sides_of_the_base() {
        let base = *BASE;
        let hour = Duration::from_secs(3600);
        assert_eq!(nanos(base), AT_BASE);
        assert_eq!(nanos(base + hour) - nanos(base), 3_600_000_000_000);
        if let Some(before) = base.checked_sub(hour) {
            assert_eq!(nanos(base) - nanos(before), 3_600_000_000_000);
        }
    }

    #[test]
    fn passive_cool_down_is_exact_for_instants_taken_before_any_health_existed() {
        let now = Instant::now();
        let s = state("10.0.0.1:80");
        let policy = PassiveHealth {
            max_fails: 1,
            ..POLICY
        };
        s.health.record_failure(now, &policy, &s.metrics);
        assert!(
            !s.health
                .is_available(now + policy.fail_timeout - Duration::from_nanos(1))
        );
        assert!(s.health.is_available(now + policy.fail_timeout));
    }

    #[test]
    fn passive_one_failure_after_a_cool_down_starts_the_next() {
        let s = state("10.0.0.1:80");
        let now = Instant::now();
        for _ in 0..3 {
            s.health.record_failure(now, &POLICY, &s.metrics);
        }
        let after = now + POLICY.fail_timeout;
        assert!(s.health.is_available(after));
        s.health.record_failure(after, &POLICY, &s.metrics);
        assert!(!s.health.is_available(after));
        assert!(!s.health.is_available(after + POLICY.fail_timeout / 2));
        assert!(s.health.is_available(after + POLICY.fail_timeout));
    }

    #[test]
    fn passive_failures_during_a_cool_down_extend_it_but_never_shorten_it() {
        let s = state("10.0.0.1:80");
        let now = Instant::now();
        for _ in 0..3 {
            s.health.record_failure(now, &POLICY, &s.metrics);
        }
        let later = now + Duration::from_secs(4);
        assert!(!s.health.record_failure(later, &POLICY, &s.metrics));
        assert!(
            !s.health
                .is_available(later + POLICY.fail_timeout - Duration::from_secs(1))
        );
        // A failure timestamped before the latest one (a slow worker) changes nothing.
        s.health.record_failure(now, &POLICY, &s.metrics);
        assert!(
            !s.health
                .is_available(later + POLICY.fail_timeout - Duration::from_secs(1))
        );
        assert!(s.health.is_available(later + POLICY.fail_timeout));
    }

    #[test]
    fn passive_success_resets_the_failure_count() {
        let s = state("10.0.0.1:80");
        let now = Instant::now();
        for _ in 0..5 {
            s.health.record_failure(now, &POLICY, &s.metrics);
            s.health.record_failure(now, &POLICY, &s.metrics);
            assert!(!s.health.record_success(&s.metrics));
        }
        assert!(s.health.is_available(now));

        // After a cool-down and a success, one failure is not enough again.
        for _ in 0..3 {
            s.health.record_failure(now, &POLICY, &s.metrics);
        }
        let after = now + POLICY.fail_timeout;
        s.health.record_success(&s.metrics);
        s.health.record_failure(after, &POLICY, &s.metrics);
        assert!(s.health.is_available(after));
    }

    #[test]
    fn passive_max_fails_zero_never_marks_down() {
        let s = state("10.0.0.1:80");
        let off = PassiveHealth {
            max_fails: 0,
            ..POLICY
        };
        let now = Instant::now();
        for _ in 0..100 {
            assert!(!s.health.record_failure(now, &off, &s.metrics));
        }
        assert!(s.health.is_available(now));
    }

    #[test]
    fn passive_gauge_drops_for_the_cool_down_and_returns_once_it_is_over() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let s = ::metrics::with_local_recorder(&recorder, || state("10.0.0.1:80"));
        let policy = PassiveHealth {
            max_fails: 1,
            ..POLICY
        };
        let now = Instant::now();
        // Not read since `UpstreamState::new` set 1, so a 0 here was set by the failure.
        assert!(s.health.record_failure(now, &policy, &s.metrics));
        assert_eq!(healthy_gauge(&snapshotter, "10.0.0.1:80"), 0.0);
        // A success from a request sent before the cool-down does not end it.
        assert!(!s.health.record_success(&s.metrics));
        assert!(!s.health.settle(now + Duration::from_secs(9), &s.metrics));
        assert!(s.health.settle(now + policy.fail_timeout, &s.metrics));
        assert_eq!(healthy_gauge(&snapshotter, "10.0.0.1:80"), 1.0);
        // Only once.
        assert!(!s.health.settle(now + policy.fail_timeout, &s.metrics));
    }

    #[test]
    fn active_state_changes_after_fails_or_passes_checks_in_a_row() {
        let s = state("10.0.0.1:80");
        let config = ActiveHealth {
            passes: 3,
            fails: 2,
            ..ActiveHealth::new("/")
        };
        let check = |passed| {
            s.health
                .record_check(passed, Instant::now(), &config, &s.metrics)
        };
        assert_eq!(check(false), None);
        assert_eq!(check(true), None, "the streak is broken");
        assert_eq!(check(false), None);
        assert!(s.health.is_available(Instant::now()));
        assert_eq!(check(false), Some(false));
        assert!(!s.health.is_available(Instant::now()));
        assert_eq!(check(true), None);
        assert_eq!(check(true), None);
        assert_eq!(check(false), None, "the streak is broken");
        assert_eq!(check(true), None);
        assert_eq!(check(true), None);
        assert!(!s.health.is_available(Instant::now()));
        assert_eq!(check(true), Some(true));
        assert!(s.health.is_available(Instant::now()));
    }

    #[test]
    fn active_and_passive_must_both_allow_the_upstream() {
        let s = state("10.0.0.1:80");
        let config = ActiveHealth {
            fails: 1,
            passes: 1,
            ..ActiveHealth::new("/")
        };
        let now = Instant::now();
        s.health.record_check(false, now, &config, &s.metrics);
        assert!(!s.health.is_available(now + POLICY.fail_timeout));
        s.health.record_check(true, now, &config, &s.metrics);
        for _ in 0..3 {
            s.health.record_failure(now, &POLICY, &s.metrics);
        }
        assert!(!s.health.is_available(now));
        assert!(s.health.is_available(now + POLICY.fail_timeout));
    }

    /// A tiny upstream: reads a request head, answers 200 (or 503 while `failing` is set)
    /// and closes. Counts the answers of each kind and keeps the last head.
    struct TestUpstream {
        addr: SocketAddr,
        failing: Arc<AtomicBool>,
        ok: Arc<AtomicUsize>,
        failed: Arc<AtomicUsize>,
        last_head: Arc<Mutex<String>>,
    }

    async fn test_upstream() -> TestUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = TestUpstream {
            addr: listener.local_addr().unwrap(),
            failing: Arc::default(),
            ok: Arc::default(),
            failed: Arc::default(),
            last_head: Arc::default(),
        };
        let (failing, ok, failed, last_head) = (
            Arc::clone(&upstream.failing),
            Arc::clone(&upstream.ok),
            Arc::clone(&upstream.failed),
            Arc::clone(&upstream.last_head),
        );
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (failing, ok, failed, last_head) = (
                    Arc::clone(&failing),
                    Arc::clone(&ok),
                    Arc::clone(&failed),
                    Arc::clone(&last_head),
                );
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut chunk = [0; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&chunk[..n]),
                        }
                    }
                    *last_head.lock().unwrap() = String::from_utf8_lossy(&head).into_owned();
                    let status = if failing.load(Ordering::SeqCst) {
                        failed.fetch_add(1, Ordering::SeqCst);
                        "503 Service Unavailable"
                    } else {
                        ok.fetch_add(1, Ordering::SeqCst);
                        "200 OK"
                    };
                    let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                    stream.write_all(response.as_bytes()).await.ok();
                });
            }
        });
        upstream
    }

    fn fast_checks() -> ActiveHealth {
        ActiveHealth {
            interval: Duration::from_millis(50),
            timeout: Duration::from_secs(1),
            passes: 2,
            fails: 2,
            ..ActiveHealth::new("/healthz")
        }
    }

    /// Waits for `condition`, failing the test after 10 seconds.
    async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting until {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn available(upstreams: &[UpstreamState]) -> bool {
        upstreams[0].health.is_available(Instant::now())
    }

    #[tokio::test]
    async fn active_checks_keep_a_healthy_upstream_up() {
        let upstream = test_upstream().await;
        let addr = upstream.addr.to_string();
        let upstreams: Arc<[UpstreamState]> = Arc::new([state(&addr)]);
        let checker = tokio::spawn(run_active(Arc::clone(&upstreams), fast_checks()));
        wait_until("5 checks passed", || {
            assert!(available(&upstreams));
            upstream.ok.load(Ordering::SeqCst) >= 5
        })
        .await;
        assert!(available(&upstreams));
        let head = upstream.last_head.lock().unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get /healthz http/1.1\r\n"), "{head}");
        assert!(head.contains(&format!("\r\nhost: {addr}\r\n")), "{head}");
        assert!(
            head.contains("\r\nuser-agent: scb-health-check\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
        checker.abort();
    }

    #[tokio::test]
    async fn active_checks_take_a_failing_upstream_down_and_bring_it_back() {
        let upstream = test_upstream().await;
        let addr = upstream.addr.to_string();
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let upstreams: Arc<[UpstreamState]> =
            ::metrics::with_local_recorder(&recorder, || Arc::new([state(&addr)]));
        let checker = tokio::spawn(run_active(Arc::clone(&upstreams), fast_checks()));
        wait_until("a check passed", || upstream.ok.load(Ordering::SeqCst) >= 1).await;

        upstream.failing.store(true, Ordering::SeqCst);
        wait_until("the upstream is down", || !available(&upstreams)).await;
        assert!(upstream.failed.load(Ordering::SeqCst) >= 2);
        // Not read since `UpstreamState::new` set 1, so a 0 here was set by the transition.
        assert_eq!(healthy_gauge(&snapshotter, &addr), 0.0);

        let ok_before = upstream.ok.load(Ordering::SeqCst);
        upstream.failing.store(false, Ordering::SeqCst);
        wait_until("the upstream is back", || available(&upstreams)).await;
        assert!(upstream.ok.load(Ordering::SeqCst) >= ok_before + 2);
        assert_eq!(healthy_gauge(&snapshotter, &addr), 1.0);
        checker.abort();
    }

    #[tokio::test]
    async fn active_checks_take_a_closed_port_down() {
        let addr = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().to_string()
        };
        let upstreams: Arc<[UpstreamState]> = Arc::new([state(&addr)]);
        let checker = tokio::spawn(run_active(Arc::clone(&upstreams), fast_checks()));
        wait_until("the upstream is down", || !available(&upstreams)).await;
        checker.abort();
    }

    #[tokio::test]
    async fn active_checks_time_out_a_silent_upstream_without_delaying_the_others() {
        // Accepts and reads, never answers.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = silent.accept().await {
                tokio::spawn(async move {
                    let mut sink = Vec::new();
                    stream.read_to_end(&mut sink).await.ok();
                });
            }
        });
        let healthy = test_upstream().await;
        let upstreams: Arc<[UpstreamState]> =
            Arc::new([state(&silent_addr), state(&healthy.addr.to_string())]);
        let checker = tokio::spawn(run_active(Arc::clone(&upstreams), fast_checks()));
        wait_until("the silent upstream is down", || !available(&upstreams)).await;
        // Two 1 s timeouts took it down; meanwhile the healthy upstream was checked every
        // 50 ms. Checks in one loop would have checked it only about twice.
        let healthy_checks = healthy.ok.load(Ordering::SeqCst);
        assert!(healthy_checks >= 8, "{healthy_checks} checks");
        assert!(upstreams[1].health.is_available(Instant::now()));
        checker.abort();
    }

    #[tokio::test]
    async fn active_checks_with_a_relative_path_are_off() {
        let upstreams: Arc<[UpstreamState]> = Arc::new([state("127.0.0.1:9")]);
        let config = ActiveHealth {
            path: "healthz".to_owned(),
            ..fast_checks()
        };
        let ran = tokio::time::timeout(Duration::from_secs(5), run_active(upstreams, config));
        assert!(ran.await.is_ok(), "run_active returns at once");
    }
}
