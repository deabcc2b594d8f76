//! No client behaviour leaks a descriptor: after malformed requests, abandoned bodies,
//! abrupt closes and half-read responses, the process is back to the descriptors it had.
//! Its own test binary, so that no other test opens files while it counts.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use scb_core::server::{Limits, Server};
use scb_core::{Body, FileRegion};

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

#[test]
fn misbehaving_clients_leak_no_descriptors() {
    let path = std::env::temp_dir().join(format!("scb-fd-test-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 16 << 20]).unwrap();
    let file_path = path.clone();
    let mut limits = Limits::default();
    limits.header_read_timeout = Duration::from_millis(300);
    limits.body_read_timeout = Duration::from_millis(300);
    limits.send_timeout = Duration::from_millis(300);
    limits.keep_alive_timeout = Duration::from_millis(300);
    let bound = Server::builder()
        .workers(1)
        .limits(limits)
        .listen("127.0.0.1:0".parse().unwrap())
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(move |_| {
        let file_path = file_path.clone();
        tower::service_fn(move |req: Request<Body>| {
            let file_path = file_path.clone();
            async move {
                let res = if req.uri().path() == "/file" {
                    let file = std::fs::File::open(&file_path).unwrap();
                    Response::new(Body::file(FileRegion::new(Arc::new(file), 0, 16 << 20)))
                } else {
                    let _ = http_body_util::BodyExt::collect(req.into_body()).await;
                    Response::new(Body::from("ok"))
                };
                Ok::<_, std::convert::Infallible>(res)
            }
        })
    });
    // Warm up once so lazily opened descriptors (epoll, eventfd, timers) exist already.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut sink = Vec::new();
    s.read_to_end(&mut sink).unwrap();
    drop(s);
    let baseline = open_descriptors();

    let mut held = Vec::new();
    for i in 0..40 {
        let mut s = TcpStream::connect(addr).unwrap();
        match i % 8 {
            0 => s.write_all(b"GARBAGE\r\n\r\n").unwrap(),
            1 => {} // connect and close at once
            2 => s
                .write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\nabc")
                .unwrap(),
            3 => s
                .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap(),
            4 => s
                .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00")
                .unwrap(),
            5 => {
                // A large file response the client stops reading: send timeout.
                s.write_all(b"GET /file HTTP/1.1\r\nHost: t\r\n\r\n")
                    .unwrap();
                held.push(s);
                continue;
            }
            6 => {
                // Half a head, then silence: header deadline.
                s.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
                held.push(s);
                continue;
            }
            _ => {
                s.write_all(
                    b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
                )
                .unwrap();
                let _ = s.shutdown(Shutdown::Write);
            }
        }
        drop(s);
    }
    // The held client sockets are ours; every server-side socket must close by the
    // server's own timeouts (send, header, keep-alive) while we hold them and read nothing.
    // Closing is asynchronous: wait, bounded, for the count to settle.
    let deadline = Instant::now() + Duration::from_secs(15);
    while open_descriptors() > baseline + held.len() {
        assert!(
            Instant::now() < deadline,
            "descriptors leaked: {} open, {} expected",
            open_descriptors(),
            baseline + held.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(held);
    // The first wait can pass before the server has even accepted every connection (their
    // descriptors do not exist yet). One worker accepts in order: once a last request is
    // answered, every connection before it has been accepted.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    s.read_to_end(&mut sink).unwrap();
    drop(s);
    // Then every one of them must go. At most the baseline, not exactly it: the warm-up's
    // server-side socket may still have been open when the baseline was counted.
    while open_descriptors() > baseline {
        assert!(
            Instant::now() < deadline,
            "descriptors leaked: {} open, {baseline} expected",
            open_descriptors()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    handle.shutdown();
    handle.join();
    let _ = std::fs::remove_file(&path);
}
