//! [`ReverseProxyLayer`]: the proxy in front of another service, for the requests under
//! a path prefix.
//!
//! ```no_run
//! use scb_core::respond::Respond;
//! use scb_proxy::{ReverseProxy, ReverseProxyLayer, Upstream};
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let proxy = ReverseProxy::builder([Upstream::new("127.0.0.1:8081")?]).build()?;
//! // `/api` and everything below it goes upstream; the rest is answered here.
//! let app = ServiceBuilder::new()
//!     .layer(ReverseProxyLayer::new(proxy, "/api/"))
//!     .service(Respond::new(http::StatusCode::OK).body("home\n"));
//! # let _ = app;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use scb_core::{Body, BoxError};
use tower::{Layer, Service};

use crate::service::ReverseProxy;

/// Sends requests whose path is under `prefix` to a [`ReverseProxy`], and the others to
/// the inner service. "Under" is scb's one meaning of a path prefix,
/// [`prefix_matches`](scb_core::router::prefix_matches): on a segment boundary, `/api`
/// takes `/api` and `/api/x` but not `/apix`, and `/api/` takes only what is below `/api/`.
/// The path goes upstream whole, unless the proxy was built with `strip_prefix`.
#[derive(Clone, Debug)]
pub struct ReverseProxyLayer {
    proxy: ReverseProxy,
    prefix: Arc<str>,
}

impl ReverseProxyLayer {
    /// The proxy for the requests under `prefix` (`"/"` for all of them).
    pub fn new(proxy: ReverseProxy, prefix: impl Into<String>) -> Self {
        let prefix: String = prefix.into();
        Self {
            proxy,
            prefix: prefix.into(),
        }
    }
}

impl<S> Layer<S> for ReverseProxyLayer {
    type Service = ReverseProxyOr<S>;

    fn layer(&self, inner: S) -> ReverseProxyOr<S> {
        ReverseProxyOr {
            proxy: self.proxy.clone(),
            prefix: Arc::clone(&self.prefix),
            inner,
        }
    }
}

/// The service made by [`ReverseProxyLayer`].
#[derive(Clone, Debug)]
pub struct ReverseProxyOr<S> {
    proxy: ReverseProxy,
    prefix: Arc<str>,
    inner: S,
}

impl<S> ReverseProxyOr<S> {
    fn covers(&self, path: &str) -> bool {
        scb_core::router::prefix_matches(&self.prefix, path)
    }
}

/// Any inner service: its responses' bodies come out as [`Body`] (free when they already
/// are one), its errors as they are, so the layer fits axum's `Router::layer` as well as
/// a stack of scb's own services.
impl<S, B, ResB> Service<Request<B>> for ReverseProxyOr<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if self.covers(req.uri().path()) {
            ResponseFuture {
                state: State::Proxy {
                    future: self.proxy.call(req),
                },
            }
        } else {
            ResponseFuture {
                state: State::Inner {
                    future: self.inner.call(req),
                },
            }
        }
    }
}

pin_project! {
    /// Response future of [`ReverseProxyOr`].
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F> {
        Proxy {
            #[pin]
            future: crate::service::ResponseFuture,
        },
        Inner {
            #[pin]
            future: F,
        },
    }
}

impl<F, ResB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Proxy { future } => future.poll(cx).map(|res| match res {
                Ok(res) => Ok(res),
                Err(never) => match never {},
            }),
            StateProj::Inner { future } => {
                future.poll(cx).map(|res| res.map(|res| res.map(Body::new)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use scb_core::respond::Respond;
    use tower::{ServiceBuilder, ServiceExt as _};

    use super::*;
    use crate::Upstream;

    #[tokio::test]
    async fn requests_under_the_prefix_go_upstream_and_the_rest_inside() {
        // A port nothing listens on: the proxy's answer is a quick 502.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let proxy = ReverseProxy::builder([Upstream::new(&addr).unwrap()])
            .build()
            .unwrap();
        let app = ServiceBuilder::new()
            .layer(ReverseProxyLayer::new(proxy, "/api/"))
            .service(Respond::new(StatusCode::OK).body("inside"));
        for (path, status) in [
            // `/api/` is what is below `/api/`, as in the Router.
            ("/api", StatusCode::OK),
            ("/api/users?x=1", StatusCode::BAD_GATEWAY),
            ("/apix", StatusCode::OK),
            ("/", StatusCode::OK),
            ("/other/api/", StatusCode::OK),
        ] {
            let req = Request::get(path).body(Body::empty()).unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            assert_eq!(res.status(), status, "{path}");
        }
        let proxy = ReverseProxy::builder([Upstream::new(&addr).unwrap()])
            .build()
            .unwrap();
        let app = ServiceBuilder::new()
            .layer(ReverseProxyLayer::new(proxy, "/api"))
            .service(Respond::new(StatusCode::OK).body("inside"));
        for (path, status) in [
            ("/api", StatusCode::BAD_GATEWAY),
            ("/api/users", StatusCode::BAD_GATEWAY),
            ("/apix", StatusCode::OK),
        ] {
            let req = Request::get(path).body(Body::empty()).unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            assert_eq!(res.status(), status, "{path}");
        }
    }
}
