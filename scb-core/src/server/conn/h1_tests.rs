//! The driver on a real TCP connection, watched from the server's side of the socket
//! (a second descriptor of it): what the client cannot see, such as `TCP_NODELAY`.

use std::net::SocketAddr;
use std::os::fd::AsFd as _;
use std::rc::Rc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::{Start, serve};
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
