//! A shared HTTP cache (RFC 9111) in front of any service: [`CacheLayer`].
//!
//! What may be stored and for how long is decided by the `http-cache-semantics` crate
//! (Kornel Lesiński's port of the policy behind npm's `http-cache-semantics`, which mnot's
//! cache tests exercise): Cache-Control (`no-store`, `private`, `public`, `max-age`,
//! `s-maxage`, `no-cache`, `must-revalidate`), `Expires`, heuristic freshness from
//! `Last-Modified`, `Authorization`, `Vary`, the request's own directives, and the
//! conditional request that revalidates a stale response. This layer adds what a policy
//! cannot: storing and finding responses, answering from them, and invalidating after
//! unsafe methods.
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
//!   answered from a stored GET;
//! - a miss goes to the inner service and, when storable, is stored as its body reaches
//!   the client (`Cache-Status: scb; fwd=uri-miss; stored`, or `fwd=vary-miss` when only
//!   another variant was stored); a body that fails, has trailers or is larger than
//!   [`max_object`](CacheLayer::max_object) is not stored;
//! - a stale response is revalidated with a conditional request; a 304 refreshes the
//!   stored head and the stored body is answered (`fwd=stale; fwd-status=304`);
//! - `Cache-Control: only-if-cached` without a usable response gets 504;
//! - a successful unsafe request (POST, PUT, DELETE, PATCH, ...) drops what is stored for
//!   its URI (RFC 9111 4.4);
//! - `Set-Cookie` is never stored: the client that caused the store gets it, no other does.
//!
//! Not yet: collapsed forwarding, `stale-while-revalidate` and `stale-if-error`, ranges
//! from a stored response, a disk tier, purging and metrics.

mod store;
mod tee;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body as _;
use http_cache_semantics::{AfterResponse, BeforeRequest, CacheOptions, CachePolicy};
use scb_core::Body;
use tower::{Layer, Service, ServiceExt as _};

use store::{Entry, Key, Store};
use tee::{Pending, Tee};

/// The `Cache-Status` header (RFC 9211).
const CACHE_STATUS: header::HeaderName = header::HeaderName::from_static("cache-status");

/// Puts a [`Cache`] in front of a service; clones share one store.
#[derive(Clone, Debug)]
pub struct CacheLayer {
    store: Arc<Store>,
    max_object: usize,
}

impl CacheLayer {
    /// A cache of at most `max_bytes` of stored responses (bodies and an estimate of
    /// their heads), the least recently used evicted first.
    pub fn new(max_bytes: u64) -> Self {
        Self {
            store: Arc::new(Store::new(max_bytes)),
            max_object: usize::try_from(max_bytes / 8)
                .unwrap_or(usize::MAX)
                .min(DEFAULT_MAX_OBJECT),
        }
    }

    /// The largest body stored; larger ones stream through unstored. Defaults to 64 MiB,
    /// or an eighth of `max_bytes` if that is less (one object cannot take the cache).
    #[must_use]
    pub fn max_object(mut self, bytes: usize) -> Self {
        self.max_object = bytes;
        self
    }
}

const DEFAULT_MAX_OBJECT: usize = 64 << 20;

impl<S> Layer<S> for CacheLayer {
    type Service = Cache<S>;

    fn layer(&self, inner: S) -> Cache<S> {
        Cache {
            inner,
            store: Arc::clone(&self.store),
            max_object: self.max_object,
        }
    }
}

/// Answers what it may from stored responses and stores what it may; see the
/// [module documentation](self).
#[derive(Clone, Debug)]
pub struct Cache<S> {
    inner: S,
    store: Arc<Store>,
    max_object: usize,
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
        let exchange = Exchange {
            inner,
            store: Arc::clone(&self.store),
            max_object: self.max_object,
        };
        Box::pin(exchange.run(req))
    }
}

/// One request through the cache.
struct Exchange<S> {
    inner: S,
    store: Arc<Store>,
    max_object: usize,
}

impl<S> Exchange<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    async fn run(self, req: Request<Body>) -> Result<Response<Body>, S::Error> {
        let Some(key) = key_of(&req) else {
            return self.inner.oneshot(req).await;
        };
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            return self.unsafe_method(req, key).await;
        }
        let now = SystemTime::now();
        // The policy sees the request as the GET it may be answered from, with its host
        // in the header whatever the protocol (HTTP/2 carries it in the URI).
        let view = policy_view(&req, &key);
        let variants = self.store.variants(&key);
        let mut stale = None;
        for entry in &variants {
            match entry.policy.before_request(&view, now) {
                BeforeRequest::Fresh(head) => {
                    self.store.touch(entry);
                    return Ok(answer(&req, head, entry.body.clone(), "scb; hit"));
                }
                BeforeRequest::Stale { request, matches } if matches => {
                    stale = Some((Arc::clone(entry), request));
                    break;
                }
                BeforeRequest::Stale { .. } => {}
            }
        }
        if only_if_cached(&req) {
            let mut res = scb_core::respond::reason(StatusCode::GATEWAY_TIMEOUT);
            set_status(&mut res, "scb; fwd=miss");
            return Ok(res);
        }
        match stale {
            Some((entry, conditional)) => self.revalidate(req, key, view, entry, conditional).await,
            None => {
                let why = if variants.is_empty() {
                    "uri-miss"
                } else {
                    "vary-miss"
                };
                self.miss(req, key, view, why).await
            }
        }
    }

    /// Forwards a miss and stores the answer if it may be stored.
    async fn miss(
        self,
        req: Request<Body>,
        key: Key,
        view: http::request::Parts,
        why: &str,
    ) -> Result<Response<Body>, S::Error> {
        let Self {
            inner,
            store,
            max_object,
        } = self;
        let head_only = req.method() == Method::HEAD;
        let res = inner.oneshot(req).await?;
        let policy = CachePolicy::new_options(&view, &res, SystemTime::now(), options());
        // A HEAD's answer has no body to store.
        if head_only || !policy.is_storable() {
            let mut res = res;
            set_status(&mut res, &format!("scb; fwd={why}"));
            return Ok(res);
        }
        Ok(store_while_sending(
            &store,
            max_object,
            res,
            key,
            policy,
            None,
            &format!("scb; fwd={why}; stored"),
        ))
    }

    /// Revalidates `entry` with `conditional` (its validators) and answers from it on a
    /// 304, or with what the origin sent otherwise.
    async fn revalidate(
        self,
        req: Request<Body>,
        key: Key,
        view: http::request::Parts,
        entry: Arc<Entry>,
        conditional: http::request::Parts,
    ) -> Result<Response<Body>, S::Error> {
        let Self {
            inner,
            store,
            max_object,
        } = self;
        let head_only = req.method() == Method::HEAD;
        let (parts, body) = req.into_parts();
        let mut upstream = Request::from_parts(parts, body);
        // The validators the policy chose; a HEAD revalidates as the GET it is answered from.
        *upstream.headers_mut() = conditional.headers;
        if head_only {
            *upstream.method_mut() = Method::GET;
        }
        let res = inner.oneshot(upstream).await?;
        match entry.policy.after_response(&view, &res, SystemTime::now()) {
            AfterResponse::NotModified(policy, head) => {
                let body = entry.body.clone();
                store.insert(
                    key,
                    Entry::new(policy, stored_head(head.clone()), body.clone()),
                    Some(&entry),
                );
                let mut answered = answer_from_parts(head_only, head, body);
                set_status(&mut answered, "scb; fwd=stale; fwd-status=304");
                Ok(answered)
            }
            AfterResponse::Modified(policy, _) => {
                if res.status() == StatusCode::NOT_MODIFIED || !policy.is_storable() {
                    let mut res = res;
                    set_status(&mut res, "scb; fwd=stale");
                    return Ok(res);
                }
                let mut res = store_while_sending(
                    &store,
                    max_object,
                    res,
                    key,
                    policy,
                    Some(entry),
                    "scb; fwd=stale; stored",
                );
                if head_only {
                    *res.body_mut() = Body::empty();
                }
                Ok(res)
            }
        }
    }

    /// An unsafe method: forwarded, and on success what is stored for its URI (and for
    /// its `Location` and `Content-Location` on the same host) is dropped.
    async fn unsafe_method(self, req: Request<Body>, key: Key) -> Result<Response<Body>, S::Error> {
        let safe = matches!(*req.method(), Method::OPTIONS | Method::TRACE);
        let store = Arc::clone(&self.store);
        let res = self.inner.oneshot(req).await?;
        if !safe && (res.status().is_success() || res.status().is_redirection()) {
            store.invalidate(&key);
            for name in [header::LOCATION, header::CONTENT_LOCATION] {
                let same_host = res
                    .headers()
                    .get(&name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<http::Uri>().ok())
                    .filter(|uri| uri.host().is_none_or(|h| h.eq_ignore_ascii_case(&key.host)))
                    .and_then(|uri| uri.path_and_query().map(|pq| pq.as_str().into()));
                if let Some(target) = same_host {
                    store.invalidate(&Key {
                        host: key.host.clone(),
                        target,
                    });
                }
            }
        }
        Ok(res)
    }
}

/// `res` with its body copied into `store` as it goes to the client.
fn store_while_sending(
    store: &Arc<Store>,
    max_object: usize,
    res: Response<Body>,
    key: Key,
    policy: CachePolicy,
    replaces: Option<Arc<Entry>>,
    status: &str,
) -> Response<Body> {
    if res
        .body()
        .size_hint()
        .exact()
        .is_some_and(|len| len > max_object as u64)
    {
        let mut res = res;
        set_status(&mut res, status.trim_end_matches("; stored"));
        return res;
    }
    let (head, body) = res.into_parts();
    let pending = Pending {
        store: Arc::clone(store),
        key,
        policy,
        head: stored_head(clone_head(&head)),
        replaces,
        max_object,
    };
    let mut res = Response::from_parts(head, Body::new(Tee::new(body, pending)));
    set_status(&mut res, status);
    res
}

/// The options of a shared cache (a proxy's).
fn options() -> CacheOptions {
    CacheOptions {
        shared: true,
        ..CacheOptions::default()
    }
}

/// The key of `req`: its host (the `Host` header, or the URI's authority) and its path
/// and query. `None` when it names no host: such a request is passed through.
fn key_of(req: &Request<Body>) -> Option<Key> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(http::uri::Authority::as_str))?;
    let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    Some(Key {
        host: host.to_ascii_lowercase().into(),
        target: target.into(),
    })
}

/// `req` as the policy compares it: a GET of the origin-form target with the host in
/// the `Host` header.
fn policy_view(req: &Request<Body>, key: &Key) -> http::request::Parts {
    let mut view = Request::get(&*key.target)
        .body(())
        .expect("a path and query that parsed once")
        .into_parts()
        .0;
    view.headers = req.headers().clone();
    if let Ok(host) = HeaderValue::from_str(&key.host) {
        view.headers.insert(header::HOST, host);
    }
    view
}

fn only_if_cached(req: &Request<Body>) -> bool {
    req.headers()
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("only-if-cached"))
}

/// What is kept of a response head: all of it but `Set-Cookie`, which belongs to the one
/// client it was sent to.
fn stored_head(mut head: http::response::Parts) -> http::response::Parts {
    head.headers.remove(header::SET_COOKIE);
    head
}

fn clone_head(head: &http::response::Parts) -> http::response::Parts {
    let mut copy = Response::new(()).into_parts().0;
    copy.status = head.status;
    copy.version = head.version;
    copy.headers = head.headers.clone();
    copy
}

/// A stored response for `req`: the head the policy made (with `Age`), the body unless
/// `req` is a HEAD.
fn answer(
    req: &Request<Body>,
    head: http::response::Parts,
    body: bytes::Bytes,
    status: &str,
) -> Response<Body> {
    let mut res = answer_from_parts(req.method() == Method::HEAD, head, body);
    set_status(&mut res, status);
    res
}

fn answer_from_parts(
    head_only: bool,
    head: http::response::Parts,
    body: bytes::Bytes,
) -> Response<Body> {
    let len = body.len();
    let mut res = Response::from_parts(
        head,
        if head_only {
            Body::empty()
        } else {
            Body::full(body)
        },
    );
    res.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    res.headers_mut().remove(header::SET_COOKIE);
    res
}

fn set_status(res: &mut Response<Body>, status: &str) {
    if let Ok(value) = HeaderValue::from_str(status) {
        res.headers_mut().insert(CACHE_STATUS, value);
    }
}

#[cfg(test)]
mod tests;
