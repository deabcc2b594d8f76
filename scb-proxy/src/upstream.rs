//! The upstreams of one proxy, and the state every worker shares about each of them.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::uri::Authority;

use crate::health::Health;
use crate::metrics::UpstreamMetrics;

/// One upstream server as configured: `host:port` and a weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    pub(crate) authority: Authority,
    pub(crate) weight: u32,
}

/// An upstream address that is not `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("upstream {0:?} is not host:port")]
pub struct InvalidUpstream(pub(crate) String);

impl Upstream {
    /// An upstream at `host:port` (`127.0.0.1:8081`, `[::1]:8081`, `app.internal:80`) with
    /// weight 1.
    ///
    /// # Errors
    ///
    /// When `addr` is not a host and a port.
    pub fn new(addr: &str) -> Result<Self, InvalidUpstream> {
        let authority: Authority = addr.parse().map_err(|_| InvalidUpstream(addr.to_owned()))?;
        if authority.port_u16().is_none() || authority.host().is_empty() || addr.contains('@') {
            return Err(InvalidUpstream(addr.to_owned()));
        }
        Ok(Self {
            authority,
            weight: 1,
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

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.authority.as_str())
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
        for bad in [
            "127.0.0.1",
            "http://a:1",
            "a:1/x",
            "user@a:1",
            ":80",
            "",
            "a:b",
        ] {
            assert!(Upstream::new(bad).is_err(), "{bad}");
        }
    }
}
