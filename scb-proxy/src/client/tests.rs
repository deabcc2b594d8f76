use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body::Frame;
use http_body_util::{BodyExt as _, StreamBody};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::client::pool::{Home, Pool, PoolConfig};

const MAX_HEAD: usize = 8 * 1024;

/// The longest any wait in these tests may take before the test fails instead of hanging.
const WAIT: Duration = Duration::from_secs(10);

fn parse_str(head: &str, method: &Method) -> Result<Option<ResponseHead>, &'static str> {
    response::parse(
        &mut BytesMut::from(head),
        MAX_HEAD,
        method,
        &mut FieldOffsets::default(),
    )
}

fn framing_of(head: &str) -> Result<(Framing, bool), &'static str> {
    parse_str(head, &Method::GET).map(|h| {
        let h = h.expect("a complete head");
        (h.framing, h.keep_alive)
    })
}

#[test]
fn a_head_is_parsed_and_taken_off_the_buffer() {
    let mut buf = BytesMut::from(
        "HTTP/1.1 200 OK\r\nServer: up\r\nContent-Length: 5\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nhello",
    );
    let head = response::parse(
        &mut buf,
        MAX_HEAD,
        &Method::GET,
        &mut FieldOffsets::default(),
    )
    .unwrap()
    .unwrap();
    assert_eq!(head.parts.status, StatusCode::OK);
    assert_eq!(head.parts.headers["server"], "up");
    assert_eq!(head.parts.headers.get_all("set-cookie").iter().count(), 2);
    assert_eq!(head.framing, Framing::Length(5));
    assert!(head.keep_alive);
    assert_eq!(&buf[..], b"hello");
}

#[test]
fn an_incomplete_head_waits_unless_it_is_already_too_long() {
    assert!(
        parse_str("HTTP/1.1 200 OK\r\nServer: u", &Method::GET)
            .unwrap()
            .is_none()
    );
    let long = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
    assert_eq!(
        parse_str(&long, &Method::GET).unwrap_err(),
        "response head too large"
    );
    let complete = format!("HTTP/1.1 200 OK\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD));
    assert_eq!(
        parse_str(&complete, &Method::GET).unwrap_err(),
        "response head too large"
    );
}

#[test]
fn framing_ambiguities_are_refused() {
    for (head, why) in [
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "both Content-Length and Transfer-Encoding",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            "several Content-Length fields",
        ),
        (
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            "invalid Content-Length",
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "transfer coding other than chunked",
        ),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "several Transfer-Encoding fields",
        ),
        (
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding in an HTTP/1.0 response",
        ),
        (
            "HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
            "malformed response head",
        ),
        ("HTTP/1.1 099 Odd\r\n\r\n", "invalid status code"),
        ("SSH-2.0-OpenSSH_9.2\r\n\r\n", "malformed response head"),
    ] {
        assert_eq!(framing_of(head).unwrap_err(), why, "{head:?}");
    }
    let many: String = (0..200).map(|i| format!("x-{i}: 1\r\n")).collect();
    assert_eq!(
        framing_of(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).unwrap_err(),
        "too many response header fields"
    );
}

#[test]
fn framing_follows_rfc_9112() {
    let ok = |head: &str| framing_of(head).unwrap();
    assert_eq!(
        ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"),
        (Framing::Chunked, true)
    );
    assert_eq!(
        ok("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
        (Framing::Empty, true)
    );
    // No length: the body runs to the close, and the connection ends with it.
    assert_eq!(ok("HTTP/1.1 200 OK\r\n\r\n"), (Framing::Close, false));
    assert_eq!(
        ok("HTTP/1.1 204 No Content\r\n\r\n"),
        (Framing::Empty, true)
    );
    assert_eq!(
        ok("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n"),
        (Framing::Empty, true)
    );
    assert_eq!(
        ok("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n").0,
        Framing::Upgrade
    );
    assert_eq!(ok("HTTP/1.1 103 Early Hints\r\n\r\n").0, Framing::Interim);
    assert_eq!(
        ok("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: Keep-Alive, close\r\n\r\n"),
        (Framing::Length(3), false)
    );
    assert_eq!(
        ok("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n"),
        (Framing::Length(3), false)
    );
    assert_eq!(
        ok("HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n"),
        (Framing::Length(3), true)
    );
    let head = parse_str(
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        &Method::HEAD,
    )
    .unwrap()
    .unwrap();
    assert_eq!((head.framing, head.keep_alive), (Framing::Empty, true));
    assert_eq!(head.parts.headers["content-length"], "10");
}

#[test]
fn a_connection_field_naming_only_persistence_is_read_and_left_out() {
    let parse = |head: &str| parse_str(head, &Method::GET).unwrap().unwrap();
    // Read for what it says, and not kept: it would only be removed again.
    let head = parse("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
    assert!(head.keep_alive);
    assert!(!head.parts.headers.contains_key("connection"));
    let head = parse("HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n");
    assert!(!head.keep_alive);
    assert!(!head.parts.headers.contains_key("connection"));
    let head = parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
    assert!(
        head.keep_alive,
        "an HTTP/1.0 upstream's keep-alive is still heard"
    );
    // One that names another field, or an upgrade, stays for the hop-by-hop pass (which
    // removes the fields it names) and for the upgrade.
    let head = parse(
        "HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nContent-Length: 0\r\n\r\n",
    );
    assert!(!head.keep_alive);
    assert_eq!(head.parts.headers["connection"], "close, X-Hop");
    let head = parse("HTTP/1.1 101 Switching\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_eq!(head.framing, Framing::Upgrade);
    assert_eq!(head.parts.headers["connection"], "Upgrade");
}

/// A header field name that is none of the framing fields.
fn field_name() -> impl Strategy<Value = String> {
    "x-[a-z0-9!#$%&'*+.^_`|~-]{1,20}"
}

/// A field value: visible ASCII and inner spaces, no leading or trailing whitespace.
fn field_value() -> impl Strategy<Value = String> {
    "[!-~]([ -~]{0,40}[!-~])?"
}

proptest! {
    #[test]
    fn valid_heads_parse_to_their_fields_and_leave_the_body(
        status in 200u16..600,
        fields in proptest::collection::vec((field_name(), field_value()), 0..20),
        length in proptest::option::of(0u64..100_000),
        rest in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut head = format!("HTTP/1.1 {status} Whatever\r\n");
        for (name, value) in &fields {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(length) = length {
            head.push_str(&format!("Content-Length: {length}\r\n"));
        }
        head.push_str("\r\n");
        let mut buf = BytesMut::from(head.as_bytes());
        buf.extend_from_slice(&rest);
        let parsed = response::parse(&mut buf, MAX_HEAD, &Method::GET, &mut FieldOffsets::default())
            .unwrap()
            .unwrap();
        prop_assert_eq!(parsed.parts.status.as_u16(), status);
        prop_assert_eq!(&buf[..], &rest[..]);
        for (name, value) in &fields {
            let values: Vec<&str> = parsed
                .parts
                .headers
                .get_all(name.as_str())
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            prop_assert!(values.contains(&value.as_str()), "{} lost: {:?}", name, values);
        }
        let bodiless = status == 204 || status == 304;
        let expected = match length {
            _ if bodiless => Framing::Empty,
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        };
        prop_assert_eq!(parsed.framing, expected);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut buf = BytesMut::from(&bytes[..]);
        let before = buf.len();
        if let Ok(Some(_)) = response::parse(&mut buf, MAX_HEAD, &Method::GET, &mut FieldOffsets::default()) {
            prop_assert!(buf.len() < before);
        }
    }
}

fn encode(req: &Request<Body>) -> (String, Result<request::BodyFraming, String>) {
    let mut dst = Vec::new();
    let framing = request::encode_head(&mut dst, req).map_err(|e| e.to_string());
    (String::from_utf8(dst).unwrap(), framing)
}

fn streaming_body(chunks: &[&str]) -> Body {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c.as_bytes()))))
        .collect();
    Body::new(StreamBody::new(futures_util::stream::iter(frames)))
}

#[test]
fn request_heads_say_how_the_body_is_framed() {
    let get = Request::builder()
        .uri("/a?b=1")
        .header("host", "example.com")
        .header("x-request-id", "r1")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        encode(&get),
        (
            "GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\nx-request-id: r1\r\n\r\n".into(),
            Ok(request::BodyFraming::Empty)
        )
    );
    let empty_post = Request::post("/").body(Body::empty()).unwrap();
    assert_eq!(
        encode(&empty_post).0,
        "POST / HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
    );
    let streamed = Request::post("/").body(streaming_body(&["a"])).unwrap();
    assert_eq!(
        encode(&streamed),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".into(),
            Ok(request::BodyFraming::Chunked)
        )
    );
    let sized = Request::put("/")
        .header("content-length", "1")
        .body(streaming_body(&["a"]))
        .unwrap();
    assert_eq!(encode(&sized).1, Ok(request::BodyFraming::Length(1)));
    let twice = Request::post("/")
        .header("content-length", "1")
        .header("content-length", "1")
        .body(streaming_body(&["a"]))
        .unwrap();
    assert_eq!(
        encode(&twice).1,
        Err("several Content-Length fields".into())
    );
}

/// A connection to a fresh listener, and the listener's side of it.
async fn pair() -> (Connection, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (Connection::new(Stream::Tcp(client), MAX_HEAD), server)
}

/// Reads from `server` until `expected` bytes have come.
async fn read_exactly(server: &mut TcpStream, expected: usize) -> Vec<u8> {
    let mut got = vec![0; expected];
    server.read_exact(&mut got).await.unwrap();
    got
}

/// Reads a request head from `server` byte by byte, so that nothing after it is taken.
async fn read_request_head(server: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(server.read_u8().await.unwrap());
    }
    head
}

fn get() -> Request<Body> {
    Request::builder()
        .uri("/")
        .header("host", "u")
        .body(Body::empty())
        .unwrap()
}

const GET_BYTES: &[u8] = b"GET / HTTP/1.1\r\nhost: u\r\n\r\n";

fn test_pool() -> Arc<Pool> {
    Arc::new(Pool::new(
        1,
        PoolConfig {
            max_idle: 4,
            idle_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(1),
            max_response_head: MAX_HEAD,
            proxy_header: None,
            multiplexed: false,
        },
    ))
}

#[tokio::test]
async fn interim_responses_are_skipped_and_a_small_body_comes_with_the_head() {
    let (mut conn, mut server) = pair().await;
    let upstream = tokio::spawn(async move {
        assert_eq!(read_exactly(&mut server, GET_BYTES.len()).await, GET_BYTES);
        server
            .write_all(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            )
            .await
            .unwrap();
        server
    });
    let head = conn.send(&mut get()).await.unwrap();
    let _server = upstream.await.unwrap();
    assert_eq!(head.parts.status, StatusCode::OK);
    match Start::new(conn, head.framing, head.keep_alive) {
        Start::Complete { body, reusable } => {
            assert_eq!(body, "hello");
            assert!(reusable.is_some());
        }
        Start::Streaming(_) => panic!("the whole body was read with the head"),
    }
}

#[tokio::test]
async fn a_chunked_body_streams_and_its_connection_goes_home_at_the_end() {
    let (mut conn, mut server) = pair().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<&'static [u8]>(1);
    let upstream = tokio::spawn(async move {
        read_exactly(&mut server, GET_BYTES.len()).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
            .await
            .unwrap();
        while let Some(bytes) = rx.recv().await {
            server.write_all(bytes).await.unwrap();
        }
        server
    });
    let head = conn.send(&mut get()).await.unwrap();
    let Start::Streaming(body) = Start::new(conn, head.framing, head.keep_alive) else {
        panic!("a chunked body streams");
    };
    let pool = test_pool();
    let mut body = body.returning_to(Home::new(&pool, 0, None));
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "hel"
    );
    tx.send(b"lo\r\n6\r\n world\r\n").await.unwrap();
    tx.send(b"0\r\nx-trailer: 1\r\n\r\n").await.unwrap();
    let mut rest = Vec::new();
    while let Some(frame) = body.frame().await {
        rest.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    assert_eq!(rest, b"lo world");
    assert!(http_body::Body::is_end_stream(&body));
    drop(tx);
    let _server = upstream.await.unwrap();
    assert!(
        pool.checkout(0, None).is_some(),
        "the connection is back in the pool"
    );
}

#[tokio::test]
async fn a_body_cut_short_or_badly_chunked_fails_and_its_connection_is_not_reused() {
    for (response, framing) in [
        (
            &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"[..],
            Framing::Length(10),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            Framing::Chunked,
        ),
    ] {
        let (mut conn, mut server) = pair().await;
        let upstream = tokio::spawn(async move {
            read_exactly(&mut server, GET_BYTES.len()).await;
            server.write_all(response).await.unwrap();
            // Closed here: a length body is cut short.
        });
        let head = conn.send(&mut get()).await.unwrap();
        assert_eq!(head.framing, framing);
        upstream.await.unwrap();
        let Start::Streaming(body) = Start::new(conn, head.framing, head.keep_alive) else {
            panic!("the body is incomplete");
        };
        let pool = test_pool();
        let err = body
            .returning_to(Home::new(&pool, 0, None))
            .collect()
            .await
            .unwrap_err();
        if framing == Framing::Chunked {
            assert!(err.is::<scb_core::http1::chunked::ChunkError>(), "{err}");
        } else {
            assert!(err.is::<body::Truncated>(), "{err}");
        }
        assert_eq!(pool.idle(0), 0);
    }
}

#[tokio::test]
async fn a_close_delimited_body_ends_with_the_connection() {
    let (mut conn, mut server) = pair().await;
    tokio::spawn(async move {
        read_exactly(&mut server, GET_BYTES.len()).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\n\r\nall of ")
            .await
            .unwrap();
        server.write_all(b"it").await.unwrap();
    });
    let head = conn.send(&mut get()).await.unwrap();
    let Start::Streaming(body) = Start::new(conn, head.framing, head.keep_alive) else {
        panic!("a close-delimited body streams");
    };
    let pool = test_pool();
    let body = body
        .returning_to(Home::new(&pool, 0, None))
        .collect()
        .await
        .unwrap();
    assert_eq!(body.to_bytes(), "all of it");
    assert_eq!(pool.idle(0), 0);
}

#[tokio::test]
async fn request_bodies_go_out_framed_as_declared() {
    let (mut conn, mut server) = pair().await;
    let big = "x".repeat(DIRECT_WRITE);
    let mut req = Request::post("/")
        .body(streaming_body(&["hello", " ", &big]))
        .unwrap();
    let expected = format!(
        "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n1\r\n \r\n{:x}\r\n{}\r\n0\r\n\r\n",
        DIRECT_WRITE,
        "x".repeat(DIRECT_WRITE)
    );
    let len = expected.len();
    let upstream = tokio::spawn(async move {
        let got = read_exactly(&mut server, len).await;
        server
            .write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        (got, server)
    });
    let head = conn.send(&mut req).await.unwrap();
    assert_eq!(head.parts.status, StatusCode::CREATED);
    let (got, _server) = upstream.await.unwrap();
    assert_eq!(String::from_utf8(got).unwrap(), expected);

    // A body that does not keep to its Content-Length fails the send.
    for (declared, chunks) in [("3", &["ab"][..]), ("1", &["ab"][..])] {
        let (mut conn, _server) = pair().await;
        let mut req = Request::post("/")
            .header(header::CONTENT_LENGTH, declared)
            .body(streaming_body(chunks))
            .unwrap();
        assert!(matches!(conn.send(&mut req).await, Err(SendError::Body(_))));
    }
}

#[tokio::test]
async fn a_close_before_the_response_tells_whether_any_of_it_came() {
    let (mut conn, mut server) = pair().await;
    tokio::spawn(async move {
        read_exactly(&mut server, GET_BYTES.len()).await;
    });
    assert!(matches!(conn.send(&mut get()).await, Err(SendError::Io(_))));

    let (mut conn, mut server) = pair().await;
    tokio::spawn(async move {
        read_exactly(&mut server, GET_BYTES.len()).await;
        server.write_all(b"HTTP/1.1 200 OK\r\nConte").await.unwrap();
    });
    assert!(matches!(
        conn.send(&mut get()).await,
        Err(SendError::Invalid("closed inside a response"))
    ));
}

#[tokio::test]
async fn an_idle_connection_is_closed_once_its_peer_closed_it_or_sent_junk() {
    let (mut conn, server) = pair().await;
    assert!(!conn.is_closed());
    drop(server);
    conn.stream.readable().await.unwrap();
    assert!(conn.is_closed());

    let (mut conn, mut server) = pair().await;
    server.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
    conn.stream.readable().await.unwrap();
    assert!(conn.is_closed());
}

/// A request body that yields `chunk` over and over, without end.
fn endless_body(chunk: &'static [u8]) -> Body {
    let frames = futures_util::stream::repeat_with(move || {
        Ok::<_, BoxError>(Frame::data(Bytes::from_static(chunk)))
    });
    Body::new(StreamBody::new(frames))
}

#[tokio::test]
async fn an_upstream_that_answers_before_the_body_is_sent_is_heard() {
    // An upload refused at its head: the upstream answers 413 and reads nothing more. The
    // body would fill every socket buffer and block; the answer is read instead.
    let (mut conn, mut server) = pair().await;
    let mut req = Request::post("/upload")
        .header("host", "u")
        .body(endless_body(&[b'x'; 16 * 1024]))
        .unwrap();
    let upstream = tokio::spawn(async move {
        read_request_head(&mut server).await;
        server
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        // What the proxy wrote before it heard the answer, then the end of it: the proxy
        // half-closes rather than leaving the upstream waiting for the rest.
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        server
    });
    let head = tokio::time::timeout(WAIT, conn.send(&mut req))
        .await
        .expect("the answer is heard while the body is going out")
        .unwrap();
    assert_eq!(head.parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        !head.keep_alive,
        "half a request is on the connection: never reused"
    );
    let server = tokio::time::timeout(WAIT, upstream)
        .await
        .expect("the upstream saw the request end")
        .unwrap();
    drop(server);
}

#[tokio::test]
async fn interim_answers_during_the_body_do_not_stop_it() {
    // 32 MiB: more than the socket buffers on both sides hold, so the proxy is still
    // writing (and watching the socket) when the 103 comes, whatever their sizes.
    const LEN: usize = 32 << 20;
    let (mut conn, mut server) = pair().await;
    let body = vec![b'y'; LEN];
    let mut req = Request::post("/")
        .header("host", "u")
        .header("content-length", LEN.to_string())
        .body(Body::from(body))
        .unwrap();
    let upstream = tokio::spawn(async move {
        read_request_head(&mut server).await;
        server
            .write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n")
            .await
            .unwrap();
        let got = read_exactly(&mut server, LEN).await;
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        (got.len(), server)
    });
    let head = tokio::time::timeout(WAIT, conn.send(&mut req))
        .await
        .expect("the exchange ends")
        .unwrap();
    assert_eq!(head.parts.status, StatusCode::OK);
    assert!(head.keep_alive);
    let (got, _server) = upstream.await.unwrap();
    assert_eq!(got, LEN);
}

#[test]
fn only_a_final_answer_stops_the_body() {
    for (bytes, interim) in [
        (&b""[..], true),
        (b"HTTP/1.1 1", true),
        (b"HTT", true),
        (b"HTTP/1.1 100 Continue\r\n", true),
        (b"HTTP/1.1 100 Continue\r\n\r\n", true),
        // Bare LF line ends, as httparse (and so the head reader) takes them.
        (
            b"HTTP/1.1 100 Continue\n\nHTTP/1.1 413 Too Large\r\n",
            false,
        ),
        (b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 1", true),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413", false),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", false),
        (b"HTTP/1.1 2", true),
        (b"HTTP/1.1 200", false),
        (b"HTTP/1.0 404 Not Found\r\n", false),
        (b"garbage", false),
    ] {
        assert_eq!(
            response::only_interim(bytes),
            interim,
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[tokio::test]
async fn a_checkin_closes_the_stale_connections_at_the_bottom() {
    let pool = test_pool();
    let (stale, server) = pair().await;
    drop(server);
    // The runtime has seen the close before the next checkin looks.
    stale.stream.readable().await.unwrap();
    pool.checkin(0, stale, None);
    assert_eq!(pool.idle(0), 1);
    let (fresh, _server) = pair().await;
    let (newer, _server2) = pair().await;
    pool.checkin(0, fresh, None);
    assert_eq!(pool.idle(0), 1, "the closed one went, the fresh one stayed");
    pool.checkin(0, newer, None);
    assert_eq!(pool.idle(0), 2);
}

#[tokio::test]
async fn a_connection_that_named_a_client_is_reused_only_for_that_client() {
    let pool = test_pool();
    let alice = Some((
        "203.0.113.1:40000".parse().unwrap(),
        "127.0.0.1:443".parse().unwrap(),
    ));
    let bob = Some((
        "203.0.113.2:40000".parse().unwrap(),
        "127.0.0.1:443".parse().unwrap(),
    ));
    let mut servers = Vec::new();
    for owner in [alice, None] {
        let (conn, server) = pair().await;
        servers.push(server);
        pool.checkin(0, conn, owner);
    }
    assert!(
        pool.checkout(0, bob).is_none(),
        "bob gets nobody's connection"
    );
    // Alice's is below the shared one in the stack, and still found.
    assert!(pool.checkout(0, alice).is_some());
    assert!(pool.checkout(0, alice).is_none(), "only one was alice's");
    assert!(pool.checkout(0, None).is_some());
    assert_eq!(pool.idle(0), 0);
}
