//! HTTP/3 beside a listener (`ListenOptions::http3`), driven by a QUIC client (quinn and
//! h3's client): requests reach the same service as over TCP, with their facts; bodies
//! stream both ways; a HEAD gets the head alone; the body limit holds; several workers
//! each answer on the one port, and a client whose address changes stays with its worker;
//! clients sent a Retry are served; shutdown drains an open stream.

#![cfg(feature = "http3")]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use scb_core::Body;
use scb_core::server::quinn;
use scb_core::server::{ConnectInfo, Http3, Limits, ListenOptions, Server, ServerHandle};

struct Cert {
    der: rustls::pki_types::CertificateDer<'static>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn cert() -> Cert {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    Cert {
        der: cert.der().clone(),
        key: rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn server_config(cert: &Cert) -> quinn::ServerConfig {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der.clone()], cert.key.clone_key())
        .unwrap();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
    quinn::ServerConfig::with_crypto(Arc::new(crypto))
}

/// Set when `/slow` has arrived; `/slow` answers once `RELEASE` is notified.
static ARRIVED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RELEASE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Echoes what it was asked: method, path, version, the client's facts, the body's
/// length and trailers; `/slow` waits for the test, `/big` answers with 3 MB.
async fn answer(req: Request<Body>, worker: usize) -> Result<Response<Body>, Infallible> {
    let info = req.extensions().get::<ConnectInfo>().copied().unwrap();
    let (parts, body) = req.into_parts();
    if parts.uri.path() == "/slow" {
        // In flight until the test has begun the shutdown.
        let released = RELEASE.notified();
        ARRIVED.store(true, std::sync::atomic::Ordering::SeqCst);
        released.await;
    }
    if parts.uri.path() == "/worker" {
        return Ok(Response::new(Body::from(worker.to_string())));
    }
    if parts.uri.path() == "/big" {
        return Ok(Response::new(Body::from(vec![b'b'; 3_000_000])));
    }
    let collected = match body.collect().await {
        Ok(collected) => collected,
        Err(e) => {
            let mut res = Response::new(Body::from(format!("body error: {e}")));
            *res.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            return Ok(res);
        }
    };
    let trailer = collected
        .trailers()
        .and_then(|t| t.get("x-sum"))
        .map(|v| v.to_str().unwrap().to_owned());
    let len = collected.to_bytes().len();
    let text = format!(
        "{} {} {:?} secure={} local={} body={len} trailer={trailer:?}",
        parts.method,
        parts.uri.path(),
        parts.version,
        info.secure,
        info.local.port(),
    );
    Ok(Response::new(Body::from(text)))
}

fn start(workers: usize, limits: Limits, cert: &Cert) -> (SocketAddr, ServerHandle) {
    start_with(workers, limits, Http3::new(server_config(cert)))
}

fn start_with(workers: usize, limits: Limits, http3: Http3) -> (SocketAddr, ServerHandle) {
    let options = ListenOptions::new().http3(http3);
    let bound = Server::builder()
        .workers(workers)
        .limits(limits)
        .grace_period(Duration::from_secs(5))
        .listen_with("127.0.0.1:0".parse().unwrap(), options)
        .bind()
        .unwrap();
    let addr = bound.local_addrs()[0];
    let handle = bound.start(|w| {
        let worker = w.index;
        tower::service_fn(move |req| answer(req, worker))
    });
    (addr, handle)
}

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// A QUIC connection to `addr` trusting `cert`, from a socket of its own, and its h3
/// request sender (the connection's driver runs on a task).
/// A client configuration trusting `cert`, ALPN h3.
fn client_config(cert: &Cert) -> quinn::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der.clone()).unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    quinn::ClientConfig::new(Arc::new(crypto))
}

async fn connect(addr: SocketAddr, cert: &Cert) -> (quinn::Endpoint, SendRequest) {
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(client_config(cert));
    let conn = endpoint
        .connect(addr, "localhost")
        .unwrap()
        .await
        .expect("QUIC handshake");
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    (endpoint, send)
}

/// Sends `method path` with `body` (and a trailer, if given); the answer's status, its
/// fields and body.
async fn exchange(
    send: &mut SendRequest,
    method: Method,
    path: &str,
    body: &[u8],
    trailer: Option<&str>,
) -> (Response<()>, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    if !body.is_empty() {
        // In pieces, as a client streaming an upload does.
        for piece in body.chunks(16 * 1024) {
            stream
                .send_data(Bytes::copy_from_slice(piece))
                .await
                .unwrap();
        }
    }
    if let Some(sum) = trailer {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-sum", sum.parse().unwrap());
        stream.send_trailers(trailers).await.unwrap();
    }
    stream.finish().await.unwrap();
    let res = stream.recv_response().await.unwrap();
    let mut got = BytesMut::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        got.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    (res, got.freeze())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_http3_reach_the_service_with_their_facts_and_bodies_both_ways() {
    let cert = cert();
    let (addr, handle) = start(1, Limits::default(), &cert);
    let (_endpoint, mut send) = connect(addr, &cert).await;

    let (res, body) = exchange(&mut send, Method::GET, "/a", b"", None).await;
    assert_eq!(res.status(), StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(
        text,
        format!(
            "GET /a HTTP/3.0 secure=true local={} body=0 trailer=None",
            addr.port()
        )
    );
    assert_eq!(
        res.headers()["content-length"],
        text.len().to_string().as_str()
    );

    // A body in many frames, with a trailer; then a large answer.
    let upload = vec![b'u'; 200_000];
    let (_, body) = exchange(&mut send, Method::POST, "/up", &upload, Some("42")).await;
    assert!(
        String::from_utf8_lossy(&body).ends_with("body=200000 trailer=Some(\"42\")"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (res, body) = exchange(&mut send, Method::GET, "/big", b"", None).await;
    assert_eq!(res.headers()["content-length"], "3000000");
    assert_eq!(body.len(), 3_000_000);

    // HEAD: the head with the GET's length, no DATA.
    let (res, body) = exchange(&mut send, Method::HEAD, "/big", b"", None).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["content-length"], "3000000");
    assert!(body.is_empty());

    // Many streams at once on the one connection.
    let mut tasks = Vec::new();
    for i in 0..32 {
        let mut send = send.clone();
        tasks.push(tokio::spawn(async move {
            exchange(&mut send, Method::GET, &format!("/c/{i}"), b"", None).await
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let (_, body) = task.await.unwrap();
        assert!(String::from_utf8_lossy(&body).starts_with(&format!("GET /c/{i} ")));
    }
    handle.shutdown();
    handle.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_and_the_connection_goes_on() {
    let cert = cert();
    let mut limits = Limits::default();
    limits.max_body_bytes = 1000;
    let (addr, handle) = start(1, limits, &cert);
    let (_endpoint, mut send) = connect(addr, &cert).await;
    let (res, _) = exchange(&mut send, Method::POST, "/up", &[b'x'; 5000], None).await;
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A declared length over the limit is refused before the service sees the request.
    let req = Request::builder()
        .method(Method::POST)
        .uri("https://localhost/declared")
        .header("content-length", "5000")
        .body(())
        .unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    let res = stream.recv_response().await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (res, _) = exchange(&mut send, Method::GET, "/after", b"", None).await;
    assert_eq!(res.status(), StatusCode::OK);
    handle.shutdown();
    handle.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_worker_answers_on_the_one_port_and_shutdown_drains_an_open_stream() {
    let cert = cert();
    let (addr, handle) = start(2, Limits::default(), &cert);
    // Clients from many source ports: the kernel spreads them over both workers' sockets,
    // and each is answered by the worker that holds its connection.
    for i in 0..8 {
        let (_endpoint, mut send) = connect(addr, &cert).await;
        let (res, _) = exchange(&mut send, Method::GET, &format!("/w/{i}"), b"", None).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    let (_endpoint, mut send) = connect(addr, &cert).await;
    let slow =
        tokio::spawn(async move { exchange(&mut send, Method::GET, "/slow", b"", None).await });
    // The request is in flight when shutdown comes.
    while !ARRIVED.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    handle.shutdown();
    RELEASE.notify_one();
    let (res, body) = slow.await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).starts_with("GET /slow "));
    tokio::task::spawn_blocking(move || handle.join())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_client_address_changes_stays_with_its_worker() {
    let cert = cert();
    let (addr, handle) = start(2, Limits::default(), &cert);
    // Several clients, so that some are on each worker.
    let mut owners = std::collections::HashSet::new();
    for _ in 0..4 {
        let (endpoint, mut send) = connect(addr, &cert).await;
        let (_, owner) = exchange(&mut send, Method::GET, "/worker", b"", None).await;
        owners.insert(owner.clone());
        // Ten new source ports in turn (a NAT rebinding, a new network): the kernel
        // hashes each to either worker's socket, and every request is still answered,
        // by the worker that holds the connection.
        for i in 0..10 {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            endpoint.rebind(socket).unwrap();
            let (res, body) = exchange(&mut send, Method::GET, "/worker", b"", None).await;
            assert_eq!(res.status(), StatusCode::OK, "after rebinding {i}");
            assert_eq!(body, owner, "after rebinding {i}");
        }
    }
    handle.shutdown();
    tokio::task::spawn_blocking(move || handle.join())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sent_a_retry_come_back_validated_and_are_served() {
    let cert = cert();
    // Every new client is sent a Retry first, as under a handshake flood.
    let http3 = Http3::new(server_config(&cert)).retry_above(0);
    let (addr, handle) = start_with(1, Limits::default(), http3);
    for i in 0..3 {
        let (_endpoint, mut send) = connect(addr, &cert).await;
        let (res, _) = exchange(&mut send, Method::GET, &format!("/r/{i}"), b"", None).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    handle.shutdown();
    tokio::task::spawn_blocking(move || handle.join())
        .await
        .unwrap();
}

/// A client's first datagram, an Initial, made by quinn's protocol state machine with no
/// socket of its own.
fn initial(addr: SocketAddr, cert: &Cert) -> Vec<u8> {
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn::EndpointConfig::default()),
        None,
        false,
        None,
    );
    let now = std::time::Instant::now();
    let (_, mut conn) = endpoint
        .connect(now, client_config(cert), addr, "localhost")
        .unwrap();
    let mut buf = Vec::new();
    let transmit = conn.poll_transmit(now, 1, &mut buf).unwrap();
    buf.truncate(transmit.size);
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_initials_past_the_threshold_is_answered_with_retries() {
    let cert = cert();
    let http3 = Http3::new(server_config(&cert)).retry_above(2);
    // The two handshakes begun never finish: shutdown waits for their timeout.
    let mut limits = Limits::default();
    limits.handshake_timeout = Duration::from_secs(1);
    let (addr, handle) = start_with(1, limits, http3);
    // Initials from 12 ports, none of which goes on with its handshake (a flood with
    // spoofed sources looks so): the first two begin handshakes, the server's answer an
    // Initial of its own; past them every one is answered with a stateless Retry.
    let mut kinds = Vec::new();
    for _ in 0..12 {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        socket.send_to(&initial(addr, &cert), addr).unwrap();
        let mut answer = [0u8; 1500];
        let (n, _) = socket
            .recv_from(&mut answer)
            .unwrap_or_else(|e| panic!("no answer to Initial {} ({kinds:?}): {e}", kinds.len()));
        assert!(n > 0 && answer[0] & 0x80 != 0, "a long-header answer");
        // QUIC v1 long header types: 0 Initial, 3 Retry.
        kinds.push((answer[0] >> 4) & 0b11);
    }
    assert_eq!(kinds, [0, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]);
    // A real client follows the Retry and is served.
    let (_endpoint, mut send) = connect(addr, &cert).await;
    let (res, _) = exchange(&mut send, Method::GET, "/after", b"", None).await;
    assert_eq!(res.status(), StatusCode::OK);
    handle.shutdown();
    tokio::task::spawn_blocking(move || handle.join())
        .await
        .unwrap();
}
