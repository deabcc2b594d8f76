//! The tower stacks the binary serves, built once per worker.
//!
//! ```text
//! main server:    RequestId -> AccessLog -> CatchPanic -> [RedirectHttps] -> [AltSvc] -> [Hsts]
//!                   -> VirtualHosts by host (only when there are named sites)
//!                   each site: HeaderRules (site) -> Router
//!                     routes:   Metrics(route name; off without [metrics]) -> [guards] -> RouteService
//!                               guards, only those configured (route::Guarded):
//!                               ErrorPages -> IpFilter -> RateLimit -> MaxConcurrent
//!                               -> HeaderRules -> Rewrite -> CORS -> BasicAuth -> Compress
//!                     fallback: Metrics("unmatched") -> NotFound
//! metrics server: RequestId -> Router
//!                   [metrics].path -> RenderMetrics, [health] paths -> HealthCheck,
//!                   /cache/purge -> PurgeCaches, [status] /status and /status.json
//!                   -> StatusPage, fallback NotFound
//! ```
//!
//! The access-log layer is always in the stack, so that the stack is one static type:
//! with `[log] access` on it hands records to the writer thread; off, it emits `tracing`
//! events at `scb::access`, a target the subscriber turns off (see `main.rs`), so it
//! costs one cached filter check per request.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::recorder::MetricsHandle;
use http::{HeaderName, HeaderValue, Request, Response, header};
use scb_core::Body;
use scb_core::access_log::{AccessLog, AccessLogLayer};
use scb_core::alt_svc::{AltSvc, AltSvcLayer};
use scb_core::catch_panic::{CatchPanic, CatchPanicLayer};

use scb_core::health::{HealthCheck, Readiness};
use scb_core::https::{Hsts, HstsLayer, RedirectHttps, RedirectHttpsLayer};
use scb_core::metrics::{Metrics, MetricsLayer};
use scb_core::request_id::{RequestId, RequestIdLayer};
use scb_core::router::{BoxRoute, NotFound, PathMatch, Router, RouterError};
use scb_core::spans::{Spans, SpansLayer};
use scb_core::virtual_hosts::{Misdirected, VirtualHosts, VirtualHostsError};
use scb_tls::acme::Http01;
use tower::util::Either;
use tower::{Layer, Service, ServiceBuilder};

use crate::labels::{ACME, HTTPS_REDIRECT, UNMATCHED};
use crate::one_of::OneOf;
use crate::plan::SitePlan;
use crate::route::RouteService;

/// The sites with the https layers a config may add.
type Routed = Either<RedirectHttps<Advertised>, Advertised>;
/// The sites with HSTS and `Alt-Svc`, when the config has them.
type Advertised = Either<AltSvc<Either<Hsts<Sites>, Sites>>, Either<Hsts<Sites>, Sites>>;
/// The one site (no lookup), or sites chosen by host when there are named ones; a host
/// no site takes gets 421, counted as `unmatched`.
type Sites = OneOf<Site, VirtualHosts<Site, Metrics<Misdirected>>>;
/// A site's routes, each (and its fallback) behind the site's and its own rules.
type Site = Router<Metrics<RouteService>, Metrics<RouteService>>;

/// The main server's stack on one worker: with `[tracing]`, spans outside the access log
/// (which logs their trace ids).
pub(crate) type AppService = RequestId<Either<Spans<Logged>, Logged>>;
/// Everything beneath the spans.
type Logged = AccessLog<CatchPanic<Either<Http01<Routed>, Routed>>>;

/// [`HttpsPlan`](crate::plan::HttpsPlan) with listener indexes turned into the bound
/// addresses the requests' `ConnectInfo` carries.
#[derive(Clone, Debug, Default)]
pub(crate) struct Https {
    /// Plain listeners that redirect, and the port they name.
    pub(crate) redirect: Option<(Vec<SocketAddr>, u16)>,
    /// The HSTS value and the TLS listeners that send it.
    pub(crate) hsts: Option<(HeaderValue, Vec<SocketAddr>)>,
    /// `Alt-Svc` for the TCP answers of the listeners that also serve HTTP/3.
    pub(crate) alt_svc: Option<AltSvcLayer>,
}

impl Https {
    /// Resolves `plan` against the addresses the listeners were bound to (config order).
    pub(crate) fn new(plan: &crate::plan::HttpsPlan, bound: &[SocketAddr]) -> Self {
        let pick = |indexes: &[usize]| -> Vec<SocketAddr> {
            indexes
                .iter()
                .filter_map(|&i| bound.get(i).copied())
                .collect()
        };
        Self {
            redirect: (!plan.redirect.is_empty()).then(|| {
                let port = plan
                    .https_listener
                    .and_then(|i| bound.get(i))
                    .map_or(443, SocketAddr::port);
                (pick(&plan.redirect), port)
            }),
            hsts: plan
                .hsts
                .as_ref()
                .map(|(value, listeners)| (value.clone(), pick(listeners))),
            alt_svc: alt_svc(&plan.alt_svc, bound),
        }
    }
}

/// The `Alt-Svc` layer for the HTTP/3 listeners `(index, max age)`: each advertises its
/// own port (the bound one: a port 0 in the config is the kernel's choice); none when no
/// listener advertises.
fn alt_svc(
    listeners: &[(usize, std::time::Duration)],
    bound: &[SocketAddr],
) -> Option<AltSvcLayer> {
    let mut advertised = listeners
        .iter()
        .filter(|(_, max_age)| !max_age.is_zero())
        .filter_map(|&(i, max_age)| Some((*bound.get(i)?, max_age)))
        .peekable();
    advertised.peek()?;
    Some(
        advertised.fold(AltSvcLayer::new(), |layer, (addr, max_age)| {
            layer.max_age(max_age).listener(addr, addr.port())
        }),
    )
}

/// What the main stack records of each request besides metrics.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Records<'a> {
    /// The access log layer.
    pub(crate) access_log: &'a AccessLogLayer,
    /// Whether the access log writes anywhere.
    pub(crate) logged: bool,
    /// `[tracing]`'s layer, when there is one.
    pub(crate) spans: Option<&'a SpansLayer>,
}

/// Builds the main stack for one worker. Metric handles are registered here, so the
/// recorder must be installed first; with `metrics` false (no endpoint reads them) the
/// routes record nothing and read no clock for it. When neither the access log writes
/// anywhere nor spans are made, the routers do not note route names.
///
/// # Errors
///
/// When the router refuses a route; a [`Plan`](crate::plan::Plan) has already refused
/// everything the router would, so this is a bug if it happens.
pub(crate) fn app(
    sites: &[SitePlan],
    header: &HeaderName,
    https: &Https,
    records: Records<'_>,
    acme: Option<&scb_tls::Http01Layer>,
    metrics: bool,
) -> Result<AppService, StackError> {
    let Records {
        access_log,
        logged,
        spans,
    } = records;
    // The routers note route names for the access log and the spans.
    let logged = logged || spans.is_some();
    let metrics_layer = |route: &str| {
        if metrics {
            MetricsLayer::new(route.to_owned())
        } else {
            MetricsLayer::off()
        }
    };
    let site = |plan: &SitePlan| -> Result<Site, RouterError> {
        let mut router = Router::new().note_routes(logged);
        for route in plan.routes.iter() {
            let service = route.guards.wrap(route.handler.service());
            let service = metrics_layer(&route.name).layer(service);
            router = router.route(Arc::clone(&route.name), route.matcher.clone(), service)?;
        }
        let fallback = plan.fallback.wrap(RouteService::NotFound(NotFound));
        Ok(router
            .fallback(metrics_layer(UNMATCHED).layer(fallback))
            .fallback_name(UNMATCHED))
    };
    let sites: Sites = match sites {
        [only] if only.hosts.is_empty() => OneOf::Plain(site(only)?),
        _ => {
            let mut hosts =
                VirtualHosts::new().fallback(metrics_layer(UNMATCHED).layer(Misdirected));
            for plan in sites {
                let service = site(plan)?;
                hosts = if plan.hosts.is_empty() {
                    hosts.default_site(service)?
                } else {
                    hosts.site(plan.hosts.iter().map(String::as_str), service)?
                };
            }
            OneOf::Layered(hosts)
        }
    };
    Ok(ServiceBuilder::new()
        .layer(RequestIdLayer::new().header(header.clone()))
        .option_layer(spans.cloned())
        .layer(access_log.clone())
        .layer(CatchPanicLayer::new())
        // ACME's HTTP-01 answers, before any redirect to https.
        .option_layer(acme.map(|acme| acme.clone().metrics(metrics_layer(ACME))))
        .option_layer(https.redirect.as_ref().map(|(listeners, port)| {
            RedirectHttpsLayer::new()
                .port(*port)
                .only_on(listeners.iter().copied())
                .metrics(metrics_layer(HTTPS_REDIRECT))
        }))
        .option_layer(https.alt_svc.clone())
        .option_layer(https.hsts.as_ref().map(|(value, listeners)| {
            HstsLayer::new(value.clone()).only_on(listeners.iter().copied())
        }))
        .service(sites))
}

/// Why a stack cannot be built; a [`Plan`](crate::plan::Plan) has refused everything
/// that would cause it, so this is a bug if it happens.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StackError {
    #[error(transparent)]
    Router(#[from] RouterError),
    #[error(transparent)]
    Sites(#[from] VirtualHostsError),
}

/// The metrics server's stack: its routes boxed (a scrape every few seconds and a probe or
/// two; the box costs nothing that matters there).
pub(crate) type MetricsService = RequestId<Router<BoxRoute>>;

/// Builds the metrics server's stack: the scrape at `path`, the `probes` (liveness and
/// readiness paths) answered from `readiness`, the cache purge, the status page when
/// there is one, 404 elsewhere.
///
/// # Errors
///
/// When `path` is not absolute (a [`Plan`](crate::plan::Plan) has refused that already).
pub(crate) fn metrics(
    handle: MetricsHandle,
    path: &str,
    probes: Option<(&str, &str)>,
    readiness: &Readiness,
    header: &HeaderName,
    caches: &crate::purge::PurgeCaches,
    status: Option<&crate::status::StatusPage>,
) -> Result<MetricsService, RouterError> {
    let mut router = Router::new()
        .boxed_route(
            "metrics",
            PathMatch::Exact(path.to_owned()),
            RenderMetrics {
                handle,
                process: metrics_process::Collector::default(),
            },
        )?
        .boxed_route(
            "cache_purge",
            PathMatch::Exact(crate::purge::PURGE_PATH.to_owned()),
            caches.clone(),
        )?;
    if let Some(status) = status {
        router = router
            .boxed_route(
                "status",
                PathMatch::Exact(crate::status::STATUS_PATH.to_owned()),
                status.clone(),
            )?
            .boxed_route(
                "status_json",
                PathMatch::Exact(crate::status::STATUS_JSON_PATH.to_owned()),
                status.clone(),
            )?;
    }
    if let Some((live, ready)) = probes {
        router = router
            .boxed_route(
                "liveness",
                PathMatch::Exact(live.to_owned()),
                HealthCheck::liveness(),
            )?
            .boxed_route(
                "readiness",
                PathMatch::Exact(ready.to_owned()),
                HealthCheck::readiness(readiness.clone()),
            )?;
    }
    Ok(RequestIdLayer::new().header(header.clone()).layer(router))
}

/// The Prometheus text exposition format, version 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Answers with the Prometheus text rendering of every metric, the process's own
/// (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
/// ...) read from /proc at that moment.
#[derive(Clone, Debug)]
pub(crate) struct RenderMetrics {
    handle: MetricsHandle,
    process: metrics_process::Collector,
}

impl<B> Service<Request<B>> for RenderMetrics {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        // Into the global recorder, the one `handle` renders.
        self.process.collect();
        let mut res = Response::new(Body::from(self.handle.render()));
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROMETHEUS_TEXT),
        );
        ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;
    use crate::plan::Plan;

    const CONFIG: &str = r#"
        [[listen]]
        addr = "127.0.0.1:0"
        [[route]]
        name = "hello"
        path = "/respond"
        respond = { status = 200, body = "Hello, world!", content_type = "text/plain" }
        [[route]]
        prefix = "/api/"
        respond = { status = 202, body = "api" }
    "#;

    async fn get(svc: &AppService, uri: &str) -> Response<Body> {
        let req = Request::get(uri).body(Body::empty()).unwrap();
        svc.clone().oneshot(req).await.unwrap()
    }

    async fn text(res: Response<Body>) -> String {
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn app_routes_by_path_and_sets_request_ids() {
        let plan = Plan::from_source(CONFIG).unwrap();
        let svc = app(
            &plan.sites,
            &plan.server.settings().request_id_header,
            &Https::default(),
            Records {
                access_log: &AccessLogLayer::new(),
                logged: true,
                spans: None,
            },
            None,
            true,
        )
        .unwrap();

        let res = get(&svc, "/respond").await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "text/plain");
        assert!(res.headers().contains_key("x-request-id"));
        assert_eq!(text(res).await, "Hello, world!");

        let res = get(&svc, "/api/users").await;
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        assert_eq!(text(res).await, "api");

        let res = get(&svc, "/nowhere").await;
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert!(res.headers().contains_key("x-request-id"));
    }

    #[tokio::test]
    async fn app_uses_the_configured_request_id_header() {
        let config = format!("[request_id]\nheader = \"X-Trace-Id\"\n{CONFIG}");
        let plan = Plan::from_source(&config).unwrap();
        let svc = app(
            &plan.sites,
            &plan.server.settings().request_id_header,
            &Https::default(),
            Records {
                access_log: &AccessLogLayer::new(),
                logged: true,
                spans: None,
            },
            None,
            true,
        )
        .unwrap();
        let req = Request::get("/respond")
            .header("x-trace-id", "abc-123")
            .body(Body::empty())
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.headers()["x-trace-id"], "abc-123");
        assert!(!res.headers().contains_key("x-request-id"));
    }

    #[tokio::test]
    async fn metrics_service_renders_at_its_path_only() {
        let recorder = crate::recorder::MetricsRecorder::new(&[]);
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("scb_test_total").increment(3);
        });
        let readiness = Readiness::new();
        let svc = metrics(
            handle,
            "/metrics",
            Some(("/healthz", "/readyz")),
            &readiness,
            &scb_core::request_id::X_REQUEST_ID,
            &crate::purge::PurgeCaches::new(Vec::new()),
            None,
        )
        .unwrap();

        let req = Request::get("/metrics").body(Body::empty()).unwrap();
        let res = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()[header::CONTENT_TYPE], PROMETHEUS_TEXT);
        assert!(res.headers().contains_key("x-request-id"));
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(body.contains("scb_test_total 3"), "{body}");

        let req = Request::get("/other").body(Body::empty()).unwrap();
        let res = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::NOT_FOUND);

        let probe = |path: &'static str| {
            svc.clone()
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
        };
        assert_eq!(probe("/healthz").await.unwrap().status(), StatusCode::OK);
        assert_eq!(probe("/readyz").await.unwrap().status(), StatusCode::OK);
        readiness.drain();
        assert_eq!(probe("/healthz").await.unwrap().status(), StatusCode::OK);
        assert_eq!(
            probe("/readyz").await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
