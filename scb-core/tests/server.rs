//! The server runtime over real TCP: framing, limits, keep-alive, pipelining, h2c,
//! shutdown, panics, request bodies and the file-region path.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use scb_core::request_id::RequestIdLayer;
use scb_core::server::{ConnectInfo, Limits, Server, ServerHandle, WorkerInfo};
use scb_core::{Body, FileRegion};
use tower::ServiceBuilder;

/// Every request reaching the test service is counted here, so a test can prove that a
/// refused request never reached it.
type Hits = Arc<AtomicUsize>;

fn test_service(
    hits: Hits,
    worker: WorkerInfo,
) -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + 'static,
> + Clone
+ 'static {
    let svc = tower::service_fn(move |req: Request<Body>| {
        let hits = Arc::clone(&hits);
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            let path = req.uri().path().to_owned();
            let method = req.method().clone();
            let remote = req.extensions().get::<ConnectInfo>().map(|c| c.remote);
            let res = match path.as_str() {
                "/hello" => Response::new(Body::from("Hello, world!")),
                "/worker" => Response::new(Body::from(worker.index.to_string())),
                "/echo" => {
                    let body = req.into_body().collect().await;
                    match body {
                        Ok(b) => Response::new(Body::from(b.to_bytes())),
                        Err(e) => Response::builder()
                            .status(StatusCode::BAD_REQUEST)
                            .body(Body::from(format!("body error: {e}")))
                            .unwrap(),
                    }
                }
                "/slow" => {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    Response::new(Body::from("slow done"))
                }
                "/panic" => panic!("test handler panicked on purpose"),
                "/stream" => {
                    let chunks = futures_util::stream::iter(["one ", "two ", "three"].map(|c| {
                        Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(
                            c.as_bytes(),
                        )))
                    }));
                    Response::new(Body::new(http_body_util::StreamBody::new(chunks)))
                }
                "/file" => {
                    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
                    let path = std::env::temp_dir().join(format!(
                        "scb-server-test-{}-{}",
                        std::process::id(),
                        fastrand::u64(..)
                    ));
                    std::fs::write(&path, &data).unwrap();
                    let file = std::fs::File::open(&path).unwrap();
                    std::fs::remove_file(&path).unwrap();
                    Response::new(Body::file(FileRegion::new(Arc::new(file), 10, 250_000)))
                }
                "/peer" => Response::new(Body::from(format!("{remote:?}"))),
                _ => Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::from("nope"))
                    .unwrap(),
            };
            let mut res = res;
            res.headers_mut()
                .insert("x-method", method.as_str().parse().unwrap());
            Ok::<_, Infallible>(res)
        }
    });
    ServiceBuilder::new()
        .layer(RequestIdLayer::new())
        .service(svc)
}

struct TestServer {
    addr: SocketAddr,
    hits: Hits,
    handle: Option<ServerHandle>,
}

impl TestServer {
    fn start(workers: usize, limits: Limits) -> Self {
        Self::start_with(workers, limits, Duration::from_secs(5))
    }

    fn start_with(workers: usize, limits: Limits, grace: Duration) -> Self {
        let hits: Hits = Arc::default();
        let bound = Server::builder()
            .workers(workers)
            .limits(limits)
            .grace_period(grace)
            .listen("127.0.0.1:0".parse().unwrap())
            .bind()
            .unwrap();
        let addr = bound.local_addrs()[0];
        let h = Arc::clone(&hits);
        let handle = bound.start(move |w| test_service(Arc::clone(&h), *w));
        Self {
            addr,
            hits,
            handle: Some(handle),
        }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
            h.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One parsed response read off a raw connection.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (Content-Length, chunked, or no body for HEAD) from `s`, keeping
/// any bytes after it in `buf`.
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>, head_request: bool) -> Option<Resp> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 65536];
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    buf.drain(..head_end);
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut resp = Resp {
        status,
        headers,
        body: Vec::new(),
    };
    if head_request || status == 204 || status == 304 {
        return Some(resp);
    }
    if let Some(len) = resp.header("content-length") {
        let len: usize = len.parse().unwrap();
        fill(s, buf, len)?;
        resp.body = buf.drain(..len).collect();
    } else if resp.header("transfer-encoding") == Some("chunked") {
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                fill(s, buf, buf.len() + 1)?;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            buf.drain(..line_end + 2);
            fill(s, buf, size + 2)?;
            resp.body.extend(buf.drain(..size));
            buf.drain(..2);
            if size == 0 {
                break;
            }
        }
    } else {
        s.read_to_end(buf).ok()?;
        resp.body = std::mem::take(buf);
    }
    Some(resp)
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> Option<()> {
    while buf.len() < len {
        let mut chunk = [0u8; 65536];
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Sends `raw` on a fresh connection and reads one response.
fn roundtrip(server: &TestServer, raw: &[u8]) -> Resp {
    let mut s = server.connect();
    s.write_all(raw).unwrap();
    read_response(&mut s, &mut Vec::new(), raw.starts_with(b"HEAD")).expect("a response")
}

/// Reads until the server closes the connection; true if it did (EOF or reset).
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let mut buf = Vec::new();
    for _ in 0..20 {
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s, &mut buf, false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"Hello, world!");
        assert_eq!(r.header("content-length"), Some("13"));
        assert!(r.header("date").is_some());
        assert!(r.header("connection").is_none());
    }
    assert_eq!(server.hits.load(Ordering::SeqCst), 20);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let mut batch = Vec::new();
    for path in ["/hello", "/worker", "/missing", "/hello"] {
        batch.extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    }
    batch.extend_from_slice(b"HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n");
    s.write_all(&batch).unwrap();
    let mut buf = Vec::new();
    let statuses: Vec<(u16, Vec<u8>)> = (0..4)
        .map(|_| {
            let r = read_response(&mut s, &mut buf, false).unwrap();
            (r.status, r.body)
        })
        .collect();
    assert_eq!(
        statuses,
        vec![
            (200, b"Hello, world!".to_vec()),
            (200, b"0".to_vec()),
            (404, b"nope".to_vec()),
            (200, b"Hello, world!".to_vec()),
        ]
    );
    let head = read_response(&mut s, &mut buf, true).unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("13"));
    assert_eq!(head.header("x-method"), Some("HEAD"));
    assert!(buf.is_empty(), "HEAD response must carry no body");
}

#[test]
fn request_split_across_many_writes_is_assembled() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.set_nodelay(true).unwrap();
    for b in b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n" {
        s.write_all(&[*b]).unwrap();
    }
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.body, b"Hello, world!");
}

#[test]
fn http10_closes_unless_keep_alive_is_asked() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"GET /hello HTTP/1.0\r\n\r\n").unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.body, b"Hello, world!");
    assert!(closed_by_server(&mut s));

    let mut s = server.connect();
    s.write_all(b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    s.write_all(b"GET /hello HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
}

#[test]
fn connection_close_is_honoured() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_by_server(&mut s));
}

#[test]
fn request_id_is_kept_generated_or_replaced() {
    let server = TestServer::start(1, Limits::default());
    let r = roundtrip(
        &server,
        b"GET /hello HTTP/1.1\r\nHost: t\r\nX-Request-Id: abc-123\r\n\r\n",
    );
    assert_eq!(r.header("x-request-id"), Some("abc-123"));
    let r = roundtrip(&server, b"GET /missing HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 404);
    let generated = r.header("x-request-id").unwrap();
    assert!(scb_core::request_id::is_valid(generated.as_bytes()));
    let r = roundtrip(
        &server,
        b"GET /hello HTTP/1.1\r\nHost: t\r\nX-Request-Id: bad id with spaces\r\n\r\n",
    );
    let replaced = r.header("x-request-id").unwrap();
    assert_ne!(replaced, "bad id with spaces");
    assert!(scb_core::request_id::is_valid(replaced.as_bytes()));
}

#[test]
fn oversized_head_gets_431_with_a_request_id_and_never_reaches_the_service() {
    let mut limits = Limits::default();
    limits.max_header_bytes = 1024;
    let server = TestServer::start(1, limits);
    let raw = format!(
        "GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(4000)
    );
    let mut s = server.connect();
    s.write_all(raw.as_bytes()).unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 431);
    assert!(r.header("x-request-id").is_some());
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_by_server(&mut s));
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn too_many_header_fields_get_431() {
    let mut limits = Limits::default();
    limits.max_headers = 10;
    let server = TestServer::start(1, limits);
    let mut raw = String::from("GET /hello HTTP/1.1\r\nHost: t\r\n");
    for i in 0..20 {
        raw.push_str(&format!("X-{i}: v\r\n"));
    }
    raw.push_str("\r\n");
    let r = roundtrip(&server, raw.as_bytes());
    assert_eq!(r.status, 431);
    assert!(r.header("x-request-id").is_some());
}

#[test]
fn framing_ambiguities_are_refused_with_400_before_the_service() {
    let server = TestServer::start(1, Limits::default());
    let cases: &[&[u8]] = &[
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"GET /hello HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET /hello HTTP/1.1\r\n\r\n",
        b"GET /hello HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    ];
    for raw in cases {
        let r = roundtrip(&server, raw);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(raw));
        assert!(r.header("x-request-id").is_some());
    }
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn bad_chunk_size_ends_the_body_with_an_error_and_closes() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("chunk"));
    assert!(closed_by_server(&mut s));
}

#[test]
fn request_bodies_are_streamed_to_the_service_by_length_and_chunked() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let mut buf = Vec::new();
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let mut raw = format!(
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        payload.len()
    )
    .into_bytes();
    raw.extend_from_slice(&payload);
    s.write_all(&raw).unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(r.status, 200);
    assert!(
        r.body == payload,
        "length-delimited body changed in transit"
    );

    let mut raw = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for chunk in payload.chunks(7000) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    s.write_all(&raw).unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert!(r.body == payload, "chunked body changed in transit");

    // The connection is still in sync for the next request.
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut s, &mut buf, false).unwrap().body,
        b"Hello, world!"
    );
}

#[test]
fn content_length_over_the_limit_gets_413() {
    let mut limits = Limits::default();
    limits.max_body_bytes = 1000;
    let server = TestServer::start(1, limits);
    let r = roundtrip(
        &server,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n",
    );
    assert_eq!(r.status, 413);
    assert!(r.header("x-request-id").is_some());
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn unread_body_closes_the_connection_after_the_response() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"POST /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\npartial")
        .unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn a_small_unread_body_is_dropped_and_the_connection_kept() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let mut buf = Vec::new();
    // A GET with a body its handler ignores, by length and chunked, each followed by
    // another request on the same connection.
    let body = "x".repeat(60);
    s.write_all(
        format!("GET /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 60\r\n\r\n{body}").as_bytes(),
    )
    .unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!((r.status, r.header("connection")), (200, None));
    s.write_all(
        b"HEAD /hello HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n0\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut s, &mut buf, true).unwrap();
    assert_eq!((r.status, r.header("connection")), (200, None));
    // The body may also arrive after the response went out.
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!((r.status, r.header("connection")), (200, None));
    s.write_all(b"0123456789GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"Hello, world!"[..]));
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        4,
        "no body byte was taken for a request"
    );
}

#[test]
fn an_unread_chunked_body_beyond_the_bound_closes_the_connection() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"POST /hello HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 32 * 1024, "y".repeat(32 * 1024));
    for _ in 0..3 {
        s.write_all(chunk.as_bytes()).unwrap();
    }
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 200);
    assert!(
        closed_by_server(&mut s),
        "96 KiB of unread body is not read through"
    );
}

#[test]
fn invalid_hosts_and_malformed_versions_are_400_with_a_request_id() {
    let server = TestServer::start(1, Limits::default());
    for host in [
        "a b/c",
        "a/b",
        "user@example.com",
        "example.com:http",
        "[::1",
        "ex\u{1}",
    ] {
        let r = roundtrip(
            &server,
            format!("GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 400, "{host:?}");
        assert!(r.header("x-request-id").is_some(), "{host:?}");
    }
    let r = roundtrip(&server, b"GET /hello http/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 400);
    let r = roundtrip(&server, b"GET /hello HTTP/3.0\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 505);
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
    let r = roundtrip(&server, b"GET /hello HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    assert_eq!(r.status, 200);
}

#[test]
fn a_broken_http2_preface_gets_no_http1_answer() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
}

#[test]
fn expect_continue_gets_100_before_the_body() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let mut buf = Vec::new();
    let interim = read_response(&mut s, &mut buf, true).unwrap();
    assert_eq!(interim.status, 100);
    s.write_all(b"hello").unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(r.body, b"hello");
}

#[test]
fn streamed_response_is_chunked() {
    let server = TestServer::start(1, Limits::default());
    let r = roundtrip(&server, b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.body, b"one two three");
}

#[test]
fn file_region_is_sent_exactly() {
    let server = TestServer::start(1, Limits::default());
    let r = roundtrip(&server, b"GET /file HTTP/1.1\r\nHost: t\r\n\r\n");
    let expected: Vec<u8> = (10..250_010u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(r.header("content-length"), Some("250000"));
    assert!(r.body == expected, "file region bytes differ");
}

#[test]
fn panicking_handler_gets_500_and_the_worker_keeps_serving() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let mut buf = Vec::new();
    s.write_all(b"GET /panic HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut buf, false).unwrap();
    assert_eq!(r.status, 500);
    assert!(r.header("x-request-id").is_some());
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
    let r = roundtrip(&server, b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(r.status, 200);
}

#[test]
fn tower_errors_get_their_status_not_a_generic_500() {
    // A handler that never answers, under tower's Timeout: 504. One that is shed by
    // LoadShed because it is never ready: 503. Anything else a service fails with: 500.
    for (path, status) in [("/timeout", 504), ("/shed", 503), ("/error", 500)] {
        let bound = Server::builder()
            .workers(1)
            .listen("127.0.0.1:0".parse().unwrap())
            .bind()
            .unwrap();
        let addr = bound.local_addrs()[0];
        let handle = bound.start(move |_| {
            let never = tower::service_fn(|_req: Request<Body>| {
                std::future::pending::<Result<Response<Body>, Infallible>>()
            });
            let route = path;
            let svc: tower::util::BoxCloneService<Request<Body>, Response<Body>, tower::BoxError> =
                match route {
                    "/timeout" => tower::util::BoxCloneService::new(
                        ServiceBuilder::new()
                            .timeout(Duration::from_millis(20))
                            .service(never),
                    ),
                    "/shed" => tower::util::BoxCloneService::new(
                        ServiceBuilder::new().load_shed().service(NeverReady),
                    ),
                    _ => tower::util::BoxCloneService::new(tower::service_fn(
                        |_req: Request<Body>| async {
                            Err::<Response<Body>, tower::BoxError>("broken".into())
                        },
                    )),
                };
            svc
        });
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
        assert_eq!(r.status, status, "{path}");
        assert!(r.header("x-request-id").is_some(), "{path}");
        handle.shutdown();
        handle.join();
    }
}

/// A service that is never ready, for LoadShed to shed.
#[derive(Clone)]
struct NeverReady;

impl tower::Service<Request<Body>> for NeverReady {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Pending
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        std::future::ready(Ok(Response::new(Body::empty())))
    }
}

#[test]
fn a_client_that_connects_ahead_of_its_request_is_answered_and_a_silent_one_closed() {
    // A listener hands a connection over once its client has sent something
    // (TCP_DEFER_ACCEPT), or after about a second of silence: a client that connects ahead
    // of its request (a browser's preconnect) is answered when the request comes, and one
    // that never speaks is closed at the header deadline, counted from when it was handed
    // over.
    let mut limits = Limits::default();
    limits.header_read_timeout = Duration::from_secs(1);
    let server = TestServer::start(1, limits);
    let mut late = server.connect();
    let mut silent = server.connect();
    std::thread::sleep(Duration::from_millis(1500));
    late.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let r = read_response(&mut late, &mut buf, false).unwrap();
    assert_eq!(r.status, 200);
    late.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut late, &mut buf, false).unwrap();
    assert_eq!(r.status, 200);
    assert!(
        closed_by_server(&mut silent),
        "a silent client was never closed"
    );
}

#[test]
fn slowloris_is_closed_at_the_header_deadline() {
    let mut limits = Limits::default();
    limits.header_read_timeout = Duration::from_millis(500);
    let server = TestServer::start(1, limits);
    let mut s = server.connect();
    let started = Instant::now();
    s.write_all(b"GET /hello HTTP/1.1\r\n").unwrap();
    // Trickle one header byte at a time, each well inside any per-read timeout.
    let mut closed_at = None;
    for b in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        .iter()
        .cycle()
        .take(400)
    {
        if s.write_all(&[*b]).is_err() {
            closed_at = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        s.set_nonblocking(true).unwrap();
        let mut peek = [0u8; 1];
        let got = s.peek(&mut peek);
        s.set_nonblocking(false).unwrap();
        if got.is_ok() {
            closed_at = Some(started.elapsed());
            break;
        }
    }
    let closed_at = closed_at.expect("server never answered the slow head");
    assert!(
        closed_at >= Duration::from_millis(450),
        "closed too early: {closed_at:?}"
    );
    assert!(
        closed_at < Duration::from_secs(4),
        "closed too late: {closed_at:?}"
    );
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 408);
    assert!(r.header("x-request-id").is_some());
    assert!(closed_by_server(&mut s));
}

#[test]
fn idle_keep_alive_connection_is_closed_after_the_timeout() {
    let mut limits = Limits::default();
    limits.keep_alive_timeout = Duration::from_millis(300);
    let server = TestServer::start(1, limits);
    let mut s = server.connect();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    read_response(&mut s, &mut buf, false).unwrap();
    let started = Instant::now();
    assert!(closed_by_server(&mut s));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
}

#[test]
fn graceful_shutdown_lets_an_in_flight_request_finish() {
    let mut server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Wait until the request is inside the service, then shut down.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.hits.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "request never reached the service"
        );
        std::thread::yield_now();
    }
    let handle = server.handle.take().unwrap();
    handle.shutdown();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"slow done");
    assert_eq!(r.header("connection"), Some("close"));
    handle.join();
    assert!(
        TcpStream::connect(server.addr).is_err(),
        "still accepting after shutdown"
    );
}

#[test]
fn grace_period_bounds_shutdown() {
    let mut server = TestServer::start_with(1, Limits::default(), Duration::from_millis(100));
    let mut s = server.connect();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.hits.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "request never reached the service"
        );
        std::thread::yield_now();
    }
    server.stop();
    // The handler needs 400 ms and the grace period is 100 ms: had shutdown waited for
    // the handler, its answer would be here. No clock is read: the proof is that the
    // connection closed without it.
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("slow done"),
        "shutdown waited out the handler"
    );
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
}

#[test]
fn idle_connections_close_on_shutdown() {
    let mut server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    read_response(&mut s, &mut Vec::new(), false).unwrap();
    server.stop();
    assert!(closed_by_server(&mut s));
}

/// Past 256 open connections a worker's idle keep-alive connections give their buffers
/// back between requests (`conn::h1`): every kind of next request must still come through
/// whole on them, and their deadlines and shutdown must still reach them.
#[test]
fn idle_connections_of_a_crowded_worker_serve_their_next_requests_whole() {
    let mut limits = Limits::default();
    limits.keep_alive_timeout = Duration::from_secs(30);
    let mut server = TestServer::start(1, limits);
    let mut conns: Vec<(TcpStream, Vec<u8>)> = (0..300)
        .map(|_| {
            let mut s = server.connect();
            s.set_nodelay(true).unwrap();
            let mut buf = Vec::new();
            s.write_all(HELLO.as_bytes()).unwrap();
            assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
            (s, buf)
        })
        .collect();
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    for (i, (s, buf)) in conns.iter_mut().enumerate() {
        match i % 4 {
            // A head that arrives a byte at a time.
            0 => {
                for b in HELLO.as_bytes() {
                    s.write_all(&[*b]).unwrap();
                }
                assert_eq!(read_response(s, buf, false).unwrap().body, b"Hello, world!");
            }
            // A body larger than a buffer.
            1 => {
                let mut raw = format!(
                    "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
                    payload.len()
                )
                .into_bytes();
                raw.extend_from_slice(&payload);
                s.write_all(&raw).unwrap();
                let r = read_response(s, buf, false).unwrap();
                assert!(
                    r.body == payload,
                    "body changed in transit on connection {i}"
                );
            }
            // Two pipelined requests at once.
            2 => {
                s.write_all(format!("{HELLO}GET /worker HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                    .unwrap();
                assert_eq!(read_response(s, buf, false).unwrap().body, b"Hello, world!");
                assert_eq!(read_response(s, buf, false).unwrap().body, b"0");
            }
            // A streamed (chunked) answer.
            _ => {
                s.write_all(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                assert_eq!(read_response(s, buf, false).unwrap().status, 200);
            }
        }
    }
    // And once more each, after all of that, when they have been idle long enough to be
    // parked (the worker parks a connection idle for a second, after one more second for
    // those that went idle before it was crowded): each still knows who it is with. The
    // wait only makes this the state the requests find; parking itself is proven by the
    // driver's and the worker's own tests, on a paused clock.
    std::thread::sleep(Duration::from_millis(2500));
    for (s, buf) in &mut conns {
        s.write_all(HELLO.as_bytes()).unwrap();
        assert_eq!(read_response(s, buf, false).unwrap().body, b"Hello, world!");
        let local = s.local_addr().unwrap();
        s.write_all(b"GET /peer HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let body = read_response(s, buf, false).unwrap().body;
        assert_eq!(
            String::from_utf8(body).unwrap(),
            format!("{:?}", Some(local))
        );
    }
    server.stop();
    for (s, _) in &mut conns {
        assert!(closed_by_server(s));
    }
}

#[test]
fn idle_connections_of_a_crowded_worker_are_closed_at_the_keep_alive_timeout() {
    let mut limits = Limits::default();
    limits.keep_alive_timeout = Duration::from_millis(500);
    let server = TestServer::start(1, limits);
    let mut conns: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(HELLO.as_bytes()).unwrap();
            assert_eq!(
                read_response(&mut s, &mut Vec::new(), false)
                    .unwrap()
                    .status,
                200
            );
            s
        })
        .collect();
    for s in &mut conns {
        assert!(closed_by_server(s));
    }
    // The worker still serves.
    assert_eq!(status_on_new_connection(server.addr, HELLO), 200);
}

/// At `max_connections`, a worker makes room for a new connection by closing one of its
/// parked idle keep-alive connections (as nginx reuses its idle ones) instead of leaving
/// the new client in the backlog until a keep-alive timeout passes.
#[test]
fn at_max_connections_an_idle_connection_makes_room_for_a_new_one() {
    let mut limits = Limits::default();
    limits.max_connections = 260;
    limits.keep_alive_timeout = Duration::from_secs(600);
    let server = TestServer::start(1, limits);
    let mut conns: Vec<(TcpStream, Vec<u8>)> = (0..260)
        .map(|_| {
            let mut s = server.connect();
            let mut buf = Vec::new();
            s.write_all(HELLO.as_bytes()).unwrap();
            assert_eq!(read_response(&mut s, &mut buf, false).unwrap().status, 200);
            (s, buf)
        })
        .collect();
    // The 261st: accepted once one of the others is parked and closed for it (within
    // seconds), not after the ten-minute keep-alive timeout.
    for _ in 0..3 {
        let mut s = server.connect();
        s.write_all(HELLO.as_bytes()).unwrap();
        let answered = read_response(&mut s, &mut Vec::new(), false).expect("not accepted");
        assert_eq!(answered.body, b"Hello, world!");
        conns.push((s, Vec::new()));
    }
    // Three of the first were closed for them, idle between requests; the rest answer.
    let mut closed = 0;
    for (s, buf) in &mut conns {
        if s.write_all(HELLO.as_bytes()).is_err() {
            closed += 1;
            continue;
        }
        match read_response(s, buf, false) {
            Some(r) => assert_eq!(r.body, b"Hello, world!"),
            None => closed += 1,
        }
    }
    assert_eq!(closed, 3);
}

#[test]
fn two_workers_both_serve() {
    let server = TestServer::start(2, Limits::default());
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let r = roundtrip(
            &server,
            b"GET /worker HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        );
        seen.insert(r.body);
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "SO_REUSEPORT spread 200 connections onto one worker"
    );
}

#[test]
fn connect_info_carries_the_peer_address() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let local = s.local_addr().unwrap();
    s.write_all(b"GET /peer HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut Vec::new(), false).unwrap();
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        format!("{:?}", Some(local))
    );
}

type H2Body = http_body_util::Full<Bytes>;

/// An HTTP/2 prior-knowledge client connection to `addr`.
async fn h2c(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<H2Body>,
    hyper::client::conn::http2::Connection<
        hyper_util::rt::TokioIo<tokio::net::TcpStream>,
        H2Body,
        hyper_util::rt::TokioExecutor,
    >,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap()
}

#[test]
fn h2c_prior_knowledge_is_served_by_hyper() {
    let server = TestServer::start(1, Limits::default());
    let addr = server.addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (mut sender, conn) = h2c(addr).await;
        tokio::spawn(conn);
        for path in ["/hello", "/missing"] {
            let req = Request::get(format!("http://t{path}"))
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap();
            let res = sender.send_request(req).await.unwrap();
            assert_eq!(res.version(), http::Version::HTTP_2);
            assert!(res.headers().contains_key("x-request-id"));
            let status = res.status();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            match path {
                "/hello" => {
                    assert_eq!(status, 200);
                    assert_eq!(&body[..], b"Hello, world!");
                }
                _ => assert_eq!(status, 404),
            }
        }
        // A POST body over HTTP/2 reaches the service whole.
        let req = Request::post("http://t/echo")
            .body(http_body_util::Full::new(Bytes::from_static(b"over h2")))
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"over h2");
        // An invalid :authority, or Host field, is refused as on HTTP/1.1.
        let bad_authority = Request::get("http://user@t/hello")
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let bad_host = Request::get("http://t/hello")
            .header("host", "a b/c")
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        for req in [bad_authority, bad_host] {
            let res = sender.send_request(req).await.unwrap();
            assert_eq!(res.status(), 400);
            assert!(res.headers().contains_key("x-request-id"));
        }
    });
}

#[test]
fn idle_h2c_connection_is_closed_after_the_keep_alive_timeout() {
    let mut limits = Limits::default();
    limits.keep_alive_timeout = Duration::from_millis(300);
    let server = TestServer::start(1, limits);
    let addr = server.addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (mut sender, conn) = h2c(addr).await;
        let conn = tokio::spawn(conn);
        let req = Request::get("http://t/hello")
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let started = Instant::now();
        let res = sender.send_request(req).await.unwrap();
        assert_eq!(res.status(), 200);
        // The server sends GOAWAY once idle and closes; the client connection ends.
        tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("idle HTTP/2 connection was not closed")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250));
    });
}

#[test]
fn a_streamed_body_goes_out_as_it_is_produced() {
    // The second chunk is held until the client has read the first: a driver that kept
    // the first in its write buffer until the body ended would never get there.
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::clone(&release);
    let bound = Server::builder()
        .workers(1)
        .grace_period(Duration::from_secs(1))
        .listen("127.0.0.1:0".parse().unwrap())
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(move |_| {
        let held = Arc::clone(&held);
        tower::service_fn(move |_req: Request<Body>| {
            let held = Arc::clone(&held);
            async move {
                let first = futures_util::stream::once(async {
                    Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(b"first ")))
                });
                let rest = futures_util::stream::once(async move {
                    held.notified().await;
                    Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(b"rest")))
                });
                let body =
                    http_body_util::StreamBody::new(futures_util::StreamExt::chain(first, rest));
                Ok::<_, Infallible>(Response::new(Body::new(body)))
            }
        })
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while find(&got, b"first ").is_none() {
        let n = s
            .read(&mut buf)
            .expect("the first chunk before the body ends");
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(find(&got, b"rest").is_none());
    release.notify_one();
    while find(&got, b"0\r\n\r\n").is_none() {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        find(&got, b"4\r\nrest\r\n").is_some(),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    drop(s);
    handle.shutdown();
    handle.join();
}

/// One HTTP/2 frame: its header and payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

#[test]
fn an_h2_body_longer_than_its_content_length_is_a_stream_error_even_when_the_handler_ignores_it() {
    let server = TestServer::start(1, Limits::default());
    let mut s = server.connect();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    // HPACK: :method POST, :scheme http, :path /hello, :authority t, content-length 10.
    let mut block = vec![0x83, 0x86, 0x04, 6];
    block.extend_from_slice(b"/hello");
    block.extend_from_slice(&[0x01, 1, b't', 0x0f, 13, 2]);
    block.extend_from_slice(b"10");
    out.extend(h2_frame(0x1, 0x4, 1, &block));
    // A PING behind the HEADERS: once its ACK is back the server has read the HEADERS
    // and its handler, which ignores bodies, has been called.
    out.extend(h2_frame(0x6, 0, 0, b"12345678"));
    s.write_all(&out).unwrap();
    let mut seen = Vec::new();
    while !seen
        .windows(17)
        .any(|w| w[3] == 0x6 && w[4] == 0x1 && &w[9..] == b"12345678")
    {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).expect("a PING ACK");
        assert!(n > 0, "closed before the PING ACK");
        seen.extend_from_slice(&chunk[..n]);
    }
    // Only now the body: five bytes and the end of the stream, not the ten promised.
    s.write_all(&h2_frame(0x0, 0x1, 1, b"short")).unwrap();
    let mut buf = seen;

    let verdict = loop {
        while buf.len() < 9
            || buf.len()
                < 9 + (usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]))
        {
            let mut chunk = [0u8; 4096];
            let n = s
                .read(&mut chunk)
                .expect("the server answers within the timeout");
            assert!(n > 0, "closed without a verdict on the stream");
            buf.extend_from_slice(&chunk[..n]);
        }
        let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
        let (kind, stream) = (
            buf[3],
            u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff,
        );
        let payload = buf[9..9 + len].to_vec();
        buf.drain(..9 + len);
        match (kind, stream) {
            (0x3, 1) => {
                break (
                    "rst_stream",
                    u32::from_be_bytes(payload[..4].try_into().unwrap()),
                );
            }
            (0x7, _) => {
                break (
                    "goaway",
                    u32::from_be_bytes(payload[4..8].try_into().unwrap()),
                );
            }
            (0x1, 1) => break ("headers", 0),
            _ => {}
        }
    };
    // RFC 9113 §8.1.1: a stream error of type PROTOCOL_ERROR (1), not a response.
    assert_eq!(verdict, ("rst_stream", 1));
}

const HELLO: &str = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";

/// The status of `raw` sent on a new connection to `addr`.
fn status_on_new_connection(addr: SocketAddr, raw: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    read_response(&mut s, &mut Vec::new(), false)
        .unwrap()
        .status
}

#[test]
fn listeners_change_on_a_running_server_without_dropping_a_kept_one() {
    let mut server = TestServer::start(2, Limits::default());
    let first = server.addr;
    let mut handle = server.handle.take().unwrap();
    let mut kept_alive = server.connect();
    kept_alive
        .write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        read_response(&mut kept_alive, &mut buf, false)
            .unwrap()
            .status,
        200
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The first address stays (same configured address), a second one opens, and new
    // connections get the new limits.
    let mut small = Limits::default();
    small.max_header_bytes = 64;
    let next = Server::builder()
        .limits(small)
        .listen("127.0.0.1:0".parse().unwrap())
        .listen("127.0.0.1:0".parse().unwrap());
    let prepared = handle.prepare(&next).unwrap();
    let addrs = prepared.local_addrs();
    assert_eq!(
        addrs[0], first,
        "the port-0 listener is matched, not rebound"
    );
    runtime.block_on(handle.apply(prepared));
    assert_eq!(handle.local_addrs(), &addrs[..]);
    let second = addrs[1];
    let long_head = format!(
        "GET /hello HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(80)
    );
    for addr in [first, second] {
        assert_eq!(status_on_new_connection(addr, &long_head), 431, "{addr}");
    }
    // The connection accepted before keeps the limits it started with.
    kept_alive.write_all(long_head.as_bytes()).unwrap();
    assert_eq!(
        read_response(&mut kept_alive, &mut buf, false)
            .unwrap()
            .status,
        200
    );

    // Only the second address now: the first refuses new connections once `apply` has
    // returned, while the connection it accepted is still served, then drains.
    let only_second = Server::builder().listen(second);
    let prepared = handle.prepare(&only_second).unwrap();
    assert_eq!(prepared.local_addrs(), vec![second]);
    runtime.block_on(handle.apply(prepared));
    let refused = TcpStream::connect(first);
    assert!(refused.is_err(), "the removed listener still accepts");
    kept_alive
        .write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut kept_alive, &mut buf, false)
            .unwrap()
            .status,
        200
    );
    assert_eq!(status_on_new_connection(second, HELLO), 200);

    // An address another process holds fails `prepare`, and nothing changes.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let clash = Server::builder()
        .listen(second)
        .listen(taken.local_addr().unwrap());
    let err = handle.prepare(&clash).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    assert_eq!(handle.local_addrs(), &[second]);
    assert_eq!(status_on_new_connection(second, HELLO), 200);

    handle.shutdown();
    drop(kept_alive);
    handle.join();
}

/// An `h2` client connection to `addr` (h2c with prior knowledge), its connection task
/// spawned.
async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(conn);
    client.ready().await.unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn head_over_h2_ends_the_stream_on_its_headers_with_the_headers_a_get_gets() {
    let server = TestServer::start(1, Limits::default());
    let addr = server.addr;
    current_thread().block_on(async move {
        let mut client = h2_client(addr).await;
        // A fixed body, a streamed one (no length known) and an error answer.
        for path in ["/hello", "/stream", "/missing"] {
            let get = Request::get(format!("http://t{path}")).body(()).unwrap();
            let (get, _) = client.send_request(get, true).unwrap();
            let get = get.await.unwrap();
            let head = Request::head(format!("http://t{path}")).body(()).unwrap();
            let (head, _) = client.send_request(head, true).unwrap();
            let head = head.await.unwrap();
            assert_eq!(head.status(), get.status(), "{path}");
            assert!(
                head.body().is_end_stream(),
                "{path}: HEAD's HEADERS frame must carry END_STREAM"
            );
            assert_eq!(
                head.headers().get("content-length"),
                get.headers().get("content-length"),
                "{path}"
            );
            assert_eq!(head.headers()["x-method"], "HEAD", "{path}");
            assert!(head.headers().contains_key("x-request-id"), "{path}");
        }
    });
    // The server's own answer (an invalid authority) ends a HEAD stream too.
    current_thread().block_on(async move {
        let mut client = h2_client(addr).await;
        let head = Request::head("http://user@t/hello").body(()).unwrap();
        let (head, _) = client.send_request(head, true).unwrap();
        let head = head.await.unwrap();
        assert_eq!(head.status(), 400);
        assert!(head.body().is_end_stream());
        assert!(head.headers().contains_key("content-length"));
    });
}

/// Sends `first` bytes of a POST to `/echo` declaring `declared` bytes (or no length),
/// and returns the answer's status, body and how the server ended the stream.
async fn h2_upload_cut_short(
    addr: SocketAddr,
    declared: Option<u64>,
    first: usize,
) -> (StatusCode, Bytes, Option<h2::Reason>, usize) {
    let mut client = h2_client(addr).await;
    let mut req = Request::post("http://t/echo");
    if let Some(len) = declared {
        req = req.header("content-length", len);
    }
    let (response, mut upload) = client.send_request(req.body(()).unwrap(), false).unwrap();
    // What the server's window lets the client send before it reads anything.
    upload.reserve_capacity(4 << 20);
    let window = std::future::poll_fn(|cx| upload.poll_capacity(cx))
        .await
        .unwrap()
        .unwrap();
    let mut sent = 0;
    while sent < first {
        let n = (first - sent).min(16_384);
        upload.send_data(Bytes::from(vec![b'x'; n]), false).unwrap();
        sent += n;
    }
    let res = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("an answer before the body ends")
        .unwrap();
    let status = res.status();
    let body = res.into_body();
    let mut bytes = Vec::new();
    let mut body = body;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        bytes.extend_from_slice(&chunk);
    }
    let reset = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| upload.poll_reset(cx)),
    )
    .await
    .expect("the stream reset once its answer is out")
    .ok();
    (status, Bytes::from(bytes), reset, window)
}

#[test]
fn an_h2_body_over_the_limit_gets_its_413_and_then_a_no_error_reset() {
    let mut limits = Limits::default();
    limits.max_body_bytes = 100_000;
    let server = TestServer::start(1, limits);
    let addr = server.addr;
    current_thread().block_on(async move {
        // Declared too long: refused before the service, with the request id.
        let (status, body, reset, window) =
            h2_upload_cut_short(addr, Some(2_000_000), 16_384).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            String::from_utf8_lossy(&body).contains("too large"),
            "{body:?}"
        );
        assert_eq!(reset, Some(h2::Reason::NO_ERROR));
        // The window offered is the limit, not the 1 MiB default.
        assert!(window <= 100_000, "window {window}");
        // No length: the body runs past the limit while the service reads it; the answer
        // (this service's own to a body error) is read, then the stream is reset cleanly.
        let (status, body, reset, _) = h2_upload_cut_short(addr, None, 100_000 + 16_384).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            String::from_utf8_lossy(&body).contains("body error"),
            "{body:?}"
        );
        assert_eq!(reset, Some(h2::Reason::NO_ERROR));
    });
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
}
