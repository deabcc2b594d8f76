//! One structured log event per request, when its response head is ready.
//!
//! [`AccessLogLayer`] emits a `tracing` event at level `INFO` with target [`TARGET`]
//! (`scb::access`) and these fields:
//!
//! | field | value |
//! | --- | --- |
//! | `request_id` | the [`Id`] request extension (see [`request_id`](crate::request_id)), `-` if absent |
//! | `method` | the request method |
//! | `path` | the path and query as received (for a `CONNECT` request, its authority) |
//! | `status` | the response status; absent when the inner service returned an error |
//! | `bytes` | the response body's exact size hint, 0 when not known in advance |
//! | `duration_us` | microseconds from the call to the response head |
//!
//! # Example
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::access_log::AccessLogLayer;
//! use scb_core::request_id::RequestIdLayer;
//! use scb_core::respond::Respond;
//! use scb_core::router::{PathMatch, Router};
//! use scb_core::Body;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let router = Router::new()
//!     .route("home", PathMatch::Exact("/".into()), Respond::new(StatusCode::OK))
//!     .unwrap();
//! let svc = ServiceBuilder::new()
//!     .layer(RequestIdLayer::new())
//!     .layer(AccessLogLayer::new())
//!     .service(router);
//! // With a subscriber installed, this logs e.g.
//! // INFO scb::access: request_id=5f0c… method=GET path=/ status=200 bytes=0 duration_us=3
//! let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! # }
//! ```
//!
//! As in the metrics layer, the body is not wrapped (the zero-copy path survives), so
//! `bytes` is the size of the body as the service produced it, and duration ends at the
//! response head. A request whose future is dropped before its head is ready (the client
//! went away) is not logged.
//!
//! Where to put it: outside [`RequestIdLayer`](crate::request_id::RequestIdLayer) is too
//! early to see the id, so put it inside.
//!
//! When nothing listens to `scb::access` at `INFO`, the layer costs one filter check per
//! request (the callsite's cached interest): it reads no clock, clones nothing and emits
//! nothing.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http::{Method, Request, Response, StatusCode, Uri};
use http_body::Body as HttpBody;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::request_id::Id;

/// The `tracing` target of access-log events: `scb::access`.
///
/// Route it to its own output, or turn it off, with a target filter
/// (e.g. `RUST_LOG=scb::access=off`).
pub const TARGET: &str = "scb::access";

/// Applies [`AccessLog`] to a service.
#[derive(Clone, Copy, Debug, Default)]
pub struct AccessLogLayer {
    _priv: (),
}

impl AccessLogLayer {
    /// A layer logging every request at target [`TARGET`].
    pub fn new() -> Self {
        Self { _priv: () }
    }
}

impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AccessLog { inner }
    }
}

/// Logs one event per request when the response head is ready.
///
/// See the [module documentation](self) for the fields.
#[derive(Clone, Debug)]
pub struct AccessLog<S> {
    inner: S,
}

impl<S> AccessLog<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// An [`AccessLogLayer`].
    pub fn layer() -> AccessLogLayer {
        AccessLogLayer::new()
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

impl<S, ReqB, ResB> Service<Request<ReqB>> for AccessLog<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: HttpBody,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The one check on the disabled path: everything else is captured only when an
        // event will be emitted.
        let entry = tracing::enabled!(target: TARGET, tracing::Level::INFO).then(|| {
            Box::new(Entry {
                start: Instant::now(),
                request_id: req.extensions().get::<Id>().cloned(),
                method: req.method().clone(),
                // Cheap: the parts of a `Uri` are reference-counted `Bytes`.
                uri: req.uri().clone(),
            })
        });
        ResponseFuture {
            inner: self.inner.call(req),
            entry,
        }
    }
}

/// What is known of the request at call time.
#[derive(Debug)]
struct Entry {
    start: Instant,
    request_id: Option<Id>,
    method: Method,
    uri: Uri,
}

impl Entry {
    fn emit(self, status: Option<StatusCode>, bytes: u64) {
        let duration_us = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let path = self
            .uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .or_else(|| self.uri.authority().map(|a| a.as_str()))
            .unwrap_or("-");
        tracing::info!(
            target: TARGET,
            request_id = self.request_id.as_ref().map_or("-", Id::as_str),
            method = self.method.as_str(),
            path,
            status = status.map(|s| s.as_u16()),
            bytes,
            duration_us,
        );
    }
}

pin_project! {
    /// Response future of [`AccessLog`]: logs when the response head is ready.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        // Boxed: only there when an event will be emitted, and a pointer is all the
        // future carries (and moves through every layer) when it will not.
        entry: Option<Box<Entry>>,
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: HttpBody,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        if let Some(entry) = this.entry.take() {
            match &result {
                Ok(res) => entry.emit(
                    Some(res.status()),
                    res.body().size_hint().exact().unwrap_or(0),
                ),
                Err(_) => entry.emit(None, 0),
            }
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http::StatusCode;
    use tower::{ServiceBuilder, ServiceExt, service_fn};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::Body;
    use crate::request_id::RequestIdLayer;
    use crate::respond::Respond;
    use crate::router::{PathMatch, Router};

    type Fields = BTreeMap<String, String>;

    /// Records the fields of every access-log event.
    #[derive(Clone, Default)]
    struct Events(Arc<Mutex<Vec<Fields>>>);

    struct Visitor<'a>(&'a mut Fields);

    impl Visit for Visitor<'_> {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_owned(), value.to_owned());
        }

        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.insert(field.name().to_owned(), format!("{value:?}"));
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            if event.metadata().target() == TARGET {
                assert_eq!(*event.metadata().level(), tracing::Level::INFO);
                let mut fields = Fields::new();
                event.record(&mut Visitor(&mut fields));
                self.0.lock().unwrap().push(fields);
            }
        }
    }

    impl Events {
        fn capture(&self) -> tracing::subscriber::DefaultGuard {
            let subscriber = tracing_subscriber::registry().with(self.clone());
            let guard = tracing::subscriber::set_default(subscriber);
            // Callsite interest is cached process-wide. A test thread that hit a callsite
            // while no other subscriber was alive may have cached "never" for it, racing
            // with this subscriber's registration: recompute it now this one is live.
            tracing::callsite::rebuild_interest_cache();
            guard
        }

        fn take(&self) -> Vec<Fields> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
        fields.get(name).map(String::as_str)
    }

    fn router() -> Router<Respond> {
        Router::new()
            .route(
                "api",
                PathMatch::Prefix("/api".into()),
                Respond::new(StatusCode::OK).body("hello"),
            )
            .unwrap()
    }

    #[tokio::test]
    async fn logs_one_event_with_every_field_behind_request_id_and_before_router() {
        let events = Events::default();
        let _guard = events.capture();
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .layer(AccessLogLayer::new())
            .service(router());
        let req = Request::post("/api/users?page=2")
            .header("x-request-id", "req-42")
            .body(Body::empty())
            .unwrap();
        svc.oneshot(req).await.unwrap();

        let events = events.take();
        assert_eq!(events.len(), 1, "{events:?}");
        let e = &events[0];
        assert_eq!(field(e, "request_id"), Some("req-42"));
        assert_eq!(field(e, "method"), Some("POST"));
        assert_eq!(field(e, "path"), Some("/api/users?page=2"));
        assert_eq!(field(e, "status"), Some("200"));
        assert_eq!(field(e, "bytes"), Some("5"));
        let us: u64 = field(e, "duration_us").unwrap().parse().unwrap();
        assert!(us < 10_000_000, "{us}");
        let names: Vec<_> = e.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "bytes",
                "duration_us",
                "method",
                "path",
                "request_id",
                "status"
            ]
        );
    }

    #[tokio::test]
    async fn missing_id_is_a_dash_and_unmatched_path_is_logged_with_its_status() {
        let events = Events::default();
        let _guard = events.capture();
        let svc = AccessLog::new(router());
        svc.oneshot(Request::get("/nowhere").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let events = events.take();
        let e = &events[0];
        assert_eq!(field(e, "request_id"), Some("-"));
        assert_eq!(field(e, "status"), Some("404"));
        assert_eq!(field(e, "path"), Some("/nowhere"));
        assert_eq!(field(e, "bytes"), Some("10"));
    }

    #[tokio::test]
    async fn generated_id_is_logged_as_the_response_carries_it() {
        let events = Events::default();
        let _guard = events.capture();
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .layer(AccessLogLayer::new())
            .service(Respond::new(StatusCode::OK));
        let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
        let logged = events.take()[0]["request_id"].clone();
        assert_eq!(res.headers()["x-request-id"], logged.as_str());
    }

    #[tokio::test]
    async fn authority_form_target_is_logged_as_the_path() {
        let events = Events::default();
        let _guard = events.capture();
        let req = Request::connect("example.com:443")
            .body(Body::empty())
            .unwrap();
        AccessLog::new(Respond::new(StatusCode::OK))
            .oneshot(req)
            .await
            .unwrap();
        let e = &events.take()[0];
        assert_eq!(field(e, "method"), Some("CONNECT"));
        assert_eq!(field(e, "path"), Some("example.com:443"));
    }

    #[tokio::test]
    async fn unknown_body_size_is_zero_bytes_and_errors_have_no_status() {
        let events = Events::default();
        let _guard = events.capture();
        let streaming = service_fn(|_req: Request<()>| async {
            let frames = [Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(
                "x",
            )))];
            let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
            Ok::<_, Infallible>(Response::new(Body::new(body)))
        });
        AccessLog::new(streaming)
            .oneshot(Request::new(()))
            .await
            .unwrap();
        let failing =
            service_fn(|_req: Request<()>| async { Err::<Response<Body>, _>("upstream refused") });
        AccessLog::new(failing)
            .oneshot(Request::new(()))
            .await
            .unwrap_err();

        let events = events.take();
        assert_eq!(events.len(), 2);
        assert_eq!(field(&events[0], "bytes"), Some("0"));
        assert_eq!(field(&events[0], "status"), Some("200"));
        assert_eq!(field(&events[1], "status"), None);
        assert_eq!(field(&events[1], "bytes"), Some("0"));
    }

    #[tokio::test]
    async fn nothing_is_captured_when_the_target_is_filtered_out() {
        let events = Events::default();
        let filter = tracing_subscriber::filter::Targets::new()
            .with_default(tracing::Level::TRACE)
            .with_target(TARGET, tracing_subscriber::filter::LevelFilter::OFF);
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(events.clone());
        let _guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        let mut svc = AccessLog::new(Respond::new(StatusCode::OK));
        let fut = svc.call(Request::new(()));
        assert!(fut.entry.is_none());
        fut.await.unwrap();
        assert!(events.take().is_empty());
    }

    #[test]
    fn service_is_send_and_sync_and_future_send_when_inner_parts_are() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<AccessLogLayer>();
        send_sync::<AccessLog<Respond>>();
        send::<ResponseFuture<std::future::Ready<Result<Response<Body>, Infallible>>>>();
    }
}
