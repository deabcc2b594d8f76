//! scb's server with a `TlsAcceptor` listener (and a plain one for h2c): HTTP/2 and
//! HTTP/1.1 by ALPN, many streams on one connection, the limits it advertises, and how it
//! stands up to hostile HTTP/2 clients: rapid reset (CVE-2023-44487), malformed requests
//! (RFC 9113 §8.2.2), CONTINUATION floods, PING and SETTINGS floods.
//!
//! Well-behaved clients refuse to send most of the attacks, so those tests write raw frames
//! (with header blocks HPACK-encoded by hand). Rapid reset is run twice: with the `h2`
//! client over TLS (it sends HEADERS then RST_STREAM for a stream reset before it was
//! written), and with raw frames over h2c, where what reached the server is known exactly.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{KeyKind, Pki, connect};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use scb_core::Body;
use scb_core::server::{ConnectInfo, Limits, Server, ServerHandle, TlsInfo};
use scb_tls::{TlsAcceptor, TlsSettings};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The longest any one wait in these tests may take before it counts as a failure.
const BOUND: Duration = Duration::from_secs(5);

/// How long `/slow/..` holds each request: long enough that 100 requests sent at once
/// are all in the service together even on a loaded 2-core box.
const SLOW: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------------------

/// Requests inside `/slow/..` right now, and the most there ever were at once.
#[derive(Debug, Default)]
struct Load {
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// One worker (so a flood and its bystander share the thread), a plain listener (HTTP/1.1
/// and h2c) and a TLS listener with a certificate for `a.test`.
struct TestServer {
    plain: SocketAddr,
    tls: SocketAddr,
    pki: Pki,
    load: Arc<Load>,
    handle: ServerHandle,
}

impl TestServer {
    fn start(limits: Limits) -> Self {
        let pki = Pki::new();
        let files = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256Pkcs8);
        let acceptor = TlsAcceptor::new(TlsSettings::new([files])).unwrap();
        let bound = Server::builder()
            .workers(1)
            // A backstop only: every test drops its clients before stopping the server.
            .grace_period(Duration::from_secs(1))
            .limits(limits)
            .listen("127.0.0.1:0".parse().unwrap())
            .listen_secure("127.0.0.1:0".parse().unwrap(), Arc::new(acceptor))
            .bind()
            .unwrap();
        let (plain, tls) = (bound.local_addrs()[0], bound.local_addrs()[1]);
        let load = Arc::new(Load::default());
        let shared = Arc::clone(&load);
        let handle = bound.start(move |_| service(Arc::clone(&shared)));
        Self {
            plain,
            tls,
            pki,
            load,
            handle,
        }
    }

    fn stop(self) {
        self.handle.shutdown();
        self.handle.join();
    }
}

/// `/slow/<n>` answers `slow <n>` after [`SLOW`], counting itself in `load`; anything else
/// answers with what the server told it: `secure=<ConnectInfo.secure> version=<version>
/// tls=<TlsInfo.version>/<TlsInfo.cipher>` (`tls=none` without `TlsInfo`).
fn service(
    load: Arc<Load>,
) -> impl tower::Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + 'static,
> + Clone
+ 'static {
    tower::service_fn(move |req: Request<Body>| {
        let load = Arc::clone(&load);
        async move {
            let text = if let Some(n) = req.uri().path().strip_prefix("/slow/") {
                let now = load.now.fetch_add(1, Ordering::SeqCst) + 1;
                load.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(SLOW).await;
                load.now.fetch_sub(1, Ordering::SeqCst);
                format!("slow {n}")
            } else {
                let secure = match req.extensions().get::<ConnectInfo>() {
                    Some(info) => info.secure.to_string(),
                    None => "no ConnectInfo".to_owned(),
                };
                let tls = match req.extensions().get::<TlsInfo>() {
                    Some(tls) => format!("{}/{}", tls.version, tls.cipher.unwrap_or("-")),
                    None => "none".to_owned(),
                };
                format!("secure={secure} version={:?} tls={tls}", req.version())
            };
            Ok::<_, Infallible>(Response::new(Body::from(text)))
        }
    })
}

/// The clients' runtime. Tests run it with `block_on` in one statement, so that it (and
/// every connection it holds) is gone before the server is stopped: shutdown then has no
/// open connection to wait for.
fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Well-behaved clients (hyper)
// ---------------------------------------------------------------------------------------

type H2Sender = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;

/// An HTTP/2 client connection over `io` (h2c over TCP, or TLS that chose `h2`).
async fn h2_client<I>(io: I) -> H2Sender
where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

async fn h2c_client(addr: SocketAddr) -> H2Sender {
    h2_client(TcpStream::connect(addr).await.unwrap()).await
}

/// A GET on `sender`'s connection, answered in full within [`BOUND`].
async fn get(sender: &H2Sender, uri: &str) -> (StatusCode, Version, String) {
    let req = Request::get(uri).body(Empty::new()).unwrap();
    let mut sender = sender.clone();
    let exchange = async move {
        let res = sender.send_request(req).await.unwrap();
        let (parts, body) = res.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.version,
            String::from_utf8(body.into()).unwrap(),
        )
    };
    timeout(BOUND, exchange)
        .await
        .unwrap_or_else(|_| panic!("no answer to GET {uri} within {BOUND:?}"))
}

// ---------------------------------------------------------------------------------------
// Raw HTTP/2 frames
// ---------------------------------------------------------------------------------------

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

// Error codes (RFC 9113 §7).
const PROTOCOL_ERROR: u32 = 0x1;
const ENHANCE_YOUR_CALM: u32 = 0xb;

// SETTINGS parameters (RFC 9113 §6.5.2).
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// The window every HTTP/2 connection starts with (RFC 9113 §6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    assert!(len < 1 << 24, "frame payload too long");
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The client preface and an empty SETTINGS frame.
fn client_hello() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out
}

/// A request on `stream` in one HEADERS frame, without a body.
fn request(stream: u32, block: &Hpack) -> Vec<u8> {
    frame(HEADERS, END_STREAM | END_HEADERS, stream, &block.0)
}

#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    fn error_code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }

    /// The parameters of a SETTINGS frame.
    fn settings(&self) -> HashMap<u16, u32> {
        self.payload
            .chunks_exact(6)
            .map(|p| {
                (
                    u16::from_be_bytes([p[0], p[1]]),
                    u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
                )
            })
            .collect()
    }

    /// The status of a response HEADERS frame. h2 sends the statuses of HPACK's static
    /// table as one indexed byte (RFC 7541 Appendix A), which is all these tests expect.
    fn status(&self) -> Option<u16> {
        // A dynamic table size update (`001xxxxx`) may lead the block.
        let first = self.payload.iter().copied().find(|b| b & 0xe0 != 0x20)?;
        let statuses = [200, 204, 206, 304, 400, 404, 500];
        let index = first.checked_sub(0x88)?;
        statuses.get(usize::from(index)).copied()
    }
}

/// The next frame, `None` at end of stream. Errors (a reset connection) are returned.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 9];
    match r.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]);
    let mut payload = vec![0; usize::try_from(len).unwrap()];
    r.read_exact(&mut payload).await?;
    Ok(Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    }))
}

// HPACK static table indices (RFC 7541 Appendix A).
const AUTHORITY: u8 = 1;
const METHOD_GET: u8 = 2;
const PATH_ROOT: u8 = 4;
const SCHEME_HTTP: u8 = 6;
const STATUS: u8 = 8;

/// An HPACK header block encoded by hand: indexed fields and literals without indexing,
/// no Huffman coding, so any bytes (uppercase names, repeated pseudo-headers) can be sent.
#[derive(Clone, Debug, Default)]
struct Hpack(Vec<u8>);

impl Hpack {
    /// `GET http://t/`: `:method GET`, `:scheme http`, `:path /`, `:authority t`.
    fn get() -> Self {
        Self::default()
            .indexed(METHOD_GET)
            .indexed(SCHEME_HTTP)
            .indexed(PATH_ROOT)
            .name_indexed(AUTHORITY, "t")
    }

    /// A whole field from the static table.
    fn indexed(mut self, index: u8) -> Self {
        integer(&mut self.0, 7, 0x80, usize::from(index));
        self
    }

    /// A literal without indexing whose name is the static table's entry `index`.
    fn name_indexed(mut self, index: u8, value: &str) -> Self {
        integer(&mut self.0, 4, 0x00, usize::from(index));
        string(&mut self.0, value.as_bytes());
        self
    }

    /// A literal without indexing with a new name, sent exactly as given.
    fn field(mut self, name: &str, value: &str) -> Self {
        self.0.push(0x00);
        string(&mut self.0, name.as_bytes());
        string(&mut self.0, value.as_bytes());
        self
    }
}

/// An HPACK integer with an N-bit prefix (RFC 7541 §5.1).
fn integer(out: &mut Vec<u8>, prefix_bits: u32, flags: u8, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(flags | u8::try_from(value).unwrap());
        return;
    }
    out.push(flags | u8::try_from(max).unwrap());
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push(u8::try_from(rest % 0x80).unwrap() | 0x80);
        rest /= 0x80;
    }
    out.push(u8::try_from(rest).unwrap());
}

/// An HPACK string literal, not Huffman-coded (RFC 7541 §5.2).
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 7, 0x00, s.len());
    out.extend_from_slice(s);
}

/// What the server did with one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// A response HEADERS frame with this status (`None`: not one the test decodes).
    Response(Option<u16>),
    /// RST_STREAM with this error code.
    Reset(u32),
}

/// What a raw connection got back.
#[derive(Debug, Default)]
struct Exchange {
    answers: HashMap<u32, Answer>,
    /// The error code of the GOAWAY, if the server sent one.
    goaway: Option<u32>,
}

/// Sends the preface and `requests` (stream id, header block) at once, then reads until
/// every stream is answered or the server ends the connection. The server's SETTINGS get
/// their ACK; other frames are ignored.
async fn exchange<S>(io: &mut S, requests: &[(u32, Hpack)]) -> Exchange
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut out = client_hello();
    for (stream, block) in requests {
        out.extend(request(*stream, block));
    }
    io.write_all(&out).await.unwrap();
    let mut got = Exchange::default();
    while got.answers.len() < requests.len() {
        let next = timeout(BOUND, read_frame(io)).await.unwrap_or_else(|_| {
            panic!("the server neither answered every stream nor closed: {got:?}")
        });
        let Ok(Some(f)) = next else { break };
        match f.kind {
            SETTINGS if f.flags & ACK == 0 => {
                io.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap();
            }
            HEADERS => {
                got.answers
                    .entry(f.stream)
                    .or_insert(Answer::Response(f.status()));
            }
            RST_STREAM => {
                got.answers
                    .entry(f.stream)
                    .or_insert(Answer::Reset(f.error_code()));
            }
            GOAWAY => got.goaway = Some(f.error_code()),
            _ => {}
        }
    }
    got
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[test]
fn h2_over_tls_is_served_and_marked_secure() {
    let server = TestServer::start(Limits::default());
    client_runtime().block_on(async {
        // The client offers h2 and http/1.1, as browsers do: ALPN picks h2.
        // The session as the client saw it: what every request of it carries.
        let suite = |tls: &scb_tls::tokio_rustls::client::TlsStream<TcpStream>| {
            let suite = tls.get_ref().1.negotiated_cipher_suite().unwrap().suite();
            suite.as_str().unwrap().to_owned()
        };
        let config = server.pki.client().build();
        let tls = connect(server.tls, &config, "a.test").await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let cipher = suite(&tls);
        assert!(cipher.starts_with("TLS13_"), "{cipher}");
        let h2 = h2_client(tls).await;
        let (status, version, body) = get(&h2, "https://a.test/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(version, Version::HTTP_2);
        assert_eq!(
            body,
            format!("secure=true version=HTTP/2.0 tls=TLSv1.3/{cipher}")
        );

        // Same listener, a client that speaks only HTTP/1.1, and only TLS 1.2.
        let config = server
            .pki
            .client()
            .tls12_only()
            .alpn(&[b"http/1.1"])
            .build();
        let tls = connect(server.tls, &config, "a.test").await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        let cipher = suite(&tls);
        assert!(cipher.starts_with("TLS_ECDHE_"), "{cipher}");
        let (mut h1, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::get("/")
            .header(http::header::HOST, "a.test")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let res = timeout(BOUND, h1.send_request(req)).await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.version(), Version::HTTP_11);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            body,
            format!("secure=true version=HTTP/1.1 tls=TLSv1.2/{cipher}")
        );

        // The plain listener of the same server: h2c, and not secure.
        let h2c = h2c_client(server.plain).await;
        let (status, version, body) = get(&h2c, "http://t/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(version, Version::HTTP_2);
        assert_eq!(body, "secure=false version=HTTP/2.0 tls=none");
    });
    server.stop();
}

/// Past 256 open connections a worker's idle HTTP/1.1 connections give their buffers back
/// and wait on the socket under the TLS session (`Secured::socket`): every connection's
/// next request must still be answered whole, and a request already in the session when
/// it goes idle too.
#[test]
fn idle_http1_connections_over_tls_on_a_crowded_worker_answer_their_next_requests() {
    let server = TestServer::start(Limits::default());
    let config = server.pki.client().alpn(&[b"http/1.1"]).build();
    client_runtime().block_on(async {
        async fn ask(h1: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>) -> String {
            let req = Request::get("/")
                .header(http::header::HOST, "a.test")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let res = timeout(BOUND, h1.send_request(req)).await.unwrap().unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            let body = res.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8(body.to_vec()).unwrap()
        }
        let mut senders = Vec::new();
        for _ in 0..300 {
            let tls = connect(server.tls, &config, "a.test").await.unwrap();
            let (mut h1, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .unwrap();
            tokio::spawn(conn);
            assert!(
                ask(&mut h1)
                    .await
                    .starts_with("secure=true version=HTTP/1.1 tls=TLSv1.3/")
            );
            senders.push(h1);
        }
        for h1 in &mut senders {
            assert!(
                ask(h1)
                    .await
                    .starts_with("secure=true version=HTTP/1.1 tls=TLSv1.3/")
            );
        }
    });
    server.stop();
}

#[test]
fn many_concurrent_streams_on_one_tls_connection() {
    const REQUESTS: usize = 100;
    let server = TestServer::start(Limits::default());
    client_runtime().block_on(async {
        let config = server.pki.client().build();
        let h2 = h2_client(connect(server.tls, &config, "a.test").await.unwrap()).await;
        let mut requests = tokio::task::JoinSet::new();
        for i in 0..REQUESTS {
            let h2 = h2.clone();
            requests.spawn(async move { (i, get(&h2, &format!("https://a.test/slow/{i}")).await) });
        }
        let mut answered = [false; REQUESTS];
        while let Some(done) = requests.join_next().await {
            let (i, (status, version, body)) = done.unwrap();
            assert_eq!(status, StatusCode::OK, "request {i}");
            assert_eq!(version, Version::HTTP_2, "request {i}");
            assert_eq!(body, format!("slow {i}"));
            answered[i] = true;
        }
        assert!(answered.iter().all(|a| *a));
    });
    // Each request sleeps in the service: had the streams been served one after another
    // (or a few at a time), the peak would be low.
    let peak = server.load.peak.load(Ordering::SeqCst);
    assert!(
        peak > REQUESTS / 2,
        "at most {peak} requests were in the service at once"
    );
    assert_eq!(server.load.now.load(Ordering::SeqCst), 0);
    server.stop();
}

/// Opens `streams` streams on one connection with the `h2` client, resetting each at once
/// (HEADERS then RST_STREAM(CANCEL)), until the server stops it. Returns how many were
/// reset and how the connection ended.
async fn h2_client_storm<I>(io: I, streams: usize) -> (usize, Result<(), h2::Error>)
where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut client, conn) = h2::client::handshake(io).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut reset = 0;
    while reset < streams {
        let ready = timeout(BOUND, poll_fn(|cx| client.poll_ready(cx)))
            .await
            .expect("the h2 client is never ready to open a stream");
        if ready.is_err() {
            break;
        }
        let req = Request::get("https://a.test/").body(()).unwrap();
        let Ok((response, mut stream)) = client.send_request(req, false) else {
            break;
        };
        stream.send_reset(h2::Reason::CANCEL);
        drop(response);
        reset += 1;
        // Let the connection task write what is queued: the frames reach the server while
        // the loop goes on, as from an attacker's socket, instead of all at the end.
        if reset % 10 == 0 {
            tokio::task::yield_now().await;
        }
    }
    // `client` is still alive: a connection that ends now was ended by the server.
    let ended = timeout(BOUND, conn)
        .await
        .unwrap_or_else(|_| panic!("{reset} streams reset, and the server keeps the connection"))
        .unwrap();
    drop(client);
    (reset, ended)
}

/// How a raw rapid-reset storm went.
#[derive(Debug)]
struct RawStorm {
    /// HEADERS + RST_STREAM pairs the socket took before the write failed.
    written: usize,
    write_error: Option<io::Error>,
    /// The server's GOAWAY: last stream id, error code, debug data.
    goaway: Option<(u32, u32, String)>,
}

/// Writes `pairs` HEADERS + RST_STREAM(CANCEL) pairs on one h2c connection, 50 to a write,
/// while reading what the server says. Each HEADERS carries a 200-byte field, as real
/// requests do, so that the whole storm (about 1.2 MB) is far more than the socket
/// buffers hold: a server that keeps reading lets all of it through.
async fn raw_storm(addr: SocketAddr, pairs: usize) -> RawStorm {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(16 * 1024).unwrap();
    let (mut rd, mut wr) = socket.connect(addr).await.unwrap().into_split();
    let reader = tokio::spawn(async move {
        let mut goaway = None;
        loop {
            let next = timeout(BOUND, read_frame(&mut rd))
                .await
                .expect("the server neither answers nor closes the storm connection");
            match next {
                Ok(Some(f)) if f.kind == GOAWAY => {
                    let last = u32::from_be_bytes(f.payload[..4].try_into().unwrap());
                    let debug = String::from_utf8_lossy(&f.payload[8..]).into_owned();
                    goaway = Some((last & 0x7fff_ffff, f.error_code(), debug));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return goaway,
            }
        }
    });
    wr.write_all(&client_hello()).await.unwrap();
    let block = Hpack::get().field("user-agent", &"u".repeat(200));
    let cancel = 0x8u32.to_be_bytes();
    let mut written = 0;
    let mut write_error = None;
    while written < pairs && write_error.is_none() {
        let batch = (pairs - written).min(50);
        let mut out = Vec::new();
        for i in written..written + batch {
            let stream = 1 + 2 * u32::try_from(i).unwrap();
            out.extend(request(stream, &block));
            out.extend(frame(RST_STREAM, 0, stream, &cancel));
        }
        match timeout(BOUND, wr.write_all(&out)).await {
            Ok(Ok(())) => written += batch,
            Ok(Err(e)) => write_error = Some(e),
            Err(_) => panic!("the server stopped reading the storm but kept the connection"),
        }
    }
    let goaway = timeout(BOUND, reader).await.unwrap().unwrap();
    RawStorm {
        written,
        write_error,
        goaway,
    }
}

#[test]
fn rapid_reset_storm_does_not_stop_other_connections() {
    const STORM: usize = 5_000;
    const BYSTANDER_GETS: usize = 20;
    let limits = Limits::default();
    let max_pending = limits.h2_max_pending_reset_streams;
    let server = TestServer::start(limits);
    client_runtime().block_on(async {
        let bystander = h2c_client(server.plain).await;
        assert_eq!(get(&bystander, "http://t/").await.0, StatusCode::OK);

        // The bystander keeps sending GETs, one after another, until both storms are over
        // (and at least 20 of them): each must be answered within BOUND (`get` panics).
        let storms_over = Arc::new(AtomicBool::new(false));
        let over = Arc::clone(&storms_over);
        let served = tokio::spawn(async move {
            let mut gets = 0;
            while gets < BYSTANDER_GETS || !over.load(Ordering::SeqCst) {
                let (status, _, body) = get(&bystander, "http://t/").await;
                assert_eq!(status, StatusCode::OK, "bystander request {gets}");
                assert_eq!(body, "secure=false version=HTTP/2.0 tls=none");
                gets += 1;
            }
            gets
        });

        // A real client library as the attacker, over TLS.
        let config = server.pki.client().alpn(&[b"h2"]).build();
        let tls = connect(server.tls, &config, "a.test").await.unwrap();
        let (reset, ended) = h2_client_storm(tls, STORM).await;
        // Raw frames over h2c: what reached the server is known exactly.
        let raw = raw_storm(server.plain, STORM).await;
        storms_over.store(true, Ordering::SeqCst);
        let gets = timeout(BOUND, served).await.unwrap().unwrap();

        // The h2 client sees the GOAWAY, unless its next write fails first (the server
        // has closed the connection): the error is then a broken pipe or a reset.
        let error = ended.expect_err("the storm connection ended without an error");
        let calmed = error.is_go_away()
            && error.is_remote()
            && error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM);
        let cut = error.get_io().is_some_and(|e| {
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::UnexpectedEof
            )
        });
        assert!(calmed || cut, "h2 client storm ended with {error:?}");
        assert!(
            reset < STORM,
            "all {STORM} resets went out on the h2 client's connection"
        );
        // The client counts what it queued, which is at least what reached the server.
        assert!(
            reset > max_pending,
            "only {reset} resets before the connection ended"
        );

        let (last_stream, code, debug) = raw
            .goaway
            .clone()
            .unwrap_or_else(|| panic!("no GOAWAY for the raw storm: {raw:?}"));
        assert_eq!(code, ENHANCE_YOUR_CALM, "{raw:?}");
        assert!(
            raw.write_error.is_some(),
            "the whole storm was accepted: {raw:?}"
        );
        assert!(raw.written < STORM, "{raw:?}");
        // The server stopped processing streams soon after the allowance ran out, not at the
        // end of the storm.
        let processed = usize::try_from(last_stream / 2 + 1).unwrap();
        assert!(
            processed < STORM / 10,
            "the server processed {processed} streams before GOAWAY({debug})"
        );

        assert!(gets >= BYSTANDER_GETS, "{gets}");
        // And new connections are served as before.
        let after = h2c_client(server.plain).await;
        assert_eq!(get(&after, "http://t/").await.0, StatusCode::OK);
    });
    server.stop();
}

#[test]
fn malformed_h2_requests_get_a_stream_error() {
    let server = TestServer::start(Limits::default());
    // RFC 9113 §8.2.2 (connection-specific fields), §8.3.1 (pseudo-headers).
    let malformed: Vec<(&str, Hpack)> = vec![
        (
            "connection: keep-alive",
            Hpack::get().field("connection", "keep-alive"),
        ),
        ("te: gzip", Hpack::get().field("te", "gzip")),
        (
            "transfer-encoding: chunked",
            Hpack::get().field("transfer-encoding", "chunked"),
        ),
        ("upgrade: h2c", Hpack::get().field("upgrade", "h2c")),
        (
            "keep-alive: 5",
            Hpack::get().field("keep-alive", "timeout=5"),
        ),
        (
            "proxy-connection: keep-alive",
            Hpack::get().field("proxy-connection", "keep-alive"),
        ),
        (
            "missing :path",
            Hpack::default()
                .indexed(METHOD_GET)
                .indexed(SCHEME_HTTP)
                .name_indexed(AUTHORITY, "t"),
        ),
        (
            "empty :path",
            Hpack::default()
                .indexed(METHOD_GET)
                .indexed(SCHEME_HTTP)
                .name_indexed(PATH_ROOT, "")
                .name_indexed(AUTHORITY, "t"),
        ),
        (
            "missing :method",
            Hpack::default()
                .indexed(SCHEME_HTTP)
                .indexed(PATH_ROOT)
                .name_indexed(AUTHORITY, "t"),
        ),
        (
            "missing :scheme",
            Hpack::default()
                .indexed(METHOD_GET)
                .indexed(PATH_ROOT)
                .name_indexed(AUTHORITY, "t"),
        ),
        ("repeated :path", Hpack::get().indexed(PATH_ROOT)),
        (
            "pseudo-header after a regular field",
            Hpack::default()
                .indexed(METHOD_GET)
                .indexed(SCHEME_HTTP)
                .field("x-a", "b")
                .indexed(PATH_ROOT),
        ),
        (
            ":status in a request",
            Hpack::get().name_indexed(STATUS, "200"),
        ),
    ];
    client_runtime().block_on(async {
        // Stream 1 and the last stream are valid (`te: trailers` is the one TE allowed),
        // around the malformed ones: the connection outlives their errors.
        let valid = Hpack::get().field("te", "trailers");
        let mut requests = vec![(1, valid.clone())];
        for (i, (_, block)) in malformed.iter().enumerate() {
            requests.push((3 + 2 * u32::try_from(i).unwrap(), block.clone()));
        }
        let last = 3 + 2 * u32::try_from(malformed.len()).unwrap();
        requests.push((last, valid));

        let mut tcp = TcpStream::connect(server.plain).await.unwrap();
        let got = exchange(&mut tcp, &requests).await;
        assert_eq!(got.goaway, None, "{got:?}");
        assert_eq!(got.answers.get(&1), Some(&Answer::Response(Some(200))));
        assert_eq!(got.answers.get(&last), Some(&Answer::Response(Some(200))));
        for ((stream, _), (what, _)) in requests[1..].iter().zip(&malformed) {
            assert_eq!(
                got.answers.get(stream),
                Some(&Answer::Reset(PROTOCOL_ERROR)),
                "{what} (stream {stream})"
            );
        }
        drop(tcp);

        // An uppercase field name (§8.2.1) is malformed too. h2 finds it while decoding
        // HPACK, a connection-wide state, and so ends the whole connection (§5.4.1 lets
        // a stream error be treated as a connection error); a stream error would do too.
        let mut tcp = TcpStream::connect(server.plain).await.unwrap();
        let got = exchange(&mut tcp, &[(1, Hpack::get().field("X-Upper", "1"))]).await;
        let answer = got.answers.get(&1).copied();
        assert!(
            answer == Some(Answer::Reset(PROTOCOL_ERROR))
                || (answer.is_none() && got.goaway == Some(PROTOCOL_ERROR)),
            "uppercase field name: {got:?}"
        );
        drop(tcp);

        // Later connections are served as before.
        let after = h2c_client(server.plain).await;
        assert_eq!(get(&after, "http://t/").await.0, StatusCode::OK);
    });
    server.stop();
}

#[test]
fn continuation_flood_is_cut_off() {
    const FRAMES: usize = 2_000;
    const CUT_OFF_BEFORE: usize = 1024 * 1024;
    let server = TestServer::start(Limits::default());
    client_runtime().block_on(async {
        // A small send buffer, so that what counts as written is what the server's socket
        // accepted, give or take its receive buffer, not a few MiB the kernel sat on.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(16 * 1024).unwrap();
        let (mut rd, mut wr) = socket.connect(server.plain).await.unwrap().into_split();

        let reader = tokio::spawn(async move {
            let mut goaway = None;
            loop {
                let next = timeout(BOUND, read_frame(&mut rd))
                    .await
                    .expect("the server neither answers nor closes the flooding connection");
                match next {
                    Ok(Some(f)) if f.kind == GOAWAY => goaway = Some(f.error_code()),
                    Ok(Some(_)) => {}
                    Ok(None) => return (goaway, "end of stream".to_owned()),
                    Err(e) => return (goaway, e.to_string()),
                }
            }
        });

        let mut start = client_hello();
        // A request whose header block never ends: END_STREAM without END_HEADERS.
        start.extend(frame(HEADERS, END_STREAM, 1, &Hpack::get().0));
        wr.write_all(&start).await.unwrap();
        let value = "v".repeat(1000);
        let mut written = 0;
        let mut refused = None;
        for i in 0..FRAMES {
            let block = Hpack::default().field(&format!("x-flood-{i}"), &value);
            let f = frame(CONTINUATION, 0, 1, &block.0);
            match timeout(BOUND, wr.write_all(&f)).await {
                Ok(Ok(())) => written += f.len(),
                Ok(Err(e)) => {
                    refused = Some(e);
                    break;
                }
                Err(_) => panic!("the server stopped reading but kept the connection open"),
            }
        }
        let (goaway, end) = timeout(BOUND, reader).await.unwrap().unwrap();
        let refused = refused.unwrap_or_else(|| {
            panic!("all {FRAMES} CONTINUATION frames ({written} bytes) were accepted")
        });
        assert!(
            written < CUT_OFF_BEFORE,
            "{written} bytes of header block accepted before the cut-off"
        );
        // The GOAWAY may be lost: the server closes with our unread frames in its buffer,
        // which resets the connection, and a reset can discard what we had not read yet.
        assert!(
            goaway.is_none_or(|code| code == ENHANCE_YOUR_CALM),
            "GOAWAY({goaway:?}), write error {refused}, read end {end}"
        );
        drop(wr);

        let after = h2c_client(server.plain).await;
        assert_eq!(get(&after, "http://t/").await.0, StatusCode::OK);
    });
    server.stop();
}

/// What the flooding connection saw come back.
#[derive(Debug, Default)]
struct FloodReplies {
    ping_acks: usize,
    settings_acks: usize,
    goaway: Option<u32>,
    /// How the connection ended, if the server ended it.
    closed: Option<String>,
}

#[test]
fn settings_and_ping_floods_do_not_stop_other_connections() {
    const PINGS: usize = 10_000;
    const SETTINGS_FRAMES: usize = 2_000;
    let server = TestServer::start(Limits::default());
    let replies = client_runtime().block_on(async {
        let bystander = h2c_client(server.plain).await;
        assert_eq!(get(&bystander, "http://t/").await.0, StatusCode::OK);

        let (mut rd, mut wr) = TcpStream::connect(server.plain).await.unwrap().into_split();
        // The preface's SETTINGS, then a SETTINGS frame after every fifth PING.
        let mut burst = client_hello();
        for i in 0..PINGS {
            burst.extend(frame(PING, 0, 0, &u64::try_from(i).unwrap().to_be_bytes()));
            if i % (PINGS / SETTINGS_FRAMES) == 0 {
                burst.extend(frame(SETTINGS, 0, 0, &[]));
            }
        }
        let reader = tokio::spawn(async move {
            let mut seen = FloodReplies::default();
            while seen.ping_acks < PINGS || seen.settings_acks < SETTINGS_FRAMES + 1 {
                let next = timeout(BOUND, read_frame(&mut rd))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("the flood was neither answered nor cut off: {seen:?}")
                    });
                match next {
                    Ok(Some(f)) => match f.kind {
                        PING if f.flags & ACK != 0 => seen.ping_acks += 1,
                        SETTINGS if f.flags & ACK != 0 => seen.settings_acks += 1,
                        GOAWAY => seen.goaway = Some(f.error_code()),
                        _ => {}
                    },
                    Ok(None) => {
                        seen.closed = Some("end of stream".to_owned());
                        break;
                    }
                    Err(e) => {
                        seen.closed = Some(e.to_string());
                        break;
                    }
                }
            }
            seen
        });
        let flood = tokio::spawn(async move {
            let written = timeout(BOUND, wr.write_all(&burst)).await;
            // The write half is kept, so that the server sees no end of stream.
            (written, wr)
        });

        // While the flood is going on (or right after it, on a fast machine).
        for i in 0..5 {
            let (status, _, _) = get(&bystander, "http://t/").await;
            assert_eq!(status, StatusCode::OK, "bystander request {i}");
        }
        let (written, wr) = flood.await.unwrap();
        let replies = reader.await.unwrap();
        drop(wr);
        // A connection opened afterwards too.
        let after = h2c_client(server.plain).await;
        assert_eq!(get(&after, "http://t/").await.0, StatusCode::OK);
        // The burst either went through or the server cut the connection mid-way.
        assert!(
            matches!(written, Ok(Ok(()))) || replies.closed.is_some(),
            "the burst stalled: {written:?}, {replies:?}"
        );
        replies
    });
    server.stop();
    // h2 answers each PING and SETTINGS before reading the next frame, so the flood is
    // paced by the flooder reading its ACKs and never queues up on the server. A server
    // that cuts such a connection off instead must say why.
    let answered_all = replies.ping_acks == PINGS && replies.settings_acks == SETTINGS_FRAMES + 1;
    let cut_off = replies.closed.is_some() && replies.goaway == Some(ENHANCE_YOUR_CALM);
    assert!(answered_all || cut_off, "{replies:?}");
}

/// The first SETTINGS frame of the server on `io`, and the increment of its first
/// connection-level WINDOW_UPDATE.
async fn server_settings<S>(mut io: S) -> (HashMap<u16, u32>, u32)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(&client_hello()).await.unwrap();
    let mut settings = None;
    let mut window_update = None;
    while settings.is_none() || window_update.is_none() {
        let f = timeout(BOUND, read_frame(&mut io))
            .await
            .expect("no SETTINGS and WINDOW_UPDATE from the server")
            .unwrap()
            .expect("the server closed the connection");
        match f.kind {
            SETTINGS if f.flags & ACK == 0 && settings.is_none() => {
                settings = Some(f.settings());
            }
            WINDOW_UPDATE if f.stream == 0 && window_update.is_none() => {
                window_update =
                    Some(u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff);
            }
            _ => {}
        }
    }
    (settings.unwrap(), window_update.unwrap())
}

#[test]
fn h2_limits_are_advertised() {
    // None of these is a default, so each can only come from these limits.
    let mut limits = Limits::default();
    limits.h2_max_concurrent_streams = 77;
    limits.h2_stream_window = 300_000;
    limits.h2_connection_window = 1_000_000;
    limits.max_header_bytes = 12_345;
    assert_ne!(limits, Limits::default());
    let server = TestServer::start(limits.clone());
    let seen = client_runtime().block_on(async {
        let h2c = server_settings(TcpStream::connect(server.plain).await.unwrap()).await;
        let config = server.pki.client().alpn(&[b"h2"]).build();
        let tls = server_settings(connect(server.tls, &config, "a.test").await.unwrap()).await;
        [("h2c", h2c), ("h2 over TLS", tls)]
    });
    server.stop();
    for (listener, (settings, window_update)) in seen {
        assert_eq!(
            settings.get(&SETTINGS_MAX_CONCURRENT_STREAMS),
            Some(&limits.h2_max_concurrent_streams),
            "{listener}: {settings:?}"
        );
        assert_eq!(
            settings.get(&SETTINGS_INITIAL_WINDOW_SIZE),
            Some(&limits.h2_stream_window),
            "{listener}: {settings:?}"
        );
        assert_eq!(
            settings.get(&SETTINGS_MAX_HEADER_LIST_SIZE),
            Some(&u32::try_from(limits.max_header_bytes).unwrap()),
            "{listener}: {settings:?}"
        );
        // The connection window is not a setting: it grows from 65,535 by WINDOW_UPDATE.
        assert_eq!(
            window_update,
            limits.h2_connection_window - DEFAULT_WINDOW,
            "{listener}"
        );
    }
}
