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
//! # Shared across a fleet
//!
//! With [`shared`](RateLimitLayer::shared) the buckets live in a store every instance
//! counts in (Redis, through [`Cluster`](crate::cluster::Cluster) with the `cluster`
//! feature), so a limit of 10/s is 10/s across three instances, not 30. Each instance
//! takes tokens from the store in small batches and spends them locally, remembers a
//! refusal until the store's wait is over, and counts in its own table when the store
//! cannot be reached (see the `shared` module source for the figures).
//!
//! Keys are hashed with a per-process random key (SipHash), so a client cannot pick
//! values that collide with another client's bucket. IPv6 clients are keyed by their /64
//! network: one subscriber commonly holds a whole /64, and could otherwise have a fresh
//! bucket for every request. A request whose key is unknown (no peer address, or the
//! header absent when the key is a header; then the client address is used) shares one
//! bucket with its kind.

mod future;
mod local;
mod shared;

use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::Body;
use crate::client_ip::TrustedProxies;
use local::{DEFAULT_MAX_KEYS, Limiter};
use shared::{Allowances, Spend};

pub use future::ResponseFuture;
pub use shared::{SharedBuckets, SharedUnavailable, TakeFuture, Taken};

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

/// The layer's tables: the local one, and where the limit is shared, the store and the
/// local allowances of it.
#[derive(Debug)]
pub(super) struct Limits {
    local: Limiter,
    shared: Option<Shared>,
}

#[derive(Debug)]
struct Shared {
    buckets: Arc<dyn SharedBuckets>,
    /// What the keys of this limit start with in the store: the route's name.
    name: String,
    allowances: Allowances,
    batch: u32,
    /// How long a batch of tokens stays good: a second. Tokens come out of the shared
    /// bucket when taken, so holding them does not let the fleet admit more; the bound
    /// only keeps an instance from spending a slow limit's tokens long after (at high
    /// rates the time a batch stands for is nanoseconds, and would void every batch).
    valid: Duration,
}

/// What a request meets.
enum Decision {
    Admit,
    /// Admitted; the next batch is to be asked for in the background.
    AdmitAndRefill(TakeFuture),
    Refuse(Duration),
    Ask(TakeFuture),
}

impl Limits {
    fn decide<B>(&self, key: u64, req: &Request<B>) -> Decision {
        let Some(shared) = &self.shared else {
            return match self.local.check(key) {
                Ok(()) => Decision::Admit,
                Err(wait) => Decision::Refuse(wait),
            };
        };
        let take = || {
            shared.buckets.take(
                format!("{}:{}", shared.name, self.local.key_text(req)),
                Duration::from_nanos(self.local.interval),
                Duration::from_nanos(self.local.tolerance),
                shared.batch,
            )
        };
        match shared.allowances.spend(key, self.local.now(), shared.batch) {
            Spend::Admit => Decision::Admit,
            Spend::AdmitAndRefill => Decision::AdmitAndRefill(take()),
            Spend::Refuse(wait) => Decision::Refuse(wait),
            Spend::Ask => Decision::Ask(take()),
        }
    }

    /// Records a background refill's answer for `key`.
    fn after_refill(&self, key: u64, answer: Result<Taken, SharedUnavailable>) {
        let Some(shared) = &self.shared else {
            return;
        };
        match answer {
            Ok(taken) => {
                shared
                    .allowances
                    .record(key, self.local.now(), taken, shared.valid, false);
            }
            Err(SharedUnavailable) => shared.allowances.refill_failed(key),
        }
    }

    /// What the store's `answer` means for the request of `key`; without an answer, the
    /// local table decides.
    pub(super) fn after_take(
        &self,
        key: u64,
        answer: Result<Taken, SharedUnavailable>,
    ) -> Result<(), Duration> {
        let (Some(shared), Ok(taken)) = (&self.shared, answer) else {
            return self.local.check(key);
        };
        shared
            .allowances
            .record(key, self.local.now(), taken, shared.valid, true);
        if taken.granted > 0 {
            Ok(())
        } else {
            Err(taken.wait.max(Duration::from_millis(1)))
        }
    }
}

/// The 429 for a client that may try again after `wait`.
pub(super) fn refusal(wait: Duration) -> Response<Body> {
    let mut res = crate::respond::reason(StatusCode::TOO_MANY_REQUESTS);
    // Whole seconds, rounded up: a client that waits that long gets a token.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    res.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    res
}

/// Applies [`RateLimit`] to a service. Clones share one table.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    rate: Rate,
    burst: u32,
    max_keys: usize,
    key: RateKey,
    trusted: TrustedProxies,
    shared: Option<(Arc<dyn SharedBuckets>, String)>,
    limits: Arc<Limits>,
}

impl RateLimitLayer {
    /// `rate` per client address, bursts of one period's worth.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            burst: rate.requests,
            max_keys: DEFAULT_MAX_KEYS,
            key: RateKey::ClientIp,
            trusted: TrustedProxies::default(),
            shared: None,
            limits: Arc::new(Limits {
                local: Limiter::new(
                    rate,
                    rate.requests,
                    DEFAULT_MAX_KEYS,
                    RateKey::ClientIp,
                    TrustedProxies::default(),
                ),
                shared: None,
            }),
        }
    }

    fn rebuilt(mut self) -> Self {
        let local = Limiter::new(
            self.rate,
            self.burst,
            self.max_keys,
            self.key.clone(),
            self.trusted.clone(),
        );
        let shared = self.shared.as_ref().map(|(buckets, name)| {
            let batch = shared::batch(self.burst);
            Shared {
                buckets: Arc::clone(buckets),
                name: name.clone(),
                allowances: Allowances::new(local.per_shard),
                batch,
                valid: Duration::from_secs(1),
            }
        });
        self.limits = Arc::new(Limits { local, shared });
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

    /// Counts in `buckets`, shared by every instance of a fleet, under `name` (a route's
    /// name: limits of one name are one limit across the fleet), with a local allowance
    /// and the local table as the fallback when the store is away; see
    /// [`shared`](self#shared-across-a-fleet). Defaults to counting in this process only.
    #[must_use]
    pub fn shared(mut self, buckets: Arc<dyn SharedBuckets>, name: impl Into<String>) -> Self {
        self.shared = Some((buckets, name.into()));
        self.rebuilt()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limits: Arc::clone(&self.limits),
        }
    }
}

/// Answers 429 to clients over their rate; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    limits: Arc<Limits>,
}

impl<S, ReqB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<Body>> + Clone,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let key = self.limits.local.key_of(&req);
        match self.limits.decide(key, &req) {
            Decision::Admit => ResponseFuture::decided(crate::admission::ResponseFuture::admitted(
                self.inner.call(req),
            )),
            Decision::AdmitAndRefill(take) => {
                let limits = Arc::clone(&self.limits);
                // Its own task: the request does not wait for it.
                tokio::spawn(async move { limits.after_refill(key, take.await) });
                ResponseFuture::decided(crate::admission::ResponseFuture::admitted(
                    self.inner.call(req),
                ))
            }
            Decision::Refuse(wait) => {
                ResponseFuture::decided(crate::admission::ResponseFuture::refused(refusal(wait)))
            }
            Decision::Ask(take) => {
                // The readied service goes with the request; a clone takes its place.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::taking(take, inner, req, key, Arc::clone(&self.limits))
            }
        }
    }
}

#[cfg(test)]
mod tests;
