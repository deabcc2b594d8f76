//! A shared HTTP cache (RFC 9111) in front of any service: [`CacheLayer`].
//!
//! What may be stored and for how long is decided once, when a response is stored
//! (`policy.rs`, which says why it is not `http-cache-semantics`): Cache-Control
//! (`no-store`, `private` and `no-cache` with or without field names, `public`, `max-age`,
//! `s-maxage`, `must-revalidate`, `proxy-revalidate`, `must-understand`), Surrogate-Control
//! (`max-age`, `no-store`), `Expires` in any HTTP-date form, the apparent age from `Date`
//! and the `Age` received, heuristic freshness (10% of the time since `Last-Modified`, at
//! most a day) for the statuses RFC 9110 lets be cached so, `Authorization`, `Vary`, and
//! the request's directives (`no-cache`, `no-store`, `max-age`, `max-stale`, `min-fresh`,
//! `only-if-cached`, `stale-if-error`, and `Pragma: no-cache` without Cache-Control).
//! Conformance, measured with mnot's cache tests (`cargo xtask cache-tests`): 282 of 355
//! passing, 155 of the 168 the suite marks required; nginx 1.22's `proxy_cache` run the
//! same way, 186 and 100.
//!
//! ```
//! use http::{HeaderValue, Request, StatusCode, header};
//! use scb_core::Body;
//! use scb_core::respond::Respond;
//! use scb_proxy::cache::CacheLayer;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let origin = Respond::new(StatusCode::OK)
//!     .header(header::CACHE_CONTROL, HeaderValue::from_static("max-age=60"))
//!     .body("hello");
//! let svc = ServiceBuilder::new()
//!     .layer(CacheLayer::new(64 << 20))
//!     .service(origin);
//! let get = || Request::get("/").header("host", "example.com").body(Body::empty()).unwrap();
//!
//! let first = svc.clone().oneshot(get()).await.unwrap();
//! assert_eq!(first.headers()["cache-status"], "scb; fwd=uri-miss; stored");
//! http_body_util::BodyExt::collect(first.into_body()).await.unwrap();
//! let second = svc.oneshot(get()).await.unwrap();
//! assert_eq!(second.headers()["cache-status"], "scb; hit");
//! # }
//! ```
//!
//! Responses:
//!
//! - a hit is answered from memory with `Age` and `Cache-Status: scb; hit`; a HEAD is
//!   answered from a stored GET; the client's preconditions (304, 412) and ranges (206,
//!   multipart for several, 416) are answered from the stored response, by the rules
//!   static files follow ([`scb_core::conditional`], [`scb_core::range`]); a miss asks
//!   the inner service for the whole representation (without the client's
//!   `If-None-Match`, `If-Modified-Since`, `Range`, `If-Range`) so that it can be stored;
//! - a miss goes to the inner service and, when storable, is stored as its body reaches
//!   the client (`Cache-Status: scb; fwd=uri-miss; stored`, or `fwd=vary-miss` when only
//!   another variant was stored); a body that fails, has trailers or is larger than
//!   [`max_object`](CacheLayer::max_object) is not stored;
//! - a stale response is revalidated with a conditional request; a 304 refreshes the
//!   stored head and the stored body is answered (`fwd=stale; fwd-status=304`);
//! - concurrent misses and revalidations of one key are collapsed: one goes upstream, the
//!   others wait for it (at most [`collapse_timeout`](CacheLayer::collapse_timeout)) and
//!   answer from what it stored;
//! - within its `stale-while-revalidate` window a stale response is answered at once and
//!   refreshed in the background (`Cache-Status: scb; hit; detail=stale-while-revalidate`);
//! - within its `stale-if-error` window (or the request's, or
//!   [`stale_if_error`](CacheLayer::stale_if_error)) a stale response is answered when the
//!   upstream fails or answers 5xx (`fwd=stale; fwd-status=503; detail=stale-if-error`);
//!   `must-revalidate`, `proxy-revalidate`, `no-cache` and `s-maxage` forbid both;
//! - `Cache-Control: only-if-cached` without a usable response gets 504;
//! - a successful unsafe request (POST, PUT, DELETE, PATCH, ...) drops what is stored for
//!   its URI (RFC 9111 4.4);
//! - an answer that sets a cookie is stored only if it is `public`, and then without the
//!   `Set-Cookie`: the client that caused the store gets it, no other does;
//! - metrics per route ([`route`](CacheLayer::route)): answers by result, bytes stored,
//!   evictions.
//!
//! - [`purge`](CacheLayer::purge) drops responses by path or prefix (and host); a fill
//!   it overtakes does not store.
//!
//! - the key is the request's scheme, host, path and query, or what a template
//!   ([`key`](CacheLayer::key)) makes of them;
//! - the store is shared by every clone (every worker), bounded in bytes, and evicts by
//!   S3-FIFO ([`quick_cache`]): an object asked for once leaves before one asked for
//!   again, so a scan does not flush the hot set; a hit holds no lock across I/O;
//! - a body of 64 KiB or more is held in a sealed memory file, and a hit answers with a
//!   [`FileRegion`](scb_core::FileRegion) of it that scb's HTTP/1.1 server sends with
//!   `sendfile` (other servers read it like a file).
//!
//! - with [`disk`](CacheLayer::disk), stored responses are written to files too (by a
//!   thread of the store's, to a temporary name and renamed), survive a restart, and a
//!   large one is sent from its file; a directory that cannot be written leaves the
//!   cache in memory with one log line.

mod answer;
mod directives;
mod disk;
mod exchange;
mod fill;
mod key;
mod metrics;
mod policy;
mod sizing;
mod store;
mod stored;
mod tee;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt as _;
use http::{Request, Response};
use scb_core::Body;
use tower::{Layer, Service};

use exchange::Exchange;
use fill::Fills;
pub use key::KeyTemplateError;
use key::Keying;
pub use metrics::{CACHE_BYTES, CACHE_DISK_BYTES, CACHE_EVICTIONS_TOTAL, CACHE_REQUESTS_TOTAL};
use store::{Shape, Store};

/// Puts a [`Cache`] in front of a service; clones share one store.
#[derive(Clone, Debug)]
pub struct CacheLayer {
    shared: Arc<Shared>,
    settings: Settings,
}

/// What every clone of a cache shares: the stored responses and the fills in progress.
#[derive(Debug)]
struct Shared {
    store: Arc<Store>,
    fills: Arc<Fills>,
}

/// The layer's settings, copied into each exchange.
#[derive(Clone, Copy, Debug)]
struct Settings {
    max_object: usize,
    collapse_timeout: Duration,
    stale_if_error: Duration,
}

const DEFAULT_MAX_OBJECT: usize = 64 << 20;
const DEFAULT_COLLAPSE_TIMEOUT: Duration = Duration::from_secs(5);

impl CacheLayer {
    /// A cache of at most `max_bytes` of stored responses (bodies and an estimate of
    /// their heads). Eviction is S3-FIFO (see `store.rs`): an object asked for once
    /// leaves before one asked for again, so a scan does not flush the hot set.
    pub fn new(max_bytes: u64) -> Self {
        let max_object = usize::try_from(max_bytes / 8)
            .unwrap_or(usize::MAX)
            .min(DEFAULT_MAX_OBJECT);
        let shape = Shape {
            max_bytes,
            max_object: max_object as u64,
            keying: Keying::Url,
            disk: None,
        };
        Self {
            shared: Self::shared(shape, "cache".into()),
            settings: Settings {
                max_object,
                collapse_timeout: DEFAULT_COLLAPSE_TIMEOUT,
                stale_if_error: Duration::ZERO,
            },
        }
    }

    fn shared(shape: Shape, route: ::metrics::SharedString) -> Arc<Shared> {
        Arc::new(Shared {
            store: Arc::new(Store::new(shape, route)),
            fills: Arc::default(),
        })
    }

    /// A new, empty store of `shape` with `route`.
    fn rebuilt(mut self, shape: Shape, route: ::metrics::SharedString) -> Self {
        self.shared = Self::shared(shape, route);
        self
    }

    /// The `route` label of the cache's metrics ([`CACHE_REQUESTS_TOTAL`] by `result`,
    /// [`CACHE_BYTES`], [`CACHE_EVICTIONS_TOTAL`]). Defaults to `cache`. It starts a new,
    /// empty store: call it while building the layer, before any clone is in use.
    #[must_use]
    pub fn route(self, route: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        let route = match route.into() {
            std::borrow::Cow::Borrowed(s) => ::metrics::SharedString::from(s),
            std::borrow::Cow::Owned(s) => ::metrics::SharedString::from(Arc::<str>::from(s)),
        };
        let shape = self.shared.store.shape().clone();
        self.rebuilt(shape, route)
    }

    /// Stores responses under what `template` makes of the request's URL, rather than
    /// the whole URL (scheme, host, path and query): `{host}{path}` shares one response
    /// between every query of a path. The placeholders are `{scheme}`, `{host}`,
    /// `{path}` (required) and `{query}`; see the table in `key.rs`. A purge still names
    /// the URLs responses were fetched for. Like [`route`](Self::route), it starts a new,
    /// empty store: call it while building the layer.
    ///
    /// # Errors
    ///
    /// An unknown placeholder, or no `{path}`.
    pub fn key(self, template: &str) -> Result<Self, KeyTemplateError> {
        let keying = Keying::template(template)?;
        let shape = Shape {
            keying,
            ..self.shared.store.shape().clone()
        };
        let route = self.shared.store.route();
        Ok(self.rebuilt(shape, route))
    }

    /// This layer with the store of `previous` (and its fills in progress) when both have
    /// the same `max_bytes`, `max_object`, key template and disk tier, so that a reload keeps what
    /// was stored and a fill begun before it is waited for after it; otherwise unchanged
    /// (a new bound or key starts empty). The other settings stay this layer's own.
    #[must_use]
    pub fn keep_store_of(mut self, previous: &CacheLayer) -> Self {
        if previous.shared.store.shape() == self.shared.store.shape() {
            self.shared = Arc::clone(&previous.shared);
        }
        self
    }

    /// Drops the stored responses of `host` (any host when `None`) whose path and query
    /// are `target` exactly or, with `prefix`, begin with it, and returns how many were
    /// dropped. A fill in progress when the purge comes does not store what it reads.
    pub fn purge(&self, host: Option<&str>, target: &str, prefix: bool) -> usize {
        self.shared.store.purge(host, target, prefix)
    }

    /// The largest body stored; larger ones stream through unstored. Defaults to 64 MiB,
    /// or an eighth of `max_bytes` if that is less (one object cannot take the cache).
    /// Like [`route`](Self::route), it starts a new, empty store (sized so that such an
    /// object fits): call it while building the layer.
    #[must_use]
    pub fn max_object(mut self, bytes: usize) -> Self {
        self.settings.max_object = bytes;
        let shape = Shape {
            max_object: bytes as u64,
            ..self.shared.store.shape().clone()
        };
        let route = self.shared.store.route();
        self.rebuilt(shape, route)
    }

    /// Keeps stored responses on disk too, in files under `path` (made if missing), at
    /// most `max_bytes` of them: they survive a restart, more can be kept than memory
    /// holds, and a large hit is sent from its file (with `sendfile` on plain HTTP/1.1).
    /// Writes are made by a thread of the store's, never by a request; when `path` cannot
    /// be written the cache logs one line and goes on from memory. Two stores must not
    /// share a `path`. Defaults to none: memory only. Like [`route`](Self::route), it
    /// starts a new, empty store: call it while building the layer. See `disk/mod.rs`.
    #[must_use]
    pub fn disk(self, path: impl Into<std::path::PathBuf>, max_bytes: u64) -> Self {
        let shape = Shape {
            disk: Some(disk::DiskShape {
                path: path.into(),
                max_bytes,
            }),
            ..self.shared.store.shape().clone()
        };
        let route = self.shared.store.route();
        self.rebuilt(shape, route)
    }

    /// How long a request waits for another that is fetching the same key before it
    /// goes upstream itself. Defaults to 5 seconds (nginx's `proxy_cache_lock_timeout`).
    #[must_use]
    pub fn collapse_timeout(mut self, timeout: Duration) -> Self {
        self.settings.collapse_timeout = timeout;
        self
    }

    /// How long past its freshness a stored response may be answered when the upstream
    /// fails or answers 5xx, for responses that do not say (`stale-if-error`). Defaults to
    /// zero: only what the response or the request allows.
    #[must_use]
    pub fn stale_if_error(mut self, window: Duration) -> Self {
        self.settings.stale_if_error = window;
        self
    }
}

impl<S> Layer<S> for CacheLayer {
    type Service = Cache<S>;

    fn layer(&self, inner: S) -> Cache<S> {
        self.shared.store.start();
        Cache {
            inner,
            shared: Arc::clone(&self.shared),
            settings: self.settings,
        }
    }
}

/// Answers what it may from stored responses and stores what it may; see the
/// [module documentation](self).
#[derive(Clone, Debug)]
pub struct Cache<S> {
    inner: S,
    shared: Arc<Shared>,
    settings: Settings,
}

/// Response future of [`Cache`]: boxed, as a miss and a revalidation both wait on the
/// inner service and then decide.
pub type ResponseFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

impl<S> Service<Request<Body>> for Cache<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The clone that was ready answers; a fresh clone is left in its place.
        let inner = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, inner);
        let store = Arc::clone(&self.shared.store);
        let exchange = Exchange {
            inner,
            store: Arc::clone(&store),
            fills: Arc::clone(&self.shared.fills),
            settings: self.settings,
        };
        // `map`, not an `async` block awaiting it: that would hold the exchange's future
        // twice (the captured one and the one awaited).
        Box::pin(exchange.run(req).map(move |res| {
            if let Ok(res) = &res {
                store.metrics().count(
                    res.headers()
                        .get(answer::CACHE_STATUS)
                        .map(http::HeaderValue::as_bytes),
                );
            }
            res
        }))
    }
}

#[cfg(test)]
mod disk_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
