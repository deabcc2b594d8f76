//! Give every request an id, and echo it on the response.
//!
//! [`RequestIdLayer`] keeps a well-formed id the client (or a proxy in front) sent, replaces
//! a malformed one, and generates one otherwise. The id is set on the request (exactly one
//! header instance, so a reverse proxy behind this layer forwards exactly one), stored as an
//! [`Id`] request extension for handlers and the access log, and set on every response.
//!
//! The layer only touches headers: the response body is passed through untouched, so the
//! server's zero-copy path survives it.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//!
//! use http::{Request, Response};
//! use scb_core::Body;
//! use scb_core::request_id::{Id, RequestIdLayer};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let svc = ServiceBuilder::new()
//!     .layer(RequestIdLayer::new())
//!     .service_fn(|req: Request<Body>| async move {
//!         let id = req.extensions().get::<Id>().expect("set by the layer").clone();
//!         Ok::<_, Infallible>(Response::new(Body::from(format!("your id is {id}"))))
//!     });
//!
//! let req = Request::builder()
//!     .header("x-request-id", "abc-123")
//!     .body(Body::empty())
//!     .unwrap();
//! let res = svc.oneshot(req).await.unwrap();
//! assert_eq!(res.headers()["x-request-id"], "abc-123");
//! # }
//! ```

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// The header [`RequestIdLayer`] reads and writes unless told otherwise: `x-request-id`.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest incoming id that is kept, in bytes.
///
/// 128 bytes holds every common id format (UUID: 36, W3C trace id: 32, a ULID: 26, a
/// `traceparent`: 55) with room to spare, while a client cannot make every log line and
/// every upstream request it causes carry kilobytes of its choosing.
pub const MAX_LEN: usize = 128;

/// Whether `bytes` is kept as an incoming request id: 1 to [`MAX_LEN`] bytes, every byte
/// visible ASCII (`0x21..=0x7E`).
///
/// Spaces, control characters and non-ASCII bytes are refused because the id is written
/// into logs verbatim: a client must not be able to forge or split log lines through it.
pub fn is_valid(bytes: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&bytes.len()) && bytes.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// A fresh request id: 32 lowercase hex characters.
///
/// Ids are unique per thread (a 64-bit counter run through a bijective mixer, so they do
/// not look sequential) and prefixed with 64 random bits drawn once per thread, so ids from
/// different workers and different processes do not collide in practice. No system call is
/// made per id. The ids are not secret and not unpredictable: do not use them as tokens.
///
/// No allocation per id either: ids are written into a per-thread buffer of
/// 128 ids and handed out as shared slices of it; a buffer is freed when
/// the last of its ids is dropped.
pub fn generate() -> HeaderValue {
    GENERATOR.with(|g| {
        let n = g.counter.get();
        g.counter.set(n.wrapping_add(1));
        let mut hex = [0u8; 32];
        hex[..16].copy_from_slice(&g.prefix);
        hex[16..].copy_from_slice(&crate::http1::hex_digits(mix(n)));
        let mut buffer = g.buffer.take();
        if buffer.capacity() < hex.len() {
            buffer = BytesMut::with_capacity(hex.len() * IDS_PER_BUFFER);
        }
        buffer.extend_from_slice(&hex);
        let id = buffer.split().freeze();
        g.buffer.set(buffer);
        HeaderValue::from_maybe_shared(id)
            .expect("lowercase hex digits are valid header value bytes")
    })
}

/// How many ids share one allocation: 4 KiB of ids, a buffer every 128 requests.
const IDS_PER_BUFFER: usize = 128;

struct Generator {
    /// The thread's random half of every id, in hex once.
    prefix: [u8; 16],
    counter: Cell<u64>,
    /// What is left of the current buffer (its front was handed out as ids).
    buffer: Cell<BytesMut>,
}

thread_local! {
    // The counter also starts at a random point, so two threads that happened to draw the
    // same prefix would still have to collide on a 64-bit counter value to repeat an id.
    static GENERATOR: Generator = Generator {
        prefix: crate::http1::hex_digits(fastrand::u64(..)),
        counter: Cell::new(fastrand::u64(..)),
        buffer: Cell::new(BytesMut::new()),
    };
}

/// The splitmix64 finalizer. Every step (xor with a right shift of itself, multiplication
/// by an odd constant) is a bijection on `u64`, so distinct counters give distinct outputs:
/// mixing hides the sequence without giving up per-thread uniqueness.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The request id, as a request extension set by [`RequestId`].
///
/// It always satisfies [`is_valid`], so it is safe to write into logs as is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Id(HeaderValue);

impl Id {
    /// Wraps `value` if it is a valid request id (see [`is_valid`]), `None` otherwise.
    pub fn new(value: HeaderValue) -> Option<Self> {
        is_valid(value.as_bytes()).then_some(Self(value))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        // Cannot fail: every constructor checks `is_valid`, which admits visible ASCII only.
        self.0.to_str().unwrap_or_default()
    }

    /// The id as a header value.
    pub fn header_value(&self) -> &HeaderValue {
        &self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Id> for HeaderValue {
    fn from(id: Id) -> Self {
        id.0
    }
}

/// Applies [`RequestId`] to a service.
#[derive(Clone, Debug)]
pub struct RequestIdLayer {
    header: HeaderName,
}

impl RequestIdLayer {
    /// A layer reading and writing the `x-request-id` header.
    pub fn new() -> Self {
        Self {
            header: X_REQUEST_ID,
        }
    }

    /// The header the id is read from and written to.
    ///
    /// Defaults to `x-request-id`.
    pub fn header(mut self, name: HeaderName) -> Self {
        self.header = name;
        self
    }
}

impl Default for RequestIdLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestId {
            inner,
            header: self.header.clone(),
        }
    }
}

/// Keeps, replaces or generates a request id and sets it on the request, as an [`Id`]
/// extension, and on the response.
///
/// See the [module documentation](self) for the rules.
#[derive(Clone, Debug)]
pub struct RequestId<S> {
    inner: S,
    header: HeaderName,
}

impl<S> RequestId<S> {
    /// Wraps `inner`, using the `x-request-id` header.
    pub fn new(inner: S) -> Self {
        RequestIdLayer::new().layer(inner)
    }

    /// A [`RequestIdLayer`] with the default settings.
    pub fn layer() -> RequestIdLayer {
        RequestIdLayer::new()
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

impl<S, ReqB, ResB> Service<Request<ReqB>> for RequestId<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let mut value = incoming(req.headers(), &self.header).unwrap_or_else(generate);
        // Sent as HPACK's never-indexed literal: an id is unique to its
        // request, so entering it into an HTTP/2 connection's header table can never save a
        // byte, and each one pushed out older fields (content-type, date, ...) that every
        // later response then had to send and enter again. `sensitive` is the only way to
        // ask h2 for that encoding; over HTTP/1.1 it changes nothing but `Debug`.
        value.set_sensitive(true);
        // `insert` drops every existing instance, so exactly one goes upstream.
        req.headers_mut().insert(self.header.clone(), value.clone());
        req.extensions_mut().insert(Id(value.clone()));
        ResponseFuture {
            inner: self.inner.call(req),
            header: Some((self.header.clone(), value)),
        }
    }
}

/// The incoming id if there is exactly one instance of the header and it is valid.
fn incoming(headers: &HeaderMap, name: &HeaderName) -> Option<HeaderValue> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        let instances = headers.get_all(name).iter().count();
        tracing::debug!(header = %name, instances, "replacing repeated request id");
        return None;
    }
    if !is_valid(first.as_bytes()) {
        // The value itself is not logged: refusing it is about keeping it out of logs.
        tracing::debug!(header = %name, len = first.len(), "replacing invalid request id");
        return None;
    }
    Some(first.clone())
}

pin_project! {
    /// Response future of [`RequestId`]: sets the id header on the response.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
        header: Option<(HeaderName, HeaderValue)>,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut res = ready!(this.inner.poll(cx))?;
        if let Some((name, value)) = this.header.take() {
            // Overwrites whatever the inner service set: the response must carry the id
            // the request was logged and forwarded with.
            res.headers_mut().insert(name, value);
        }
        Poll::Ready(Ok(res))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::convert::Infallible;

    use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    use super::*;
    use crate::Body;

    /// Echoes, in response headers, what the inner service saw: the id extension and every
    /// instance of the id header.
    async fn echo(req: Request<Body>) -> Result<Response<Body>, Infallible> {
        let mut res = Response::new(Body::empty());
        if let Some(id) = req.extensions().get::<Id>() {
            res.headers_mut()
                .insert("seen-extension", id.header_value().clone());
        }
        for value in req.headers().get_all("x-request-id") {
            res.headers_mut().append("seen-header", value.clone());
        }
        Ok(res)
    }

    async fn send(req: Request<Body>) -> Response<Body> {
        ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .service_fn(echo)
            .oneshot(req)
            .await
            .unwrap()
    }

    fn request_with(ids: &[&[u8]]) -> Request<Body> {
        let mut req = Request::new(Body::empty());
        for id in ids {
            req.headers_mut()
                .append(X_REQUEST_ID, HeaderValue::from_bytes(id).unwrap());
        }
        req
    }

    fn all(headers: &HeaderMap, name: &str) -> Vec<HeaderValue> {
        headers.get_all(name).iter().cloned().collect()
    }

    fn assert_generated(value: &HeaderValue) {
        let s = value.to_str().unwrap();
        assert_eq!(s.len(), 32, "{s}");
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{s}"
        );
    }

    #[tokio::test]
    async fn valid_incoming_id_is_kept_everywhere() {
        let res = send(request_with(&[b"abc-123_XYZ~"])).await;
        assert_eq!(all(res.headers(), "x-request-id"), ["abc-123_XYZ~"]);
        assert_eq!(all(res.headers(), "seen-header"), ["abc-123_XYZ~"]);
        assert_eq!(all(res.headers(), "seen-extension"), ["abc-123_XYZ~"]);
    }

    #[tokio::test]
    async fn missing_id_is_generated_and_the_same_everywhere() {
        let res = send(request_with(&[])).await;
        let id = res.headers()["x-request-id"].clone();
        assert_generated(&id);
        assert_eq!(all(res.headers(), "seen-header"), std::slice::from_ref(&id));
        assert_eq!(all(res.headers(), "seen-extension"), [id]);
    }

    /// `sensitive` is what makes h2 send a value as a never-indexed literal instead of
    /// entering it into the connection's header table, where a per-request id only evicts
    /// fields that repeat.
    #[tokio::test]
    async fn ids_are_marked_never_to_be_indexed_going_up_and_coming_back() {
        for req in [request_with(&[]), request_with(&[b"corr-7"])] {
            let res = send(req).await;
            assert!(res.headers()["x-request-id"].is_sensitive());
            assert!(res.headers()["seen-header"].is_sensitive());
        }
    }

    #[tokio::test]
    async fn invalid_incoming_ids_are_replaced() {
        let too_long = vec![b'a'; MAX_LEN + 1];
        // DEL and control characters other than tab cannot even be parsed as header values.
        let cases: [&[u8]; 6] = [
            b"",
            b"has space",
            b"tab\there",
            "caf\u{e9}".as_bytes(),
            b"\xff",
            &too_long,
        ];
        for bad in cases {
            let res = send(request_with(&[bad])).await;
            let id = res.headers()["x-request-id"].clone();
            assert_generated(&id);
            assert_eq!(all(res.headers(), "seen-header"), [id], "{bad:?}");
        }
    }

    #[tokio::test]
    async fn longest_allowed_id_is_kept() {
        let longest = vec![b'z'; MAX_LEN];
        let res = send(request_with(&[&longest])).await;
        assert_eq!(res.headers()["x-request-id"].as_bytes(), &longest[..]);
    }

    #[tokio::test]
    async fn repeated_header_is_replaced_by_exactly_one_generated_id() {
        let res = send(request_with(&[b"first", b"second"])).await;
        let forwarded = all(res.headers(), "seen-header");
        assert_eq!(forwarded.len(), 1);
        assert_generated(&forwarded[0]);
        assert_eq!(all(res.headers(), "x-request-id"), forwarded);
    }

    #[tokio::test]
    async fn id_set_by_inner_service_on_response_is_overwritten() {
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .service_fn(|_req: Request<Body>| async {
                let mut res = Response::new(Body::empty());
                res.headers_mut()
                    .append(X_REQUEST_ID, "inner-1".parse().unwrap());
                res.headers_mut()
                    .append(X_REQUEST_ID, "inner-2".parse().unwrap());
                Ok::<_, Infallible>(res)
            });
        let res = svc.oneshot(request_with(&[b"outer"])).await.unwrap();
        assert_eq!(all(res.headers(), "x-request-id"), ["outer"]);
    }

    #[tokio::test]
    async fn custom_header_name_is_used_instead_of_the_default() {
        let name = HeaderName::from_static("x-correlation-id");
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new().header(name.clone()))
            .service_fn(echo);
        let mut req = Request::new(Body::empty());
        req.headers_mut().insert(&name, "corr-7".parse().unwrap());
        req.headers_mut()
            .insert(X_REQUEST_ID, "ignored".parse().unwrap());
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.headers()[&name], "corr-7");
        assert_eq!(all(res.headers(), "seen-extension"), ["corr-7"]);
        // The default header is left alone, neither read nor rewritten.
        assert_eq!(all(res.headers(), "seen-header"), ["ignored"]);
    }

    #[tokio::test]
    async fn works_with_any_request_and_response_body_type() {
        let svc = ServiceBuilder::new()
            .layer(RequestIdLayer::new())
            .service(service_fn(|_req: Request<String>| async {
                Ok::<_, Infallible>(Response::new(vec![1u8, 2, 3]))
            }));
        let res = svc.oneshot(Request::new(String::new())).await.unwrap();
        assert_generated(&res.headers()["x-request-id"]);
        assert_eq!(res.into_body(), [1, 2, 3]);
    }

    #[test]
    fn generated_ids_are_unique_valid_and_not_sequential_looking() {
        let ids: Vec<HeaderValue> = (0..10_000).map(|_| generate()).collect();
        let distinct: HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        for id in &ids {
            assert_generated(id);
            assert!(is_valid(id.as_bytes()));
        }
        // Same thread, same prefix; the mixed counter half differs in many digits from one
        // id to the next rather than only in its last one.
        let (a, b) = (ids[0].to_str().unwrap(), ids[1].to_str().unwrap());
        assert_eq!(a[..16], b[..16]);
        let differing = a[16..].bytes().zip(b[16..].bytes()).filter(|(x, y)| x != y);
        assert!(differing.count() > 4, "{a} {b}");
    }

    #[test]
    fn threads_get_different_prefixes() {
        let here = generate();
        let there = std::thread::spawn(generate).join().unwrap();
        assert_ne!(here.as_bytes()[..16], there.as_bytes()[..16]);
    }

    #[test]
    fn mix_is_a_bijection_on_a_sample() {
        let outputs: HashSet<u64> = (0..100_000u64).map(mix).collect();
        assert_eq!(outputs.len(), 100_000);
    }

    #[test]
    fn id_refuses_invalid_values() {
        assert!(Id::new(HeaderValue::from_static("ok")).is_some());
        assert!(Id::new(HeaderValue::from_static("not ok")).is_none());
        assert_eq!(
            Id::new(HeaderValue::from_static("x1")).unwrap().as_str(),
            "x1"
        );
    }

    #[test]
    fn service_is_send_and_sync_and_future_send_when_inner_parts_are() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<RequestId<crate::respond::Respond>>();
        send_sync::<RequestIdLayer>();
        send::<ResponseFuture<std::future::Ready<Result<Response<Body>, Infallible>>>>();
    }
}
