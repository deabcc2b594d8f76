//! [`FastCgi`] against a FastCGI application written here from the specification, which
//! records what it was sent; php-fpm itself is driven by scb-bin's tests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use scb_core::Body;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tower::{ServiceBuilder, ServiceExt as _};

use super::*;

/// One request as the application read it: its variables and its stdin.
type Received = (HashMap<String, String>, Vec<u8>);

/// What the application saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: Mutex<Vec<Received>>,
    /// Told each time a connection's end is read.
    closed: tokio::sync::Notify,
}

/// A root with the scripts the application knows.
struct Root(std::path::PathBuf);

impl Root {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "scb-fastcgi-svc-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(path.join("uploads/evil.jpg")).unwrap();
        for script in ["index.php", "slow.php", "cut.php", "big.php", "early.php"] {
            std::fs::write(path.join(script), "<?php").unwrap();
        }
        std::fs::write(path.join("uploads/evil.jpg/real"), "<?php").unwrap();
        Self(path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn read_record(s: &mut TcpStream) -> Option<(u8, u8, Vec<u8>)> {
    let mut h = [0; 8];
    s.read_exact(&mut h).await.ok()?;
    let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let mut content = vec![0; len + usize::from(h[6])];
    s.read_exact(&mut content).await.ok()?;
    content.truncate(len);
    Some((h[1], h[7], content))
}

fn record(kind: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in content.chunks(65_535) {
        out.extend_from_slice(&[1, kind, 0, 1]);
        out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
        out.extend_from_slice(&[3, 0]);
        out.extend_from_slice(piece);
        out.extend_from_slice(&[0; 3]);
    }
    out
}

fn end() -> Vec<u8> {
    record(3, &[0, 0, 0, 0, 0, 0, 0, 0])
}

fn decode_params(content: &[u8]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut at = 0;
    let len = |at: &mut usize| {
        if content[*at] < 128 {
            *at += 1;
            usize::from(content[*at - 1])
        } else {
            let b = &content[*at..*at + 4];
            *at += 4;
            (u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff) as usize
        }
    };
    while at < content.len() {
        let n = len(&mut at);
        let v = len(&mut at);
        out.insert(
            String::from_utf8_lossy(&content[at..at + n]).into_owned(),
            String::from_utf8_lossy(&content[at + n..at + n + v]).into_owned(),
        );
        at += n + v;
    }
    out
}

/// Serves requests on `stream` until it closes, or after one without `FCGI_KEEP_CONN`.
async fn serve_connection(mut s: TcpStream, seen: Arc<Seen>) {
    loop {
        let Some((1, _, begin)) = read_record(&mut s).await else {
            return;
        };
        let keep = begin[2] & 1 == 1;
        let mut params = Vec::new();
        while let Some((4, _, c)) = read_record(&mut s).await {
            if c.is_empty() {
                break;
            }
            params.extend_from_slice(&c);
        }
        let params = decode_params(&params);
        let script = params["SCRIPT_NAME"].clone();
        if script == "/early.php" {
            // Answers before reading its input, and ends.
            let mut out = record(6, b"Status: 413 Payload Too Large\r\n\r\ntoo big");
            out.extend(end());
            let _ = s.write_all(&out).await;
            return;
        }
        let mut stdin = Vec::new();
        while let Some((5, _, c)) = read_record(&mut s).await {
            if c.is_empty() {
                break;
            }
            stdin.extend_from_slice(&c);
        }
        let stdin_len = stdin.len();
        seen.requests.lock().unwrap().push((params.clone(), stdin));
        let mut out = Vec::new();
        match script.as_str() {
            "/slow.php" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            "/cut.php" => {
                out.extend(record(6, b"Content-Type: text/plain\r\n\r\nthe start"));
                let _ = s.write_all(&out).await;
                return;
            }
            "/big.php" => {
                out.extend(record(6, b"Content-Type: application/octet-stream\r\n\r\n"));
                let _ = s.write_all(&out).await;
                for _ in 0..5 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let _ = s.write_all(&record(6, &[b'x'; 60_000])).await;
                }
                let _ = s.write_all(&end()).await;
                out.clear();
            }
            _ => {
                out.extend(record(7, b"PHP Notice: a notice\n"));
                out.extend(record(
                    6,
                    format!(
                        "Status: 201 Created\r\nContent-Type: text/plain\r\nX-Path-Info: {}\r\n\r\n",
                        params["PATH_INFO"]
                    )
                    .as_bytes(),
                ));
                out.extend(record(6, format!("stdin={stdin_len}").as_bytes()));
                out.extend(record(6, b""));
                out.extend(end());
            }
        }
        if s.write_all(&out).await.is_err() || !keep {
            return;
        }
    }
}

async fn app() -> (std::net::SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let shared = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            shared.connections.fetch_add(1, Ordering::Relaxed);
            let seen = Arc::clone(&shared);
            tokio::spawn(async move {
                serve_connection(s, Arc::clone(&seen)).await;
                seen.closed.notify_one();
            });
        }
    });
    (addr, seen)
}

fn service(addr: std::net::SocketAddr, root: &Root) -> FastCgiBuilder {
    FastCgi::builder([Upstream::new(&addr.to_string()).unwrap()], &root.0)
}

async fn text(res: Response<Body>) -> String {
    String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn a_script_runs_with_its_variables_and_its_status() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root).build().unwrap();
    let svc = ServiceBuilder::new().service(fcgi);
    let res = svc
        .clone()
        .oneshot(
            Request::post("/index.php/users/7?x=1")
                .header("host", "app.example")
                .header("content-length", "5")
                .body(Body::full(Bytes::from_static(b"hello")))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(res.headers()["x-path-info"], "/users/7");
    assert_eq!(text(res).await, "stdin=5");
    let requests = seen.requests.lock().unwrap();
    let (params, stdin) = &requests[0];
    assert_eq!(stdin, b"hello");
    let root_dir = std::fs::canonicalize(&root.0).unwrap();
    assert_eq!(
        params["SCRIPT_FILENAME"],
        root_dir.join("index.php").to_str().unwrap()
    );
    assert_eq!(params["DOCUMENT_ROOT"], root_dir.to_str().unwrap());
    assert_eq!(params["REQUEST_URI"], "/index.php/users/7?x=1");
    assert_eq!(params["QUERY_STRING"], "x=1");
    assert_eq!(params["CONTENT_LENGTH"], "5");
    assert_eq!(params["HTTP_HOST"], "app.example");
}

#[tokio::test]
async fn connections_are_closed_after_each_request_unless_kept() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root).keep_conn(true).build().unwrap();
    for _ in 0..5 {
        let res = fcgi
            .clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(text(res).await, "stdin=0");
    }
    assert_eq!(seen.connections.load(Ordering::Relaxed), 1);
    // By default, without FCGI_KEEP_CONN, the application closes each one.
    let fcgi = service(addr, &root).build().unwrap();
    for _ in 0..3 {
        let res = fcgi
            .clone()
            .oneshot(Request::get("/index.php").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        text(res).await;
    }
    assert_eq!(seen.connections.load(Ordering::Relaxed), 4);
}

#[tokio::test]
async fn paths_that_name_no_script_beneath_the_root_never_reach_the_application() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root).build().unwrap();
    for path in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg/real",
        "/missing.php",
        "/../index.php",
        "/%2e%2e/index.php",
        "/index.php%00.jpg",
        "/style.css",
    ] {
        let res = fcgi
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(seen.connections.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn large_bodies_stream_both_ways() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root).keep_conn(true).build().unwrap();
    let upload = vec![b'u'; 3 * 1024 * 1024 + 17];
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, BoxError>>(4);
    let sent = upload.clone();
    tokio::spawn(async move {
        for piece in sent.chunks(100_000) {
            let _ = tx
                .send(Ok(http_body::Frame::data(Bytes::copy_from_slice(piece))))
                .await;
        }
    });
    let body = Body::new(http_body_util::StreamBody::new(tokio_stream_from(rx)));
    let res = fcgi
        .clone()
        .oneshot(
            Request::post("/index.php")
                .header("content-length", upload.len().to_string())
                .body(body)
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(text(res).await, format!("stdin={}", upload.len()));
    assert_eq!(seen.requests.lock().unwrap()[0].1, upload);
    let res = fcgi
        .clone()
        .oneshot(Request::get("/big.php").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        res.into_body().collect().await.unwrap().to_bytes().len(),
        300_000
    );
    // The streamed answer gave its connection back.
    let res = fcgi
        .clone()
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    text(res).await;
    assert_eq!(seen.connections.load(Ordering::Relaxed), 1);
}

/// A stream over an mpsc receiver (tokio-stream is not a dependency).
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn bodies_without_a_length_are_gathered_up_to_the_limit() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root).max_unsized_body(1000).build().unwrap();
    let unsized_body = |n: usize| {
        Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
            (0..n).map(|_| {
                Ok::<_, BoxError>(http_body::Frame::data(Bytes::from_static(b"0123456789")))
            }),
        )))
    };
    let res = fcgi
        .clone()
        .oneshot(Request::post("/index.php").body(unsized_body(50)).unwrap())
        .await
        .unwrap();
    assert_eq!(text(res).await, "stdin=500");
    assert_eq!(seen.requests.lock().unwrap()[0].0["CONTENT_LENGTH"], "500");
    let res = fcgi
        .clone()
        .oneshot(Request::post("/index.php").body(unsized_body(101)).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::LENGTH_REQUIRED);
    let res = fcgi
        .clone()
        .oneshot(
            Request::post("/index.php")
                .header("content-length", "20000000")
                .body(unsized_body(1))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(seen.requests.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn faults_in_a_row_get_their_statuses_and_the_service_recovers() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root)
        .response_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let get = |path: &'static str| {
        fcgi.clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
    };
    // No head in time: 504.
    assert_eq!(
        get("/slow.php").await.unwrap().status(),
        StatusCode::GATEWAY_TIMEOUT
    );
    // The answer breaks off: the body fails, so the client's connection is cut.
    let res = get("/cut.php").await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.into_body().collect().await.is_err());
    // An application that answers before reading the body, then ends.
    let res = fcgi
        .clone()
        .oneshot(
            Request::post("/early.php")
                .header("content-length", "2000000")
                .body(Body::full(Bytes::from(vec![0; 2_000_000])))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(text(res).await, "too big");
    // And after all that, a plain request is answered.
    let res = get("/index.php").await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(text(res).await, "stdin=0");
    assert!(seen.connections.load(Ordering::Relaxed) >= 3);
}

#[tokio::test]
async fn a_dead_pool_is_502_and_https_upstreams_are_refused() {
    let root = Root::new();
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let fcgi = service(addr, &root).build().unwrap();
    let res = fcgi
        .oneshot(Request::get("/index.php").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    let e = FastCgi::builder([Upstream::new("https://a.example").unwrap()], &root.0)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("https"), "{e}");
    assert!(
        FastCgi::builder([Upstream::new("127.0.0.1:9").unwrap()], "/no/such/root")
            .build()
            .is_err()
    );
}

/// The access log's `{status} {upstream} {upstream_status} {upstream_time_ms}` for one
/// `GET /index.php` through `fcgi`.
async fn logged_upstream(fcgi: FastCgi) -> String {
    let path = std::env::temp_dir().join(format!(
        "scb-fastcgi-log-{}-{}.log",
        std::process::id(),
        fastrand::u64(..)
    ));
    let template = scb_core::access_log::AccessLogTemplate::parse(
        "{status} {upstream} {upstream_status} {upstream_time_ms}",
    )
    .unwrap();
    let writer = scb_core::access_log::AccessLogWriter::file(&path, template.into()).unwrap();
    ServiceBuilder::new()
        .layer(scb_core::access_log::AccessLogLayer::new().writer(writer.clone()))
        .service(fcgi)
        .oneshot(Request::get("/index.php").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert!(writer.close(Duration::from_secs(10)));
    let line = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    line
}

#[tokio::test]
async fn the_application_s_status_and_time_are_noted_and_a_dash_when_none_answered() {
    let root = Root::new();
    let (addr, _seen) = app().await;
    let line = logged_upstream(service(addr, &root).build().unwrap()).await;
    let fields: Vec<&str> = line.trim_end().split(' ').collect();
    assert_eq!(fields[..3], ["201", &addr.to_string(), "201"], "{line}");
    let ms: f64 = fields[3].parse().unwrap();
    assert!((0.0..10_000.0).contains(&ms), "{line}");

    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let line = logged_upstream(service(dead, &root).build().unwrap()).await;
    assert_eq!(line, format!("502 {dead} - -\n"));
}

#[tokio::test]
async fn idle_connections_are_closed_by_the_sweep_without_traffic() {
    let root = Root::new();
    let (addr, seen) = app().await;
    let fcgi = service(addr, &root)
        .keep_conn(true)
        .pool_idle_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let res = fcgi
        .clone()
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    text(res).await;
    assert_eq!(fcgi.proxy.pool.idle(0), 1);
    // No request comes: the sweep alone closes the kept connection (and so frees the
    // php-fpm child it holds). The bound only keeps a broken sweep from hanging the test.
    tokio::time::timeout(Duration::from_secs(10), seen.closed.notified())
        .await
        .expect("the idle connection was closed");
    assert_eq!(fcgi.proxy.pool.idle(0), 0);
}

#[tokio::test]
async fn a_head_answer_without_the_scripts_own_length_has_none() {
    use http_body::Body as _;
    let root = Root::new();
    let (addr, _seen) = app().await;
    let fcgi = service(addr, &root).build().unwrap();
    let get = fcgi
        .clone()
        .oneshot(Request::get("/index.php").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(get.body().size_hint().exact(), Some(7));
    // php-fpm sends no output for a HEAD; the server must not say the GET's length is 0.
    let head = fcgi
        .oneshot(Request::head("/index.php").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::CREATED);
    assert!(!head.headers().contains_key(http::header::CONTENT_LENGTH));
    assert_eq!(head.body().size_hint().exact(), None);
}
