//! Request counts, latencies, in-flight requests and response bytes, per route, through the
//! [`metrics`] facade.
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | [`REQUESTS_TOTAL`] `scb_http_requests_total` | counter | `route`, `method`, `status` |
//! | [`REQUEST_DURATION_SECONDS`] `scb_http_request_duration_seconds` | histogram | `route` |
//! | [`REQUESTS_IN_FLIGHT`] `scb_http_requests_in_flight` | gauge | none |
//! | [`RESPONSE_BYTES_TOTAL`] `scb_http_response_bytes_total` | counter | `route` |
//!
//! `method` is one of `GET`, `HEAD`, `POST`, `PUT`, `DELETE`, `PATCH`, `OPTIONS` or `other`,
//! so a client cannot grow the number of series by inventing methods. `status` is the
//! numeric status code, or `error` when the inner service returned an error instead of a
//! response.
//!
//! # Example
//!
//! ```
//! use http::{Request, StatusCode};
//! use scb_core::{Body, metrics::MetricsLayer, respond::Respond};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Install a recorder first, then describe the metrics and build the stack.
//! scb_core::metrics::describe();
//! let svc = ServiceBuilder::new()
//!     .layer(MetricsLayer::new("health"))
//!     .service(Respond::new(StatusCode::OK).body("ok"));
//! let res = svc.oneshot(Request::new(Body::empty())).await.unwrap();
//! assert_eq!(res.status(), StatusCode::OK);
//! # }
//! ```
//!
//! # Cost per request
//!
//! Nothing is looked up by label on the hot path. The route's histogram, byte counter and
//! the in-flight gauge are registered with the recorder once, when the layer is built. The
//! request counters live in a fixed table indexed by (method, status) for the common
//! statuses; each cell is registered the first time that pair is seen and is a single
//! atomic load afterwards. Only a status outside that table takes the slow path of a
//! labelled lookup, which is correct, just slower.
//!
//! **Install the recorder (e.g. the Prometheus exporter) before building the layer.**
//! A handle is bound to the recorder in effect when it is registered: the route's handles
//! when the layer is built, a request-counter cell when its (method, status) pair is first
//! seen. With a global recorder installed first, that is the same recorder; a layer built
//! before any recorder exists records its durations and bytes into nothing.
//!
//! # What is measured
//!
//! - Duration runs from the call to the response head (the service's future resolving),
//!   not to the last body byte: the body is never wrapped, so the server's zero-copy path
//!   survives this layer.
//! - Bytes are the response body's exact size hint: the body as the service produced it
//!   (for HEAD, the size of the body that was not sent), and 0 for a body whose size is not
//!   known in advance (a streamed proxy response, for instance).
//! - In flight counts requests waiting for their response head: from the first time the
//!   service's future is not ready to the head. A response ready at its first poll (a fixed
//!   answer, a cached file) never enters the gauge, which saves two gauge updates on the
//!   requests that are cheapest to answer; it could be seen in flight only by a scrape on
//!   another worker within that one poll. A request whose future is dropped unfinished (the
//!   client went away) leaves the gauge when dropped and is not counted in
//!   `scb_http_requests_total`.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use ::metrics::{Counter, Gauge, Histogram, SharedString, Unit};
use http::{Method, Request, Response, StatusCode};
use http_body::Body as HttpBody;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// Counter of requests answered, labelled `route`, `method` and `status`.
pub const REQUESTS_TOTAL: &str = "scb_http_requests_total";
/// Histogram of seconds from the call to the response head, labelled `route`.
pub const REQUEST_DURATION_SECONDS: &str = "scb_http_request_duration_seconds";
/// Gauge of requests waiting for their response head, without labels.
pub const REQUESTS_IN_FLIGHT: &str = "scb_http_requests_in_flight";
/// Counter of response body bytes (exact size hints), labelled `route`.
pub const RESPONSE_BYTES_TOTAL: &str = "scb_http_response_bytes_total";
/// Counter: access-log records dropped because the writer's queue was full.
pub const ACCESS_LOG_DROPPED_TOTAL: &str = "scb_access_log_dropped_total";

/// Registers the units and descriptions of the four metrics with the installed recorder.
///
/// Call it once, after installing the recorder; exporters such as Prometheus print the
/// descriptions as `# HELP` lines.
pub fn describe() {
    ::metrics::describe_counter!(REQUESTS_TOTAL, Unit::Count, "HTTP requests answered");
    ::metrics::describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time from receiving an HTTP request to its response head"
    );
    ::metrics::describe_gauge!(
        REQUESTS_IN_FLIGHT,
        Unit::Count,
        "HTTP requests waiting for their response head"
    );
    ::metrics::describe_counter!(
        RESPONSE_BYTES_TOTAL,
        Unit::Bytes,
        "HTTP response body bytes, as announced by the body's exact size"
    );
    ::metrics::describe_counter!(
        ACCESS_LOG_DROPPED_TOTAL,
        Unit::Count,
        "Access-log records dropped because the log could not keep up"
    );
}

/// Method labels: the seven methods that make up nearly all traffic, then `other`.
const METHOD_LABELS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other",
];

/// Statuses with a pre-allocated counter cell per method: those a web server and reverse
/// proxy actually send.
const FAST_STATUSES: [u16; 29] = [
    200, 201, 204, 206, 301, 302, 303, 304, 307, 308, 400, 401, 403, 404, 405, 408, 409, 412, 413,
    414, 415, 416, 429, 431, 500, 501, 502, 503, 504,
];

/// One column per fast status, and a last one for "the inner service failed".
const COLUMNS: usize = FAST_STATUSES.len() + 1;
const ERROR_COLUMN: usize = FAST_STATUSES.len();

/// No column: a status off the table.
const NO_COLUMN: u8 = u8::MAX;

/// The column of each status code from 100 to 999 ([`StatusCode`]'s range), [`NO_COLUMN`]
/// for those off the table: one load a request, where a binary search made five probes.
static COLUMN_OF_STATUS: [u8; 900] = {
    let mut table = [NO_COLUMN; 900];
    let mut column = 0;
    while column < FAST_STATUSES.len() {
        table[FAST_STATUSES[column] as usize - 100] = column as u8;
        column += 1;
    }
    table
};

/// The clock a request's duration is read from: the CPU's time-stamp counter where it is
/// invariant (one `rdtsc`, scaled once per duration), the monotonic clock elsewhere.
///
/// Why not [`std::time::Instant`]: each `Instant::now()` is a `clock_gettime` through the
/// vDSO, an ordered counter read and the kernel's scaling, and a request took two; with
/// `[metrics]` on they were a fifth of what the layer added to a fixed response. `quanta`
/// (the `metrics` project's own clock) calibrates the counter once, at the first layer
/// built in the process (under a millisecond where the counter is steady).
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// The methods of [`METHOD_LABELS`] but `other`: a static, not an array made (and dropped,
/// each drop a check for an extension method's allocation) on every request.
static KNOWN_METHODS: [Method; 7] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::OPTIONS,
];

fn method_index(method: &Method) -> usize {
    // Comparing against the standard methods is a tag comparison, no string work.
    KNOWN_METHODS
        .iter()
        .position(|m| m == method)
        .unwrap_or(METHOD_LABELS.len() - 1)
}

/// The handles of one route, shared by every clone of the layer and its services.
struct Handles {
    route: SharedString,
    /// `METHOD_LABELS.len() * COLUMNS` cells, row-major by method.
    requests: Box<[OnceLock<Counter>]>,
    clock: &'static quanta::Clock,
    duration: Histogram,
    in_flight: Gauge,
    bytes: Counter,
}

impl Handles {
    fn new(route: Cow<'static, str>) -> Self {
        // A shared string clones by reference count: the labelled slow path and each cell's
        // first registration must not copy the route name.
        let route = match route {
            Cow::Borrowed(s) => SharedString::from(s),
            Cow::Owned(s) => SharedString::from(Arc::<str>::from(s)),
        };
        Self {
            clock: clock(),
            duration: ::metrics::histogram!(REQUEST_DURATION_SECONDS, "route" => route.clone()),
            bytes: ::metrics::counter!(RESPONSE_BYTES_TOTAL, "route" => route.clone()),
            in_flight: ::metrics::gauge!(REQUESTS_IN_FLIGHT),
            requests: (0..METHOD_LABELS.len() * COLUMNS)
                .map(|_| OnceLock::new())
                .collect(),
            route,
        }
    }

    /// Counts one request. Inlined into the response future's poll: a fixed response's
    /// whole `[metrics]` cost is a few hundred instructions, and a call's frame was a tenth
    /// of it. The rare paths (a status off the table, a cell's first use) stay out of line.
    #[inline]
    fn count(&self, method: usize, status: Option<StatusCode>) {
        let column = match status.map(|s| (s, COLUMN_OF_STATUS[usize::from(s.as_u16()) - 100])) {
            None => ERROR_COLUMN,
            Some((_, column)) if column != NO_COLUMN => usize::from(column),
            Some((status, _)) => return self.count_off_table(method, status),
        };
        let cell = &self.requests[method * COLUMNS + column];
        match cell.get() {
            Some(counter) => counter.increment(1),
            None => self.count_first(cell, method, column),
        }
    }

    /// A status with no cell: correct, just a labelled lookup in the recorder.
    #[cold]
    #[inline(never)]
    fn count_off_table(&self, method: usize, status: StatusCode) {
        self.register(method, status.as_str().to_owned())
            .increment(1);
    }

    /// A cell's first count registers its counter.
    #[cold]
    #[inline(never)]
    fn count_first(&self, cell: &OnceLock<Counter>, method: usize, column: usize) {
        cell.get_or_init(|| {
            let status = FAST_STATUSES
                .get(column)
                .map_or_else(|| "error".to_owned(), u16::to_string);
            self.register(method, status)
        })
        .increment(1);
    }

    fn register(&self, method: usize, status: String) -> Counter {
        ::metrics::counter!(
            REQUESTS_TOTAL,
            "route" => self.route.clone(),
            "method" => METHOD_LABELS[method],
            "status" => status,
        )
    }
}

impl fmt::Debug for Handles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handles")
            .field("route", &&*self.route)
            .finish_non_exhaustive()
    }
}

/// Applies [`Metrics`] to a service, recording under one route label.
///
/// The route's handles are registered when the layer is built (each request-counter cell
/// when first used) and shared (`Arc`) by every service it makes: install the recorder
/// first.
#[derive(Clone, Debug)]
pub struct MetricsLayer {
    handles: Option<Arc<Handles>>,
}

impl MetricsLayer {
    /// A layer recording under the route label `route`, registering its handles with the
    /// recorder in effect now.
    pub fn new(route: impl Into<Cow<'static, str>>) -> Self {
        Self {
            handles: Some(Arc::new(Handles::new(route.into()))),
        }
    }

    /// A layer that records nothing: its services pass requests and responses through,
    /// with no clock read and no handle touched (one branch per request). For a stack
    /// whose type must not depend on whether anything reads the metrics: scb's routes
    /// when the config has no metrics endpoint.
    pub fn off() -> Self {
        Self { handles: None }
    }
}

impl MetricsLayer {
    /// Records a response this layer's route made without a service under it: the answer
    /// of a layer that replies by itself (a redirect to https, a 421 for an unknown host,
    /// the server's own refusal of a malformed request), so that every response is
    /// counted once. Counted as [`Metrics`] counts a response (duration zero: nothing ran
    /// between request and answer). `method` is `None` when the request's method is not
    /// known (a head that did not parse): counted as `other`.
    pub fn record<B: HttpBody>(&self, method: Option<&Method>, response: &Response<B>) {
        let Some(handles) = &self.handles else {
            return;
        };
        let method = method.map_or(METHOD_LABELS.len() - 1, method_index);
        handles.duration.record(0.0);
        handles.count(method, Some(response.status()));
        let bytes = response.body().size_hint().exact().unwrap_or(0);
        if bytes > 0 {
            handles.bytes.increment(bytes);
        }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = Metrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Metrics {
            inner,
            handles: self.handles.clone(),
        }
    }
}

/// Records request count, duration, in-flight requests and response bytes for the inner
/// service.
///
/// See the [module documentation](self) for what is measured and how.
#[derive(Clone, Debug)]
pub struct Metrics<S> {
    inner: S,
    handles: Option<Arc<Handles>>,
}

impl<S> Metrics<S> {
    /// Wraps `inner`, recording under the route label `route`.
    pub fn new(inner: S, route: impl Into<Cow<'static, str>>) -> Self {
        MetricsLayer::new(route).layer(inner)
    }

    /// A [`MetricsLayer`] recording under the route label `route`.
    pub fn layer(route: impl Into<Cow<'static, str>>) -> MetricsLayer {
        MetricsLayer::new(route)
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

impl<S, ReqB, ResB> Service<Request<ReqB>> for Metrics<S>
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
        let in_flight = self
            .handles
            .as_ref()
            .map(|handles| InFlight::start(Arc::clone(handles), method_index(req.method())));
        ResponseFuture {
            inner: self.inner.call(req),
            in_flight,
        }
    }
}

/// A request between its call and its response head. Counted in the in-flight gauge from
/// its first wait; leaves the gauge when dropped.
struct InFlight {
    handles: Arc<Handles>,
    method: usize,
    /// The clock's raw reading at the call.
    start: u64,
    /// In the gauge: the inner future returned `Pending` at least once.
    waiting: bool,
}

impl InFlight {
    fn start(handles: Arc<Handles>, method: usize) -> Self {
        Self {
            start: handles.clock.raw(),
            handles,
            method,
            waiting: false,
        }
    }

    /// The request waits for its response head: it enters the gauge, once.
    fn wait(&mut self) {
        if !self.waiting {
            self.waiting = true;
            self.handles.in_flight.increment(1.0);
        }
    }

    /// Records the time since the call, in seconds, in the route's histogram.
    fn record_duration(&self) {
        let clock = self.handles.clock;
        // Nanoseconds to seconds by one multiplication: a `Duration`'s `as_secs_f64`
        // divides its two parts separately. Exact to the nanosecond below 104 days.
        #[expect(clippy::cast_precision_loss, reason = "see above")]
        let seconds = clock.delta_as_nanos(self.start, clock.raw()) as f64 * 1e-9;
        self.handles.duration.record(seconds);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.waiting {
            self.handles.in_flight.decrement(1.0);
        }
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("route", &&*self.handles.route)
            .field("method", &METHOD_LABELS[self.method])
            .field("start", &self.start)
            .field("waiting", &self.waiting)
            .finish()
    }
}

/// While a [`ResponseFuture`] polls its inner future: if the thread unwinds from a panic
/// meanwhile, the request is counted as the 500 it will be answered with.
struct CountPanic<'a>(&'a mut Option<InFlight>);

impl Drop for CountPanic<'_> {
    fn drop(&mut self) {
        // Answered (the flight taken) is the usual case: no look at the panic count then.
        if self.0.is_some()
            && std::thread::panicking()
            && let Some(flight) = self.0.take()
        {
            flight.record_duration();
            flight
                .handles
                .count(flight.method, Some(StatusCode::INTERNAL_SERVER_ERROR));
        }
    }
}

pin_project! {
    /// Response future of [`Metrics`]: records when the response head is ready.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        in_flight: Option<InFlight>,
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
        // A panic in the inner future unwinds through here, and is answered 500 further
        // out (scb's `CatchPanic`, or the server itself): counted as that 500 here, where
        // the route is known.
        let on_panic = CountPanic(this.in_flight);
        let Poll::Ready(result) = this.inner.poll(cx) else {
            if let Some(flight) = on_panic.0 {
                flight.wait();
            }
            return Poll::Pending;
        };
        if let Some(flight) = on_panic.0.take() {
            flight.record_duration();
            let handles = &flight.handles;
            match &result {
                Ok(res) => {
                    handles.count(flight.method, Some(res.status()));
                    let bytes = res.body().size_hint().exact().unwrap_or(0);
                    if bytes > 0 {
                        handles.bytes.increment(bytes);
                    }
                }
                Err(_) => handles.count(flight.method, None),
            }
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::FutureExt as _;
    use http::{Method, Request, Response, StatusCode};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::Body;
    use crate::respond::Respond;

    /// One recorded metric: name, labels sorted by key, value.
    type Row = (String, Vec<(String, String)>, DebugValue);

    fn rows(snapshotter: &Snapshotter) -> Vec<Row> {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _unit, _desc, value)| {
                let (_kind, key) = key.into_parts();
                let mut labels: Vec<_> = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                (key.name().to_owned(), labels, value)
            })
            .collect()
    }

    fn find<'a>(rows: &'a [Row], name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
        let mut want: Vec<_> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        want.sort();
        rows.iter()
            .find(|(n, l, _)| n == name && *l == want)
            .map(|(_, _, v)| v)
    }

    fn requests(rows: &[Row], route: &str, method: &str, status: &str) -> Option<u64> {
        let labels = [("route", route), ("method", method), ("status", status)];
        match find(rows, REQUESTS_TOTAL, &labels)? {
            DebugValue::Counter(n) => Some(*n),
            other => panic!("not a counter: {other:?}"),
        }
    }

    fn request(method: &str) -> Request<Body> {
        Request::builder()
            .method(method)
            .body(Body::empty())
            .unwrap()
    }

    /// A service answering with the status named by the request's path, e.g. `/404`.
    fn status_from_path() -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<Body>, Infallible>>,
    > + Clone {
        service_fn(|req: Request<Body>| async move {
            let code: u16 = req.uri().path()[1..].parse().unwrap();
            let mut res = Response::new(Body::from("12345"));
            *res.status_mut() = StatusCode::from_u16(code).unwrap();
            Ok::<_, Infallible>(res)
        })
    }

    fn call_sync<S>(svc: S, method: &str, path: &str) -> Result<Response<Body>, S::Error>
    where
        S: Service<Request<Body>, Response = Response<Body>>,
    {
        let mut req = request(method);
        *req.uri_mut() = path.parse().unwrap();
        svc.oneshot(req)
            .now_or_never()
            .expect("test services answer immediately")
    }

    #[test]
    fn counts_by_route_method_and_status_including_off_table_statuses() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let svc = ServiceBuilder::new()
                .layer(MetricsLayer::new("api"))
                .service(status_from_path());
            for (method, path) in [
                ("GET", "/200"),
                ("GET", "/200"),
                ("GET", "/404"),
                ("POST", "/201"),
                ("HEAD", "/200"),
                ("BREW", "/200"),
                ("PROPFIND", "/200"),
                ("GET", "/418"),
                ("GET", "/418"),
                ("DELETE", "/599"),
            ] {
                call_sync(svc.clone(), method, path).unwrap();
            }
        });
        let rows = rows(&snapshotter);
        assert_eq!(requests(&rows, "api", "GET", "200"), Some(2));
        assert_eq!(requests(&rows, "api", "GET", "404"), Some(1));
        assert_eq!(requests(&rows, "api", "POST", "201"), Some(1));
        assert_eq!(requests(&rows, "api", "HEAD", "200"), Some(1));
        // Unknown methods share one label, so clients cannot add series.
        assert_eq!(requests(&rows, "api", "other", "200"), Some(2));
        assert_eq!(requests(&rows, "api", "GET", "418"), Some(2));
        assert_eq!(requests(&rows, "api", "DELETE", "599"), Some(1));
        let request_series = rows.iter().filter(|r| r.0 == REQUESTS_TOTAL).count();
        assert_eq!(request_series, 7, "{rows:#?}");

        match find(&rows, REQUEST_DURATION_SECONDS, &[("route", "api")]) {
            Some(DebugValue::Histogram(values)) => {
                assert_eq!(values.len(), 10);
                assert!(
                    values.iter().all(|v| v.0 >= 0.0 && v.0 < 10.0),
                    "{values:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            find(&rows, RESPONSE_BYTES_TOTAL, &[("route", "api")]),
            Some(&DebugValue::Counter(50))
        );
        assert_eq!(
            find(&rows, REQUESTS_IN_FLIGHT, &[]),
            Some(&DebugValue::Gauge(0.0.into()))
        );
    }

    #[test]
    fn routes_are_labelled_separately_and_share_one_in_flight_gauge() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let a = Metrics::new(Respond::new(StatusCode::OK).body("aa"), "a");
            let b = Metrics::new(Respond::new(StatusCode::OK).body("bbb"), String::from("b"));
            call_sync(a, "GET", "/").unwrap();
            call_sync(b.clone(), "GET", "/").unwrap();
            call_sync(b, "GET", "/").unwrap();
        });
        let rows = rows(&snapshotter);
        assert_eq!(requests(&rows, "a", "GET", "200"), Some(1));
        assert_eq!(requests(&rows, "b", "GET", "200"), Some(2));
        assert_eq!(
            find(&rows, RESPONSE_BYTES_TOTAL, &[("route", "b")]),
            Some(&DebugValue::Counter(6))
        );
        let gauges = rows.iter().filter(|r| r.0 == REQUESTS_IN_FLIGHT).count();
        assert_eq!(gauges, 1);
    }

    #[test]
    fn a_recorded_answer_counts_as_a_served_one_and_an_unknown_method_as_other() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let layer = MetricsLayer::new("server");
            let mut res = Response::new(Body::from("Bad Request\n"));
            *res.status_mut() = StatusCode::BAD_REQUEST;
            layer.record(None, &res);
            layer.record(Some(&Method::POST), &res);
            MetricsLayer::off().record(None, &res);
        });
        let rows = rows(&snapshotter);
        assert_eq!(requests(&rows, "server", "other", "400"), Some(1));
        assert_eq!(requests(&rows, "server", "POST", "400"), Some(1));
        assert_eq!(
            find(&rows, RESPONSE_BYTES_TOTAL, &[("route", "server")]),
            Some(&DebugValue::Counter(24))
        );
        match find(&rows, REQUEST_DURATION_SECONDS, &[("route", "server")]) {
            Some(DebugValue::Histogram(values)) => assert_eq!(values.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_panic_in_the_route_counts_as_the_500_it_is_answered_with() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let svc = ServiceBuilder::new()
                .layer(crate::catch_panic::CatchPanicLayer::new())
                .layer(MetricsLayer::new("boom"))
                .service(service_fn(|_req: Request<Body>| async {
                    if true {
                        panic!("on purpose");
                    }
                    Ok::<_, Infallible>(Response::new(Body::empty()))
                }));
            let res = call_sync(svc, "GET", "/").unwrap();
            assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        });
        let rows = rows(&snapshotter);
        assert_eq!(requests(&rows, "boom", "GET", "500"), Some(1));
        assert_eq!(
            find(&rows, REQUESTS_IN_FLIGHT, &[]),
            Some(&DebugValue::Gauge(0.0.into()))
        );
    }

    #[test]
    fn an_off_layer_passes_responses_through_and_records_nothing() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let res = ::metrics::with_local_recorder(&recorder, || {
            let svc = ServiceBuilder::new()
                .layer(MetricsLayer::off())
                .service(status_from_path());
            call_sync(svc.clone(), "GET", "/404").unwrap();
            call_sync(svc, "GET", "/201").unwrap()
        });
        assert_eq!(res.status(), StatusCode::CREATED);
        assert_eq!(rows(&snapshotter), Vec::<Row>::new());
    }

    #[tokio::test]
    async fn route_handles_stay_bound_to_the_recorder_the_layer_was_built_with() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let layer = ::metrics::with_local_recorder(&recorder, || MetricsLayer::new("bound"));
        // The requests run outside the recorder's scope, on the test runtime.
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service(Respond::new(StatusCode::OK).body("four"));
        svc.clone().oneshot(request("GET")).await.unwrap();
        svc.oneshot(request("GET")).await.unwrap();
        let rows = rows(&snapshotter);
        match find(&rows, REQUEST_DURATION_SECONDS, &[("route", "bound")]) {
            Some(DebugValue::Histogram(values)) => assert_eq!(values.len(), 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            find(&rows, RESPONSE_BYTES_TOTAL, &[("route", "bound")]),
            Some(&DebugValue::Counter(8))
        );
    }

    /// A future that is not ready at its first poll (and wakes itself), ready at the next.
    struct WaitOnce(bool);

    impl Future for WaitOnce {
        type Output = Result<Response<Body>, Infallible>;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            if std::mem::replace(&mut self.0, true) {
                Poll::Ready(Ok(Response::new(Body::empty())))
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    #[test]
    fn in_flight_rises_on_the_first_wait_and_falls_on_completion_or_drop() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let gauge = |rows: &[Row]| match find(rows, REQUESTS_IN_FLIGHT, &[]) {
            Some(DebugValue::Gauge(v)) => v.0,
            other => panic!("{other:?}"),
        };
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        ::metrics::with_local_recorder(&recorder, || {
            let mut svc = Metrics::new(service_fn(|_req| WaitOnce(false)), "r");
            let mut completed = svc.call(request("GET"));
            let mut dropped = svc.call(request("GET"));
            // Called, not yet polled: not in flight. The debugging recorder resets values on
            // every snapshot: each one is a delta.
            assert_eq!(gauge(&rows(&snapshotter)), 0.0);
            assert!(Pin::new(&mut completed).poll(&mut cx).is_pending());
            assert!(Pin::new(&mut dropped).poll(&mut cx).is_pending());
            assert_eq!(gauge(&rows(&snapshotter)), 2.0);
            assert!(Pin::new(&mut completed).poll(&mut cx).is_ready());
            let after_completion = rows(&snapshotter);
            assert_eq!(gauge(&after_completion), -1.0);
            assert_eq!(requests(&after_completion, "r", "GET", "200"), Some(1));
            drop(dropped);
            let after_drop = rows(&snapshotter);
            assert_eq!(gauge(&after_drop), -1.0);
            // The dropped request never got a response: it is not counted as answered.
            assert_eq!(requests(&after_drop, "r", "GET", "200"), Some(0));
        });
    }

    #[test]
    fn a_response_ready_at_its_first_poll_never_enters_the_in_flight_gauge() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let mut svc = Metrics::new(Respond::new(StatusCode::OK), "r");
            let response = svc.call(request("GET"));
            response.now_or_never().unwrap().unwrap();
            drop(svc.call(request("GET")));
        });
        let rows = rows(&snapshotter);
        assert_eq!(
            find(&rows, REQUESTS_IN_FLIGHT, &[]),
            Some(&DebugValue::Gauge(0.0.into()))
        );
        assert_eq!(requests(&rows, "r", "GET", "200"), Some(1));
    }

    #[test]
    fn inner_errors_are_counted_under_status_error() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let svc = Metrics::new(
                service_fn(|_req: Request<Body>| async {
                    Err::<Response<Body>, _>("upstream refused")
                }),
                "failing",
            );
            assert!(call_sync(svc, "PUT", "/").is_err());
        });
        let rows = rows(&snapshotter);
        assert_eq!(requests(&rows, "failing", "PUT", "error"), Some(1));
        match find(&rows, REQUEST_DURATION_SECONDS, &[("route", "failing")]) {
            Some(DebugValue::Histogram(values)) => assert_eq!(values.len(), 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_body_size_counts_zero_bytes() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            let svc = Metrics::new(
                service_fn(|_req: Request<Body>| async {
                    let stream =
                        http_body_util::StreamBody::new(futures_util::stream::iter([Ok::<
                            _,
                            Infallible,
                        >(
                            http_body::Frame::data(bytes::Bytes::from("unknown")),
                        )]));
                    Ok::<_, Infallible>(Response::new(Body::new(stream)))
                }),
                "stream",
            );
            call_sync(svc, "GET", "/").unwrap();
        });
        let rows = rows(&snapshotter);
        assert_eq!(requests(&rows, "stream", "GET", "200"), Some(1));
        assert_eq!(
            find(&rows, RESPONSE_BYTES_TOTAL, &[("route", "stream")]),
            Some(&DebugValue::Counter(0))
        );
    }

    #[test]
    fn describe_sets_units_and_descriptions() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, || {
            describe();
            call_sync(Metrics::new(Respond::new(StatusCode::OK), "d"), "GET", "/").unwrap();
        });
        let units: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, unit, desc, _)| (key.key().name().to_owned(), unit, desc.is_some()))
            .collect();
        for (name, unit) in [
            (REQUESTS_TOTAL, Unit::Count),
            (REQUEST_DURATION_SECONDS, Unit::Seconds),
            (REQUESTS_IN_FLIGHT, Unit::Count),
            (RESPONSE_BYTES_TOTAL, Unit::Bytes),
        ] {
            assert!(
                units.contains(&(name.to_owned(), Some(unit), true)),
                "{name}: {units:?}"
            );
        }
    }

    #[test]
    fn each_status_has_its_own_column_and_methods_map_to_their_labels() {
        for code in 100..1000u16 {
            let column = COLUMN_OF_STATUS[usize::from(code) - 100];
            match FAST_STATUSES.iter().position(|s| *s == code) {
                Some(expected) => assert_eq!(usize::from(column), expected, "{code}"),
                None => assert_eq!(column, NO_COLUMN, "{code}"),
            }
        }
        for (i, label) in METHOD_LABELS.iter().enumerate().take(7) {
            assert_eq!(
                method_index(&Method::from_bytes(label.as_bytes()).unwrap()),
                i
            );
        }
        assert_eq!(METHOD_LABELS[method_index(&Method::TRACE)], "other");
        assert_eq!(METHOD_LABELS[method_index(&Method::CONNECT)], "other");
    }

    #[test]
    fn service_is_send_and_sync_and_future_send_when_inner_parts_are() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<MetricsLayer>();
        send_sync::<Metrics<Respond>>();
        send::<ResponseFuture<std::future::Ready<Result<Response<Body>, Infallible>>>>();
    }
}
