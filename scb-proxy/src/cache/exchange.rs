//! One request through the cache: a hit, a miss, a revalidation, a stale answer, or an
//! unsafe method that invalidates.

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use http_cache_semantics::{AfterResponse, BeforeRequest, CacheOptions, CachePolicy};
use scb_core::Body;
use tower::{Service, ServiceExt as _};

use super::Settings;
use super::fill::{FillGuard, Fills, Join};
use super::stale::{request_accepts_stale, request_if_error};
use super::store::{Entry, Key, Store};
use super::tee::{Pending, Tee};

/// The `Cache-Status` header (RFC 9211).
const CACHE_STATUS: header::HeaderName = header::HeaderName::from_static("cache-status");

/// One request through the cache, with the inner service that answers it.
pub(super) struct Exchange<S> {
    pub(super) inner: S,
    pub(super) store: Arc<Store>,
    pub(super) fills: Arc<Fills>,
    pub(super) settings: Settings,
}

/// A stored response that matched but must be revalidated, with the conditional request
/// the policy made for it.
struct Stale {
    entry: Arc<Entry>,
    conditional: http::request::Parts,
}

impl<S> Exchange<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
{
    pub(super) async fn run(self, req: Request<Body>) -> Result<Response<Body>, S::Error> {
        let Some(key) = key_of(&req) else {
            return self.inner.oneshot(req).await;
        };
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            return self.unsafe_method(req, key).await;
        }
        // The policy sees the request as the GET it may be answered from, with its host
        // in the header whatever the protocol (HTTP/2 carries it in the URI).
        let view = policy_view(&req, &key);
        let mut waited = false;
        let (stale, guard) = loop {
            let now = SystemTime::now();
            let variants = self.store.variants(&key);
            let mut stale = None;
            for entry in &variants {
                match entry.policy.before_request(&view, now) {
                    BeforeRequest::Fresh(_) => {
                        self.store.touch(entry);
                        return Ok(answer(&req, entry, now, "scb; hit"));
                    }
                    BeforeRequest::Stale {
                        request: conditional,
                        matches: true,
                    } => {
                        stale = Some(Stale {
                            entry: Arc::clone(entry),
                            conditional,
                        });
                        break;
                    }
                    BeforeRequest::Stale { .. } => {}
                }
            }
            if only_if_cached(&req) {
                let mut res = scb_core::respond::reason(StatusCode::GATEWAY_TIMEOUT);
                set_status(&mut res, "scb; fwd=miss; detail=only-if-cached");
                return Ok(res);
            }
            let while_revalidate = stale.as_ref().is_some_and(|found| {
                let entry = &found.entry;
                entry
                    .stale
                    .allows_while_revalidate(entry.stale.staleness(entry.policy.age(now)))
                    && request_accepts_stale(req.headers())
            });
            if while_revalidate && let Some(found) = stale {
                self.store.touch(&found.entry);
                let res = answer(
                    &req,
                    &found.entry,
                    now,
                    "scb; hit; detail=stale-while-revalidate",
                );
                // One refresh at a time: if another request leads a fill of this key, it
                // is already being refreshed.
                if let Join::Lead(guard) = self.fills.join(&key) {
                    tokio::spawn(self.refresh(req, key, view, found, guard));
                }
                return Ok(res);
            }
            if waited {
                break (stale, None);
            }
            match self.fills.join(&key) {
                Join::Lead(guard) => break (stale, Some(guard)),
                Join::Pass => break (stale, None),
                Join::Follow(follower) => {
                    follower.wait(self.settings.collapse_timeout).await;
                    // Look again: the fill may have stored what this request wants. If
                    // not, it goes upstream itself rather than queueing again.
                    waited = true;
                }
            }
        };
        match stale {
            Some(stale) => self.revalidate(req, key, view, stale, guard).await,
            None => {
                let why = if self.store.variants(&key).is_empty() {
                    "uri-miss"
                } else {
                    "vary-miss"
                };
                self.miss(req, key, view, why, guard).await
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
        guard: Option<FillGuard>,
    ) -> Result<Response<Body>, S::Error> {
        let head_only = req.method() == Method::HEAD;
        let res = self.inner.oneshot(req).await?;
        let policy = CachePolicy::new_options(&view, &res, SystemTime::now(), options());
        // A HEAD's answer has no body to store.
        if head_only || !policy.is_storable() {
            if !head_only && let Some(guard) = guard {
                guard.pass();
            }
            let mut res = res;
            set_status(&mut res, &format!("scb; fwd={why}"));
            return Ok(res);
        }
        Ok(store_while_sending(
            &self.store,
            self.settings.max_object,
            res,
            Fill {
                key,
                policy,
                replaces: None,
                guard,
            },
            &format!("scb; fwd={why}; stored"),
        ))
    }

    /// Revalidates a stale response and answers from it on a 304, with what the origin
    /// sent otherwise, or with the stale response when the origin failed and it allows.
    async fn revalidate(
        self,
        req: Request<Body>,
        key: Key,
        view: http::request::Parts,
        stale: Stale,
        guard: Option<FillGuard>,
    ) -> Result<Response<Body>, S::Error> {
        let head_only = req.method() == Method::HEAD;
        let if_error = request_if_error(req.headers());
        let accepts_stale = request_accepts_stale(req.headers());
        let (parts, body) = req.into_parts();
        let mut upstream = Request::from_parts(parts, body);
        // The validators the policy chose; a HEAD revalidates as the GET it is answered from.
        *upstream.headers_mut() = stale.conditional.headers;
        if head_only {
            *upstream.method_mut() = Method::GET;
        }
        let result = self.inner.oneshot(upstream).await;
        let now = SystemTime::now();
        let entry = &stale.entry;
        let usable_on_error = || {
            let staleness = entry.stale.staleness(entry.policy.age(now));
            accepts_stale
                && entry
                    .stale
                    .allows_if_error(staleness, if_error, self.settings.stale_if_error)
        };
        let res = match result {
            Ok(res) if res.status().is_server_error() && usable_on_error() => {
                let status = format!(
                    "scb; fwd=stale; fwd-status={}; detail=stale-if-error",
                    res.status().as_u16()
                );
                return Ok(answer_head_only(head_only, entry, now, &status));
            }
            Ok(res) => res,
            Err(_) if usable_on_error() => {
                return Ok(answer_head_only(
                    head_only,
                    entry,
                    now,
                    "scb; fwd=stale; detail=stale-if-error",
                ));
            }
            Err(e) => return Err(e),
        };
        match entry.policy.after_response(&view, &res, now) {
            AfterResponse::NotModified(policy, head) => {
                let body = entry.body.clone();
                let refreshed = Arc::new(Entry::new(policy, stored_head(head), body));
                self.store
                    .insert_arc(key, Arc::clone(&refreshed), Some(entry));
                // Stored before the waiters wake.
                drop(guard);
                Ok(answer_head_only(
                    head_only,
                    &refreshed,
                    now,
                    "scb; fwd=stale; fwd-status=304",
                ))
            }
            AfterResponse::Modified(policy, _) => {
                if res.status() == StatusCode::NOT_MODIFIED || !policy.is_storable() {
                    if let Some(guard) = guard {
                        guard.pass();
                    }
                    let mut res = res;
                    set_status(&mut res, "scb; fwd=stale");
                    return Ok(res);
                }
                let mut res = store_while_sending(
                    &self.store,
                    self.settings.max_object,
                    res,
                    Fill {
                        key,
                        policy,
                        replaces: Some(Arc::clone(entry)),
                        guard,
                    },
                    "scb; fwd=stale; stored",
                );
                if head_only {
                    // The GET's body is still read to the end, so that it is stored.
                    let body = std::mem::replace(res.body_mut(), Body::empty());
                    tokio::spawn(drain(body));
                }
                Ok(res)
            }
        }
    }

    /// Revalidates in the background (`stale-while-revalidate`): the stale response was
    /// already answered; what comes back is stored for the next requests.
    async fn refresh(
        self,
        req: Request<Body>,
        key: Key,
        view: http::request::Parts,
        stale: Stale,
        guard: FillGuard,
    ) {
        // The client has its answer; what goes upstream carries no body.
        let (head, _) = req.into_parts();
        let req = Request::from_parts(head, Body::empty());
        if let Ok(res) = self.revalidate(req, key, view, stale, Some(guard)).await {
            drain(res.into_body()).await;
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

/// Reads a body to its end, dropping the bytes (a [`Tee`] stores them on the way).
async fn drain(body: Body) {
    let _ = body.collect().await;
}

/// What a response that may be stored is stored as, and the fill it ends.
struct Fill {
    key: Key,
    policy: CachePolicy,
    /// The variant it revalidated or refreshed.
    replaces: Option<Arc<Entry>>,
    guard: Option<FillGuard>,
}

/// `res` with its body copied into `store` as it goes to the client.
fn store_while_sending(
    store: &Arc<Store>,
    max_object: usize,
    res: Response<Body>,
    fill: Fill,
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
        // Too large to store: the next requests should not wait for it.
        if let Some(guard) = fill.guard {
            guard.pass();
        }
        return res;
    }
    let (head, body) = res.into_parts();
    let pending = Pending {
        store: Arc::clone(store),
        key: fill.key,
        policy: fill.policy,
        head: stored_head(clone_head(&head)),
        replaces: fill.replaces,
        max_object,
        guard: fill.guard,
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

/// The stored `entry` as the answer to `req`: its head with its `Age` now, its body
/// unless `req` is a HEAD.
fn answer(req: &Request<Body>, entry: &Entry, now: SystemTime, status: &str) -> Response<Body> {
    answer_head_only(req.method() == Method::HEAD, entry, now, status)
}

fn answer_head_only(
    head_only: bool,
    entry: &Entry,
    now: SystemTime,
    status: &str,
) -> Response<Body> {
    let mut head = clone_head(&entry.head);
    head.headers.insert(
        header::AGE,
        HeaderValue::from(entry.policy.age(now).as_secs()),
    );
    let len = entry.body.len();
    let mut res = Response::from_parts(
        head,
        if head_only {
            Body::empty()
        } else {
            Body::full(entry.body.clone())
        },
    );
    res.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    set_status(&mut res, status);
    res
}

fn set_status(res: &mut Response<Body>, status: &str) {
    if let Ok(value) = HeaderValue::from_str(status) {
        res.headers_mut().insert(CACHE_STATUS, value);
    }
}
