//! Route requests by path: exact paths first, then the longest matching prefix, then a
//! fallback.
//!
//! A [`Router`] holds named routes, each an exact path or a prefix bound to a service of
//! one type `S`. Routes of different kinds (a closure, `ServeStatic`, `ReverseProxy`) go
//! into a `Router<BoxRoute>` with [`Router::boxed_route`], which boxes each one; a route
//! table that knows its kinds can use an enum instead and skip the box. Names identify routes in
//! errors and in `Debug` output, and an access log above the router gets the name of the
//! route that took each request: the router notes it in the request's
//! [`AccessNotes`] when there are any
//! ([`note_routes`](Router::note_routes)). It touches nothing else of the request or the
//! response, so a service that needs to know its route (a metrics label, say) is built
//! knowing it.
//!
//! # Example
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::Body;
//! use scb_core::respond::Respond;
//! use scb_core::router::{PathMatch, Router};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), scb_core::router::RouterError> {
//! let router = Router::new()
//!     .route("health", PathMatch::Exact("/healthz".into()), Respond::new(StatusCode::OK))?
//!     .route("api", PathMatch::Prefix("/api".into()), Respond::new(StatusCode::ACCEPTED))?;
//!
//! let req = Request::get("/api/users").body(Body::empty()).unwrap();
//! let res = router.clone().oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::ACCEPTED);
//!
//! let req = Request::get("/nowhere").body(Body::empty()).unwrap();
//! let res = router.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::NOT_FOUND);
//! # Ok(())
//! # }
//! ```
//!
//! Mixing kinds: each route is boxed into a [`BoxRoute`].
//!
//! ```
//! use http::{Request, Response, StatusCode};
//! use scb_core::Body;
//! use scb_core::respond::Respond;
//! use scb_core::router::{BoxRoute, PathMatch, Router};
//! use tower::{ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), scb_core::router::RouterError> {
//! let hello = service_fn(|_req: Request<Body>| async {
//!     Ok::<_, std::convert::Infallible>(Response::new(Body::from("hello")))
//! });
//! let router: Router<BoxRoute> = Router::new()
//!     .boxed_route("hello", PathMatch::Exact("/hello".into()), hello)?
//!     .boxed_route("health", PathMatch::Exact("/healthz".into()), Respond::new(StatusCode::OK))?;
//! // ... and `.boxed_route("files", PathMatch::Prefix("/".into()), ServeStatic::new("public")?)`
//! // or a `ReverseProxy` the same way: any service answering `Response<Body>`, infallibly.
//!
//! let res = router.oneshot(Request::get("/hello").body(Body::empty()).unwrap()).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! # Matching
//!
//! - [`PathMatch::Exact`] matches the path exactly (a binary search over the exact paths).
//! - [`PathMatch::Prefix`] matches on segment boundaries: `/api` matches `/api` and
//!   `/api/users` but not `/apiary`; `/static/` matches `/static/app.js` but not `/static`.
//!   `/` matches every path. Among matching prefixes the longest wins. This is what
//!   "prefix" means throughout scb: [`prefix_matches`].
//! - The path is matched as received: no percent-decoding and no dot-segment removal.
//!   `/%61pi` does not match `/api`. A service behind the router that decodes paths
//!   itself must not rely on the router for access control over the decoded form.
//! - Nothing matches: the fallback answers, by default [`NotFound`].

use std::convert::Infallible;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower::Service;
use tower::util::{Oneshot, ServiceExt as _};

use crate::Body;
use crate::access_log::AccessNotes;

/// How a route matches a request path. Both forms must start with `/`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathMatch {
    /// The path equals this string.
    Exact(String),
    /// The path starts with this string at a segment boundary (see the
    /// [module documentation](self)).
    Prefix(String),
}

/// Why a route could not be added.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// The route name is empty.
    #[error("route name is empty")]
    EmptyName,
    /// Another route already has this name.
    #[error("route name `{name}` is used twice")]
    DuplicateName {
        /// The repeated name.
        name: Arc<str>,
    },
    /// Another route already matches exactly this path.
    #[error("exact path `{path}` is routed twice")]
    DuplicateExact {
        /// The repeated path.
        path: String,
    },
    /// Another route already has this prefix.
    #[error("path prefix `{prefix}` is routed twice")]
    DuplicatePrefix {
        /// The repeated prefix.
        prefix: String,
    },
    /// The exact path or prefix does not start with `/`.
    #[error("route path `{path}` does not start with '/'")]
    NotAbsolute {
        /// The path or prefix as given.
        path: String,
    },
}

#[derive(Clone, Debug)]
struct Route<S> {
    name: Arc<str>,
    service: S,
}

#[derive(Clone, Debug)]
struct Table<S> {
    /// Sorted by path length, then path, for a binary search. A table holds a handful of
    /// routes and a request path is short, so a few comparisons beat hashing the path
    /// (SipHash measured ~600 instructions a request); ordered by length first, most steps
    /// compare two integers and never call `memcmp`.
    exact: Vec<(Box<str>, Route<S>)>,
    /// Longest first, so the first match is the longest.
    prefixes: Vec<(Box<str>, Route<S>)>,
    /// The route name noted for the fallback's answers.
    fallback_name: Option<Arc<str>>,
    /// Whether the route is noted in the request's `AccessNotes`.
    note_routes: bool,
}

impl<S> Table<S> {
    fn find(&self, path: &str) -> Option<&Route<S>> {
        if let Ok(at) = self.exact_position(path) {
            return Some(&self.exact[at].1);
        }
        self.prefixes
            .iter()
            .find(|(prefix, _)| prefix_matches(prefix, path))
            .map(|(_, route)| route)
    }

    /// Where `path` is among the exact routes, or where it would be inserted.
    fn exact_position(&self, path: &str) -> Result<usize, usize> {
        self.exact
            .binary_search_by(|(p, _)| (p.len(), p.as_bytes()).cmp(&(path.len(), path.as_bytes())))
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        let exact = self.exact.iter().map(|(_, r)| &*r.name);
        exact.chain(self.prefixes.iter().map(|(_, r)| &*r.name))
    }

    fn insert(&mut self, name: Arc<str>, path: PathMatch, service: S) -> Result<(), RouterError> {
        if name.is_empty() {
            return Err(RouterError::EmptyName);
        }
        if self.names().any(|n| *n == *name) {
            return Err(RouterError::DuplicateName { name });
        }
        let route = Route { name, service };
        match path {
            PathMatch::Exact(path) => {
                check_absolute(&path)?;
                match self.exact_position(&path) {
                    Ok(_) => return Err(RouterError::DuplicateExact { path }),
                    Err(at) => self.exact.insert(at, (path.into_boxed_str(), route)),
                }
            }
            PathMatch::Prefix(prefix) => {
                check_absolute(&prefix)?;
                if self.prefixes.iter().any(|(p, _)| **p == *prefix) {
                    return Err(RouterError::DuplicatePrefix { prefix });
                }
                let at = self
                    .prefixes
                    .partition_point(|(p, _)| p.len() >= prefix.len());
                self.prefixes.insert(at, (prefix.into_boxed_str(), route));
            }
        }
        Ok(())
    }
}

fn check_absolute(path: &str) -> Result<(), RouterError> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(RouterError::NotAbsolute {
            path: path.to_owned(),
        })
    }
}

/// Whether the path prefix `prefix` matches `path`: what "prefix" means everywhere in scb
/// ([`PathMatch::Prefix`], scb-proxy's `ReverseProxyLayer` and `strip_prefix`, the
/// binary's `prefix` routes).
///
/// A prefix matches on segment boundaries. Without a trailing slash it takes the path itself
/// and everything below it; with one, only what is below it (which is how a route can
/// leave `/static` itself to another).
///
/// ```
/// use scb_core::router::prefix_matches;
///
/// assert!(prefix_matches("/api", "/api"));
/// assert!(prefix_matches("/api", "/api/users"));
/// assert!(!prefix_matches("/api", "/apiary"));
/// assert!(prefix_matches("/static/", "/static/app.js"));
/// assert!(!prefix_matches("/static/", "/static"));
/// assert!(prefix_matches("/", "/anything"));
/// ```
#[must_use]
pub fn prefix_matches(prefix: &str, path: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'))
}

/// Routes requests to named services by path, with a fallback.
///
/// The routing table is shared (`Arc`), so cloning the router per connection is cheap.
/// Each request is served by a clone of the matched service, so
/// [`Router::poll_ready`](Service::poll_ready) is always ready and readiness is checked per
/// request on the clone: a clone ready at once is called at once; one that is not waits,
/// with its request, in a box (as [`Oneshot`] would wait). See the [module documentation](self) for
/// the matching rules.
pub struct Router<S, F = NotFound> {
    table: Arc<Table<S>>,
    fallback: F,
}

impl<S> Router<S> {
    /// A router without routes, answering everything with [`NotFound`].
    pub fn new() -> Self {
        Self {
            table: Arc::new(Table {
                exact: Vec::new(),
                prefixes: Vec::new(),
                fallback_name: None,
                note_routes: true,
            }),
            fallback: NotFound,
        }
    }
}

impl<S> Default for Router<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S, F> Router<S, F> {
    /// Adds the route `name`, serving requests that match `path` with `service`.
    ///
    /// # Errors
    ///
    /// If `name` is empty or taken, if the path or prefix does not start with `/`, or if
    /// another route already has the same exact path or the same prefix.
    pub fn route(
        mut self,
        name: impl Into<Arc<str>>,
        path: PathMatch,
        service: S,
    ) -> Result<Self, RouterError>
    where
        S: Clone,
    {
        // Copies the table only if a clone of this router is still holding it.
        Arc::make_mut(&mut self.table).insert(name.into(), path, service)?;
        Ok(self)
    }

    /// The name of the route a request for `path` goes to; `None` when the fallback
    /// answers it.
    pub fn route_name(&self, path: &str) -> Option<&Arc<str>> {
        self.table.find(path).map(|route| &route.name)
    }

    /// The service answering requests no route matches.
    ///
    /// Defaults to [`NotFound`].
    pub fn fallback<G>(self, fallback: G) -> Router<S, G> {
        Router {
            table: self.table,
            fallback,
        }
    }

    /// The route name an access log records for the fallback's answers. Defaults to none:
    /// they are recorded without a route.
    #[must_use]
    pub fn fallback_name(mut self, name: impl Into<Arc<str>>) -> Self
    where
        S: Clone,
    {
        Arc::make_mut(&mut self.table).fallback_name = Some(name.into());
        self
    }

    /// Whether the router notes the route it chooses in the request's
    /// [`AccessNotes`], for an access log above it.
    /// Defaults to true; a stack with no access log turns it off and saves the lookup
    /// (one extension read per request).
    #[must_use]
    pub fn note_routes(mut self, on: bool) -> Self
    where
        S: Clone,
    {
        Arc::make_mut(&mut self.table).note_routes = on;
        self
    }
}

impl<S, F: Clone> Clone for Router<S, F> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
            fallback: self.fallback.clone(),
        }
    }
}

impl<S: fmt::Debug, F: fmt::Debug> fmt::Debug for Router<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("exact", &self.table.exact)
            .field("prefixes", &self.table.prefixes)
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl<S, F, ReqB, ResB> Service<Request<ReqB>> for Router<S, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    F: Service<Request<ReqB>, Response = Response<ResB>, Error = S::Error> + Clone,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S, F, Request<ReqB>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let route = self.table.find(req.uri().path());
        if self.table.note_routes
            && let Some(notes) = req.extensions().get::<AccessNotes>()
            && let Some(name) = route.map(|r| &r.name).or(self.table.fallback_name.as_ref())
        {
            notes.route(name);
        }
        match route {
            Some(route) => ResponseFuture::chosen(route.service.clone(), req),
            None => ResponseFuture::fallback(self.fallback.clone(), req),
        }
    }
}

impl<S, F, Req> ResponseFuture<S, F, Req>
where
    S: Service<Req>,
    F: Service<Req>,
{
    /// The future of `service` (a route, a site) answering `req`.
    pub(crate) fn chosen(service: S, req: Req) -> Self {
        Self {
            kind: Kind::Route {
                future: Dispatch::new(service, req),
            },
        }
    }

    /// The future of the fallback answering `req`.
    pub(crate) fn fallback(fallback: F, req: Req) -> Self {
        Self {
            kind: Kind::Fallback {
                future: Dispatch::new(fallback, req),
            },
        }
    }
}

pin_project! {
    /// Response future of [`Router`], and of
    /// [`VirtualHosts`](crate::virtual_hosts::VirtualHosts): the chosen service's, or the
    /// fallback's.
    pub struct ResponseFuture<S, F, Req>
    where
        S: Service<Req>,
        F: Service<Req>,
    {
        #[pin]
        kind: Kind<S, F, Req>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, F, Req>
    where
        S: Service<Req>,
        F: Service<Req>,
    {
        Route {
            #[pin]
            future: Dispatch<S, Req>,
        },
        Fallback {
            #[pin]
            future: Dispatch<F, Req>,
        },
    }
}

pin_project! {
    /// One call of a cloned service: [`Oneshot`]'s job, with the request out of the future
    /// in the common case.
    ///
    /// `Oneshot` holds the service and the request until its first poll, so every layer
    /// above it moves them (hundreds of bytes) as part of its own future, and `Oneshot`
    /// moves them twice more to make the call: counted at ~400 instructions of `memcpy` per
    /// request on scb's stack. A service that is ready when asked (with a waker that
    /// ignores wake-ups, as nothing waits yet) is called at once, so this holds only its
    /// future; one that is not goes into a boxed `Oneshot`, polled again with the real
    /// waker, which the `Service` contract allows.
    #[project = DispatchProj]
    enum Dispatch<S, Req>
    where
        S: Service<Req>,
    {
        Called {
            #[pin]
            future: S::Future,
        },
        Waiting {
            future: Pin<Box<Oneshot<S, Req>>>,
        },
        Failed {
            error: Option<S::Error>,
        },
    }
}

impl<S: Service<Req>, Req> Dispatch<S, Req> {
    fn new(mut service: S, req: Req) -> Self {
        match service.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => Self::Called {
                future: service.call(req),
            },
            Poll::Ready(Err(error)) => Self::Failed { error: Some(error) },
            Poll::Pending => Self::Waiting {
                future: Box::pin(service.oneshot(req)),
            },
        }
    }
}

impl<S: Service<Req>, Req> Future for Dispatch<S, Req> {
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            DispatchProj::Called { future } => future.poll(cx),
            DispatchProj::Waiting { future } => future.as_mut().poll(cx),
            DispatchProj::Failed { error } => match error.take() {
                Some(error) => Poll::Ready(Err(error)),
                None => panic!("router future polled after completion"),
            },
        }
    }
}

impl<S, F, Req> fmt::Debug for ResponseFuture<S, F, Req>
where
    S: Service<Req>,
    F: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Route { .. } => f.write_str("ResponseFuture::Route"),
            Kind::Fallback { .. } => f.write_str("ResponseFuture::Fallback"),
        }
    }
}

impl<S, F, Req, B> Future for ResponseFuture<S, F, Req>
where
    S: Service<Req, Response = Response<B>>,
    F: Service<Req, Response = Response<B>, Error = S::Error>,
{
    type Output = Result<Response<B>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Route { future } => future.poll(cx),
            KindProj::Fallback { future } => future.poll(cx),
        }
    }
}

/// A route's service of any type, boxed, so that routes of different kinds share one
/// [`Router`]: see [`Router::boxed_route`]. `Send + Sync` and `Clone`, so the router works
/// in axum as on scb's server. One allocation per request (the boxed future); a router
/// whose kinds are known can route to an enum instead.
pub type BoxRoute<B = Body> =
    tower::util::BoxCloneSyncService<Request<B>, Response<Body>, Infallible>;

impl<F, B> Router<BoxRoute<B>, F> {
    /// Adds the route `name` with a service of any type, boxed into a [`BoxRoute`].
    ///
    /// # Errors
    ///
    /// As [`route`](Self::route).
    pub fn boxed_route<T>(
        self,
        name: impl Into<Arc<str>>,
        path: PathMatch,
        service: T,
    ) -> Result<Self, RouterError>
    where
        T: Service<Request<B>, Response = Response<Body>, Error = Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        T::Future: Send + 'static,
    {
        self.route(name, path, BoxRoute::new(service))
    }
}

/// The default fallback: `404 Not Found`, `text/plain`, body `Not Found\n`.
#[derive(Clone, Copy, Debug, Default)]
pub struct NotFound;

impl<B> Service<Request<B>> for NotFound {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        ready(Ok(crate::respond::reason(StatusCode::NOT_FOUND)))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::header;
    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, service_fn};

    use super::*;
    use crate::request_id::RequestIdLayer;
    use crate::respond::Respond;

    /// A service that answers with its tag and the path it was given.
    fn tagged(
        tag: &'static str,
    ) -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<Body>, Infallible>>,
    > + Clone {
        service_fn(move |req: Request<Body>| async move {
            let path = req.uri().path().to_owned();
            Ok::<_, Infallible>(Response::new(Body::from(format!("{tag} {path}"))))
        })
    }

    fn exact(p: &str) -> PathMatch {
        PathMatch::Exact(p.to_owned())
    }

    fn prefix(p: &str) -> PathMatch {
        PathMatch::Prefix(p.to_owned())
    }

    async fn body(res: Response<Body>) -> Bytes {
        res.into_body().collect().await.unwrap().to_bytes()
    }

    async fn get<S>(svc: &S, uri: &str) -> Response<Body>
    where
        S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
    {
        let req = Request::get(uri).body(Body::empty()).unwrap();
        svc.clone().oneshot(req).await.unwrap()
    }

    #[tokio::test]
    async fn exact_beats_prefix_and_longest_prefix_wins() {
        let router = Router::new()
            .route("root", prefix("/"), tagged("root"))
            .unwrap()
            .route("api", prefix("/api"), tagged("api"))
            .unwrap()
            .route("api-v2", prefix("/api/v2/"), tagged("api-v2"))
            .unwrap()
            .route("api-exact", exact("/api/v2/special"), tagged("special"))
            .unwrap();
        for (uri, want) in [
            ("/api/v2/special", "special"),
            ("/api/v2/special/more", "api-v2"),
            ("/api/v2/users?x=1", "api-v2"),
            ("/api/v1/users", "api"),
            ("/api", "api"),
            ("/api/v2", "api"),
            ("/apiary", "root"),
            ("/", "root"),
            ("/anything/else", "root"),
        ] {
            let path = uri.split('?').next().unwrap();
            let got = body(get(&router, uri).await).await;
            assert_eq!(got, format!("{want} {path}"), "{uri}");
        }
    }

    #[test]
    fn prefix_matches_on_segment_boundaries_only() {
        assert!(prefix_matches("/api", "/api"));
        assert!(prefix_matches("/api", "/api/"));
        assert!(prefix_matches("/api", "/api/x"));
        assert!(!prefix_matches("/api", "/apiary"));
        assert!(!prefix_matches("/api", "/ap"));
        assert!(prefix_matches("/static/", "/static/app.js"));
        assert!(!prefix_matches("/static/", "/static"));
        assert!(prefix_matches("/", "/anything"));
        assert!(!prefix_matches("/", ""));
    }

    #[tokio::test]
    async fn unmatched_path_gets_the_not_found_fallback() {
        let router = Router::new()
            .route("api", prefix("/api"), tagged("api"))
            .unwrap();
        let res = get(&router, "/elsewhere").await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        assert_eq!(body(res).await, "Not Found\n");
    }

    #[tokio::test]
    async fn path_is_matched_as_received_without_decoding() {
        let router = Router::new()
            .route("api", prefix("/api"), tagged("api"))
            .unwrap();
        let res = get(&router, "/%61pi/users").await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn custom_fallback_answers_unmatched_requests() {
        let router = Router::new()
            .route("api", prefix("/api"), tagged("api"))
            .unwrap()
            .fallback(tagged("fallback"));
        assert_eq!(body(get(&router, "/other").await).await, "fallback /other");
    }

    #[tokio::test]
    async fn router_adds_no_extensions_to_request_or_response() {
        // Each `Extensions` insert allocates a map and a box; the router must not pay that
        // per request.
        let svc = service_fn(|req: Request<Body>| async move {
            assert!(req.extensions().is_empty());
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let router = Router::new()
            .route("health", exact("/healthz"), svc)
            .unwrap()
            .route("api", prefix("/api"), svc)
            .unwrap();
        for uri in ["/healthz", "/api/x"] {
            let res = get(&router, uri).await;
            assert!(res.extensions().is_empty(), "{uri}");
        }
    }

    #[tokio::test]
    async fn many_exact_routes_added_in_any_order_are_all_found() {
        // Not in sorted order, with paths that share prefixes and differ in length, so the
        // binary search sees both sides of every comparison.
        let paths = [
            "/m", "/b", "/zz", "/a", "/a/b", "/ab", "/", "/a/", "/y", "/c/d/e", "/aa", "/c",
        ];
        let mut router = Router::new();
        for (i, &path) in paths.iter().enumerate() {
            router = router
                .route(format!("r{i}"), exact(path), tagged(path))
                .unwrap();
        }
        for path in paths {
            assert_eq!(
                body(get(&router, path).await).await,
                format!("{path} {path}"),
                "{path}"
            );
        }
        for miss in ["/0", "/a/b/", "/ba", "/zzz", "/c/d", "/A"] {
            assert_eq!(
                get(&router, miss).await.status(),
                StatusCode::NOT_FOUND,
                "{miss}"
            );
        }
    }

    #[tokio::test]
    async fn works_inside_a_service_builder_stack() {
        let router = Router::new()
            .route(
                "ok",
                exact("/ok"),
                Respond::new(StatusCode::OK).body("fine"),
            )
            .unwrap();
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .service(router);
        let res = get(&svc, "/ok").await;
        assert!(res.headers().contains_key("x-request-id"));
        assert_eq!(body(res).await, "fine");
        let res = get(&svc, "/missing").await;
        assert!(res.headers().contains_key("x-request-id"));
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn invalid_routes_are_refused_with_a_reason() {
        let ok = || Respond::new(StatusCode::OK);
        let base = || {
            Router::new()
                .route("a", exact("/a"), ok())
                .unwrap()
                .route("p", prefix("/p"), ok())
                .unwrap()
        };
        let cases = [
            ("", exact("/x"), RouterError::EmptyName),
            (
                "a",
                exact("/x"),
                RouterError::DuplicateName { name: "a".into() },
            ),
            (
                "p",
                prefix("/y"),
                RouterError::DuplicateName { name: "p".into() },
            ),
            (
                "b",
                exact("/a"),
                RouterError::DuplicateExact { path: "/a".into() },
            ),
            (
                "b",
                prefix("/p"),
                RouterError::DuplicatePrefix {
                    prefix: "/p".into(),
                },
            ),
            (
                "b",
                exact("a"),
                RouterError::NotAbsolute { path: "a".into() },
            ),
            (
                "b",
                prefix(""),
                RouterError::NotAbsolute { path: "".into() },
            ),
        ];
        for (name, path, want) in cases {
            let err = base().route(name, path, ok()).unwrap_err();
            assert_eq!(err, want);
        }
        // The same string may be both an exact path and a prefix.
        assert!(base().route("b", prefix("/a"), ok()).is_ok());
        assert_eq!(
            RouterError::DuplicatePrefix {
                prefix: "/p".into()
            }
            .to_string(),
            "path prefix `/p` is routed twice"
        );
    }

    #[tokio::test]
    async fn adding_routes_to_a_clone_leaves_the_original_alone() {
        let original = Router::new().route("a", exact("/a"), tagged("a")).unwrap();
        let extended = original
            .clone()
            .route("b", exact("/b"), tagged("b"))
            .unwrap();
        assert_eq!(get(&original, "/b").await.status(), StatusCode::NOT_FOUND);
        assert_eq!(body(get(&extended, "/b").await).await, "b /b");
    }

    #[tokio::test]
    async fn a_route_not_ready_yet_waits_for_readiness_then_answers() {
        use tower::limit::ConcurrencyLimitLayer;

        // One request at a time across clones: the first holds the permit until `release`.
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(Some(held)));
        let slow = service_fn(move |_req: Request<Body>| {
            let held = held.lock().unwrap().take();
            async move {
                if let Some(held) = held {
                    held.await.unwrap();
                }
                Ok::<_, Infallible>(Response::new(Body::from("done")))
            }
        });
        let limited = ServiceBuilder::new()
            .layer(ConcurrencyLimitLayer::new(1))
            .service(slow);
        let router = Router::new()
            .route("slow", exact("/slow"), limited)
            .unwrap();

        let first = tokio::spawn(
            router
                .clone()
                .oneshot(Request::get("/slow").body(Body::empty()).unwrap()),
        );
        tokio::task::yield_now().await;
        let mut second = std::pin::pin!(get(&router, "/slow"));
        // The second request's clone has no permit: it waits, it is not refused.
        assert!(futures_poll_once(second.as_mut()).await.is_pending());
        release.send(()).unwrap();
        assert_eq!(body(first.await.unwrap().unwrap()).await, "done");
        assert_eq!(body(second.await).await, "done");
    }

    #[tokio::test]
    async fn a_route_failing_readiness_fails_its_request_with_that_error() {
        #[derive(Clone)]
        struct Broken;
        impl Service<Request<Body>> for Broken {
            type Response = Response<Body>;
            type Error = &'static str;
            type Future = Ready<Result<Response<Body>, &'static str>>;
            fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Err("backend gone"))
            }
            fn call(&mut self, _req: Request<Body>) -> Self::Future {
                unreachable!("never ready")
            }
        }
        let router = Router::new()
            .route("broken", exact("/broken"), Broken)
            .unwrap()
            .fallback(service_fn(|_req: Request<Body>| {
                ready(Ok::<_, &'static str>(Response::new(Body::empty())))
            }));
        let req = Request::get("/broken").body(Body::empty()).unwrap();
        assert_eq!(router.oneshot(req).await.unwrap_err(), "backend gone");
    }

    /// Polls `future` once with the test's waker.
    async fn futures_poll_once<T>(future: Pin<&mut impl Future<Output = T>>) -> Poll<T> {
        let mut future = Some(future);
        std::future::poll_fn(|cx| Poll::Ready(future.take().unwrap().poll(cx))).await
    }

    #[test]
    fn router_is_send_and_sync_and_future_send_when_services_are() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Router<Respond>>();
        send::<ResponseFuture<Respond, NotFound, Request<Body>>>();
    }
}
