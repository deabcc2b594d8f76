//! [`AltSvcLayer`]: tells clients on TCP that the same origin speaks HTTP/3 over QUIC
//! (`Alt-Svc: h3=":443"; ma=86400`, RFC 7838 and RFC 9114 §3.1.1).
//!
//! Browsers learn of HTTP/3 only this way (or from a DNS HTTPS record): the first request
//! goes over TCP, its answer names the UDP port, and later requests try QUIC. The header
//! goes on answers to requests that came over HTTP/1.1 or HTTP/2 on the listeners named
//! (by the bound address in [`ConnectInfo::local`]); an HTTP/3 answer needs none, and a
//! listener without QUIC must not advertise it, or clients would try a port that never
//! answers.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::alt_svc::AltSvcLayer;
//! use scb_core::connection::ConnectInfo;
//! use scb_core::{Body, respond::Respond};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let listener = "0.0.0.0:443".parse().unwrap();
//! let svc = ServiceBuilder::new()
//!     .layer(AltSvcLayer::new().listener(listener, 443))
//!     .service(Respond::new(StatusCode::OK));
//! let mut req = Request::get("/").body(Body::empty()).unwrap();
//! req.extensions_mut().insert(ConnectInfo {
//!     remote: "192.0.2.7:50000".parse().unwrap(),
//!     local: listener,
//!     secure: true,
//! });
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.headers()["alt-svc"], "h3=\":443\"; ma=86400");
//! # }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderValue, Request, Response, Version, header};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::connection::ConnectInfo;

/// Adds `Alt-Svc` naming the HTTP/3 port to answers on the listeners given, unless the
/// request came over HTTP/3 or the answer has an `Alt-Svc` already.
#[derive(Clone, Debug)]
pub struct AltSvcLayer {
    max_age: Duration,
    /// Each listener's address and the header it sends.
    listeners: Arc<[(SocketAddr, HeaderValue)]>,
}

impl Default for AltSvcLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl AltSvcLayer {
    /// No listener yet: add them with [`listener`](Self::listener).
    pub fn new() -> Self {
        Self {
            max_age: Duration::from_secs(86_400),
            listeners: Arc::from([]),
        }
    }

    /// How long a client may remember the alternative (`ma`). Defaults to 24 hours.
    /// Set it before adding listeners: each listener's header is made when it is added.
    #[must_use]
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// Requests that arrived on `listener` (its bound address) are told HTTP/3 is on
    /// UDP port `port`. Defaults to no listener.
    #[must_use]
    pub fn listener(mut self, listener: SocketAddr, port: u16) -> Self {
        let value = format!("h3=\":{port}\"; ma={}", self.max_age.as_secs());
        let value = HeaderValue::try_from(value).expect("digits and ASCII punctuation");
        let mut listeners = self.listeners.to_vec();
        listeners.push((listener, value));
        self.listeners = listeners.into();
        self
    }
}

impl<S> Layer<S> for AltSvcLayer {
    type Service = AltSvc<S>;

    fn layer(&self, inner: S) -> AltSvc<S> {
        AltSvc {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`AltSvcLayer`].
#[derive(Clone, Debug)]
pub struct AltSvc<S> {
    inner: S,
    layer: AltSvcLayer,
}

impl<S, B, ResB> Service<Request<B>> for AltSvc<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let value = if req.version() == Version::HTTP_3 {
            None
        } else {
            req.extensions().get::<ConnectInfo>().and_then(|info| {
                self.layer
                    .listeners
                    .iter()
                    .find(|(addr, _)| *addr == info.local)
                    .map(|(_, value)| value.clone())
            })
        };
        ResponseFuture {
            future: self.inner.call(req),
            value,
        }
    }
}

pin_project! {
    /// Response future of [`AltSvc`].
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        future: F,
        value: Option<HeaderValue>,
    }
}

impl<F, ResB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = ready!(this.future.poll(cx))?;
        if let Some(value) = this.value.take() {
            res.headers_mut().entry(header::ALT_SVC).or_insert(value);
        }
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use tower::{ServiceBuilder, ServiceExt as _};

    use super::*;
    use crate::Body;
    use crate::respond::Respond;

    fn on(local: &str, version: Version) -> Request<Body> {
        let mut req = Request::get("/")
            .version(version)
            .body(Body::empty())
            .unwrap();
        req.extensions_mut().insert(ConnectInfo {
            remote: "192.0.2.7:50000".parse().unwrap(),
            local: local.parse().unwrap(),
            secure: true,
        });
        req
    }

    async fn alt_svc(layer: AltSvcLayer, req: Request<Body>) -> Option<String> {
        let res = ServiceBuilder::new()
            .layer(layer)
            .service(Respond::new(StatusCode::OK))
            .oneshot(req)
            .await
            .unwrap();
        res.headers()
            .get(header::ALT_SVC)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    #[tokio::test]
    async fn only_the_named_listeners_advertise_and_each_names_its_port() {
        let layer = AltSvcLayer::new()
            .max_age(Duration::from_secs(3600))
            .listener("0.0.0.0:443".parse().unwrap(), 443)
            .listener("[::]:8443".parse().unwrap(), 8443);
        let cases = [
            (
                "0.0.0.0:443",
                Version::HTTP_11,
                Some("h3=\":443\"; ma=3600"),
            ),
            ("0.0.0.0:443", Version::HTTP_2, Some("h3=\":443\"; ma=3600")),
            ("[::]:8443", Version::HTTP_2, Some("h3=\":8443\"; ma=3600")),
            // A listener without QUIC, and an answer already over HTTP/3.
            ("0.0.0.0:80", Version::HTTP_11, None),
            ("0.0.0.0:443", Version::HTTP_3, None),
        ];
        for (local, version, expected) in cases {
            assert_eq!(
                alt_svc(layer.clone(), on(local, version)).await.as_deref(),
                expected,
                "{local} {version:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_request_without_connect_info_gets_no_header() {
        let layer = AltSvcLayer::new().listener("0.0.0.0:443".parse().unwrap(), 443);
        let req = Request::get("/").body(Body::empty()).unwrap();
        assert_eq!(alt_svc(layer, req).await, None);
    }

    #[tokio::test]
    async fn an_answer_with_its_own_alt_svc_keeps_it() {
        let svc = ServiceBuilder::new()
            .layer(AltSvcLayer::new().listener("0.0.0.0:443".parse().unwrap(), 443))
            .service(
                Respond::new(StatusCode::OK)
                    .header(header::ALT_SVC, HeaderValue::from_static("clear")),
            );
        let res = svc
            .oneshot(on("0.0.0.0:443", Version::HTTP_11))
            .await
            .unwrap();
        assert_eq!(res.headers()[header::ALT_SVC], "clear");
    }
}
