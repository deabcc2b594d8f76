//! A bound on the requests a service works on at once: over it, 503 at once.
//!
//! [`MaxConcurrentLayer`] counts the requests between their call and their response head,
//! across every clone of the service (every worker of scb's server shares one count), and
//! answers `503 Service Unavailable` with `Retry-After: 1` without calling the service
//! when `max` are in progress. Unlike tower's `ConcurrencyLimit`, nothing waits: a
//! server that queues requests for a saturated upstream only makes every one of them
//! slower.
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::max_concurrent::MaxConcurrentLayer;
//! use scb_core::respond::Respond;
//! use scb_core::Body;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = MaxConcurrentLayer::new(100).layer(Respond::new(StatusCode::OK));
//! let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode, header};
use tower::{Layer, Service};

use crate::Body;

/// Applies [`MaxConcurrent`] to a service; clones share the count.
#[derive(Clone, Debug)]
pub struct MaxConcurrentLayer {
    max: usize,
    in_progress: Arc<AtomicUsize>,
}

impl MaxConcurrentLayer {
    /// At most `max` requests in progress (at least 1).
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            in_progress: Arc::default(),
        }
    }
}

impl<S> Layer<S> for MaxConcurrentLayer {
    type Service = MaxConcurrent<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MaxConcurrent {
            inner,
            max: self.max,
            in_progress: Arc::clone(&self.in_progress),
        }
    }
}

/// Refuses requests over the bound; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct MaxConcurrent<S> {
    inner: S,
    max: usize,
    in_progress: Arc<AtomicUsize>,
}

/// One request counted against a [`MaxConcurrent`] bound until dropped: held by its
/// [`ResponseFuture`].
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl<S, B> Service<Request<B>> for MaxConcurrent<S>
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
        let taken = self
            .in_progress
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok();
        if taken {
            ResponseFuture::holding(self.inner.call(req), Slot(Arc::clone(&self.in_progress)))
        } else {
            let mut res = crate::respond::reason(StatusCode::SERVICE_UNAVAILABLE);
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            ResponseFuture::refused(res)
        }
    }
}

/// Response future of [`MaxConcurrent`]: the inner service's, holding its slot until it
/// is dropped (after the response head), or the 503.
pub type ResponseFuture<F> = crate::admission::ResponseFuture<F, Slot>;

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tokio::sync::oneshot;
    use tower::{ServiceExt as _, service_fn};

    use super::*;

    #[tokio::test]
    async fn over_the_bound_is_503_at_once_and_a_finished_request_frees_its_slot() {
        let (release, held) = oneshot::channel::<()>();
        let held = Arc::new(tokio::sync::Mutex::new(Some(held)));
        let layer = MaxConcurrentLayer::new(1);
        let svc = layer.layer(service_fn(move |req: Request<Body>| {
            let held = Arc::clone(&held);
            async move {
                if req.uri().path() == "/slow"
                    && let Some(wait) = held.lock().await.take()
                {
                    let _ = wait.await;
                }
                Ok::<_, Infallible>(Response::new(Body::from("done")))
            }
        }));
        let slow = tokio::spawn(
            svc.clone()
                .oneshot(Request::get("/slow").body(Body::empty()).unwrap()),
        );
        // Let the slow request take the one slot.
        while layer.in_progress.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let res = svc
            .clone()
            .oneshot(Request::get("/fast").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], "1");
        release.send(()).unwrap();
        assert_eq!(slow.await.unwrap().unwrap().status(), StatusCode::OK);
        let res = svc
            .oneshot(Request::get("/fast").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(layer.in_progress.load(Ordering::Acquire), 0);
    }
}
