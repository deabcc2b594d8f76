//! One access-log record per request, when its response head is ready.
//!
//! [`AccessLogLayer`] records, for each request: the time, the request id, the client's
//! address (through [`TrustedProxies`] when set), the host, method, path and query,
//! protocol, status, body bytes, duration, user agent and referer, the route's name and,
//! for a proxied request, the upstream that answered. Those two come from beneath: the
//! layer puts [`AccessNotes`] in the request's extensions, the
//! [`Router`](crate::router::Router) that chooses a route notes its name there, and
//! scb-proxy notes the upstream.
//!
//! Records go to one of two places:
//!
//! - an [`AccessLogWriter`] ([`AccessLogLayer::writer`]): a thread of its own writing
//!   lines in the combined log format, as JSON, or as an [`AccessLogTemplate`] says, to
//!   stderr or a file, reopened for logrotate, fed through a bounded queue that never
//!   blocks a worker (a full queue drops and counts). This is what `scb` uses.
//!
//!   A template may name more than the two formats write: any request or response
//!   field, the TLS version and cipher ([`TlsInfo`], which the server inserts), the
//!   upstream's status and time (noted by scb-proxy), the trace id (a
//!   [`TraceContext`] a layer outside this one inserted). Each is captured only when the
//!   writer's template names it: the request's fields are copied into the record's one
//!   allocation, the response's when its head is ready.
//! - `tracing` events (the default, [`AccessLogLayer::new`]) at level `INFO`, target
//!   [`TARGET`] (`scb::access`), for a service that already routes its logs through a
//!   subscriber; fields `request_id`, `client`, `host`, `method`, `path`, `protocol`,
//!   `status`, `bytes`, `duration_us`, `user_agent`, `referer`, `route`, `upstream`.
//!
//! # Example
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::access_log::{AccessLogFormat, AccessLogLayer, AccessLogWriter};
//! use scb_core::request_id::RequestIdLayer;
//! use scb_core::respond::Respond;
//! use scb_core::router::{PathMatch, Router};
//! use scb_core::Body;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let router = Router::new()
//!     .route("home", PathMatch::Exact("/".into()), Respond::new(StatusCode::OK))
//!     .unwrap();
//! let log = AccessLogWriter::stderr(AccessLogFormat::Combined)?;
//! let svc = ServiceBuilder::new()
//!     .layer(RequestIdLayer::new())
//!     .layer(AccessLogLayer::new().writer(log))
//!     .service(router);
//! // Writes e.g.
//! // - - - [01/Dec/2026:21:49:32 +0000] "GET / HTTP/1.1" 200 0 "-" "-"
//! let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! As in the metrics layer, the body is not wrapped (the zero-copy path survives), so
//! `bytes` is the size of the body as the service produced it (0 when not known in
//! advance), and the duration ends at the response head. A request whose future is
//! dropped before its head is ready (the client went away) is not logged.
//!
//! Where to put it: outside [`RequestIdLayer`](crate::request_id::RequestIdLayer) is too
//! early to see the id, so put it inside.
//!
//! With the `tracing` sink and nothing listening to `scb::access` at `INFO`, the layer
//! costs one filter check per request: it reads no clock, clones nothing and emits
//! nothing.

mod notes;
mod record;
mod template;
mod writer;

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Instant, SystemTime};

use http::uri::Authority;
use http::{Request, Response, StatusCode, header};
use http_body::Body as HttpBody;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

pub use notes::AccessNotes;
pub use record::AccessLogFormat;
pub use template::{AccessLogTemplate, AccessLogTemplateError};
pub use writer::AccessLogWriter;

use crate::client_ip::{TrustedProxies, client_ip};
use crate::connection::{ConnectInfo, TlsInfo};
use crate::request_id::Id;
use crate::trace_context::TraceContext;
use record::{Record, Text};

/// The room a record reserves for each response field a template names: a guess that
/// holds the usual ones (`Content-Type`, `Cache-Control`, an `ETag`), so that capturing
/// them grows the record's one allocation only for a long value.
const RESPONSE_FIELD_ROOM: usize = 2 + 48;

/// The `tracing` target of access-log events: `scb::access`.
///
/// Route it to its own output, or turn it off, with a target filter
/// (e.g. `RUST_LOG=scb::access=off`).
pub const TARGET: &str = "scb::access";

/// Applies [`AccessLog`] to a service.
#[derive(Clone, Default)]
pub struct AccessLogLayer {
    settings: Arc<Settings>,
}

#[derive(Default)]
struct Settings {
    writer: Option<AccessLogWriter>,
    trusted: TrustedProxies,
}

impl fmt::Debug for AccessLogLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessLogLayer")
            .field("writer", &self.settings.writer)
            .field("trusted", &self.settings.trusted)
            .finish_non_exhaustive()
    }
}

impl AccessLogLayer {
    /// A layer emitting `tracing` events at target [`TARGET`].
    pub fn new() -> Self {
        Self::default()
    }

    fn settings_mut(&mut self) -> &mut Settings {
        if Arc::get_mut(&mut self.settings).is_none() {
            let s = &*self.settings;
            self.settings = Arc::new(Settings {
                writer: s.writer.clone(),
                trusted: s.trusted.clone(),
            });
        }
        Arc::get_mut(&mut self.settings).expect("just made unique")
    }

    /// Sends the records to `writer` instead of emitting `tracing` events. Defaults to
    /// `tracing` events.
    #[must_use]
    pub fn writer(mut self, writer: AccessLogWriter) -> Self {
        self.settings_mut().writer = Some(writer);
        self
    }

    /// Takes the client's address from `X-Forwarded-For` when the peer is one of
    /// `trusted` (see [`client_ip`]). Defaults to none: the peer is the client.
    #[must_use]
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Self {
        self.settings_mut().trusted = trusted;
        self
    }
}

impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AccessLog {
            inner,
            settings: Arc::clone(&self.settings),
        }
    }
}

/// Records one access-log entry per request when the response head is ready.
///
/// See the [module documentation](self) for the fields and where they go.
#[derive(Clone)]
pub struct AccessLog<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S: fmt::Debug> fmt::Debug for AccessLog<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessLog")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> AccessLog<S> {
    /// Wraps `inner`, emitting `tracing` events.
    pub fn new(inner: S) -> Self {
        AccessLogLayer::new().layer(inner)
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

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let settings = &*self.settings;
        // With the tracing sink this is the one check on the disabled path: everything
        // else is captured only when a record will be made.
        let on =
            settings.writer.is_some() || tracing::enabled!(target: TARGET, tracing::Level::INFO);
        let entry = on.then(|| {
            let headers = req.headers();
            let client = req
                .extensions()
                .get::<ConnectInfo>()
                .map(|info| client_ip(info.remote.ip(), headers, &settings.trusted));
            let uri = req.uri();
            let target = uri
                .path_and_query()
                .map(|pq| pq.as_str())
                .or_else(|| uri.authority().map(Authority::as_str));
            let host = headers
                .get(header::HOST)
                .map(http::HeaderValue::as_bytes)
                .or_else(|| uri.authority().map(|a| a.as_str().as_bytes()));
            // What a template names beyond the named formats' fields; nothing for those.
            let template = settings
                .writer
                .as_ref()
                .and_then(|writer| writer.format().template());
            let room = template.map_or(0, |t| {
                record::fields_len(headers, t.request_headers())
                    + t.response_headers().len() * RESPONSE_FIELD_ROOM
            });
            let mut record = Record::new(
                SystemTime::now(),
                client,
                req.method().clone(),
                req.version(),
                [
                    req.extensions()
                        .get::<Id>()
                        .map(|id| id.as_str().as_bytes()),
                    host,
                    target.map(str::as_bytes),
                    headers
                        .get(header::USER_AGENT)
                        .map(http::HeaderValue::as_bytes),
                    headers
                        .get(header::REFERER)
                        .map(http::HeaderValue::as_bytes),
                ],
                room,
            );
            if let Some(template) = template {
                record.push_fields(headers, template.request_headers());
                if template.wants_tls() {
                    record.tls = req.extensions().get::<TlsInfo>().copied();
                }
                if template.wants_trace() {
                    record.trace_id = req
                        .extensions()
                        .get::<TraceContext>()
                        .map(TraceContext::trace_id);
                }
            }
            let notes = AccessNotes::new(record);
            Pending {
                start: Instant::now(),
                sink: settings.writer.clone(),
                notes,
            }
        });
        if let Some(entry) = &entry {
            // For the router and the proxy beneath: a slot in the map the server's
            // `ConnectInfo` and the request id are in already.
            req.extensions_mut().insert(entry.notes.clone());
        }
        ResponseFuture {
            inner: self.inner.call(req),
            entry,
        }
    }
}

/// A record waiting for its response head.
#[derive(Debug)]
struct Pending {
    start: Instant,
    sink: Option<AccessLogWriter>,
    // The record, behind a pointer: what the future carries (and moves through every
    // layer) is small, and the layers beneath write into it.
    notes: AccessNotes,
}

impl Pending {
    /// Finishes the record with the response's head (`None` when the service failed).
    fn finish(self, head: Option<(StatusCode, &http::HeaderMap)>, bytes: u64) {
        let Self { start, sink, notes } = self;
        let Some(mut record) = notes.take() else {
            return;
        };
        record.status = head.map(|(status, _)| status);
        record.bytes = bytes;
        record.duration = start.elapsed();
        if let (Some((_, headers)), Some(template)) = (
            head,
            sink.as_ref().and_then(|writer| writer.format().template()),
        ) && !template.response_headers().is_empty()
        {
            record.push_fields(headers, template.response_headers());
        }
        match sink {
            Some(writer) => writer.send(record),
            None => emit(&record),
        }
    }
}

/// The record as a `tracing` event.
fn emit(record: &Record) {
    fn text(v: Option<&[u8]>) -> Option<&str> {
        v.and_then(|v| std::str::from_utf8(v).ok())
    }
    tracing::info!(
        target: TARGET,
        request_id = text(record.text(Text::RequestId)).unwrap_or("-"),
        client = record.client.map(tracing::field::display::<IpAddr>),
        host = text(record.text(Text::Host)),
        method = record.method.as_str(),
        path = text(Some(record.target())).unwrap_or("-"),
        protocol = record.protocol(),
        status = record.status.map(|s| s.as_u16()),
        bytes = record.bytes,
        duration_us = u64::try_from(record.duration.as_micros()).unwrap_or(u64::MAX),
        user_agent = text(record.text(Text::UserAgent)),
        referer = text(record.text(Text::Referer)),
        route = record.route.as_deref(),
        upstream = record.upstream.as_ref().map(Authority::as_str),
    );
}

pin_project! {
    /// Response future of [`AccessLog`]: records when the response head is ready.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        entry: Option<Pending>,
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
                Ok(res) => entry.finish(
                    Some((res.status(), res.headers())),
                    res.body().size_hint().exact().unwrap_or(0),
                ),
                Err(_) => entry.finish(None, 0),
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
    use crate::client_ip::TrustedProxies;
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
        // Named by the router beneath, which the layer asks.
        assert_eq!(field(e, "route"), Some("api"));
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
                "protocol",
                "request_id",
                "route",
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
    async fn the_route_is_the_innermost_router_s_its_fallback_s_name_or_none_when_not_noted() {
        let events = Events::default();
        let _guard = events.capture();
        type Nested = Router<Router<Respond>, Router<Respond>>;
        let route_of = |svc: AccessLog<Nested>, path: &'static str| async move {
            svc.oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
        };
        let nested = |outer: Nested| AccessLog::new(outer);
        let inner = router().fallback_name("inner-unmatched");
        let outer = Router::new()
            .route("outer", PathMatch::Prefix("/".into()), inner.clone())
            .unwrap()
            .fallback(inner.clone());
        route_of(nested(outer.clone()), "/api/x").await;
        route_of(nested(outer.clone()), "/elsewhere").await;
        let quiet = Router::new()
            .note_routes(false)
            .route(
                "outer",
                PathMatch::Prefix("/".into()),
                inner.clone().note_routes(false),
            )
            .unwrap()
            .fallback(inner.note_routes(false));
        route_of(nested(quiet), "/api/x").await;
        let routes: Vec<Option<String>> = events
            .take()
            .iter()
            .map(|e| field(e, "route").map(str::to_owned))
            .collect();
        assert_eq!(
            routes,
            [
                Some("api".to_owned()),
                Some("inner-unmatched".to_owned()),
                None
            ]
        );
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

    #[tokio::test]
    async fn the_writer_gets_every_field_with_route_client_and_upstream() {
        let path = temp_log("layer");
        let writer = AccessLogWriter::file(&path, AccessLogFormat::Json).unwrap();
        let log = writer.clone();
        // As scb-proxy does: the upstream noted in the request's notes.
        let proxied = service_fn(|req: Request<Body>| async move {
            if let Some(notes) = req.extensions().get::<AccessNotes>() {
                notes.upstream(&"127.0.0.1:8081".parse().unwrap());
            }
            Ok::<_, Infallible>(Response::new(Body::from("from upstream")))
        });
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .layer(
                AccessLogLayer::new()
                    .writer(writer)
                    .trusted_proxies(TrustedProxies::new(["10.0.0.0/8"]).unwrap()),
            )
            // The route's name comes from the router beneath, asked by the access log.
            .service(
                Router::new()
                    .route("api", PathMatch::Prefix("/api".into()), proxied)
                    .unwrap(),
            );
        let mut req = Request::get("/api/x?y=1")
            .header("host", "example.com")
            .header("x-request-id", "r-1")
            .header("x-forwarded-for", "198.51.100.7")
            .header("user-agent", "test/1")
            .header("referer", "https://example.com/")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut().insert(ConnectInfo {
            remote: "10.0.0.2:5555".parse().unwrap(),
            local: "127.0.0.1:80".parse().unwrap(),
            secure: false,
        });
        svc.oneshot(req).await.unwrap();
        assert!(log.close(std::time::Duration::from_secs(10)));
        let line = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        for field in [
            "\"request_id\":\"r-1\"",
            "\"client\":\"198.51.100.7\"",
            "\"host\":\"example.com\"",
            "\"method\":\"GET\"",
            "\"path\":\"/api/x?y=1\"",
            "\"status\":200",
            "\"bytes\":13",
            "\"user_agent\":\"test/1\"",
            "\"referer\":\"https://example.com/\"",
            "\"route\":\"api\"",
            "\"upstream\":\"127.0.0.1:8081\"",
        ] {
            assert!(line.contains(field), "{field} in {line}");
        }
    }

    fn temp_log(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "scb-access-{name}-{}-{}.log",
            std::process::id(),
            fastrand::u64(..)
        ))
    }

    #[tokio::test]
    async fn a_template_gets_fields_tls_trace_and_the_upstream_s_answer() {
        let path = temp_log("template");
        let template = AccessLogTemplate::parse(
            "{header.x-a} {header.x-none} {resp_header.x-b} {tls_version} {tls_cipher} \
             {upstream} {upstream_status} {upstream_time_ms} {trace_id} \"{user_agent}\"",
        )
        .unwrap();
        let writer = AccessLogWriter::file(&path, template.into()).unwrap();
        let log = writer.clone();
        let proxied = service_fn(|req: Request<Body>| async move {
            if let Some(notes) = req.extensions().get::<AccessNotes>() {
                notes.upstream_response(
                    &"127.0.0.1:8081".parse().unwrap(),
                    StatusCode::CREATED,
                    std::time::Duration::from_micros(1500),
                );
            }
            let mut res = Response::new(Body::empty());
            res.headers_mut()
                .append("x-b", http::HeaderValue::from_static("one"));
            res.headers_mut()
                .append("x-b", http::HeaderValue::from_static("two"));
            Ok::<_, Infallible>(res)
        });
        let svc = AccessLogLayer::new().writer(writer).layer(proxied);
        let mut req = Request::get("/")
            .header("x-a", "a\"b")
            .header("user-agent", "ua")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut()
            .insert(TlsInfo::new("TLSv1.3", Some("TLS13_AES_256_GCM_SHA384")));
        req.extensions_mut().insert(
            TraceContext::parse(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                None,
            )
            .unwrap(),
        );
        svc.oneshot(req).await.unwrap();
        assert!(log.close(std::time::Duration::from_secs(10)));
        let line = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            line,
            "a\\\"b - one, two TLSv1.3 TLS13_AES_256_GCM_SHA384 127.0.0.1:8081 201 1.500 \
             0af7651916cd43dd8448eb211c80319c \"ua\"\n"
        );
    }

    #[tokio::test]
    async fn the_named_formats_capture_nothing_more() {
        let path = temp_log("named");
        let writer = AccessLogWriter::file(&path, AccessLogFormat::Json).unwrap();
        let mut svc = AccessLogLayer::new()
            .writer(writer.clone())
            .layer(Respond::new(StatusCode::OK));
        let mut req = Request::new(Body::empty());
        req.extensions_mut()
            .insert(TlsInfo::new("TLSv1.3", Some("TLS13_AES_256_GCM_SHA384")));
        let fut = svc.call(req);
        let record = fut.entry.as_ref().unwrap().notes.take().unwrap();
        assert_eq!(
            (record.tls, record.trace_id, record.field(0)),
            (None, None, None)
        );
        drop(fut);
        writer.close(std::time::Duration::from_secs(10));
        let _ = std::fs::remove_file(&path);
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
