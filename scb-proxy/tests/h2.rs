//! The proxy to HTTP/2 upstreams (`UpstreamProtocol::H2c`) against a real hyper HTTP/2
//! server on loopback, driven straight through the tower service: multiplexing, trailers
//! both ways, gRPC-shaped errors, resets, and an upstream that goes away and comes back.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use scb_core::Body;
use scb_proxy::{BuildError, ReverseProxy, Upstream, UpstreamProtocol};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::ServiceExt as _;

/// An HTTP/2 (prior knowledge) upstream: echoes the request body, and answers with a
/// `x-sum` trailer (the body's length) and, when the request had trailers, `x-got` naming
/// their value. `/reset` resets the stream instead of answering.
struct H2Upstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl H2Upstream {
    async fn spawn() -> Self {
        Self::on(TcpListener::bind("127.0.0.1:0").await.unwrap())
    }

    fn on(listener: TcpListener) -> Self {
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                conns.spawn(
                    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer)),
                );
            }
        });
        Self {
            addr,
            connections,
            task,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for H2Upstream {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection.
        self.task.abort();
    }
}

type Answer =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

async fn answer(req: Request<Incoming>) -> Result<Response<Answer>, std::io::Error> {
    if req.uri().path() == "/reset" {
        return Err(std::io::Error::other("reset on purpose"));
    }
    let authority = req.uri().authority().map(ToString::to_string);
    let te = req.headers().get("te").cloned();
    let traceparent = req.headers().get("traceparent").cloned();
    let collected = req
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?;
    let got = collected
        .trailers()
        .and_then(|t| t.get("x-client-trailer"))
        .cloned();
    let body = collected.to_bytes();
    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", HeaderValue::from(body.len()));
    if let Some(got) = got {
        trailers.insert("x-got", got);
    }
    let frames = vec![Ok(Frame::data(body)), Ok(Frame::trailers(trailers))];
    let mut res = Response::new(StreamBody::new(futures_util::stream::iter(frames)));
    if let Some(authority) = authority.and_then(|a| HeaderValue::try_from(a).ok()) {
        res.headers_mut().insert("x-authority", authority);
    }
    if let Some(te) = te {
        res.headers_mut().insert("x-te", te);
    }
    if let Some(traceparent) = traceparent {
        res.headers_mut().insert("x-traceparent", traceparent);
    }
    Ok(res)
}

fn h2c_proxy(addr: SocketAddr) -> ReverseProxy {
    ReverseProxy::builder([Upstream::new(&addr.to_string()).unwrap()])
        .protocol(UpstreamProtocol::H2c)
        .build()
        .unwrap()
}

fn post(path: &str, body: &'static str) -> Request<Body> {
    Request::post(path)
        .header("host", "site.example")
        .body(Body::from(body))
        .unwrap()
}

fn grpc(path: &str) -> Request<Body> {
    Request::post(path)
        .header("host", "site.example")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Body::empty())
        .unwrap()
}

/// The response's body and trailers.
async fn read(res: Response<Body>) -> (Bytes, Option<HeaderMap>) {
    let collected = res.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

#[tokio::test]
async fn concurrent_requests_share_one_connection_and_keep_their_trailers() {
    let up = H2Upstream::spawn().await;
    let proxy = h2c_proxy(up.addr);
    let mut requests = tokio::task::JoinSet::new();
    for i in 0..32 {
        let proxy = proxy.clone();
        requests.spawn(async move {
            let body: &'static str = if i % 2 == 0 { "even" } else { "odd!!" };
            let res = proxy.oneshot(post("/echo", body)).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            // The client's Host reached the upstream as `:authority`.
            assert_eq!(res.headers()["x-authority"], "site.example");
            let (bytes, trailers) = read(res).await;
            assert_eq!(bytes, body.as_bytes());
            assert_eq!(
                trailers.expect("trailers passed down")["x-sum"],
                body.len().to_string().as_str()
            );
        });
    }
    while let Some(done) = requests.join_next().await {
        done.unwrap();
    }
    assert_eq!(up.connections(), 1, "one multiplexed connection per worker");
}

#[tokio::test]
async fn the_access_log_gets_the_h2_upstream_s_status_and_time() {
    let up = H2Upstream::spawn().await;
    let path = std::env::temp_dir().join(format!(
        "scb-proxy-h2-log-{}-{}.log",
        std::process::id(),
        fastrand::u64(..)
    ));
    let template = scb_core::access_log::AccessLogTemplate::parse(
        "{upstream} {upstream_status} {upstream_time_ms}",
    )
    .unwrap();
    let writer = scb_core::access_log::AccessLogWriter::file(&path, template.into()).unwrap();
    let res = tower::ServiceBuilder::new()
        .layer(scb_core::access_log::AccessLogLayer::new().writer(writer.clone()))
        .service(h2c_proxy(up.addr))
        .oneshot(post("/x", "hello"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(writer.close(Duration::from_secs(10)));
    let line = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let fields: Vec<&str> = line.trim_end().split(' ').collect();
    assert_eq!(fields[..2], [up.addr.to_string().as_str(), "200"], "{line}");
    let ms: f64 = fields[2].parse().unwrap();
    assert!((0.0..10_000.0).contains(&ms), "{line}");
}

#[tokio::test]
async fn an_h2_upstream_is_told_the_exchange_span_and_the_span_notes_it() {
    let up = H2Upstream::spawn().await;
    let spans = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&spans);
    let res = tower::ServiceBuilder::new()
        .layer(scb_core::spans::SpansLayer::new(
            move |span: scb_core::spans::FinishedSpan| sink.lock().unwrap().push(span),
        ))
        .service(h2c_proxy(up.addr))
        .oneshot(post("/x", "hello"))
        .await
        .unwrap();
    let told = res.headers()["x-traceparent"].to_str().unwrap().to_owned();
    assert_eq!(read(res).await.0, "hello");
    let span = spans.lock().unwrap().pop().unwrap();
    let upstream = span.upstream.as_ref().unwrap();
    // The upstream continues the exchange's span, a child of the server's.
    assert_eq!(told, span.context.child(upstream.span_id).traceparent());
    assert_eq!(upstream.status, Some(StatusCode::OK));
    assert_eq!(
        upstream.address.as_ref().map(ToString::to_string),
        Some(up.addr.to_string())
    );
    assert!(matches!(
        upstream.events.last().map(|e| &e.kind),
        Some(scb_core::spans::UpstreamEventKind::FirstByte)
    ));
    assert!(span.completed);
    assert_eq!(span.bytes, 5);
    // Without propagation the client's fields go up as it sent them.
    let quiet = ReverseProxy::builder([Upstream::new(&up.addr.to_string()).unwrap()])
        .protocol(UpstreamProtocol::H2c)
        .propagate_trace(false)
        .build()
        .unwrap();
    let mut req = post("/x", "hello");
    req.headers_mut()
        .insert("traceparent", HeaderValue::from_static("client-says"));
    let res = tower::ServiceBuilder::new()
        .layer(scb_core::spans::SpansLayer::context_only())
        .service(quiet)
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(res.headers()["x-traceparent"], "client-says");
}

#[tokio::test]
async fn request_trailers_and_te_trailers_reach_the_upstream() {
    let up = H2Upstream::spawn().await;
    let proxy = h2c_proxy(up.addr);
    let mut trailers = HeaderMap::new();
    trailers.insert("x-client-trailer", HeaderValue::from_static("seen"));
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
        Ok(Frame::data(Bytes::from_static(b"part one, "))),
        Ok(Frame::data(Bytes::from_static(b"part two"))),
        Ok(Frame::trailers(trailers)),
    ];
    let req = Request::post("/echo")
        .header("host", "site.example")
        .header("te", "trailers")
        .body(Body::new(StreamBody::new(futures_util::stream::iter(
            frames,
        ))))
        .unwrap();
    let res = proxy.oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-te"], "trailers");
    let (bytes, trailers) = read(res).await;
    assert_eq!(bytes, "part one, part two");
    let trailers = trailers.unwrap();
    assert_eq!(trailers["x-got"], "seen");
    assert_eq!(trailers["x-sum"], "18");
}

#[tokio::test]
async fn a_reset_stream_fails_that_request_only() {
    let up = H2Upstream::spawn().await;
    let proxy = h2c_proxy(up.addr);
    for _ in 0..3 {
        let res = proxy.clone().oneshot(grpc("/reset")).await.unwrap();
        assert_eq!(
            res.status(),
            StatusCode::OK,
            "gRPC errors are trailers-only"
        );
        assert_eq!(res.headers()["grpc-status"], "14");
        let res = proxy.clone().oneshot(post("/reset", "x")).await.unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
        let res = proxy.clone().oneshot(post("/echo", "fine")).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(read(res).await.0, "fine");
    }
    assert_eq!(up.connections(), 1, "resets do not cost the connection");
}

#[tokio::test]
async fn an_upstream_that_goes_away_is_reconnected_when_it_comes_back() {
    let up = H2Upstream::spawn().await;
    let addr = up.addr;
    let proxy = h2c_proxy(addr);
    let res = proxy
        .clone()
        .oneshot(post("/echo", "before"))
        .await
        .unwrap();
    assert_eq!(read(res).await.0, "before");

    // Down: every connection closed, nothing listening. Three requests in a row fail the
    // gRPC way or the HTTP way, none hangs.
    drop(up);
    for _ in 0..3 {
        let res = proxy.clone().oneshot(grpc("/echo")).await.unwrap();
        assert_eq!(res.headers()["grpc-status"], "14");
        assert!(res.headers().contains_key("grpc-message"));
        let res = proxy.clone().oneshot(post("/echo", "x")).await.unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    }

    // Back on the same port: the next request makes a new connection.
    let listener = TcpListener::bind(addr).await.unwrap();
    let up = H2Upstream::on(listener);
    let res = proxy.clone().oneshot(post("/echo", "after")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(read(res).await.0, "after");
    assert_eq!(up.connections(), 1);
}

#[tokio::test]
async fn an_http1_only_upstream_fails_cleanly() {
    // Something that answers HTTP/1.1 to the HTTP/2 preface, then closes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            use tokio::io::AsyncWriteExt as _;
            let _ = stream
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        }
    });
    let proxy = h2c_proxy(addr);
    for _ in 0..3 {
        let res = tokio::time::timeout(
            Duration::from_secs(10),
            proxy.clone().oneshot(post("/", "x")),
        )
        .await
        .expect("answered, not hung")
        .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    }
    server.abort();
}

/// A listener whose accept queue is full and never drained: connects to it hang, as to
/// an upstream that drops packets. `None` if the kernel will not make one hang.
fn black_hole() -> Option<(socket2::Socket, Vec<std::net::TcpStream>, SocketAddr)> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .ok()?;
    socket.listen(0).ok()?;
    let addr = socket.local_addr().ok()?.as_socket()?;
    let mut held = Vec::new();
    for _ in 0..64 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(stream) => held.push(stream),
            Err(_) => return Some((socket, held, addr)),
        }
    }
    None
}

#[tokio::test]
async fn requests_waiting_on_a_connect_that_fails_move_on_together() {
    let Some((_hole, _held, hole)) = black_hole() else {
        return;
    };
    let up = H2Upstream::spawn().await;
    let proxy = ReverseProxy::builder([
        Upstream::new(&hole.to_string()).unwrap(),
        Upstream::new(&up.addr.to_string()).unwrap(),
    ])
    .protocol(UpstreamProtocol::H2c)
    .connect_timeout(Duration::from_millis(300))
    .try_timeout(Duration::from_secs(2))
    .build()
    .unwrap();
    // Twenty at once: half start on the black hole, and wait on its one connect. Queued
    // one connect after another (300 ms each), the last would run out of their 2 s.
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let proxy = proxy.clone();
        requests.spawn(async move { proxy.oneshot(post("/echo", "x")).await.unwrap().status() });
    }
    while let Some(status) = requests.join_next().await {
        assert_eq!(status.unwrap(), StatusCode::OK);
    }
}

#[tokio::test]
async fn a_client_body_over_the_limit_is_413_not_the_upstreams_fault() {
    let up = H2Upstream::spawn().await;
    let proxy = ReverseProxy::builder([Upstream::new(&up.addr.to_string()).unwrap()])
        .protocol(UpstreamProtocol::H2c)
        .max_body(Some(10))
        .build()
        .unwrap();
    // No Content-Length: the limit is found while hyper sends the body.
    let big = || {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = (0..3)
            .map(|_| Ok(Frame::data(Bytes::from_static(b"12345678"))))
            .collect();
        Body::new(StreamBody::new(futures_util::stream::iter(frames)))
    };
    for _ in 0..3 {
        let req = Request::post("/echo")
            .header("host", "site.example")
            .body(big())
            .unwrap();
        let res = proxy.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let req = Request::post("/echo")
            .header("host", "site.example")
            .header("content-type", "application/grpc")
            .body(big())
            .unwrap();
        let res = proxy.clone().oneshot(req).await.unwrap();
        assert_eq!(res.headers()["grpc-status"], "8", "RESOURCE_EXHAUSTED");
    }
    // The upstream was never at fault, and still serves.
    let res = proxy.clone().oneshot(post("/echo", "fine")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[test]
fn the_protocol_must_fit_the_upstreams() {
    let build = |protocol, addr: &str| {
        ReverseProxy::builder([Upstream::new(addr).unwrap()])
            .protocol(protocol)
            .build()
    };
    let e = build(UpstreamProtocol::H2, "127.0.0.1:1").unwrap_err();
    assert!(matches!(e, BuildError::Protocol(_)), "{e}");
    assert!(e.to_string().contains("is not https://"), "{e}");
    let e = build(UpstreamProtocol::H2c, "https://127.0.0.1:1").unwrap_err();
    assert!(e.to_string().contains("\"h2\" is HTTP/2 over TLS"), "{e}");
    assert!(build(UpstreamProtocol::H2c, "unix:/run/app.sock").is_ok());
    let e = ReverseProxy::builder([Upstream::new("127.0.0.1:1").unwrap()])
        .protocol(UpstreamProtocol::H2c)
        .send_proxy_protocol(scb_proxy::ProxyHeader::V2)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("PROXY protocol"), "{e}");
}
