//! The server on Unix domain sockets: HTTP/1.1 keep-alive and h2c on every worker, the
//! peer as the layers see it, the socket file's mode, a reload keeping, restyling and
//! dropping the socket, and the file removed at the end.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use http::{Request, Response};
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::server::{ConnectInfo, Server, UnixListen};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-core-unix-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Answers with the peer the request's `ConnectInfo` names.
fn peer_echo() -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + 'static,
> + Clone
+ 'static {
    tower::service_fn(|req: Request<Body>| async move {
        let info = req.extensions().get::<ConnectInfo>().copied();
        let text = info.map_or("none".to_owned(), |i| format!("{} {}", i.remote, i.local));
        Ok::<_, Infallible>(Response::new(Body::from(text)))
    })
}

/// One keep-alive GET on `stream`: the body (Content-Length framed).
fn get(stream: &mut UnixStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: local\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0; len];
    stream.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn unix_listeners_serve_every_worker_reload_and_clean_up() {
    let dir = temp_dir("serve");
    let path = dir.join("scb.sock");
    let other = dir.join("other.sock");
    let bound = Server::builder()
        .workers(2)
        .listen("127.0.0.1:0".parse().unwrap())
        .listen_unix(UnixListen::new(&path).mode(0o600))
        .bind()
        .unwrap();
    assert_eq!(bound.unix_paths(), vec![path.as_path()]);
    let mut handle = bound.start(|_| peer_echo());
    assert_eq!(mode(&path), 0o600);

    // Keep-alive on one connection, and many connections (spread over both workers).
    let mut stream = UnixStream::connect(&path).unwrap();
    for _ in 0..3 {
        assert_eq!(get(&mut stream), "127.0.0.1:0 0.0.0.0:0");
    }
    for _ in 0..8 {
        assert_eq!(
            get(&mut UnixStream::connect(&path).unwrap()),
            "127.0.0.1:0 0.0.0.0:0"
        );
    }

    // h2c with prior knowledge, on a runtime of its own: dropped, it closes the
    // connection (an open one would hold the shutdown below for its grace period).
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let body = runtime().block_on(async {
        let io = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(io),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        let req = Request::get("http://local/")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let res = send.send_request(req).await.unwrap();
        assert_eq!(res.version(), http::Version::HTTP_2);
        res.into_body().collect().await.unwrap().to_bytes()
    });
    assert_eq!(body, "127.0.0.1:0 0.0.0.0:0");
    let runtime = runtime();

    // A reload: the path kept with a new mode (the open connection carries on), a second
    // path added.
    let next = Server::builder()
        .listen("127.0.0.1:0".parse().unwrap())
        .listen_unix(UnixListen::new(&path).mode(0o660))
        .listen_unix(UnixListen::new(&other));
    let prepared = handle.prepare(&next).unwrap();
    runtime.block_on(handle.apply(prepared));
    assert_eq!(mode(&path), 0o660);
    assert_eq!(get(&mut stream), "127.0.0.1:0 0.0.0.0:0");
    for _ in 0..4 {
        assert_eq!(
            get(&mut UnixStream::connect(&path).unwrap()),
            "127.0.0.1:0 0.0.0.0:0",
            "the kept socket still accepts new connections on every worker"
        );
    }
    assert_eq!(
        get(&mut UnixStream::connect(&other).unwrap()),
        "127.0.0.1:0 0.0.0.0:0"
    );

    // Dropped by the next: its file goes, and it refuses connections.
    let next = Server::builder().listen_unix(UnixListen::new(&other));
    let prepared = handle.prepare(&next).unwrap();
    runtime.block_on(handle.apply(prepared));
    assert!(!path.exists(), "the dropped socket's file is removed");
    assert!(UnixStream::connect(&path).is_err());
    assert_eq!(
        get(&mut stream),
        "127.0.0.1:0 0.0.0.0:0",
        "open connections drain"
    );
    drop(stream);

    handle.shutdown();
    handle.join();
    assert!(!other.exists(), "the socket file is removed at the end");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_path_another_server_accepts_on_is_refused_and_a_stale_one_replaced() {
    let dir = temp_dir("clash");
    let path = dir.join("scb.sock");
    let first = Server::builder()
        .workers(1)
        .listen_unix(UnixListen::new(&path))
        .bind()
        .unwrap()
        .start(|_| peer_echo());
    let e = Server::builder()
        .workers(1)
        .listen_unix(UnixListen::new(&path))
        .bind()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
    assert!(e.to_string().contains("scb.sock"), "{e}");
    // Taken over (an upgrade): new connections reach the new server.
    let second = Server::builder()
        .workers(1)
        .listen_unix(UnixListen::new(&path))
        .replace_unix_sockets(true)
        .bind()
        .unwrap()
        .start(|_| peer_echo());
    assert_eq!(
        get(&mut UnixStream::connect(&path).unwrap()),
        "127.0.0.1:0 0.0.0.0:0"
    );
    // The old one ends without removing the new one's file.
    first.shutdown();
    first.join();
    assert!(path.exists());
    UnixStream::connect(&path).expect("the new server still accepts");
    second.shutdown();
    second.join();
    assert!(!path.exists());
    std::fs::remove_dir_all(dir).unwrap();
}
