//! Differential test: scb's HTTP/1.1 driver against pure hyper, same handler, same byte
//! streams (pipelined, split across writes, bodies, HEAD, HTTP/1.0, close). The responses
//! must be byte-identical except for the Date value. Malformed streams (every framing
//! refusal of RFC 9112) must get the same kind of verdict from both, or one where scb is
//! the stricter for a stated reason, and the same verdict from scb however the stream is
//! split.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use scb_core::server::{Limits, Server, ServerHandle};

/// The handler both servers run.
async fn handle<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let path = req.uri().path().to_owned();
    let res = match path.as_str() {
        "/hello" => Response::builder()
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(b"Hello, world!"))),
        "/echo" => {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            Response::builder().body(Full::new(body))
        }
        "/empty" => Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(Full::new(Bytes::new())),
        "/not-modified" => Response::builder()
            .status(StatusCode::NOT_MODIFIED)
            .header("etag", "\"x\"")
            .body(Full::new(Bytes::new())),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("x-custom", "a")
            .header("x-custom", "b")
            .body(Full::new(Bytes::from_static(b"missing"))),
    };
    Ok(res.unwrap())
}

/// A handshake that secures nothing: the connection goes on as the transport a TLS
/// listener's connections are (a boxed stream, no `sendfile`), through the same driver.
/// rustls itself only moves bytes; what the driver does with them is what is compared.
struct PassThrough;

impl scb_core::server::Handshake for PassThrough {
    fn handshake(&self, tcp: tokio::net::TcpStream) -> scb_core::server::HandshakeFuture {
        Box::pin(async move {
            Ok(scb_core::server::Secured::new(
                Box::new(tcp),
                scb_core::server::Protocol::Http1,
            ))
        })
    }
}

fn start_scb() -> (SocketAddr, ServerHandle) {
    start_scb_on(false)
}

/// scb's server, one worker, on a plain listener or on a secure one with [`PassThrough`].
fn bind_scb(secure: bool) -> (SocketAddr, scb_core::server::BoundServer) {
    let builder = Server::builder().workers(1).limits(Limits::default());
    let addr = "127.0.0.1:0".parse().unwrap();
    let builder = if secure {
        builder.listen_secure(addr, std::sync::Arc::new(PassThrough))
    } else {
        builder.listen(addr)
    };
    let bound = builder.bind().unwrap();
    (bound.local_addrs()[0], bound)
}

/// scb with [`handle`].
fn start_scb_on(secure: bool) -> (SocketAddr, ServerHandle) {
    let (addr, bound) = bind_scb(secure);
    (
        addr,
        bound.start(|_| tower::service_fn(handle::<scb_core::Body>)),
    )
}

/// hyper's server with [`handle`].
fn start_hyper() -> SocketAddr {
    start_hyper_with(handle::<hyper::body::Incoming>, false)
}

/// hyper's HTTP/1 server with `handler`, on a thread of its own for the test's life.
fn start_hyper_with<F, Fut>(handler: F, half_close: bool) -> SocketAddr
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .half_close(half_close)
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(stream),
                            hyper::service::service_fn(handler),
                        )
                        .await;
                });
            }
        });
    });
    addr
}

/// Sends `parts` as separate writes and reads everything until the server closes.
fn exchange(addr: SocketAddr, parts: &[&[u8]]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for part in parts {
        s.write_all(part).unwrap();
        s.flush().unwrap();
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    // Date is the one field allowed to differ.
    text.split("\r\n")
        .map(|line| {
            if line.starts_with("date: ") {
                "date: <date>"
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

const CLOSE: &[u8] = b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

#[test]
fn fast_path_and_hyper_answer_byte_identically() {
    let (scb, handle) = start_scb();
    let (secure, secure_handle) = start_scb_on(true);
    let hyper = start_hyper();
    let streams: Vec<(&str, Vec<&[u8]>)> = vec![
        ("single close", vec![CLOSE]),
        (
            "pipelined",
            vec![b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\nGET /missing HTTP/1.1\r\nHost: t\r\n\r\nHEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n", CLOSE],
        ),
        (
            "split across writes",
            vec![b"GE", b"T /hel", b"lo HTTP/1.1\r\nHo", b"st: t\r", b"\n\r\n", CLOSE],
        ),
        (
            "length body",
            vec![b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello", b" world", CLOSE],
        ),
        (
            "chunked body",
            vec![b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", b"6\r\n world\r\n0\r\n\r\n", CLOSE],
        ),
        ("no content and not modified", vec![b"GET /empty HTTP/1.1\r\nHost: t\r\n\r\nGET /not-modified HTTP/1.1\r\nHost: t\r\n\r\n", CLOSE]),
        ("http/1.0", vec![b"GET /hello HTTP/1.0\r\n\r\n"]),
        ("http/1.0 keep-alive", vec![b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /missing HTTP/1.0\r\n\r\n"]),
        ("head", vec![b"HEAD /missing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"]),
    ];
    for (name, parts) in streams {
        let ours = exchange(scb, &parts);
        let theirs = exchange(hyper, &parts);
        assert!(!ours.is_empty(), "{name}: no response");
        assert_eq!(ours, theirs, "{name}: scb and hyper differ");
        // The secure listener's transport: the same driver, the same bytes.
        assert_eq!(
            exchange(secure, &parts),
            ours,
            "{name}: secure transport differs"
        );
    }
    handle.shutdown();
    handle.join();
    secure_handle.shutdown();
    secure_handle.join();
}

/// What a server made of a stream: the handler's answer, a refusal (the server's own
/// status, the handler never called), or a closed connection with no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    Handled(String),
    Refused(u16),
    Closed,
}

/// Sends `parts` as separate writes, then reads the first response (or the close).
fn verdict(addr: SocketAddr, parts: &[&[u8]]) -> Verdict {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for part in parts {
        // The server may already have refused and closed: that is a verdict too.
        if s.write_all(part).is_err() {
            break;
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    let Some(status) = text
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
    else {
        return Verdict::Closed;
    };
    match text.split_once("\r\n\r\n") {
        Some((_, body)) if status == 200 && body.starts_with("handled ") => {
            Verdict::Handled(body.lines().next().unwrap_or_default().to_owned())
        }
        _ => Verdict::Refused(status),
    }
}

/// The handler of the malformed-stream test: says what it received.
async fn handled<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let head = format!("{} {}", req.method(), req.uri());
    let body = match req.into_body().collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => "<body error>".to_owned(),
    };
    Ok(Response::new(Full::new(Bytes::from(format!(
        "handled {head} [{body}]\n"
    )))))
}

/// scb's server with [`handled`].
fn start_scb_handled(secure: bool) -> (SocketAddr, ServerHandle) {
    let (addr, bound) = bind_scb(secure);
    (
        addr,
        bound.start(|_| tower::service_fn(handled::<scb_core::Body>)),
    )
}

/// hyper's server with [`handled`]. `verdict` shuts its write side after the stream:
/// without half-close support hyper may see that EOF before it answers and close instead,
/// depending on timing (scb's driver answers either way).
fn start_hyper_handled() -> SocketAddr {
    start_hyper_with(handled::<hyper::body::Incoming>, true)
}

/// Whether a verdict refuses the request: a 4xx/5xx of the server's own, or a close.
fn refuses(v: &Verdict) -> bool {
    matches!(v, Verdict::Refused(_) | Verdict::Closed)
}

/// Every framing refusal of RFC 9112 and a few neighbours, as whole request streams, with
/// `None` where hyper reaches the same kind of verdict and, where it does not, why scb's
/// stricter reading is the safer one.
const MALFORMED: [(&str, &[u8], Option<&str>); 22] = [
    ("CL and TE", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Some("RFC 9112 6.3: a server may process CL+TE as chunked and close (hyper), or refuse it (scb): the classic smuggling shape, never guessed here")),
    ("two different CLs", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", None),
    ("two equal CLs", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", Some("RFC 9110 8.6 lets a recipient collapse identical values (hyper does); scb refuses any repeated Content-Length, which no honest client sends")),
    ("CL list", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\n\r\nhello", None),
    ("CL with a sign", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello", None),
    ("CL not a number", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: five\r\n\r\nhello", None),
    ("TE gzip only", b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nhello", None),
    ("TE chunked twice", b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", Some("hyper reads two chunked codings as one; scb refuses a repeated Transfer-Encoding field (a body coded twice would be decoded once)")),
    ("TE in HTTP/1.0", b"POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", None),
    ("obs-fold", b"GET /a HTTP/1.1\r\nHost: t\r\nX-A: one\r\n two\r\n\r\n", None),
    ("space before colon", b"GET /a HTTP/1.1\r\nHost: t\r\nX-A : one\r\n\r\n", None),
    ("chunk size junk", b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n", None),
    ("chunk size too large", b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n", None),
    ("chunk size negative", b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", None),
    ("chunk without CRLF", b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", None),
    ("no host", b"GET /a HTTP/1.1\r\n\r\n", Some("RFC 9112 3.2: a server must answer 400 to an HTTP/1.1 request without Host; hyper does not check")),
    ("two hosts", b"GET /a HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n", Some("RFC 9112 3.2: 400 for more than one Host; hyper does not check")),
    ("invalid host", b"GET /a HTTP/1.1\r\nHost: a b/c\r\n\r\n", Some("RFC 9112 3.2 with RFC 3986's host: 400; hyper does not check")),
    ("lower-case version", b"GET /a http/1.1\r\nHost: t\r\n\r\n", None),
    ("NUL in a value", b"GET /a HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n", None),
    ("bare LF line ends", b"GET /a HTTP/1.1\nHost: t\n\n", Some("RFC 9112 2.2 lets a recipient accept a bare LF; both do")),
    ("well formed, for the record", b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", None),
];

#[test]
fn malformed_streams_get_the_same_verdict_split_anywhere_and_hyper_agrees_or_is_laxer() {
    let (scb, handle) = start_scb_handled(false);
    let (secure, secure_handle) = start_scb_handled(true);
    let hyper = start_hyper_handled();
    for (name, stream, difference) in MALFORMED {
        let ours = verdict(scb, &[stream]);
        let theirs = verdict(hyper, &[stream]);
        match difference {
            None => assert_eq!(
                refuses(&ours),
                refuses(&theirs),
                "{name}: scb {ours:?}, hyper {theirs:?}"
            ),
            // A documented difference: scb may only ever be the stricter one, and a
            // request both accept must reach the handler the same way.
            Some(_) => {
                assert!(
                    refuses(&ours) || !refuses(&theirs),
                    "{name}: scb accepts what hyper refuses: {ours:?} vs {theirs:?}"
                );
                if !refuses(&ours) {
                    assert_eq!(ours, theirs, "{name}");
                }
            }
        }
        // However the bytes arrive, and on either transport, the verdict is the same.
        assert_eq!(verdict(secure, &[stream]), ours, "{name}: secure transport");
        for at in 1..stream.len() {
            let split = verdict(scb, &[&stream[..at], &stream[at..]]);
            assert_eq!(split, ours, "{name}: split at byte {at}");
        }
    }
    handle.shutdown();
    handle.join();
    secure_handle.shutdown();
    secure_handle.join();
}
