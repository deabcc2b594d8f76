//! Liveness and readiness for load balancers and orchestrators.
//!
//! [`Readiness`] is one flag for a whole process: ready until a drain starts (SIGTERM, an
//! upgrade hand-off), then not ready for good. [`HealthCheck`] answers a probe from it:
//! `liveness` is `200 ok` while the process can answer at all; `readiness` is `200 ready`,
//! or `503 draining` once the drain has started, so that a load balancer stops sending new
//! requests while the listeners still accept (scb's `[health] drain_delay`).
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::Body;
//! use scb_core::health::{HealthCheck, Readiness};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let readiness = Readiness::new();
//! let probe = HealthCheck::readiness(readiness.clone());
//! let res = probe.clone().oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//!
//! readiness.drain(); // on SIGTERM, before the listeners close
//! let res = probe.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
//! # }
//! ```

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use tower::Service;

use crate::Body;
use crate::respond::text;

/// Whether the process takes new work: true until [`drain`](Self::drain), then false for
/// good. Clones share the flag.
#[derive(Clone, Debug)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A flag that says ready.
    #[must_use]
    pub fn new() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    /// A drain has started: every probe from now on says not ready.
    pub fn drain(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    /// Whether no drain has started.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

/// Answers a liveness or a readiness probe, whatever the request (`text/plain`,
/// `Cache-Control: no-store`).
#[derive(Clone, Debug)]
pub struct HealthCheck {
    readiness: Option<Readiness>,
}

impl HealthCheck {
    /// `200 ok` to every request: the process is up and its workers answer.
    #[must_use]
    pub fn liveness() -> Self {
        Self { readiness: None }
    }

    /// `200 ready` until `readiness` drains, then `503 draining`.
    #[must_use]
    pub fn readiness(readiness: Readiness) -> Self {
        Self {
            readiness: Some(readiness),
        }
    }

    fn response(&self) -> Response<Body> {
        let mut res = match &self.readiness {
            None => text(StatusCode::OK, "ok\n"),
            Some(r) if r.is_ready() => text(StatusCode::OK, "ready\n"),
            Some(_) => text(StatusCode::SERVICE_UNAVAILABLE, "draining\n"),
        };
        res.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        res
    }
}

impl<B> Service<Request<B>> for HealthCheck {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        ready(Ok(self.response()))
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    async fn probe(check: &HealthCheck) -> (StatusCode, String) {
        let res = check
            .clone()
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-store");
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_drains_for_good_and_liveness_stays() {
        let readiness = Readiness::new();
        let ready = HealthCheck::readiness(readiness.clone());
        let live = HealthCheck::liveness();
        assert_eq!(probe(&ready).await, (StatusCode::OK, "ready\n".into()));
        readiness.drain();
        for _ in 0..2 {
            assert_eq!(
                probe(&ready).await,
                (StatusCode::SERVICE_UNAVAILABLE, "draining\n".into())
            );
        }
        assert_eq!(probe(&live).await, (StatusCode::OK, "ok\n".into()));
    }
}
