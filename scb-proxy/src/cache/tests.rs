//! The cache over an origin that counts its requests and answers what each test scripts.

use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use scb_core::Body;
use tower::ServiceExt as _;

use super::*;

pub(super) type Origin = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// An origin answering `script(request, count)`, counting requests.
#[derive(Clone)]
pub(super) struct Scripted {
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
}

impl Scripted {
    pub(super) fn new() -> Self {
        Self {
            calls: Arc::default(),
            seen: Arc::default(),
        }
    }

    pub(super) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub(super) fn origin(
        &self,
        script: impl Fn(&Request<Body>, usize) -> Response<Body> + Clone + Send + Sync + 'static,
    ) -> Origin {
        let calls = Arc::clone(&self.calls);
        let seen = Arc::clone(&self.seen);
        BoxCloneSyncService::new(tower::service_fn(move |req: Request<Body>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            seen.lock().unwrap().push(req.headers().clone());
            let res = script(&req, n);
            async move { Ok::<_, Infallible>(res) }
        }))
    }
}

pub(super) fn response(
    status: u16,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Response<Body> {
    let body: Bytes = body.into();
    let len = body.len();
    let mut res = Response::new(Body::full(body));
    *res.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        res.headers_mut().append(
            header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    res.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    res
}

pub(super) fn request(method: Method, path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "example.com");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.body(Body::empty()).unwrap()
}

pub(super) fn get(path: &str) -> Request<Body> {
    request(Method::GET, path, &[])
}

/// Sends `req` and reads the whole answer (which is what stores a miss).
pub(super) async fn send(svc: &Cache<Origin>, req: Request<Body>) -> (Response<()>, Bytes) {
    let res = svc.clone().oneshot(req).await.unwrap();
    let (head, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (Response::from_parts(head, ()), body)
}

pub(super) fn status_of(res: &Response<()>) -> &str {
    res.headers()
        .get("cache-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn cache(origin: Origin) -> Cache<Origin> {
    ServiceBuilder::new()
        .layer(CacheLayer::new(1 << 20))
        .service(origin)
}

#[tokio::test]
async fn a_fresh_response_is_answered_from_the_store_with_age_and_head_from_get() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| {
        // `public`: without it a shared cache does not reuse an answer that sets a cookie.
        response(
            200,
            &[
                ("cache-control", "public, max-age=60"),
                ("set-cookie", "a=1"),
            ],
            "hello",
        )
    }));
    let (first, body) = send(&svc, get("/a")).await;
    assert_eq!(body, "hello");
    assert_eq!(status_of(&first), "scb; fwd=uri-miss; stored");
    assert_eq!(
        first.headers()["set-cookie"],
        "a=1",
        "the first client gets its cookie"
    );

    let (hit, body) = send(&svc, get("/a")).await;
    assert_eq!(body, "hello");
    assert_eq!(status_of(&hit), "scb; hit");
    assert!(hit.headers().contains_key(header::AGE));
    assert!(
        !hit.headers().contains_key("set-cookie"),
        "no other client gets it"
    );

    let (head, body) = send(&svc, request(Method::HEAD, "/a", &[])).await;
    assert_eq!(status_of(&head), "scb; hit");
    assert!(body.is_empty());
    assert_eq!(head.headers()[header::CONTENT_LENGTH], "5");
    assert_eq!(origin.calls(), 1, "one trip to the origin for all three");
}

#[tokio::test]
async fn what_may_not_be_stored_is_not_and_every_request_goes_to_the_origin() {
    for cache_control in ["no-store", "private, max-age=60", "max-age=0, no-cache"] {
        let origin = Scripted::new();
        let svc = cache(
            origin.origin(move |_, _| response(200, &[("cache-control", cache_control)], "x")),
        );
        for _ in 0..3 {
            let (res, _) = send(&svc, get("/")).await;
            assert!(
                !status_of(&res).contains("hit"),
                "{cache_control}: {}",
                status_of(&res)
            );
        }
        assert_eq!(origin.calls(), 3, "{cache_control}");
    }
    // An authorized request's answer is not shared unless the origin says it may be.
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| response(200, &[("cache-control", "max-age=60")], "x")));
    for _ in 0..2 {
        send(
            &svc,
            request(Method::GET, "/", &[("authorization", "Basic YTpi")]),
        )
        .await;
    }
    assert_eq!(origin.calls(), 2);
    // An answer that sets a cookie is not reused for another client unless it is public.
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| {
        response(
            200,
            &[("cache-control", "max-age=60"), ("set-cookie", "s=1")],
            "x",
        )
    }));
    for _ in 0..2 {
        let (res, _) = send(&svc, get("/")).await;
        assert_eq!(res.headers()["set-cookie"], "s=1");
    }
    assert_eq!(origin.calls(), 2);
}

#[tokio::test]
async fn vary_keeps_a_variant_per_value_and_answers_each_from_its_own() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, _| {
        let lang = req.headers()["accept-language"]
            .to_str()
            .unwrap()
            .to_owned();
        let body: &'static str = if lang == "fr" { "bonjour" } else { "hello" };
        response(
            200,
            &[("cache-control", "max-age=60"), ("vary", "accept-language")],
            body,
        )
    }));
    let lang = |l: &str| request(Method::GET, "/", &[("accept-language", l)]);
    assert_eq!(send(&svc, lang("en")).await.1, "hello");
    let (fr, body) = send(&svc, lang("fr")).await;
    assert_eq!(body, "bonjour");
    assert_eq!(status_of(&fr), "scb; fwd=vary-miss; stored");
    assert_eq!(send(&svc, lang("en")).await.1, "hello");
    assert_eq!(send(&svc, lang("fr")).await.1, "bonjour");
    assert_eq!(origin.calls(), 2);
}

#[tokio::test]
async fn a_stale_response_is_revalidated_and_a_304_refreshes_it() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, n| {
        if n == 0 {
            response(
                200,
                &[("cache-control", "max-age=0"), ("etag", "\"v1\"")],
                "body-1",
            )
        } else {
            assert_eq!(req.headers()["if-none-match"], "\"v1\"");
            let mut res = response(
                304,
                &[("cache-control", "max-age=60"), ("etag", "\"v1\"")],
                "",
            );
            res.headers_mut().remove(header::CONTENT_LENGTH);
            res
        }
    }));
    send(&svc, get("/r")).await;
    let (revalidated, body) = send(&svc, get("/r")).await;
    assert_eq!(revalidated.status(), StatusCode::OK);
    assert_eq!(body, "body-1");
    assert_eq!(status_of(&revalidated), "scb; fwd=stale; fwd-status=304");
    // The 304's max-age now applies: a hit, no third trip.
    let (hit, body) = send(&svc, get("/r")).await;
    assert_eq!(status_of(&hit), "scb; hit");
    assert_eq!(body, "body-1");
    assert_eq!(origin.calls(), 2);
}

#[tokio::test]
async fn an_unsafe_method_drops_what_is_stored_for_its_uri_and_its_location() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, _| {
        if req.method() == Method::POST {
            response(201, &[("location", "/items/2")], "")
        } else {
            response(200, &[("cache-control", "max-age=60")], "item")
        }
    }));
    for path in ["/items", "/items/2", "/other"] {
        send(&svc, get(path)).await;
    }
    assert_eq!(origin.calls(), 3);
    send(&svc, request(Method::POST, "/items", &[])).await;
    for path in ["/items", "/items/2", "/other"] {
        send(&svc, get(path)).await;
    }
    assert_eq!(
        origin.calls(),
        4 + 2,
        "/items and /items/2 fetched again, /other not"
    );
}

#[tokio::test]
async fn only_if_cached_without_a_stored_response_is_504_and_the_origin_is_not_asked() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| response(200, &[("cache-control", "max-age=60")], "x")));
    let (res, _) = send(
        &svc,
        request(Method::GET, "/", &[("cache-control", "only-if-cached")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(origin.calls(), 0);
}

#[tokio::test]
async fn a_body_that_fails_or_is_too_large_is_not_stored() {
    // Fails midway: the client sees the error, nothing is stored.
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| {
        let chunks: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = vec![
            Ok(http_body::Frame::data(Bytes::from_static(b"part"))),
            Err(std::io::Error::other("upstream reset")),
        ];
        let mut res = Response::new(Body::new(http_body_util::StreamBody::new(
            futures_util::stream::iter(chunks),
        )));
        res.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=60"),
        );
        res
    }));
    for _ in 0..2 {
        let res = svc.clone().oneshot(get("/broken")).await.unwrap();
        assert!(res.into_body().collect().await.is_err());
    }
    assert_eq!(origin.calls(), 2);

    // Larger than max_object: streamed, not stored.
    let origin = Scripted::new();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(1 << 20).max_object(4))
        .service(
            origin.origin(|_, _| response(200, &[("cache-control", "max-age=60")], "too big")),
        );
    for _ in 0..2 {
        let (res, body) = send(&svc, get("/big")).await;
        assert_eq!(body, "too big");
        assert_eq!(status_of(&res), "scb; fwd=uri-miss");
    }
    assert_eq!(origin.calls(), 2);
}

/// A body whose frames are `chunks` and which never says it has ended before its `None`
/// is polled (as a stream from an upstream that does not know its own end).
fn unannounced(chunks: &[&'static str]) -> Body {
    let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = chunks
        .iter()
        .map(|c| Ok(http_body::Frame::data(Bytes::from_static(c.as_bytes()))))
        .collect();
    Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )))
}

/// A storable answer (`max-age=60`) whose body is [`unannounced`], with `length` as its
/// `Content-Length` if given.
fn unannounced_response(chunks: &[&'static str], length: Option<u64>) -> Response<Body> {
    let mut res = Response::new(unannounced(chunks));
    let headers = res.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=60"),
    );
    if let Some(n) = length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    res
}

/// Reads one data frame from a miss and drops the body there, as hyper's HTTP/1.1 server
/// does once the declared length is written.
async fn read_one_frame_and_drop(svc: &Cache<Origin>, path: &str) -> Bytes {
    let res = svc.clone().oneshot(get(path)).await.unwrap();
    let mut body = res.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    frame.into_data().unwrap()
}

#[tokio::test]
async fn a_body_dropped_after_its_last_byte_is_stored_and_one_cut_short_is_not() {
    // Whole, and the body says so after its last data frame.
    let origin = Scripted::new();
    let svc =
        cache(origin.origin(|_, _| response(200, &[("cache-control", "max-age=60")], "hello")));
    assert_eq!(read_one_frame_and_drop(&svc, "/said").await, "hello");
    let (res, body) = send(&svc, get("/said")).await;
    assert_eq!((status_of(&res), &body[..]), ("scb; hit", &b"hello"[..]));
    assert_eq!(origin.calls(), 1);

    // Whole by its Content-Length, though the body never said it had ended.
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| unannounced_response(&["hello"], Some(5))));
    assert_eq!(read_one_frame_and_drop(&svc, "/counted").await, "hello");
    let (res, body) = send(&svc, get("/counted")).await;
    assert_eq!((status_of(&res), &body[..]), ("scb; hit", &b"hello"[..]));
    assert_eq!(origin.calls(), 1);

    // An empty body that nobody polls: whole by its length of zero.
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| unannounced_response(&[], Some(0))));
    drop(svc.clone().oneshot(get("/empty")).await.unwrap());
    let (res, body) = send(&svc, get("/empty")).await;
    assert_eq!((status_of(&res), body.len()), ("scb; hit", 0));
    assert_eq!(origin.calls(), 1);

    // Dropped short of its length, and with no length at all: neither is stored.
    for (path, length) in [("/short", Some(10)), ("/unknown", None)] {
        let origin = Scripted::new();
        let svc =
            cache(origin.origin(move |_, _| unannounced_response(&["hello", "world"], length)));
        assert_eq!(read_one_frame_and_drop(&svc, path).await, "hello");
        let (res, body) = send(&svc, get(path)).await;
        assert_eq!(body, "helloworld");
        assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored", "{path}");
        assert_eq!(origin.calls(), 2, "{path}");
    }
}

#[tokio::test]
async fn the_store_stays_within_its_bound() {
    let origin = Scripted::new();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(32 << 10))
        .service(
            origin
                .origin(|_, _| response(200, &[("cache-control", "max-age=60")], vec![b'x'; 1500])),
        );
    let store = Arc::clone(&svc.shared.store);
    for i in 0..100 {
        send(&svc, get(&format!("/cold/{i}"))).await;
        assert!(store.bytes() <= 32 << 10, "{}", store.bytes());
    }
    assert!(store.bytes() > 16 << 10, "it fills up: {}", store.bytes());
}

#[tokio::test]
async fn a_scan_of_cold_objects_leaves_the_hot_ones_stored() {
    // 64 hot objects asked for again and again, then a scan of 2,000 objects asked for
    // once each, twenty times what the store holds. Least-recently-used eviction would
    // have flushed every hot object by the end of the scan.
    let origin = Scripted::new();
    let svc =
        ServiceBuilder::new()
            .layer(CacheLayer::new(1 << 20))
            .service(origin.origin(|_, _| {
                response(200, &[("cache-control", "max-age=600")], vec![b'x'; 8000])
            }));
    let hot = |i: usize| format!("/hot/{i}");
    for _ in 0..3 {
        for i in 0..64 {
            send(&svc, get(&hot(i))).await;
        }
    }
    for i in 0..2000 {
        send(&svc, get(&format!("/scan/{i}"))).await;
        if i % 100 == 0 {
            // Still in use during the scan, as hot objects are.
            for i in 0..64 {
                send(&svc, get(&hot(i))).await;
            }
        }
    }
    let mut hits = 0;
    for i in 0..64 {
        let (res, _) = send(&svc, get(&hot(i))).await;
        hits += usize::from(status_of(&res) == "scb; hit");
    }
    assert!(hits >= 60, "{hits} of 64 hot objects survived the scan");
    let store = Arc::clone(&svc.shared.store);
    assert!(store.bytes() <= 1 << 20, "{}", store.bytes());
}

#[test]
fn a_borrowed_key_hashes_and_compares_as_the_stored_one() {
    use std::borrow::Cow;
    let key = key::Key::new(true, "example.com".into(), "/a?b=c".into());
    let borrowed = key::KeyRef::new(true, Cow::Borrowed("example.com"), Cow::Borrowed("/a?b=c"));
    assert!(key::hashes_agree(&key, &borrowed));
    assert!(quick_cache::Equivalent::equivalent(&borrowed, &key));
    assert_eq!(borrowed.to_key(), key);
    for (secure, host, target) in [
        (false, "example.com", "/a?b=c"),
        (true, "example.org", "/a?b=c"),
        (true, "example.com", "/a?b=d"),
        (true, "example.co", "m/a?b=c"),
    ] {
        let other = key::KeyRef::new(secure, Cow::Borrowed(host), Cow::Borrowed(target));
        assert!(!quick_cache::Equivalent::equivalent(&other, &key));
        assert_ne!(other.to_key(), key);
    }
}

#[tokio::test]
async fn a_host_in_capitals_finds_what_the_lower_case_host_stored() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, _| response(200, &[("cache-control", "max-age=60")], "x")));
    send(&svc, get("/a")).await;
    let req = Request::get("/a")
        .header("host", "EXAMPLE.com")
        .body(Body::empty())
        .unwrap();
    let (res, _) = send(&svc, req).await;
    assert_eq!(status_of(&res), "scb; hit");
    assert_eq!(origin.calls(), 1);
}

/// An origin that holds every answer until the test releases it, counting requests.
#[derive(Clone)]
struct Gated {
    calls: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Gated {
    fn new() -> Self {
        Self {
            calls: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }

    fn origin(
        &self,
        script: impl Fn(usize) -> Response<Body> + Clone + Send + Sync + 'static,
    ) -> Origin {
        let calls = Arc::clone(&self.calls);
        let gate = Arc::clone(&self.gate);
        BoxCloneSyncService::new(tower::service_fn(move |_req: Request<Body>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let gate = Arc::clone(&gate);
            let script = script.clone();
            async move {
                gate.acquire().await.unwrap().forget();
                Ok::<_, Infallible>(script(n))
            }
        }))
    }
}

/// Lets the current-thread runtime run every task that is ready.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn concurrent_misses_of_one_key_send_one_request_upstream() {
    let origin = Gated::new();
    let svc =
        cache(origin.origin(|_| response(200, &[("cache-control", "max-age=60")], "popular")));
    let clients: Vec<_> = (0..100)
        .map(|_| tokio::spawn(send_owned(svc.clone(), get("/popular"))))
        .collect();
    settle().await;
    assert_eq!(origin.calls.load(Ordering::SeqCst), 1, "the others wait");
    origin.gate.add_permits(1);
    let mut statuses = Vec::new();
    for client in clients {
        let (res, body) = client.await.unwrap();
        assert_eq!(body, "popular");
        statuses.push(status_of(&res).to_owned());
    }
    assert_eq!(origin.calls.load(Ordering::SeqCst), 1);
    assert_eq!(statuses.iter().filter(|s| s.contains("stored")).count(), 1);
    assert_eq!(statuses.iter().filter(|s| *s == "scb; hit").count(), 99);
    assert_eq!(svc.shared.fills.len(), 0, "the fill is over");
}

#[tokio::test]
async fn waiters_go_upstream_themselves_when_the_fill_stores_nothing_and_the_key_then_passes() {
    let origin = Gated::new();
    let svc = cache(origin.origin(|n| {
        if n == 0 {
            // The upstream dies during the collapsed miss.
            response(502, &[], "bad gateway")
        } else {
            response(200, &[("cache-control", "no-store")], "fresh each time")
        }
    }));
    let clients: Vec<_> = (0..5)
        .map(|_| tokio::spawn(send_owned(svc.clone(), get("/flaky"))))
        .collect();
    settle().await;
    assert_eq!(origin.calls.load(Ordering::SeqCst), 1);
    origin.gate.add_permits(100);
    let mut bodies = Vec::new();
    for client in clients {
        bodies.push(client.await.unwrap().1);
    }
    assert_eq!(bodies.iter().filter(|b| **b == "bad gateway").count(), 1);
    assert_eq!(
        bodies.iter().filter(|b| **b == "fresh each time").count(),
        4
    );
    assert_eq!(origin.calls.load(Ordering::SeqCst), 5);
    // Marked to pass: concurrent requests now go upstream at once, none waits.
    let clients: Vec<_> = (0..3)
        .map(|_| tokio::spawn(send_owned(svc.clone(), get("/flaky"))))
        .collect();
    settle().await;
    assert_eq!(origin.calls.load(Ordering::SeqCst), 8);
    for client in clients {
        client.await.unwrap();
    }
}

#[tokio::test]
async fn misses_during_a_revalidation_wait_for_it_and_another_key_does_not() {
    let origin = Gated::new();
    let svc = cache(origin.origin(|n| match n {
        // Stored stale at once, with a validator: every later use revalidates.
        0 => response(
            200,
            &[("cache-control", "max-age=0"), ("etag", "\"v1\"")],
            "v1",
        ),
        // The revalidation: still v1, and fresh for a minute now.
        1 => {
            let mut res = response(
                304,
                &[("cache-control", "max-age=60"), ("etag", "\"v1\"")],
                "",
            );
            res.headers_mut().remove(header::CONTENT_LENGTH);
            res
        }
        _ => response(200, &[("cache-control", "max-age=60")], "other"),
    }));
    origin.gate.add_permits(1);
    let (res, _) = send(&svc, get("/doc")).await;
    assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored");
    let clients: Vec<_> = (0..20)
        .map(|_| tokio::spawn(send_owned(svc.clone(), get("/doc"))))
        .collect();
    settle().await;
    assert_eq!(
        origin.calls.load(Ordering::SeqCst),
        2,
        "one revalidation, the rest wait"
    );
    // A miss of another key in the meantime is not held up by this one's fill.
    let other = tokio::spawn(send_owned(svc.clone(), get("/other")));
    settle().await;
    assert_eq!(origin.calls.load(Ordering::SeqCst), 3);
    origin.gate.add_permits(2);
    let mut statuses = Vec::new();
    for client in clients {
        let (res, body) = client.await.unwrap();
        assert_eq!(body, "v1");
        statuses.push(status_of(&res).to_owned());
    }
    assert_eq!(
        statuses
            .iter()
            .filter(|s| *s == "scb; fwd=stale; fwd-status=304")
            .count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| *s == "scb; hit").count(),
        19,
        "{statuses:?}"
    );
    assert_eq!(other.await.unwrap().1, "other");
    assert_eq!(origin.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_stops_waiting_after_the_collapse_timeout() {
    let origin = Gated::new();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(1 << 20).collapse_timeout(Duration::from_secs(2)))
        .service(origin.origin(|_| response(200, &[("cache-control", "max-age=60")], "slow")));
    let leader = tokio::spawn(send_owned(svc.clone(), get("/slow")));
    settle().await;
    let waiter = tokio::spawn(send_owned(svc.clone(), get("/slow")));
    settle().await;
    assert_eq!(origin.calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(3)).await;
    settle().await;
    assert_eq!(
        origin.calls.load(Ordering::SeqCst),
        2,
        "the waiter went itself"
    );
    origin.gate.add_permits(2);
    leader.await.unwrap();
    waiter.await.unwrap();
}

async fn send_owned(svc: Cache<Origin>, req: Request<Body>) -> (Response<()>, Bytes) {
    send(&svc, req).await
}

#[tokio::test]
async fn stale_while_revalidate_answers_at_once_and_refreshes_in_the_background() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, n| {
        response(
            200,
            &[("cache-control", "max-age=0, stale-while-revalidate=60")],
            format!("v{n}"),
        )
    }));
    assert_eq!(send(&svc, get("/swr")).await.1, "v0");
    let (stale, body) = send(&svc, get("/swr")).await;
    assert_eq!(body, "v0", "the stale body, at once");
    assert_eq!(status_of(&stale), "scb; hit; detail=stale-while-revalidate");
    settle().await;
    assert_eq!(origin.calls(), 2, "refreshed once in the background");
    assert_eq!(send(&svc, get("/swr")).await.1, "v1", "the refreshed body");
    // A client that wants a validated answer does not get a stale one.
    let (validated, body) = send(
        &svc,
        request(Method::GET, "/swr", &[("cache-control", "no-cache")]),
    )
    .await;
    assert!(!status_of(&validated).contains("hit"));
    assert!(body.starts_with(b"v"));
}

#[tokio::test]
async fn stale_if_error_answers_the_stale_response_when_the_upstream_fails() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|_, n| match n {
        0 => response(
            200,
            &[("cache-control", "max-age=0, stale-if-error=60")],
            "good",
        ),
        1 => response(503, &[], "down"),
        _ => response(500, &[], "broken"),
    }));
    send(&svc, get("/sie")).await;
    let (res, body) = send(&svc, get("/sie")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(body, "good");
    assert_eq!(
        status_of(&res),
        "scb; fwd=stale; fwd-status=503; detail=stale-if-error"
    );
    // Several faults in a row: still the stale answer.
    let (res, body) = send(&svc, get("/sie")).await;
    assert_eq!((res.status(), &body[..]), (StatusCode::OK, &b"good"[..]));

    // Without the directive (or the route's default), the error goes to the client.
    let origin = Scripted::new();
    let plain = cache(origin.origin(|_, n| match n {
        0 => response(200, &[("cache-control", "max-age=0")], "good"),
        _ => response(503, &[], "down"),
    }));
    send(&plain, get("/x")).await;
    assert_eq!(
        send(&plain, get("/x")).await.0.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // ... and must-revalidate forbids it whatever the route says.
    let origin = Scripted::new();
    let strict = ServiceBuilder::new()
        .layer(CacheLayer::new(1 << 20).stale_if_error(Duration::from_secs(3600)))
        .service(origin.origin(|_, n| match n {
            0 => response(
                200,
                &[("cache-control", "max-age=0, must-revalidate")],
                "good",
            ),
            _ => response(503, &[], "down"),
        }));
    send(&strict, get("/x")).await;
    assert_eq!(
        send(&strict, get("/x")).await.0.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_hit_answers_the_client_s_preconditions_and_ranges_from_the_stored_response() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, _| {
        assert!(
            !req.headers().contains_key("range") && !req.headers().contains_key("if-none-match"),
            "the cache asks for the whole representation"
        );
        response(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("etag", "\"v1\""),
                ("content-type", "text/plain"),
            ],
            "0123456789",
        )
    }));
    // A conditional miss: the whole response is fetched and stored, the client gets 304.
    let (res, body) = send(
        &svc,
        request(Method::GET, "/r", &[("if-none-match", "\"v1\"")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    settle().await;
    let (res, body) = send(&svc, request(Method::GET, "/r", &[("range", "bytes=2-4")])).await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(res.headers()["content-range"], "bytes 2-4/10");
    assert_eq!(body, "234");
    assert_eq!(status_of(&res), "scb; hit");
    let (res, body) = send(
        &svc,
        request(Method::GET, "/r", &[("range", "bytes=0-0,8-")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        text.contains("Content-Range: bytes 8-9/10\r\n\r\n89"),
        "{text}"
    );
    let (res, _) = send(&svc, request(Method::GET, "/r", &[("range", "bytes=20-")])).await;
    assert_eq!(res.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(res.headers()["content-range"], "bytes */10");
    let (res, body) = send(
        &svc,
        request(
            Method::GET,
            "/r",
            &[("range", "bytes=0-1"), ("if-range", "\"other\"")],
        ),
    )
    .await;
    assert_eq!((res.status(), body.len()), (StatusCode::OK, 10));
    let (res, _) = send(
        &svc,
        request(Method::GET, "/r", &[("if-match", "\"other\"")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::PRECONDITION_FAILED);
    let (res, _) = send(
        &svc,
        request(Method::GET, "/r", &[("if-none-match", "W/\"v1\"")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::NOT_MODIFIED, "weak comparison");
    assert_eq!(origin.calls(), 1);
}

#[tokio::test]
async fn a_304_without_validators_refreshes_the_response_it_was_asked_about() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, n| {
        if n == 0 {
            response(
                200,
                &[
                    ("cache-control", "max-age=0"),
                    ("etag", "\"a\""),
                    ("x-v", "1"),
                ],
                "body",
            )
        } else {
            assert_eq!(req.headers()["if-none-match"], "\"a\"");
            let mut res = response(304, &[("cache-control", "max-age=60"), ("x-v", "2")], "");
            res.headers_mut().remove(header::CONTENT_LENGTH);
            res
        }
    }));
    send(&svc, get("/v")).await;
    let (res, body) = send(
        &svc,
        request(Method::GET, "/v", &[("cache-control", "no-cache")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK, "the client asked for no 304");
    assert_eq!(body, "body");
    assert_eq!(
        res.headers()["x-v"],
        "2",
        "the 304's fields update the stored ones"
    );
    let (res, _) = send(&svc, get("/v")).await;
    assert_eq!(status_of(&res), "scb; hit");
    assert_eq!(origin.calls(), 2);
}

#[tokio::test]
async fn a_head_revalidation_stores_the_get_it_fetched() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, n| {
        assert_eq!(req.method(), Method::GET);
        response(
            200,
            &[
                (
                    "cache-control",
                    if n == 0 { "max-age=0" } else { "max-age=60" },
                ),
                ("etag", &format!("\"{n}\"")),
            ],
            format!("v{n}"),
        )
    }));
    send(&svc, get("/h")).await;
    let (head, body) = send(&svc, request(Method::HEAD, "/h", &[])).await;
    assert!(body.is_empty());
    assert_eq!(head.headers()["content-length"], "2");
    settle().await;
    let (res, body) = send(&svc, get("/h")).await;
    assert_eq!((status_of(&res), &body[..]), ("scb; hit", &b"v1"[..]));
}

#[tokio::test]
async fn a_head_miss_goes_up_as_a_get_and_stores_it_for_both() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, n| {
        assert_eq!(req.method(), Method::GET, "a HEAD goes up as a GET");
        let policy = if req.uri().path() == "/private" {
            "private"
        } else {
            "max-age=60"
        };
        response(200, &[("cache-control", policy)], format!("body {n}"))
    }));
    let (head, body) = send(&svc, request(Method::HEAD, "/h", &[])).await;
    assert_eq!(status_of(&head), "scb; fwd=uri-miss; stored");
    assert!(body.is_empty());
    assert_eq!(head.headers()["content-length"], "6");
    settle().await;
    let (res, body) = send(&svc, get("/h")).await;
    assert_eq!((status_of(&res), &body[..]), ("scb; hit", &b"body 0"[..]));
    let (res, _) = send(&svc, request(Method::HEAD, "/h", &[])).await;
    assert_eq!(status_of(&res), "scb; hit");
    assert_eq!(origin.calls(), 1);
    // Not storable: the GET's head answers the HEAD, with the GET's length (the server
    // leaves the body unsent).
    let res = svc
        .clone()
        .oneshot(request(Method::HEAD, "/private", &[]))
        .await
        .unwrap();
    assert_eq!(res.headers()["cache-status"], "scb; fwd=uri-miss");
    assert_eq!(res.headers()["content-length"], "6");
    assert_eq!(origin.calls(), 2);
}

#[tokio::test]
async fn a_purge_drops_by_path_or_prefix_and_a_fill_it_overtakes_stores_nothing() {
    let origin = Scripted::new();
    let layer = CacheLayer::new(1 << 20);
    let svc = ServiceBuilder::new().layer(layer.clone()).service(
        origin.origin(|_, n| response(200, &[("cache-control", "max-age=60")], format!("v{n}"))),
    );
    for path in ["/img/a", "/img/b", "/doc"] {
        send(&svc, get(path)).await;
    }
    assert_eq!(layer.purge(Some("other.example"), "/img/", true), 0);
    assert_eq!(layer.purge(None, "/img/", true), 2);
    assert_eq!(layer.purge(Some("example.com"), "/doc", false), 1);
    assert_eq!(send(&svc, get("/doc")).await.1, "v3", "fetched again");

    // A purge while a body is on its way: that body is not stored.
    let res = svc.clone().oneshot(get("/late")).await.unwrap();
    assert_eq!(layer.purge(None, "/late", false), 0);
    res.into_body().collect().await.unwrap();
    let (again, _) = send(&svc, get("/late")).await;
    assert_eq!(status_of(&again), "scb; fwd=uri-miss; stored");
}

#[tokio::test]
async fn http_and_https_are_stored_apart_and_an_unsafe_method_drops_both() {
    let origin = Scripted::new();
    let svc = cache(origin.origin(|req, n| {
        let secure = req
            .extensions()
            .get::<scb_core::connection::ConnectInfo>()
            .is_some_and(|c| c.secure);
        if req.method() == Method::POST {
            return response(204, &[], "");
        }
        response(
            200,
            &[("cache-control", "max-age=60")],
            format!("{}{n}", if secure { "https" } else { "http" }),
        )
    }));
    let over = |secure: bool, method: Method| {
        let mut req = request(method, "/page", &[]);
        let addr: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        req.extensions_mut()
            .insert(scb_core::connection::ConnectInfo {
                remote: addr,
                local: addr,
                secure,
            });
        req
    };
    assert_eq!(send(&svc, over(false, Method::GET)).await.1, "http0");
    assert_eq!(send(&svc, over(true, Method::GET)).await.1, "https1");
    assert_eq!(send(&svc, over(false, Method::GET)).await.1, "http0");
    assert_eq!(send(&svc, over(true, Method::GET)).await.1, "https1");
    send(&svc, over(true, Method::POST)).await;
    assert_eq!(send(&svc, over(false, Method::GET)).await.1, "http3");
    assert_eq!(send(&svc, over(true, Method::GET)).await.1, "https4");
}

#[tokio::test]
async fn a_key_template_without_the_query_shares_one_response_between_queries() {
    let origin = Scripted::new();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(1 << 20).key("{host}{path}").unwrap())
        .service(origin.origin(|req, n| {
            let body = format!("{n} {}", req.uri());
            response(200, &[("cache-control", "max-age=60")], body)
        }));
    let (_, first) = send(&svc, get("/a?utm=1")).await;
    let (res, second) = send(&svc, get("/a?utm=2")).await;
    assert_eq!(status_of(&res), "scb; hit");
    assert_eq!(first, second);
    assert_eq!(&first[..], b"0 /a?utm=1");
    // Another path is another key.
    let (res, _) = send(&svc, get("/b?utm=1")).await;
    assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored");
    // A purge names the URL a response was fetched for.
    assert_eq!(svc.shared.store.purge(None, "/a?utm=1", false), 1);
    let (res, _) = send(&svc, get("/a?utm=2")).await;
    assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored");
    // An unsafe method drops what its URL's key holds, whatever its query.
    let post = request(Method::POST, "/a?other", &[]);
    send(&svc, post).await;
    let (res, _) = send(&svc, get("/a")).await;
    assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored");
    assert_eq!(origin.calls(), 5);
}

#[tokio::test]
async fn the_default_key_keeps_queries_and_hosts_apart() {
    let origin = Scripted::new();
    let svc = cache(
        origin.origin(|_, n| response(200, &[("cache-control", "max-age=60")], n.to_string())),
    );
    send(&svc, get("/a?x=1")).await;
    let (res, _) = send(&svc, get("/a?x=2")).await;
    assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored");
    let other_host = Request::get("/a?x=1")
        .header("host", "other.example")
        .body(Body::empty())
        .unwrap();
    let (res, _) = send(&svc, other_host).await;
    assert_eq!(status_of(&res), "scb; fwd=uri-miss; stored");
    assert_eq!(origin.calls(), 3);
}

#[test]
fn a_bad_key_template_is_refused() {
    assert!(matches!(
        CacheLayer::new(1 << 20).key("{host}"),
        Err(KeyTemplateError::NoPath { .. })
    ));
    assert!(matches!(
        CacheLayer::new(1 << 20).key("{path}{cookie}"),
        Err(KeyTemplateError::Placeholder { .. })
    ));
}

#[test]
fn a_reload_keeps_the_store_only_for_the_same_bounds_and_key() {
    let before = CacheLayer::new(1 << 20);
    let same = CacheLayer::new(1 << 20).keep_store_of(&before);
    assert!(Arc::ptr_eq(&same.shared, &before.shared));
    let keyed = CacheLayer::new(1 << 20)
        .key("{path}")
        .unwrap()
        .keep_store_of(&before);
    assert!(!Arc::ptr_eq(&keyed.shared, &before.shared));
    let smaller_objects = CacheLayer::new(1 << 20)
        .max_object(1 << 10)
        .keep_store_of(&before);
    assert!(!Arc::ptr_eq(&smaller_objects.shared, &before.shared));
}

#[tokio::test]
async fn a_large_hit_is_a_file_region_for_sendfile_and_its_ranges_are_its_bytes() {
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let origin = Scripted::new();
    let body = big.clone();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(16 << 20))
        .service(origin.origin(move |_, _| {
            response(
                200,
                &[("cache-control", "max-age=60"), ("etag", "\"v1\"")],
                body.clone(),
            )
        }));
    let (_, first) = send(&svc, get("/big")).await;
    assert_eq!(first, big);
    let res = svc.clone().oneshot(get("/big")).await.unwrap();
    assert_eq!(res.headers()["cache-status"], "scb; hit");
    assert_eq!(res.headers()["content-length"], "200000");
    let region = res
        .body()
        .file_region()
        .expect("a hit a server can sendfile");
    assert_eq!((region.offset(), region.len()), (0, 200_000));
    let sent = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(sent, big);

    let ranged = request(Method::GET, "/big", &[("range", "bytes=100000-100009")]);
    let res = svc.clone().oneshot(ranged).await.unwrap();
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(res.headers()["content-range"], "bytes 100000-100009/200000");
    assert_eq!(res.body().file_region().map(|r| r.offset()), Some(100_000));
    let part = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(part, big[100_000..100_010]);

    let two = request(Method::GET, "/big", &[("range", "bytes=0-1,199998-")]);
    let (res, body) = send(&svc, two).await;
    assert_eq!(res.status(), StatusCode::PARTIAL_CONTENT);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("Content-Range: bytes 0-1/200000"), "{text}");
    assert!(
        text.contains("Content-Range: bytes 199998-199999/200000"),
        "{text}"
    );
    let needle = [big[199_998], big[199_999]];
    assert!(body.windows(2).any(|w| w == needle));

    let head = request(Method::HEAD, "/big", &[]);
    let res = svc.clone().oneshot(head).await.unwrap();
    assert_eq!(res.headers()["content-length"], "200000");
    assert!(
        res.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .is_empty()
    );
    assert_eq!(origin.calls(), 1);
}
