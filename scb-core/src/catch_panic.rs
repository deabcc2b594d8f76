//! Turn a panicking service into a `500 Internal Server Error` instead of a dropped
//! connection.
//!
//! [`CatchPanicLayer`] catches a panic raised while the inner service is called and while
//! its response future is polled, logs it with `tracing::error!` (message included), and
//! answers `500` with `text/plain` body `Internal Server Error\n`. Any response body type
//! is taken, so the layer composes outside tower-http's (compression, say): responses come
//! out as [`Body`], and a body that already is one passes through untouched (no box, a file
//! region still visible to the server's `sendfile`).
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//!
//! use http::{Request, Response, StatusCode};
//! use scb_core::{Body, catch_panic::CatchPanicLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(CatchPanicLayer::new())
//!     .service_fn(|req: Request<Body>| async move {
//!         if req.uri().path() == "/boom" {
//!             panic!("handler bug");
//!         }
//!         Ok::<_, Infallible>(Response::new(Body::empty()))
//!     });
//!
//! let req = Request::get("/boom").body(Body::empty()).unwrap();
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
//! # }
//! ```
//!
//! A panic while *streaming the body* is not caught here: by then the status line may be on
//! the wire, so the only honest answer is to close the connection, which is the server's
//! job, not a layer's.
//!
//! The release profile keeps `panic = "unwind"` so this layer works; with `panic = "abort"`
//! there is nothing to catch.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::{Body, BoxError};

/// Applies [`CatchPanic`] to a service.
#[derive(Clone, Copy, Debug, Default)]
pub struct CatchPanicLayer {
    _priv: (),
}

impl CatchPanicLayer {
    /// A layer catching panics in the inner service.
    pub fn new() -> Self {
        Self { _priv: () }
    }
}

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CatchPanic { inner }
    }
}

/// Answers `500` when the inner service panics in `call` or in its response future.
///
/// See the [module documentation](self).
#[derive(Clone, Debug)]
pub struct CatchPanic<S> {
    inner: S,
}

impl<S> CatchPanic<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// A [`CatchPanicLayer`].
    pub fn layer() -> CatchPanicLayer {
        CatchPanicLayer::new()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for CatchPanic<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // Unwind safety: after a panic the inner service may be in a broken state, but it is
        // the service's own state, and the alternative (the panic unwinding through the
        // connection driver) loses the connection and every request pipelined on it.
        //
        // The future is written into its place inside the closure: returned through
        // `catch_unwind` (its result, then `Ok`, then `Kind`) the whole stack's future, a few
        // hundred bytes, was copied three times per request, each a `memcpy` call.
        let mut response = ResponseFuture {
            kind: Kind::Panicked,
        };
        let inner = &mut self.inner;
        let kind = &mut response.kind;
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| {
            *kind = Kind::Future {
                future: inner.call(req),
            };
        })) {
            log_panic(&*payload, "call");
        }
        response
    }
}

pin_project! {
    /// Response future of [`CatchPanic`].
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Future {
            #[pin]
            future: F,
        },
        Panicked,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Future { .. } => f.write_str("ResponseFuture::Future"),
            Kind::Panicked => f.write_str("ResponseFuture::Panicked"),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut kind = self.project().kind;
        let polled = match kind.as_mut().project() {
            KindProj::Future { future } => catch_unwind(AssertUnwindSafe(|| future.poll(cx))),
            KindProj::Panicked => return Poll::Ready(Ok(internal_server_error())),
        };
        match polled {
            Ok(poll) => poll.map(|res| res.map(|res| res.map(Body::new))),
            Err(payload) => {
                log_panic(&*payload, "response future");
                // The future is not polled again after a panic: drop it now to release
                // what it holds (an upstream connection, a file).
                kind.set(Kind::Panicked);
                Poll::Ready(Ok(internal_server_error()))
            }
        }
    }
}

fn log_panic(payload: &(dyn Any + Send), place: &'static str) {
    tracing::error!(
        panic = panic_message(payload),
        place,
        "service panicked; answering 500"
    );
}

/// The message of a panic, for the two payload types `panic!` produces: this layer's log
/// line and the server's, when a handler panics outside any layer.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "<non-string panic payload>"
    }
}

fn internal_server_error() -> Response<Body> {
    crate::respond::reason(StatusCode::INTERNAL_SERVER_ERROR)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::io;
    use std::sync::{Arc, Mutex};
    use std::task::Poll;

    use futures_util::FutureExt as _;
    use http::header;
    use http_body_util::BodyExt as _;
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::request_id::RequestIdLayer;

    /// Collects formatted log output, so a test can check what was logged.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        fn capture(&self) -> tracing::subscriber::DefaultGuard {
            let logs = self.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || logs.clone())
                .with_ansi(false)
                .finish();
            let guard = tracing::subscriber::set_default(subscriber);
            // Callsite interest is cached process-wide. A test thread that hit a callsite
            // while no other subscriber was alive may have cached "never" for it, racing
            // with this subscriber's registration: recompute it now this one is live.
            tracing::callsite::rebuild_interest_cache();
            guard
        }

        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    async fn assert_internal_server_error(res: Response<Body>) {
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "Internal Server Error\n");
    }

    #[tokio::test]
    async fn panic_in_call_becomes_a_500_and_is_logged() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let svc = ServiceBuilder::new()
            .layer(CatchPanicLayer::new())
            .service(service_fn(
                |req: Request<Body>| -> std::future::Ready<Result<Response<Body>, Infallible>> {
                    // Panics before any future exists: inside `call` itself.
                    panic!("synchronous failure {}", req.uri().path().len())
                },
            ));
        let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
        assert_internal_server_error(res).await;
        let text = logs.text();
        assert!(text.contains("ERROR"), "{text}");
        assert!(text.contains("synchronous failure 1"), "{text}");
        assert!(text.contains("place=\"call\""), "{text}");
    }

    #[tokio::test]
    async fn panic_while_polling_becomes_a_500_and_is_logged_with_a_formatted_message() {
        let logs = Logs::default();
        let _guard = logs.capture();
        let svc = ServiceBuilder::new()
            .layer(CatchPanicLayer::new())
            .service_fn(|req: Request<Body>| async move {
                if req.uri().path() == "/" {
                    panic!("async failure at {}", req.uri());
                }
                Ok::<_, Infallible>(Response::new(Body::empty()))
            });
        let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
        assert_internal_server_error(res).await;
        let text = logs.text();
        assert!(text.contains("async failure at /"), "{text}");
        assert!(text.contains("place=\"response future\""), "{text}");
    }

    #[tokio::test]
    async fn response_of_a_healthy_service_passes_through_unchanged() {
        let svc = ServiceBuilder::new()
            .layer(CatchPanicLayer::new())
            .service_fn(|_req: Request<Body>| async {
                let mut res = Response::new(Body::from("fine"));
                *res.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(res)
            });
        let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "fine");
    }

    #[tokio::test]
    async fn errors_of_the_inner_service_are_passed_through() {
        let svc = CatchPanic::new(service_fn(|_req: Request<Body>| async {
            Err::<Response<Body>, _>("refused")
        }));
        assert_eq!(
            svc.oneshot(Request::new(Body::empty())).await.unwrap_err(),
            "refused"
        );
    }

    #[test]
    fn future_is_dropped_after_it_panics_and_not_polled_again() {
        // Every test that panics captures logs, even when it does not read them: see
        // `Logs::capture`.
        let _guard = Logs::default().capture();
        struct DropFlag(Arc<Mutex<bool>>);
        impl Drop for DropFlag {
            fn drop(&mut self) {
                *self.0.lock().unwrap() = true;
            }
        }
        let dropped = Arc::new(Mutex::new(false));
        let flag = DropFlag(Arc::clone(&dropped));
        let mut polls = 0;
        let inner = std::future::poll_fn(move |_cx| {
            let _keep = &flag;
            polls += 1;
            if polls == 1 {
                panic!("first poll");
            }
            Poll::Ready(Ok::<_, Infallible>(Response::new(String::new())))
        });
        let mut fut = Box::pin(ResponseFuture {
            kind: Kind::Future { future: inner },
        });
        let res = fut.as_mut().now_or_never().unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(*dropped.lock().unwrap());
        // Polling again (against the contract) answers 500 again rather than panicking.
        let res = fut.as_mut().now_or_never().unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = res.into_body().collect().now_or_never().unwrap().unwrap();
        assert_eq!(body.to_bytes(), "Internal Server Error\n");
    }

    #[test]
    fn panic_message_reads_str_and_string_payloads() {
        let from_str: Box<dyn Any + Send> = Box::new("static");
        let from_string: Box<dyn Any + Send> = Box::new(String::from("owned"));
        let other: Box<dyn Any + Send> = Box::new(42_u8);
        assert_eq!(panic_message(&*from_str), "static");
        assert_eq!(panic_message(&*from_string), "owned");
        assert_eq!(panic_message(&*other), "<non-string panic payload>");
    }

    #[tokio::test]
    async fn works_with_other_layers_and_body_types() {
        let _guard = Logs::default().capture();
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .layer(CatchPanicLayer::new())
            .service_fn(|req: Request<()>| async move {
                if req.uri() == "/" {
                    panic!("boom");
                }
                Ok::<_, Infallible>(Response::new(String::new()))
            });
        let res = svc.oneshot(Request::new(())).await.unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(res.headers().contains_key("x-request-id"));
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "Internal Server Error\n");
    }

    #[test]
    fn service_is_send_and_sync_and_future_send_when_inner_parts_are() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<CatchPanicLayer>();
        send_sync::<CatchPanic<crate::respond::Respond>>();
        send::<ResponseFuture<std::future::Ready<Result<Response<Body>, Infallible>>>>();
    }
}
