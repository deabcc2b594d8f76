//! Differential test: scb's HTTP/1.1 driver against pure hyper, same handler, same byte
//! streams (pipelined, split across writes, bodies, HEAD, HTTP/1.0, close). The responses
//! must be byte-identical except for the Date value.

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

fn start_scb() -> (SocketAddr, ServerHandle) {
    let bound = Server::builder()
        .workers(1)
        .limits(Limits::default())
        .listen("127.0.0.1:0".parse().unwrap())
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    (
        addr,
        bound.start(|_| tower::service_fn(handle::<scb_core::Body>)),
    )
}

fn start_hyper() -> SocketAddr {
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
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(stream),
                            hyper::service::service_fn(handle::<hyper::body::Incoming>),
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
    }
    handle.shutdown();
    handle.join();
}
