//! Upstreams for the proxy tests (well-behaved hyper servers and misbehaving raw TCP
//! listeners), a raw HTTP/1.1 client, and the proxy run behind scb's own server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use scb_core::request_id::RequestIdLayer;
use scb_core::server::{ConnectInfo, Server, ServerHandle};
use scb_core::{Body, BoxError};
use scb_proxy::ReverseProxy;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::{ServiceBuilder, ServiceExt as _};

/// The longest any single wait in a test may take before the test fails instead of
/// hanging: far above every timeout the tests configure.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// `len` bytes of a deterministic pseudo-random pattern (xorshift64*): a body that shifts,
/// drops or repeats any run of bytes no longer compares equal.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Polls `cond` every few milliseconds until it holds; panics with `what` after [`WAIT`].
pub(crate) async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A loopback port with nothing listening on it (bound, then closed).
pub(crate) fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

pub(crate) fn upstream(addr: SocketAddr) -> scb_proxy::Upstream {
    scb_proxy::Upstream::new(&addr.to_string()).unwrap()
}

/// A loopback address where connecting hangs: a listener that never accepts, with its
/// accept queue filled. Linux drops SYNs to a listener whose queue is full (unless
/// `tcp_abort_on_overflow` is set), so the next connect waits for the SYN to be retried.
#[derive(Debug)]
pub(crate) struct Blackhole {
    pub(crate) addr: SocketAddr,
    _listener: socket2::Socket,
    _queued: Vec<TcpStream>,
}

impl Blackhole {
    pub(crate) async fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        listener.bind(&any.into()).unwrap();
        listener.listen(0).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let mut queued = Vec::new();
        // Connect until one hangs: a loopback handshake with room in the queue takes
        // microseconds, so 250 ms without one means the queue is full.
        for _ in 0..64 {
            match tokio::time::timeout(Duration::from_millis(250), TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => queued.push(stream),
                Ok(Err(e)) => panic!("connecting to the blackhole failed: {e}"),
                Err(_) => {
                    return Self {
                        addr,
                        _listener: listener,
                        _queued: queued,
                    };
                }
            }
        }
        panic!("the accept queue never filled: SYNs are not dropped here");
    }
}

/// A listening task, aborted when this is dropped.
#[derive(Debug)]
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A raw TCP upstream: every accepted connection goes to the handler with its index
/// (0, 1, ...), so the handler can misbehave at the byte level.
#[derive(Debug)]
pub(crate) struct RawUpstream {
    pub(crate) addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    _task: Task,
}

impl RawUpstream {
    pub(crate) async fn spawn<F, Fut>(handler: F) -> Self
    where
        F: Fn(TcpStream, usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self::spawn_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), handler)
    }

    pub(crate) fn spawn_on<F, Fut>(listener: TcpListener, handler: F) -> Self
    where
        F: Fn(TcpStream, usize) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let index = count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(handler(stream, index));
            }
        });
        Self {
            addr,
            accepted,
            _task: Task(task),
        }
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// An upstream that reads each request head, answers `bytes` whatever they are, and
    /// reads on until the proxy closes.
    pub(crate) async fn replying(bytes: &'static [u8]) -> Self {
        Self::spawn(move |mut s, _| async move {
            let mut buf = Vec::new();
            if read_head(&mut s, &mut buf).await.is_some() {
                let _ = s.write_all(bytes).await;
                drain_to_eof(&mut s, &mut buf).await;
            }
        })
        .await
    }

    /// An upstream that accepts and reads, and never answers.
    pub(crate) async fn silent() -> Self {
        Self::spawn(|mut s, _| async move {
            let mut buf = Vec::new();
            drain_to_eof(&mut s, &mut buf).await;
        })
        .await
    }
}

/// Reads one request or response head (through the blank line) from `stream`, leaving
/// what follows it in `buf`. `None` if the peer closed (or broke) first.
pub(crate) async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).into_owned();
            buf.drain(..i + 4);
            return Some(head);
        }
        if !read_more(stream, buf).await {
            return None;
        }
    }
}

/// Reads whatever is available into `buf` (on the heap: a stack buffer would make every
/// future awaiting this one as large); false at EOF or on an error.
pub(crate) async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.reserve(64 * 1024);
    matches!(stream.read_buf(buf).await, Ok(n) if n > 0)
}

/// Reads until `buf` holds at least `len` bytes; false if the peer closed first.
pub(crate) async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, len: usize) -> bool {
    while buf.len() < len {
        if !read_more(stream, buf).await {
            return false;
        }
    }
    true
}

/// Reads until the peer closes, keeping everything in `buf`.
pub(crate) async fn drain_to_eof(stream: &mut TcpStream, buf: &mut Vec<u8>) {
    while read_more(stream, buf).await {}
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The value of field `name` in a raw head, case-insensitively; the first one.
pub(crate) fn head_field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head_fields(head, name).next()
}

/// Every value of field `name` in a raw head, case-insensitively.
pub(crate) fn head_fields<'a>(head: &'a str, name: &str) -> impl Iterator<Item = &'a str> {
    let name = name.to_owned();
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(move |(n, _)| n.trim().eq_ignore_ascii_case(&name))
        .map(|(_, v)| v.trim())
}

/// A raw upstream that answers every request on every connection with its own request
/// head as the body (what the proxy put on the wire), kept alive. Request bodies are not
/// read: use it for bodiless requests.
pub(crate) async fn head_echo() -> RawUpstream {
    RawUpstream::spawn(|mut stream, _| async move {
        let mut buf = Vec::new();
        while let Some(head) = read_head(&mut stream, &mut buf).await {
            let res = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{head}",
                head.len()
            );
            if stream.write_all(res.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await
}

/// A well-behaved upstream: hyper's HTTP/1.1 server running `handler` on every request.
/// Dropped, it stops listening and closes its connections.
#[derive(Debug)]
pub(crate) struct HttpUpstream {
    pub(crate) addr: SocketAddr,
    _task: Task,
}

impl HttpUpstream {
    pub(crate) async fn spawn<F, Fut>(handler: F) -> Self
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        Self::spawn_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), handler)
    }

    pub(crate) fn spawn_on<F, Fut>(listener: TcpListener, handler: F) -> Self
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            // The connections live in the accept task's set: dropping the upstream (which
            // aborts that task) closes every one of them, as a process that dies would.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                while connections.try_join_next().is_some() {}
                let handler = handler.clone();
                connections.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let fut = handler(req);
                        async move { Ok::<_, Infallible>(fut.await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            _task: Task(task),
        }
    }
}

/// An upstream that answers every request with `name` and counts them.
#[derive(Debug)]
pub(crate) struct Named {
    pub(crate) addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    _server: HttpUpstream,
}

impl Named {
    pub(crate) async fn spawn(name: &'static str) -> Self {
        Self::spawn_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), name)
    }

    pub(crate) fn spawn_on(listener: TcpListener, name: &'static str) -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&hits);
        let server = HttpUpstream::spawn_on(listener, move |_req| {
            count.fetch_add(1, Ordering::SeqCst);
            async move { Response::new(Body::from(name)) }
        });
        Self {
            addr: server.addr,
            hits,
            _server: server,
        }
    }

    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// What the proxy answered to a request sent straight into the service.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    /// The whole body, or the error that ended it.
    pub(crate) body: Result<Bytes, BoxError>,
}

impl Answer {
    pub(crate) fn text(&self) -> String {
        match &self.body {
            Ok(body) => String::from_utf8_lossy(body).into_owned(),
            Err(e) => panic!("body failed: {e}"),
        }
    }
}

/// Sends `req` into the proxy (`oneshot`) and collects the whole answer, bounded by [`WAIT`].
pub(crate) async fn send<B>(proxy: &ReverseProxy, req: Request<B>) -> Answer
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    tokio::time::timeout(WAIT, async {
        let res = proxy.clone().oneshot(req).await.unwrap();
        let (parts, body) = res.into_parts();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: body
                .collect()
                .await
                .map(http_body_util::Collected::to_bytes),
        }
    })
    .await
    .expect("the proxy did not answer in time")
}

/// A bodiless request for `path` with `Host: example.test`, as if from `client`.
pub(crate) fn get_from(path: &str, client: SocketAddr) -> Request<Body> {
    let mut req = Request::get(path)
        .header("host", "example.test")
        .body(Body::empty())
        .unwrap();
    req.extensions_mut().insert(ConnectInfo {
        remote: client,
        local: "127.0.0.1:80".parse().unwrap(),
        secure: false,
    });
    req
}

pub(crate) fn get(path: &str) -> Request<Body> {
    get_from(path, "192.0.2.10:50000".parse().unwrap())
}

/// `GET path` through the proxy; the answer's body must be whole.
pub(crate) async fn fetch(proxy: &ReverseProxy, path: &str) -> (StatusCode, String) {
    let answer = send(proxy, get(path)).await;
    let text = answer.text();
    (answer.status, text)
}

/// The proxy behind scb's own server (one worker, `RequestIdLayer` outside), as the `scb`
/// binary runs it.
#[derive(Debug)]
pub(crate) struct ProxyServer {
    pub(crate) addr: SocketAddr,
    handle: ServerHandle,
}

impl ProxyServer {
    pub(crate) fn start(proxy: &ReverseProxy) -> Self {
        Self::start_with_limits(proxy, scb_core::server::Limits::default())
    }

    /// [`start`](Self::start) with the server's own `limits`.
    pub(crate) fn start_with_limits(
        proxy: &ReverseProxy,
        limits: scb_core::server::Limits,
    ) -> Self {
        let proxy = proxy.clone();
        let bound = Server::builder()
            .workers(1)
            .limits(limits)
            .grace_period(Duration::from_millis(200))
            .listen("127.0.0.1:0".parse().unwrap())
            .bind()
            .unwrap();
        let addr = bound.local_addrs()[0];
        let handle = bound.start(move |_worker| {
            ServiceBuilder::new()
                .layer(RequestIdLayer::new())
                .service(proxy.with_own_pool())
        });
        Self { addr, handle }
    }

    pub(crate) async fn connect(&self) -> Client {
        Client {
            stream: TcpStream::connect(self.addr).await.unwrap(),
            buf: Vec::new(),
        }
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        // Not joined: the workers end on their own within the grace period, and joining
        // would block a thread of the test's runtime, which the upstreams run on.
        self.handle.shutdown();
    }
}

/// One response read off a raw client connection.
#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

impl Resp {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        head_field(&self.head, name)
    }
}

/// How a response read off a raw connection ended.
#[derive(Debug)]
pub(crate) enum Read {
    /// A whole, correctly framed response.
    Complete(Resp),
    /// The connection closed (or broke) after `.0` but before the response was whole.
    Truncated(Option<Resp>),
}

/// A raw HTTP/1.1 client connection to the proxy server.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) stream: TcpStream,
    pub(crate) buf: Vec<u8>,
}

impl Client {
    pub(crate) async fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).await.unwrap();
    }

    /// Writes `raw` from a task of its own, so that the response can be read while a large
    /// request is still going out; the task's result says whether all of it was written.
    pub(crate) fn send_in_background(&self, raw: Vec<u8>) -> JoinHandle<std::io::Result<()>> {
        let dup = socket2::SockRef::from(&self.stream).try_clone().unwrap();
        let mut writer = TcpStream::from_std(std::net::TcpStream::from(dup)).unwrap();
        tokio::spawn(async move { writer.write_all(&raw).await })
    }

    /// The next response head; panics if the connection ends first or after [`WAIT`].
    pub(crate) async fn head(&mut self) -> Resp {
        let head = tokio::time::timeout(WAIT, read_head(&mut self.stream, &mut self.buf))
            .await
            .expect("no response head in time")
            .expect("connection closed before a response head");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        Resp {
            status,
            head,
            body: Vec::new(),
        }
    }

    /// Reads until the bytes after the head contain `needle`; false if the connection ends
    /// first. Panics after [`WAIT`].
    pub(crate) async fn read_until(&mut self, needle: &[u8]) -> bool {
        tokio::time::timeout(WAIT, async {
            loop {
                if find(&self.buf, needle).is_some() {
                    return true;
                }
                if !read_more(&mut self.stream, &mut self.buf).await {
                    return false;
                }
            }
        })
        .await
        .expect("the awaited bytes did not come in time")
    }

    /// The next response, whole or truncated; panics after [`WAIT`].
    pub(crate) async fn response(&mut self) -> Read {
        let Ok(Some(head)) =
            tokio::time::timeout(WAIT, read_head(&mut self.stream, &mut self.buf)).await
        else {
            return Read::Truncated(None);
        };
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let mut resp = Resp {
            status,
            head,
            body: Vec::new(),
        };
        let read = tokio::time::timeout(WAIT, self.body(&mut resp)).await;
        match read {
            Ok(true) => Read::Complete(resp),
            Ok(false) => Read::Truncated(Some(resp)),
            Err(_) => panic!("response body did not end in time: {}", resp.head),
        }
    }

    /// A response that must be complete.
    pub(crate) async fn complete(&mut self) -> Resp {
        match self.response().await {
            Read::Complete(resp) => resp,
            Read::Truncated(resp) => panic!("truncated response: {resp:?}"),
        }
    }

    /// Reads the body framed as `resp`'s head says; false when the connection ended or the
    /// framing broke before its end.
    async fn body(&mut self, resp: &mut Resp) -> bool {
        if resp.status == 204 || resp.status == 304 || (100..200).contains(&resp.status) {
            return true;
        }
        if let Some(len) = resp.header("content-length") {
            let len: usize = len.parse().expect("a numeric Content-Length");
            if !fill(&mut self.stream, &mut self.buf, len).await {
                resp.body = std::mem::take(&mut self.buf);
                return false;
            }
            resp.body = self.buf.drain(..len).collect();
            return true;
        }
        if resp
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf, b"\r\n") {
                        break i;
                    }
                    let want = self.buf.len() + 1;
                    if !fill(&mut self.stream, &mut self.buf, want).await {
                        return false;
                    }
                };
                let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                else {
                    return false;
                };
                self.buf.drain(..line_end + 2);
                if size == 0 {
                    // Trailers, then the blank line.
                    loop {
                        let Some(i) = find(&self.buf, b"\r\n") else {
                            let want = self.buf.len() + 1;
                            if !fill(&mut self.stream, &mut self.buf, want).await {
                                return false;
                            }
                            continue;
                        };
                        self.buf.drain(..i + 2);
                        if i == 0 {
                            return true;
                        }
                    }
                }
                if !fill(&mut self.stream, &mut self.buf, size + 2).await {
                    return false;
                }
                resp.body.extend(self.buf.drain(..size));
                if self.buf.drain(..2).as_slice() != b"\r\n" {
                    return false;
                }
            }
        }
        // Close-delimited: complete only at a clean EOF, which a raw reader cannot tell
        // from a reset after the last byte; treat it as complete.
        drain_to_eof(&mut self.stream, &mut self.buf).await;
        resp.body = std::mem::take(&mut self.buf);
        true
    }

    /// True once the server has closed the connection (EOF or reset), reading and
    /// discarding anything before that; panics after [`WAIT`].
    pub(crate) async fn closed(&mut self) -> bool {
        tokio::time::timeout(WAIT, async {
            let mut sink = Vec::new();
            loop {
                sink.clear();
                if !read_more(&mut self.stream, &mut sink).await {
                    return true;
                }
            }
        })
        .await
        .expect("the server did not close the connection in time")
    }
}
