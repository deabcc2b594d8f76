//! Route requests by path, and by method, headers, query and client where a route asks:
//! exact paths first, then regular expressions, then the longest matching prefix, then a
//! fallback.
//!
//! A [`Router`] holds named routes, each an exact path, a regular expression or a prefix
//! (optionally with conditions: a [`RouteMatch`]) bound to a service of one type `S`. Routes of different kinds (a closure, `ServeStatic`, `ReverseProxy`) go
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
//! - [`PathMatch::Regex`] matches when its expression finds a match in the path (anchor
//!   it with `^...$` to take the whole path). The expression's groups are given to the
//!   route's service as [`PathCaptures`]. Needs the `regex` feature (on by default).
//! - [`PathMatch::Prefix`] matches on segment boundaries: `/api` matches `/api` and
//!   `/api/users` but not `/apiary`; `/static/` matches `/static/app.js` but not `/static`.
//!   `/` matches every path. Among matching prefixes the longest wins. This is what
//!   "prefix" means throughout scb: [`prefix_matches`].
//! - The order: the exact path's routes, then the regex routes in the order they were
//!   added, then the prefixes from the longest. A route with conditions ([`RouteMatch`]:
//!   methods, headers, query, client networks) is skipped when the request does not meet
//!   them, and the search goes on. Routes of one exact path or one prefix are tried with
//!   conditions first, in the order added, then the one without, which takes the rest.
//! - The path is matched as received: no percent-decoding and no dot-segment removal.
//!   `/%61pi` does not match `/api`. A service behind the router that decodes paths
//!   itself must not rely on the router for access control over the decoded form.
//! - Nothing matches: the fallback answers, by default [`NotFound`].
//!
//! A table of exact paths and prefixes is searched without allocating, conditions or not;
//! a regex route that matches allocates its captures.

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
use crate::spans::SpanNotes;

mod captures;
mod conditions;
#[cfg(feature = "regex")]
mod patterns;
#[cfg(not(feature = "regex"))]
#[path = "no_patterns.rs"]
mod patterns;
mod route;
mod table;

pub use captures::PathCaptures;
pub use conditions::{Glob, RouteMatch};
use table::Table;

/// How a route matches a request path. An exact path and a prefix must start with `/`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathMatch {
    /// The path equals this string.
    Exact(String),
    /// The path starts with this string at a segment boundary (see the
    /// [module documentation](self)).
    Prefix(String),
    /// The path matches this regular expression (the `regex` crate's syntax; named groups
    /// `(?<id>...)`).
    Regex(String),
}

impl PathMatch {
    /// The path, prefix or expression as given.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Exact(s) | Self::Prefix(s) | Self::Regex(s) => s,
        }
    }
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
    /// Another route without conditions already has this expression.
    #[error("path expression `{pattern}` is routed twice")]
    DuplicatePattern {
        /// The repeated expression.
        pattern: String,
    },
    /// The expression does not compile (or this build has no `regex` feature).
    #[error("path expression `{pattern}`: {reason}")]
    Regex {
        /// The expression as given.
        pattern: String,
        /// Why it cannot be used.
        reason: String,
    },
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
            table: Arc::new(Table::new()),
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
    /// Adds the route `name`, serving requests that match `path` (a [`PathMatch`], or a
    /// [`RouteMatch`] with conditions) with `service`.
    ///
    /// # Errors
    ///
    /// If `name` is empty or taken, if the path or prefix does not start with `/`, if an
    /// expression does not compile, or if another route without conditions already has
    /// the same exact path, prefix or expression.
    pub fn route(
        mut self,
        name: impl Into<Arc<str>>,
        path: impl Into<RouteMatch>,
        service: S,
    ) -> Result<Self, RouterError>
    where
        S: Clone,
    {
        // Copies the table only if a clone of this router is still holding it.
        Arc::make_mut(&mut self.table).insert(name.into(), path.into(), service)?;
        Ok(self)
    }

    /// The name of the route `req` goes to; `None` when the fallback answers it.
    pub fn route_name<B>(&self, req: &Request<B>) -> Option<&Arc<str>> {
        self.table.find(req).map(|found| &found.route.name)
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
    /// [`AccessNotes`] and [`SpanNotes`], for an access log and a span above it.
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
            .field("patterns", &self.table.patterns)
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

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let found = self.table.find(&req);
        if self.table.note_routes
            && let Some(name) = found
                .as_ref()
                .map(|f| &f.route.name)
                .or(self.table.fallback_name.as_ref())
        {
            let extensions = req.extensions();
            if let Some(notes) = extensions.get::<AccessNotes>() {
                notes.route(name);
            }
            if let Some(notes) = extensions.get::<SpanNotes>() {
                notes.route(name);
            }
        }
        match found {
            Some(found) => {
                let service = found.route.service.clone();
                if let Some(captures) = found.captures {
                    req.extensions_mut().insert(captures);
                }
                ResponseFuture::chosen(service, req)
            }
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
        path: impl Into<RouteMatch>,
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
mod tests;
