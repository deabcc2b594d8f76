//! [`StatusPage`]: the service answering `/status` and `/status.json`.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::SystemTime;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use scb_core::Body;
use tower::Service;

use super::json;
use super::sampler::Sampled;
use super::{STATUS_JSON_PATH, STATUS_PATH};

/// The page: one HTML document with its style and script inline.
const PAGE: &str = include_str!("page.html");

/// What the page may load: its own inline style and script (by hash: nothing injected
/// could run), `status.json` from its own origin, a `data:` icon; no frames, forms or
/// base URL.
static CONTENT_SECURITY_POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let value = format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
         connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
        sha256(inline(PAGE, "script")),
        sha256(inline(PAGE, "style")),
    );
    HeaderValue::from_str(&value).expect("hashes are base64")
});

/// The text of the one `<tag>` element of `page`, as the browser hashes it.
fn inline<'a>(page: &'a str, tag: &str) -> &'a str {
    let open = format!("<{tag}>");
    let start = page.find(&open).map(|i| i + open.len());
    let end = page.find(&format!("</{tag}>"));
    match (start, end) {
        (Some(start), Some(end)) if start <= end => &page[start..end],
        _ => panic!("page.html has no <{tag}> element"),
    }
}

/// The base64 SHA-256 of `text`, as CSP hash sources write it.
fn sha256(text: &str) -> String {
    use base64::Engine as _;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// What a status answer reads besides the sampler's figures: the plan's upstreams,
/// certificates, worker count and whether any route caches (`Plan::status_sources`).
#[derive(Debug, Default)]
pub(crate) struct Sources {
    /// Each proxy (and FastCGI) route's upstreams, by route name, in config order.
    pub(crate) upstreams: Vec<(Arc<str>, Upstreams)>,
    /// The TLS listeners' acceptors, whose certificates are listed.
    pub(crate) acceptors: Vec<scb_tls::TlsAcceptor>,
    /// The main server's workers, each listed with or without connections.
    pub(crate) workers: usize,
    /// Whether a route has a cache (else `cache` is `null`).
    pub(crate) cache: bool,
}

/// A route's upstreams, whose state every worker shares.
#[derive(Debug)]
pub(crate) enum Upstreams {
    Proxy(scb_proxy::ReverseProxy),
    FastCgi(scb_proxy::fastcgi::FastCgi),
}

impl Upstreams {
    fn status(&self) -> Vec<scb_proxy::UpstreamStatus<'_>> {
        match self {
            Self::Proxy(proxy) => proxy.upstream_status().collect(),
            Self::FastCgi(fastcgi) => fastcgi.upstream_status().collect(),
        }
    }
}

/// `/status` (the page) and `/status.json` (its figures) on the metrics listener: see
/// the [module docs](super).
#[derive(Clone, Debug)]
pub(crate) struct StatusPage {
    sampled: Arc<Sampled>,
    sources: Arc<Sources>,
}

impl StatusPage {
    /// The page of `sources` (a plan's routes and listeners), with `sampled`'s figures.
    pub(crate) fn new(sampled: Arc<Sampled>, sources: Sources) -> Self {
        Self {
            sampled,
            sources: Arc::new(sources),
        }
    }

    /// The document `/status.json` answers with, as of now.
    fn status(&self) -> json::Status {
        let figures = self.sampled.figures();
        let sources = &*self.sources;
        let mut status = figures.status.clone();
        status.version = env!("CARGO_PKG_VERSION");
        let now = SystemTime::now();
        status.time = humantime::format_rfc3339_seconds(now).to_string();
        if !sources.cache {
            status.cache = None;
        }

        // Every worker, those without a connection yet too.
        let count = figures
            .workers
            .keys()
            .next_back()
            .map_or(0, |last| last + 1)
            .max(sources.workers);
        status.connections.workers = (0..count)
            .map(|worker| json::Worker {
                worker,
                open: figures.workers.get(&worker).copied().unwrap_or(0.0),
            })
            .collect();
        status.connections.open = status.connections.workers.iter().map(|w| w.open).sum();

        status.upstreams = sources
            .upstreams
            .iter()
            .flat_map(|(route, upstreams)| {
                upstreams
                    .status()
                    .into_iter()
                    .map(|upstream| {
                        // The upstream metrics' label: every route's tries at that address.
                        let label = upstream.upstream.authority().as_str();
                        let (per_second, errors_per_second) =
                            figures.upstreams.get(label).copied().unwrap_or_default();
                        json::Upstream {
                            route: route.to_string(),
                            address: upstream.upstream.to_string(),
                            up: upstream.up,
                            in_flight: upstream.in_flight,
                            per_second,
                            errors_per_second,
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect();

        let mut certificates: Vec<json::Certificate> = Vec::new();
        for info in sources.acceptors.iter().flat_map(|a| a.certificates()) {
            let file = info.cert.display().to_string();
            let not_after = humantime::format_rfc3339_seconds(info.not_after).to_string();
            // Two listeners of one certificate list it once.
            if certificates
                .iter()
                .any(|c| c.file == file && c.not_after == not_after && c.names == info.names)
            {
                continue;
            }
            let left = match info.not_after.duration_since(now) {
                Ok(left) => left.as_secs_f64(),
                Err(past) => -past.duration().as_secs_f64(),
            };
            certificates.push(json::Certificate {
                names: info.names,
                file,
                not_before: humantime::format_rfc3339_seconds(info.not_before).to_string(),
                not_after,
                expires_in_days: super::history::round(left / 86_400.0),
            });
        }
        // The first to expire first.
        certificates.sort_by(|a, b| a.expires_in_days.total_cmp(&b.expires_in_days));
        status.certificates = certificates;
        status
    }
}

impl Service<Request<Body>> for StatusPage {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if !matches!(*req.method(), Method::GET | Method::HEAD) {
            let mut res = scb_core::respond::reason(StatusCode::METHOD_NOT_ALLOWED);
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return ready(Ok(res));
        }
        let mut res = match req.uri().path() {
            STATUS_JSON_PATH => {
                let mut body = serde_json::to_vec(&self.status()).expect("the status serializes");
                body.push(b'\n');
                let mut res = Response::new(Body::from(body));
                res.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                res
            }
            path => {
                debug_assert_eq!(path, STATUS_PATH);
                let mut res = Response::new(Body::from(PAGE));
                let headers = res.headers_mut();
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                headers.insert(
                    header::CONTENT_SECURITY_POLICY,
                    CONTENT_SECURITY_POLICY.clone(),
                );
                headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
                headers.insert(
                    header::REFERRER_POLICY,
                    HeaderValue::from_static("no-referrer"),
                );
                res
            }
        };
        // Live figures: never from a cache.
        let headers = res.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    /// A page over a proxy route named `api <b>&` with two upstreams, and three workers.
    fn page() -> StatusPage {
        let upstreams =
            ["127.0.0.1:9", "127.0.0.1:10"].map(|a| scb_proxy::Upstream::new(a).unwrap());
        let proxy = scb_proxy::ReverseProxy::builder(upstreams).build().unwrap();
        let sources = Sources {
            upstreams: vec![("api <b>&".into(), Upstreams::Proxy(proxy))],
            workers: 3,
            ..Sources::default()
        };
        StatusPage::new(Arc::new(Sampled::default()), sources)
    }

    async fn get(page: &StatusPage, path: &str) -> Response<Body> {
        page.clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_json_has_every_field_of_the_schema() {
        let res = get(&page(), STATUS_JSON_PATH).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        assert_eq!(
            keys(&json),
            [
                "cache",
                "certificates",
                "chart",
                "connections",
                "latency_ms",
                "requests",
                "routes",
                "status_classes",
                "time",
                "upstreams",
                "version",
                "window_seconds"
            ]
        );
        assert_eq!(
            keys(&json["requests"]),
            ["errors_per_second", "in_flight", "per_second", "total"]
        );
        assert_eq!(
            keys(&json["status_classes"]),
            ["1xx", "2xx", "3xx", "4xx", "5xx"]
        );
        assert_eq!(
            keys(&json["latency_ms"]),
            ["count", "p50", "p90", "p99", "window_seconds"]
        );
        assert_eq!(
            keys(&json["chart"]),
            [
                "errors_per_second",
                "interval_seconds",
                "requests_per_second"
            ]
        );
        // No sample yet: no percentile, and no cache without a cached route.
        assert!(json["latency_ms"]["p99"].is_null());
        assert!(json["cache"].is_null());
        // The workers the plan has, before any of them had a connection.
        let workers = json["connections"]["workers"].as_array().unwrap();
        assert_eq!(workers.len(), 3);
        assert_eq!(workers[2], serde_json::json!({"worker": 2, "open": 0.0}));
        // Each upstream of each route, with the route's name as written.
        let upstreams = json["upstreams"].as_array().unwrap();
        assert_eq!(upstreams.len(), 2);
        assert_eq!(
            keys(&upstreams[0]),
            [
                "address",
                "errors_per_second",
                "in_flight",
                "per_second",
                "route",
                "up"
            ]
        );
        assert_eq!(upstreams[1]["route"], "api <b>&");
        assert_eq!(upstreams[1]["address"], "127.0.0.1:10");
        assert_eq!(upstreams[1]["up"], true);
        assert!(
            json["time"].as_str().unwrap().ends_with('Z'),
            "{}",
            json["time"]
        );
    }

    #[tokio::test]
    async fn the_page_is_self_contained_and_allows_only_its_own_script_and_style() {
        let res = get(&page(), STATUS_PATH).await;
        assert_eq!(res.status(), StatusCode::OK);
        let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.starts_with("default-src 'none'; script-src 'sha256-"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let html = std::str::from_utf8(&body).unwrap();
        // One inline script and one style, hashed as they stand; nothing from elsewhere.
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(html.matches("<style").count(), 1);
        for outside in ["http:", "https:", "src=", "//", "@import", "url("] {
            let found = html
                .lines()
                .filter(|l| l.contains(outside))
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>();
            assert!(found.is_empty(), "{outside}: {found:?}");
        }
        assert!(html.contains("<noscript>"));
        // Data goes into the page as text, never as markup.
        assert!(!html.contains("innerHTML") && !html.contains("insertAdjacentHTML"));
        assert!(csp.contains(&format!("'sha256-{}'", sha256(inline(PAGE, "script")))));
    }

    #[tokio::test]
    async fn other_methods_are_refused() {
        let res = page()
            .oneshot(Request::post(STATUS_JSON_PATH).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(res.headers()[header::ALLOW], "GET, HEAD");
    }

    #[test]
    fn a_known_text_hashes_as_browsers_hash_it() {
        // The CSP specification's example: `alert('Hello, world.');`.
        assert_eq!(
            sha256("alert('Hello, world.');"),
            "qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng="
        );
    }
}
