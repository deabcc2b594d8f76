//! One request through the cache: a hit, a miss, a revalidation, a stale answer, or an
//! unsafe method that invalidates.

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderMap};
use http::{Method, Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::conditional::{Precondition, Validators, evaluate_validators, has_preconditions};
use scb_core::http1::has_any;
use tower::{Service, ServiceExt as _};

use super::Settings;
use super::answer::{HIT, from_entry, respond, set_status};
use super::directives::RequestDirectives;
use super::fill::{FillGuard, Fills, Join};
use super::key::Key;
use super::key::Source;
use super::key::Url;
use super::policy::{Policy, Reuse, Storable, conditional_headers, copy_head, refreshed};
use super::store::{Entry, Store, Variants};
use super::stored::StoredBody;
use super::tee::{Pending, Tee};

/// One request through the cache, with the inner service that answers it.
pub(super) struct Exchange<S> {
    pub(super) inner: S,
    pub(super) store: Arc<Store>,
    pub(super) fills: Arc<Fills>,
    pub(super) settings: Settings,
}

/// Fields of a client request that are not sent upstream on a miss: the cache wants the
/// whole representation to store, and answers the client's preconditions and ranges
/// from it itself.
const ANSWERED_HERE: [header::HeaderName; 4] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::RANGE,
    header::IF_RANGE,
];

impl<S> Exchange<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
{
    /// The answer to `req`.
    ///
    /// An `async` block rather than an `async fn`, and the miss borrows the request: an
    /// `async fn` keeps each argument twice (the argument and the local it moves into), and
    /// a callee given the request by value a third time. The future is boxed on every
    /// request, hit or miss, and was 4.2 KiB; the rare paths (a revalidation, an unsafe
    /// method) are boxed on their own, so that their futures are not part of every one.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn would keep its arguments twice"
    )]
    pub(super) fn run(
        mut self,
        mut req: Request<Body>,
    ) -> impl Future<Output = Result<Response<Body>, S::Error>> + Send + 'static {
        async move {
            let Some(url) = url_of(&req) else {
                return self.inner.oneshot(req).await;
            };
            if !matches!(*req.method(), Method::GET | Method::HEAD) {
                let (secure, source) = (url.secure, Source::of(url));
                return Box::pin(self.unsafe_method(req, secure, source)).await;
            }
            let lookup = self.store.key(url);
            let directives = RequestDirectives::parse(req.headers());
            // A fresh hit is answered from the borrowed key, without allocating one.
            let now = SystemTime::now();
            let mut found = self.store.variants(&lookup);
            if let Some(variants) = &found
                && let Some(entry) = selected(variants, req.headers())
                && entry.policy.reuse(&directives, now) == Reuse::Fresh
            {
                return Ok(from_entry(req.method(), req.headers(), entry, now, HIT));
            }
            let key = lookup.to_key();
            if found.is_none() && self.store.disk().is_some() {
                found = self.store.from_disk(&key).await;
            }
            let source = self.store.source(url, &key);
            // The first look is the one just made; after a wait, the store is read again.
            let mut first = Some(found);
            let mut nothing_stored;
            let mut waited = false;
            let (stale, guard) = loop {
                let now = SystemTime::now();
                let variants = match first.take() {
                    Some(found) => found,
                    None => self.store.variants(&key),
                };
                nothing_stored = variants.is_none();
                let selected = variants
                    .as_deref()
                    .and_then(|variants| selected(variants, req.headers()));
                let stale = match selected {
                    Some(entry) if entry.policy.reuse(&directives, now) == Reuse::Fresh => {
                        return Ok(from_entry(req.method(), req.headers(), entry, now, HIT));
                    }
                    Some(entry) => Some(Arc::clone(entry)),
                    None => None,
                };
                if directives.only_if_cached {
                    let mut res = scb_core::respond::reason(StatusCode::GATEWAY_TIMEOUT);
                    set_status(&mut res, "scb; fwd=miss; detail=only-if-cached");
                    return Ok(res);
                }
                if let Some(entry) = &stale
                    && entry.policy.allows_while_revalidate(&directives, now)
                {
                    let res = from_entry(
                        req.method(),
                        req.headers(),
                        entry,
                        now,
                        "scb; hit; detail=stale-while-revalidate",
                    );
                    // One refresh at a time: if another request leads a fill of this key, it
                    // is already being refreshed.
                    if let Join::Lead(guard) = self.fills.join(&key) {
                        let entry = Arc::clone(entry);
                        tokio::spawn(self.refresh(req, key, source, directives, entry, guard));
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
                Some(entry) => {
                    Box::pin(self.revalidate(req, key, source, directives, entry, guard)).await
                }
                None => {
                    let why = if nothing_stored {
                        Miss::Uri
                    } else {
                        Miss::Vary
                    };
                    self.miss(&mut req, key, source, why, guard).await
                }
            }
        }
    }

    /// Forwards a miss and stores the answer if it may be stored. The request is taken
    /// from `req` to go up (borrowed, so that the caller's future holds it once).
    async fn miss(
        // `&mut`: a shared borrow would make the future `Send` only for a `Sync` inner
        // service.
        &mut self,
        req: &mut Request<Body>,
        key: Key,
        source: Source,
        why: Miss,
        guard: Option<FillGuard>,
    ) -> Result<Response<Body>, S::Error> {
        let method = req.method().clone();
        let client = req.headers().clone();
        // Ready first, so that the request is not held across that wait as well.
        self.inner.ready().await?;
        let mut upstream = std::mem::take(req);
        // Most requests carry none of them: checked before four removals' lookups.
        if has_any(upstream.headers(), &ANSWERED_HERE) {
            for name in &ANSWERED_HERE {
                upstream.headers_mut().remove(name);
            }
        }
        // A HEAD goes up as the GET it will be answered from, so that the answer can be
        // stored for both (as nginx's `proxy_cache_convert_head`).
        *upstream.method_mut() = Method::GET;
        let request_time = SystemTime::now();
        let generation = self.store.generation();
        let res = self.inner.call(upstream).await?;
        let (head, body) = res.into_parts();
        let Some(storable) = Policy::storable(&client, &head, request_time, SystemTime::now())
        else {
            if let Some(guard) = guard {
                guard.pass();
            }
            // For a HEAD, the GET's body goes with it: the server sends a HEAD's head
            // alone, with the length the GET's body has (an empty body here would
            // claim a length of 0), and drops the body unread.
            let mut res = Response::from_parts(head, body);
            set_status(&mut res, why.status());
            return Ok(res);
        };
        let res = Response::from_parts(head, body);
        let fill = Fill {
            generation,
            key,
            source,
            storable,
            replaces: None,
            guard,
        };
        Ok(self.send_and_store(&method, &client, res, fill, why.stored_status()))
    }

    /// Revalidates a stale response and answers from it on a 304, with what the origin
    /// sent otherwise, or with the stale response when the origin failed and it allows.
    async fn revalidate(
        self,
        req: Request<Body>,
        key: Key,
        source: Source,
        directives: RequestDirectives,
        entry: Arc<Entry>,
        guard: Option<FillGuard>,
    ) -> Result<Response<Body>, S::Error> {
        let method = req.method().clone();
        let client = req.headers().clone();
        let (parts, body) = req.into_parts();
        // Kept for a second try without validators, should the 304 be about another
        // representation.
        let mut retry = Request::new(Body::empty());
        *retry.uri_mut() = parts.uri.clone();
        *retry.version_mut() = parts.version;
        *retry.extensions_mut() = parts.extensions.clone();
        let mut upstream = Request::from_parts(parts, body);
        *upstream.headers_mut() = conditional_headers(&client, &entry.head);
        // A HEAD revalidates as the GET it is answered from.
        *upstream.method_mut() = Method::GET;
        let request_time = SystemTime::now();
        let generation = self.store.generation();
        let spare = self.inner.clone();
        let result = self.inner.clone().oneshot(upstream).await;
        let now = SystemTime::now();
        let on_error = |code: Option<StatusCode>| {
            let status = match code {
                Some(code) => format!(
                    "scb; fwd=stale; fwd-status={}; detail=stale-if-error",
                    code.as_u16()
                ),
                None => "scb; fwd=stale; detail=stale-if-error".to_owned(),
            };
            from_entry(&method, &client, &entry, now, &status)
        };
        let allows = entry
            .policy
            .allows_if_error(&directives, self.settings.stale_if_error, now);
        let res = match result {
            Ok(res) if res.status().is_server_error() && allows => {
                return Ok(on_error(Some(res.status())));
            }
            Ok(res) => res,
            Err(_) if allows => return Ok(on_error(None)),
            Err(e) => return Err(e),
        };
        if res.status() == StatusCode::NOT_MODIFIED {
            let (not_modified, _) = res.into_parts();
            let Some(mut merged) = refreshed(&entry.head, &not_modified) else {
                // About another representation: it cannot refresh this one. Ask again,
                // without validators.
                self.store.remove(&key, &entry);
                let mut retry = retry;
                *retry.headers_mut() = client.clone();
                for name in &ANSWERED_HERE {
                    retry.headers_mut().remove(name);
                }
                let res = spare.oneshot(retry).await?;
                let mut res = res;
                set_status(&mut res, "scb; fwd=stale; detail=mismatch");
                return Ok(res);
            };
            let cookies: Vec<_> = not_modified
                .headers
                .get_all(header::SET_COOKIE)
                .iter()
                .cloned()
                .collect();
            let status = "scb; fwd=stale; fwd-status=304";
            let mut res = match Policy::storable(&client, &merged, request_time, now) {
                Some(Storable { policy, head }) => {
                    let refreshed = Arc::new(Entry::new(policy, head, entry.body.clone(), source));
                    self.store
                        .insert_from(generation, key, Arc::clone(&refreshed), Some(&entry));
                    // Stored before the waiters wake.
                    drop(guard);
                    from_entry(&method, &client, &refreshed, now, status)
                }
                None => {
                    // The 304 says it may no longer be stored: answered once, dropped.
                    self.store.remove(&key, &entry);
                    merged.headers.remove(header::SET_COOKIE);
                    let mut res = respond(&method, &client, merged, &entry.body);
                    set_status(&mut res, status);
                    res
                }
            };
            // The 304's cookies are the revalidating client's.
            for cookie in cookies {
                res.headers_mut().append(header::SET_COOKIE, cookie);
            }
            return Ok(res);
        }
        let (head, body) = res.into_parts();
        let Some(storable) = Policy::storable(&client, &head, request_time, now) else {
            if let Some(guard) = guard {
                guard.pass();
            }
            // A HEAD's GET body goes with it, as on a miss: the server sends the head
            // alone, with the GET's length.
            let mut res = Response::from_parts(head, body);
            set_status(&mut res, "scb; fwd=stale");
            return Ok(res);
        };
        let fill = Fill {
            generation,
            key,
            source,
            storable,
            replaces: Some(entry),
            guard,
        };
        Ok(self.send_and_store(
            &method,
            &client,
            Response::from_parts(head, body),
            fill,
            "scb; fwd=stale; stored",
        ))
    }

    /// Revalidates in the background (`stale-while-revalidate`): the stale response was
    /// already answered; what comes back is stored for the next requests.
    async fn refresh(
        self,
        req: Request<Body>,
        key: Key,
        source: Source,
        directives: RequestDirectives,
        entry: Arc<Entry>,
        guard: FillGuard,
    ) {
        // The client has its answer; what goes upstream carries no body.
        let (head, _) = req.into_parts();
        let req = Request::from_parts(head, Body::empty());
        if let Ok(res) = self
            .revalidate(req, key, source, directives, entry, Some(guard))
            .await
        {
            drain(res.into_body()).await;
        }
    }

    /// A storable response on its way to a client of `method` with `client` headers, its
    /// body copied into the store as it goes. When the client's preconditions hold
    /// against it (a 304) or it asked a HEAD, the client gets the head at once and the
    /// body is read to the store in the background.
    fn send_and_store(
        &self,
        method: &Method,
        client: &HeaderMap,
        res: Response<Body>,
        fill: Fill,
        status: &str,
    ) -> Response<Body> {
        let max_object = self.settings.max_object;
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
            if method == Method::HEAD {
                *res.body_mut() = Body::empty();
            }
            return res;
        }
        let (head, body) = res.into_parts();
        let not_modified = head.status.is_success()
            && has_preconditions(client)
            && evaluate_validators(method, client, Validators::of(&head.headers))
                == Precondition::NotModified;
        let answer_head = (not_modified || method == Method::HEAD).then(|| copy_head(&head));
        let head_only = !not_modified;
        let pending = Pending {
            generation: fill.generation,
            store: Arc::clone(&self.store),
            key: fill.key,
            source: fill.source,
            policy: fill.storable.policy,
            head: fill.storable.head,
            replaces: fill.replaces,
            max_object,
            guard: fill.guard,
        };
        let body = Body::new(Tee::new(body, pending));
        let mut res = match answer_head {
            Some(head) => {
                tokio::spawn(drain(body));
                if head_only {
                    Response::from_parts(head, Body::empty())
                } else {
                    respond(method, client, head, &StoredBody::empty())
                }
            }
            None => Response::from_parts(head, body),
        };
        set_status(&mut res, status);
        res
    }

    /// An unsafe method: forwarded, and on success what is stored for its URI (and for
    /// its `Location` and `Content-Location` on the same host) is dropped.
    async fn unsafe_method(
        self,
        req: Request<Body>,
        secure: bool,
        url: Source,
    ) -> Result<Response<Body>, S::Error> {
        let safe = matches!(*req.method(), Method::OPTIONS | Method::TRACE);
        let store = Arc::clone(&self.store);
        let res = self.inner.oneshot(req).await?;
        if !safe && (res.status().is_success() || res.status().is_redirection()) {
            // Both schemes: the same resource, most likely, and dropping more is safe.
            let invalidate = |target: &str| {
                for secure in [secure, !secure] {
                    let key = store.key(Url {
                        secure,
                        host: &url.host,
                        target,
                    });
                    store.invalidate(&key.to_key());
                }
            };
            invalidate(&url.target);
            for name in [header::LOCATION, header::CONTENT_LOCATION] {
                let same_host = res
                    .headers()
                    .get(&name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<http::Uri>().ok())
                    .filter(|uri| uri.host().is_none_or(|h| h.eq_ignore_ascii_case(&url.host)))
                    .and_then(|uri| uri.path_and_query().map(|pq| pq.as_str().to_owned()));
                if let Some(target) = same_host {
                    invalidate(&target);
                }
            }
        }
        Ok(res)
    }
}

/// Why nothing stored could answer: nothing is stored for the URL, or only variants
/// for other values of the fields its `Vary` names (RFC 9211's `fwd` values).
#[derive(Clone, Copy, Debug)]
enum Miss {
    Uri,
    Vary,
}

impl Miss {
    const fn status(self) -> &'static str {
        match self {
            Miss::Uri => "scb; fwd=uri-miss",
            Miss::Vary => "scb; fwd=vary-miss",
        }
    }

    const fn stored_status(self) -> &'static str {
        match self {
            Miss::Uri => "scb; fwd=uri-miss; stored",
            Miss::Vary => "scb; fwd=vary-miss; stored",
        }
    }
}

/// Reads a body to its end, dropping the bytes (a [`Tee`] stores them on the way).
async fn drain(body: Body) {
    let _ = body.collect().await;
}

/// What a response that may be stored is stored as, and the fill it ends.
struct Fill {
    /// The store's purge generation before the request went upstream.
    generation: u64,
    key: Key,
    /// The URL it is fetched for.
    source: Source,
    storable: Storable,
    /// The variant it revalidated or refreshed.
    replaces: Option<Arc<Entry>>,
    guard: Option<FillGuard>,
}

/// The URL of `req`: its scheme (the URI's, as HTTP/2 sends it, else whether the
/// connection is secured, from [`ConnectInfo`](scb_core::connection::ConnectInfo)), its
/// host (the `Host` header, or the URI's authority) and its path and query. `None` when
/// it names no host: such a request is passed through.
fn url_of(req: &Request<Body>) -> Option<Url<'_>> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(http::uri::Authority::as_str))?;
    let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let secure = match req.uri().scheme() {
        Some(scheme) => *scheme == http::uri::Scheme::HTTPS,
        None => req
            .extensions()
            .get::<scb_core::connection::ConnectInfo>()
            .is_some_and(|info| info.secure),
    };
    Some(Url {
        secure,
        host,
        target,
    })
}

/// The most recent of `variants` that `headers` select (by the `Vary` it was stored
/// with): it decides.
fn selected<'v>(variants: &'v Variants, headers: &HeaderMap) -> Option<&'v Arc<Entry>> {
    variants
        .entries()
        .iter()
        .find(|e| e.policy.vary_matches(headers))
}
