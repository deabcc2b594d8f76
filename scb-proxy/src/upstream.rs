//! The upstreams of one proxy, and the state every worker shares about each of them.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::uri::Authority;

use crate::health::Health;
use crate::metrics::UpstreamMetrics;

/// One upstream server as configured: `host:port` (given as such or as an `http://` URL)
/// and a weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    pub(crate) authority: Authority,
    pub(crate) weight: u32,
    /// A Unix domain socket to connect to instead of `authority` (which is then
    /// `localhost`, for the `Host` a request gets without `preserve_host`).
    pub(crate) unix: Option<std::sync::Arc<std::path::Path>>,
    /// `https://`: TLS to the upstream, its certificate verified for the host.
    pub(crate) tls: bool,
}

/// An upstream address that is not `host:port` or `http://host[:port]`.
#[derive(Debug, thiserror::Error)]
#[error("upstream {addr:?} {reason}")]
pub struct InvalidUpstream {
    addr: String,
    reason: &'static str,
}

impl InvalidUpstream {
    fn new(addr: &str, reason: &'static str) -> Self {
        Self {
            addr: addr.to_owned(),
            reason,
        }
    }

    /// What is wrong with it.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl Upstream {
    /// An upstream at `host:port` (`127.0.0.1:8081`, `[::1]:8081`, `app.internal:80`), at
    /// an `http://` or `https://` URL with nothing after the authority but an optional
    /// `/` (`http://app.internal` for port 80, `https://api.internal` for 443: TLS, see
    /// [`UpstreamTls`](crate::UpstreamTls)), or on a Unix socket (`unix:/run/app.sock`),
    /// with weight 1.
    ///
    /// # Errors
    ///
    /// When `addr` is none of these, saying why: no port, a user name, a path, a relative
    /// socket path.
    pub fn new(addr: &str) -> Result<Self, InvalidUpstream> {
        const EXPECTED: &str = "is not host:port, http[s]://host[:port] or unix:/path";
        if let Some(path) = addr.strip_prefix("unix:") {
            if !path.starts_with('/') {
                return Err(InvalidUpstream::new(
                    addr,
                    "is not unix:/absolute/path to a socket",
                ));
            }
            return Ok(Self {
                authority: Authority::from_static("localhost"),
                weight: 1,
                unix: Some(std::path::Path::new(path).into()),
                tls: false,
            });
        }
        let (rest, default_port, tls) = if let Some(rest) = strip_scheme(addr, "http://") {
            (rest.strip_suffix('/').unwrap_or(rest), Some(80), false)
        } else if let Some(rest) = strip_scheme(addr, "https://") {
            (rest.strip_suffix('/').unwrap_or(rest), Some(443), true)
        } else {
            (addr, None, false)
        };
        if rest.contains(['/', '?', '#']) {
            return Err(InvalidUpstream::new(
                addr,
                "has a path: give host:port only",
            ));
        }
        if rest.contains('@') {
            return Err(InvalidUpstream::new(addr, "has a user name"));
        }
        let authority: Authority = rest
            .parse()
            .map_err(|_| InvalidUpstream::new(addr, EXPECTED))?;
        if authority.host().is_empty() {
            return Err(InvalidUpstream::new(addr, EXPECTED));
        }
        let authority = match (authority.port_u16(), default_port) {
            (Some(_), _) => authority,
            (None, Some(port)) => format!("{}:{port}", authority.as_str())
                .parse()
                .map_err(|_| InvalidUpstream::new(addr, EXPECTED))?,
            (None, None) => return Err(InvalidUpstream::new(addr, EXPECTED)),
        };
        Ok(Self {
            authority,
            weight: 1,
            unix: None,
            tls,
        })
    }

    /// The share of requests this upstream gets relative to the others under
    /// `round_robin`, `random_two` and `hash`. Defaults to 1; 0 is taken as 1.
    #[must_use]
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight.max(1);
        self
    }

    /// `host:port`.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }
}

/// `addr` without `scheme`, which is matched case-insensitively.
fn strip_scheme<'a>(addr: &'a str, scheme: &str) -> Option<&'a str> {
    let head = addr.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme)
        .then(|| &addr[scheme.len()..])
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.unix {
            Some(path) => write!(f, "unix:{}", path.display()),
            None if self.tls => write!(f, "https://{}", self.authority),
            None => f.write_str(self.authority.as_str()),
        }
    }
}

/// What every worker knows about one upstream: its address, in-flight count and health.
/// Shared across workers (atomics), so a failure seen by one worker steers the others.
#[derive(Debug)]
pub(crate) struct UpstreamState {
    pub(crate) upstream: Upstream,
    /// Requests sent to this upstream and not yet answered (head received or failed),
    /// across all workers: `least_conn` reads it.
    pub(crate) in_flight: AtomicUsize,
    pub(crate) health: Health,
    pub(crate) metrics: UpstreamMetrics,
}

impl UpstreamState {
    pub(crate) fn new(upstream: Upstream) -> Self {
        let metrics = UpstreamMetrics::new(upstream.authority.as_str());
        Self {
            upstream,
            in_flight: AtomicUsize::new(0),
            health: Health::new(),
            metrics,
        }
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// One upstream as the workers see it at a moment: for a status page, read from the
/// shared state (atomics) without touching the request path.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct UpstreamStatus<'a> {
    /// The upstream as configured.
    pub upstream: &'a Upstream,
    /// Whether it takes requests now: actively up (always, without active checks) and not
    /// in a passive cool-down.
    pub up: bool,
    /// Requests sent to it and not yet answered with a response head, across all workers.
    pub in_flight: usize,
}

impl<'a> UpstreamStatus<'a> {
    pub(crate) fn of(state: &'a UpstreamState, now: std::time::Instant) -> Self {
        Self {
            upstream: &state.upstream,
            up: state.health.is_available(now),
            in_flight: state.in_flight(),
        }
    }
}

/// Counts a request as in flight to an upstream until dropped.
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    pub(crate) fn start(state: &'a UpstreamState) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(&state.in_flight)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_are_host_and_port() {
        assert_eq!(
            Upstream::new("127.0.0.1:8081").unwrap().to_string(),
            "127.0.0.1:8081"
        );
        assert_eq!(
            Upstream::new("[::1]:80").unwrap().authority().port_u16(),
            Some(80)
        );
        assert_eq!(Upstream::new("app.internal:3000").unwrap().weight, 1);
        assert_eq!(Upstream::new("a:1").unwrap().weight(0).weight, 1);
        // URLs name the same upstreams; port 80 when an http:// URL has none.
        for (url, authority) in [
            ("http://127.0.0.1:4000", "127.0.0.1:4000"),
            ("HTTP://app.internal:3000/", "app.internal:3000"),
            ("http://app.internal", "app.internal:80"),
            ("http://[::1]:8080", "[::1]:8080"),
            ("https://api.internal", "https://api.internal:443"),
            ("HTTPS://api.internal:8443/", "https://api.internal:8443"),
        ] {
            assert_eq!(Upstream::new(url).unwrap().to_string(), authority, "{url}");
        }
        for (bad, why) in [
            ("https://a:443/x", "has a path"),
            ("http://a:1/api", "has a path"),
            ("http://user@a:1", "has a user name"),
            ("127.0.0.1", "is not host:port"),
        ] {
            let e = Upstream::new(bad).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        for bad in [
            "127.0.0.1",
            "http://",
            "ftp://a:1",
            "a:1/x",
            "user@a:1",
            ":80",
            "",
            "a:b",
        ] {
            assert!(Upstream::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn status_shows_in_flight_requests_and_a_cool_down_as_down() {
        let state = UpstreamState::new(Upstream::new("127.0.0.1:9").unwrap());
        let now = std::time::Instant::now();
        let status = UpstreamStatus::of(&state, now);
        assert!(status.up);
        assert_eq!(
            (status.in_flight, status.upstream.to_string()),
            (0, "127.0.0.1:9".into())
        );

        let (a, b) = (InFlight::start(&state), InFlight::start(&state));
        assert_eq!(UpstreamStatus::of(&state, now).in_flight, 2);
        drop((a, b));
        assert_eq!(UpstreamStatus::of(&state, now).in_flight, 0);

        let policy = crate::PassiveHealth::new().max_fails(1);
        state.health.record_failure(now, &policy, &state.metrics);
        assert!(!UpstreamStatus::of(&state, now).up);
        // Up again once the cool-down is over, whether or not anything settled it.
        let later = now + policy.fail_timeout + std::time::Duration::from_millis(1);
        assert!(UpstreamStatus::of(&state, later).up);
    }
}
