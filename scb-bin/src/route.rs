//! The service behind a configured route, one variant per handler kind.
//!
//! An enum rather than a boxed service: dispatch is a `match`, the future is an enum too,
//! and nothing on the request path allocates for it. A new handler kind is a new variant
//! of [`Handler`], [`RouteService`] and [`ResponseFuture`].

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use scb_core::Body;
use scb_core::respond::Respond;
use scb_proxy::{ActiveHealth, Balance, PassiveHealth, ReverseProxy, TrustedProxies, Upstream};
use scb_static::ServeStatic;
use scb_static::compress::{Compress, CompressLayer};
use tower::{Layer as _, Service};

/// What a route does, as loaded from the config: shared by all workers (`Send + Sync`).
///
/// Each worker turns it into its own [`RouteService`] with [`service`](Self::service),
/// which is where per-worker state (a proxy's connection pool) is created.
#[derive(Clone, Debug)]
pub(crate) enum Handler {
    /// A fixed response.
    Respond(Respond),
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
    Proxy(ProxyHandler),
}

/// A proxy route's proxy, and the settings it was built from (to build it again, see
/// [`Handler::with_current_recorder`]).
#[derive(Clone, Debug)]
pub(crate) struct ProxyHandler {
    /// What it was built from.
    pub(crate) settings: Arc<ProxySettings>,
    /// The proxy every worker's service shares its upstream state with.
    pub(crate) proxy: ReverseProxy,
}

impl ProxyHandler {
    /// Builds the proxy.
    pub(crate) fn new(settings: ProxySettings) -> Result<Self, scb_proxy::BuildError> {
        let proxy = settings.build()?;
        Ok(Self {
            settings: Arc::new(settings),
            proxy,
        })
    }
}

/// Everything a proxy route sets, checked: each field is the
/// [`ReverseProxyBuilder`](scb_proxy::ReverseProxyBuilder) setting of the same name, and
/// `None` leaves its default.
///
/// Kept (rather than only the built proxy) because a proxy registers its per-upstream
/// metric handles when it is built, and a plan is built before `scb run` installs the
/// metrics recorder: [`Handler::with_current_recorder`] builds it again afterwards.
#[derive(Clone, Debug)]
pub(crate) struct ProxySettings {
    pub(crate) upstreams: Vec<Upstream>,
    pub(crate) balance: Balance,
    pub(crate) strip_prefix: Option<String>,
    pub(crate) preserve_host: Option<bool>,
    pub(crate) trusted_proxies: Option<TrustedProxies>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) response_timeout: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) try_timeout: Option<Duration>,
    pub(crate) max_body: Option<u64>,
    pub(crate) max_tries: Option<usize>,
    pub(crate) max_idle: Option<usize>,
    pub(crate) pool_idle_timeout: Option<Duration>,
    pub(crate) max_response_head: Option<usize>,
    pub(crate) passive: Option<PassiveHealth>,
    pub(crate) active: Option<ActiveHealth>,
}

impl ProxySettings {
    /// A proxy with these settings.
    fn build(&self) -> Result<ReverseProxy, scb_proxy::BuildError> {
        let mut b =
            ReverseProxy::builder(self.upstreams.iter().cloned()).balance(self.balance.clone());
        if let Some(prefix) = &self.strip_prefix {
            b = b.strip_prefix(prefix.as_str());
        }
        if let Some(preserve) = self.preserve_host {
            b = b.preserve_host(preserve);
        }
        if let Some(trusted) = &self.trusted_proxies {
            b = b.trusted_proxies(trusted.clone());
        }
        if let Some(timeout) = self.connect_timeout {
            b = b.connect_timeout(timeout);
        }
        if let Some(timeout) = self.response_timeout {
            b = b.response_timeout(timeout);
        }
        if let Some(timeout) = self.idle_timeout {
            b = b.idle_timeout(timeout);
        }
        if let Some(timeout) = self.try_timeout {
            b = b.try_timeout(timeout);
        }
        if let Some(bytes) = self.max_body {
            b = b.max_body(Some(bytes));
        }
        if let Some(tries) = self.max_tries {
            b = b.max_tries(tries);
        }
        if let Some(max) = self.max_idle {
            b = b.max_idle_per_upstream(max);
        }
        if let Some(timeout) = self.pool_idle_timeout {
            b = b.pool_idle_timeout(timeout);
        }
        if let Some(bytes) = self.max_response_head {
            b = b.max_response_head(bytes);
        }
        if let Some(passive) = self.passive {
            b = b.passive_health(passive);
        }
        if let Some(active) = &self.active {
            b = b.active_health(active.clone());
        }
        b.build()
    }
}

impl Handler {
    /// The same handler, rebuilt where building registers metric handles (a proxy's
    /// per-upstream metrics), so that they record into the recorder installed now. The
    /// other handlers register nothing themselves and are cloned.
    pub(crate) fn with_current_recorder(&self) -> Self {
        match self {
            Self::Proxy(proxy) => Self::Proxy(ProxyHandler {
                settings: Arc::clone(&proxy.settings),
                proxy: proxy
                    .settings
                    .build()
                    .expect("these settings built a proxy before"),
            }),
            other => other.clone(),
        }
    }

    /// A service for one worker.
    pub(crate) fn service(&self) -> RouteService {
        match self {
            Self::Respond(respond) => RouteService::Respond(respond.clone()),
            Self::Static {
                files,
                compress: None,
            } => RouteService::Static(files.clone()),
            Self::Static {
                files,
                compress: Some(layer),
            } => RouteService::CompressedStatic(layer.layer(files.clone())),
            Self::Proxy(proxy) => RouteService::Proxy(proxy.proxy.with_own_pool()),
        }
    }
}

/// A route's service on one worker.
#[derive(Clone, Debug)]
pub(crate) enum RouteService {
    /// A fixed response.
    Respond(Respond),
    /// Files beneath a directory.
    Static(ServeStatic),
    /// Files beneath a directory, compressed on the fly where that helps.
    CompressedStatic(Compress<ServeStatic>),
    /// A reverse proxy with this worker's connection pool.
    Proxy(ReverseProxy),
}

impl Service<Request<Body>> for RouteService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        match self {
            Self::Respond(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::Static(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::CompressedStatic(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
            Self::Proxy(svc) => Service::<Request<Body>>::poll_ready(svc, cx),
        }
    }

    fn call(&mut self, req: Request<Body>) -> ResponseFuture {
        match self {
            Self::Respond(svc) => ResponseFuture::Respond {
                future: svc.call(req),
            },
            Self::Static(svc) => ResponseFuture::Static {
                future: svc.call(req),
            },
            Self::CompressedStatic(svc) => ResponseFuture::CompressedStatic {
                future: svc.call(req),
            },
            Self::Proxy(svc) => ResponseFuture::Proxy {
                future: svc.call(req),
            },
        }
    }
}

pin_project! {
    /// Response future of [`RouteService`].
    #[project = ResponseFutureProj]
    #[derive(Debug)]
    pub(crate) enum ResponseFuture {
        /// A [`Respond`] answering.
        Respond {
            #[pin]
            future: <Respond as Service<Request<Body>>>::Future,
        },
        /// [`ServeStatic`] answering.
        Static {
            #[pin]
            future: scb_static::ResponseFuture,
        },
        /// [`Compress`] over [`ServeStatic`] answering.
        CompressedStatic {
            #[pin]
            future: scb_static::compress::ResponseFuture<scb_static::ResponseFuture>,
        },
        /// [`ReverseProxy`] answering.
        Proxy {
            #[pin]
            future: scb_proxy::ResponseFuture,
        },
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Respond { future } => future.poll(cx),
            ResponseFutureProj::Static { future } => future.poll(cx),
            ResponseFutureProj::CompressedStatic { future } => future.poll(cx),
            ResponseFutureProj::Proxy { future } => future.poll(cx),
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
        let handler = Handler::Proxy(
            ProxyHandler::new(ProxySettings {
                upstreams: vec![Upstream::new(&closed.to_string()).unwrap()],
                balance: Balance::default(),
                strip_prefix: None,
                preserve_host: None,
                trusted_proxies: None,
                connect_timeout: None,
                response_timeout: None,
                idle_timeout: None,
                try_timeout: None,
                max_body: None,
                max_tries: None,
                max_idle: None,
                pool_idle_timeout: None,
                max_response_head: None,
                passive: None,
                active: None,
            })
            .unwrap(),
        );
        let res = handler
            .service()
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    }
}
