//! Layers for sites served over TLS: [`RedirectHttpsLayer`] sends plain-HTTP requests to
//! the `https` URL of the same resource, and [`HstsLayer`] tells browsers to use `https`
//! from then on (`Strict-Transport-Security`).
//!
//! Both read the [`ConnectInfo`] the server puts in every request (`secure` says whether
//! the connection is TLS); a request without one counts as plain.
//!
//! ```
//! use http::{HeaderValue, Request, StatusCode};
//! use scb_core::https::{HstsLayer, RedirectHttpsLayer};
//! use scb_core::{Body, respond::Respond};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(RedirectHttpsLayer::new())
//!     .layer(HstsLayer::new(HeaderValue::from_static("max-age=31536000")))
//!     .service(Respond::new(StatusCode::OK).body("secret"));
//! let req = Request::get("/a?b=c").header("host", "example.com").body(Body::empty()).unwrap();
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::PERMANENT_REDIRECT);
//! assert_eq!(res.headers()["location"], "https://example.com/a?b=c");
//! # }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::connection::ConnectInfo;
use crate::metrics::MetricsLayer;
use crate::respond::text;
use crate::{Body, BoxError};

/// Answers plain-HTTP requests with `308 Permanent Redirect` to their `https` URL; secure
/// requests go to the inner service.
#[derive(Clone, Debug, Default)]
pub struct RedirectHttpsLayer {
    port: Option<u16>,
    listeners: Option<Arc<[SocketAddr]>>,
    metrics: Option<MetricsLayer>,
}

impl RedirectHttpsLayer {
    /// Redirects every plain request, to port 443.
    pub fn new() -> Self {
        Self::default()
    }

    /// The `https` port written into the `Location` (omitted when 443). Defaults to 443.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = (port != 443).then_some(port);
        self
    }

    /// Redirects only requests that arrived on these listener addresses (as
    /// [`ConnectInfo::local`] reports them); plain requests on other listeners go to the
    /// inner service. Defaults to every plain request.
    #[must_use]
    pub fn only_on(mut self, listeners: impl IntoIterator<Item = SocketAddr>) -> Self {
        self.listeners = Some(listeners.into_iter().collect());
        self
    }

    /// Counts each redirect this layer answers through `metrics` (see
    /// [`MetricsLayer::record`]): the requests it answers reach no route to count them.
    /// Defaults to none.
    #[must_use]
    pub fn metrics(mut self, metrics: MetricsLayer) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

impl<S> Layer<S> for RedirectHttpsLayer {
    type Service = RedirectHttps<S>;

    fn layer(&self, inner: S) -> RedirectHttps<S> {
        RedirectHttps {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`RedirectHttpsLayer`].
#[derive(Clone, Debug)]
pub struct RedirectHttps<S> {
    inner: S,
    layer: RedirectHttpsLayer,
}

impl<S> RedirectHttps<S> {
    fn redirects<B>(&self, req: &Request<B>) -> bool {
        let info = req.extensions().get::<ConnectInfo>();
        if info.is_some_and(|info| info.secure) {
            return false;
        }
        match (&self.layer.listeners, info) {
            (None, _) => true,
            (Some(listeners), Some(info)) => listeners.contains(&info.local),
            (Some(_), None) => false,
        }
    }
}

/// Any inner service: response bodies come out as [`Body`] (free when they already are
/// one), errors as they are.
impl<S, B, ResB> Service<Request<B>> for RedirectHttps<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = RedirectFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if self.redirects(&req) {
            let response = redirect(&req, self.layer.port);
            if let Some(metrics) = &self.layer.metrics {
                metrics.record(Some(req.method()), &response);
            }
            RedirectFuture {
                state: RedirectState::Now {
                    response: Some(response),
                },
            }
        } else {
            RedirectFuture {
                state: RedirectState::Inner {
                    future: self.inner.call(req),
                },
            }
        }
    }
}

/// The `308` for `req`, or `400` when it names no host to redirect to.
fn redirect<B>(req: &Request<B>, port: Option<u16>) -> Response<Body> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().host())
        .map(strip_port)
        .filter(|h| !h.is_empty() && !h.contains(['/', '@', '?', '#', ' ']));
    let Some(host) = host else {
        return text(StatusCode::BAD_REQUEST, "no host to redirect to\n");
    };
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let location = match port {
        Some(port) => format!("https://{host}:{port}{path}"),
        None => format!("https://{host}{path}"),
    };
    let Ok(location) = HeaderValue::try_from(location) else {
        return text(StatusCode::BAD_REQUEST, "no host to redirect to\n");
    };
    let mut res = text(StatusCode::PERMANENT_REDIRECT, "use https\n");
    res.headers_mut().insert(header::LOCATION, location);
    res
}

/// `example.com:80` -> `example.com`; `[::1]:80` -> `[::1]`.
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

pin_project! {
    /// Response future of [`RedirectHttps`].
    #[derive(Debug)]
    pub struct RedirectFuture<F> {
        #[pin]
        state: RedirectState<F>,
    }
}

pin_project! {
    #[project = RedirectStateProj]
    #[derive(Debug)]
    enum RedirectState<F> {
        Now { response: Option<Response<Body>> },
        Inner { #[pin] future: F },
    }
}

impl<F, ResB, E> Future for RedirectFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            RedirectStateProj::Now { response } => {
                Poll::Ready(Ok(response.take().unwrap_or_default()))
            }
            RedirectStateProj::Inner { future } => {
                future.poll(cx).map(|res| res.map(|res| res.map(Body::new)))
            }
        }
    }
}

/// Adds `Strict-Transport-Security` to every response to a secure request (RFC 6797 §7.2:
/// never over plain HTTP, where it would be ignored or spoofed), unless the response has
/// one already.
#[derive(Clone, Debug)]
pub struct HstsLayer {
    value: HeaderValue,
    listeners: Option<Arc<[SocketAddr]>>,
}

impl HstsLayer {
    /// The header with `value`, e.g. `max-age=31536000; includeSubDomains`.
    pub fn new(value: HeaderValue) -> Self {
        Self {
            value,
            listeners: None,
        }
    }

    /// Adds the header only to responses to requests that arrived on these listener
    /// addresses ([`ConnectInfo::local`]). Defaults to every secure request.
    #[must_use]
    pub fn only_on(mut self, listeners: impl IntoIterator<Item = SocketAddr>) -> Self {
        self.listeners = Some(listeners.into_iter().collect());
        self
    }
}

impl<S> Layer<S> for HstsLayer {
    type Service = Hsts<S>;

    fn layer(&self, inner: S) -> Hsts<S> {
        Hsts {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`HstsLayer`].
#[derive(Clone, Debug)]
pub struct Hsts<S> {
    inner: S,
    layer: HstsLayer,
}

impl<S, B, ResB> Service<Request<B>> for Hsts<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = HstsFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let applies = req.extensions().get::<ConnectInfo>().is_some_and(|info| {
            info.secure
                && self
                    .layer
                    .listeners
                    .as_ref()
                    .is_none_or(|listeners| listeners.contains(&info.local))
        });
        HstsFuture {
            future: self.inner.call(req),
            value: applies.then(|| self.layer.value.clone()),
        }
    }
}

pin_project! {
    /// Response future of [`Hsts`].
    #[derive(Debug)]
    pub struct HstsFuture<F> {
        #[pin]
        future: F,
        value: Option<HeaderValue>,
    }
}

impl<F, ResB, E> Future for HstsFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = ready!(this.future.poll(cx))?;
        if let Some(value) = this.value.take() {
            res.headers_mut()
                .entry(header::STRICT_TRANSPORT_SECURITY)
                .or_insert(value);
        }
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use tower::{ServiceBuilder, ServiceExt as _};

    use super::*;
    use crate::respond::Respond;

    fn request(path: &str, host: Option<&str>, secure: Option<bool>) -> Request<Body> {
        let mut req = Request::get(path);
        if let Some(host) = host {
            req = req.header("host", host);
        }
        let mut req = req.body(Body::empty()).unwrap();
        if let Some(secure) = secure {
            req.extensions_mut().insert(ConnectInfo {
                remote: "192.0.2.1:5000".parse().unwrap(),
                local: "0.0.0.0:80".parse().unwrap(),
                secure,
            });
        }
        req
    }

    #[test]
    fn redirects_are_counted_through_the_metrics_layer_given() {
        use futures_util::FutureExt as _;
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let layer = RedirectHttpsLayer::new().metrics(MetricsLayer::new("https_redirect"));
            let svc = app(layer);
            let call = |secure| {
                svc.clone()
                    .oneshot(request("/a", Some("example.com"), Some(secure)))
                    .now_or_never()
                    .unwrap()
                    .unwrap()
            };
            assert_eq!(call(false).status(), StatusCode::PERMANENT_REDIRECT);
            // A secure request passes through: not this layer's answer to count.
            assert_eq!(call(true).status(), StatusCode::OK);
        });
        let counted: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == crate::metrics::REQUESTS_TOTAL)
            .map(|(key, _, _, value)| {
                let labels: Vec<String> =
                    key.key().labels().map(|l| l.value().to_owned()).collect();
                (labels, value)
            })
            .collect();
        assert_eq!(
            counted,
            [(
                vec![
                    "https_redirect".to_owned(),
                    "GET".to_owned(),
                    "308".to_owned()
                ],
                DebugValue::Counter(1)
            )]
        );
    }

    fn app(layer: RedirectHttpsLayer) -> RedirectHttps<Hsts<Respond>> {
        ServiceBuilder::new()
            .layer(layer)
            .layer(HstsLayer::new(HeaderValue::from_static("max-age=60")))
            .service(Respond::new(StatusCode::OK).body("inner"))
    }

    #[tokio::test]
    async fn plain_requests_are_redirected_to_https_with_path_and_query() {
        let cases = [
            (
                "/a/b?c=d",
                Some("example.com"),
                None,
                "https://example.com/a/b?c=d",
            ),
            ("/", Some("example.com:8080"), None, "https://example.com/"),
            ("/x", Some("[::1]:80"), None, "https://[::1]/x"),
            (
                "/x",
                Some("example.com"),
                Some(8443),
                "https://example.com:8443/x",
            ),
        ];
        for (path, host, port, location) in cases {
            let mut layer = RedirectHttpsLayer::new();
            if let Some(port) = port {
                layer = layer.port(port);
            }
            let res = app(layer)
                .oneshot(request(path, host, Some(false)))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::PERMANENT_REDIRECT, "{path}");
            assert_eq!(res.headers()[header::LOCATION], location);
            assert!(
                !res.headers()
                    .contains_key(header::STRICT_TRANSPORT_SECURITY)
            );
        }
    }

    #[tokio::test]
    async fn a_request_without_a_usable_host_gets_400() {
        for host in [None, Some("evil.com/path@x"), Some("")] {
            let res = app(RedirectHttpsLayer::new())
                .oneshot(request("/", host, Some(false)))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{host:?}");
        }
    }

    #[tokio::test]
    async fn secure_requests_pass_and_get_hsts() {
        let res = app(RedirectHttpsLayer::new())
            .oneshot(request("/", Some("example.com"), Some(true)))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            res.headers()[header::STRICT_TRANSPORT_SECURITY],
            "max-age=60"
        );
    }

    #[tokio::test]
    async fn only_the_named_listeners_redirect() {
        let layer = RedirectHttpsLayer::new().only_on(["0.0.0.0:81".parse().unwrap()]);
        let res = app(layer)
            .oneshot(request("/", Some("example.com"), Some(false)))
            .await
            .unwrap();
        // The request came in on 0.0.0.0:80, not a redirecting listener: served plain,
        // and without HSTS, which plain HTTP must not carry.
        assert_eq!(res.status(), StatusCode::OK);
        assert!(
            !res.headers()
                .contains_key(header::STRICT_TRANSPORT_SECURITY)
        );
    }
}
