//! The service behind a configured route, one variant per handler kind.
//!
//! An enum rather than a boxed service: dispatch is a `match`, the future is an enum too,
//! and nothing on the request path allocates for it. A new handler kind is a new variant
//! of [`Handler`], [`RouteService`] and [`ResponseFuture`].

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use scb_core::Body;
use scb_core::basic_auth::{BasicAuth, BasicAuthLayer};
use scb_core::error_pages::{ErrorPages, ErrorPagesLayer};
use scb_core::header_rules::{HeaderRulesLayer, HeaderRulesService};
use scb_core::health::HealthCheck;
use scb_core::ip_filter::{IpFilter, IpFilterLayer};
use scb_core::max_concurrent::{MaxConcurrent, MaxConcurrentLayer};
use scb_core::rate_limit::{RateLimit, RateLimitLayer};
use scb_core::redirect::Redirect;
use scb_core::respond::Respond;
use scb_core::rewrite::{Rewrite, RewriteLayer};
use scb_core::router::NotFound;
use tower_http::cors::{Cors, CorsLayer};

use crate::one_of::OneOf;
use crate::script_route::ScriptRoute;
use scb_proxy::ReverseProxy;
use scb_proxy::cache::{Cache, CacheLayer};
use scb_proxy::fastcgi::FastCgi;
use scb_proxy::forward_auth::{ForwardAuth, ForwardAuthLayer};
use scb_static::ServeStatic;
use scb_static::compress::{Compress, CompressLayer};
use scb_static::try_files::{TryFiles, TryFilesLayer};
use tower::{Layer, Service};

/// What a route does, as loaded from the config: shared by all workers (`Send + Sync`).
///
/// Each worker turns it into its own [`RouteService`] with [`service`](Self::service),
/// which is where per-worker state (a proxy's connection pool) is created.
#[derive(Clone, Debug)]
pub(crate) enum Handler {
    /// A fixed response.
    Respond(Respond),
    /// The process's readiness (`health = true`): 200, or 503 once a drain has started.
    Health(HealthCheck),
    /// Files beneath a directory. One `ServeStatic` (one root descriptor) serves every
    /// worker: it holds no per-request state and is `Send + Sync`.
    Static {
        /// The files.
        files: ServeStatic,
        /// On-the-fly compression, when the route turns it on.
        compress: Option<CompressLayer>,
    },
    /// A reverse proxy. Its upstream state (health, balancing, in-flight counts) is shared
    /// by every worker; each worker's service has a connection pool of its own.
    Proxy {
        /// The proxy.
        proxy: ReverseProxy,
        /// Its response cache, when the route has one: one store for every worker, so
        /// that an object is fetched once per server.
        cache: Option<CacheLayer>,
    },
    /// Scripts run by FastCGI servers, the other files beneath their root served. Upstream
    /// state is shared as a proxy's is; each worker's service has its own pool.
    FastCgi {
        /// The scripts.
        fastcgi: FastCgi,
        /// The other files (one root descriptor for every worker, as `Static`).
        files: ServeStatic,
    },
    /// A redirect.
    Redirect(Redirect),
}

impl Handler {
    /// A service for one worker.
    pub(crate) fn service(&self) -> RouteService {
        match self {
            Self::Respond(respond) => RouteService::Respond(respond.clone()),
            Self::Health(check) => RouteService::Health(check.clone()),
            Self::Static {
                files,
                compress: None,
            } => RouteService::Static(files.clone()),
            Self::Static {
                files,
                compress: Some(layer),
            } => RouteService::CompressedStatic(layer.layer(files.clone())),
            Self::Proxy { proxy, cache: None } => RouteService::Proxy(proxy.with_own_pool()),
            Self::Proxy {
                proxy,
                cache: Some(cache),
            } => RouteService::CachedProxy(cache.layer(proxy.with_own_pool())),
            Self::FastCgi { fastcgi, files } => RouteService::FastCgi(ScriptRoute {
                fastcgi: fastcgi.with_own_pool(),
                files: files.clone(),
            }),
            Self::Redirect(redirect) => RouteService::Redirect(redirect.clone()),
        }
    }
}

/// A route's service on one worker.
#[derive(Clone, Debug)]
pub(crate) enum RouteService {
    /// A fixed response.
    Respond(Respond),
    /// A readiness probe.
    Health(HealthCheck),
    /// Files beneath a directory.
    Static(ServeStatic),
    /// Files beneath a directory, compressed on the fly where that helps.
    CompressedStatic(Compress<ServeStatic>),
    /// A reverse proxy with this worker's connection pool.
    Proxy(ReverseProxy),
    /// A reverse proxy behind the route's cache.
    CachedProxy(Cache<ReverseProxy>),
    /// Scripts through FastCGI with this worker's pool, and the files beside them.
    FastCgi(ScriptRoute),
    /// A redirect.
    Redirect(Redirect),
    /// What a site answers when no route matches.
    NotFound(NotFound),
    /// A route behind its `allow`/`deny`, header rules and CORS. Its future is boxed:
    /// only the routes that have such rules pay for them (one allocation a request).
    Guarded(Box<Guarded>),
}

/// The layers of a guarded route, outermost first: the site's error pages, addresses,
/// the rate limit, the concurrency bound, header rules, the rewrite, CORS (answering
/// preflights, which carry no credentials, and marking refusals too), basic auth, forward
/// auth, compression and `try_files` (which chooses the path the handler sees, after every
/// guard has seen the client's).
pub(crate) type Guarded = OneOf<Filtered, ErrorPages<Filtered>>;
type Filtered = OneOf<Rated, IpFilter<Rated>>;
type Rated = OneOf<Limited, RateLimit<Limited>>;
type Limited = OneOf<Headed, MaxConcurrent<Headed>>;
type Headed = OneOf<Rewritten, HeaderRulesService<Rewritten>>;
type Rewritten = OneOf<WithCors, Rewrite<WithCors>>;
type WithCors = OneOf<Authed, Cors<Authed>>;
type Authed = OneOf<Checked, BasicAuth<Checked>>;
type Checked = OneOf<Compressed, ForwardAuth<Compressed>>;
type Compressed = OneOf<Tried, Compress<Tried>>;
type Tried = OneOf<RouteService, TryFiles<RouteService>>;

/// What a route puts in front of its handler, each part only when configured: owned by
/// the route's plan, shared by every worker's stack.
///
/// Adding a guard is a field here and its line in [`wrap`](Self::wrap) (plus its place in
/// the [`Guarded`] type above, which spells the same order).
#[derive(Clone, Debug, Default)]
pub(crate) struct Guards {
    /// The site's `error_pages`.
    pub(crate) error_pages: Option<ErrorPagesLayer>,
    /// `allow` and `deny`.
    pub(crate) ip_filter: Option<IpFilterLayer>,
    /// `rate_limit`: one table for every worker.
    pub(crate) rate_limit: Option<RateLimitLayer>,
    /// `max_concurrent`: one count for every worker.
    pub(crate) max_concurrent: Option<MaxConcurrentLayer>,
    /// The site's header rules, then the route's.
    pub(crate) headers: Option<HeaderRulesLayer>,
    /// `rewrite`.
    pub(crate) rewrite: Option<RewriteLayer>,
    /// `cors`.
    pub(crate) cors: Option<CorsLayer>,
    /// `basic_auth`, its users read at load.
    pub(crate) basic_auth: Option<BasicAuthLayer>,
    /// `forward_auth`; each worker's stack gets a connection pool of its own.
    pub(crate) forward_auth: Option<ForwardAuthLayer>,
    /// On-the-fly compression of a handler other than static files (whose compression is
    /// part of [`Handler::Static`]).
    pub(crate) compress: Option<CompressLayer>,
    /// `try_files`, on a static or FastCGI route.
    pub(crate) try_files: Option<TryFilesLayer>,
}

/// Builds a guard chain, noting whether any guard was there.
#[derive(Debug, Default)]
struct Chain {
    used: bool,
}

impl Chain {
    /// `inner` behind `layer` when there is one.
    fn maybe<L: Layer<S>, S>(&mut self, layer: Option<&L>, inner: S) -> OneOf<S, L::Service> {
        match layer {
            Some(layer) => {
                self.used = true;
                OneOf::Layered(layer.layer(inner))
            }
            None => OneOf::Plain(inner),
        }
    }
}

impl Guards {
    /// The guards there are, in the order requests meet them, for `scb check --print`
    /// (the site's error pages are the site's, not listed per route).
    pub(crate) fn names(&self) -> Vec<&'static str> {
        [
            ("allow/deny", self.ip_filter.is_some()),
            ("rate_limit", self.rate_limit.is_some()),
            ("max_concurrent", self.max_concurrent.is_some()),
            ("headers", self.headers.is_some()),
            ("rewrite", self.rewrite.is_some()),
            ("cors", self.cors.is_some()),
            ("basic_auth", self.basic_auth.is_some()),
            ("forward_auth", self.forward_auth.is_some()),
            ("compressed", self.compress.is_some()),
            ("try_files", self.try_files.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, there)| there.then_some(name))
        .collect()
    }

    /// `handler` behind the guards, outermost first; `handler` as it is when there are
    /// none (no box, no dynamic future: most routes have no guard).
    pub(crate) fn wrap(&self, handler: RouteService) -> RouteService {
        // Built once per worker, so the copy that is returned when no guard applies
        // costs nothing per request.
        let plain = handler.clone();
        let mut chain = Chain::default();
        let tried = chain.maybe(self.try_files.as_ref(), handler);
        let compressed = chain.maybe(self.compress.as_ref(), tried);
        let own_pool = self
            .forward_auth
            .as_ref()
            .map(ForwardAuthLayer::with_own_pool);
        let checked = chain.maybe(own_pool.as_ref(), compressed);
        let authed = chain.maybe(self.basic_auth.as_ref(), checked);
        let with_cors = chain.maybe(self.cors.as_ref(), authed);
        let rewritten = chain.maybe(self.rewrite.as_ref(), with_cors);
        let headed = chain.maybe(self.headers.as_ref(), rewritten);
        let limited = chain.maybe(self.max_concurrent.as_ref(), headed);
        let rated = chain.maybe(self.rate_limit.as_ref(), limited);
        let filtered = chain.maybe(self.ip_filter.as_ref(), rated);
        let guarded = chain.maybe(self.error_pages.as_ref(), filtered);
        if chain.used {
            RouteService::Guarded(Box::new(guarded))
        } else {
            plain
        }
    }
}

impl Service<Request<Body>> for RouteService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        match self {
            Self::Respond(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::Health(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::Static(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::CompressedStatic(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::Proxy(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::CachedProxy(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::FastCgi(svc) => svc.poll_ready(cx),
            Self::Redirect(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::NotFound(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::Guarded(svc) => svc.poll_ready(cx),
        }
    }

    fn call(&mut self, req: Request<Body>) -> ResponseFuture {
        match self {
            Self::Respond(svc) => ResponseFuture::Respond {
                future: svc.call(req),
            },
            // The same future type as a fixed response's: an answer ready at once.
            Self::Health(svc) => ResponseFuture::Respond {
                future: svc.call(req),
            },
            Self::Static(svc) => ResponseFuture::Static {
                future: svc.call(req),
            },
            Self::CompressedStatic(svc) => ResponseFuture::CompressedStatic {
                future: Box::pin(svc.call(req)),
            },
            Self::Proxy(svc) => ResponseFuture::Proxy {
                future: svc.call(req),
            },
            Self::CachedProxy(svc) => ResponseFuture::Cached {
                future: svc.call(req),
            },
            Self::FastCgi(svc) => ResponseFuture::Script {
                future: svc.call(req),
            },
            // An answer ready at once, like a fixed response's.
            Self::Redirect(svc) => ResponseFuture::Respond {
                future: svc.call(req),
            },
            Self::NotFound(svc) => ResponseFuture::Respond {
                future: svc.call(req),
            },
            Self::Guarded(svc) => ResponseFuture::Guarded {
                future: Box::pin(svc.call(req)),
            },
        }
    }
}

pin_project! {
    /// Response future of [`RouteService`].
    #[project = ResponseFutureProj]
    pub(crate) enum ResponseFuture {
        /// A [`Respond`] or a [`HealthCheck`] answering.
        Respond {
            #[pin]
            future: <Respond as Service<Request<Body>>>::Future,
        },
        /// [`ServeStatic`] answering.
        Static {
            #[pin]
            future: scb_static::ResponseFuture,
        },
        /// [`Compress`] over [`ServeStatic`] answering, boxed: it is the largest future and
        /// the rarest, and every layer above moves this enum at its size.
        CompressedStatic {
            future: Pin<Box<scb_static::compress::ResponseFuture<scb_static::ResponseFuture>>>,
        },
        /// [`ReverseProxy`] answering.
        Proxy {
            #[pin]
            future: scb_proxy::ResponseFuture,
        },
        /// A cached proxy answering (boxed by the cache).
        Cached {
            future: scb_proxy::cache::ResponseFuture<Infallible>,
        },
        /// A FastCGI route answering.
        Script {
            #[pin]
            future: crate::script_route::ScriptFuture,
        },
        /// A guarded route answering.
        Guarded {
            future: Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>>>>,
        },
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Respond { .. } => "ResponseFuture::Respond",
            Self::Static { .. } => "ResponseFuture::Static",
            Self::CompressedStatic { .. } => "ResponseFuture::CompressedStatic",
            Self::Proxy { .. } => "ResponseFuture::Proxy",
            Self::Cached { .. } => "ResponseFuture::Cached",
            Self::Script { .. } => "ResponseFuture::Script",
            Self::Guarded { .. } => "ResponseFuture::Guarded",
        })
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Respond { future } => future.poll(cx),
            ResponseFutureProj::Static { future } => future.poll(cx),
            ResponseFutureProj::CompressedStatic { future } => future.as_mut().poll(cx),
            ResponseFutureProj::Proxy { future } => future.poll(cx),
            ResponseFutureProj::Cached { future } => future.as_mut().poll(cx),
            ResponseFutureProj::Script { future } => future.poll(cx),
            ResponseFutureProj::Guarded { future } => future.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    #[tokio::test]
    async fn respond_route_answers_with_its_response() {
        let handler = Handler::Respond(Respond::new(StatusCode::ACCEPTED).body("queued\n"));
        let res = handler
            .service()
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "queued\n");
    }

    #[tokio::test]
    async fn proxy_route_answers_502_when_its_upstream_refuses() {
        // A port nobody listens on: bound, then closed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let handler = Handler::Proxy {
            proxy: ReverseProxy::builder([scb_proxy::Upstream::new(&closed.to_string()).unwrap()])
                .build()
                .unwrap(),
            cache: None,
        };
        let res = handler
            .service()
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    }
}
