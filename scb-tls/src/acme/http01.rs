//! [`Http01Layer`]: answers the CA's HTTP-01 validations on a plain listener.
//!
//! ```
//! use scb_core::respond::Respond;
//! use scb_tls::{AcmeSettings, Http01Layer, TlsAcceptor, TlsSettings};
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let acme = AcmeSettings::new(["example.com"], "/var/lib/scb/acme");
//! let acceptor = TlsAcceptor::new(TlsSettings::acme(acme))?;
//! // The plain listener's stack: validations answered, everything else passed on.
//! let plain = ServiceBuilder::new()
//!     .layer(Http01Layer::new([&acceptor]))
//!     .service(Respond::new(http::StatusCode::MOVED_PERMANENTLY));
//! # let _ = plain;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use scb_core::Body;
use scb_core::metrics::MetricsLayer;
use tower::{Layer, Service};

use super::Challenges;
use crate::TlsAcceptor;

/// Where HTTP-01 validations ask (RFC 8555 §8.3).
const PREFIX: &str = "/.well-known/acme-challenge/";

/// Answers `GET /.well-known/acme-challenge/TOKEN` for the pending orders of some ACME
/// acceptors; every other request (and a token nobody is waiting on) goes to the inner
/// service.
#[derive(Clone, Debug)]
pub struct Http01Layer {
    challenges: Arc<[Arc<Challenges>]>,
    metrics: Option<MetricsLayer>,
}

impl Http01Layer {
    /// For the ACME orders of `acceptors` (those without ACME are skipped).
    pub fn new<'a>(acceptors: impl IntoIterator<Item = &'a TlsAcceptor>) -> Self {
        Self {
            challenges: acceptors
                .into_iter()
                .filter_map(TlsAcceptor::challenges)
                .collect(),
            metrics: None,
        }
    }

    /// Counts each validation this layer answers through `metrics` (see
    /// [`MetricsLayer::record`]). Defaults to none.
    #[must_use]
    pub fn metrics(mut self, metrics: MetricsLayer) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

impl<S> Layer<S> for Http01Layer {
    type Service = Http01<S>;

    fn layer(&self, inner: S) -> Http01<S> {
        Http01 {
            inner,
            challenges: Arc::clone(&self.challenges),
            metrics: self.metrics.clone(),
        }
    }
}

/// The service of [`Http01Layer`].
#[derive(Clone, Debug)]
pub struct Http01<S> {
    inner: S,
    challenges: Arc<[Arc<Challenges>]>,
    metrics: Option<MetricsLayer>,
}

impl<S, B> Service<Request<B>> for Http01<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let answer = (*req.method() == Method::GET || *req.method() == Method::HEAD)
            .then(|| req.uri().path().strip_prefix(PREFIX))
            .flatten()
            .and_then(|token| self.challenges.iter().find_map(|c| c.http01(token)));
        match answer {
            Some(key_authorization) => {
                let body = if *req.method() == Method::HEAD {
                    Body::empty()
                } else {
                    Body::from(key_authorization)
                };
                let mut res = Response::new(body);
                *res.status_mut() = StatusCode::OK;
                res.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                if let Some(metrics) = &self.metrics {
                    metrics.record(Some(req.method()), &res);
                }
                ResponseFuture::Answer {
                    response: Some(res),
                }
            }
            None => ResponseFuture::Inner {
                future: self.inner.call(req),
            },
        }
    }
}

pin_project! {
    /// Response future of [`Http01`].
    #[project = Projected]
    pub enum ResponseFuture<F> {
        /// A validation, answered.
        Answer { response: Option<Response<Body>> },
        /// Everything else.
        Inner { #[pin] future: F },
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Projected::Answer { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
            Projected::Inner { future } => future.poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, ServiceExt as _};

    use super::*;

    fn layer(challenges: &Arc<Challenges>) -> Http01Layer {
        Http01Layer {
            challenges: Arc::from(vec![Arc::clone(challenges)]),
            metrics: None,
        }
    }

    async fn get(layer: &Http01Layer, method: Method, path: &str) -> (StatusCode, String) {
        let svc =
            ServiceBuilder::new()
                .layer(layer.clone())
                .service_fn(|_req: Request<Body>| async {
                    Ok::<_, Infallible>(
                        Response::builder()
                            .status(404)
                            .body(Body::from("inner"))
                            .unwrap(),
                    )
                });
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn pending_tokens_are_answered_and_everything_else_passes() {
        let challenges = Arc::new(Challenges::default());
        challenges.put_http01("abc".into(), "abc.thumb".into());
        let layer = layer(&challenges);
        let path = "/.well-known/acme-challenge/abc";
        assert_eq!(
            get(&layer, Method::GET, path).await,
            (StatusCode::OK, "abc.thumb".into())
        );
        assert_eq!(
            get(&layer, Method::HEAD, path).await,
            (StatusCode::OK, String::new())
        );
        assert_eq!(get(&layer, Method::POST, path).await.1, "inner");
        assert_eq!(
            get(&layer, Method::GET, "/.well-known/acme-challenge/nope")
                .await
                .1,
            "inner"
        );
        assert_eq!(get(&layer, Method::GET, "/abc").await.1, "inner");
        challenges.clear();
        assert_eq!(get(&layer, Method::GET, path).await.1, "inner");
    }
}
