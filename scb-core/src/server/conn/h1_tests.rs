//! The driver on a real TCP connection, watched from the server's side of the socket
//! (a second descriptor of it): what the client cannot see, such as `TCP_NODELAY`.

use std::net::SocketAddr;
use std::os::fd::AsFd as _;
use std::rc::Rc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::{Parkable, Start, serve};
use crate::Body;
use crate::server::Limits;
use crate::server::conn::{ConnCtx, ConnectInfo, Peer};
use crate::server::shutdown::Trigger;

/// Reads one response whose body is `hello` (5 bytes, by its Content-Length).
async fn read_response(client: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\nhello") {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Serves the one connection `listener` accepts, with its server-side socket's second
/// descriptor for the test to look at.
async fn accept_and_serve(
    listener: &TcpListener,
    seen: tokio::sync::oneshot::Sender<std::net::TcpStream>,
) {
    let (stream, remote) = listener.accept().await.unwrap();
    let watch = std::net::TcpStream::from(stream.as_fd().try_clone_to_owned().unwrap());
    seen.send(watch).unwrap();
    let ctx = Rc::new(ConnCtx {
        limits: Limits::default(),
        request_id_header: crate::request_id::X_REQUEST_ID,
        shutdown: Trigger::new(),
        metrics: None,
    });
    let local: SocketAddr = listener.local_addr().unwrap();
    let peer = Peer::plain(ConnectInfo {
        remote,
        local,
        secure: false,
    });
    let mut svc = tower::service_fn(|_req: http::Request<Body>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Body::from("hello")))
    });
    let start = Start::New { detect_h2: false };
    serve(stream, start, false, &peer, &mut svc, &ctx).await;
}

/// Nagle stays on for a connection that answers one request in one write and closes
/// (no `setsockopt` for it), and goes off before a kept connection's second response.
#[tokio::test]
async fn nagle_goes_off_before_the_second_write_and_not_for_one_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();

    // One request with `Connection: close`: one write, then the close (seen once the
    // test's own descriptor of the socket is closed too).
    let (seen, watch) = tokio::sync::oneshot::channel();
    let client = async {
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        read_response(&mut client).await;
        let watch: std::net::TcpStream = watch.await.unwrap();
        assert!(!watch.nodelay().unwrap());
        drop(watch);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    };
    tokio::join!(accept_and_serve(&listener, seen), client);

    // Kept alive: the first answer with Nagle on, the second with it off.
    let (seen, watch) = tokio::sync::oneshot::channel();
    let client = async {
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        read_response(&mut client).await;
        let watch: std::net::TcpStream = watch.await.unwrap();
        assert!(
            !watch.nodelay().unwrap(),
            "off before the second write only"
        );
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        read_response(&mut client).await;
        assert!(watch.nodelay().unwrap());
    };
    tokio::join!(accept_and_serve(&listener, seen), client);
}

/// Makes this thread's worker crowded (past `KEEP_IDLE_BUFFERS_UP_TO` connections open)
/// while it lives.
struct Crowd;

impl Crowd {
    fn new() -> Self {
        for _ in 0..=super::KEEP_IDLE_BUFFERS_UP_TO {
            crate::server::open_connections::opened();
        }
        Self
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for _ in 0..=super::KEEP_IDLE_BUFFERS_UP_TO {
            crate::server::open_connections::closed();
        }
    }
}

/// A connected pair: the client, and the server's accepted side.
async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (client.unwrap(), accepted.unwrap().0)
}

/// Serves `stream` from `start` with `park` until the driver is done with it.
async fn serve_hello(stream: TcpStream, start: Start, park: bool) -> Option<Parkable<TcpStream>> {
    let ctx = Rc::new(ConnCtx {
        limits: Limits::default(),
        request_id_header: crate::request_id::X_REQUEST_ID,
        shutdown: Trigger::new(),
        metrics: None,
    });
    let peer = Peer::plain(ConnectInfo {
        remote: stream.peer_addr().unwrap(),
        local: stream.local_addr().unwrap(),
        secure: false,
    });
    let mut svc = tower::service_fn(|_req: http::Request<Body>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Body::from("hello")))
    });
    serve(stream, start, park, &peer, &mut svc, &ctx).await
}

/// Sends one keep-alive request and reads its answer.
async fn ask(client: &mut TcpStream) {
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    read_response(client).await;
}

/// On a crowded worker, a keep-alive connection still idle after `IDLE_CHECK` is handed
/// back to be parked (Nagle off, the socket whole), and served again from `Resumed`; a
/// busy one is not (its next request comes within the check).
#[tokio::test(start_paused = true)]
async fn an_idle_connection_of_a_crowded_worker_is_handed_back_to_be_parked() {
    let _crowd = Crowd::new();
    let (mut client, stream) = pair().await;
    let began = tokio::time::Instant::now();
    let client_side = async {
        ask(&mut client).await;
        ask(&mut client).await;
    };
    let (parked, ()) = tokio::join!(
        serve_hello(stream, Start::New { detect_h2: false }, true),
        client_side
    );
    let parked = parked.expect("not handed back to be parked");
    assert!(began.elapsed() >= super::IDLE_CHECK);
    let keep_alive = Limits::default().keep_alive_timeout;
    assert!(began.elapsed() < keep_alive);
    // Its keep-alive deadline runs from when it went idle, not from when it was parked.
    let now = tokio::time::Instant::now();
    assert!(parked.keep_alive_until + super::IDLE_CHECK <= now + keep_alive);
    assert!(parked.keep_alive_until > now);
    let parked = parked.io;
    assert!(parked.nodelay().unwrap(), "parked with Nagle on");

    // Its next request, on the same socket, is answered from where it left off; idle
    // again, it is handed back again.
    let began = tokio::time::Instant::now();
    let (parked, ()) = tokio::join!(serve_hello(parked, Start::Resumed, true), ask(&mut client));
    assert!(parked.is_some());
    assert!(began.elapsed() >= super::IDLE_CHECK);
}

/// A connection that went idle on a worker that was not crowded keeps its buffers; once
/// the worker becomes crowded it gives them back and, idle still, is handed back to be
/// parked.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_parked_when_its_worker_becomes_crowded_while_it_waits() {
    let (mut client, stream) = pair().await;
    let serving = serve_hello(stream, Start::New { detect_h2: false }, true);
    let client_side = async {
        ask(&mut client).await;
        // Idle, holding its buffers, on a worker with one connection; then 257 more.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        Crowd::new()
    };
    let (parked, crowd) = tokio::join!(serving, client_side);
    let parked = parked.expect("not handed back to be parked");
    assert!(parked.io.nodelay().unwrap());
    drop(crowd);
}

/// Without `park` (a TLS or Unix connection), an idle connection of a crowded worker
/// waits in its task until the keep-alive timeout.
#[tokio::test(start_paused = true)]
async fn without_park_an_idle_connection_waits_out_its_keep_alive_timeout() {
    let _crowd = Crowd::new();
    let (mut client, stream) = pair().await;
    let began = tokio::time::Instant::now();
    let (kept, ()) = tokio::join!(
        serve_hello(stream, Start::New { detect_h2: false }, false),
        ask(&mut client)
    );
    assert!(kept.is_none());
    assert!(began.elapsed() >= Limits::default().keep_alive_timeout);
    let mut rest = Vec::new();
    assert_eq!(client.read_to_end(&mut rest).await.unwrap(), 0);
}
