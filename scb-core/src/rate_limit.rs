//! Rate limits per client: a token bucket per key, `429 Too Many Requests` with
//! `Retry-After` over it.
//!
//! [`RateLimitLayer`] keys each request by its client address (through
//! [`TrustedProxies`], as `X-Forwarded-For` is read everywhere in scb) or by a header's
//! value, and lets through `rate` requests per period on average with bursts of up to
//! `burst` at once. The bucket is the generic cell rate algorithm (GCRA): one timestamp per
//! key, the time at which its bucket is full again, so a check is a lookup, a comparison
//! and a store.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::rate_limit::{Rate, RateLimitLayer};
//! use scb_core::respond::Respond;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let layer = RateLimitLayer::new("2/s".parse::<Rate>().unwrap()).burst(2);
//! // Clones share the table (here every request has the same key: no peer is known).
//! let api = layer.layer(Respond::new(StatusCode::OK));
//! let get = || Request::get("/api/").body(Body::empty()).unwrap();
//! assert_eq!(api.clone().oneshot(get()).await.unwrap().status(), StatusCode::OK);
//! assert_eq!(api.clone().oneshot(get()).await.unwrap().status(), StatusCode::OK);
//! let refused = api.oneshot(get()).await.unwrap();
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "1");
//! # }
//! ```
//!
//! # Shared, and bounded
//!
//! One table serves every worker (and every clone of the layer): a client's connections
//! land on workers by the kernel's hash of their ports, so a per-worker table would give
//! a client `workers` times its rate. The table is split into shards, each behind its own
//! mutex, held for a lookup and a store; measured on the hot path in `bench/RESULTS.md`.
//!
//! An attacker with many addresses must not grow memory without end, so the table holds
//! at most [`max_keys`](RateLimitLayer::max_keys) keys. When a shard is full, the keys
//! whose buckets are full again are dropped first (they are the same as absent); if that
//! is not enough, a quarter of the shard is dropped. A dropped key that comes back starts
//! with a full bucket: under such a flood the limit fails open for some clients rather
//! than shutting out new ones. `scb_rate_limit_evicted_total` counts the keys dropped that
//! way.
//!
//! Keys are hashed with a per-process random key (SipHash), so a client cannot pick
//! values that collide with another client's bucket. IPv6 clients are keyed by their /64
//! network: one subscriber commonly holds a whole /64, and could otherwise have a fresh
//! bucket for every request. A request whose key is unknown (no peer address, or the
//! header absent when the key is a header; then the client address is used) shares one
//! bucket with its kind.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use rustc_hash::FxHashMap;
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::Body;
use crate::client_ip::{TrustedProxies, client_ip};
use crate::connection::ConnectInfo;

/// How many requests per period: `"10/s"`, `"600/m"`, `"1000/h"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    requests: u32,
    period: Duration,
}

impl Rate {
    /// `requests` per `period`; `None` when either is zero.
    pub fn new(requests: u32, period: Duration) -> Option<Self> {
        (requests > 0 && !period.is_zero()).then_some(Self { requests, period })
    }

    /// The number of requests per period.
    pub fn requests(&self) -> u32 {
        self.requests
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }
}

impl FromStr for Rate {
    type Err = InvalidRate;

    fn from_str(s: &str) -> Result<Self, InvalidRate> {
        let (count, unit) = s.split_once('/').ok_or(InvalidRate)?;
        let requests: u32 = count.trim().parse().map_err(|_| InvalidRate)?;
        let period = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(InvalidRate),
        };
        Self::new(requests, period).ok_or(InvalidRate)
    }
}

/// A rate that is not `N/s`, `N/m` or `N/h` with `N` at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a rate is `N/s`, `N/m` or `N/h`, with N a whole number from 1")]
pub struct InvalidRate;

/// What a request is counted by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateKey {
    /// The client's address (an IPv6 client's /64), through trusted proxies.
    #[default]
    ClientIp,
    /// The value of this request header (an API key, say); the client's address when the
    /// header is absent.
    Header(HeaderName),
}

/// How many shards the table has: enough that workers rarely meet on one lock.
const SHARDS: usize = 16;

/// The default bound on keys held (about 2 MiB at most).
const DEFAULT_MAX_KEYS: usize = 100_000;

struct Limiter {
    /// Nanoseconds per request at the rate (the GCRA's emission interval).
    interval: u64,
    /// How far ahead of now a key's bucket may run: `burst` intervals.
    tolerance: u64,
    key: RateKey,
    trusted: TrustedProxies,
    hasher: std::hash::RandomState,
    per_shard: usize,
    shards: Box<[Mutex<Shard>]>,
    epoch: Instant,
}

#[derive(Default)]
struct Shard {
    /// Key hash to the time, in nanoseconds from `epoch`, at which the key's bucket is
    /// full again (its "theoretical arrival time").
    full_at: FxHashMap<u64, u64>,
}

impl Limiter {
    fn new(rate: Rate, burst: u32, max_keys: usize, key: RateKey, trusted: TrustedProxies) -> Self {
        let interval = u64::try_from(rate.period.as_nanos() / u128::from(rate.requests))
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst.max(1))),
            key,
            trusted,
            hasher: std::hash::RandomState::new(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            epoch: Instant::now(),
        }
    }

    fn key_of<B>(&self, req: &Request<B>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        if let RateKey::Header(name) = &self.key
            && let Some(value) = req.headers().get(name)
        {
            hasher.write_u8(2);
            hasher.write(value.as_bytes());
            return hasher.finish();
        }
        match req.extensions().get::<ConnectInfo>() {
            Some(info) => {
                match client_ip(info.remote.ip(), req.headers(), &self.trusted).to_canonical() {
                    IpAddr::V4(ip) => {
                        hasher.write_u8(4);
                        hasher.write_u32(ip.to_bits());
                    }
                    IpAddr::V6(ip) => {
                        hasher.write_u8(6);
                        hasher.write_u64((ip.to_bits() >> 64) as u64);
                    }
                }
            }
            None => hasher.write_u8(0),
        }
        hasher.finish()
    }

    /// Takes a token for `key`; when there is none, how long until there is.
    fn check(&self, key: u64) -> Result<(), Duration> {
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // The high bits pick the shard: the map hashes with the low ones.
        let shard = &self.shards[(key >> 60) as usize % SHARDS];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let full_at = shard.full_at.get(&key).map_or(now, |&t| t.max(now));
        let next = full_at.saturating_add(self.interval);
        if next - now > self.tolerance {
            return Err(Duration::from_nanos(next - now - self.tolerance));
        }
        if shard.full_at.len() >= self.per_shard && !shard.full_at.contains_key(&key) {
            shard.make_room(now, self.per_shard);
        }
        shard.full_at.insert(key, next);
        Ok(())
    }
}

impl Shard {
    /// Drops keys whose buckets are full again; then, if the shard is still more than
    /// three quarters full, arbitrary keys down to that (the keys are hashes, so which
    /// ones is not up to a client). Each call frees a quarter of the shard at least, so
    /// the cost per new key stays constant on average.
    fn make_room(&mut self, now: u64, capacity: usize) {
        self.full_at.retain(|_, full_at| *full_at > now);
        let keep = capacity - capacity / 4;
        let excess = self.full_at.len().saturating_sub(keep);
        if excess > 0 {
            let dropped: Vec<u64> = self.full_at.keys().take(excess).copied().collect();
            for key in &dropped {
                self.full_at.remove(key);
            }
            metrics::counter!("scb_rate_limit_evicted_total").increment(dropped.len() as u64);
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("interval_ns", &self.interval)
            .field("tolerance_ns", &self.tolerance)
            .field("key", &self.key)
            .field("per_shard", &self.per_shard)
            .finish_non_exhaustive()
    }
}

/// Applies [`RateLimit`] to a service. Clones share one table.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    rate: Rate,
    burst: u32,
    max_keys: usize,
    key: RateKey,
    trusted: TrustedProxies,
    limiter: Arc<Limiter>,
}

impl RateLimitLayer {
    /// `rate` per client address, bursts of one period's worth.
    pub fn new(rate: Rate) -> Self {
        let burst = rate.requests;
        Self {
            rate,
            burst,
            max_keys: DEFAULT_MAX_KEYS,
            key: RateKey::ClientIp,
            trusted: TrustedProxies::default(),
            limiter: Arc::new(Limiter::new(
                rate,
                burst,
                DEFAULT_MAX_KEYS,
                RateKey::ClientIp,
                TrustedProxies::default(),
            )),
        }
    }

    fn rebuilt(mut self) -> Self {
        self.limiter = Arc::new(Limiter::new(
            self.rate,
            self.burst,
            self.max_keys,
            self.key.clone(),
            self.trusted.clone(),
        ));
        self
    }

    /// How many requests a client may make at once after a pause (at least 1). Defaults
    /// to the rate's count: `10/s` allows 10 at once.
    #[must_use]
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst.max(1);
        self.rebuilt()
    }

    /// What requests are counted by. Defaults to [`RateKey::ClientIp`].
    #[must_use]
    pub fn key(mut self, key: RateKey) -> Self {
        self.key = key;
        self.rebuilt()
    }

    /// The most keys the table holds; see the [module documentation](self). Defaults to
    /// 100,000.
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self.rebuilt()
    }

    /// Whose `X-Forwarded-For` names the client. Defaults to nobody's.
    #[must_use]
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.trusted = trusted;
        self.rebuilt()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: Arc::clone(&self.limiter),
        }
    }
}

/// Answers 429 to clients over their rate; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

impl<S, ReqB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let key = self.limiter.key_of(&req);
        match self.limiter.check(key) {
            Ok(()) => ResponseFuture::admitted(self.inner.call(req)),
            Err(wait) => {
                let mut res = crate::respond::reason(StatusCode::TOO_MANY_REQUESTS);
                // Whole seconds, rounded up: a client that waits that long gets a token.
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                res.headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
                ResponseFuture::refused(res)
            }
        }
    }
}

/// Response future of [`RateLimit`]: the inner service's, or the 429.
pub type ResponseFuture<F> = crate::admission::ResponseFuture<F>;

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;
    use crate::respond::Respond;

    fn request(peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
        let mut req = Request::get("/api/");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let mut req = req.body(Body::empty()).unwrap();
        req.extensions_mut().insert(ConnectInfo {
            remote: format!("{peer}:5000").parse().unwrap(),
            local: "127.0.0.1:80".parse().unwrap(),
            secure: false,
        });
        req
    }

    async fn status(layer: &RateLimitLayer, req: Request<Body>) -> (StatusCode, Option<String>) {
        let res = layer
            .layer(Respond::new(StatusCode::OK))
            .oneshot(req)
            .await
            .unwrap();
        let retry = res
            .headers()
            .get(RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        (res.status(), retry)
    }

    fn rate(s: &str) -> Rate {
        s.parse().unwrap()
    }

    #[test]
    fn rates_parse_and_bad_ones_are_refused() {
        assert_eq!(rate("10/s"), Rate::new(10, Duration::from_secs(1)).unwrap());
        assert_eq!(rate("600/m").period(), Duration::from_secs(60));
        assert_eq!(rate(" 5 / h ").requests(), 5);
        for bad in ["", "10", "0/s", "-1/s", "10/d", "1.5/s", "ten/s", "10/"] {
            assert_eq!(bad.parse::<Rate>(), Err(InvalidRate), "{bad}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_passes_then_429_with_retry_after_until_a_token_comes_back() {
        let layer = RateLimitLayer::new(rate("10/s")).burst(3);
        for _ in 0..3 {
            assert_eq!(
                status(&layer, request("192.0.2.1", &[])).await.0,
                StatusCode::OK
            );
        }
        let (refused, retry) = status(&layer, request("192.0.2.1", &[])).await;
        assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry.as_deref(), Some("1"));
        // Another client has its own bucket.
        assert_eq!(
            status(&layer, request("192.0.2.2", &[])).await.0,
            StatusCode::OK
        );
        // One interval (100 ms) gives one token back, not more.
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        // A refused request takes no token: after a full period the burst is whole again.
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..3 {
            assert_eq!(
                status(&layer, request("192.0.2.1", &[])).await.0,
                StatusCode::OK
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_rounds_the_wait_up_to_whole_seconds() {
        let layer = RateLimitLayer::new(rate("1/m")).burst(1);
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
        tokio::time::advance(Duration::from_millis(500)).await;
        let (refused, retry) = status(&layer, request("192.0.2.1", &[])).await;
        assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(retry.as_deref(), Some("60"));
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_the_forwarded_client_the_v6_slash_64_or_a_header() {
        let trusted = TrustedProxies::new(["127.0.0.1"]).unwrap();
        let layer = RateLimitLayer::new(rate("1/s"))
            .burst(1)
            .trusted_proxies(trusted);
        let via_proxy = |client: &str| request("127.0.0.1", &[("x-forwarded-for", client)]);
        assert_eq!(
            status(&layer, via_proxy("203.0.113.1")).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, via_proxy("203.0.113.2")).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, via_proxy("203.0.113.1")).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        // An untrusted peer's claim is ignored: it is counted as itself.
        let forged = request("198.51.100.1", &[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(status(&layer, forged).await.0, StatusCode::OK);
        let forged = request("198.51.100.1", &[("x-forwarded-for", "203.0.113.10")]);
        assert_eq!(
            status(&layer, forged).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        // Two addresses of one /64 share a bucket; another /64 does not.
        assert_eq!(
            status(&layer, request("[2001:db8:1:1::1]", &[])).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, request("[2001:db8:1:1::2]", &[])).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status(&layer, request("[2001:db8:1:2::1]", &[])).await.0,
            StatusCode::OK
        );

        let by_key = RateLimitLayer::new(rate("1/s"))
            .burst(1)
            .key(RateKey::Header(HeaderName::from_static("x-api-key")));
        let keyed = |peer: &str, key: &str| request(peer, &[("x-api-key", key)]);
        assert_eq!(
            status(&by_key, keyed("192.0.2.1", "a")).await.0,
            StatusCode::OK
        );
        // Same key from elsewhere: limited; another key from the same address: not.
        assert_eq!(
            status(&by_key, keyed("192.0.2.2", "a")).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status(&by_key, keyed("192.0.2.1", "b")).await.0,
            StatusCode::OK
        );
        // Without the header, the address is the key.
        assert_eq!(
            status(&by_key, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&by_key, request("192.0.2.1", &[])).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_addresses_stays_within_the_bound_and_spares_nobody_new() {
        let layer = RateLimitLayer::new(rate("1/m")).burst(1).max_keys(64);
        // 10,000 distinct clients, each within its first token: the table never holds
        // more than its bound, and every new client is served (the limit fails open for
        // dropped keys rather than shutting newcomers out).
        for i in 0..10_000u32 {
            let peer = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            assert_eq!(status(&layer, request(&peer, &[])).await.0, StatusCode::OK);
            let held: usize = layer
                .limiter
                .shards
                .iter()
                .map(|s| s.lock().unwrap().full_at.len())
                .sum();
            assert!(held <= 64, "{held} keys held");
        }
        // A client that keeps coming is still limited between floods.
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    #[tokio::test(start_paused = true)]
    async fn clones_of_the_layer_and_services_share_one_table() {
        let layer = RateLimitLayer::new(rate("1/s")).burst(1);
        let other_worker = layer.clone();
        assert_eq!(
            status(&layer, request("192.0.2.1", &[])).await.0,
            StatusCode::OK
        );
        assert_eq!(
            status(&other_worker, request("192.0.2.1", &[])).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
    }

    #[test]
    fn service_is_send_and_sync_and_future_send() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<RateLimit<Respond>>();
        send::<ResponseFuture<<Respond as Service<Request<Body>>>::Future>>();
    }
}
