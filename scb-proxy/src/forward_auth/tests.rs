//! [`ForwardAuthLayer`] in front of a recording inner service, against an auth service
//! written here on hyper's server that records each subrequest and answers as each test
//! says.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use scb_core::Body;
use scb_core::connection::ConnectInfo;
use scb_core::request_id::Id;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::{Layer as _, Service, ServiceBuilder, ServiceExt as _, service_fn};

use super::*;
use crate::{BuildError, ClientIp, TrustedProxies, Upstream};

/// Longest wait for anything a test waits on, far above every timeout the tests set:
/// past it the test fails instead of hanging.
const WAIT: Duration = Duration::from_secs(10);

type AuthBody = BoxBody<Bytes, Infallible>;

/// How the auth service answers a subrequest; `None`: never.
type Answer = Arc<dyn Fn(&http::request::Parts) -> Option<Response<AuthBody>> + Send + Sync>;

/// A subrequest as the auth service read it.
#[derive(Debug)]
struct Subrequest {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

/// What the auth service saw.
#[derive(Default)]
struct AuthSeen {
    connections: AtomicUsize,
    requests: Mutex<Vec<Subrequest>>,
}

/// The auth service: hyper's HTTP/1.1 server, keep-alive on.
struct AuthServer {
    addr: SocketAddr,
    seen: Arc<AuthSeen>,
    task: JoinHandle<()>,
}

impl AuthServer {
    async fn start(
        answer: impl Fn(&http::request::Parts) -> Option<Response<AuthBody>> + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::on(listener, Arc::new(answer))
    }

    fn on(listener: TcpListener, answer: Answer) -> Self {
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AuthSeen::default());
        let task = tokio::spawn(accept(listener, answer, Arc::clone(&seen)));
        Self { addr, seen, task }
    }

    fn upstream(&self) -> Upstream {
        Upstream::new(&self.addr.to_string()).unwrap()
    }

    fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::SeqCst)
    }

    /// The subrequests so far, taken.
    fn take(&self) -> Vec<Subrequest> {
        std::mem::take(&mut *self.seen.requests.lock().unwrap())
    }

    /// The one subrequest so far.
    fn only(&self) -> Subrequest {
        let mut all = self.take();
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, answer: Answer, seen: Arc<AuthSeen>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        seen.connections.fetch_add(1, Ordering::SeqCst);
        let (answer, seen) = (Arc::clone(&answer), Arc::clone(&seen));
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let (answer, seen) = (Arc::clone(&answer), Arc::clone(&seen));
            async move {
                let (parts, body) = req.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                let res = answer(&parts);
                seen.requests.lock().unwrap().push(Subrequest {
                    method: parts.method,
                    uri: parts.uri,
                    headers: parts.headers,
                    body,
                });
                match res {
                    Some(res) => Ok::<_, Infallible>(res),
                    None => std::future::pending().await,
                }
            }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// An answer with `fields` and `body` (with its `Content-Length`).
fn answer(status: u16, fields: &[(&str, &str)], body: &'static str) -> Response<AuthBody> {
    let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *res.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in fields {
        res.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    res
}

/// An answer whose body has no length: hyper sends it chunked, after the head.
fn chunked(status: u16, pieces: &'static [&'static str]) -> Response<AuthBody> {
    let frames = pieces
        .iter()
        .map(|p| Ok::<_, Infallible>(Frame::data(Bytes::from_static(p.as_bytes()))));
    let mut res = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
    *res.status_mut() = StatusCode::from_u16(status).unwrap();
    res
}

/// A request as the inner service got it.
#[derive(Debug)]
struct Reached {
    method: Method,
    headers: HeaderMap,
    body: Bytes,
}

/// The inner service: records each request (its body read whole) and answers 200 `inner`.
#[derive(Clone, Default)]
struct Inner(Arc<Mutex<Vec<Reached>>>);

impl Inner {
    fn service(
        &self,
    ) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + use<> {
        let seen = Arc::clone(&self.0);
        service_fn(move |req: Request<Body>| {
            let seen = Arc::clone(&seen);
            async move {
                let (parts, body) = req.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                seen.lock().unwrap().push(Reached {
                    method: parts.method,
                    headers: parts.headers,
                    body,
                });
                Ok(Response::new(Body::from("inner")))
            }
        })
    }

    fn calls(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn only(&self) -> Reached {
        let mut all = std::mem::take(&mut *self.0.lock().unwrap());
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }
}

fn names(list: &[&'static str]) -> Vec<HeaderName> {
    list.iter().map(|n| HeaderName::from_static(n)).collect()
}

fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// The layer for `auth` at `/api/verify`, copying `Remote-User` and `Remote-Groups`.
fn layer(auth: &AuthServer) -> ForwardAuthLayer {
    ForwardAuthLayer::builder([auth.upstream()], "/api/verify")
        .copy_headers(names(&["remote-user", "remote-groups"]))
        .build()
        .unwrap()
}

async fn send<S>(svc: S, req: Request<Body>) -> (StatusCode, HeaderMap, Bytes)
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let res = tokio::time::timeout(WAIT, svc.oneshot(req))
        .await
        .expect("an answer in time")
        .unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

fn get(uri: &str) -> http::request::Builder {
    Request::get(uri).header(header::HOST, "app.example.com")
}

#[tokio::test]
async fn a_2xx_answer_lets_the_request_through_with_the_copied_fields_only() {
    let auth = AuthServer::start(|_| {
        Some(answer(
            200,
            &[
                ("remote-user", "alice"),
                ("remote-groups", "admins"),
                ("remote-groups", "dev"),
                ("x-other", "not copied"),
                ("set-cookie", "session=refreshed"),
            ],
            "OK",
        ))
    })
    .await;
    let inner = Inner::default();
    let svc = ServiceBuilder::new()
        .layer(layer(&auth))
        .service(inner.service());
    let req = get("/app")
        .header("remote-user", "root")
        .header("Remote-Groups", "wheel")
        .header(header::COOKIE, "session=abc")
        .body(Body::empty())
        .unwrap();
    let (status, headers, body) = send(svc, req).await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "inner");
    // The answer's other fields reach neither the client nor the inner service.
    assert!(!headers.contains_key(header::SET_COOKIE));
    let reached = inner.only();
    assert_eq!(values(&reached.headers, "remote-user"), ["alice"]);
    assert_eq!(values(&reached.headers, "remote-groups"), ["admins", "dev"]);
    assert!(!reached.headers.contains_key("x-other"));
    assert!(!reached.headers.contains_key(header::SET_COOKIE));
    assert_eq!(values(&reached.headers, "cookie"), ["session=abc"]);
    // The subrequest's own fields stay on the subrequest.
    assert!(!reached.headers.contains_key("x-forwarded-uri"));
    // The client's copies never reached the auth service either.
    let sub = auth.only();
    assert!(!sub.headers.contains_key("remote-user"), "{sub:?}");
    assert!(!sub.headers.contains_key("remote-groups"), "{sub:?}");
}

#[tokio::test]
async fn a_pass_without_a_copied_field_leaves_the_client_copy_removed() {
    let auth = AuthServer::start(|_| Some(answer(204, &[("remote-user", "alice")], ""))).await;
    let inner = Inner::default();
    let svc = layer(&auth).layer(inner.service());
    let req = get("/")
        .header("remote-groups", "admins")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(svc, req).await.0, StatusCode::OK);
    let reached = inner.only();
    assert_eq!(values(&reached.headers, "remote-user"), ["alice"]);
    assert!(!reached.headers.contains_key("remote-groups"));
}

#[tokio::test]
async fn a_401_goes_back_as_it_came_and_the_inner_service_is_never_called() {
    let auth = AuthServer::start(|_| {
        Some(answer(
            401,
            &[
                ("www-authenticate", "Basic realm=\"example\""),
                ("set-cookie", "tried=1"),
                ("content-type", "text/plain"),
            ],
            "who are you?\n",
        ))
    })
    .await;
    let inner = Inner::default();
    let svc = layer(&auth).layer(inner.service());
    let req = get("/private")
        .header("remote-user", "root")
        .body(Body::empty())
        .unwrap();
    let (status, headers, body) = send(svc, req).await;

    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        values(&headers, "www-authenticate"),
        ["Basic realm=\"example\""]
    );
    assert_eq!(values(&headers, "set-cookie"), ["tried=1"]);
    assert_eq!(values(&headers, "content-type"), ["text/plain"]);
    assert_eq!(body, "who are you?\n");
    assert_eq!(inner.calls(), 0);
    // Removed before the check, though the check failed.
    assert!(!auth.only().headers.contains_key("remote-user"));
}

#[tokio::test]
async fn a_302_to_the_login_page_goes_back_with_its_location() {
    let auth = AuthServer::start(|_| {
        Some(answer(
            302,
            &[
                (
                    "location",
                    "https://auth.example.com/?rd=https%3A%2F%2Fapp.example.com%2F",
                ),
                ("set-cookie", "rd=1; Secure"),
            ],
            "",
        ))
    })
    .await;
    let inner = Inner::default();
    let svc = layer(&auth).layer(inner.service());
    let (status, headers, body) = send(svc, get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(
        values(&headers, "location"),
        ["https://auth.example.com/?rd=https%3A%2F%2Fapp.example.com%2F"]
    );
    assert_eq!(values(&headers, "set-cookie"), ["rd=1; Secure"]);
    assert!(body.is_empty());
    assert_eq!(inner.calls(), 0);
}

#[tokio::test]
async fn only_a_2xx_status_is_a_pass() {
    for (code, passes) in [
        (200, true),
        (202, true),
        (204, true),
        (301, false),
        (303, false),
        (304, false),
        (307, false),
        (400, false),
        (403, false),
        (404, false),
        (500, false),
        (503, false),
    ] {
        let auth = AuthServer::start(move |_| Some(answer(code, &[], ""))).await;
        let inner = Inner::default();
        let svc = layer(&auth).layer(inner.service());
        let (status, _, _) = send(svc, get("/").body(Body::empty()).unwrap()).await;
        if passes {
            assert_eq!(status, StatusCode::OK, "{code}");
            assert_eq!(inner.calls(), 1, "{code}");
        } else {
            assert_eq!(status.as_u16(), code);
            assert_eq!(inner.calls(), 0, "{code}");
        }
    }
}

#[tokio::test]
async fn the_subrequest_is_a_bodiless_get_to_the_uri_saying_what_the_request_was() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let layer = ForwardAuthLayer::builder(
        [auth.upstream()],
        "/api/verify?rd=https%3A%2F%2Fauth.example.com",
    )
    .build()
    .unwrap();
    let inner = Inner::default();
    let svc = layer.layer(inner.service());
    let mut req = Request::post("/app/items?page=2&sort=name")
        .header(header::HOST, "app.example.com")
        .header(header::COOKIE, "authelia_session=s3cret")
        .header(header::AUTHORIZATION, "Bearer t0ken")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::CONTENT_LENGTH, "9")
        // A client's claims about the request are replaced, not passed on.
        .header("x-forwarded-method", "GET")
        .header("x-forwarded-uri", "/public")
        .header("x-forwarded-for", "10.9.9.9")
        .header("x-forwarded-proto", "http")
        .header("x-forwarded-host", "public.example.com")
        .body(Body::from("name=test"))
        .unwrap();
    req.extensions_mut().insert(ConnectInfo {
        remote: "192.0.2.7:50000".parse().unwrap(),
        local: "127.0.0.1:443".parse().unwrap(),
        secure: true,
    });
    let (status, _, _) = send(svc, req).await;
    assert_eq!(status, StatusCode::OK);

    let sub = auth.only();
    assert_eq!(sub.method, Method::GET);
    assert_eq!(sub.uri, "/api/verify?rd=https%3A%2F%2Fauth.example.com");
    let h = &sub.headers;
    assert_eq!(values(h, "cookie"), ["authelia_session=s3cret"]);
    assert_eq!(values(h, "authorization"), ["Bearer t0ken"]);
    assert_eq!(values(h, "host"), ["app.example.com"]);
    assert_eq!(values(h, "x-forwarded-method"), ["POST"]);
    assert_eq!(
        values(h, "x-forwarded-uri"),
        ["/app/items?page=2&sort=name"]
    );
    assert_eq!(values(h, "x-forwarded-proto"), ["https"]);
    assert_eq!(values(h, "x-forwarded-host"), ["app.example.com"]);
    assert_eq!(values(h, "x-forwarded-for"), ["192.0.2.7"]);
    assert!(!h.contains_key(header::CONTENT_LENGTH), "{h:?}");
    assert!(!h.contains_key(header::TRANSFER_ENCODING), "{h:?}");
    assert!(sub.body.is_empty());

    // The inner service gets the request as it was, body and all.
    let reached = inner.only();
    assert_eq!(reached.method, Method::POST);
    assert_eq!(reached.body, "name=test");
    assert_eq!(values(&reached.headers, "content-length"), ["9"]);
}

#[tokio::test]
async fn a_rewritten_request_is_checked_for_the_uri_the_client_sent() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let layer = ForwardAuthLayer::builder([auth.upstream()], "/verify")
        .build()
        .unwrap();
    let inner = Inner::default();
    let svc = layer.layer(inner.service());
    let mut req = Request::get("/index.php?page=2")
        .header(header::HOST, "app.example.com")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(scb_core::original_uri::OriginalUri(
            "/admin/users?page=2".parse().unwrap(),
        ));
    let (status, _, _) = send(svc, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        values(&auth.only().headers, "x-forwarded-uri"),
        ["/admin/users?page=2"]
    );
}

#[tokio::test]
async fn a_trusted_proxys_forwarded_fields_reach_the_auth_service() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let layer = ForwardAuthLayer::builder([auth.upstream()], "/api/verify")
        .trusted_proxies(TrustedProxies::new(["192.0.2.0/24"]).unwrap())
        .build()
        .unwrap();
    let svc = layer.layer(Inner::default().service());
    let mut req = Request::delete("/admin/users/7")
        .header(header::HOST, "app.internal:8080")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "app.example.com")
        // Not even a trusted proxy says what this request is: scb does.
        .header("x-forwarded-uri", "/public")
        .header("x-forwarded-method", "GET")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut().insert(ConnectInfo {
        remote: "192.0.2.7:50000".parse().unwrap(),
        local: "127.0.0.1:80".parse().unwrap(),
        secure: false,
    });
    assert_eq!(send(svc, req).await.0, StatusCode::OK);
    let h = auth.only().headers;
    assert_eq!(values(&h, "x-forwarded-for"), ["203.0.113.9, 192.0.2.7"]);
    assert_eq!(values(&h, "x-forwarded-proto"), ["https"]);
    assert_eq!(values(&h, "x-forwarded-host"), ["app.example.com"]);
    assert_eq!(values(&h, "x-forwarded-uri"), ["/admin/users/7"]);
    assert_eq!(values(&h, "x-forwarded-method"), ["DELETE"]);

    // The same fields from a client outside the trusted networks are replaced.
    let layer = ForwardAuthLayer::builder([auth.upstream()], "/api/verify")
        .trusted_proxies(TrustedProxies::new(["192.0.2.0/24"]).unwrap())
        .build()
        .unwrap();
    let svc = layer.layer(Inner::default().service());
    let mut req = get("/admin")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "other.example.com")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut().insert(ConnectInfo {
        remote: "198.51.100.1:50000".parse().unwrap(),
        local: "127.0.0.1:80".parse().unwrap(),
        secure: false,
    });
    assert_eq!(send(svc, req).await.0, StatusCode::OK);
    let h = auth.only().headers;
    assert_eq!(values(&h, "x-forwarded-for"), ["198.51.100.1"]);
    assert_eq!(values(&h, "x-forwarded-proto"), ["http"]);
    assert_eq!(values(&h, "x-forwarded-host"), ["app.example.com"]);
}

#[tokio::test]
async fn without_preserve_host_the_client_host_is_still_in_x_forwarded_host() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let layer = ForwardAuthLayer::builder([auth.upstream()], "/api/verify")
        .preserve_host(false)
        .build()
        .unwrap();
    let svc = layer.layer(Inner::default().service());
    assert_eq!(
        send(svc, get("/").body(Body::empty()).unwrap()).await.0,
        StatusCode::OK
    );
    let h = auth.only().headers;
    assert_eq!(values(&h, "host"), [auth.addr.to_string()]);
    assert_eq!(values(&h, "x-forwarded-host"), ["app.example.com"]);
}

#[tokio::test]
async fn an_http2_requests_authority_is_the_host_the_auth_service_is_told() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let svc = layer(&auth).layer(Inner::default().service());
    // As scb's server hands over an HTTP/2 request: the host in the target, no `Host`;
    // and the client's address as a server other than scb's gives it.
    let mut req = Request::get("https://app.example.com/docs/?q=1")
        .version(Version::HTTP_2)
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(ClientIp("2001:db8::7".parse().unwrap()));
    assert_eq!(send(svc, req).await.0, StatusCode::OK);
    let sub = auth.only();
    assert_eq!(sub.uri, "/api/verify");
    let h = &sub.headers;
    assert_eq!(values(h, "host"), ["app.example.com"]);
    assert_eq!(values(h, "x-forwarded-host"), ["app.example.com"]);
    assert_eq!(values(h, "x-forwarded-uri"), ["/docs/?q=1"]);
    assert_eq!(values(h, "x-forwarded-for"), ["2001:db8::7"]);
}

#[tokio::test]
async fn hop_by_hop_and_framing_fields_stay_off_the_subrequest_only() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let inner = Inner::default();
    let svc = layer(&auth).layer(inner.service());
    let hop = [
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("upgrade", "websocket"),
        ("expect", "100-continue"),
        ("transfer-encoding", "chunked"),
    ];
    let mut req = get("/ws").header("x-end-to-end", "kept");
    for (name, value) in hop {
        req = req.header(name, value);
    }
    assert_eq!(
        send(svc, req.body(Body::empty()).unwrap()).await.0,
        StatusCode::OK
    );
    let sub = auth.only();
    for (name, _) in hop {
        assert!(!sub.headers.contains_key(name), "{name}: {sub:?}");
    }
    assert_eq!(values(&sub.headers, "x-end-to-end"), ["kept"]);
    // The request itself is the inner service's to deal with, fields and all.
    let reached = inner.only();
    for (name, value) in hop {
        assert_eq!(values(&reached.headers, name), [value], "{name}");
    }
}

/// A request body that records whether it was ever polled.
struct Untouched {
    data: Option<Bytes>,
    polled: Arc<AtomicUsize>,
}

impl http_body::Body for Untouched {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.polled.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }
}

#[tokio::test]
async fn the_request_body_reaches_the_inner_service_unread_and_whole() {
    let auth = AuthServer::start(|_| Some(answer(200, &[("remote-user", "alice")], ""))).await;
    let data: Bytes = (0..200_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<_>>()
        .into();
    let polled = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(Mutex::new(None));
    let inner = {
        let (polled, got) = (Arc::clone(&polled), Arc::clone(&got));
        // The inner service takes the original's own body type: nothing wrapped it.
        service_fn(move |req: Request<Untouched>| {
            let (polled, got) = (Arc::clone(&polled), Arc::clone(&got));
            async move {
                let before = polled.load(Ordering::SeqCst);
                let user = req.headers()["remote-user"].clone();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                *got.lock().unwrap() = Some((before, user, body));
                Ok::<_, Infallible>(Response::new(Body::empty()))
            }
        })
    };
    let svc = layer(&auth).layer(inner);
    let req = Request::post("/upload")
        .header(header::HOST, "app.example.com")
        .header(header::CONTENT_LENGTH, data.len())
        .body(Untouched {
            data: Some(data.clone()),
            polled: Arc::clone(&polled),
        })
        .unwrap();
    let res = tokio::time::timeout(WAIT, svc.oneshot(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let (before, user, body) = got.lock().unwrap().take().unwrap();
    assert_eq!(
        before, 0,
        "the body was polled before the inner service had it"
    );
    assert_eq!(user, "alice");
    assert_eq!(body, data);
    let sub = auth.only();
    assert!(sub.body.is_empty());
    assert!(!sub.headers.contains_key(header::CONTENT_LENGTH));
}

/// An inner service that must be readied before each call, as tower's contract says: a
/// clone starts unready, as a clone of tower's `Buffer` or `ConcurrencyLimit` holds no
/// slot of its own.
struct Readied {
    ready: bool,
    calls: Arc<AtomicUsize>,
}

impl Clone for Readied {
    fn clone(&self) -> Self {
        Self {
            ready: false,
            calls: Arc::clone(&self.calls),
        }
    }
}

impl Service<Request<Body>> for Readied {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        assert!(self.ready, "called without poll_ready");
        self.ready = false;
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(Response::new(Body::empty())))
    }
}

#[tokio::test]
async fn the_inner_service_called_is_the_one_poll_ready_readied() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], ""))).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = layer(&auth).layer(Readied {
        ready: false,
        calls: Arc::clone(&calls),
    });
    for _ in 0..3 {
        let future = svc
            .ready()
            .await
            .unwrap()
            .call(get("/").body(Body::empty()).unwrap());
        let res = tokio::time::timeout(WAIT, future).await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// Collects formatted log lines, for a test that checks what was logged.
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
        // Interest is cached per callsite, process-wide: a callsite another test thread
        // hit with no subscriber may be cached as "never".
        tracing::callsite::rebuild_interest_cache();
        guard
    }

    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// A loopback port nothing listens on: bound (so that nothing else takes it) and not
/// listening, so connecting is refused; [`listen`] opens it later.
fn refusing_port() -> socket2::Socket {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    socket.bind(&any.into()).unwrap();
    socket
}

fn listen(socket: socket2::Socket) -> TcpListener {
    socket.listen(128).unwrap();
    socket.set_nonblocking(true).unwrap();
    TcpListener::from_std(socket.into()).unwrap()
}

fn addr_of(socket: &socket2::Socket) -> SocketAddr {
    socket.local_addr().unwrap().as_socket().unwrap()
}

#[tokio::test]
async fn an_unreachable_auth_service_is_502_logged_with_the_request_id() {
    let port = refusing_port();
    let layer = ForwardAuthLayer::builder(
        [Upstream::new(&addr_of(&port).to_string()).unwrap()],
        "/api/verify",
    )
    .copy_headers(names(&["remote-user"]))
    .build()
    .unwrap();
    let inner = Inner::default();
    let svc = layer.layer(inner.service());
    let logs = Logs::default();
    let _guard = logs.capture();
    let mut req = get("/")
        .header("remote-user", "root")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(Id::new(HeaderValue::from_static("req-4242")).unwrap());
    let (status, _, _) = send(svc, req).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(inner.calls(), 0);
    let text = logs.text();
    let line = text
        .lines()
        .find(|l| l.contains("auth service unreachable"))
        .unwrap_or_else(|| panic!("no warning in {text:?}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("req-4242"), "{line}");
}

#[tokio::test]
async fn an_auth_service_that_does_not_answer_in_time_is_504() {
    // It reads the subrequest, and never answers.
    let auth = AuthServer::start(|_| None).await;
    let layer = ForwardAuthLayer::builder([auth.upstream()], "/api/verify")
        .response_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let inner = Inner::default();
    let svc = layer.layer(inner.service());
    let (status, _, _) = send(svc, get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(inner.calls(), 0);
    // A timeout waiting for the answer, not for a connection: the question was read.
    assert_eq!(auth.take().len(), 1);
}

#[tokio::test]
async fn requests_pass_again_once_the_auth_service_is_back() {
    let port = refusing_port();
    let addr = addr_of(&port);
    let layer =
        ForwardAuthLayer::builder([Upstream::new(&addr.to_string()).unwrap()], "/api/verify")
            .copy_headers(names(&["remote-user"]))
            .build()
            .unwrap();
    let inner = Inner::default();
    let svc = layer.layer(inner.service());
    // Enough failures to mark the only upstream down (passive health's default is 3).
    for _ in 0..4 {
        let (status, _, _) = send(svc.clone(), get("/").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
    }
    assert_eq!(inner.calls(), 0);

    let auth = AuthServer::on(
        listen(port),
        Arc::new(|_: &http::request::Parts| Some(answer(200, &[("remote-user", "alice")], ""))),
    );
    for _ in 0..2 {
        let (status, _, body) = send(svc.clone(), get("/").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "inner");
    }
    assert_eq!(inner.calls(), 2);
    assert_eq!(auth.take().len(), 2);
    assert_eq!(auth.connections(), 1);
}

#[tokio::test]
async fn checks_in_a_row_share_one_pooled_connection() {
    // Passes with a sized body and with a chunked one (read to its end so that the
    // connection is kept), and refusals whose body the client reads.
    let auth = AuthServer::start(|parts| {
        Some(match parts.headers["x-forwarded-uri"].as_bytes() {
            b"/sized" => answer(200, &[("remote-user", "alice")], "OK"),
            b"/chunked" => chunked(200, &["Author", "ized"]),
            _ => answer(401, &[("www-authenticate", "Bearer")], "no\n"),
        })
    })
    .await;
    let inner = Inner::default();
    let svc = layer(&auth).layer(inner.service());
    let paths = ["/sized", "/chunked", "/denied"];
    for i in 0..30 {
        let path = paths[i % 3];
        let (status, _, _) = send(svc.clone(), get(path).body(Body::empty()).unwrap()).await;
        let expected = if path == "/denied" {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::OK
        };
        assert_eq!(status, expected, "{path}");
    }
    assert_eq!(inner.calls(), 20);
    assert_eq!(auth.take().len(), 30);
    assert_eq!(auth.connections(), 1);
}

#[tokio::test]
async fn each_own_pool_has_its_own_connections_and_clones_share_theirs() {
    let auth = AuthServer::start(|_| Some(answer(200, &[], "OK"))).await;
    let shared = layer(&auth);
    let workers = [shared.with_own_pool(), shared.with_own_pool()];
    for worker in &workers {
        for _ in 0..2 {
            let svc = worker.clone().layer(Inner::default().service());
            assert_eq!(
                send(svc, get("/").body(Body::empty()).unwrap()).await.0,
                StatusCode::OK
            );
        }
    }
    // One connection per worker's pool, reused by its second request and by clones.
    assert_eq!(auth.connections(), 2);
    assert_eq!(auth.take().len(), 4);
}

#[test]
fn the_uri_must_be_a_path() {
    let up = || Upstream::new("127.0.0.1:9091").unwrap();
    for bad in [
        "",
        "api/verify",
        "http://auth/api/verify",
        "/api/verify#x",
        "*",
    ] {
        let e = ForwardAuthLayer::builder([up()], bad).build().unwrap_err();
        assert!(
            matches!(&e, BuildError::AuthUri(uri) if uri == bad),
            "{bad}: {e}"
        );
    }
    let layer = ForwardAuthLayer::builder([up()], "/api/verify?rd=x")
        .copy_headers(names(&["remote-user"]))
        .build()
        .unwrap();
    assert_eq!(layer.uri(), "/api/verify?rd=x");
    assert_eq!(layer.copied_headers(), ["remote-user"]);
    let proxy = crate::ReverseProxy::builder([up()]).build().unwrap();
    assert!(matches!(
        ForwardAuthLayer::new(proxy.clone(), "verify"),
        Err(BuildError::AuthUri(_))
    ));
    assert_eq!(ForwardAuth::<()>::layer(proxy, "/").unwrap().uri(), "/");
}

#[test]
fn service_and_future_are_send_when_their_parts_are() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    type Inner = scb_core::respond::Respond;
    send_sync::<ForwardAuthLayer>();
    send_sync::<ForwardAuth<Inner>>();
    send::<ResponseFuture<Inner, Body>>();
}
