//! Secure listeners (`Server::listen_secure`) with a stand-in handshake: the client's
//! first byte picks the protocol (`1` HTTP/1.1, `2` HTTP/2), as ALPN would. The TLS
//! handshake itself is scb-tls's; what is tested here is the server's side of the hook.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::server::{
    ConnectInfo, Handshake, HandshakeFuture, Limits, Protocol, Secured, Server, ServerHandle,
};
use tokio::io::AsyncReadExt as _;

struct FirstByte;

impl Handshake for FirstByte {
    fn handshake(&self, mut tcp: tokio::net::TcpStream) -> HandshakeFuture {
        Box::pin(async move {
            let protocol = match tcp.read_u8().await? {
                b'1' => Protocol::Http1,
                b'2' => Protocol::Http2,
                other => {
                    return Err(std::io::Error::other(format!("bad hello {other}")));
                }
            };
            Ok(Secured::new(Box::new(tcp), protocol))
        })
    }
}

fn start(limits: Limits) -> (SocketAddr, ServerHandle) {
    let bound = Server::builder()
        .workers(1)
        .limits(limits)
        .listen_secure("127.0.0.1:0".parse().unwrap(), Arc::new(FirstByte))
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(|_| {
        tower::service_fn(|req: Request<Body>| async move {
            let info = req.extensions().get::<ConnectInfo>().copied();
            let text = format!(
                "secure={} version={:?}",
                info.is_some_and(|i| i.secure),
                req.version()
            );
            Ok::<_, Infallible>(Response::new(Body::from(text)))
        })
    });
    (addr, handle)
}

#[test]
fn http1_over_a_secure_listener_is_served_and_marked_secure() {
    let (addr, handle) = start(Limits::default());
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"1GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.ends_with("secure=true version=HTTP/1.1"), "{out}");
    handle.shutdown();
    handle.join();
}

#[test]
fn http2_over_a_secure_listener_is_served_when_the_handshake_says_so() {
    let (addr, handle) = start(Limits::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, b"2")
            .await
            .unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake::<_, _, http_body_util::Full<Bytes>>(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(stream),
            )
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::get("https://t/").body(Default::default()).unwrap();
        let res = sender.send_request(req).await.unwrap();
        assert_eq!(res.version(), http::Version::HTTP_2);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"secure=true version=HTTP/2.0");
    });
    // The client's connection task lives in `rt`: gone with it, so shutdown need not
    // wait out the grace period for a client that cannot answer GOAWAY.
    drop(rt);
    handle.shutdown();
    handle.join();
}

#[test]
fn a_handshake_that_never_finishes_is_closed_at_the_timeout() {
    let mut limits = Limits::default();
    limits.handshake_timeout = Duration::from_millis(300);
    let (addr, handle) = start(limits);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    // Says nothing: the server must close the connection, not wait for ever.
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // A failed handshake is the same: closed, and the worker goes on serving.
    let mut bad = TcpStream::connect(addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(b"x").unwrap();
    assert_eq!(bad.read(&mut buf).unwrap_or(0), 0);
    let mut good = TcpStream::connect(addr).unwrap();
    good.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    good.write_all(b"1GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    good.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    handle.shutdown();
    handle.join();
}

#[test]
fn http1_over_a_secure_listener_gets_the_drivers_own_answers_with_a_request_id() {
    let mut limits = Limits::default();
    limits.max_header_bytes = 1024;
    let (addr, handle) = start(limits);
    let exchange = |raw: &[u8]| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"1").unwrap();
        s.write_all(raw).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let big = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(4000)
    );
    for (raw, status) in [
        (big.as_bytes(), "431"),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n".as_slice(), "400"),
        (
            b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
                .as_slice(),
            "400",
        ),
    ] {
        let out = exchange(raw);
        assert!(out.starts_with(&format!("HTTP/1.1 {status}")), "{out}");
        assert!(
            out.to_ascii_lowercase().contains("\r\nx-request-id: "),
            "{out}"
        );
    }
    // Keep-alive with a small unread body, as on plain TCP.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"1GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert_eq!(out.matches("HTTP/1.1 200").count(), 2, "{out}");
    handle.shutdown();
    handle.join();
}
